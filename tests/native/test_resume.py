"""Checkpoint at every evaluation and resume: SIGKILL mid-run, in-process interruption, config mismatch."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from suPER import campaigns
from suPER import config as C
from suPER.loop import to_numpy, to_torch
from suPER.replay import MultiAgentPER

TINY = ["--env", "pursuit", "--model", "mlp", "--eval-interval", "100", "--eval-episodes", "1", "--no-progress",
        "--set", "env.horizon=50", "--set", "dqn.learning_starts=100", "--set", "dqn.buffer_size=3000",
        "--set", "dqn.hiddens=32", "--set", "env.kwargs.x_size=10", "--set", "env.kwargs.y_size=10",
        "--set", "env.kwargs.n_evaders=10"]


def expected_updates(budget: int, fragment: int = 4, learning_starts: int = 100) -> int:
    """One update per fragment that ends after learning_starts (fragments never straddle the budget here)."""
    return sum(1 for end in range(fragment, budget + 1, fragment) if end > learning_starts)


def rows(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(float(r["env_steps"])) for r in csv.DictReader(f)]


def cli_env() -> dict[str, str]:
    env = {**os.environ, "WANDB_MODE": "offline", "RAY_AUTH_MODE": "disabled"}
    env.pop("WANDB_API_KEY", None)
    return env


def test_sigkill_mid_run_then_resume_logs_every_evaluation_once(tmp_path: Path) -> None:
    budget = 1000
    cmd = [sys.executable, "-m", "suPER.cli", "train", *TINY, "--super", "--num-timesteps", str(budget),
           "--out", str(tmp_path)]
    run_dir = tmp_path / "pursuit__ddqn_super_quantile__s1"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (run_dir / "metrics.csv").exists() and len(rows(run_dir)) >= 4:  # evaluations 0..300 logged
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed: " + proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()  # type: ignore[union-attr]
    before = rows(run_dir)
    assert before[-1] < budget and json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    assert (run_dir / "checkpoints" / "latest.pt").exists()

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=cli_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming" in r.stderr
    assert rows(run_dir) == list(range(0, budget + 1, 100))  # every evaluation exactly once, budget reached
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["env_steps"] == budget and len(manifest["resumed"]) == 1
    assert not (run_dir / "checkpoints" / "latest.pt").exists()  # only unfinished runs keep it
    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
    assert final["env_steps"] == budget and final["updates"] == expected_updates(budget)  # counters restored
    # a finished run is not touched again
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=cli_env())
    assert r.returncode == 2 and "already holds a finished run" in r.stderr


class Interrupt(Exception):
    pass


def resolve(tmp_path: Path, budget: int, **run: object) -> C.ExperimentConfig:
    overrides = {"env.horizon": 50, "dqn.learning_starts": 100, "dqn.buffer_size": 3000, "dqn.hiddens": 32,
                 "env.kwargs.x_size": 10, "env.kwargs.y_size": 10, "env.kwargs.n_evaders": 10}
    named = {"run.num_timesteps": budget, "run.eval_interval": 100, "run.eval_episodes": 1, "run.out": str(tmp_path),
             "run.progress": False, "dqn.model": "mlp", "relay.enabled": True, "relay.mode": "stochastic",
             **{f"run.{k}": v for k, v in run.items()}}
    return C.resolve("pursuit", "ddqn", overrides=overrides, named=named)


def interrupt_at(steps: int):  # noqa: ANN201
    def progress(env_steps: int, stats: dict[str, float]) -> None:
        if env_steps >= steps:
            raise Interrupt
    return progress


def test_resume_after_the_last_checkpoint_restores_networks_and_counters(tmp_path: Path) -> None:
    """Interrupted right after its final checkpoint, the resumed run restores and saves the same state."""
    cfg = resolve(tmp_path, 300)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=interrupt_at(300))
    run_dir = tmp_path / cfg.run_name
    saved = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)
    latest = saved["trainer"]
    assert saved["loop"]["env_steps"] == 300 and rows(run_dir) == [0, 100, 200, 300]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"
    summary = campaigns.execute(cfg)
    assert summary.env_steps == 300 and rows(run_dir) == [0, 100, 200, 300]
    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
    assert final["updates"] == latest["updates"] == expected_updates(300)
    for key in ("q_net", "target_net"):
        for name, tensor in latest[key].items():
            assert torch.equal(final[key][name], tensor), (key, name)
    assert final["optimizer"]["state"][0]["step"] == latest["optimizer"]["state"][0]["step"]


@pytest.mark.parametrize("checkpoint_replay", [True, False])
def test_resume_mid_run_with_and_without_replay_in_the_checkpoint(tmp_path: Path, checkpoint_replay: bool) -> None:
    cfg = resolve(tmp_path, 600, checkpoint_replay=checkpoint_replay)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=interrupt_at(330))  # killed between the evaluations at 300 and 400
    run_dir = tmp_path / cfg.run_name
    saved = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)
    state = saved["trainer"]
    assert saved["loop"]["env_steps"] == 300 and (state["replay"] is not None) == checkpoint_replay
    if checkpoint_replay:
        assert int(state["replay"]["size"].min()) >= 300  # own rows of 300 steps (plus relayed copies)
    assert rows(run_dir) == [0, 100, 200, 300]
    summary = campaigns.execute(cfg)
    assert summary.env_steps == 600 and rows(run_dir) == [0, 100, 200, 300, 400, 500, 600]
    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
    refill = 0 if checkpoint_replay else expected_updates(400, learning_starts=100) - expected_updates(300)
    assert final["updates"] == expected_updates(600) - refill


def test_unfinished_run_with_another_config_is_refused(tmp_path: Path) -> None:
    cfg = resolve(tmp_path, 300)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=interrupt_at(150))
    other = resolve(tmp_path, 300)
    other.dqn.lr = 1e-3
    with pytest.raises(ValueError, match=r"different configuration \(dqn.lr"):
        campaigns.execute(other)
    # volatile settings (threads, progress, device) may change; --overwrite starts over
    same = resolve(tmp_path, 300, threads=0)
    assert campaigns.execute(same).env_steps == 300
    fresh = campaigns.execute(other, overwrite=True)
    assert fresh.env_steps == 300 and rows(tmp_path / cfg.run_name) == [0, 100, 200, 300]


def test_replay_and_rng_state_round_trip_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    buf = MultiAgentPER(3, 50, (2, 2), np.float16, rng=np.random.default_rng(5))
    for _ in range(4):
        k = 30
        buf.add(rng.integers(0, 3, k), rng.random((k, 2, 2)), rng.integers(0, 4, k), rng.random(k),
                rng.random((k, 2, 2)), rng.random(k) < 0.1)
    state = {"replay": buf.state_dict(copy=False), "rng": buf.rng.bit_generator.state, "x": np.float64(1.5)}
    torch.save(to_torch(state), tmp_path / "c.pt")
    back = to_numpy(torch.load(tmp_path / "c.pt", weights_only=True))
    assert back["x"] == 1.5
    other = MultiAgentPER(3, 50, (2, 2), np.float16, rng=np.random.default_rng(99))
    other.load_state_dict(back["replay"])
    other.rng.bit_generator.state = back["rng"]
    for k, v in buf.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[k], v, err_msg=k)
    a, b = buf.sample(8), other.sample(8)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.obs, b.obs)
