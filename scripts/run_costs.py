#!/usr/bin/env python
"""What the finished runs of a campaign cost, and what a run at the paper's full budget would need.

    python scripts/run_costs.py [RECORDS]          # default results/fig1
    super-marl grid list ... | python scripts/run_costs.py --to-go [RECORDS]   # what the listed runs still need

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

``--to-go`` reads ``grid list`` rows on stdin (entry, env, algo, seed, run folder, status, flags) and adds up what the
runs not finished still need at those rates (a running run: its env steps left; its protocol from the folder name;
an env and protocol without a finished record uses the env's rate under the other protocol), alone and two at a
time: the campaign's measured time to go (``fig1_campaign.sh --status`` prints it).
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


def grouped_costs(records: Path, *fields: str) -> tuple[dict[tuple[str, ...], list[dict]], int]:
    """The ``run_cost`` records of the run folders in ``records``, grouped by the values of ``fields``; and how many
    folders were left out (resumed or unfinished)."""
    groups: dict[tuple[str, ...], list[dict]] = defaultdict(list)
    skipped = 0
    for folder in sorted(p for p in records.iterdir() if (p / "manifest.json").is_file()):
        cost = run_cost(folder)
        if cost is None:
            skipped += 1
        else:
            groups[tuple(cost[f] for f in fields)].append(cost)
    return groups, skipped


def medians(costs: list[dict]) -> tuple[float, float]:
    """(median training s per env step, median evaluation s per episode) of some runs' costs."""
    return (statistics.median(c["train_s_per_step"] for c in costs),
            statistics.median(c["eval_s_per_episode"] for c in costs))


def table(records: Path) -> str:
    """The markdown table of the module docstring, one row per (env, protocol, CPU)."""
    groups, skipped = grouped_costs(records, "env", "protocol", "cpu")
    lines = ["| env | protocol | CPU | runs | wall time per run (h) | training (ms per env step) | "
             "evaluation (s per episode) | full budget (h per run) |", "|---|---|---|---:|---|---:|---:|---:|"]
    for (env, protocol, cpu), costs in sorted(groups.items()):
        train, evaluation = medians(costs)
        walls = sorted(c["wall_h"] for c in costs)
        lines.append(f"| {env} | {protocol} | {cpu} | {len(costs)} | {walls[0]:.2f}-{walls[-1]:.2f} | "
                     f"{1000 * train:.1f} | {evaluation:.2f} | {full_budget_h(env, train, evaluation):.1f} |")
    lines.append(f"\n{sum(map(len, groups.values()))} runs; {skipped} left out (resumed or unfinished).")
    return "\n".join(lines)


def rates(records: Path) -> dict[tuple[str, ...], tuple[float, float]]:
    """(env, protocol) -> ``medians`` of the records' runs."""
    return {key: medians(costs) for key, costs in grouped_costs(records, "env", "protocol")[0].items()}


EVAL_EPISODES = 41 * 10
"""evaluation episodes of a campaign run (40 points x 10 episodes, plus step 0's)"""
FINAL_GAMES = {"battle": 100}
"""each battle run's final varied games"""


def to_go(listing: str, records: Path) -> str:
    """One line: how many listed runs are not finished and the hours they need at the records' rates."""
    import re

    known = rates(records)
    rows: list[list[str]] = []  # every listed run, its flags completed by its block's common flags
    block: list[list[str]] = []
    for line in [*listing.splitlines(), ""]:
        cells = line.split("\t")
        if len(cells) >= 7 and cells[0] != "entry":
            block.append(cells)
        elif line.startswith("every run above also gets:") or not line.strip():
            common = line.removeprefix("every run above also gets:")
            rows += [[*cells[:6], f"{cells[6]} {common}"] for cells in block]
            block = []
    left_s, runs, running = 0.0, 0, 0
    for cells in rows:
        env, folder, status, flags = cells[1], cells[4], cells[5], cells[6]
        budget = re.search(r"--num-timesteps (\d+)", flags) or re.search(r"/([\d,]+)", status)
        if cells[5].startswith("finished") or budget is None:
            continue
        total = int(budget.group(1).replace(",", ""))
        done = re.search(r"([\d,]+)/[\d,]+", status)  # running or interrupted part-way: it resumes from there
        steps_left = total - (int(done.group(1).replace(",", "")) if done else 0)
        running += status.startswith("running")
        protocol = "paper" if "__paper" in folder else "ours"
        rate = known.get((env, protocol)) or next((r for (e, _), r in known.items() if e == env), None)
        if rate is None:
            return f"to go: no finished record of {env} to measure a rate from"
        train, evaluation = rate
        left_s += steps_left * train + (EVAL_EPISODES * steps_left / total + FINAL_GAMES.get(env, 0)) * evaluation
        runs += 1
    return (f"to go: {runs} runs ({running} running), ~{left_s / 3600:.0f} h of runs, ~{left_s / 7200:.0f} h two at "
            f"a time, at the median rates of the finished records (python scripts/run_costs.py)")


def main(argv: list[str]) -> int:
    remaining = "--to-go" in argv
    argv = [a for a in argv if a != "--to-go"]
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python scripts/run_costs.py [--to-go] [RECORDS]", file=sys.stderr)
        return 2
    records = Path(argv[0]) if argv else ROOT / "results" / "fig1"
    if not records.is_dir():
        print(f"RECORDS: expected a folder of run records, got {str(records)!r}", file=sys.stderr)
        return 2
    print(to_go(sys.stdin.read(), records) if remaining else table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
