#!/usr/bin/env python
"""What the finished runs of a campaign cost, and what a run at the paper's full budget would need.

    python scripts/run_costs.py [RECORDS]          # default results/fig1

From each finished record's manifest (``wall_time_s``, ``timings_s``, ``cpu``, ``cpu_capability``) and config:
per env, protocol and CPU, the median over runs of

* training time per env step: ``(wall_time_s - timings_s.eval) / env_steps`` (acting, env, learning, relay,
  storing and checkpoints: everything outside evaluation),
* evaluation time per episode: ``timings_s.eval / episodes`` with ``episodes = (eval_points + 1) x eval_episodes +
  final_games`` (the step-0 evaluation and battle's final varied games included),

and the full-budget run those rates give: ``paper budget x training rate + (200 + 1) x 20 x evaluation rate``
(``resolve(env).run``: the paper's env steps and evaluation), in hours. A run that was resumed is left out: its
manifest's times cover only its last segment. The rates are what the runs met, load included: the CPU column says
which machine, and LOG.md next to the records says what else ran on it.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cost(folder: Path) -> dict | None:
    """The cost record of one finished, never-resumed run folder; None for others."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("status") != "finished" or manifest.get("resumed") or not manifest.get("timings_s"):
        return None
    run = cfg["run"]
    episodes = (run["eval_points"] + 1) * run["eval_episodes"] + (run.get("final_games") or 0)
    eval_s = float(manifest["timings_s"].get("eval", 0.0))
    return {"env": cfg["env"]["name"], "protocol": run.get("protocol") or "ours",
            "cpu": (f"{manifest['cpu']} ({manifest.get('cpu_capability', 'kernels not recorded')})"
                    if manifest.get("cpu") else "not recorded"),
            "train_s_per_step": (float(manifest["wall_time_s"]) - eval_s) / int(manifest["env_steps"]),
            "eval_s_per_episode": eval_s / episodes, "wall_h": float(manifest["wall_time_s"]) / 3600}


def full_budget_h(env: str, train_s_per_step: float, eval_s_per_episode: float) -> float:
    """Hours of one run at the paper's budget and evaluation (``resolve(env).run``) at the given rates."""
    from suPER.resolve import resolve

    run = resolve(env).run
    episodes = (run.eval_points + 1) * run.eval_episodes + (run.final_games or 0)
    return (run.num_timesteps * train_s_per_step + episodes * eval_s_per_episode) / 3600


def table(records: Path) -> str:
    """The markdown table of the module docstring, one row per (env, protocol, CPU)."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    skipped = 0
    for folder in sorted(p for p in records.iterdir() if (p / "manifest.json").is_file()):
        cost = run_cost(folder)
        if cost is None:
            skipped += 1
            continue
        groups[(cost["env"], cost["protocol"], cost["cpu"])].append(cost)
    lines = ["| env | protocol | CPU | runs | wall time per run (h) | training (ms per env step) | "
             "evaluation (s per episode) | full budget (h per run) |", "|---|---|---|---:|---|---:|---:|---:|"]
    for (env, protocol, cpu), costs in sorted(groups.items()):
        train = statistics.median(c["train_s_per_step"] for c in costs)
        evaluation = statistics.median(c["eval_s_per_episode"] for c in costs)
        walls = sorted(c["wall_h"] for c in costs)
        lines.append(f"| {env} | {protocol} | {cpu} | {len(costs)} | {walls[0]:.2f}-{walls[-1]:.2f} | "
                     f"{1000 * train:.1f} | {evaluation:.2f} | {full_budget_h(env, train, evaluation):.1f} |")
    lines.append(f"\n{sum(map(len, groups.values()))} runs; {skipped} left out (resumed or unfinished).")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python scripts/run_costs.py [RECORDS]", file=sys.stderr)
        return 2
    records = Path(argv[0]) if argv else ROOT / "results" / "fig1"
    if not records.is_dir():
        print(f"RECORDS: expected a folder of run records, got {str(records)!r}", file=sys.stderr)
        return 2
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
