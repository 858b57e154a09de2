"""Matches between a team and an env's opponent: K seeded episodes, outcomes, returns with 95% CIs.

The outcome of an episode is the env's own rule (``record.outcome`` of its adapter, ``suPER.envs.record``);
``opponents eval`` and self-play snapshot selection report these statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from suPER.config import ALGORITHMS, FINAL_GAMES_SEED, ExperimentConfig
from suPER.envs import MultiAgentEnv, env_record, opponent_env_names
from suPER.envs.batched import LockstepBatch
from suPER.evaluation import BatchActFn, Episodes, episode_seeds, play_episodes
from suPER.opponents.build import make_batch
from suPER.stats import bootstrap_ci

MATCH_BATCH = 20
"""games a match (``opponents eval``, self-play snapshot matches) plays together in lockstep"""


@dataclass
class MatchResult:
    """K episodes of a team against the env's opponent; outcomes from the team's point of view."""

    team_return_K: np.ndarray
    """float [K] team (learners') return per episode"""
    opponent_return_K: np.ndarray
    """float [K] opponent team's return per episode"""
    outcome_K: np.ndarray
    """int [K]: +1 the team won, 0 tie, -1 the opponent won (the env's ``record.outcome``)"""
    length_K: np.ndarray
    """int [K] episode lengths"""

    def summary(self, seed: int = 0) -> dict[str, Any]:
        """Means with 95% CIs: percentile bootstrap for returns, Wilson for win / loss rates."""
        k = len(self.outcome_K)
        wins, losses = int((self.outcome_K > 0).sum()), int((self.outcome_K < 0).sum())
        return {
            "episodes": k,
            "team_return": float(self.team_return_K.mean()), "team_return_ci": mean_ci(self.team_return_K, seed),
            "opponent_return": float(self.opponent_return_K.mean()),
            "opponent_return_ci": mean_ci(self.opponent_return_K, seed),
            "win_rate": wins / k, "win_rate_ci": wilson(wins, k),
            "loss_rate": losses / k, "loss_rate_ci": wilson(losses, k),
            "tie_rate": (k - wins - losses) / k, "episode_len": float(self.length_K.mean()),
        }


def play(env: MultiAgentEnv | LockstepBatch, act: BatchActFn, episodes: int, seed: int) -> MatchResult:
    """Play ``episodes`` episodes of the env's learners (acting with ``act``) against its opponent.

    Episode k is seeded ``episode_seeds(seed, 0, episodes)[k]``, so a fixed seed gives a fixed set of episodes
    (for a deterministic team and opponent), the same whether they are played one at a time on an env or as
    a batch of games (``suPER.opponents.make_batch``: one batched call of each team per step).

    Args:
        env: one env (episodes one at a time) or a batch of games.
        act: ``(obs_ENO, alive_EN) -> actions_EN`` of the learning team (``team_policy``).
        episodes: K.
        seed: the match seed.
    """
    ep = play_episodes(env, act, episode_seeds(seed, 0, episodes))
    return MatchResult(ep.agent_return_KN.sum(axis=1), ep.opponent_return_K, outcomes(env.spec.name, ep), ep.length_K)


def final_games(cfg: ExperimentConfig, checkpoint: Path, backend: str = "native") -> dict[str, Any] | None:
    """A run's final policy (``checkpoint``, its ``final.pt``) in ``run.final_games`` varied games against the env's
    opponent team: ``MatchResult.summary`` plus what was played; None when the run has none to play.

    Played by runs of the native DQN family on an env with an opponent team it did not train (``env.opponent``
    not ``learning``, teams not swapped), with ``run.final_games`` > 0. The opponent explores at
    ``run.final_games_epsilon`` and the match is seeded ``config.FINAL_GAMES_SEED``: the same games for every run,
    whatever its seed, so methods are compared on one set of games.
    """
    from suPER.opponents.policy import team_policy

    u, e = cfg.run, cfg.env
    if (u.final_games <= 0 or backend != "native" or ALGORITHMS[u.algo].section != "dqn"
            or e.name not in opponent_env_names() or e.opponent == "learning" or e.swap_teams):
        return None
    seed = FINAL_GAMES_SEED
    games = make_batch(replace(e, opponent_epsilon=u.final_games_epsilon, opponent_epsilon_timesteps=0),
                       min(u.final_games, MATCH_BATCH), seed=seed)
    try:
        summary = play(games, team_policy(str(checkpoint), games, seed), u.final_games, seed).summary(seed)
    finally:
        games.close()
    return {"games": u.final_games, "opponent": e.opponent, "opponent_epsilon": u.final_games_epsilon, "seed": seed,
            **summary}


def outcomes(env_name: str, ep: Episodes) -> np.ndarray:
    """int [K] each episode's outcome for the team under the env's rule (``record.outcome``): +1 / 0 / -1."""
    rule = env_record(env_name).outcome
    if rule is None:
        raise ValueError(f"env.name: a match needs an env with an opponent team ({', '.join(opponent_env_names())}), "
                         f"got {env_name!r}")
    return np.array([rule(int(a), int(o), float(r)) for a, o, r in
                     zip(ep.team_alive_K, ep.opponent_alive_K, ep.opponent_return_K)], dtype=np.int64)


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a binomial rate: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean (``suPER.stats.bootstrap_ci``, 2000 resamples, seeded); a sample
    of one episode or of equal values has the point itself as its interval."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 or np.all(x == x[0]):
        return (float(x.mean()), float(x.mean())) if len(x) else (float("nan"), float("nan"))
    low, high = bootstrap_ci(x, np.mean, n_resamples=2000, seed=seed, confidence=0.95)
    return float(low), float(high)
