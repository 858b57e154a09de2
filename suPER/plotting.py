"""Learning curves and campaign figures drawn from run folders' metrics.csv (optionally from W&B).

``plot_curve`` draws one run's curve (``curve.png`` in every run folder). The campaign functions read
many runs, group them by (env, configuration), and produce the paper-style figure (one panel per env,
mean with a 95% bootstrap band over seeds) and a final-performance table (mean and IQM with 95%
bootstrap CIs), using ``scipy.stats.bootstrap`` for every interval.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import io
import json
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from suPER.config import ENV_NAMES, PETTINGZOO_PREFIX, is_env_name
from suPER.runs import FINISHED, RunFolder, atomic_write_bytes, atomic_write_text, read_metrics
from suPER.stats import bootstrap_ci


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
            ax.fill_between(x, y - std, y + std, color=line.get_color(), alpha=0.15, linewidth=0,
                            label="± 1 std over the evaluation's episodes")
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric.replace("_", " ") + " (mean over the evaluation's episodes)")
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
        status: the run's status from its manifest (``finished``, ``running``, ``failed``,
            ``interrupted``), W&B's run state, or ``unknown`` without a readable manifest. Only
            finished runs enter bands and final tables: a run killed at step 500 would otherwise pull
            a configuration's "final" score towards its untrained start.
    """

    env: str
    label: str
    seed: int
    steps: np.ndarray
    values: np.ndarray
    source: str
    status: str = FINISHED
    episode_std: np.ndarray | None = None
    """Between-episode standard deviation of each evaluation, float [K] (the ``<name>_std`` column next to a
    ``<name>_mean`` metric; NaN where a row has none), or None when it was not logged. All zeros means every
    episode of an evaluation played out the same: its "10 episodes" measure one game."""

    @property
    def finished(self) -> bool:
        """Whether the run completed its budget (only such runs make bands and final tables)."""
        return self.status == FINISHED


@dataclass
class Skipped:
    """A run folder left out of a figure, and why (one ``warning: PATH: REASON`` line).

    Attributes:
        path: the file at fault (``.../metrics.csv``, ``.../config.json``), as found from the user's paths.
        reason: what is wrong with it.
        columns: for a metrics.csv without the requested metric, the columns it has (so a mistyped
            ``--metric`` is reported once, with what exists, rather than as N skipped runs).
    """

    path: str
    reason: str
    columns: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}; skipped"


METHOD_KINDS = ("no sharing", "SUPER quantile", "SUPER gaussian", "SUPER stochastic", "Share-all",
                "Parameter sharing")
"""The paper's methods in its order; each keeps one colour in every figure (``method_color``)."""

ALGO_NAMES = {"ddqn": "DDQN", "dqn": "DQN", "qmix": "QMIX", "maddpg": "MADDPG", "seac": "SEAC"}
"""Algorithm registry keys as the paper writes them."""


def method_name(label: str) -> str:
    """A configuration label as the paper names the method: ``ddqn`` -> ``DDQN (no sharing)``,
    ``ddqn_super_quantile`` -> ``SUPER quantile``, ``ddqn_super_gaussian [shareall]`` -> ``Share-all``, ``ddqn_ps``
    -> ``Parameter sharing``; plain DQN's say ``(DQN)``, a paper-protocol run's end in ``(paper)`` (where
    ``gaussian_variance`` is the paper's own gaussian); a share-all variant's tag ``shareall_<variant>``
    (experiments/fig1_isolate.yaml) gives ``Share-all [<variant>]``, other tags stay in brackets, other labels as
    they are."""
    base, _, tag = label.partition(" [")
    tag = tag.removesuffix("]")
    paper = is_paper(label)
    base = base.removesuffix(PAPER_SUFFIX)
    algo, _, rest = base.partition("_")
    if algo not in ALGO_NAMES:
        return label
    dqn = algo in ("dqn", "ddqn")
    suffix = (" (DQN)" if algo == "dqn" else "") + (PAPER_SUFFIX if paper else "")
    tags = [t.removeprefix("shareall_") for t in tag.split(", ") if t and t != "shareall"]
    if not dqn:
        name = ALGO_NAMES[algo] + (f" {rest}" if rest else "")
    elif any(t == "shareall" or t.startswith("shareall_") for t in tag.split(", ")):
        name = "Share-all"
    elif rest == "ps":
        name = "Parameter sharing"
    elif rest.startswith("super_"):
        rule = rest.removeprefix("super_")
        name = "SUPER " + ("gaussian" if rule == "gaussian_variance" and paper else
                           "gaussian (variance)" if rule == "gaussian_variance" else rule.replace("_", " "))
    elif not rest:
        name = f"{ALGO_NAMES[algo]} (no sharing)" if algo == "ddqn" else "no sharing"
    else:
        return label
    return name + suffix + (f" [{', '.join(tags)}]" if tags else "")


def _method_order(label: str) -> tuple[int, str]:
    """Sort key: the paper's order of methods (``METHOD_KINDS``), then the label."""
    name = method_name(label)
    return next((i for i, k in enumerate(METHOD_KINDS) if name.removeprefix("DDQN (").startswith(k)),
                len(METHOD_KINDS)), label


def method_color(label: str) -> Any:
    """One colour per method in every panel and figure: the tab10 hue of its ``METHOD_KINDS`` entry, whatever the
    protocol (``plot_bands`` tells the protocols apart by line style); other labels a grey shade by name."""
    import matplotlib

    kind = _method_order(label)[0]
    if kind == len(METHOD_KINDS):
        shade = int(hashlib.sha1(label.encode()).hexdigest(), 16) % 4
        return matplotlib.colormaps["Greys"](0.45 + 0.12 * shade)
    return matplotlib.colormaps["tab10"](kind)


def env_order(env: str) -> tuple[int, str]:
    """Sort key that puts envs in the paper's order (``ENV_NAMES``: pursuit, battle, adversarial pursuit), any other
    env after them by name."""
    return (ENV_NAMES.index(env) if env in ENV_NAMES else len(ENV_NAMES), env)


def save_figure(fig: Any, out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Write ``fig`` as ``out_dir/stem.png`` and ``.svg`` (atomically; the SVG keeps its text as text, searchable and
    editable) and close it. Returns (png, svg)."""
    import matplotlib
    import matplotlib.pyplot as plt

    png, svg = Path(out_dir) / f"{stem}.png", Path(out_dir) / f"{stem}.svg"
    atomic_write_bytes(png, lambda p: fig.savefig(p, format="png", bbox_inches="tight"))
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        atomic_write_bytes(svg, lambda p: fig.savefig(p, format="svg", bbox_inches="tight"))
    plt.close(fig)
    return png, svg


FEW_RUNS = 5
"""up to this many runs a band is narrower than it says, and the caption says so"""


def caption(curves: Sequence[RunCurve | Band]) -> str:
    """What a figure's runs are, for its caption: protocol(s), budget per env, evaluations per run (from each curve's
    or band's env, label and steps), and, where a band comes from 2 to ``FEW_RUNS`` runs, that its "95%" is
    nominal: the percentile bootstrap band of a mean covered the true mean in 74% of simulated draws of 3 normal
    runs and 83% of 5 (``scripts/verdict_error_rates.py``; docs/design.md)."""
    protocols = sorted({"paper" if is_paper(c.label) else "ours" for c in curves})
    budgets: dict[str, int] = {}
    for c in sorted(curves, key=lambda c: env_order(c.env)):
        if len(c.steps):
            budgets[c.env] = max(budgets.get(c.env, 0), int(max(c.steps)))
    evals = sorted({len(c.steps) for c in curves})
    span = f"{evals[0]}" if len(evals) == 1 else f"{evals[0]}-{evals[-1]}"
    return (f"Protocol: {' and '.join(protocols)}" + (" (ours dashed)" if len(protocols) > 1 else "") + ". Budget: "
            + ", ".join(f"{env.replace('_', ' ')} {steps / 1000:g}k" for env, steps in budgets.items())
            + f" env steps; {span} evaluations per run, each the mean of its greedy episodes."
            + (f"\nBands from 2-{FEW_RUNS} runs cover less than 95% (74% at 3 runs in simulation)." if any(
                isinstance(c, Band) and 1 < c.n_runs <= FEW_RUNS for c in curves) else ""))


PAPER_SUFFIX = " (paper)"
"""What a paper-protocol run's configuration label carries (``run.protocol: paper``), so both protocols' runs of one
configuration stay apart in one results tree."""


def is_paper(label: str) -> bool:
    """Whether a configuration label is a paper-protocol run's (``PAPER_SUFFIX`` before any ``[tag]``)."""
    return label.partition(" [")[0].endswith(PAPER_SUFFIX)


def configuration_label(config: dict[str, Any]) -> str:
    """``pursuit__ddqn_super_quantile__s3__bw005`` -> ``ddqn_super_quantile [bw005]``, a paper-protocol run's
    ``ddqn_super_quantile (paper) [bw005]`` (from a config dict)."""
    run = config.get("run", {})
    if run.get("name"):
        return str(run["name"])
    relay, dqn = config.get("relay", {}), config.get("dqn", {})
    algo = str(run.get("algo", "?")) + (f"_super_{relay.get('mode')}" if relay.get("enabled") else "")
    if dqn.get("parameter_sharing"):
        algo += "_ps"
    if run.get("protocol") == "paper":
        algo += PAPER_SUFFIX
    return f"{algo} [{run['tag']}]" if run.get("tag") else algo


def find_run_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Run folders (holding metrics.csv) at or below ``paths``; globs are expanded.

    A folder with metrics.csv but no readable config.json is still returned, so that
    ``load_run_curves`` reports it as skipped instead of it vanishing without a word.

    Raises:
        FileNotFoundError: a path or glob matches nothing.
        NotADirectoryError: a path names a file (not a run or campaign folder).
    """
    found: list[Path] = []
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(str(p)))] if glob.has_magic(str(p)) else [Path(p)]
        if not matches or not all(m.exists() for m in matches):
            raise FileNotFoundError(f"{p}: expected a run folder, campaign folder or glob that exists, got no match")
        for m in matches:
            if (m / "metrics.csv").is_file():
                found.append(m)
            elif m.is_dir():
                found += sorted(c.parent for c in m.rglob("metrics.csv") if c.is_file() and ".tune" not in c.parts)
            elif not glob.has_magic(str(p)):
                raise NotADirectoryError(f"{p}: expected a run folder or campaign folder, got a file")
    return list(dict.fromkeys(found))


class _Unreadable(Exception):
    """One file of a run folder cannot be used; carries the ``Skipped`` record."""

    def __init__(self, skipped: Skipped) -> None:
        super().__init__(str(skipped))
        self.skipped = skipped


def _read_text(path: Path) -> str:
    """A run file's text; unreadable, binary or non-UTF-8 content raises ``_Unreadable`` naming the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Unreadable(Skipped(str(path), f"cannot read ({exc.strerror or type(exc).__name__})")) from exc
    if b"\0" in data:
        raise _Unreadable(Skipped(str(path), "expected text, got binary data (NUL bytes)"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(Skipped(str(path), f"expected UTF-8 text, got byte 0x{data[exc.start]:02x} at offset "
                                             f"{exc.start}")) from exc


def _read_config(folder: Path) -> tuple[str, str, int, dict[str, Any]]:
    """(env name, configuration label, seed, config) from a run folder's config.json, or ``_Unreadable``."""
    path = folder / "config.json"
    if not path.is_file():
        raise _Unreadable(Skipped(str(path), "expected the run's resolved config, got no such file"))
    try:
        config = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise _Unreadable(Skipped(str(path), f"expected JSON, got a syntax error at line {exc.lineno} column "
                                             f"{exc.colno} (half-written?)")) from exc
    try:
        env, seed = config["env"]["name"], config["run"]["seed"]
        if not isinstance(env, str) or isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError
    except (KeyError, TypeError, AttributeError) as exc:
        raise _Unreadable(Skipped(str(path), "expected a run config with env.name (text) and run.seed (integer), "
                                             "got something else")) from exc
    if not is_env_name(env):
        raise _Unreadable(Skipped(str(path), f"expected env.name to be one of {', '.join(ENV_NAMES)} or "
                                             f"{PETTINGZOO_PREFIX}<module>[-<function>], got {env!r}"))
    return env, configuration_label(config), seed, config


def _read_columns(path: Path, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(env_steps, metric, metric's between-episode std or None) of a metrics.csv, checked cell by cell; any
    defect in env_steps or the metric raises ``_Unreadable``.

    A half-written file (a short last row), a non-number in either column, non-finite values, or
    env steps that go backwards make the whole run unusable: a curve silently cut or shifted at the
    defect would be worse than a run left out with a warning. Empty cells are evaluations without the
    metric (NaN, dropped), as ``CSVMetrics`` writes them for columns that appear later.
    """
    text = _read_text(path)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise _Unreadable(Skipped(str(path), f"expected CSV, got {exc}")) from exc
    if not rows or not rows[0]:
        raise _Unreadable(Skipped(str(path), "expected a header and evaluation rows, got an empty file"))
    header = rows[0]
    for col in ("env_steps", metric):
        if col not in header:
            raise _Unreadable(Skipped(str(path), f"expected a column {col!r}, got columns {', '.join(header)}",
                                                 columns=tuple(header)))
    i_x, i_y = header.index("env_steps"), header.index(metric)
    std_col = metric[: -len("_mean")] + "_std" if metric.endswith("_mean") else None
    i_s = header.index(std_col) if std_col in header else None
    steps: list[float] = []
    values: list[float] = []
    stds: list[float] = []
    for n, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise _Unreadable(Skipped(str(path), f"expected {len(header)} fields per row, got {len(row)} on line {n} "
                                                 "(half-written?)"))
        try:
            x = float(row[i_x])
            y = float(row[i_y]) if row[i_y] != "" else math.nan
        except ValueError as exc:
            raise _Unreadable(Skipped(str(path), f"expected numbers in env_steps and {metric}, got "
                                                 f"{row[i_x]!r}, {row[i_y]!r} on line {n}")) from exc
        if not math.isfinite(x) or math.isinf(y):
            raise _Unreadable(Skipped(str(path), f"expected finite numbers, got {row[i_x]!r}, {row[i_y]!r} on line "
                                                 f"{n}"))
        if steps and x <= steps[-1]:  # a repeated step is an evaluation logged twice (a resume gone wrong)
            raise _Unreadable(Skipped(str(path), f"expected increasing env_steps (each evaluation once), got "
                                                 f"{row[i_x]} after {steps[-1]:g} on line {n}"))
        steps.append(x)
        values.append(y)
        if i_s is not None:  # informative only (campaign notes): a bad cell is NaN, not a lost run
            try:
                stds.append(float(row[i_s]))
            except ValueError:
                stds.append(math.nan)
    x_K, y_K = np.array(steps, dtype=float), np.array(values, dtype=float)
    ok = ~np.isnan(y_K)
    if not ok.any():
        raise _Unreadable(Skipped(str(path), f"expected at least one evaluation with {metric}, got none"))
    return x_K[ok], y_K[ok], (np.array(stds, dtype=float)[ok] if i_s is not None else None)


def run_status(folder: Path) -> str:
    """The status in a run folder's manifest.json; ``unknown`` when it is missing or unreadable."""
    status = RunFolder(Path(folder)).read_manifest().get("status")
    return status if isinstance(status, str) and status else "unknown"


def load_run_curves(folders: Iterable[Path], metric: str = DEFAULT_METRIC, tags: Sequence[str] = (),
                    skipped: list[Skipped] | None = None) -> list[RunCurve]:
    """Read ``metric`` against env steps from each run folder (optionally only runs with one of ``tags``).

    One broken run must not abort a figure of fifty: a folder whose config.json or metrics.csv cannot
    be used is left out and recorded.

    Args:
        folders: run folders (``find_run_folders``).
        metric: metrics.csv column.
        tags: keep only runs whose ``run.tag`` is one of these (all runs when empty).
        skipped: receives one ``Skipped`` per folder left out; None issues a ``UserWarning`` each instead.

    Returns:
        One curve per usable run; ``status`` from its manifest.json (``unknown`` without one).
    """
    curves: list[RunCurve] = []
    for folder in folders:
        folder = Path(folder)
        try:
            env, label, seed, config = _read_config(folder)
            if tags and config.get("run", {}).get("tag", "") not in tags:
                continue
            steps, values, episode_std = _read_columns(folder / "metrics.csv", metric)
        except _Unreadable as exc:
            if skipped is None:
                warnings.warn(str(exc.skipped), stacklevel=2)
            else:
                skipped.append(exc.skipped)
            continue
        curves.append(RunCurve(env, label, seed, steps, values, str(folder), run_status(folder), episode_std))
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
        state = getattr(run, "state", None)  # W&B: finished, running, crashed, failed, killed
        curves.append(RunCurve(config["env"]["name"], configuration_label(config), int(config["run"]["seed"]),
                               steps[order], values[order], f"wandb:{'/'.join(run.path)}",
                               state if isinstance(state, str) and state else "unknown"))
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


def iqm(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Interquartile mean (25% trimmed mean, as rliable's IQM) along ``axis``."""
    from scipy.stats import trim_mean

    return np.asarray(trim_mean(x, 0.25, axis=axis))


def groups(curves: Sequence[RunCurve]) -> dict[tuple[str, str], list[RunCurve]]:
    """Curves by (env, configuration), sorted; each group's runs in seed order."""
    groups: dict[tuple[str, str], list[RunCurve]] = {}
    for c in sorted(curves, key=lambda c: c.seed):
        groups.setdefault((c.env, c.label), []).append(c)
    return dict(sorted(groups.items()))


def aggregate(curves: Sequence[RunCurve], smoothing: int = 1, n_resamples: int = 2000) -> list[Band]:
    """Per (env, configuration): mean over runs and a 95% bootstrap band at each common evaluation step.

    Runs of one configuration are aligned on the env steps they all evaluated at (evaluations happen at
    exact multiples of the interval); if they share fewer than two, they are interpolated onto 50
    points of their common range. Unfinished runs are left out: one run killed at step 500 would
    otherwise cut the whole band at 500 (``plot_bands`` can draw them on their own, dashed).
    """
    bands: list[Band] = []
    for (env, label), group in groups([c for c in curves if c.finished]).items():
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


def final_performance(curves: Sequence[RunCurve], last_fraction: float = 0.1,
                      n_resamples: int = 2000) -> list[dict[str, Any]]:
    """Final performance per (env, configuration): each run's score is its mean over the last
    ``last_fraction`` of its evaluations; across runs the mean and IQM with 95% percentile bootstrap CIs.

    Only finished runs count: the last evaluations of a run killed early are not its final performance.

    Returns:
        One dict per configuration with ``FINAL_COLUMNS``.
    """
    rows: list[dict[str, Any]] = []
    for (env, label), group in groups([c for c in curves if c.finished]).items():
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
                last_fraction: float = 0.1, stem: str = "final_performance",
                left_out: Sequence[str] = ()) -> tuple[Path, Path]:
    """Write the final-performance table as CSV and markdown (atomically).

    Args:
        left_out: one line per run left out of the table (unfinished runs), listed under the markdown
            table so that the table never reads as covering runs it does not.

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
    if left_out:
        lines += ["", "Left out (unfinished):"] + [f"- {line}" for line in left_out]
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def plot_bands(bands: Sequence[Band], out_dir: Path, metric: str = DEFAULT_METRIC, title: str = "",
               stem: str = "team_return", unfinished: Sequence[RunCurve] = ()) -> tuple[Path, Path]:
    """One panel per env, one curve per configuration (mean, 95% bootstrap band); PNG and SVG.

    Args:
        unfinished: runs that are not finished, drawn one thin dashed line each in their
            configuration's colour (legend ``<label> (unfinished, n=K)``), never averaged into a band.

    Returns:
        (png path, svg path).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted(dict.fromkeys([b.env for b in bands] + [c.env for c in unfinished]), key=env_order)
    fig, axes = plt.subplots(1, max(1, len(envs)), figsize=(5.2 * max(1, len(envs)), 4.0), dpi=120, squeeze=False)
    from matplotlib.ticker import FuncFormatter

    labels = sorted({b.label for b in bands} | {c.label for c in unfinished}, key=_method_order)
    both = len({is_paper(lab) for lab in labels}) > 1  # both protocols: ours dashed, the paper's solid
    methods = {method_name(lab) for lab in labels}

    def style(label: str) -> str:
        """A variant beside its method (``Share-all [insertmax]`` beside ``Share-all``: same colour) dash-dotted,
        ours dashed beside the paper's, the rest solid."""
        name = method_name(label)
        if name.endswith("]") and name.rpartition(" [")[0] in methods:
            return "-."
        return "--" if both and not is_paper(label) else "-"

    def shown(label: str) -> str:
        """The legend's name: one protocol's figure says it in the caption, not after every method."""
        return method_name(label) if both else method_name(label).replace(PAPER_SUFFIX, "", 1)

    handles: dict[str, Any] = {}
    for ax, env in zip(axes[0], envs):
        runs = sorted({b.n_runs for b in bands if b.env == env})
        for b in (b for b in bands if b.env == env):
            (line,) = ax.plot(b.steps, b.mean, color=method_color(b.label), lw=1.4, ls=style(b.label))
            handles.setdefault(shown(b.label), line)
            if not np.isnan(b.low).all():
                ax.fill_between(b.steps, b.low, b.high, color=method_color(b.label), alpha=0.18, linewidth=0)
        for (_, label), group in groups([c for c in unfinished if c.env == env]).items():
            for c in group:
                (line,) = ax.plot(c.steps, c.values, color=method_color(label), lw=0.8, ls=":", alpha=0.8)
                handles.setdefault(f"{shown(label)} (unfinished run)", line)
        n = "" if not runs else f"{runs[0]} run{'s' * (runs[0] > 1)}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]} runs"
        ax.set_title(env.replace("_", " ") + (f" ({n} per method)" if n else ""))
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k" if x else "0"))
        ax.grid(alpha=0.3)
    order = [shown(lab) for lab in labels]
    names = sorted(handles, key=lambda h: (order.index(h) if h in order else len(order), h))
    axes[0][0].set_ylabel(metric.replace("_", " ") + "\n(mean over runs, band: 95% bootstrap CI)")
    rows = -(-len(names) // 4)
    text = caption([*bands, *unfinished])
    below = 0.03 * text.count("\n")  # a caption's second line lifts the legend and the panels
    fig.legend([handles[h] for h in names], names, loc="lower center", ncol=min(4, len(names)) or 1,
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.04 + below))  # below the panels: never over the data
    fig.text(0.5, 0.0, text, ha="center", va="bottom", fontsize=7.5, color="0.3")
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, (0.06 * rows + 0.05 if names else 0.05) + below, 1, 1))
    return save_figure(fig, out_dir, stem)


def select_configurations(curves: Sequence[RunCurve], patterns: Sequence[str]) -> list[RunCurve]:
    """Curves whose configuration label matches one of the globs (all curves when there are none)."""
    import fnmatch

    if not patterns:
        return list(curves)
    return [c for c in curves if any(fnmatch.fnmatchcase(c.label, p) for p in patterns)]


def unfinished_note(curve: RunCurve) -> str:
    """``PATH: run is STATUS (last evaluation at K env steps)`` for a run left out of bands and tables.

    PATH is the file that says so: the manifest.json of a run folder (or the W&B run).
    """
    where = curve.source if curve.source.startswith("wandb:") else str(Path(curve.source) / "manifest.json")
    status = "without a readable manifest (status unknown)" if curve.status == "unknown" else curve.status
    return f"{where}: run is {status} (last evaluation at {curve.steps[-1]:.0f} env steps)"


def report(curves: Sequence[RunCurve], out_dir: Path, metric: str = DEFAULT_METRIC, smoothing: int = 1,
           last_fraction: float = 0.1, title: str = "", n_resamples: int = 2000,
           name: str | None = None, warn: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Figure (PNG + SVG) and final-performance table (CSV + markdown) for a set of runs.

    Finished runs make the bands and the table; unfinished ones (status other than ``finished``, or no
    readable manifest) are drawn dashed, listed under the markdown table, and announced through ``warn``.

    Args:
        name: file stem: ``<name>.png/.svg`` and ``<name>_final.csv/.md``; None gives
            ``team_return.png/.svg`` (or the metric's name) and ``final_performance.csv/.md``.
        warn: receives one line per unfinished run (``unfinished_note``); None issues a ``UserWarning``.

    Raises:
        ValueError: no runs.
    """
    if not curves:
        raise ValueError("no runs with metrics to plot")
    unfinished = [c for c in curves if not c.finished]
    notes = [unfinished_note(c) for c in unfinished]
    for note in notes:
        line = f"{note}; left out of the final-performance table, drawn dashed"
        if warn is None:
            warnings.warn(line, stacklevel=2)
        else:
            warn(line)
    bands = aggregate(curves, smoothing=smoothing, n_resamples=n_resamples)
    fig_stem = name or (metric.removesuffix("_mean") if metric != DEFAULT_METRIC else "team_return")
    unfinished = [replace(c, values=smooth(c.values, smoothing))
                  for c in unfinished]
    png, svg = plot_bands(bands, out_dir, metric=metric, title=title, stem=fig_stem, unfinished=unfinished)
    rows = final_performance(curves, last_fraction=last_fraction, n_resamples=n_resamples)
    table_csv, table_md = write_table(rows, out_dir, metric=metric, last_fraction=last_fraction,
                                      stem=f"{name}_final" if name else "final_performance", left_out=notes)
    return {"png": png, "svg": svg, "csv": table_csv, "md": table_md}
