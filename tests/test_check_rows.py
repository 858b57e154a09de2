"""scripts/check_rows.py: the after-resume check that no evaluation row was lost or doubled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suPER.resolve import resolve

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_rows.py"


def run_folder(root: Path, name: str, steps: list[int], status: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    cfg = resolve("pursuit", "ddqn", named={"run.num_timesteps": 400, "run.eval_points": 4, "env.horizon": 50})
    assert cfg.eval_interval == 100
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    (folder / "manifest.json").write_text(json.dumps({"status": status}))
    (folder / "metrics.csv").write_text("env_steps,team_return_mean\n" + "".join(f"{s},-1.5\n" for s in steps))
    return folder


@pytest.mark.parametrize(("steps", "status", "ok"), [
    ([0, 100, 200, 300, 400], "finished", True),
    ([0, 100, 200], "running", True),            # unfinished: rows so far
    ([0, 100, 100, 200], "running", False),      # doubled after a resume
    ([0, 100, 300], "running", False),           # lost
    ([0, 100, 200, 300], "finished", False),     # finished without its last evaluation
    ([0, 200, 100], "running", False),           # out of order
])
def test_rows_checked(tmp_path: Path, steps: list[int], status: str, ok: bool) -> None:
    run_folder(tmp_path, "pursuit__ddqn__s1", steps, status)
    run_folder(tmp_path, "pursuit__ddqn__s2", [0, 100], "running")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == (0 if ok else 1), proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("ok " if ok else "BAD")
    assert f"{1 + ok} of 2 run folders" in proc.stdout
