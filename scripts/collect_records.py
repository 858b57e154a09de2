#!/usr/bin/env python
"""Copy the small records of a campaign's finished runs into the repository (never checkpoints).

    python scripts/collect_records.py /work/fig1/runs/fig1 results/fig1

For every run folder directly below SRC whose ``manifest.json`` says ``finished``, copies ``config.json``,
``manifest.json``, ``metrics.csv`` (and ``final_games.json`` where there is one) to ``DST/<run-folder>/``
(atomically, file by file, as text: line ends become newlines), after checking its evaluation rows with
``check_rows.check`` (every evaluation exactly once); a record DST already holds is left alone and counted.
Unfinished, failed or wrongly-rowed runs are listed and skipped. ``super-marl plot DST`` then redraws the figure
and tables. Exits 1 when a finished run's rows are wrong, 2 on bad arguments.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from suPER.runs import FINAL_GAMES_FILE, atomic_write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_rows import check  # noqa: E402

RECORD_FILES = ("config.json", "manifest.json", "metrics.csv")
"""what a committed run record holds (the run's resolved config, provenance and evaluation rows)"""

OPTIONAL_FILES = (FINAL_GAMES_FILE,)
"""copied too where the run wrote them (battle runs' final policy in 100 varied games)"""


def collect(src: Path, dst: Path) -> int:
    """Copy finished runs' records from ``src`` to ``dst``; returns the exit code. Prints a line per run copied
    (``new`` or ``updated``), skipped or failing, and a count; a record whose files ``dst`` already holds (as
    text) is left alone and only counted."""
    code = 0
    counts = {"new": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    for folder in sorted(p for p in src.iterdir() if (p / "manifest.json").is_file()):
        try:
            status = json.loads((folder / "manifest.json").read_text()).get("status")
        except (OSError, ValueError):
            status = "unreadable manifest"
        if status != "finished":
            print(f"skip {folder.name}: {status}")
            counts["skipped"] += 1
            continue
        ok, what = check(folder)
        if not ok:
            print(f"FAIL {folder.name}: {what}")
            code = 1
            continue
        names = (*RECORD_FILES, *(n for n in OPTIONAL_FILES if (folder / n).is_file()))
        target = dst / folder.name
        same = [(target / n).is_file() and (target / n).read_text() == (folder / n).read_text() for n in names]
        if all(same):
            counts["unchanged"] += 1
            continue
        kind = "updated" if target.is_dir() else "new"
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            atomic_write_text(target / name, (folder / name).read_text())
        counts[kind] += 1
        print(f"{kind} {folder.name}: {what}")
    print(", ".join(f"{n} {k}" for k, n in counts.items()) + f" -> {dst}" + (" (commit the new records)"
                                                                            if counts["new"] + counts["updated"] else ""))
    return code


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[0]).is_dir():
        print("usage: python scripts/collect_records.py SRC_RUNS_FOLDER DST_RESULTS_FOLDER (SRC must be a folder)",
              file=sys.stderr)
        return 2
    return collect(Path(argv[0]), Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
