"""Learning curves and campaign figures drawn from run folders' metrics.csv (optionally from W&B).

``plot_curve`` draws one run's curve (``curve.png`` in every run folder). The campaign functions read
many runs, group them by (env, configuration), and produce the paper-style figure (one panel per env,
mean with a 95% bootstrap band over seeds) and a final-performance table (mean and IQM with 95%
bootstrap CIs), using ``scipy.stats.bootstrap`` for every interval.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suPER.config import ENV_NAMES
from suPER.runs import atomic_write_bytes, atomic_write_text, read_metrics


def plot_curve(run_dirs: Sequence[Path], out_png: Path, title: str = "", metric: str = "team_return_mean") -> Path:
    """Plot ``metric`` against env steps for each run folder (one line each; std band when present).

    Args:
        run_dirs: run folders holding metrics.csv.
        out_png: where to write the picture (atomically).
        title: figure title.
        metric: metrics.csv column on the y axis.

    Returns:
        ``out_png``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for run_dir in run_dirs:
        cols = read_metrics(Path(run_dir) / "metrics.csv")
        if not cols:
            continue
        x, y = cols["env_steps"], cols[metric]
        (line,) = ax.plot(x, y, marker="o", ms=3, label=Path(run_dir).name)
        std = cols.get(metric.replace("_mean", "_std"))
        if std is not None and metric.endswith("_mean"):
            ax.fill_between(x, y - std, y + std, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_write_bytes(Path(out_png), lambda p: fig.savefig(p, format="png"))
    plt.close(fig)
    return Path(out_png)


# --------------------------------------------------------------------------------------------------
# campaigns: many runs -> per-env panels with bootstrap bands, and a final-performance table

DEFAULT_METRIC = "team_return_mean"
"""metrics.csv column the paper's figures show (W&B key ``charts/<metric>``)."""


@dataclass
class RunCurve:
    """One run's learning curve and what identifies it.

    Attributes:
        env: environment name (one figure panel per env).
        label: the configuration (one curve per label): the run name without env and seed.
        seed: run seed.
        steps: env steps of each evaluation, float [K].
        values: the metric at each evaluation, float [K].
        source: run folder or W&B run path.
    """

    env: str
    label: str
    seed: int
    steps: np.ndarray
    values: np.ndarray
    source: str


def configuration_label(config: dict[str, Any]) -> str:
    """``pursuit__ddqn_super_quantile__s3__bw005`` -> ``ddqn_super_quantile [bw005]`` (from a config dict)."""
    run = config.get("run", {})
    if run.get("name"):
        return str(run["name"])
    relay, dqn = config.get("relay", {}), config.get("dqn", {})
    algo = str(run.get("algo", "?")) + (f"_super_{relay.get('mode')}" if relay.get("enabled") else "")
    if dqn.get("parameter_sharing"):
        algo += "_ps"
    return f"{algo} [{run['tag']}]" if run.get("tag") else algo


def find_run_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Run folders (holding metrics.csv and config.json) at or below ``paths``; globs are expanded.

    Raises:
        FileNotFoundError: a path or glob matches nothing.
    """
    found: list[Path] = []
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(str(p)))] if glob.has_magic(str(p)) else [Path(p)]
        if not matches or not all(m.exists() for m in matches):
            raise FileNotFoundError(f"{p}: no such run folder or campaign folder")
        for m in matches:
            if (m / "metrics.csv").is_file() and (m / "config.json").is_file():
                found.append(m)
            elif m.is_dir():
                found += sorted(c.parent for c in m.rglob("metrics.csv") if (c.parent / "config.json").is_file()
                                and ".tune" not in c.parts)
    return list(dict.fromkeys(found))


def load_run_curves(folders: Iterable[Path], metric: str = DEFAULT_METRIC,
                    tags: Sequence[str] = ()) -> list[RunCurve]:
    """Read ``metric`` against env steps from each run folder (optionally only runs with one of ``tags``)."""
    curves: list[RunCurve] = []
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        if tags and config.get("run", {}).get("tag", "") not in tags:
            continue
        cols = read_metrics(folder / "metrics.csv")
        if not cols or metric not in cols:
            continue
        steps, values = cols["env_steps"].astype(float), cols[metric].astype(float)
        ok = ~np.isnan(values)
        curves.append(RunCurve(config["env"]["name"], configuration_label(config), int(config["run"]["seed"]),
                               steps[ok], values[ok], str(folder)))
    return _disambiguate(curves)


def load_wandb_curves(project: str, entity: str | None = None, metric: str = DEFAULT_METRIC, api: Any = None,
                      filters: dict[str, Any] | None = None) -> list[RunCurve]:
    """Read learning curves of runs logged to W&B (online; needs ``WANDB_API_KEY`` or ``wandb login``).

    Runs are recognised by the config our trainer logs (``cfg.to_dict()``); the metric is the
    namespaced key ``charts/<metric>`` and the x axis W&B's step, which is the env step.

    Args:
        project: W&B project.
        entity: W&B entity (user or team); None = the API key's default entity.
        metric: metrics.csv column name.
        api: a ``wandb.Api`` (or a stand-in in tests); None creates one.
        filters: MongoDB-style run filters passed to ``api.runs`` (e.g. ``{"group": "paper"}``).
    """
    if api is None:
        import wandb

        api = wandb.Api(timeout=60)
    key = f"charts/{metric}"
    curves: list[RunCurve] = []
    for run in api.runs(f"{entity}/{project}" if entity else project, filters=filters or {}):
        config = dict(run.config)
        if "env" not in config or "run" not in config:
            continue  # not one of ours
        rows = [r for r in run.scan_history(keys=["_step", key]) if r.get(key) is not None]
        if not rows:
            continue
        steps = np.array([float(r["_step"]) for r in rows])
        values = np.array([float(r[key]) for r in rows])
        order = np.argsort(steps, kind="stable")
        curves.append(RunCurve(config["env"]["name"], configuration_label(config), int(config["run"]["seed"]),
                               steps[order], values[order], f"wandb:{'/'.join(run.path)}"))
    return _disambiguate(curves)


def _disambiguate(curves: list[RunCurve]) -> list[RunCurve]:
    """When two runs share (env, configuration, seed), prefix labels with their parent folder name."""
    keys = [(c.env, c.label, c.seed) for c in curves]
    if len(set(keys)) == len(keys):
        return curves
    for c in curves:
        c.label = f"{Path(c.source).parent.name}/{c.label}"
    return curves


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average over ``window`` evaluations (edges use the nearest values); 1 = unchanged."""
    if window <= 1 or len(values) < 2:
        return values
    from scipy.ndimage import uniform_filter1d

    return uniform_filter1d(values.astype(float), size=window, mode="nearest")


@dataclass
class Band:
    """Mean curve of one configuration with a 95% bootstrap confidence band over seeds."""

    env: str
    label: str
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int


def bootstrap_ci(samples: np.ndarray | tuple[np.ndarray, ...], statistic: Any, n_resamples: int = 2000,
                 seed: int = 0, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of ``statistic`` over axis 0 (runs) with ``scipy.stats.bootstrap``.

    A tuple of samples is a stratified bootstrap: each stratum (a configuration, an env) is resampled
    on its own, with its own size, and ``statistic(*strata, axis)`` sees one resample of each, as
    rliable resamples runs within each task.

    Args:
        samples: [R, ...] one row per run, or a tuple of such arrays (strata).
        statistic: ``f(x, axis)`` (e.g. ``np.mean`` or the IQM), or ``f(*strata, axis)``.
        n_resamples: bootstrap resamples.
        seed: generator seed (figures are reproducible).
        confidence: confidence level.

    Returns:
        (low, high), NaN where a stratum has fewer than two runs.
    """
    from scipy.stats import bootstrap

    strata = samples if isinstance(samples, tuple) else (samples,)
    if min(s.shape[0] for s in strata) < 2:
        shape = np.shape(statistic(*strata, axis=0))
        nan = np.full(shape, np.nan)
        return nan, nan.copy()
    res = bootstrap(strata, statistic, axis=0, vectorized=True, n_resamples=n_resamples,
                    confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)


def iqm(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Interquartile mean (25% trimmed mean, as rliable's IQM) along ``axis``."""
    from scipy.stats import trim_mean

    return np.asarray(trim_mean(x, 0.25, axis=axis))


def _groups(curves: Sequence[RunCurve]) -> dict[tuple[str, str], list[RunCurve]]:
    groups: dict[tuple[str, str], list[RunCurve]] = {}
    for c in curves:
        groups.setdefault((c.env, c.label), []).append(c)
    return dict(sorted(groups.items()))


def aggregate(curves: Sequence[RunCurve], smoothing: int = 1, n_resamples: int = 2000) -> list[Band]:
    """Per (env, configuration): mean over runs and a 95% bootstrap band at each common evaluation step.

    Runs of one configuration are aligned on the env steps they all evaluated at (evaluations happen at
    exact multiples of the interval); if they share fewer than two, they are interpolated onto 50
    points of their common range.
    """
    bands: list[Band] = []
    for (env, label), group in _groups(curves).items():
        common = set(group[0].steps.tolist())
        for c in group[1:]:
            common &= set(c.steps.tolist())
        x = np.array(sorted(common))
        if len(x) < 2:
            lo, hi = max(c.steps.min() for c in group), min(c.steps.max() for c in group)
            x = np.linspace(lo, hi, 50) if hi > lo else np.array([lo])
        y_RX = np.stack([np.interp(x, c.steps, smooth(c.values, smoothing)) for c in group])
        low, high = bootstrap_ci(y_RX, np.mean, n_resamples=n_resamples)
        bands.append(Band(env, label, x, y_RX.mean(axis=0), low, high, len(group)))
    return bands


FINAL_COLUMNS = ("env", "configuration", "runs", "evaluations", "final_env_steps", "mean", "mean_ci_low",
                 "mean_ci_high", "iqm", "iqm_ci_low", "iqm_ci_high")
"""Columns of the final-performance table."""


def final_scores(curves: Sequence[RunCurve], last_fraction: float = 0.1) -> np.ndarray:
    """Each run's final score: the mean of its last ``ceil(last_fraction * K)`` evaluations (at least one).

    Returns:
        float [R], in the order of ``curves``.
    """
    return np.array([c.values[-max(1, math.ceil(last_fraction * len(c.values))):].mean() for c in curves])


def groups(curves: Sequence[RunCurve]) -> dict[tuple[str, str], list[RunCurve]]:
    """Curves by (env, configuration), sorted."""
    return _groups(curves)


def final_performance(curves: Sequence[RunCurve], last_fraction: float = 0.1,
                      n_resamples: int = 2000) -> list[dict[str, Any]]:
    """Final performance per (env, configuration): each run's score is its mean over the last
    ``last_fraction`` of its evaluations; across runs the mean and IQM with 95% percentile bootstrap CIs.

    Returns:
        One dict per configuration with ``FINAL_COLUMNS``.
    """
    rows: list[dict[str, Any]] = []
    for (env, label), group in _groups(curves).items():
        k = [max(1, math.ceil(last_fraction * len(c.values))) for c in group]
        scores = final_scores(group, last_fraction)
        mean_ci = bootstrap_ci(scores, np.mean, n_resamples=n_resamples)
        iqm_ci = bootstrap_ci(scores, iqm, n_resamples=n_resamples)
        rows.append({"env": env, "configuration": label, "runs": len(group), "evaluations": min(k),
                     "final_env_steps": int(min(c.steps[-1] for c in group)),
                     "mean": float(scores.mean()), "mean_ci_low": float(mean_ci[0]), "mean_ci_high": float(mean_ci[1]),
                     "iqm": float(iqm(scores)), "iqm_ci_low": float(iqm_ci[0]), "iqm_ci_high": float(iqm_ci[1])})
    return rows


def write_table(rows: Sequence[dict[str, Any]], out_dir: Path, metric: str = DEFAULT_METRIC,
                last_fraction: float = 0.1, stem: str = "final_performance") -> tuple[Path, Path]:
    """Write the final-performance table as CSV and markdown (atomically).

    Returns:
        (csv path, markdown path).
    """
    out_dir = Path(out_dir)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(FINAL_COLUMNS))
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    atomic_write_text(csv_path, buf.getvalue())

    def ci(lo: float, hi: float) -> str:
        return "-" if np.isnan(lo) else f"[{lo:.2f}, {hi:.2f}]"

    lines = [f"Final {metric.replace('_', ' ')}: each run's mean over its last {last_fraction:.0%} of evaluations; "
             f"mean and IQM (interquartile mean) across runs with 95% percentile-bootstrap CIs "
             f"(scipy.stats.bootstrap).", "",
             "| env | configuration | runs | mean | 95% CI | IQM | 95% CI | env steps |",
             "|---|---|---:|---:|---|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['env']} | {r['configuration']} | {r['runs']} | {r['mean']:.2f} | "
                     f"{ci(r['mean_ci_low'], r['mean_ci_high'])} | {r['iqm']:.2f} | "
                     f"{ci(r['iqm_ci_low'], r['iqm_ci_high'])} | {r['final_env_steps']} |")
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def plot_bands(bands: Sequence[Band], out_dir: Path, metric: str = DEFAULT_METRIC, title: str = "",
               stem: str = "team_return") -> tuple[Path, Path]:
    """One panel per env, one curve per configuration (mean, 95% bootstrap band); PNG and SVG.

    Returns:
        (png path, svg path).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted(dict.fromkeys(b.env for b in bands), key=lambda e: (ENV_NAMES.index(e) if e in ENV_NAMES else 99, e))
    fig, axes = plt.subplots(1, max(1, len(envs)), figsize=(5.2 * max(1, len(envs)), 4.0), dpi=120, squeeze=False)
    labels = sorted({b.label for b in bands})
    cmap = plt.get_cmap("tab20" if len(labels) > 10 else "tab10")
    color = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}
    for ax, env in zip(axes[0], envs):
        for b in (b for b in bands if b.env == env):
            ax.plot(b.steps, b.mean, color=color[b.label], lw=1.4, label=f"{b.label} (n={b.n_runs})")
            if not np.isnan(b.low).all():
                ax.fill_between(b.steps, b.low, b.high, color=color[b.label], alpha=0.18, linewidth=0)
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="best")
    axes[0][0].set_ylabel(metric.replace("_", " ") + " (mean, 95% bootstrap CI)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_dir = Path(out_dir)
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    atomic_write_bytes(png, lambda p: fig.savefig(p, format="png"))
    atomic_write_bytes(svg, lambda p: fig.savefig(p, format="svg"))
    plt.close(fig)
    return png, svg


def select_configurations(curves: Sequence[RunCurve], patterns: Sequence[str]) -> list[RunCurve]:
    """Curves whose configuration label matches one of the globs (all curves when there are none)."""
    import fnmatch

    if not patterns:
        return list(curves)
    return [c for c in curves if any(fnmatch.fnmatchcase(c.label, p) for p in patterns)]


def report(curves: Sequence[RunCurve], out_dir: Path, metric: str = DEFAULT_METRIC, smoothing: int = 1,
           last_fraction: float = 0.1, title: str = "", n_resamples: int = 2000,
           name: str | None = None) -> dict[str, Path]:
    """Figure (PNG + SVG) and final-performance table (CSV + markdown) for a set of runs.

    Args:
        name: file stem: ``<name>.png/.svg`` and ``<name>_final.csv/.md``; None gives
            ``team_return.png/.svg`` (or the metric's name) and ``final_performance.csv/.md``.

    Raises:
        ValueError: no runs.
    """
    if not curves:
        raise ValueError("no runs with metrics to plot")
    bands = aggregate(curves, smoothing=smoothing, n_resamples=n_resamples)
    fig_stem = name or (metric.removesuffix("_mean") if metric != DEFAULT_METRIC else "team_return")
    png, svg = plot_bands(bands, out_dir, metric=metric, title=title, stem=fig_stem)
    rows = final_performance(curves, last_fraction=last_fraction, n_resamples=n_resamples)
    table_csv, table_md = write_table(rows, out_dir, metric=metric, last_fraction=last_fraction,
                                      stem=f"{name}_final" if name else "final_performance")
    return {"png": png, "svg": svg, "csv": table_csv, "md": table_md}
