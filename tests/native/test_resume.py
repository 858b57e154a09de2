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
from suPER import resolve as R
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


FAULT_RUNS = {
    "ddqn": (400, ["--super"]),
    "ddqn-eval-parallel": (400, ["--super", "--eval-parallel"]),
    "qmix": (400, ["--algo", "qmix", "--set", "qmix.learning_starts=100", "--set", "qmix.buffer_episodes=50",
                   "--set", "qmix.rnn_hidden=16", "--set", "qmix.mixing_embed_dim=8"]),
}
"""Case -> (budget, flags) of the SIGKILL fault runs: native DQN (evaluating in-process, and forked: a kill may land
while an evaluation is in flight) and the faster baseline at tiny settings."""

KILL_IN_SAVE = """
import os, signal, sys
from suPER import cli, loop
k, calls, real = int(os.environ["KILL_IN_SAVE"]), [0], loop.torch_save
def save(obj, path):
    calls[0] += 1
    real(obj, path)
    if calls[0] == k:  # half the temp file written, then killed: as a SIGKILL inside torch.save
        os.truncate(path, os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
loop.torch_save = save
sys.exit(cli.main(sys.argv[1:]))
"""
"""Runs ``super-marl ARGV`` and SIGKILLs itself inside the ``KILL_IN_SAVE``-th checkpoint write."""


def run_dir_of(tmp_path: Path, algo: str) -> Path:
    return tmp_path / ("pursuit__ddqn_super_quantile__s1" if algo.startswith("ddqn") else "pursuit__qmix__s1")


def start(cmd: list[str], **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**cli_env(), **env})


def wait_for_rows(proc: subprocess.Popen[bytes], run_dir: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (run_dir / "metrics.csv").exists() and len(rows(run_dir)) >= n:
            return
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()[-2000:]


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("algo", [pytest.param(a, marks=pytest.mark.slow) if "parallel" in a else a for a in FAULT_RUNS])
def test_sigkill_at_random_points_then_resume_logs_every_evaluation_once(tmp_path: Path, algo: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Killed inside a checkpoint write (a half-written temp file left) and at a random moment (fixed RNG),
    the same command resumes each time and ends with every evaluation row exactly once."""
    budget, flags = FAULT_RUNS[algo]
    args = ["train", *TINY, *flags, "--num-timesteps", str(budget), "--out", str(tmp_path)]
    run_dir = run_dir_of(tmp_path, algo)
    rng = np.random.default_rng(2023)
    # 1. SIGKILL inside the k-th torch.save (k = 2: the checkpoint after the evaluation at 100, or 3)
    proc = start([sys.executable, "-c", KILL_IN_SAVE, *args], KILL_IN_SAVE=str(int(rng.integers(2, 4))))
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
    kill(proc)
    stale = set((run_dir / "checkpoints").glob(".latest.pt.*"))
    assert stale, "the kill left no temp file to clean"
    # 2. resumed, then SIGKILLed at a random moment after its next evaluation
    proc = start([sys.executable, "-m", "suPER.cli", *args])
    try:
        wait_for_rows(proc, run_dir, len(rows(run_dir)) + 1)
        time.sleep(float(rng.uniform(0.0, 0.5)))
    finally:
        kill(proc)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"  # SIGKILL: nobody updated it
    # the resumed run cleaned the stale temp file (the second kill may land in a write of its own: a new one)
    assert not stale & set((run_dir / "checkpoints").glob(".latest.pt.*"))
    # 3. resumed to the end (in this process: the kills above are what needed real processes)
    from suPER import cli

    capsys.readouterr()
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "resuming" in err and "said running, but no process was writing it" in err
    steps = rows(run_dir)
    assert steps == list(range(0, budget + 1, 100)) and all(a < b for a, b in zip(steps, steps[1:]))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["env_steps"] == budget and len(manifest["resumed"]) == 2
    assert [x["after_status"] for x in manifest["resumed"]] == ["running", "running"]
    assert {x["cpu_capability"] for x in manifest["resumed"]} == {torch.backends.cpu.get_cpu_capability()}
    assert not (run_dir / "checkpoints" / "latest.pt").exists() and not list(run_dir.rglob(".*"))
    if algo.startswith("ddqn"):
        final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
        assert final["env_steps"] == budget and final["updates"] == expected_updates(budget)  # counters restored


def test_a_live_writer_refuses_a_second_and_its_sigkill_leaves_no_lock(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """One real ``super-marl train`` process holds the folder: the same command started again is refused (exit 2,
    one line naming the folder, the holder's pid); once the holder is SIGKILLed the folder is free at once."""
    import suPER.native.dqn  # noqa: F401  (imported before the holder starts, so the refusal below is quick)
    from suPER import cli

    budget, flags = FAULT_RUNS["ddqn"]
    args = ["train", *TINY, *flags, "--num-timesteps", str(budget), "--out", str(tmp_path)]
    run_dir = run_dir_of(tmp_path, "ddqn")
    holder = start([sys.executable, "-m", "suPER.cli", *args])
    try:
        wait_for_rows(holder, run_dir, 1)
        capsys.readouterr()
        code = cli.main(args)
        err = capsys.readouterr().err
        assert holder.poll() is None, "the holder finished before the second writer ran"
    finally:
        kill(holder)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(run_dir) in lines[0] and "another process" in lines[0] and f"pid {holder.pid}" in lines[0]
    assert (run_dir / ".writer.lock").exists()  # left by the SIGKILL, but no longer locked:
    assert cli.main(args) == 0
    assert rows(run_dir) == list(range(0, budget + 1, 100)) and not (run_dir / ".writer.lock").exists()


class Interrupt(Exception):
    pass


def resolve(tmp_path: Path, budget: int, **run: object) -> C.ExperimentConfig:
    overrides = {"env.horizon": 50, "dqn.learning_starts": 100, "dqn.buffer_size": 3000, "dqn.hiddens": 32,
                 "env.kwargs.x_size": 10, "env.kwargs.y_size": 10, "env.kwargs.n_evaders": 10}
    named = {"run.num_timesteps": budget, "run.eval_interval": 100, "run.eval_episodes": 1, "run.out": str(tmp_path),
             "run.progress": False, "dqn.model": "mlp", "relay.enabled": True, "relay.mode": "stochastic",
             **{f"run.{k}": v for k, v in run.items()}}
    return R.resolve("pursuit", "ddqn", overrides=overrides, named=named)


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


def test_an_unfinished_run_of_the_earlier_config_layout_resumes(tmp_path: Path) -> None:
    """A run folder written before the rule parameters moved under ``relay.params`` (config.json and the
    checkpoint's config holding every rule's parameters as ``relay`` fields, ``"k": 1`` in a stochastic run)
    resumes: both are migrated on read, and the resumed run writes the current layout."""
    cfg = resolve(tmp_path, 300)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=interrupt_at(150))
    run_dir = tmp_path / cfg.run_name

    def old(config: dict[str, object]) -> dict[str, object]:
        relay = {k: v for k, v in config["relay"].items() if k != "params"}  # type: ignore[union-attr]
        return {**config, "relay": {**relay, "k": 1}}

    (run_dir / "config.json").write_text(json.dumps(old(json.loads((run_dir / "config.json").read_text()))))
    latest = run_dir / "checkpoints" / "latest.pt"
    saved = torch.load(latest, weights_only=False)
    saved["config"] = old(saved["config"])
    torch.save(saved, latest)
    assert campaigns.execute(cfg).env_steps == 300 and rows(run_dir) == [0, 100, 200, 300]
    assert json.loads((run_dir / "config.json").read_text())["relay"]["params"] == {}


def test_a_checkpoint_with_per_fragment_relay_fractions_resumes(tmp_path: Path) -> None:
    """A checkpoint written before the relay tally (``relay_fraction``: each fragment's fraction, since the last
    evaluation) resumes with the tally at zero and the run still relays and logs its fractions."""
    cfg = resolve(tmp_path, 300)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=interrupt_at(150))
    latest = tmp_path / cfg.run_name / "checkpoints" / "latest.pt"
    saved = torch.load(latest, weights_only=False)
    tally = saved["trainer"].pop("relay_tally")
    assert int(tally["fresh"].sum()) > 0  # the rows counted since the last metrics row travel with the checkpoint
    per_fragment = torch.full((len(tally["fresh"]),), 0.1, dtype=torch.float64)
    saved["trainer"]["relay_fraction"] = [per_fragment, per_fragment]  # the old layout
    torch.save(saved, latest)
    assert campaigns.execute(cfg).env_steps == 300 and rows(tmp_path / cfg.run_name) == [0, 100, 200, 300]
    with (tmp_path / cfg.run_name / "metrics.csv").open() as f:
        fractions = [float(r["fraction_shared_mean"]) for r in csv.DictReader(f)]
    assert all(0.0 < f < 1.0 for f in fractions[2:])  # learning starts at 100: a stochastic 10% relay from there


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


@pytest.mark.parametrize("where", ["on_start", "trainer"])
def test_any_exception_leaves_the_manifest_failed_never_running(tmp_path: Path, where: str) -> None:
    """An exception before the trainer's first step (a W&B start, the caller's start hook) or inside it ends
    with the manifest ``failed`` and the lock released, so the next run resumes or restarts."""
    cfg = resolve(tmp_path, 300)

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        if where == "on_start":
            campaigns.execute(cfg, on_start=boom)
        else:
            campaigns.execute(cfg, progress=boom)
    run_dir = tmp_path / cfg.run_name
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"
    assert not (run_dir / ".writer.lock").exists()
    assert campaigns.execute(cfg).env_steps == 300 and rows(run_dir) == [0, 100, 200, 300]
