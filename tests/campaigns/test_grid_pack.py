"""`super-marl grid run --pack`: runs grouped by pack key, a memory estimate per pack, one Tune trial per pack."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from suPER import campaigns
from suPER.campaigns.packs import plan_packs
from suPER.cli import main
from suPER.native.pack_memory import replay_bytes
from suPER.replay import CompactPER, MultiAgentPER
from suPER.replay.compact import CellCodec

GRID = """
name: tinypack
seeds: 2
defaults:
  num_timesteps: 120
  eval_interval: 60
  eval_episodes: 1
  model: mlp
  set: {env.horizon: 30, dqn.learning_starts: 40, dqn.buffer_size: 500, dqn.hiddens: 16, relay.window: 50,
        env.kwargs.x_size: 8, env.kwargs.y_size: 8, env.kwargs.n_evaders: 5, env.kwargs.n_pursuers: 4}
runs:
  - {name: plain, env: pursuit, algo: ddqn}
"""


def write_grid(tmp_path: Path, extra: str = "") -> Path:
    grid_file = tmp_path / "tinypack.yaml"
    grid_file.write_text(GRID + extra)
    return grid_file


@pytest.mark.parametrize("shape, dtype", [((7, 7, 3), np.float32), ((5, 5, 2), np.uint8), ((10,), np.float32)])
def test_replay_estimate_is_the_buffers_own_bytes(shape: tuple[int, ...], dtype: type) -> None:
    assert replay_bytes(3, 100, shape, dtype) == MultiAgentPER(3, 100, shape, dtype).nbytes
    buf = CompactPER(3, 100, shape, dtype, n_streams=4)
    est = replay_bytes(3, 100, shape, dtype, "compact", n_streams=4, horizon=10**9)  # no episode ends: no extra frames
    if CellCodec.applies(shape, dtype):  # the estimate takes the palette at its largest, the buffer starts at 256
        palette = CellCodec.MAX_CODES * (shape[-1] * np.dtype(dtype).itemsize + 10)
        assert est - palette == buf.nbytes - buf.codec.nbytes + buf.codec._mult.nbytes
    else:
        assert est == buf.nbytes


def test_a_device_replay_is_estimated_in_the_plain_layout() -> None:
    """TorchPER holds the plain layout (plus a device copy of the P fill levels); a run with
    ``run.replay_device=device`` (or auto on a GPU) is estimated so, whatever ``run.replay_layout`` says."""
    from suPER import config as C
    from suPER.native.pack_memory import env_spec, run_memory_bytes
    from suPER.replay.torch_per import TorchPER

    assert TorchPER(3, 100, (7, 7, 3), np.uint8).nbytes == replay_bytes(3, 100, (7, 7, 3), np.uint8) + 3 * 8
    tiny = {"env.kwargs.x_size": 8, "env.kwargs.y_size": 8, "env.kwargs.n_pursuers": 3, "env.kwargs.n_evaders": 4,
            "dqn.hiddens": 16}
    cfg = {k: C.resolve("pursuit", overrides={**tiny, "run.replay_device": dev, "run.replay_layout": layout,
                                              "run.device": d})
           for k, (dev, layout, d) in {"device": ("device", "compact", "cpu"), "plain": ("numpy", "plain", "cpu"),
                                       "compact": ("numpy", "compact", "cpu"), "gpu": ("auto", "compact", "cuda")}.items()}
    spec = env_spec(cfg["plain"])
    est = {k: run_memory_bytes(c, spec) for k, c in cfg.items()}
    assert est["device"] == est["plain"] == est["gpu"] > est["compact"]


def test_runs_group_by_pack_key_and_split_by_pack_size(tmp_path: Path) -> None:
    grid = campaigns.load_grid(write_grid(tmp_path, "  - {name: super, env: pursuit, algo: dqn, super: true}\n"))
    out = tmp_path / "c"
    packs = plan_packs(grid.runs, out)
    assert [[r.run_name for r in p.runs] for p in packs] == [[r.run_name for r in grid.runs[:2]],
                                                             [r.run_name for r in grid.runs[2:]]]
    assert all(p.packed for p in packs)
    one = plan_packs(grid.runs[:2], out, pack_size=1)
    assert [len(p.runs) for p in one] == [1, 1]
    assert packs[0].bytes == pytest.approx(2 * one[0].bytes, rel=1e-12)  # seeds share shapes: R times one run
    assert packs[0].bytes > 2 * 500 * 4 * 2 * 4  # at least obs + next_obs of 4 policies x 500 rows, float32


def test_a_pack_over_the_memory_limit_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    code = main(["grid", "run", str(write_grid(tmp_path)), "--out", str(out), "--pack", "--pack-memory-gb", "0.0001"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: --pack-memory-gb: pack pursuit") and "+1 (2 runs)" in err[0]
    assert "0.0001 GB limit" in err[0]
    assert not (out / ".tune").exists()  # refused before Ray started


def metrics_steps(folder: Path) -> list[int]:
    with (folder / "metrics.csv").open() as f:
        return [int(float(row["env_steps"])) for row in csv.DictReader(f)]


@pytest.mark.slow
def test_grid_run_pack_resumes_two_seeds_as_one_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from suPER.campaigns.packed import execute_pack
    from suPER.native.packed import PackEnvs

    grid_file = write_grid(tmp_path)
    out = tmp_path / "c"
    grid = campaigns.load_grid(grid_file)
    # the pack is interrupted (as by Ctrl-C) at 80 env steps, after both runs' checkpoint at 60
    step, calls = PackEnvs.step, [0]

    def interrupted_step(self: PackEnvs, *args: object) -> object:
        calls[0] += 1
        if calls[0] > 80:
            raise KeyboardInterrupt
        return step(self, *args)

    monkeypatch.setattr(PackEnvs, "step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        execute_pack([r.config(out=out, progress=False, threads=1, device="cpu") for r in grid.runs])
    monkeypatch.undo()
    assert [metrics_steps(out / r.run_name) for r in grid.runs] == [[0, 60], [0, 60]]

    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline", "COLUMNS": "160"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "suPER.cli", "grid", "run", str(grid_file), "--out", str(out), "--pack"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 run(s) to train (2 resuming from a checkpoint)" in r.stderr
    assert "2 finished now, 0 finished before, 0 failed" in r.stdout
    assert "pack pursuit" in r.stderr and "2 run(s), about" in r.stderr
    assert [metrics_steps(out / r.run_name) for r in grid.runs] == [[0, 60, 120], [0, 60, 120]]
    # the same run trained unpacked: the packed folders have its layout
    ref = tmp_path / "ref"
    campaigns.execute(grid.runs[0].config(out=ref, progress=False))
    layout = sorted(str(p.relative_to(ref / grid.runs[0].run_name)) for p in (ref / grid.runs[0].run_name).rglob("*"))
    for run in grid.runs:
        folder = out / run.run_name
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["status"] == "finished" and manifest["pack"]["size"] == 2
        assert manifest["grid_entry"] == run.entry
        assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == layout
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)  # finished runs are skipped
    assert r.returncode == 0 and "0 finished now, 2 finished before" in r.stdout, r.stderr[-3000:]
