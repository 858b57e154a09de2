"""Greedy evaluation episodes on a separate env, shared by every trainer.

The headline metric is the *learning team's* return: the sum over learners of their episode
returns, averaged over K episodes. The all-agent sum the original RLlib runs logged (opponents
included) and each learner's own return are recorded too (REFERENCE section 3.7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from suPER.config import EnvConfig
from suPER.envs.base import MultiAgentEnv

ActFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(obs_NO float32, alive_N bool) -> actions_N int64"""


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


def random_team_return(env_cfg: EnvConfig, episodes: int = 20, seed: int = 12345) -> float:
    """Team return of a uniformly random policy on a seeded game: the bar the learning checks must clear.

    The game itself is seeded by the first ``reset(seed)`` (``make_env``'s seed only seeds opponents),
    so the baseline is the same number on every call.
    """
    from suPER.envs import make_env

    env = make_env(env_cfg, seed=seed)
    try:
        env.reset(seed=seed)
        rng = np.random.default_rng(0)
        return evaluate(env, lambda obs, alive: rng.integers(0, env.spec.n_actions, len(obs)), episodes).team_return_mean
    finally:
        env.close()


def evaluate(env: MultiAgentEnv, act: ActFn, episodes: int,
             on_reset: Callable[[], None] | None = None) -> EvalResult:
    """Run ``episodes`` complete episodes with ``act`` and summarise the returns.

    The env is reset without a seed each time: it was seeded once at construction, and its RNG
    continues across evaluations (as the original's evaluation worker did).

    Args:
        env: the evaluation env.
        act: greedy policy of the learning team.
        episodes: number of complete episodes.
        on_reset: called at the start of every episode (recurrent policies clear their hidden state).
    """
    n = env.spec.n_agents
    returns_EN = np.zeros((max(episodes, 1), n))
    all_agent = np.zeros(max(episodes, 1))
    lengths = np.zeros(max(episodes, 1))
    for e in range(episodes):
        obs_NO = env.reset()
        alive_N = np.ones(n, dtype=bool)
        if on_reset is not None:
            on_reset()
        while True:
            res = env.step(act(obs_NO, alive_N))
            returns_EN[e] += np.where(alive_N, res.reward_N, 0.0)
            all_agent[e] += res.info.get("all_agent_reward", float(res.reward_N.sum()))
            lengths[e] += 1
            if res.episode_over:
                break
            obs_NO, alive_N = res.obs_NO, res.alive_N
    if episodes == 0:
        nan = float("nan")
        return EvalResult(nan, nan, nan, nan, np.full(n, np.nan), 0)
    team = returns_EN.sum(axis=1)
    return EvalResult(float(team.mean()), float(team.std()), float(all_agent.mean()), float(lengths.mean()),
                      returns_EN.mean(axis=0), episodes)
