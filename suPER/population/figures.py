"""Figures of a population run, read from its files: payoff heatmap, meta-strategy, exploitability.

Each reads the run folder's CSVs (``payoff.csv``, ``meta_strategy.csv``, ``exploitability.csv``) and writes
a PNG atomically; matplotlib (Agg) is imported inside the functions.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from suPER.population.payoff import PayoffTable
from suPER.runs import atomic_write_bytes


def _save(plt: Any, fig: Any, out: Path) -> Path:
    """Lay out, write ``out`` as PNG atomically, close the figure."""
    fig.tight_layout()
    atomic_write_bytes(out, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)
    return out

def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def payoff_heatmap(folder: Path, team: list[str], opponent: list[str], out: Path) -> Path:
    """Heatmap of the meta-game payoff ``win - loss`` of the team (rows: team policies, columns: opponent
    policies; white = even), cells annotated with the team's ``win / loss`` rates."""
    plt = _plt()
    table = PayoffTable.load(folder / "payoff.csv")
    win, loss = table.matrix(team, opponent, "win_rate"), table.matrix(team, opponent, "loss_rate")
    fig, ax = plt.subplots(figsize=(2.5 + 1.1 * len(opponent), 1.5 + 0.5 * len(team)))
    im = ax.imshow(win - loss, vmin=-1, vmax=1, cmap="RdBu", aspect="auto")
    for i in range(len(team)):
        for j in range(len(opponent)):
            ax.text(j, i, f"{win[i, j]:.2f}/{loss[i, j]:.2f}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(opponent)), opponent, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(team)), team, fontsize=7)
    ax.set_xlabel("opponent policy")
    ax.set_ylabel("team policy")
    ax.set_title("team win / loss rate", fontsize=9)
    fig.colorbar(im, ax=ax, label="team win - loss")
    return _save(plt, fig, out)


def meta_strategy_plot(folder: Path, out: Path) -> Path:
    """Each side's meta-strategy over iterations (stacked weights per policy)."""
    plt = _plt()
    rows = _rows(folder / "meta_strategy.csv")
    sides = list(dict.fromkeys(r["side"] for r in rows))
    fig, axes = plt.subplots(1, len(sides), figsize=(5 * len(sides), 3.2), squeeze=False)
    for ax, side in zip(axes[0], sides):
        mine = [r for r in rows if r["side"] == side]
        its = sorted({int(r["iteration"]) for r in mine})
        policies = list(dict.fromkeys(r["policy"] for r in mine))
        w = np.zeros((len(policies), len(its)))
        for r in mine:
            w[policies.index(r["policy"]), its.index(int(r["iteration"]))] = float(r["weight"])
        ax.stackplot(its, w, labels=policies)
        ax.set_xticks(its)
        ax.set_xlabel("iteration")
        ax.set_ylabel("weight")
        ax.set_ylim(0, 1)
        ax.set_title(f"{side} meta-strategy", fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
    return _save(plt, fig, out)


def exploitability_plot(folder: Path, out: Path) -> Path:
    """NashConv of the meta-strategies in the restricted game and the measured best-response gains."""
    plt = _plt()
    rows = _rows(folder / "exploitability.csv")
    its = [int(r["iteration"]) for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, label in (("nash_conv", "NashConv (restricted game)"),
                       ("approx_nash_conv", "best-response gains vs previous meta-strategy")):
        ax.plot(its, [float(r[key]) for r in rows], marker="o", label=label)
    ax.set_xticks(its)
    ax.set_xlabel("iteration")
    ax.set_ylabel("win - loss")
    ax.legend(fontsize=7)
    return _save(plt, fig, out)


def draw_all(folder: Path, team: list[str], opponent: list[str]) -> list[Path]:
    """The three figures into ``folder``: payoff.png, meta_strategy.png, exploitability.png."""
    folder = Path(folder)
    return [payoff_heatmap(folder, team, opponent, folder / "payoff.png"),
            meta_strategy_plot(folder, folder / "meta_strategy.png"),
            exploitability_plot(folder, folder / "exploitability.png")]
