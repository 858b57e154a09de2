"""``super-marl reproduce FIGURE``: one command from a figure's grid file to its figure and tables.

The figure's grid (``FIGURES``) is expanded as ``grid run`` would, optionally scaled to a fraction F of the
paper's budgets (``run.num_timesteps`` of ``experiments/envs/<env>.yaml``: pursuit 800k, battle 300k,
adversarial pursuit 600k env steps) and optionally layered with another grid file's ``defaults`` /
``env_defaults`` (``--layer experiments/smoke.yaml``: small maps, MLP nets, for checks). Before anything
runs, the plan is printed: runs, env steps still to train and an estimated wall time, each run to do priced by
``suPER.costs`` (the median training seconds per env step and evaluation seconds per episode of the finished runs
of its env and protocol, under the output folder first, then in the committed Figure 1 records; the source is
printed), an unfinished run for the env steps it has left, summed and divided by the runs at a time (this
machine's CPUs / CPUs per run). The runs then go through the same code as ``grid run``
(Ray Tune, ``campaigns.run_grid``) or, with ``--address``, ``grid submit`` (one job per run, waited for);
finished runs are skipped and unfinished ones resume, so running the command again continues. It ends by
drawing the figure, the final-performance table, the claim table and the aggregates (``analysis.report``)
and the marl-eval JSON into ``OUT/figures/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suPER import config as C
from suPER import costs
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
                   title="Figure 1: the learning team's greedy evaluation return over training, SUPER against the baselines"),
    "bandwidth": Figure("bandwidth", "experiments/bandwidth_sweep.yaml", claims=False,
                        title="SUPER's bandwidth: the learning team's greedy evaluation return over training on pursuit"),
}
"""``reproduce FIGURE`` -> its grid."""

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


@dataclass
class Estimate:
    """The printed plan: runs, what the runs to do still need (``costs.ToGo``) and how many run at a time."""

    runs: int
    todo: list[GridRun]
    finished: int
    to_go: costs.ToGo
    parallel: int

    @property
    def wall_seconds(self) -> float:
        """The runs' seconds over ``parallel`` (the runs are many more than the cores)."""
        return self.to_go.seconds / max(1, self.parallel)


def estimate(runs: Sequence[GridRun], out: Path, parallel: int) -> Estimate:
    """Sort runs into finished / to do (``campaigns.plan_runs``) and price those to do (``costs``: the finished runs
    under ``out`` first, then the committed Figure 1 records); an unfinished run counts the env steps it has left."""
    from suPER.campaigns import plan_runs
    from suPER.runs import RunFolder

    plan = plan_runs(runs, Path(out).resolve())
    progress = [RunFolder(Path(out) / r.run_name).progress() for r in plan.todo]
    left = [(r.config(), p.env_steps if p is not None else 0) for r, p in zip(plan.todo, progress, strict=True)]
    return Estimate(len(runs), plan.todo, len(plan.finished), costs.to_go(left, costs.Pricing.of(out)), parallel)


def describe(figure: str, est: Estimate, out: Path, where: str) -> str:
    """The plan as printed before anything runs."""
    go = est.to_go
    lines = [f"reproduce {figure}: {est.runs} runs ({est.finished} finished, {len(est.todo)} to run), "
             f"{go.env_steps:,} env steps to train -> {out}"]
    if go.sources:
        lines.append(f"estimated wall time {where}: {costs.hours(est.wall_seconds)} ({costs.hours(go.seconds)} of "
                     f"runs, {est.parallel} at a time; training, evaluations and checkpoints)")
        lines.append(go.rates_line())
    if go.unpriced:
        lines.append(go.unpriced_line())
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


def cluster_plan(grid: Grid, runs: Sequence[GridRun], out: str, cpus: float) -> Any:
    """The ``grid submit`` jobs (one per run) of the figure's runs."""
    from suPER.campaigns import plan_jobs

    return plan_jobs(grid, runs, out, per="run", cpus=cpus)
