"""RunLoop.evaluate on pursuit: seeded episodes, reproducible from the seed; batched (run.eval_batch > 0) on the
vectorized env, exact against its own one-at-a-time play and equal in distribution to the single game."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from suPER.envs.pursuit import PursuitEnv
from suPER.envs.vec_pursuit import VecPursuitEnv
from suPER.evaluation import episode_seeds, evaluate_episodes, play_episodes
from suPER.loop import RunLoop
from suPER.resolve import resolve
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


def rows(tmp: Path, eval_batch: int, seed: int = 1, evaluations: int = 3, overrides: dict | None = None
         ) -> tuple[list[dict], list[int], RunLoop]:
    cfg = resolve("pursuit", "qmix", overrides={**TINY, **(overrides or {}), "run.eval_batch": eval_batch,
                                                 "run.seed": seed})
    loop = RunLoop(cfg, RunFolder(tmp / f"b{eval_batch}_s{seed}"))
    resets: list[int] = []
    try:
        out = [loop.evaluate(rowwise_act, on_reset=resets.append) for _ in range(evaluations)]
    finally:
        loop.eval_env.close()
    return out, resets, loop


def test_pursuit_rows_are_the_vectorized_envs_own_sequential_episodes(tmp_path):
    """run.eval_batch > 0 plays pursuit on VecPursuitEnv; each row equals the same seeds played one at a time
    on a VecPursuitEnv of one game (exact: the episodes depend only on their seeds)."""
    bat, bat_resets, loop = rows(tmp_path, 2)  # 3 episodes: a wave of 2 games, then 1 game with one idle
    assert isinstance(loop.eval_env, VecPursuitEnv) and loop.eval_env.num_games == 2
    one = VecPursuitEnv(dict(loop.cfg.env.kwargs), 1, horizon=loop.cfg.env.horizon)
    for i, row in enumerate(bat):
        res = evaluate_episodes(one, rowwise_act, episode_seeds(loop.eval_seed, i, 3))
        want = {"env_steps": 0, **res.as_row(loop.spec.learner_ids)}
        assert {k: row[k] for k in want} == want
    assert bat_resets == [2, 2] * 3  # recurrent state sized per wave of games
    # every evaluation plays its own seeded episodes; the same run seed replays them, another seed does not
    assert len({r["team_return_mean"] for r in bat} | {r["episode_len_mean"] for r in bat}) > 1
    again, _, _ = rows(tmp_path / "again", 2)
    assert [r["team_return_mean"] for r in again] == [r["team_return_mean"] for r in bat]
    other, _, _ = rows(tmp_path, 2, seed=2)
    assert [r["team_return_mean"] for r in other] != [r["team_return_mean"] for r in bat]
    seq, seq_resets, loop0 = rows(tmp_path, 0)  # run.eval_batch 0: the single game, one episode at a time
    assert isinstance(loop0.eval_env, PursuitEnv) and seq_resets == [1] * 9


# a game where the rowwise policy catches every evader in about half the episodes (lengths carry signal)
CATCHABLE = {"n_pursuers": 5, "n_evaders": 3, "x_size": 6, "y_size": 6, "max_cycles": 40, "shared_reward": False,
             "surround": False, "n_catch": 1}


def test_pursuit_batched_evaluation_matches_the_single_game_in_distribution():
    """KS two-sample tests (level 0.001) of team returns and lengths over 150 seeded evaluation episodes of
    the same deterministic policy: VecPursuitEnv (batched) vs PursuitEnv (PettingZoo's dynamics, one at a
    time). Fixed seeds make the test deterministic; a perturbed game (n_catch 2) must be rejected."""
    seeds = episode_seeds(3, 0, 150)
    seq = play_episodes(PursuitEnv(CATCHABLE, horizon=40), rowwise_act, seeds)
    bat = play_episodes(VecPursuitEnv(CATCHABLE, 150, horizon=40), rowwise_act, seeds)
    assert 0.15 < (seq.length_K < 40).mean() < 0.85, "lengths carry no signal"
    team_seq, team_bat = seq.agent_return_KN.sum(1), bat.agent_return_KN.sum(1)
    assert stats.ks_2samp(team_bat, team_seq).pvalue > 1e-3
    assert stats.ks_2samp(bat.length_K, seq.length_K).pvalue > 1e-3
    wrong = play_episodes(VecPursuitEnv(dict(CATCHABLE, n_catch=2), 150, horizon=40), rowwise_act, seeds)
    assert min(stats.ks_2samp(wrong.agent_return_KN.sum(1), team_seq).pvalue,
               stats.ks_2samp(wrong.length_K, seq.length_K).pvalue) < 1e-3


def test_benchmark_quick_smoke():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_batch.py"), "--quick", "--envs",
                           "pursuit,battle", "--episodes", "2", "--horizon", "5", "--train-steps", "40"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for env in ("pursuit", "battle"):
        assert f"eval speedup batched/sequential ({env}): " in proc.stdout
    assert "eval share of a paper-protocol pursuit run (batched): " in proc.stdout
