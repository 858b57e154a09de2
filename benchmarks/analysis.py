#!/usr/bin/env python
"""Wall time of ``super-marl plot results/fig1 --analysis`` on the committed records (target: under 30 s on 2 cores).

    python benchmarks/analysis.py [RECORDS]

Runs the real CLI once into a temporary folder and prints the wall time, the phases it announced and the machine.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    from suPER.runs import cpu_info

    records = argv[0] if argv else str(ROOT / "results" / "fig1")
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "suPER.cli", "plot", records, "--analysis", "--out", out],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return 1
    print(f"plot {records} --analysis: {wall:.1f} s wall on {cpu_info()['cpu']} (target < 30 s on 2 cores)")
    for line in r.stderr.splitlines():
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
