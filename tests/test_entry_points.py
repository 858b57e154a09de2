"""The paper's own commands run as typed (subprocess, tiny budgets): main.py, seac/train.py, run_all.sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from suPER import config as C
from suPER.campaigns import load_grid

TINY_PURSUIT = ["--horizon", "60", "--env_pursuit_n_evaders", "10", "--set", "env.kwargs.x_size=10", "--set",
                "env.kwargs.y_size=10", "--set", "env.kwargs.max_cycles=60"]


def env_without_pythonpath() -> dict[str, str]:
    """The entry points find the package themselves, as when a user types the command."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline"}


def finished_runs(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads((p.parent / "config.json").read_text())
            for p in out.glob("*/manifest.json") if json.loads(p.read_text())["status"] == "finished"}


def test_main_py_runs_the_readme_command(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cmd = [sys.executable, "suPER/experiments/main.py", "--env", "pursuit", "--suPER", "True", "--suPER_mode",
           "quantile", "--suPER_bandwidth", "0.1", "--seed", "1", "--num_seeds", "2", "--ray_local_mode", "--use_gpu",
           "0", "--num_timesteps", "150", "--eval_interval", "75", "--eval_episodes", "1", "--fully_connected", "false",
           *TINY_PURSUIT, "--set", "dqn.learning_starts=50", "--model", "mlp", "--no-progress", "--out", str(out)]
    res = subprocess.run(cmd, cwd=C.ROOT, env=env_without_pythonpath(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    runs = finished_runs(out)
    assert sorted(runs) == ["pursuit__ddqn_super_quantile__s1", "pursuit__ddqn_super_quantile__s2"]
    cfg = runs["pursuit__ddqn_super_quantile__s1"]
    assert cfg["relay"]["enabled"] and cfg["relay"]["mode"] == "quantile" and cfg["relay"]["bandwidth"] == 0.1
    assert cfg["run"]["num_timesteps"] == 150 and cfg["run"]["device"] == "cpu"
    assert "--ray_local_mode has no effect" in res.stderr


def test_seac_train_py_with_sacred_settings(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cmd = [sys.executable, "train.py", "--out", str(out), "--no-progress", "with", "env=pursuit", "seed=3",
           "num_env_steps=120", "time_limit=60", "eval_interval=60", "episodes_per_eval=1", "num_steps=3", "lr=0.001",
           "env.kwargs.x_size=10", "env.kwargs.y_size=10", "env.kwargs.n_evaders=10", "env.kwargs.max_cycles=60"]
    res = subprocess.run(cmd, cwd=C.ROOT / "seac", env=env_without_pythonpath(), capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    ((name, cfg),) = finished_runs(out).items()
    assert name == "pursuit__seac__s3" and cfg["run"]["num_timesteps"] == 120 and cfg["env"]["horizon"] == 60
    assert cfg["seac"]["n_steps"] == 3 and cfg["seac"]["lr"] == 0.001 and cfg["run"]["eval_episodes"] == 1
    bad = subprocess.run([sys.executable, "train.py", "with", "colour=red"], cwd=C.ROOT / "seac",
                         env=env_without_pythonpath(), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: with: expected a SEAC setting") and "'colour'" in bad.stderr


def test_run_all_sh_defaults_to_the_original_experiments() -> None:
    env = env_without_pythonpath()
    # bare, as the original's README types it: the default submission, here refused in one line because no
    # cluster answers at the address (port 9: nothing listens there)
    bare = subprocess.run(["./run_all.sh"], cwd=C.ROOT, env={**env, "PYTHON": sys.executable,
                                                            "RAY_ADDRESS": "http://127.0.0.1:9"},
                          capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr, bare.stderr
    said = bare.stderr.strip().splitlines()
    assert len(said) == 2 and "without MADDPG and SEAC" in said[0] and said[1].startswith("error: --address:")
    res = subprocess.run(["./run_all.sh", "--dry-run"], cwd=C.ROOT, env={**env, "PYTHON": sys.executable},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "without MADDPG and SEAC" in res.stderr and "seeds 1-3" in res.stderr
    grid = load_grid(C.ROOT / "experiments" / "paper_grid.yaml", seeds=3)
    expected = {r.run_name for r in grid.runs if r.algo not in ("maddpg", "seac") and not r.pending}
    submitted = [line for line in res.stdout.splitlines() if line.startswith("ray job submit")]
    assert len(submitted) == len(expected) == 117  # the original: 39 lines x seeds 1, 2, 3
    assert all(any(f"paper-{n}-" in line for line in submitted) for n in expected)
