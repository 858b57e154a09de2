#!/usr/bin/env python
"""Check that no evaluation row of a campaign was lost or doubled (run it after every resume).

    python scripts/check_rows.py runs/fig1 [results/fig1 ...]

For every run folder below the given folders (a folder with ``config.json`` and ``metrics.csv``) the
evaluation schedule is ``k * I`` env steps, ``I`` = the run config's ``ExperimentConfig.eval_interval``, after
the untrained evaluation at step 0. A run's rows are correct
when their ``env_steps // I`` are exactly ``0, 1, 2, ..., K`` (none missing, none twice, in order), and a
finished run has ``K = num_timesteps // I``. Prints one line per run and exits 1 if any run is wrong.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from suPER.resolve import from_dict


def check(folder: Path) -> tuple[bool, str]:
    """``(ok, what was found)`` for one run folder."""
    cfg = from_dict(json.loads((folder / "config.json").read_text()))
    interval, total = cfg.eval_interval, cfg.run.num_timesteps
    with open(folder / "metrics.csv", newline="") as fh:
        steps = [int(float(row["env_steps"])) for row in csv.DictReader(fh)]
    try:
        status = json.loads((folder / "manifest.json").read_text()).get("status")
    except (OSError, ValueError):
        status = "unreadable manifest"
    ticks = [s // interval for s in steps]
    expected = list(range(len(steps)))
    problems = []
    if ticks != expected:
        doubled = sorted({t for t in ticks if ticks.count(t) > 1})
        missing = sorted(set(range(max(ticks, default=0) + 1)) - set(ticks))
        problems.append(f"rows wrong (doubled evaluations {doubled}, missing {missing})")
    if status == "finished" and len(steps) != total // interval + 1:
        problems.append(f"finished with {len(steps)} of {total // interval + 1} evaluations")
    summary = f"{len(steps)} rows up to {steps[-1] if steps else 0} env steps (every {interval}), {status}"
    return not problems, summary + ("; " + "; ".join(problems) if problems else "")


def main(paths: list[str]) -> int:
    folders = sorted({p.parent for root in paths for p in Path(root).rglob("metrics.csv")
                      if (p.parent / "config.json").exists()})
    bad = 0
    for folder in folders:
        ok, text = check(folder)
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {folder}: {text}")
    print(f"{len(folders) - bad} of {len(folders)} run folders have every evaluation row exactly once")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["runs"]))
