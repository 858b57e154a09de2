"""RunLoop.evaluate: seeded episodes, batched (run.eval_batch > 0) == sequential (0), reproducible from the seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from suPER import config as C
from suPER.loop import RunLoop
from suPER.runs import RunFolder

TINY = {"env.kwargs.n_pursuers": 2, "env.kwargs.n_evaders": 3, "env.kwargs.x_size": 6, "env.kwargs.y_size": 6,
        "env.kwargs.max_cycles": 30, "env.horizon": 30, "run.eval_episodes": 3, "run.progress": False,
        "run.device": "cpu", "run.num_timesteps": 100}
ROOT = Path(__file__).resolve().parent.parent


def rowwise_act(obs_ENO, alive_EN):
    """Deterministic and batch-invariant: each learner's action is a function of its own observation."""
    e, n = obs_ENO.shape[:2]
    flat = np.asarray(obs_ENO).reshape(e, n, -1)
    return (flat * np.arange(flat.shape[-1])).sum(-1).astype(np.int64) % 5


def rows(tmp: Path, eval_batch: int, seed: int = 1, evaluations: int = 3) -> tuple[list[dict], list[int]]:
    cfg = C.resolve("pursuit", "qmix", overrides={**TINY, "run.eval_batch": eval_batch, "run.seed": seed})
    loop = RunLoop(cfg, RunFolder(tmp / f"b{eval_batch}_s{seed}"))
    resets: list[int] = []
    try:
        out = [loop.evaluate(rowwise_act, on_reset=resets.append) for _ in range(evaluations)]
    finally:
        loop.eval_env.close()
    return out, resets


def test_batched_rows_equal_sequential_rows_and_follow_the_seed(tmp_path):
    seq, seq_resets = rows(tmp_path, 0)
    bat, bat_resets = rows(tmp_path, 2)  # 3 episodes: a wave of 2 games, then 1 game with one idle
    keys = [k for k in seq[0] if k not in ("wall_time_s", "env_steps_per_sec", "train_return_mean")]
    assert [[r[k] for k in keys] for r in seq] == [[r[k] for k in keys] for r in bat]
    assert seq_resets == [1] * 9 and bat_resets == [2, 2] * 3  # recurrent state sized per wave of games
    # every evaluation plays its own seeded episodes; the same run seed replays them, another seed does not
    assert len({r["team_return_mean"] for r in seq} | {r["episode_len_mean"] for r in seq}) > 1
    again, _ = rows(tmp_path / "again", 2)
    assert [r["team_return_mean"] for r in again] == [r["team_return_mean"] for r in bat]
    other, _ = rows(tmp_path, 2, seed=2)
    assert [r["team_return_mean"] for r in other] != [r["team_return_mean"] for r in bat]


def test_benchmark_quick_smoke():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_batch.py"), "--quick", "--envs",
                           "pursuit,battle", "--episodes", "2", "--horizon", "5", "--train-steps", "40"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for env in ("pursuit", "battle"):
        assert f"eval speedup batched/sequential ({env}): " in proc.stdout
    assert "eval share of a paper-protocol pursuit run (batched): " in proc.stdout
