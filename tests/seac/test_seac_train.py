"""SEAC end to end: `super-marl train --algo seac` on each paper env (tiny budgets), and resume."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from suPER import config as C

TINY = ["--num-timesteps", "200", "--eval-interval", "100", "--eval-episodes", "1", "--no-progress",
        "--set", "env.horizon=30"]


def cli_train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "RAY_AUTH_MODE": "disabled"}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "suPER.cli", "train", "--algo", "seac", "--out", str(tmp_path),
                           *TINY, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize(("env", "n_agents", "extra"), [
    ("pursuit", 8, []),
    ("battle", 6, ["--set", "seac.model=conv"]),   # the conv body, and dead learners masked out
    ("adversarial_pursuit", 8, ["--set", "seac.num_envs=2"]),
])
def test_cli_train_each_env(tmp_path: Path, env: str, n_agents: int, extra: list[str]) -> None:
    r = cli_train(tmp_path, "--env", env, *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = tmp_path / f"{env}__seac__s1"
    for name in ("config.json", "manifest.json", "metrics.csv", "curve.png", "checkpoints/final.pt"):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["env_steps"] == 200
    config = json.loads((run_dir / "config.json").read_text())
    assert set(config) == {"env", "seac", "run"} and config["run"]["algo"] == "seac"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["env_steps"]) for r in rows] == [0, 100, 200]
    assert len([c for c in rows[0] if c.startswith("return_")]) == n_agents
    for key in ("policy_loss", "value_loss", "seac_policy_loss", "seac_value_loss", "entropy", "importance_weight_mean"):
        assert np.isfinite(float(rows[-1][key])), key
    assert "final team return" in r.stdout


def test_bad_seac_setting_is_a_one_line_error(tmp_path: Path) -> None:
    r = cli_train(tmp_path, "--env", "pursuit", "--set", "seac.model=rnn")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --set seac.model")


def test_train_py_lists_its_settings_and_names_the_folder_it_was_given(tmp_path: Path) -> None:
    """``python train.py with help`` lists every setting it takes (found only from an error message before); a
    repeated run names the run folder, not an --out the user never typed."""
    script = C.ROOT / "seac" / "train.py"
    env = {**os.environ, "WANDB_MODE": "offline", "RAY_AUTH_MODE": "disabled"}
    r = subprocess.run([sys.executable, str(script), "with", "help"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0 and "num_env_steps" in r.stdout and "seac_lambda" in r.stdout and "entropy_coef" in r.stdout
    args = [sys.executable, str(script), "with", "env=pursuit", "num_env_steps=60", "episodes_per_eval=1",
            "env.horizon=20", "env.kwargs.n_evaders=3"]
    first = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    line = again.stderr.strip().splitlines()[-1]
    assert again.returncode == 2 and line.startswith("error: runs/pursuit__seac__s1 already holds a finished run")
    assert "--out:" not in line
