"""End to end through the real `super-marl train` command on each paper environment (tiny budgets)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from suPER.opponents import OPPONENTS_DIR, sha256

TINY = ["--num-timesteps", "300", "--eval-interval", "150", "--eval-episodes", "1", "--no-progress",
        "--set", "env.horizon=60", "--set", "dqn.learning_starts=100", "--set", "dqn.buffer_size=2000"]
FEW_FINAL_GAMES = ["--set", "run.final_games=2"]
"""battle's runs end with the final policy in varied games, 100 by default (tests/test_costs.py): 2 here keep the
tiny runs tiny (the 100 games were ~40% of a 300-step battle run's wall time: 37-41 s with them, 23-27 s with 2)"""


def train(tmp_path: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "RAY_AUTH_MODE": "disabled", **env_vars}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "suPER.cli", "train", "--out", str(tmp_path), *TINY, *args],
                          capture_output=True, text=True, timeout=600, env=env)


def check_run_folder(run_dir: Path, n_agents: int, super_: bool = False) -> list[dict[str, str]]:
    for name in ("config.json", "manifest.json", "metrics.csv", "curve.png", "checkpoints/final.pt"):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["env_steps"] == 300
    assert manifest["packages"]["torch"] and manifest["packages"]["pettingzoo"] and "git_commit" in manifest
    # the instruction set torch's float kernels were picked for: a run repeats bit for bit only on the same one
    assert manifest["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["num_timesteps"] == 300 and config["env"]["horizon"] == 60
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["env_steps"]) for r in rows] == [0, 150, 300]
    assert all(r["team_return_mean"] not in ("", "nan") for r in rows)
    assert len([c for c in rows[0] if c.startswith("return_")]) == n_agents
    assert ("fraction_shared_mean" in rows[0]) == super_
    assert (run_dir / "curve.png").read_bytes()[:4] == b"\x89PNG"
    # a run with final games (battle's YAML sets them; adversarial pursuit's and pursuit's do not) ends with them
    games = config["run"]["final_games"]
    assert (run_dir / "final_games.json").exists() == (games > 0) == (config["env"]["name"] == "battle")
    if games:
        assert json.loads((run_dir / "final_games.json").read_text())["games"] == games == 2  # FEW_FINAL_GAMES
    return rows


@pytest.mark.parametrize(("env", "n_agents", "extra"), [
    ("pursuit", 8, []),
    ("battle", 6, ["--algo", "dqn", *FEW_FINAL_GAMES]),
    ("adversarial_pursuit", 8, []),
])
def test_train_each_env(tmp_path: Path, env: str, n_agents: int, extra: list[str]) -> None:
    r = train(tmp_path, "--env", env, *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    algo = "dqn" if extra else "ddqn"
    run_dir = tmp_path / f"{env}__{algo}__s1"
    check_run_folder(run_dir, n_agents)
    assert f"curve: {run_dir / 'curve.png'}" in r.stdout and "final team return" in r.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if env == "pursuit":
        assert "opponent_sha256" not in manifest
    else:  # the YAML default opponent is the shipped file; the manifest pins which one
        shipped = OPPONENTS_DIR / f"{env}.safetensors"
        assert manifest["opponent_file"] == str(shipped) and manifest["opponent_sha256"] == sha256(shipped)


def test_super_parameter_sharing_and_paper_spelling(tmp_path: Path) -> None:
    r = train(tmp_path, "--env", "pursuit", "--suPER", "True", "--suPER_mode", "stochastic",
              "--suPER_bandwidth", "0.5", "--num_seeds", "2", "--use_gpu", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    for seed in (1, 2):
        rows = check_run_folder(tmp_path / f"pursuit__ddqn_super_stochastic__s{seed}", 8, super_=True)
        assert float(rows[-1]["relayed_rows_total"]) > 0
    r = train(tmp_path, "--env", "battle", "--parameter_sharing=true", *FEW_FINAL_GAMES)
    assert r.returncode == 0, r.stderr[-2000:]
    check_run_folder(tmp_path / "battle__ddqn_ps__s1", 6)


def test_the_manifest_names_the_cpu_kernels_a_run_used(tmp_path: Path) -> None:
    """A run repeats bit for bit only with the same CPU kernels; pinning them (here to ATen's portable ones)
    must show in the manifest, or two machines' runs cannot be told apart."""
    r = train(tmp_path, "--env", "pursuit", "--num-timesteps", "150", "--eval-interval", "150",
              ATEN_CPU_CAPABILITY="default")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "pursuit__ddqn__s1" / "manifest.json").read_text())
    assert manifest["cpu_capability"] == "DEFAULT"
    assert manifest["cpu_kernel_env"]["ATEN_CPU_CAPABILITY"] == "default"


def test_wandb_offline_writes_under_run_folder(tmp_path: Path) -> None:
    r = train(tmp_path, "--env", "pursuit", "--wandb", "--wandb-project", "test-proj", "--tag", "wb")
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = tmp_path / "pursuit__ddqn__s1__wb"
    check_run_folder(run_dir, 8)
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    assert "WANDB_API_KEY" not in (run_dir / "config.json").read_text()


def test_online_wandb_without_key_is_a_one_line_error(tmp_path: Path) -> None:
    r = train(tmp_path, "--env", "pursuit", "--wandb", "--wandb-mode", "online")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --wandb-mode online")
