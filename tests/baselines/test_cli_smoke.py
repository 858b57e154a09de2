"""MADDPG and QMIX end to end through the real `super-marl train` command on each paper env (tiny budgets)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suPER.envs import ENVS, env_info


@pytest.mark.parametrize("algo", ["maddpg", "qmix"])
@pytest.mark.parametrize("env", list(ENVS))
def test_train_each_env(tmp_path: Path, env: str, algo: str) -> None:
    small = {"maddpg": ["--set", "maddpg.buffer_size=500", "--set", "maddpg.rollout_fragment_length=8"],
             "qmix": ["--set", "qmix.buffer_episodes=20"]}[algo]
    args = ["--env", env, "--algo", algo, "--num-timesteps", "120", "--eval-interval", "60", "--eval-episodes", "1",
            "--no-progress", "--out", str(tmp_path), "--set", "env.horizon=30", "--set", f"{algo}.learning_starts=40",
            *small]
    run_env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    run_env.pop("WANDB_API_KEY", None)
    r = subprocess.run([sys.executable, "-m", "suPER.cli", "train", *args], capture_output=True, text=True,
                       timeout=300, env=run_env)
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = tmp_path / f"{env}__{algo}__s1"
    for name in ("config.json", "manifest.json", "metrics.csv", "curve.png", "checkpoints/final.pt"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
    config = json.loads((run_dir / "config.json").read_text())
    assert algo in config and "dqn" not in config and config["run"]["algo"] == algo
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(x["env_steps"]) for x in rows] == [0, 60, 120]
    assert all(x["team_return_mean"] not in ("", "nan") for x in rows)
    assert len([c for c in rows[0] if c.startswith("return_")]) == len(env_info(env)["learner_ids"])
    assert int(rows[-1]["updates"]) > 0  # it learned after learning_starts
