"""Learning-curve pictures drawn from run folders' metrics.csv (never from W&B)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from suPER.runs import atomic_write_bytes, read_metrics


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
