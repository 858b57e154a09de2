#!/usr/bin/env python
"""What the finished runs of a campaign cost, and what a run at the paper's full budget would need.

    python scripts/run_costs.py [RECORDS]          # default results/fig1

One row per env, protocol and CPU: the median rates of its finished runs (``suPER.costs``: training time per env step
outside evaluation, evaluation time per episode, step 0's evaluation and battle's final games included) and the
full-budget run they give: ``paper budget x training rate + (200 + 1) x 20 (+ final games) x evaluation rate``
(``resolve(env)``), in hours. A resumed run counts (its manifest's times continue from its last checkpoint); one whose
segments ran on different machines is its own "mixed" row. The rates are what the runs met, load included: the CPU
column says which machine, and LOG.md next to the records what else ran on it. The time a campaign still needs is
``grid list``'s "to go" line, at these rates (``fig1_campaign.sh --status`` prints it per stage).
"""

from __future__ import annotations

import sys
from pathlib import Path

from suPER.costs import RECORDS, full_budget_h, grouped_costs, medians


def table(records: Path) -> str:
    """The markdown table of the module docstring, one row per (env, protocol, CPU)."""
    groups, skipped = grouped_costs(records, "env", "protocol", "cpu")
    lines = ["| env | protocol | CPU | runs | wall time per run (h) | training (ms per env step) | "
             "evaluation (s per episode) | full budget (h per run) |", "|---|---|---|---:|---|---:|---:|---:|"]
    for (env, protocol, cpu), costs in sorted(groups.items()):
        rates = medians(costs)
        walls = sorted(c.wall_h for c in costs)
        lines.append(f"| {env} | {protocol} | {cpu} | {len(costs)} | {walls[0]:.2f}-{walls[-1]:.2f} | "
                     f"{1000 * rates.train_s_per_step:.1f} | {rates.eval_s_per_episode:.2f} | "
                     f"{full_budget_h(env, rates):.1f} |")
    lines.append(f"\n{sum(map(len, groups.values()))} runs; {skipped} left out (unfinished).")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python scripts/run_costs.py [RECORDS]", file=sys.stderr)
        return 2
    records = Path(argv[0]) if argv else RECORDS
    if not records.is_dir():
        print(f"RECORDS: expected a folder of run records, got {str(records)!r}", file=sys.stderr)
        return 2
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
