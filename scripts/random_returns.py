#!/usr/bin/env python
"""Measure the random-policy team returns of the env configurations of some run folders, into the shipped data.

    python scripts/random_returns.py results/fig1 [MORE RUN FOLDERS ...]

``analysis.random_returns`` reads ``experiments/random_returns.json`` before it measures anything, so
``plot --analysis`` on runs of a shipped env configuration does not spend minutes re-measuring them. This adds the
env configurations of the given runs that the file lacks (20 seeded episodes each, tens of seconds per env),
each entry with how, where and at which commit it was measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from suPER import analysis, plotting
from suPER.runs import cpu_info

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if not argv or not all(Path(a).exists() for a in argv):
        print("usage: python scripts/random_returns.py RUN_FOLDERS... (folders of run folders)", file=sys.stderr)
        return 2
    data = analysis.RANDOM_RETURNS_DATA
    before = set(json.loads(data.read_text())) if data.is_file() else set()
    curves = plotting.load_run_curves(plotting.find_run_folders(argv))
    analysis.random_returns(curves, data, data=None, log=print)
    stored = json.loads(data.read_text()) if data.is_file() else {}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for key in set(stored) - before:
        stored[key].update(commit=commit, date=time.strftime("%Y-%m-%d"), machine=cpu_info()["cpu"])
        print(f"{key}: {stored[key]['random_team_return']:.3f}")
    analysis.atomic_write_json(data, stored)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
