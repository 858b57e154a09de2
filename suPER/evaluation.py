"""Greedy evaluation episodes on a separate env, shared by every trainer.

The headline metric is the *learning team's* return: the sum over learners of their episode
returns, averaged over K episodes. The all-agent sum the original RLlib runs logged (opponents
included) and each learner's own return are recorded too (REFERENCE section 3.7).

Episodes are seeded one by one (``episode_seeds``): episode k of evaluation i has a seed derived from
the run's evaluation seed, i and k, so an evaluation is reproducible from the run seed alone.
``play_episodes`` plays a list of seeded episodes either one at a time on one ``MultiAgentEnv``
(sequential) or E at a time on a ``BatchedMultiAgentEnv`` (one batched policy call for all E games per
step). The batch an evaluation plays on is built with the env's opponent team by ``suPER.opponents.make_eval_batch``
(one layer up): pursuit's vectorized env (``VecPursuitEnv``, E games as tensors, no Python loop over games or
agents) where one is registered in ``record.batched``, else E adapters in lockstep (``opponents.make_batch``).
This module plays the episodes it is given and builds no env. On a lockstep batch the episodes
equal the sequential ones for a deterministic, batch-invariant policy; on the vectorized pursuit they
equal the vectorized env's own one-at-a-time play and match the single game in distribution only (its
draws are a counter-based hash, not PettingZoo's PCG64; docs/design.md, "Evaluation").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from suPER.envs.base import BatchedMultiAgentEnv, MultiAgentEnv

BatchActFn = Callable[[Any, Any], Any]
"""(obs_ENO float32, alive_EN bool) -> actions_EN int64, for E games at once (numpy or tensors in, numpy or a
tensor out); E = 1 when episodes are played one at a time"""

BatchResetFn = Callable[[int], None]
"""called with E when E episodes start together (recurrent policies size and zero their per-game state)"""


def episode_seeds(eval_seed: int, index: int, episodes: int) -> list[int]:
    """Seeds of the episodes of evaluation ``index``: ``SeedSequence([eval_seed, index]).generate_state(K)``.

    Every episode of every evaluation gets its own 32-bit seed, independent of the others and of how the
    episodes are played (one at a time or batched); see docs/design.md, "Evaluation".

    Args:
        eval_seed: the run's evaluation seed (seed + env.seed_offset + env.eval_seed_offset), >= 0.
        index: the evaluation's index in the run (0 = the step-0 evaluation), >= 0.
        episodes: K.

    Returns:
        K seeds in [0, 2**32).
    """
    if episodes <= 0:
        return []
    return [int(x) for x in np.random.SeedSequence([int(eval_seed), int(index)]).generate_state(episodes)]


@dataclass
class Episodes:
    """Per-episode records of K played episodes (episode k was seeded ``seeds[k]``)."""

    agent_return_KN: np.ndarray
    """float [K, N] each learner's return"""
    all_agent_return_K: np.ndarray
    """float [K] every agent's reward summed (opponents included)"""
    opponent_return_K: np.ndarray
    """float [K] the opponent team's return (0 without opponents)"""
    length_K: np.ndarray
    """int [K] episode lengths in env steps"""
    team_alive_K: np.ndarray
    """int [K] learners alive at the end (the env's 'team_alive' where it reports one: MAgent's engine count,
    which survives the end of a game by elimination; else the alive mask's count)"""
    opponent_alive_K: np.ndarray
    """int [K] opponents alive at the end (0 without opponents)"""

    def summary(self) -> EvalResult:
        """The evaluation statistics of these episodes."""
        k, n = self.agent_return_KN.shape
        if k == 0:
            nan = float("nan")
            return EvalResult(nan, nan, nan, nan, np.full(n, np.nan), 0)
        team_K = self.agent_return_KN.sum(axis=1)
        return EvalResult(float(team_K.mean()), float(team_K.std()), float(self.all_agent_return_K.mean()),
                          float(self.length_K.mean()), self.agent_return_KN.mean(axis=0), k)


def _numpy(x: Any) -> np.ndarray:
    """A tensor (any device) or array as numpy."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def play_episodes(env: MultiAgentEnv | BatchedMultiAgentEnv, act: BatchActFn, seeds: Sequence[int | None],
                  on_reset: BatchResetFn | None = None) -> Episodes:
    """Play one episode per seed with the batched policy ``act``.

    A ``MultiAgentEnv`` plays them one at a time (``act`` sees E = 1); a ``BatchedMultiAgentEnv`` plays
    them in waves of up to ``num_games`` games (all games of a wave start together and the wave lasts
    until its longest episode ends; finished games' actions are ignored). A learner's rewards count while it is
    in the game: from the env's alive mask after the reset (``alive_N`` / ``alive_EN``: one that joins later
    counts from the step it joins), then as each step returns it.

    Args:
        env: the env, or a batch of E games.
        act: ``(obs_ENO, alive_EN) -> actions_EN``.
        seeds: one seed per episode (``episode_seeds``); on a ``MultiAgentEnv`` None resets without a seed
            (the env's RNG continues: ``suPER.opponents.random_team_return``'s episodes).
        on_reset: called with E before each wave of E games (with 1 before each sequential episode).

    Returns:
        The episodes' records, in the order of ``seeds``.
    """
    k, n = len(seeds), env.spec.n_agents
    ep = Episodes(np.zeros((k, n)), np.zeros(k), np.zeros(k), np.zeros(k, dtype=np.int64),
                  np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64))
    if not hasattr(env, "num_games"):
        for j, seed in enumerate(seeds):
            obs_NO = env.reset(seed=None if seed is None else int(seed))  # type: ignore[call-arg]
            alive_N = env.alive_N  # type: ignore[union-attr]  # a learner that joins later counts from then
            if on_reset is not None:
                on_reset(1)
            while True:
                res = env.step(_numpy(act(obs_NO[None], alive_N[None])).reshape(n))  # type: ignore[arg-type]
                ep.agent_return_KN[j] += np.where(alive_N, res.reward_N, 0.0)
                ep.all_agent_return_K[j] += res.info.get("all_agent_reward", float(res.reward_N.sum()))
                ep.opponent_return_K[j] += res.info.get("opponent_reward", 0.0)
                ep.length_K[j] += 1
                if res.episode_over:
                    ep.team_alive_K[j] = int(res.info.get("team_alive", res.alive_N.sum()))
                    ep.opponent_alive_K[j] = int(res.info.get("opponent_alive", 0))
                    break
                obs_NO, alive_N = res.obs_NO, res.alive_N
        return ep
    e = int(env.num_games)  # type: ignore[union-attr]
    if any(s is None for s in seeds):
        raise ValueError("play_episodes: a batch of games plays seeded episodes only (got a None seed)")
    for start in range(0, k, e):
        wave = [int(s) for s in seeds[start:start + e]]  # type: ignore[arg-type]
        w = len(wave)
        obs_ENO = env.reset(wave, games=list(range(w)))  # type: ignore[call-arg]
        alive_EN = np.zeros((e, n), dtype=bool)
        alive_EN[:w] = _numpy(env.alive_EN)[:w]  # type: ignore[union-attr]  # joiners count from when they join
        playing_W = np.ones(w, dtype=bool)
        rows = slice(start, start + w)
        if on_reset is not None:
            on_reset(e)
        while playing_W.any():
            acts = act(obs_ENO, alive_EN)
            # [E, N] for every batch (a lockstep batch used to accept a flat [E * N] row too)
            res = env.step(acts.reshape(e, n) if hasattr(acts, "reshape") else np.asarray(acts).reshape(e, n))
            reward_WN = _numpy(res.reward_EN)[:w]
            over_W = _numpy(res.episode_over_E)[:w].astype(bool)
            counted_WN = alive_EN[:w] & playing_W[:, None]
            ep.agent_return_KN[rows] += np.where(counted_WN, reward_WN, 0.0)
            info = res.info
            ep.all_agent_return_K[rows] += np.where(playing_W, _numpy(info["all_agent_reward_E"])[:w], 0.0)
            if "opponent_reward_E" in info:
                ep.opponent_return_K[rows] += np.where(playing_W, _numpy(info["opponent_reward_E"])[:w], 0.0)
            ep.length_K[rows] += playing_W
            alive_next_EN = _numpy(res.alive_EN).astype(bool)
            ended_W = playing_W & over_W
            if ended_W.any():
                ended = np.flatnonzero(ended_W)
                team_alive_E = info["team_alive_E"] if "team_alive_E" in info else alive_next_EN.sum(axis=1)
                ep.team_alive_K[start + ended] = _numpy(team_alive_E)[ended]
                if "opponent_alive_E" in info:
                    ep.opponent_alive_K[start + ended] = _numpy(info["opponent_alive_E"])[ended]
            playing_W &= ~over_W
            obs_ENO, alive_EN = res.obs_ENO, alive_next_EN
    return ep


def evaluate_episodes(env: MultiAgentEnv | BatchedMultiAgentEnv, act: BatchActFn, seeds: Sequence[int],
                      on_reset: BatchResetFn | None = None) -> EvalResult:
    """``play_episodes`` summarised: the evaluation every trainer runs through ``RunLoop.evaluate``."""
    return play_episodes(env, act, seeds, on_reset).summary()


@dataclass
class EvalResult:
    """Statistics over K evaluation episodes."""

    team_return_mean: float
    team_return_std: float
    all_agent_return_mean: float
    episode_len_mean: float
    agent_return_mean_N: np.ndarray
    """float [N] mean episode return of each learner"""
    episodes: int

    def as_row(self, agent_ids: list[str] | tuple[str, ...]) -> dict[str, float]:
        """Flat metrics.csv columns."""
        row = {
            "team_return_mean": self.team_return_mean,
            "team_return_std": self.team_return_std,
            "all_agent_return_mean": self.all_agent_return_mean,
            "episode_len_mean": self.episode_len_mean,
        }
        row.update({f"return_{a}": float(r) for a, r in zip(agent_ids, self.agent_return_mean_N)})
        return row
