"""``super-marl reproduce FIGURE``: one command from a figure's grid file to its figure and tables.

The figure's grid (``FIGURES``) is expanded as ``grid run`` would, optionally scaled to a fraction F of the
paper's budgets (``run.num_timesteps`` of ``experiments/envs/<env>.yaml``: pursuit 800k, battle 300k,
adversarial pursuit 600k env steps) and optionally layered with another grid file's ``defaults`` /
``env_defaults`` (``--layer experiments/smoke.yaml``: small maps, MLP nets, for checks). Before anything
runs, the plan is printed: runs, env steps still to train and an estimated wall time::

    wall ~= sum over runs to do of (env steps left x pace[env]) / parallel runs

with ``pace[env]`` the median wall seconds per env step of the runs of that env already under the output
folder, finished or not (``wall_time_s / env_steps`` of their last evaluation row: training, evaluations
and checkpoints at this campaign's evaluation density and parallelism, on this machine); for an env with
no run there yet, ``1 / DEFAULT_THROUGHPUT[env] + evaluation steps per env step x DEFAULT_EVAL_S_PER_STEP[env]``
(measured in the Figure 1 campaign, stated with its source). ``parallel runs`` = this machine's CPUs / CPUs
per run (locally). An unfinished run counts the env steps it has left (its last evaluation row).
The runs then go through the same code as ``grid run``
(Ray Tune, ``campaigns.run_grid``) or, with ``--address``, ``grid submit`` (one job per run, waited for);
finished runs are skipped and unfinished ones resume, so running the command again continues. It ends by
drawing the figure, the final-performance table, the claim table and the aggregates (``analysis.report``)
and the marl-eval JSON into ``OUT/figures/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suPER import config as C
from suPER.campaigns.grid import Grid, GridRun, _load_raw, _merge, load_grid, parse_filter
from suPER.resolve import resolve


@dataclass(frozen=True)
class Figure:
    """A figure of the paper: the grid file that makes it and whether the SUPER claims apply."""

    name: str
    grid: str
    """grid file, relative to the repository root"""
    claims: bool
    """draw the claim table and the aggregates across envs (Figure 1); the sweep has one env and no baselines"""
    title: str = ""
    """the figure's title"""


FIGURES = {
    "fig1": Figure("fig1", "experiments/fig1.yaml", claims=True,
                   title="Figure 1: the learning team's return in training, SUPER against the baselines"),
    "bandwidth": Figure("bandwidth", "experiments/bandwidth_sweep.yaml", claims=False,
                        title="SUPER's bandwidth: the learning team's return in training on pursuit"),
}
"""``reproduce FIGURE`` -> its grid."""

DEFAULT_THROUGHPUT = {"pursuit": 21.5, "battle": 4.75, "adversarial_pursuit": 7.6}
"""Training env steps/s per run (evaluations and checkpoints excluded) where no run under OUT shows a pace."""

DEFAULT_EVAL_S_PER_STEP = {"pursuit": 3.6 / 500, "battle": 12.5 / 500, "adversarial_pursuit": 10.8 / 500}
"""Seconds per env step of greedy evaluation (checkpoint writing included), where no run under OUT shows a pace."""

DEFAULT_THROUGHPUT_SOURCE = (
    "default: measured in the Figure 1 campaign on this project's 2-core machine (AMD EPYC, 2 GHz), two runs side "
    "by side with other work on the machine, commit c083f22, medians over its runs: training pursuit 21.5, battle "
    "4.75, adversarial pursuit 7.6 env steps/s per run; evaluation with checkpoint 3.6 / 12.5 / 10.8 s per "
    "500-step episode (MAgent evaluation there was sequential; batched since, so faster)")


def default_pace(cfg: C.ExperimentConfig) -> float:
    """Wall seconds per env step of a run at the default rates (``DEFAULT_THROUGHPUT``, ``DEFAULT_EVAL_S_PER_STEP``,
    measured in the Figure 1 campaign), evaluations included: ``1 / rate + evaluation steps per env step x
    evaluation cost``. KeyError for an env without a measured rate."""
    n = cfg.run.num_timesteps
    eval_steps = (n // cfg.eval_interval + 1) * cfg.run.eval_episodes * cfg.env.horizon  # the step-0 one too
    return 1 / DEFAULT_THROUGHPUT[cfg.env.name] + eval_steps / n * DEFAULT_EVAL_S_PER_STEP[cfg.env.name]


def run_seconds(cfg: C.ExperimentConfig) -> float | None:
    """Estimated wall seconds of one DQN-family run (``default_pace`` x its budget); None where no rate was measured
    (another env or algorithm)."""
    if cfg.env.name not in DEFAULT_THROUGHPUT or C.ALGORITHMS[cfg.run.algo].section != "dqn":
        return None
    return cfg.run.num_timesteps * default_pace(cfg)


def paper_budget(env: str) -> int:
    """The paper's training budget of ``env`` in env steps (its resolved ``run.num_timesteps``: the env YAML's value,
    or the dataclass default where the YAML does not restate it)."""
    return resolve(env).run.num_timesteps


def figure_runs(figure: str, fraction: float | None = None, seeds: int | None = None,
                envs: Sequence[str] = (), layer: Path | None = None,
                filters: Sequence[str] = (), protocol: str | None = "paper") -> tuple[Grid, list[GridRun]]:
    """The runs of a figure: its grid under a protocol, scaled to ``fraction`` of the paper budgets and layered.

    Args:
        figure: key of ``FIGURES``.
        fraction: budget per run = ``max(1, round(fraction * paper_budget(env)))``; None keeps the grid's.
        seeds: seeds 1..N instead of the grid's.
        envs: only these envs (all when empty).
        layer: a grid file whose ``defaults`` and ``env_defaults`` go over every run (its entries are ignored).
        filters: ``--filter`` selections as in ``grid run`` (``campaigns.grid.matches``).
        protocol: ``paper`` (the original's behaviour, ``config.paper_protocol_settings``) or ``ours`` for every
            run; None keeps each entry's own.

    Raises:
        ConfigError: bad figure, fraction, seeds or env (one line naming the flag); GridError from the files.
    """
    if figure not in FIGURES:
        raise C.ConfigError(f"FIGURE: expected one of {', '.join(FIGURES)}, got {figure!r}")
    if fraction is not None and not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise C.ConfigError(f"--fraction: expected a number in (0, 1], got {fraction}")
    if seeds is not None and seeds < 1:
        raise C.ConfigError(f"--seeds: expected an integer >= 1, got {seeds}")
    if protocol is not None and protocol not in C.PROTOCOLS:
        raise C.ConfigError(f"--protocol: expected one of {', '.join(C.PROTOCOLS)}, got {protocol!r}")
    grid = load_grid(C.ROOT / FIGURES[figure].grid, seeds=seeds)
    present = list(dict.fromkeys(r.env for r in grid.runs))
    for e in envs:
        if e not in present:
            raise C.ConfigError(f"--env: expected one of {', '.join(present)}, got {e!r}")
    defaults: dict[str, Any] = {}
    env_defaults: dict[str, dict[str, Any]] = {}
    if layer is not None:
        if not Path(layer).is_file():
            raise C.ConfigError(f"--layer: expected a grid file, got {str(layer)!r} (no such file)")
        raw = _load_raw(Path(layer), ())
        defaults, env_defaults = raw["defaults"], raw["env_defaults"]
    runs: list[GridRun] = []
    for f in filters:
        parse_filter(f)  # unknown keys fail before anything is selected
    for r in grid.select(filters):
        if (envs and r.env not in envs) or r.pending:
            continue
        flags = _merge({**r.flags, "set": r.overrides}, defaults, env_defaults.get(r.env, {}))
        overrides = dict(flags.pop("set", {}))
        if fraction is not None:
            flags["num_timesteps"] = max(1, round(fraction * paper_budget(r.env)))
        if protocol is not None:
            flags["protocol"] = protocol
            flags.pop("legacy", None)  # the protocol decides
        runs.append(dataclasses.replace(r, flags=flags, overrides=overrides, _run_name=""))
    return grid, runs


def default_out(grid: Grid, fraction: float | None, layer: Path | None) -> Path:
    """``runs/<grid name>`` at the grid's budgets, ``runs/<grid name>-f<F>[-<layer>]`` otherwise, so campaigns
    of different budgets never share run folders."""
    name = grid.name + (f"-f{fraction:g}" if fraction is not None else "") + (f"-{Path(layer).stem}" if layer else "")
    return Path("runs") / name


def measured_pace(out: Path) -> dict[str, tuple[float, int]]:
    """Per env, the median wall seconds per env step of the run folders under ``out`` that are past their step-0
    evaluation, finished or not, and how many runs that is (``wall_time_s / env_steps`` of the last row)."""
    from statistics import median

    from suPER.runs import RunFolder

    seen: dict[str, list[float]] = {}
    for config in Path(out).glob("*/config.json") if Path(out).is_dir() else []:
        progress = RunFolder(config.parent).progress()
        try:
            env = json.loads(config.read_text())["env"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if progress is not None and progress.env_steps > 0 and progress.wall_time_s > 0:  # NaN fails too
            seen.setdefault(env, []).append(progress.wall_time_s / progress.env_steps)
    return {e: (float(median(v)), len(v)) for e, v in seen.items()}


@dataclass
class Estimate:
    """The printed plan: runs, env steps and the estimated time."""

    runs: int
    todo: list[GridRun]
    finished: int
    env_steps: int
    """env steps still to train (finished runs count 0, unfinished ones what they have left)"""
    run_seconds: float
    """sum over runs to do of their estimated time, one run per CPU"""
    parallel: int
    pace: dict[str, tuple[float, str]]
    """env -> (wall seconds per env step, evaluations included; where the number comes from)"""

    @property
    def wall_seconds(self) -> float:
        """``run_seconds / parallel`` (the runs are many more than the cores)."""
        return self.run_seconds / max(1, self.parallel)


def estimate(runs: Sequence[GridRun], out: Path, parallel: int) -> Estimate:
    """Sort runs into finished / to do (``campaigns.plan_runs``) and estimate the time of those to do."""
    from suPER.campaigns import plan_runs
    from suPER.runs import RunFolder

    plan = plan_runs(runs, Path(out).resolve())
    measured = measured_pace(out)
    pace: dict[str, tuple[float, str]] = {}
    steps = 0
    seconds = 0.0
    for r in plan.todo:
        cfg = r.config()
        n = cfg.run.num_timesteps
        if r.env not in pace:
            if r.env in measured:
                value, count = measured[r.env]
                pace[r.env] = (value, f"median of {count} run(s) there")
            else:
                pace[r.env] = (default_pace(cfg), "default")
        progress = RunFolder(Path(out) / r.run_name).progress()
        left = max(n - progress.env_steps, 0) if progress is not None else n
        steps += left
        seconds += left * pace[r.env][0]
    return Estimate(len(runs), plan.todo, len(plan.finished), steps, seconds, parallel, pace)


def describe(figure: str, est: Estimate, out: Path, where: str) -> str:
    """The plan as printed before anything runs."""
    def hours(s: float) -> str:
        return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"

    lines = [f"reproduce {figure}: {est.runs} runs ({est.finished} finished, {len(est.todo)} to run), "
             f"{est.env_steps:,} env steps to train -> {out}"]
    if est.todo:
        lines.append(f"estimated wall time {where}: {hours(est.wall_seconds)} ({hours(est.run_seconds)} of runs, "
                     f"{est.parallel} at a time; training, evaluations and checkpoints)")
        lines.append("pace: " + ", ".join(f"{e} {v:.3g} s per env step ({src})" for e, (v, src) in est.pace.items()))
        if any(src == "default" for _, src in est.pace.values()):
            lines.append(DEFAULT_THROUGHPUT_SOURCE)
    return "\n".join(lines)


def draw(figure: str, out: Path, n_resamples: int = 2000) -> dict[str, Path]:
    """Figure, final-performance table, (claims and aggregates) and marl-eval JSON into ``out/figures``."""
    from suPER import analysis, export, plotting

    curves = plotting.load_run_curves(plotting.find_run_folders([out]))
    figures = Path(out) / "figures"
    paths = plotting.report(curves, figures, title=FIGURES[figure].title, name=figure,
                            n_resamples=n_resamples)
    if FIGURES[figure].claims:
        paths.update(analysis.report(curves, figures, n_resamples=n_resamples, name=figure,
                                     log=lambda line: print(line, flush=True)))
    paths["marl_eval"] = export.write_marl_eval(curves, figures / f"{figure}_marl_eval.json",
                                                warn=lambda line: print(line, flush=True))
    return paths


def local_parallel(cpus_per_trial: float) -> int:
    """Runs Ray Tune keeps side by side here: CPUs / CPUs per run."""
    return max(1, int((os.cpu_count() or 1) // max(cpus_per_trial, 1e-9)))


def cluster_plan(grid: Grid, runs: Sequence[GridRun], out: str, cpus: float) -> Any:
    """The ``grid submit`` jobs (one per run) of the figure's runs."""
    from suPER.campaigns import plan_jobs

    return plan_jobs(grid, runs, out, per="run", cpus=cpus)
