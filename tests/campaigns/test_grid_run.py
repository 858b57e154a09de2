"""`super-marl grid run`: Ray Tune on this machine, one trial per run; skips finished runs, resumes unfinished ones."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suPER import campaigns

GRID = """
name: tiny
seeds: 1
defaults:
  num_timesteps: 120
  eval_interval: 40
  eval_episodes: 1
  model: mlp
  set: {env.horizon: 30, dqn.learning_starts: 40, dqn.buffer_size: 500, dqn.hiddens: 16, relay.window: 50,
        env.kwargs.x_size: 8, env.kwargs.y_size: 8, env.kwargs.n_evaders: 5, env.kwargs.n_pursuers: 4}
runs:
  - {name: plain, env: pursuit, algo: ddqn}
  - {name: super, env: pursuit, algo: dqn, super: true, super_mode: stochastic, bandwidth: 0.5}
  - {name: later, env: pursuit, algo: qmix, pending: "not yet"}
"""


def rows(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(float(r["env_steps"])) for r in csv.DictReader(f)]


def grid_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline", "COLUMNS": "160"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "suPER.cli", "grid", "run", *args], capture_output=True, text=True,
                          timeout=900, env=env)


class Stop(Exception):
    pass


def test_grid_run_trains_resumes_and_skips(tmp_path: Path) -> None:
    grid_file = tmp_path / "tiny.yaml"
    grid_file.write_text(GRID)
    out = tmp_path / "campaign"
    grid = campaigns.load_grid(grid_file)
    plain, super_, pending = grid.runs
    # an unfinished run (as after a crash): checkpoint at 40 env steps, killed at 60
    def stop(env_steps: int, stats: dict[str, float]) -> None:
        if env_steps >= 60:
            raise Stop
    with pytest.raises(Stop):
        campaigns.execute(plain.config(out=out, progress=False), progress=stop)
    assert rows(out / plain.run_name) == [0, 40]

    # another writer holds the SUPER run's folder (a resubmitted grid while the first still runs): that trial
    # fails, the other finishes, and grid run exits 1 as the shell sees it
    from suPER.runs import RunFolder

    (out / super_.run_name).mkdir(parents=True)
    with RunFolder(out / super_.run_name).lock():
        r = grid_run(str(grid_file), "--out", str(out), "--max-failures", "0")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 run(s) to train (1 resuming from a checkpoint)" in r.stderr
    assert "skipping 1 pending run(s)" in r.stderr
    assert "1 finished now, 0 finished before, 1 failed, 1 pending" in r.stdout
    assert "re-run the same command" in r.stderr

    r = grid_run(str(grid_file), "--out", str(out))  # the writer is gone: the failed run trains now
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 finished now, 1 finished before, 0 failed, 1 pending" in r.stdout
    for run in (plain, super_):
        run_dir = out / run.run_name
        assert rows(run_dir) == [0, 40, 80, 120], run.run_name
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "finished" and manifest["env_steps"] == 120
        assert manifest["grid"] == "tiny" and manifest["grid_entry"] == run.entry
        assert (run_dir / "curve.png").exists() and (run_dir / "checkpoints" / "final.pt").exists()
    assert len(json.loads((out / plain.run_name / "manifest.json").read_text())["resumed"]) == 1
    assert "resumed" not in json.loads((out / super_.run_name / "manifest.json").read_text())
    assert not (out / pending.run_name).exists()

    r = grid_run(str(grid_file), "--out", str(out))  # everything finished: nothing starts, not even Ray
    assert r.returncode == 0 and "skipping 2 finished run(s)" in r.stderr and "nothing to run" in r.stderr
    assert "0 finished now, 2 finished before" in r.stdout


def test_grid_run_refuses_an_unfinished_folder_of_another_config_before_starting(tmp_path: Path) -> None:
    grid_file = tmp_path / "tiny.yaml"
    grid_file.write_text(GRID)
    out = tmp_path / "campaign"
    plain = campaigns.load_grid(grid_file).runs[0]
    cfg = plain.config(out=out, progress=False)
    cfg.dqn.lr = 0.5

    def stop(env_steps: int, stats: dict[str, float]) -> None:
        raise Stop
    with pytest.raises(Stop):
        campaigns.execute(cfg, progress=stop)
    r = grid_run(str(grid_file), "--out", str(out), "--filter", "name=plain")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --out:")
    assert "different configuration (dqn.lr" in r.stderr and "Ray" not in r.stderr


def test_ctrl_c_during_grid_run_exits_130_and_leaves_the_run_resumable(tmp_path: Path) -> None:
    """Ray Tune takes SIGINT and returns; grid run then says so in one line and exits 130 (it ended with a
    traceback before). The run stops unfinished with its checkpoint (resume itself: the test above)."""
    import signal
    import time

    grid_file = tmp_path / "tiny.yaml"
    # 4000 env steps: far more than the run can train in the ~2 s Tune takes to stop after the signal
    grid_file.write_text(GRID.replace("num_timesteps: 120", "num_timesteps: 4000").replace("eval_interval: 40",
                                                                                           "eval_interval: 200"))
    out = tmp_path / "campaign"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline", "COLUMNS": "160"}
    env.pop("RAY_ADDRESS", None)
    # two runs, one at a time (2 CPUs each on this 2-core machine): the second has not started at the Ctrl-C
    proc = subprocess.Popen([sys.executable, "-m", "suPER.cli", "grid", "run", str(grid_file), "--out", str(out),
                             "--filter", "name=plain,super", "--cpus-per-trial", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    run_dir = out / campaigns.load_grid(grid_file).runs[0].run_name
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not ((run_dir / "checkpoints" / "latest.pt").exists()
                                               and (run_dir / "metrics.csv").exists()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-3000:]
    assert "Traceback" not in stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last == f"interrupted: to resume from the latest checkpoints, run the same command again: super-marl grid run " \
                   f"{grid_file} --out {out} --filter name=plain,super --cpus-per-trial 2"
    assert "Tuner.restore" not in stderr and "FileNotFoundError" not in stderr  # Tune's advice resumes nothing here
    assert "0 finished now, 0 finished before, 0 failed, 1 interrupted (they resume from their checkpoints), 1 not " \
           "started, 0 pending" in stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # "interrupted", not "failed": Tune stops the trial with sys.exit(0), which is no failure of the run
    assert manifest["status"] == "interrupted" and (run_dir / "checkpoints" / "latest.pt").exists()
    assert rows(run_dir)[0] == 0 and rows(run_dir)[-1] < 4000
