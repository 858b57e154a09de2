"""``super-marl``: the command line (typer).

Modern flags (``--num-timesteps``) and the paper's main.py spellings (``--num_timesteps``,
``--suPER True``, ``--parameter_sharing=true``, ``--use_gpu 0``, ``--env pursuit_plaindqn``) both work:
``translate_paper_args`` rewrites the paper's spellings into modern flags before typer parses them.
Heavy modules (torch, the trainers) are imported lazily so ``--help`` and input errors are instant.

Bad input exits with code 2 and a one-line ``error: <flag>: expected ..., got ...`` message.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from suPER import config as C
from suPER.algorithms import ALGORITHMS, BACKENDS, algos_help
from suPER.core.selection import modes_help, rule_params
from suPER.resolve import resolve

_RULE_PARAMS_HELP = ", ".join(f"relay.params.{p.name} ({p.help})" for p in rule_params()) or "none"
"""The registered selection rules' own parameters, for ``--super-mode``'s help."""

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="SUPER: selective experience relay for multi-agent DQN (NeurIPS 2023), rebuilt.")


class UserError(Exception):
    """Bad input: printed as one line, exit code 2."""


# --------------------------------------------------------------------------------------------------
# the paper's main.py spellings

PAPER_RENAMES = {
    "--num_timesteps": "--num-timesteps", "--num_seeds": "--num-seeds", "--buffer_size": "--buffer-size",
    "--suPER_mode": "--super-mode", "--suPER_bandwidth": "--bandwidth", "--suPER_window": "--window",
    "--team_sharing": "--team", "--suPER_insertion_priority": "--insertion-priority",
    "--experiment_group": "--wandb-group", "--experiment_project": "--wandb-project",
    "--eval_interval": "--eval-interval", "--eval_episodes": "--eval-episodes",
}
"""Paper flag -> modern flag, same value."""

PAPER_SETTINGS = {
    "--horizon": "env.horizon", "--rollout_fragment_length": "dqn.rollout_fragment_length",
    "--train_batch_size": "dqn.batch_size", "--exploration_initial_epsilon": "dqn.epsilon_initial",
    "--exploration_final_epsilon": "dqn.epsilon_final", "--env_pursuit_n_evaders": "env.kwargs.n_evaders",
    "--env_pursuit_num_agents": "env.kwargs.n_pursuers", "--env_pursuit_shared_reward": "env.kwargs.shared_reward",
    "--env_battle_map_size": "env.kwargs.map_size", "--env_adversarial_pursuit_map_size": "env.kwargs.map_size",
}
"""Paper flag -> dotted config key (passed as ``--set key=value``)."""

PAPER_IGNORED = {
    "--ray_plain_init": 0, "--ray_local_mode": 0, "--num_cpus": 1, "--framework": 1,
    "--ray_address": 1, "--suPER_insertion_method": 1, "--suPER_td_error_method": 1,
    "--suPER_broadcast_heuristic": 1, "--evaluation": 1, "--experiment_name": 1, "--fully_connected": 1,
    "--parameter_tunning": 1, "--config_file": 1,
}
"""Paper flags with no meaning for the native trainer -> number of values they take (accepted, noted)."""

TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no")


def paper_bool(flag: str, text: str) -> bool:
    """The value of a paper boolean flag (``--suPER True``): only true/false, 1/0, yes/no in any case.

    Why strict: the original took every other word as false, so ``--suPER Ture`` trained plain DQN.
    """
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise UserError(f"{flag}: expected true/false, 1/0 or yes/no, got {text!r}")


def translate_paper_args(argv: list[str], typed: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Rewrite the paper's main.py flags into this CLI's flags.

    Args:
        argv: the command line as typed.
        typed: filled with what each rewritten flag was typed as (``"--bandwidth" -> "--suPER_bandwidth"``,
            ``"--set env.horizon" -> "--horizon"``), so errors can name the flag the user wrote.

    Returns:
        (new argv, notes for flags that were accepted but have no effect here).
    """
    out: list[str] = []
    notes: list[str] = []
    typed = {} if typed is None else typed
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")

        def value(flag: str = flag, eq: str = eq, inline: str = inline) -> str:
            nonlocal i
            if eq:
                return inline
            if i + 1 >= len(argv):
                raise UserError(f"{flag}: expected a value")
            i += 1
            return argv[i]

        if flag == "--suPER":
            out.append("--super" if paper_bool(flag, value()) else "--no-super")
            typed["--super"] = flag
        elif flag == "--parameter_sharing":
            out.append("--parameter-sharing" if paper_bool(flag, value()) else "--no-parameter-sharing")
            typed["--parameter-sharing"] = flag
        elif flag == "--use_gpu":
            v = value()
            typed["--device"] = flag
            try:
                out += ["--device", "cuda" if float(v) > 0 else "cpu"]
            except ValueError as exc:
                raise UserError(f"--use_gpu: expected a number, got {v!r}") from exc
        elif flag == "--env":
            v = value()
            for spec in ALGORITHMS.values():  # the paper's --env pursuit_plaindqn = --env pursuit --algo dqn
                if spec.paper_suffix and v.endswith(spec.paper_suffix):
                    v = v[: -len(spec.paper_suffix)]
                    out += ["--algo", spec.name]
            out += ["--env", v]
        elif flag == "--batch_size":  # the paper set both the train batch and the fragment length
            v = value()
            out += ["--set", f"dqn.batch_size={v}", "--set", f"dqn.rollout_fragment_length={v}"]
            typed.update({"--set dqn.batch_size": flag, "--set dqn.rollout_fragment_length": flag})
        elif flag == "--battle_advpursuit_against_pretrained":
            out += ["--opponent", "pretrained"]
        elif flag == "--eval_in_parallel":  # the original's evaluation parallel to training
            out.append("--eval-parallel")
            typed["--eval-parallel"] = flag
        elif flag in PAPER_RENAMES:
            out += [PAPER_RENAMES[flag], value()]
            typed[PAPER_RENAMES[flag]] = flag
        elif flag in PAPER_SETTINGS:
            out += ["--set", f"{PAPER_SETTINGS[flag]}={value()}"]
            typed[f"--set {PAPER_SETTINGS[flag]}"] = flag
        elif flag in PAPER_IGNORED:
            if PAPER_IGNORED[flag] and not eq:
                i += 1
            notes.append(f"note: {flag} has no effect with the native trainer (ignored)")
        else:
            out.append(arg)
        i += 1
    return out, notes


# --------------------------------------------------------------------------------------------------
# train


def _set_pairs(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs:
        key, eq, val = p.partition("=")
        if not eq or not key:
            raise UserError(f"--set: expected section.key=value, got {p!r}")
        out[key.strip()] = C.parse_value(val)
    return out


@app.command()
def train(
    env: Annotated[str, typer.Option(help=" | ".join(C.ENV_NAMES))] = "pursuit",
    algo: Annotated[str, typer.Option(help=algos_help())] = "ddqn",
    num_timesteps: Annotated[int | None, typer.Option("--num-timesteps", help="env steps to train")] = None,
    seed: Annotated[int, typer.Option(help="run seed; env seed = seed + 100")] = 1,
    num_seeds: Annotated[int, typer.Option("--num-seeds", help="run seeds seed .. seed+num_seeds-1")] = 1,
    parameter_sharing: Annotated[bool, typer.Option("--parameter-sharing/--no-parameter-sharing",
                                                    help="one network for the whole learning team")] = False,
    lr: Annotated[float | None, typer.Option(help="learning rate")] = None,
    buffer_size: Annotated[int | None, typer.Option("--buffer-size", help="replay capacity per agent")] = None,
    eval_interval: Annotated[int | None, typer.Option("--eval-interval", help="env steps between evaluations")] = None,
    eval_episodes: Annotated[int | None, typer.Option("--eval-episodes", help="greedy episodes per evaluation")] = None,
    eval_parallel: Annotated[bool | None, typer.Option(
        "--eval-parallel/--no-eval-parallel", help="evaluate in a forked process while training goes on (one more "
        "core; same rows; paper: --eval_in_parallel)")] = None,
    super_: Annotated[bool, typer.Option("--super/--no-super", help="SUPER relay (paper: --suPER True); --super-mode, "
                                         "--bandwidth, --window and --team need it")] = False,
    super_mode: Annotated[str | None, typer.Option("--super-mode", help=f"selection rule: {modes_help()} (rule parameters: --set relay.params.<param>, e.g. {_RULE_PARAMS_HELP})")] = None,
    bandwidth: Annotated[float | None, typer.Option(help="fraction of fresh transitions relayed, in [0, 1]")] = None,
    window: Annotated[int | None, typer.Option(help="|TD| window length for quantile/gaussian")] = None,
    team: Annotated[str | None, typer.Option(help="who relays: id substring or comma list (paper: --team_sharing)")] = None,
    insertion_priority: Annotated[str | None, typer.Option("--insertion-priority", help="max | sender | legacy")] = None,
    legacy: Annotated[bool, typer.Option(help="the paper protocol for this run: every documented deviation restored "
                                               "to the original (= --protocol paper; docs/decisions.md)")] = False,
    protocol: Annotated[str | None, typer.Option(help="ours (default: this suite's corrected defaults) | paper "
                                                      "(the original's behaviour; run folder name gets __paper)")] = None,
    opponent: Annotated[str | None, typer.Option(help="battle/adversarial_pursuit opponent team: pretrained "
                                                      "(default) | random | learning (self-play) | PATH (.safetensors team or .mixture.json)")] = None,
    opponent_epsilon: Annotated[float | None, typer.Option("--opponent-epsilon", help="epsilon-greedy exploration "
                                                           "of a network opponent in training (default 0: greedy)")] = None,
    eval_opponent_epsilon: Annotated[float | None, typer.Option("--eval-opponent-epsilon", help="the same in "
                                     "evaluation (default 0: greedy, as the paper; 0.05 varies battle's games)")] = None,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="accept an opponent PATH in the original's "
                                               "pickle format (unpickling runs code from the file)")] = False,
    model: Annotated[str | None, typer.Option(help="conv (paper) | mlp")] = None,
    quick: Annotated[bool, typer.Option(help="a short budget that finishes in minutes (profiles: quick: of the env YAML)")] = False,
    out: Annotated[Path, typer.Option(help="parent folder for run folders")] = Path("runs"),
    tag: Annotated[str, typer.Option(help="label appended to the run name")] = "",
    skip_finished: Annotated[bool, typer.Option("--skip-finished", help="exit 0 when the run folder already holds "
                                                "a finished run (resubmitted grids)")] = False,
    overwrite: Annotated[bool, typer.Option(help="start over in a folder that holds a finished or unfinished run "
                                                    "(without it a finished run is refused and an unfinished one resumed)")] = False,
    device: Annotated[str, typer.Option(help="cpu | cuda | auto")] = "auto",
    threads: Annotated[int, typer.Option(help="torch threads (0 = torch default)")] = 1,
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="log to Weights & Biases")] = False,
    wandb_project: Annotated[str, typer.Option("--wandb-project")] = "super-marl",
    wandb_group: Annotated[str, typer.Option("--wandb-group")] = "",
    wandb_mode: Annotated[str, typer.Option("--wandb-mode", help="offline | online (needs WANDB_API_KEY)")] = "offline",
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted override, e.g. --set dqn.gamma=0.95")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    backend: Annotated[str, typer.Option(help="native (fast batched trainer) | rllib (suPERDQN on RLlib 2.60)")] = "native",
    pack: Annotated[bool, typer.Option("--pack", help="train the --num-seeds runs as one batched program (one "
                                       "run folder each; suPER.native.packed)")] = False,
) -> None:
    """Train independent DQN learners (with optional SUPER relay), or a baseline (see --algo), and write a run folder per seed.

    The paper's main.py spellings work too: --num_timesteps, --num_seeds, --suPER True, --suPER_mode,
    --suPER_bandwidth, --suPER_window, --team_sharing, --parameter_sharing=true, --use_gpu 0,
    --env pursuit_plaindqn, --horizon, --experiment_group, --experiment_project.
    """
    typed = _typed_flags()
    if backend not in BACKENDS:
        raise UserError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if num_seeds < 1:
        raise UserError(f"{typed.get('--num-seeds', '--num-seeds')}: expected an integer >= 1, got {num_seeds}")
    if pack and eval_parallel:  # a pack evaluates in-process: say so instead of running with a note
        raise UserError(f"{typed.get('--eval-parallel', '--eval-parallel')}: packed runs evaluate in-process; drop "
                        f"it or --pack")
    if eval_episodes == 0:  # 0 is for trainers that skip evaluation (best responses), not a run's curve
        raise UserError(f"{typed.get('--eval-episodes', '--eval-episodes')}: expected an integer >= 1 (every "
                        f"evaluation plays them), got 0")
    flags = {"device": device, "threads": threads, "tag": tag, "wandb": wandb, "wandb_project": wandb_project,
             "wandb_group": wandb_group, "wandb_mode": wandb_mode, "super": super_,
             "parameter_sharing": parameter_sharing, "num_timesteps": num_timesteps, "lr": lr,
             "buffer_size": buffer_size, "eval_interval": eval_interval, "eval_episodes": eval_episodes,
             "eval_parallel": eval_parallel,
             "super_mode": super_mode, "bandwidth": bandwidth, "window": window, "team": team,
             "insertion_priority": insertion_priority, "opponent": opponent, "model": model,
             "opponent_epsilon": opponent_epsilon, "eval_opponent_epsilon": eval_opponent_epsilon,
             "allow_pickle": allow_pickle or None, "quick": quick,
             "legacy": legacy, "protocol": protocol}

    def label(name: str) -> str:
        flag = "--" + name.replace("_", "-")
        return typed.get(flag, flag)

    _check_super_settings(flags, label)
    named, labels = C.named_settings(env, flags, label)
    named.update({"run.seed": seed, "run.out": str(out), "run.progress": progress})
    labels.update({"run.seed": label("seed"), "run.out": label("out"), "run.progress": label("progress"),
                   "run.algo": label("algo")})
    overrides = _set_pairs(set_ or [])
    labels.update({key: typed.get(f"--set {key}", f"--set {key}") for key in overrides})
    packed: list[C.ExperimentConfig] = []
    for i in range(num_seeds):
        cfg = resolve(env, algo, overrides=overrides, named={**named, "run.seed": seed + i}, labels=labels)
        if i == 0:
            from suPER.opponents import check_opponent

            check_opponent(cfg.env)  # a bad weights file is a one-line error before any folder is written
            check_with_env(cfg, labels)
        if (skip_finished or num_seeds > 1) and not overwrite:  # several seeds: rerun after a crash = resume the rest
            from suPER.runs import FINISHED, RunFolder

            if RunFolder(Path(cfg.run.out) / cfg.run_name).status() == FINISHED:
                print(f"{cfg.run_name}: already finished in {cfg.run.out}, skipped")
                continue
        if pack:
            packed.append(cfg)
        else:
            _train_one(cfg, overwrite, backend)
    if pack and packed:
        from rich.console import Console

        from suPER.campaigns.packed import execute_pack, report

        with _pack_progress_bars(packed, Console(stderr=True)) as progress:
            outcomes = execute_pack(packed, overwrite=overwrite, backend=backend, progress=progress)
        raise typer.Exit(report(packed, outcomes))


def _number(flag: str, value: float, minimum: float, inclusive: bool = True) -> float:
    """A finite number at least (or above) ``minimum``: nan and inf are refused by name, before anything starts.

    Raises:
        UserError: ``"<flag>: expected a finite number >= <minimum>, got <value>"``.
    """
    import math

    ok = math.isfinite(value) and (value >= minimum if inclusive else value > minimum)
    if not ok:
        raise UserError(f"{flag}: expected a finite number {'>=' if inclusive else '>'} {minimum:g}, got {value}")
    return value


def _check_super_settings(flags: dict[str, Any], label: Callable[[str], str]) -> None:
    """A SUPER setting given while SUPER was never switched on is refused, naming both flags: ``--bandwidth 0.3``
    alone would otherwise train plain DDQN without a word. ``--no-super`` / ``--suPER False`` typed with it is the
    user's own choice (the original's grid passed ``--suPER=False --suPER_bandwidth=0.0``) and is accepted.

    Raises:
        UserError: naming the setting as typed and the switch.
    """
    try:  # typer >= 0.29 vendors click as typer._click
        from typer._click.core import ParameterSource
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer
        from click.core import ParameterSource  # type: ignore[no-redef]
        from click.globals import get_current_context  # type: ignore[no-redef]
    ctx = get_current_context(silent=True)
    typed_switch = ctx is not None and ctx.get_parameter_source("super_") not in (None, ParameterSource.DEFAULT)
    given = [name for name in C.SUPER_ONLY_FLAGS if flags.get(name) is not None]
    if given and not flags.get("super") and not typed_switch:
        raise UserError(f"{label(given[0])}: is a SUPER setting, but SUPER is off: add {label('super')} (paper: "
                        f"--suPER True) to relay, or leave {label(given[0])} out")


def _typed_flags() -> dict[str, str]:
    """What ``main`` recorded of the paper spellings the user typed (``--bandwidth -> --suPER_bandwidth``)."""
    try:  # typer >= 0.29 vendors click as typer._click
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer
        from click import get_current_context  # type: ignore[no-redef]
    ctx = get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return dict(obj.get("typed", {})) if isinstance(obj, dict) else {}


def check_with_env(cfg: C.ExperimentConfig, labels: dict[str, str] | None = None) -> None:
    """The checks that need the env library, run before any folder is written: ``env.kwargs`` against the
    env's constructor (``suPER.envs.check``) and ``--team`` against the learner ids it builds.

    Why the team: a team that matches no learner, or one, makes a ``..._super_*`` run that never relays.

    Raises:
        ConfigError: naming the flag as typed (``labels``) and, for the team, every learner id available.
    """
    from suPER.core.relay import team_mask
    from suPER.envs.check import describe_ids, probe_env

    labels = labels or {}
    spec = probe_env(cfg.env, labels)
    if not spec.opponent_ids and not cfg.env.swap_teams:
        for key in ("env.opponent", "env.opponent_epsilon", "env.eval_opponent_epsilon", "env.opponent_allow_pickle"):
            typed = labels.get(key, "")
            if typed.startswith("-") and "(" not in typed:  # a flag the user typed, not one a protocol set
                from suPER.envs import opponent_env_names

                raise C.ConfigError(f"{typed}: expected no opponent setting for {cfg.env.name}, which has no "
                                    f"opponent team (envs with one: {', '.join(opponent_env_names())})")
    r = cfg.relay
    if r.enabled and r.team and not cfg.dqn.parameter_sharing:
        n = int(team_mask(spec.learner_ids, r.team).sum())
        if n < 2:
            raise C.ConfigError(f"{labels.get('relay.team', 'relay.team')}: expected an id substring or comma list "
                                f"matching at least two learners of {cfg.env.name} "
                                f"({describe_ids(spec.learner_ids)}), got {r.team!r} (matches {n})")


def _trainer(backend: str, algo: str = "ddqn") -> Any:
    """The ``train(cfg, folder, logger, progress) -> Summary`` function of a backend (imported lazily)."""
    from suPER.campaigns import trainer_for

    try:
        return trainer_for(backend, algo)
    except C.ConfigError as exc:
        raise UserError(str(exc)) from exc


legacy_settings = C.paper_protocol_settings
"""What ``--legacy`` / ``--protocol paper`` switch on (kept here for callers of the CLI module)."""


def _train_one(cfg: C.ExperimentConfig, overwrite: bool, backend: str = "native") -> None:
    """Train one run into its folder (``campaigns.execute``: fresh, resumed if unfinished, or refused)."""
    from rich.console import Console

    from suPER import campaigns

    console = Console(stderr=True)
    _trainer(backend, cfg.run.algo)  # an unavailable backend is a one-line error before anything is written

    bar = _progress_bar(cfg, console)
    update: list[Any] = [None]  # the bar's update function, once the run folder is ready

    def on_start(folder: Any, resumed: bool) -> None:
        what = "resuming in" if resumed else "->"
        console.print(f"[bold]{cfg.run_name}[/]: {plan_line(cfg)} {what} {folder.path}", soft_wrap=True)
        note = cfg.eval_cost_note()
        if note:
            console.print(note, soft_wrap=True, markup=False)
        update[0] = bar.__enter__()

    def on_progress(env_steps: int, stats: dict[str, float]) -> None:
        if update[0] is not None:
            update[0](env_steps, stats)

    from suPER.runs import RunFailure

    try:
        summary = campaigns.execute(cfg, overwrite=overwrite, backend=backend, progress=on_progress,
                                    on_start=on_start)
    except RunFailure as exc:  # disk full and the like: one line, exit 1, the folder is resumable
        bar.__exit__()
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        bar.__exit__()
    print(f"final team return {summary.final_team_return:.3f} after {summary.env_steps} env steps "
          f"({summary.env_steps_per_sec:.0f} env steps/s training)")
    print(f"curve: {summary.run_dir / 'curve.png'}")


def plan_line(cfg: C.ExperimentConfig) -> str:
    """The run's plan in one line: env, algorithm, env steps, evaluations and an estimated time (at rates measured
    in the Figure 1 campaign, stated as an estimate), naming ``--quick`` when it is longer than an hour."""
    from suPER import reproduce as R

    evals = cfg.run.num_timesteps // cfg.eval_interval + 1
    text = (f"{cfg.env.name}, {cfg.run.algo}"
            f"{', SUPER ' + cfg.relay.mode + ' b=' + str(cfg.relay.bandwidth) if cfg.relay.enabled else ''}, "
            f"{cfg.run.num_timesteps:,} env steps, {evals} evaluations x {cfg.run.eval_episodes} episodes")
    seconds = R.run_seconds(cfg)
    if seconds is not None:
        hours = seconds / 3600
        text += (f", estimated {hours:.1f} h" if hours >= 1 else f", estimated {seconds / 60:.0f} min") + \
            " at the Figure 1 campaign's pace (2 runs on 2 shared cores; a quiet machine is faster)"
        if hours > 1:
            text += "; --quick runs a short budget in minutes"
    return text


class _progress_bar:
    """A rich progress bar fed by the trainer's per-fragment callback (a no-op when disabled)."""

    def __init__(self, cfg: C.ExperimentConfig, console: Any) -> None:
        self.cfg, self.console = cfg, console
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.cfg.run.progress:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("[bold blue]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[sps]} steps/s"), TextColumn("eval return {task.fields[ret]}"),
                            TimeRemainingColumn(), console=self.console, transient=False)
        self.bar.start()
        task = self.bar.add_task("training", total=self.cfg.run.num_timesteps, sps="-", ret="-")
        import time

        t0 = time.perf_counter()

        def update(env_steps: int, stats: dict[str, float]) -> None:
            elapsed = max(time.perf_counter() - t0, 1e-9)
            ret = stats.get("team_return", float("nan"))
            self.bar.update(task, completed=env_steps, sps=f"{env_steps / elapsed:.0f}",
                            ret="-" if ret != ret else f"{ret:.2f}")

        return update

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


class _pack_progress_bars:
    """One rich progress bar per run of a pack (``train --pack``), each fed by its run's progress callback.

    Entering yields the per-run callbacks for ``execute_pack(progress=...)`` (None each when
    ``run.progress`` is off); a run that stops shows ``stopped`` in its row.
    """

    def __init__(self, cfgs: list[C.ExperimentConfig], console: Any) -> None:
        self.cfgs, self.console = cfgs, console
        self.bar: Any = None

    def __enter__(self) -> list[Any]:
        if not self.cfgs[0].run.progress:
            return [None] * len(self.cfgs)
        import time

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("[bold blue]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[sps]} steps/s"), TextColumn("eval return {task.fields[ret]}"),
                            TimeRemainingColumn(), console=self.console, transient=False)
        self.bar.start()
        t0 = time.perf_counter()

        def callback(cfg: C.ExperimentConfig) -> Any:
            task = self.bar.add_task(cfg.run_name, total=cfg.run.num_timesteps, sps="-", ret="-")

            def update(env_steps: int, stats: dict[str, float]) -> None:
                ret = stats.get("team_return", float("nan"))
                fields = {"sps": "stopped"} if stats.get("failed") else {
                    "sps": f"{env_steps / max(time.perf_counter() - t0, 1e-9):.0f}"}
                self.bar.update(task, completed=env_steps, ret="-" if ret != ret else f"{ret:.2f}", **fields)

            return update

        return [callback(cfg) for cfg in self.cfgs]

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# --------------------------------------------------------------------------------------------------
# envs


def print_table(title: str, columns: list[str], rows: list[list[str]], notes: tuple[str, ...] | list[str] = ()) -> None:
    """Print a table whose cells a user may copy (env names, agent ids, run folders): never truncated.

    Why: rich's default tables cut long cells to ``adversarial…`` on an 80-column terminal and when
    stdout is a pipe (where it assumes 80 columns). On a terminal every column folds instead; anywhere
    else the rows are plain tab-separated lines (easy to grep and cut).
    """
    if not sys.stdout.isatty():
        print(title)
        for line in ([columns] + rows):
            print("\t".join(line))
        for n in notes:
            print(n)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console()
    console.print(table)
    for n in notes:
        console.print(n, soft_wrap=True)


@app.command()
def envs() -> None:
    """List the environments with their learners, opponents and spaces."""
    from suPER.envs import ENVS, env_info

    rows = []
    for name in ENVS:
        info = env_info(name)
        learners = info["learner_ids"]
        opps = info["opponent_ids"]
        rows.append([name, f"{len(learners)} ({learners[0]}..{learners[-1]})",
                     f"{len(opps)} ({opps[0]}..{opps[-1]})" if opps else "-",
                     str(tuple(info["obs_shape"])), str(info["n_actions"]), info["team"]])
    print_table("environments", ["env", "learners", "opponents", "obs shape", "actions", "team"], rows)


# --------------------------------------------------------------------------------------------------
# figures: plot (a campaign) and compare (any runs)

SmoothOpt = Annotated[int, typer.Option(help="moving average over this many evaluations per run (1 = none)")]
MetricOpt = Annotated[str, typer.Option(help="metrics.csv column to plot (default team_return_mean)")]
LastOpt = Annotated[float, typer.Option("--last-fraction", help="fraction of each run's last evaluations "
                                                                "that make its final score")]


ConfigOpt = Annotated[list[str] | None, typer.Option("--config", help="only configurations whose label matches "
                                                                     "this glob, e.g. 'ddqn*' (repeatable)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="file stem: NAME.png/.svg and NAME_final.md/.csv "
                                                            "(default team_return + final_performance)")]


def _check_figure_args(out: Path, smooth: int, last_fraction: float, name: str | None, out_flag: str) -> None:
    """Refuse bad figure flags before any run is read, so a refusal is one line and writes nothing."""
    import os

    if smooth < 1:
        raise UserError(f"--smooth: expected a whole number of evaluations >= 1 (1 = no smoothing), got {smooth}")
    if not 0 < last_fraction <= 1:  # also refuses nan
        raise UserError(f"--last-fraction: expected a fraction in (0, 1], got {last_fraction:g}")
    if name is not None and (not name.strip() or "/" in name or os.sep in name or name in (".", "..")
                             or not C.is_folder_name(name)):
        raise UserError(f"--name: expected a file stem without folders or control characters, got {name!r}")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out_flag}: expected a folder for figures and tables, got the file {out}")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{out_flag}: expected a folder for figures and tables, got {out}, below the file {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out_flag}: expected a writable folder, got {out} ({parent} is not writable)")


def _check_output_file(path: Path, flag: str) -> None:
    """Refuse an output file that cannot be written (a folder, below a file, a read-only place) before anything is
    drawn, so a refusal writes nothing."""
    import os

    if path.is_dir():
        raise UserError(f"{flag}: expected a file to write, got the folder {path}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag}: expected a file to write, got {path}, below the file {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{flag}: expected a writable place, got {path} (not writable)")


def _report(curves: list[Any], skipped: list[Any], out: Path, metric: str, smooth: int, last_fraction: float,
            title: str, configs: list[str] | None, name: str | None, source: str,
            tags: list[str] | None = None) -> None:
    """Figure and table from the loaded runs; skipped and unfinished runs get one ``warning:`` line each.

    When nothing is left to draw, one ``error:`` line says why (the flag that filtered everything out,
    or the first file that could not be read) and nothing is written; warnings are printed only when
    a figure follows, so a refusal stays one line.
    """
    from suPER import plotting

    selected = plotting.select_configurations(curves, configs or [])
    if not selected:
        if curves and configs:
            raise UserError(f"--config: expected a glob matching a configuration "
                            f"({', '.join(sorted({c.label for c in curves}))}), got {' '.join(configs)}")
        if skipped and all(s.columns is not None and "env_steps" in s.columns and metric not in s.columns
                           for s in skipped):
            have = sorted(set().union(*(s.columns for s in skipped)) - {"env_steps"})
            raise UserError(f"--metric: expected a metrics.csv column ({', '.join(have)}), got {metric!r}")
        if skipped:
            raise UserError(f"{source}: expected at least one readable run, got {len(skipped)} run folder(s), "
                            f"none usable (first: {skipped[0].path}: {skipped[0].reason})")
        if tags:
            raise UserError(f"--tag: expected the tag of a run under {source}, got {' '.join(tags)} (no run has it)")
        raise UserError(f"{source}: expected run folders (metrics.csv + config.json) at or below it, got none")

    def warn(line: str) -> None:
        print(f"warning: {line}", file=sys.stderr)

    for s in skipped:
        warn(str(s))
    try:
        paths = plotting.report(selected, out, metric=metric, smoothing=smooth, last_fraction=last_fraction,
                                title=title, name=name, warn=warn)
    except OSError as exc:
        print(f"error: --out: cannot write figures to {out} ({exc.strerror or exc})", file=sys.stderr)
        raise typer.Exit(1) from exc
    print(paths["md"].read_text(), end="")
    n_cfg = len({(c.env, c.label) for c in selected})
    print(f"{len(selected)} runs, {n_cfg} curves -> {paths['png']}, {paths['svg']}, {paths['md']}, "
          f"{paths['csv']}")


def _find_runs(paths: list[Any], flag: str) -> list[Path]:
    """``plotting.find_run_folders`` with a path that matches nothing as one ``error: FLAG: ...`` line."""
    from suPER import plotting

    try:
        return plotting.find_run_folders(paths)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise UserError(f"{flag}: {exc}") from exc


@app.command()
def plot(
    campaign_dir: Annotated[Path | None, typer.Argument(help="folder holding run folders (e.g. runs/paper)")] = None,
    out: Annotated[Path | None, typer.Option(help="where figures and tables go (default CAMPAIGN_DIR/figures)")] = None,
    smooth: SmoothOpt = 1,
    metric: MetricOpt = "team_return_mean",
    last_fraction: LastOpt = 0.1,
    from_wandb: Annotated[str | None, typer.Option("--from-wandb", help="read runs of this W&B project instead "
                                                                        "(online; needs WANDB_API_KEY)")] = None,
    entity: Annotated[str | None, typer.Option(help="W&B entity of --from-wandb")] = None,
    group: Annotated[str | None, typer.Option(help="only W&B runs of this group (--from-wandb)")] = None,
    config: ConfigOpt = None,
    name: NameOpt = None,
    analysis: Annotated[bool, typer.Option("--analysis", help="also the claim table and the aggregates across "
                                                              "envs (normalized IQM, performance profiles, "
                                                              "probability of improvement; suPER/analysis.py)")] = False,
    marl_eval: Annotated[Path | None, typer.Option("--marl-eval", help="also write the runs as JSON in "
                                                                       "marl-eval's layout (suPER/export.py)")] = None,
    figure_title: Annotated[str | None, typer.Option("--title", help="the figure's title (default: the campaign "
                                                                     "folder's name)")] = None,
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="also log the figures (images) and tables "
                                                                   "(W&B tables) to a W&B run")] = False,
    wandb_project: Annotated[str, typer.Option("--wandb-project")] = "super-marl",
    wandb_mode: Annotated[str, typer.Option("--wandb-mode", help="offline (files under OUT/wandb) | online "
                                                                 "(needs WANDB_API_KEY or wandb login)")] = "offline",
) -> None:
    """The paper's figures from a campaign: one panel per env, team return vs env steps, one curve per
    configuration (mean, 95% bootstrap band over seeds), plus a final-performance table (mean and IQM
    over the last 10% of evaluations with 95% bootstrap CIs) as markdown and CSV.

    Only finished runs make the bands and the table; unfinished ones are drawn dashed with a warning,
    and a run folder that cannot be read is skipped with a warning naming the file.
    """
    from suPER import plotting

    if marl_eval is not None:
        _check_output_file(marl_eval, "--marl-eval")
    if wandb and wandb_mode not in ("offline", "online"):
        raise UserError(f"--wandb-mode: expected offline or online, got {wandb_mode!r}")
    if wandb:  # credentials before anything is drawn: a run that cannot log is refused, not half done
        from suPER.runs import WandbError, check_wandb_credentials

        try:
            check_wandb_credentials(wandb_mode)
        except WandbError as exc:
            raise UserError(str(exc)) from None
    skipped: list[Any] = []
    if from_wandb:
        if campaign_dir is None and out is None:
            out = Path("runs") / "wandb" / from_wandb / "figures"
        target = out or (campaign_dir or Path(".")) / "figures"
        _check_figure_args(target, smooth, last_fraction, name, "--out")
        try:
            curves = plotting.load_wandb_curves(from_wandb, entity=entity, metric=metric,
                                                filters={"group": group} if group else None)
        except Exception as exc:  # network, authentication or project errors from the W&B client
            raise UserError(f"--from-wandb {from_wandb}: cannot read runs ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}); W&B needs network access and "
                            f"WANDB_API_KEY (or wandb login)") from exc
        title, source = f"W&B {from_wandb}", f"--from-wandb {from_wandb}"
    else:
        if campaign_dir is None:
            raise UserError("CAMPAIGN_DIR: expected a folder of run folders (or --from-wandb PROJECT), got nothing")
        if not campaign_dir.is_dir():
            got = "a file" if campaign_dir.exists() else "no such folder"
            raise UserError(f"{campaign_dir}: expected a folder of run folders (CAMPAIGN_DIR), got {got}")
        target = out or campaign_dir / "figures"
        _check_figure_args(target, smooth, last_fraction, name, "--out" if out else f"--out (default {target})")
        curves = plotting.load_run_curves(_find_runs([campaign_dir], "CAMPAIGN_DIR"), metric=metric,
                                          skipped=skipped)
        title, source = campaign_dir.resolve().name, str(campaign_dir)
    if figure_title is not None:
        if any(ch in figure_title for ch in "\n\r\t\0"):
            raise UserError(f"--title: expected one line of text, got {figure_title!r}")
        title = figure_title
    _report(curves, skipped, target, metric, smooth, last_fraction, title, config, name, source)
    if analysis or marl_eval:
        _analysis(plotting.select_configurations(curves, config or []), target, last_fraction, name, analysis, marl_eval)
    if wandb:
        _log_figures(target, title, source, wandb_project, wandb_mode)


def _log_figures(target: Path, title: str, source: str, project: str, mode: str) -> None:
    """Every figure (PNG) and table (CSV) ``plot`` wrote into ``target`` as one W&B run (job type analysis)."""
    from suPER.runs import WandbError, WandbLogger

    try:
        logger = WandbLogger(target, project, "", f"{title} figures", {"source": source, "figures": str(target)},
                             mode=mode, tags=["analysis"])
    except WandbError as exc:
        raise UserError(str(exc)) from None
    try:
        logger.log_files({p.stem: p for p in sorted(target.glob("*.png"))},
                         {p.stem: p for p in sorted(target.glob("*.csv"))})
    finally:
        logger.close()
    print(f"W&B ({mode}): {len(list(target.glob('*.png')))} figure(s) and {len(list(target.glob('*.csv')))} "
          f"table(s) logged" + (f" under {target / 'wandb'} (wandb sync to upload)" if mode == "offline" else ""))


def _analysis(curves: list[Any], out: Path, last_fraction: float, name: str | None, claims: bool,
              marl_eval: Path | None) -> None:
    """Claim table + aggregates (``analysis.report``) and / or the marl-eval export of ``curves``."""
    if claims:
        from suPER import analysis

        paths = analysis.report(curves, out, last_fraction=last_fraction, name=name,
                                log=lambda line: print(line, file=sys.stderr, flush=True))
        print(paths["claims_md"].read_text(), end="")
        print(f"-> {', '.join(str(p) for p in paths.values())}")
    if marl_eval:
        from suPER import export

        try:
            path = export.write_marl_eval(curves, marl_eval, last_fraction,
                                          warn=lambda line: print(line, file=sys.stderr))
            print(f"marl-eval JSON -> {path}")
        except OSError as exc:
            raise UserError(f"--marl-eval: {marl_eval}: cannot write ({exc.strerror})") from exc


@app.command()
def compare(
    runs_: Annotated[list[str] | None, typer.Argument(metavar="RUNS...", help="run folders, campaign folders or "
                                                                             "globs (quote them) of runs to compare")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="only runs with this --tag (repeatable); with no RUNS, "
                                                       "searches --root")] = None,
    root: Annotated[Path, typer.Option(help="where --tag looks when no RUNS are given")] = Path("runs"),
    out: Annotated[Path, typer.Option(help="where the figure and table go")] = Path("runs/compare"),
    smooth: SmoothOpt = 1,
    metric: MetricOpt = "team_return_mean",
    last_fraction: LastOpt = 0.1,
    config: ConfigOpt = None,
    name: NameOpt = None,
) -> None:
    """Compare any set of runs (e.g. a tweaked flag against a campaign) on one figure, same statistics as plot.

    Example: super-marl compare 'runs/paper/pursuit__ddqn_super_quantile__s*' 'runs/*__bw005'
    """
    from suPER import plotting

    if not runs_ and not tag:
        raise UserError("RUNS: expected run folders, campaign folders or globs (or --tag), got nothing")
    _check_figure_args(out, smooth, last_fraction, name, "--out")
    folders = _find_runs(runs_, "RUNS") if runs_ else _find_runs([root], "--root")
    skipped: list[Any] = []
    curves = plotting.load_run_curves(folders, metric=metric, tags=tag or (), skipped=skipped)
    source = " ".join(runs_) if runs_ else str(root)
    _report(curves, skipped, out, metric, smooth, last_fraction, "compare", config, name, source, tag)


# --------------------------------------------------------------------------------------------------
# grid: campaigns from grid files (suPER/campaigns/)

grid_app = typer.Typer(no_args_is_help=True, help="Campaigns: list, run and submit the runs of a grid file "
                       "(experiments/paper_grid.yaml, bandwidth_sweep.yaml, smoke.yaml).")
app.add_typer(grid_app, name="grid")

FilterOpt = Annotated[list[str] | None, typer.Option(
    "--filter", help="select runs: KEY=GLOB with KEY env|algo|name|run|seed|tag|status, or a bare GLOB on the "
    "entry name / run folder; repeat to AND, comma-separate globs to OR")]
SeedsOpt = Annotated[str | None, typer.Option(help="seeds for every entry: a count (5 -> 1..5) or a list 1,2,3")]


def _load_grid(file: Path, seeds: str | None, filters: list[str] | None) -> tuple[Any, list[Any]]:
    from suPER import campaigns

    grid = campaigns.load_grid(file, seeds=seeds)
    for f in filters or []:
        campaigns.parse_filter(f)  # reject unknown filter keys before selecting
    return grid, grid.select(filters or [])


def _check_grid_with_env(selected: list[Any], out: Path) -> None:
    """``check_with_env`` for every distinct env setting of a grid's runs, errors prefixed FILE:LINE."""
    seen: set[str] = set()
    for r in selected:
        if r.pending:
            continue
        cfg = r.config(out)
        key = repr((cfg.env.name, sorted(cfg.env.kwargs.items()), cfg.relay.enabled, cfg.relay.team,
                    cfg.dqn.parameter_sharing))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_with_env(cfg)
        except C.ConfigError as exc:
            raise UserError(f"{r.where}: entry {r.entry!r}: {exc}") from None


@grid_app.command("list")
def grid_list(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder to read run statuses from "
                                                  "(default runs/<grid name>)")] = None,
    format_: Annotated[str, typer.Option("--format", help="table | cli (train arguments, one run per line) | "
                                                          "names (run folders) | json")] = "table",
) -> None:
    """Show the runs a grid file expands to (entries x sweep points x seeds) and their status."""
    import dataclasses
    import json

    from suPER import runs
    from suPER.campaigns.local import stale as campaigns_stale

    grid, selected = _load_grid(file, seeds, filter_)
    out = out or grid.default_out
    if format_ == "cli":
        import shlex

        for r in selected:
            if not r.pending:
                print(shlex.join(r.cli_args()))
        return
    if format_ == "names":
        print("\n".join(r.run_name for r in selected if not r.pending))
        return
    if format_ not in ("table", "json"):
        raise UserError(f"--format: expected table, cli, names or json, got {format_!r}")

    def state(r: Any) -> tuple[str, Any]:
        """(status, RunProgress or None) of a run's folder; "stopped" for a running one whose writer was killed."""
        if r.pending:
            return "pending", None
        folder = runs.RunFolder(out / r.run_name)
        status = folder.status() or "-"
        if status == runs.RUNNING and folder.writer_exited():
            status = "stopped"  # the manifest says running, but the process writing it was killed
        if status == runs.FINISHED and campaigns_stale(folder, r, out):
            return "stale", None  # finished with another configuration than the grid asks now
        return status, (folder.progress() if status not in ("-", runs.FINISHED) else None)

    states = {id(r): state(r) for r in selected}
    if format_ == "json":
        rows_json = []
        for r in selected:
            status, progress = states[id(r)]
            rows_json.append({**r.as_dict(), "run_name": r.run_name, "cli": None if r.pending else r.cli_args(),
                              "status": status, "progress": None if progress is None else dataclasses.asdict(progress)})
        print(json.dumps(rows_json, indent=1))
        return
    pairs = {id(r): _flag_pairs(r.cli_args()[6:]) for r in selected}
    common = set.intersection(*(set(p) for p in pairs.values())) if pairs else set()
    counts: dict[str, int] = {}
    rows = []
    for r in selected:
        status, progress = states[id(r)]
        counts[status] = counts.get(status, 0) + 1
        shown = status if progress is None else f"{status} {progress.describe()}"  # env steps / budget, time left
        flags = r.pending if r.pending else " ".join(p for p in pairs[id(r)] if p not in common)
        rows.append([r.entry, r.env, r.algo, str(r.seed), "-" if r.pending else r.run_name, shown, flags])
    notes = []
    if "stale" in counts:
        notes.append("stale: a finished run whose recorded configuration differs from what the grid asks now; grid run "
                     "refuses it (remove its folder to train it again)")
    if "stopped" in counts:
        notes.append("stopped: the manifest says running but the process that wrote it has exited (killed); "
                     "grid run resumes it from its last checkpoint")
    if common:
        notes.append("every run above also gets: " + " ".join(p for p in pairs[id(selected[0])] if p in common))
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    notes.append(f"{len(selected)} runs of {len(grid.runs)} ({summary}); run folders under {out}")
    print_table(f"{grid.name}: {file}", ["entry", "env", "algo", "seed", "run folder", "status", "flags"], rows, notes)


@grid_app.command("run")
def grid_run(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder for the run folders (default runs/<grid name>)")] = None,
    cpus_per_trial: Annotated[float, typer.Option("--cpus-per-trial", help="CPUs per run (= its torch threads)")] = 1.0,
    gpus_per_trial: Annotated[float, typer.Option("--gpus-per-trial", help="GPUs per run (> 0: networks on CUDA)")] = 0.0,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS, else Ray "
                                                     "starts embedded on this machine, loopback only)")] = None,
    max_failures: Annotated[int, typer.Option("--max-failures", help="retries of a failing run (each resumes "
                                                                     "from its checkpoint)")] = 1,
    wandb: Annotated[bool | None, typer.Option("--wandb/--no-wandb", help="log every run to W&B (default: as "
                                                                          "the grid file says)")] = None,
    wandb_project: Annotated[str | None, typer.Option("--wandb-project")] = None,
    wandb_group: Annotated[str | None, typer.Option("--wandb-group", help="default: the grid name")] = None,
    wandb_mode: Annotated[str | None, typer.Option("--wandb-mode", help="offline | online")] = None,
    pack: Annotated[bool, typer.Option("--pack", help="train runs that share the network and update schedule "
                                                      "as packs, one trial per pack (DQN / DDQN; others run alone)")] = False,
    pack_size: Annotated[int | None, typer.Option("--pack-size", help="most runs per pack (default: all runs "
                                                                      "that can share one)")] = None,
    pack_memory_gb: Annotated[float | None, typer.Option("--pack-memory-gb", help="memory per pack in GB: packs "
                                                         "are sized to fit it, a pack over it is refused (default: "
                                                         "80% of the trial device's free memory, per trial)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the runs (and packs) to train; start nothing")] = False,
) -> None:
    """Run a grid through Ray Tune: one trial per run (or, with --pack, per pack), a live progress table.

    Re-running the same command skips finished runs and resumes unfinished ones from their latest
    checkpoint (after a crash, Ctrl-C or SIGKILL).
    """
    from suPER import campaigns

    _number("--cpus-per-trial", cpus_per_trial, minimum=0, inclusive=False)
    _number("--gpus-per-trial", gpus_per_trial, minimum=0)
    if pack_size is not None and pack_size < 1:
        raise UserError(f"--pack-size: expected an integer >= 1, got {pack_size}")
    if pack_memory_gb is not None:
        _number("--pack-memory-gb", pack_memory_gb, minimum=0, inclusive=False)
    if not pack and (pack_size is not None or pack_memory_gb is not None):
        raise UserError("--pack-size / --pack-memory-gb: only with --pack")
    grid, selected = _load_grid(file, seeds, filter_)
    if not selected:
        raise UserError(f"--filter: no run of {file} matches {' '.join(filter_ or [])!r}")
    out = out or grid.default_out
    _check_grid_with_env(selected, out)
    run_fields: dict[str, Any] = {}
    if wandb is not None:
        run_fields["wandb"] = wandb
        if wandb:
            run_fields["wandb_group"] = wandb_group or grid.name
    run_fields.update({k: v for k, v in (("wandb_project", wandb_project), ("wandb_mode", wandb_mode))
                       if v is not None})
    if wandb_group is not None:
        run_fields["wandb_group"] = wandb_group
    outcome = campaigns.run_grid(grid, selected, out, cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
                                 address=address, max_failures=max_failures, run_fields=run_fields, pack=pack,
                                 pack_size=pack_size, pack_memory_gb=pack_memory_gb, dry_run=dry_run)
    if dry_run:
        return
    stopped = (f", {len(outcome['interrupted'])} interrupted (they resume from their checkpoints), "
               f"{len(outcome['not_started'])} not started" if outcome["interrupted"] or outcome["not_started"] else "")
    print(f"{len(outcome['finished'])} finished now, {len(outcome['skipped'])} finished before, "
          f"{len(outcome['failed'])} failed{stopped}, {len(outcome['pending'])} pending; run folders in {out}")
    if outcome["failed"]:
        print("re-run the same command to resume the failed runs from their checkpoints", file=sys.stderr)
        raise typer.Exit(1)
    if outcome["interrupted"] or outcome["not_started"]:  # Ray Tune took the Ctrl-C and returned: exit as an
        raise typer.Exit(130)  # interrupt (main says how to go on)


@grid_app.command("submit")
def grid_submit(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    address: Annotated[str | None, typer.Option(help="Ray dashboard address, http://HOST:8265 (default: "
                                                     "RAY_ADDRESS, else http://127.0.0.1:8265 as forwarded by "
                                                     "`ray dashboard cluster/aws.yaml`)")] = None,
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[str | None, typer.Option(help="run folders on the cluster (default ~/super-marl-runs/<grid "
                                                 "name>, expanded there; use shared storage on multi-node "
                                                 "clusters)")] = None,
    per: Annotated[str, typer.Option(help="run: one job per run (super-marl train) | grid: one job running "
                                          "super-marl grid run on the cluster")] = "run",
    cpus: Annotated[float, typer.Option(help="CPUs per run")] = 1.0,
    gpus: Annotated[float, typer.Option(help="GPUs per run")] = 0.0,
    runtime_env_file: Annotated[Path, typer.Option("--runtime-env", help="runtime env YAML")] = Path(
        "ray_runtime.yaml"),
    wandb: Annotated[bool | None, typer.Option("--wandb/--no-wandb", help="log online to W&B (default: when "
                                                                          "~/.config/super-marl/wandb.netrc, the "
                                                                          "nodes' W&B login, exists here)")] = None,
    wandb_project: Annotated[str, typer.Option("--wandb-project")] = "super-marl",
    wait: Annotated[bool, typer.Option(help="wait for the jobs; exit 1 if one fails")] = False,
    print_jobs: Annotated[bool, typer.Option("--print-jobs", help="print the jobs (id, CPUs, GPUs, command; "
                                                                  "tab-separated) and submit nothing")] = False,
) -> None:
    """Submit the runs of a grid to a Ray cluster with the Job Submission API (JobSubmissionClient).

    The repository is shipped as each job's working_dir (ray_runtime.yaml). No secret travels with the jobs
    (Ray logs and serves runtime envs): the nodes log in to W&B with the netrc file cluster/aws.yaml installs.
    Resubmitting skips finished runs and resumes unfinished ones.
    """
    from suPER import campaigns

    _number("--cpus", cpus, minimum=0, inclusive=False)
    _number("--gpus", gpus, minimum=0)
    grid, selected = _load_grid(file, seeds, filter_)
    if not [r for r in selected if not r.pending]:
        raise UserError(f"--filter: no runnable run of {file} matches {' '.join(filter_ or [])!r}")
    out = out or f"~/super-marl-runs/{grid.name}"
    _check_grid_with_env(selected, Path(out))
    jobs = campaigns.plan_jobs(grid, selected, out, per=per, cpus=cpus, gpus=gpus, filters=filter_ or (),
                               seeds=seeds, wandb=wandb, wandb_project=wandb_project)
    if print_jobs:
        for job in jobs:
            print(f"{job.submission_id}\t{job.num_cpus:g}\t{job.num_gpus:g}\t{job.entrypoint}")
        return
    url = campaigns.dashboard_url(address)
    runtime_path = runtime_env_file if runtime_env_file.is_absolute() else C.ROOT / runtime_env_file
    ids = campaigns.submit_jobs(jobs, url, campaigns.runtime_env(runtime_path), grid.name)
    print(f"submitted {len(ids)} job(s) for {sum(len(j.runs) for j in jobs)} run(s) of {grid.name} to {url}; "
          f"run folders in {out} on the cluster")
    for jid in ids:
        print(f"  {jid}    (ray job logs --address {url} {jid})")
    if wait:
        status = campaigns.wait_for_jobs(url, ids, on_change=lambda j, s: print(f"{j}: {s}", file=sys.stderr))
        failed = [j for j, s in status.items() if s != "SUCCEEDED"]
        print(f"{len(ids) - len(failed)} job(s) succeeded, {len(failed)} did not")
        if failed:
            raise typer.Exit(1)


def _flag_pairs(args: list[str]) -> list[str]:
    """``["--set", "a=1", "--super"]`` -> ``["--set a=1", "--super"]`` (one item per flag)."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append(a)
        else:
            out[-1] += f" {a}"
    return out


# --------------------------------------------------------------------------------------------------
# reproduce: one command per figure (suPER/reproduce.py)


@app.command()
def reproduce(
    figure: Annotated[str, typer.Argument(help="fig1 (experiments/fig1.yaml) | bandwidth "
                                               "(experiments/bandwidth_sweep.yaml)")],
    fraction: Annotated[float | None, typer.Option(help="budget per run as a fraction of the paper's (pursuit "
                                                        "800k, battle 300k, adversarial pursuit 600k env steps); "
                                                        "default: the grid file's budgets")] = None,
    seeds: Annotated[int | None, typer.Option(help="seeds 1..N (default: the grid file's)")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="only this env (repeatable)")] = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder (default runs/<grid>[-f<F>][-<layer>])")] = None,
    address: Annotated[str | None, typer.Option(help="run on the Ray cluster whose dashboard is here "
                                                     "(http://HOST:8265; as grid submit) instead of locally")] = None,
    layer: Annotated[Path | None, typer.Option(help="a grid file whose defaults / env_defaults go over every run, "
                                                    "e.g. experiments/smoke.yaml for a quick check")] = None,
    filter_: FilterOpt = None,
    protocol: Annotated[str, typer.Option(help="paper (default: the original's behaviour, every documented "
                                               "deviation restored; run folders end in __paper) | ours (this "
                                               "suite's corrected defaults)")] = "paper",
    cpus_per_trial: Annotated[float, typer.Option("--cpus-per-trial", help="CPUs per run")] = 1.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan and the estimate only")] = False,
) -> None:
    """Run a figure's grid (locally through Ray Tune, or on a cluster) and draw it into OUT/figures.

    Prints the runs, env steps and estimated wall time first; running it again skips finished runs and
    resumes unfinished ones.
    """
    from suPER import campaigns, runs
    from suPER import reproduce as R

    _number("--cpus-per-trial", cpus_per_trial, minimum=0, inclusive=False)
    grid, runs_ = R.figure_runs(figure, fraction, seeds, env or [], layer, filter_ or [], protocol)
    if not runs_:  # a selection that matches nothing is a typo, not a finished figure (as grid run)
        asked = " ".join([*(f"--env {e}" for e in env or []), *(f"--filter {f}" for f in filter_ or [])])
        raise UserError(f"--filter: no run of {figure} matches {asked!r}")
    out = out or R.default_out(grid, fraction, layer)
    if not address:  # refused before the plan is printed (on a cluster, --out is the cluster's path)
        runs.writable_folder(out, create=not dry_run)
    where = "at this machine's parallelism (a cluster with more worker CPUs takes less)" if address else \
        "on this machine"
    est = R.estimate(runs_, out, R.local_parallel(cpus_per_trial))
    print(R.describe(figure, est, out, where), flush=True)
    if dry_run:
        return
    if est.todo and address:
        url = campaigns.dashboard_url(address)
        jobs = R.cluster_plan(grid, est.todo, str(out), cpus_per_trial)
        ids = campaigns.submit_jobs(jobs, url, campaigns.runtime_env(), grid.name)
        print(f"submitted {len(ids)} job(s) to {url}; waiting for them", flush=True)
        status = campaigns.wait_for_jobs(url, ids)
        if any(s != "SUCCEEDED" for s in status.values()):
            print("some jobs did not succeed; run the same command again to resume them", file=sys.stderr)
            raise typer.Exit(1)
    elif est.todo:
        outcome = campaigns.run_grid(grid, est.todo, out, cpus_per_trial=cpus_per_trial)
        if outcome["failed"]:
            print(f"{len(outcome['failed'])} run(s) failed; run the same command again to resume them",
                  file=sys.stderr)
            raise typer.Exit(1)
        if outcome["interrupted"] or outcome["not_started"]:
            raise typer.Exit(130)
    if address and not out.is_dir():
        print(f"run folders are on the cluster under {out}; draw them there with: super-marl reproduce {figure} "
              f"--out {out} (all runs finished: nothing is trained)")
        return
    paths = R.draw(figure, out)
    print(f"figures and tables in {out / 'figures'}: " + ", ".join(p.name for p in paths.values()))


# --------------------------------------------------------------------------------------------------
# opponents: train the fixed opponent teams by self-play, play matches (suPER/selfplay.py, suPER/opponents/)

opponents_app = typer.Typer(no_args_is_help=True, help="Fixed opponent teams of battle / adversarial_pursuit: "
                            "train them by self-play, evaluate teams against them.")
app.add_typer(opponents_app, name="opponents")

from suPER.population.cli import population_app  # noqa: E402 - population training (suPER/population/)

app.add_typer(population_app, name="population")


@opponents_app.command("train")
def opponents_train(
    env: Annotated[str, typer.Option(help="battle | adversarial_pursuit")],
    num_timesteps: Annotated[int | None, typer.Option("--num-timesteps", help="self-play env steps (default: "
                                                      "about an hour on 2 cores)")] = None,
    snapshots: Annotated[int, typer.Option(help="snapshots taken along the way (evenly spaced)")] = 6,
    seed: Annotated[int, typer.Option(help="run seed")] = 1,
    eval_episodes: Annotated[int, typer.Option("--eval-episodes", help="greedy episodes per evaluation match")] = 20,
    lr: Annotated[float | None, typer.Option(help="learning rate (default: the env YAML's)")] = None,
    out: Annotated[Path, typer.Option(help="parent folder of the self-play run folder")] = Path("runs/opponents"),
    install: Annotated[bool, typer.Option("--install", help="copy the chosen opponent and its card to "
                                          "experiments/opponents/")] = False,
    overwrite: Annotated[bool, typer.Option(help="start over in an existing run folder")] = False,
    threads: Annotated[int, typer.Option(help="torch threads")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted override, e.g. --set dqn.batch_size=16")] = None,
) -> None:
    """Train an opponent team by self-play (both teams learn), snapshot it, evaluate every snapshot against a
    random team and the previous snapshot, and pick the last snapshot that beats random by a clear margin."""
    import shlex

    from suPER import selfplay
    from suPER.envs import env_record, opponent_env_names

    # default: the env record's opponent_train_budget (about an hour on 2 shared cores, docs/design.md, "Opponents")
    budget = num_timesteps if num_timesteps is not None else (
        env_record(env).opponent_train_budget if env in opponent_env_names() else 0)
    if budget < 1:
        raise UserError(f"--num-timesteps: expected an integer >= 1, got {budget}")
    if eval_episodes < 1:
        raise UserError(f"--eval-episodes: expected an integer >= 1, got {eval_episodes}")
    overrides = _set_pairs(set_ or [])
    if lr is not None:
        overrides["dqn.lr"] = lr
    command = shlex.join(["super-marl", *sys.argv[1:]]) if sys.argv[1:2] == ["opponents"] else (
        f"super-marl opponents train --env {env} --num-timesteps {budget} --snapshots {snapshots} --seed {seed} "
        f"--eval-episodes {eval_episodes}" + (f" --lr {lr:g}" if lr is not None else ""))
    res = selfplay.run(env, budget, snapshots, seed, out, eval_episodes, overrides, command, install,
                       overwrite=overwrite, threads=threads, log=lambda m: print(m, flush=True))
    c = res["chosen"]
    print(f"chosen {c['snapshot']} ({'meets' if res['rule_met'] else 'does NOT meet'} the selection rule): win rate "
          f"vs random {c['opp_win_rate']:.2f} [{c['opp_win_lo']:.2f}, {c['opp_win_hi']:.2f}] -> {res['weights']}, "
          f"card {res['card']}")


@opponents_app.command("eval")
def opponents_eval(
    env: Annotated[str, typer.Option(help="battle | adversarial_pursuit")],
    team: Annotated[str, typer.Option(help="the learning side: random | a run's checkpoints/final.pt | a team "
                                           ".safetensors file")] = "random",
    opponent: Annotated[str, typer.Option(help="pretrained | random | PATH (.safetensors team or .mixture.json)")] = "pretrained",
    episodes: Annotated[int, typer.Option(help="episodes to play")] = 20,
    seed: Annotated[int, typer.Option(help="env seed of the first episode (and of random / epsilon draws)")] = 1,
    opponent_epsilon: Annotated[float, typer.Option("--opponent-epsilon", help="opponent exploration")] = 0.0,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="accept files in the original's pickle "
                                                                      "format")] = False,
    threads: Annotated[int, typer.Option(help="torch threads")] = 1,
) -> None:
    """Play a team against an opponent for N episodes: mean returns and win rate with 95% CIs."""
    from suPER import opponents as O
    from suPER.envs import opponent_env_names
    from suPER.loop import set_threads
    from suPER.opponents import make_batch

    if env not in opponent_env_names():
        raise UserError(f"--env: expected one of {', '.join(opponent_env_names())}, got {env!r}")
    if episodes < 1:
        raise UserError(f"--episodes: expected an integer >= 1, got {episodes}")
    if threads < 0:
        raise UserError(f"--threads: expected an integer >= 0, got {threads}")
    set_threads(threads)
    cfg = resolve(env, "ddqn", named={"env.opponent": opponent, "env.opponent_epsilon": opponent_epsilon,
                                      "env.opponent_allow_pickle": allow_pickle},
                  labels={"env.opponent": "--opponent", "env.opponent_epsilon": "--opponent-epsilon"})
    e = make_batch(cfg.env, min(episodes, O.MATCH_BATCH), seed=seed)
    try:
        s = O.play(e, O.team_policy(team, e, seed, allow_pickle), episodes, seed).summary(seed)
    finally:
        e.close()
    ci = lambda c: f"[{c[0]:.2f}, {c[1]:.2f}]"  # noqa: E731
    print(f"{env}: team {team} ({e.spec.team}) vs opponent {opponent} ({len(e.spec.opponent_ids)} agents, "
          f"epsilon {opponent_epsilon:g}), {episodes} episodes from seed {seed}")
    print(f"team return      {s['team_return']:8.2f} {ci(s['team_return_ci'])}")
    print(f"opponent return  {s['opponent_return']:8.2f} {ci(s['opponent_return_ci'])}")
    print(f"team win rate    {s['win_rate']:8.2f} {ci(s['win_rate_ci'])}   loss rate {s['loss_rate']:.2f} "
          f"{ci(s['loss_rate_ci'])}   ties {s['tie_rate']:.2f}   mean length {s['episode_len']:.0f}")


# --------------------------------------------------------------------------------------------------
# entry point


def _accepts_overwrite(argv: list[str]) -> bool:
    """Whether the (sub)command that ``argv`` names has an ``--overwrite`` option (``train`` does, ``grid run``
    and ``reproduce`` do not)."""
    cmd: Any = typer.main.get_command(app)  # typer's own (vendored) click classes: duck-typed, not isinstance
    for token in argv:
        if token not in getattr(cmd, "commands", {}):
            break
        cmd = cmd.commands[token]
    return any(p.name == "overwrite" for p in cmd.params)


def input_error_line(exc: ValueError, argv: list[str]) -> str:
    """A typed input error as the user reads it; a run-folder error's start-over remedy in the words of the
    command typed (``RunFolderError.message``): ``train`` has ``--overwrite``, ``grid run`` and ``reproduce``
    do not (they start over a run whose folder is moved aside)."""
    from suPER.runs import RunFolderError

    line = exc.message(can_overwrite=_accepts_overwrite(argv)) if isinstance(exc, RunFolderError) else str(exc)
    if line.startswith("--out: ") and not any(a == "--out" or a.startswith("--out=") for a in argv):
        line = line.removeprefix("--out: ")  # the folder was the default: name it, not a flag nobody typed
    return line


def main(argv: list[str] | None = None) -> int:
    """Console entry point: translate paper spellings, run typer, and turn every outcome into an exit code.

    0 success, 1 a failure the command reports (failed runs of ``grid run``, failed jobs of ``grid submit
    --wait``), 2 bad input (one line ``error: <flag>: ...``), 130 an interrupt (Ctrl-C). Why explicit: in
    non-standalone mode typer *returns* the code of ``typer.Exit`` (and turns Ctrl-C into ``Exit(130)``)
    instead of exiting, so ignoring the return value made all of these exit 0.
    """
    import os

    for stream in (sys.stdout, sys.stderr):  # an ASCII-only PYTHONIOENCODING must not turn a path into a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        os.getcwd()
    except FileNotFoundError:
        print("error: the current directory no longer exists (deleted while this shell was in it); cd to an "
              "existing folder", file=sys.stderr)
        return 2
    try:  # typer >= 0.29 vendors click as typer._click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions as click_exc

    argv = list(sys.argv[1:] if argv is None else argv)
    as_typed = list(argv)  # the command to run again after an interrupt, in the user's own spellings
    typed: dict[str, str] = {}
    try:
        argv, notes = translate_paper_args(argv, typed)
        for n in notes:
            print(n, file=sys.stderr)
        code = app(args=argv, prog_name="super-marl", standalone_mode=False, obj={"typed": typed})
    except typer.Exit as exc:
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except click_exc.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(exc.format_message(), file=sys.stderr)
            return 0
        print(f"error: {exc.format_message()}".replace("\n", " "), file=sys.stderr)
        return 2
    except (UserError, C.ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a run that could not start its W&B logging, or stopped on a failed write
        from suPER.runs import RunFailure, WandbError

        if isinstance(exc, (WandbError, RunFailure)):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
    except ValueError as exc:  # a run folder that cannot be used as asked: typed, not told by its message
        from suPER.runs import RunFolderError

        if isinstance(exc, RunFolderError):
            print(f"error: {input_error_line(exc, argv)}", file=sys.stderr)
            return 2
        raise
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0  # a command's None return: success
    if code == 130:
        import shlex

        print(f"interrupted: to resume from the latest checkpoints, run the same command again: "
              f"{shlex.join(['super-marl', *as_typed])}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
