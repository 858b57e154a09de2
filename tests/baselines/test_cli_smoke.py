"""The baselines of ``suPER/baselines`` (MADDPG, QMIX, ...: every registered algorithm whose trainer lives there)
end to end through the real `super-marl train` command on the opponent envs (tiny budgets); every algorithm's
pursuit run is in tests/test_algorithms.py."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suPER.config import ALGORITHMS
from suPER.envs import ENVS, env_info, env_record

BASELINES = [a for a, spec in ALGORITHMS.items() if spec.trainers["native"].startswith("suPER.baselines.")]

SMALL = {"buffer_size": 500, "rollout_fragment_length": 8, "buffer_episodes": 20}
"""Section fields that, where a baseline's section has them, keep the run small."""


def test_the_baselines_are_found_in_the_registry() -> None:
    assert {"maddpg", "qmix"} <= set(BASELINES)


@pytest.mark.parametrize("algo", BASELINES)
# envs without an opponent team run each algorithm in tests/test_algorithms.py (small pursuit)
@pytest.mark.parametrize("env", [e for e in ENVS if env_record(e).has_opponents])
def test_train_each_env(tmp_path: Path, env: str, algo: str) -> None:
    spec = ALGORITHMS[algo]
    names = {f.name for f in dataclasses.fields(spec.config)}
    small = [a for k, v in SMALL.items() if k in names for a in ("--set", f"{spec.section}.{k}={v}")]
    args = ["--env", env, "--algo", algo, "--num-timesteps", "120", "--eval-interval", "60", "--eval-episodes", "1",
            "--no-progress", "--out", str(tmp_path), "--set", "env.horizon=30",
            "--set", f"{spec.section}.learning_starts=40", *small]
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
    assert set(config) == {"env", *spec.sections, "run"} and config["run"]["algo"] == algo
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(x["env_steps"]) for x in rows] == [0, 60, 120]
    assert all(x["team_return_mean"] not in ("", "nan") for x in rows)
    assert len([c for c in rows[0] if c.startswith("return_")]) == len(env_info(env)["learner_ids"])
    assert int(rows[-1]["updates"]) > 0  # it learned after learning_starts
