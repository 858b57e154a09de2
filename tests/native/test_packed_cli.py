"""`super-marl train --num-seeds R --pack`: one run folder per seed, unpacked layout, resumable, bad input."""

from __future__ import annotations

import csv
import json
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from suPER import cli
from suPER.models import BatchedQNet

TINY = ["train", "--env", "pursuit", "--num-seeds", "2", "--pack", "--eval-episodes", "1", "--device", "cpu",
        "--no-progress", "--super", "--set", "env.horizon=40", "--set", "env.kwargs.x_size=8",
        "--set", "env.kwargs.y_size=8", "--set", "env.kwargs.n_pursuers=3", "--set", "env.kwargs.n_evaders=4",
        "--set", "dqn.hiddens=16", "--set", "dqn.batch_size=8", "--set", "dqn.buffer_size=400",
        "--set", "dqn.learning_starts=40", "--set", "relay.window=50"]
NAMES = ["pursuit__ddqn_super_quantile__s1", "pursuit__ddqn_super_quantile__s2"]


def steps_of(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(float(r["env_steps"])) for r in csv.DictReader(f)]


def test_pack_writes_one_unpacked_run_folder_per_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_bars = [a for a in TINY if a != "--no-progress"]  # one progress bar per run of the pack
    assert cli.main([*with_bars, "--num-timesteps", "64", "--eval-interval", "32", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    for name in NAMES:  # each run's own bar reached its budget
        assert any(name in line and "64/64" in line for line in captured.err.splitlines()), captured.err
    for name in NAMES:
        run_dir = tmp_path / name
        assert f"{name}: final team return" in out
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "finished" and manifest["env_steps"] == 64
        assert manifest["pack"]["size"] == 2 and manifest["pack"]["runs"] == NAMES
        assert steps_of(run_dir) == [0, 32, 64] and (run_dir / "curve.png").is_file()
        final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
        BatchedQNet(3, (7, 7, 3), 5, hiddens=16).load_state_dict(final["q_net"])  # an unpacked run's layout
        assert final["updates"] == 6  # fragments ending at 44..64
    # a finished seed is skipped; the rest is packed (here: nothing left)
    assert cli.main([*TINY, "--num-timesteps", "64", "--eval-interval", "32", "--out", str(tmp_path)]) == 0
    assert "already finished" in capsys.readouterr().out


def test_pack_of_a_non_dqn_algorithm_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--env", "pursuit", "--num-seeds", "2", "--pack", "--algo", "seac", "--num-timesteps",
                     "64", "--no-progress", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--pack" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_sigkilled_pack_resumes_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL after the first evaluations; the same command resumes both runs to the end, every row once."""
    from tests.native.test_resume import kill, start

    args = [*TINY, "--num-timesteps", "400", "--eval-interval", "100", "--out", str(tmp_path)]
    proc = start([sys.executable, "-m", "suPER.cli", *args])
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if all((tmp_path / n / "metrics.csv").exists() and len(steps_of(tmp_path / n)) >= 2 for n in NAMES):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the pack ended before it could be killed"
    finally:
        kill(proc)
    assert proc.returncode == -signal.SIGKILL
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "said running, but no process was writing it" in capsys.readouterr().err
    for name in NAMES:
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["status"] == "finished" and len(manifest["resumed"]) == 1
        assert steps_of(tmp_path / name) == [0, 100, 200, 300, 400]
        assert torch.load(tmp_path / name / "checkpoints" / "final.pt", weights_only=True)["updates"] == 90
