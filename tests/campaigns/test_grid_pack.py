"""`super-marl grid run --pack`: runs grouped by pack key, a memory estimate per pack, one Tune trial per pack."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import campaigns
from suPER.campaigns.packs import plan_packs
from suPER.cli import main
from suPER.native.pack_memory import replay_bytes
from suPER.replay import CompactPER, MultiAgentPER
from suPER.replay.compact import CellCodec
from suPER.resolve import resolve

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
    from suPER.native.pack_memory import env_spec, run_memory_bytes
    from suPER.replay.torch_per import TorchPER

    assert TorchPER(3, 100, (7, 7, 3), np.uint8).nbytes == replay_bytes(3, 100, (7, 7, 3), np.uint8) + 3 * 8
    tiny = {"env.kwargs.x_size": 8, "env.kwargs.y_size": 8, "env.kwargs.n_pursuers": 3, "env.kwargs.n_evaders": 4,
            "dqn.hiddens": 16}
    cfg = {k: resolve("pursuit", overrides={**tiny, "run.replay_device": dev, "run.replay_layout": layout,
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


@pytest.mark.parametrize("flags, refused", [
    (["--pack-size", "2", "--pack-memory-gb", "0.0001"], "+1 (2 runs)"),  # a pack of the size asked for
    (["--pack-memory-gb", "0.0001"], "__s1 (1 runs)"),  # sized to fit: a single run that cannot fit
])
def test_a_pack_over_the_memory_limit_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             flags: list[str], refused: str) -> None:
    out = tmp_path / "c"
    code = main(["grid", "run", str(write_grid(tmp_path)), "--out", str(out), "--pack", *flags])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: --pack-memory-gb: pack pursuit") and refused in err[0]
    assert "0.0001 GB limit" in err[0]
    assert not (out / ".tune").exists()  # refused before Ray started


def test_pack_sizes_are_chosen_to_fit_the_free_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No --pack-size: 5 seeds of one pack key cut into packs that each fit HEADROOM x free memory x the
    trial's share (1 of this machine's cores), the free memory faked to hold 2 runs per pack."""
    from suPER.campaigns import packs

    grid = campaigns.load_grid(write_grid(tmp_path))
    one = plan_packs(grid.runs[:1], tmp_path / "c")[0].bytes
    share = 1 / (os.cpu_count() or 1)
    monkeypatch.setattr(packs, "available_memory_bytes", lambda device: int(2.5 * one / (packs.HEADROOM * share)))
    out = tmp_path / "c"
    code = main(["grid", "run", str(write_grid(tmp_path)), "--out", str(out), "--pack", "--seeds", "5", "--dry-run"])
    err = capsys.readouterr().err
    assert code in (0, None), err
    assert "pack sizes (chosen to fit): 2, 2, 1" in err
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("pack pursuit")] == [
        "pack pursuit__ddqn__s1+1", "pack pursuit__ddqn__s3+1", "pack pursuit__ddqn__s5"]
    assert not (out / ".tune").exists()  # a dry run starts nothing
    # 9 runs with room for 8 a pack: 2 packs (the fewest), evened out to 5 + 4 rather than 8 + 1
    nine = campaigns.load_grid(write_grid(tmp_path), seeds=9).runs
    assert [len(p.runs) for p in plan_packs(nine, out, limit_bytes=int(8.5 * one))] == [5, 4]
    assert [len(p.runs) for p in plan_packs(nine, out, limit_bytes=int(9.5 * one))] == [9]


def test_free_memory_of_the_cpu_is_read_from_this_machine() -> None:
    from suPER.campaigns.packs import available_memory_bytes

    free = available_memory_bytes("cpu")
    assert 0 < free <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_pack_trial_reports_every_runs_progress_to_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pack trainable's results carry one row per run (env steps, eval return, status), after every
    fragment, and the live table shows them as one row per run. Tune's ``report`` is captured (no Ray)."""
    from ray import tune
    from rich.console import Console

    from suPER.campaigns import local

    grid = campaigns.load_grid(write_grid(tmp_path))
    out = tmp_path / "c"
    reports: list[dict[str, object]] = []
    monkeypatch.setattr(tune, "report", lambda metrics: reports.append(json.loads(json.dumps(metrics))))
    config = {"out": str(out), "threads": 1, "device": "cpu", "grid": grid.name, "report_every_s": 0.0,
              "run_fields": {}, "pack": {"name": "p", "packed": True, "runs": [r.as_dict() for r in grid.runs]}}
    local._pack_trainable(config)
    names = [r.run_name for r in grid.runs]
    per_run = {n: [rep["runs"][n] for rep in reports] for n in names}  # type: ignore[index]
    for name in names:
        steps = [row.get("env_steps", 0) for row in per_run[name]]
        assert steps == sorted(steps) and steps[-1] == 120 and len(set(steps)) > 5  # live, not once at the end
        assert [row["status"] for row in per_run[name]][-1] == "FINISHED"
        assert per_run[name][-1]["team_return"] == pytest.approx(
            float(list(csv.DictReader((out / name / "metrics.csv").open()))[-1]["team_return_mean"]))
    assert reports[-1]["done"] is True
    table = local._live_table(Console(width=200, record=True), names, "local")
    trial = type("Trial", (), {"config": config})()
    table.on_trial_start(0, [], trial)
    table.on_trial_result(0, [], trial, reports[len(reports) // 2])
    assert all(table.rows[n]["status"] == "RUNNING" and 0 < table.rows[n]["env_steps"] < 120 for n in names)
    table.on_trial_complete(0, [], trial)
    table.on_trial_result(0, [], trial, reports[-1])
    assert all(table.rows[n]["status"] == "FINISHED" and table.rows[n]["env_steps"] == 120 for n in names)


@pytest.mark.slow
def test_on_ray_the_limit_is_measured_by_a_task_holding_a_trials_resources() -> None:
    """The cluster path of ``grid run --pack`` (no --pack-memory-gb): a Ray task with the trial's CPUs reads
    the free memory where it runs (here the embedded instance on this machine, 2 CPUs, 1 per trial)."""
    from suPER.campaigns import local, packs

    with local.ray_session(None, num_cpus=2):
        limit = packs.worker_memory_limit("cpu", 1.0, 0.0)
    cores = os.cpu_count() or 1
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < limit <= packs.HEADROOM * physical / cores
    assert limit == pytest.approx(packs.memory_limit("cpu", 1.0, 0.0), rel=0.2)  # the same machine, moments apart


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
    # the pack is interrupted (as by Ctrl-C) at 80 env steps, after both runs' checkpoint at 60 (a pursuit pack steps
    # its batched env with step_all while every run is in step, with step otherwise)
    calls = [0]

    def interrupted(real: Any) -> Any:
        def step(self: PackEnvs, *args: object) -> object:
            calls[0] += 1
            if calls[0] > 80:
                raise KeyboardInterrupt
            return real(self, *args)
        return step

    monkeypatch.setattr(PackEnvs, "step", interrupted(PackEnvs.step))
    monkeypatch.setattr(PackEnvs, "step_all", interrupted(PackEnvs.step_all))
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
    for run in grid.runs:  # the live table has one row per run of the pack
        assert any(run.run_name in line and "FINISHED" in line and "120/120" in line for line in r.stderr.splitlines())
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
