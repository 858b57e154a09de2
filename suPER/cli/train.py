"""``super-marl train``: its options generated from the option table (``suPER.flags``), one run folder per seed.

The command's signature is built from ``FLAGS`` (``train_signature``): each option's type, help, ``--help`` panel and
default come from its record and the config field it sets, so adding a setting to the CLI is one ``Flag`` line.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from suPER import config as C
from suPER.cli.common import UserError, check_with_env, typed_flags
from suPER.cli.paper import PAPER_IGNORED, PAPER_SPECIAL
from suPER.flags import (
    FLAG_KEYS,
    FLAGS,
    PAPER,
    PAPER_ONLY,
    SUPER_ONLY_FLAGS,
    Flag,
    default_text,
    help_text,
    named_settings,
    value_type,
)
from suPER.resolve import from_dict, resolve

CONFIG_FILE_FLAGS = ("out", "overwrite", "skip_finished", "progress", "device", "threads", "wandb", "wandb_project",
                     "wandb_group", "wandb_mode", "eval_parallel", "backend")
"""Options that may go with ``--config``: where the run goes and how it is executed, never what it trains
(``config.VOLATILE_RUN_KEYS``)."""


def _parameter(f: Flag) -> inspect.Parameter:
    """The typer parameter of one option: keys default to None (the config decides), command options to their own."""
    typ = value_type(f)
    default = None if f.key is not None else f.default
    annotation = typ if default is not None else typ | None
    shown = default_text(f)
    option = typer.Option(f.option, help=help_text(f), rich_help_panel=f.panel,
                          show_default=shown if shown is not None else False)
    if f.name == "set":
        option.metavar = "KEY=VALUE"
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, option],
                             default=default)


def _paper_parameters() -> list[inspect.Parameter]:
    """The original's spellings that have no option of their own, listed in their ``--help`` panel. They never
    reach the command: ``main`` rewrites them first (``suPER.cli.paper``)."""
    rows = {**{f.paper: f"--set {f.key}=VALUE" for f in PAPER_ONLY if f.paper},
            **{p: m for p, m in PAPER_SPECIAL.items() if p != "--env"}}
    return [inspect.Parameter(f"paper_{k}", inspect.Parameter.KEYWORD_ONLY, default=None,
                              annotation=Annotated[str | None, typer.Option(p, help=m, rich_help_panel=PAPER,
                                                                           show_default=False, metavar="VALUE")])
            for k, (p, m) in enumerate(rows.items())]


def _config_parameter() -> inspect.Parameter:
    return inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--config", metavar="FILE|JSON", rich_help_panel=FLAGS[0].panel,
                                 help="train exactly a run's recorded config.json (or its JSON text); only options "
                                      "that say where and how it runs may go with it")])


def train_signature() -> inspect.Signature:
    """``train``'s typer signature: every ``FLAGS`` record, ``--config``, then the paper spellings."""
    return inspect.Signature([*(_parameter(f) for f in FLAGS), _config_parameter(), *_paper_parameters()])


def train(**opts: Any) -> None:
    """Train independent DQN learners (with optional SUPER relay), or a baseline (see --algo), and write a run folder
    per seed.

    Settings not named here: --set KEY=VALUE (docs/reference.md lists every key). The original main.py's
    spellings work too (the last panel, and each option's "paper:"); these are accepted and ignored:
    PAPER_IGNORED.
    """
    typed = typed_flags()

    def label(name: str) -> str:
        flag = "--" + name.replace("_", "-")
        return typed.get(flag, flag)

    backend, num_seeds, pack, overwrite = opts["backend"], opts["num_seeds"], opts["pack"], opts["overwrite"]
    from suPER.algorithms import BACKENDS

    if backend not in BACKENDS:
        raise UserError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if num_seeds < 1:
        raise UserError(f"{label('num_seeds')}: expected an integer >= 1, got {num_seeds}")
    if pack and opts["eval_parallel"]:  # a pack evaluates in-process: say so instead of running with a note
        raise UserError(f"{label('eval_parallel')}: packed runs evaluate in-process; drop it or --pack")
    if opts["eval_episodes"] == 0:  # 0 is for trainers that skip evaluation (best responses), not a run's curve
        raise UserError(f"{label('eval_episodes')}: expected an integer >= 1 (every evaluation plays them), got 0")
    cfgs = _from_config_file(opts, label) if opts["config"] is not None else _from_flags(opts, label, typed)
    packed: list[C.ExperimentConfig] = []
    for i, (cfg, labels) in enumerate(cfgs):
        if i == 0:
            from suPER.opponents import check_opponent

            check_opponent(cfg.env)  # a bad weights file is a one-line error before any folder is written
            check_with_env(cfg, labels)
        if (opts["skip_finished"] or num_seeds > 1) and not overwrite:  # rerun after a crash = resume the rest
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


train.__doc__ = "\n\n".join(" ".join(paragraph.split()) for paragraph in (train.__doc__ or "").split("\n\n")).replace(
    "PAPER_IGNORED", ", ".join(PAPER_IGNORED))  # one line per paragraph: rich keeps a docstring's line breaks
train.__signature__ = train_signature()  # type: ignore[attr-defined]


def _from_flags(opts: dict[str, Any], label: Callable[[str], str],
                typed: dict[str, str]) -> list[tuple[C.ExperimentConfig, dict[str, str]]]:
    """The runs' configs from the setting flags: named flags, ``--set``, then one config per seed."""
    env, algo = opts["env"], opts["algo"]
    flags = {name: opts[name] for name in (*FLAG_KEYS, "quick", "legacy", "protocol")}
    _check_super_settings(flags, label)
    named, labels = named_settings(env, flags, label)
    for name in ("seed", "out", "progress"):
        if opts[name] is not None:
            named[f"run.{name}"], labels[f"run.{name}"] = opts[name], label(name)
    labels["run.algo"], labels["env.name"] = label("algo"), label("env")
    overrides = C.parse_set_pairs(opts["set"] or [])
    labels.update({key: typed.get(f"--set {key}", f"--set {key}") for key in overrides})
    first = resolve(env, algo, overrides=overrides, named=named, labels=labels)
    return [(first, labels)] + [
        (resolve(env, algo, overrides=overrides, named={**named, "run.seed": first.run.seed + i}, labels=labels),
         labels) for i in range(1, opts["num_seeds"])]


def _from_config_file(opts: dict[str, Any],
                      label: Callable[[str], str]) -> list[tuple[C.ExperimentConfig, dict[str, str]]]:
    """The run's config from ``--config`` (a config.json, or its JSON text), with only the options that say where
    and how it runs (``CONFIG_FILE_FLAGS``) laid over it.

    Raises:
        UserError: an unreadable file or text, or a setting flag given with it (naming the flag).
    """
    defaults = {f.name: (None if f.key is not None else f.default) for f in FLAGS}
    clash = [n for n, v in opts.items() if n in defaults and n not in CONFIG_FILE_FLAGS and v != defaults[n]]
    if clash:
        raise UserError(f"{label(clash[0])}: not with --config (the file decides every setting; edit it, or drop "
                        f"--config)")
    text = opts["config"]
    where = "--config"
    if not text.lstrip().startswith("{"):
        path = Path(text)
        where = f"--config {text}"
        if not path.is_file():
            raise UserError(f"{where}: expected a config.json file (or its JSON text), got "
                            f"{'a folder' if path.is_dir() else 'no such file'}")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{where}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: expected JSON, got an error at line {exc.lineno} column {exc.colno}: "
                        f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a JSON object (a run's config.json), got {type(data).__name__}")
    run_fields = {f.name for f in FLAGS if f.key == f"run.{f.name}"}  # --out -> run.out, ...; not --overwrite
    run = {f"run.{n}": opts[n] for n in CONFIG_FILE_FLAGS if n in run_fields and opts[n] is not None}
    try:
        cfg = from_dict({**data, "run": {**data.get("run", {}), **{k[4:]: v for k, v in run.items()}}})
    except C.ConfigError as exc:
        raise UserError(f"{where}: {exc}") from None
    return [(cfg, {k: label(k[4:]) for k in run})]


def _check_super_settings(flags: dict[str, Any], label: Callable[[str], str]) -> None:
    """A SUPER setting given while SUPER was never switched on is refused, naming both flags: ``--bandwidth 0.3``
    alone would otherwise train plain DDQN without a word. ``--no-super`` / ``--suPER False`` typed with it is the
    user's own choice (the original's grid passed ``--suPER=False --suPER_bandwidth=0.0``) and is accepted.

    Raises:
        UserError: naming the setting as typed and the switch.
    """
    given = [name for name in SUPER_ONLY_FLAGS if flags.get(name) is not None]
    if given and flags.get("super") is None:
        raise UserError(f"{label(given[0])}: is a SUPER setting, but SUPER is off: add {label('super')} (paper: "
                        f"--suPER True) to relay, or leave {label(given[0])} out")


def _trainer(backend: str, algo: str = "ddqn") -> Any:
    """The ``train(cfg, folder, logger, progress) -> Summary`` function of a backend (imported lazily)."""
    from suPER.campaigns import trainer_for

    try:
        return trainer_for(backend, algo)
    except C.ConfigError as exc:
        raise UserError(str(exc)) from exc


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
        console.print(f"[bold]{cfg.run_name}[/]: {plan_line(cfg, backend)} {what} {folder.path}", soft_wrap=True)
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


def plan_line(cfg: C.ExperimentConfig, backend: str = "native") -> str:
    """The run's plan in one line: env, algorithm, env steps, evaluations and an estimated time (at the committed
    Figure 1 records' rates, ``suPER.costs``, stated as an estimate; native runs only, what the records measured),
    naming ``--quick`` when it is longer than an hour."""
    from suPER import costs

    evals = cfg.run.num_timesteps // cfg.eval_interval + 1
    text = (f"{cfg.env.name}, {cfg.run.algo}"
            f"{', SUPER ' + cfg.relay.mode + ' b=' + str(cfg.relay.bandwidth) if cfg.relay.enabled else ''}, "
            f"{cfg.run.num_timesteps:,} env steps, {evals} evaluations x {cfg.run.eval_episodes} episodes")
    rates = costs.Pricing.of().price(cfg) if backend == "native" else None
    seconds = None if rates is None else costs.seconds_left(cfg, rates)
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

