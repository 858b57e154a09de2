"""Smoke test of benchmarks/packed.py --quick (subprocesses for the separate runs: a few minutes on 2 busy cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_packed_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "packed.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "packed.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "packed/separate aggregate throughput (R=2, cpu): " in proc.stdout
    results = json.loads(out.read_text())["results"]
    assert [r["R"] for r in results if r["device"] == "cpu"] == [1, 2]
    assert all(r["packed_sps"] > 0 and r["separate_sps"] > 0 for r in results)


@pytest.mark.slow
def test_host_overhead_mode_prints_time_per_pack_step(tmp_path: Path) -> None:
    """``--host-overhead``: SUPER packs with device replay and a nearly free network, one line per R."""
    out = tmp_path / "host.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "packed.py"), "--host-overhead", "--runs", "1",
                           "2", "--steps", "60", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in (1, 2):
        assert f"host time per pack step (R={r}, cpu): " in proc.stdout
    results = json.loads(out.read_text())["results"]
    assert [r["R"] for r in results] == [1, 2] and all(r["host_ms_per_pack_step"] > 0 for r in results)


def test_count_ops_stays_flat_in_the_pack_size(tmp_path: Path) -> None:
    """``--count-ops``: a pack step dispatches about the same torch ops whatever R is (the rows of every run gathered
    at once, one TD grouping, one host copy of the selections), so a GPU pack's launches do not grow with R. Before
    that change a pack step cost ~6.7 more ops per run (docs/performance.md); now under 2."""
    out = tmp_path / "ops.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "packed.py"), "--count-ops", "--runs", "1", "4",
                           "--steps", "80", "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, four = json.loads(out.read_text())["results"]
    assert "torch ops per pack step (R=4, cpu): " in proc.stdout
    assert one["ops_per_pack_step"] > 100  # the counter sees the env, replay and networks
    assert "envs/vec_pursuit.py" in one["ops_by_module"] and "replay/per.py" in one["ops_by_module"]
    assert four["ops_per_pack_step"] - one["ops_per_pack_step"] < 2 * 3
