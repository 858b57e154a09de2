"""E copies of an adapter stepped together in lockstep: a generic ``BatchedMultiAgentEnv``.

``LockstepBatch(make_one, E)`` holds E independent games built by ``make_one(g)`` (any
``MultiAgentEnv``) and steps every game whose episode is not over, one after the other, with the
rows of one ``actions_EN`` array. What it saves is not env time but policy time: the caller
computes the learners' actions of all E games in one batched forward, and for the two-team MAgent
envs the batch computes the fixed opponents' actions of all E games in one call too
(``OpponentPolicy.act_batch`` on ``[E, M]`` observations, when the games' opponent has it). Each game
is reset with its own seed, so an episode depends only on its seed and the policies, never on the
other games of the batch.

Exactness: a game of the batch plays the same transitions as its adapter played alone with the same
seed and the same actions (``tests/envs/test_batched.py``). The games' own opponent generators
(``RandomOpponent``, reseeded by ``reset(seed)``; a network opponent's epsilon draws) are used per
game, in the same order as when the game is played alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from suPER.envs.base import BatchStepResult, EnvSpec, MultiAgentEnv


class LockstepBatch:
    """``num_games`` adapters stepped in lockstep (see the module docstring).

    Attributes:
        games: the E adapters, game g at index g.
        spec: the games' common ``EnvSpec``.
        num_games: E.
    """

    def __init__(self, make_one: Callable[[int], MultiAgentEnv], num_games: int) -> None:
        """Build the games.

        Args:
            make_one: ``g -> adapter`` for game g (it builds a new env each call; share heavy read-only
                parts such as an opponent's network between games).
            num_games: E >= 1.

        Raises:
            ValueError: ``num_games`` < 1, or games with different specs.
        """
        if num_games < 1:
            raise ValueError(f"LockstepBatch: num_games: expected an integer >= 1, got {num_games!r}")
        self.games: list[MultiAgentEnv] = []
        try:
            for g in range(num_games):
                self.games.append(make_one(g))
        except BaseException:
            self.close()
            raise
        self.spec: EnvSpec = self.games[0].spec
        if any(env.spec != self.spec for env in self.games):
            self.close()
            raise ValueError("LockstepBatch: make_one built games with different specs")
        self.num_games = num_games
        e, n = num_games, self.spec.n_agents
        self._obs_ENO = np.zeros((e, n, *self.spec.obs_shape), dtype=np.float32)
        self._alive_EN = np.zeros((e, n), dtype=bool)
        self._over_E = np.ones(e, dtype=bool)
        opponents = [getattr(env, "opponent", None) for env in self.games]
        lead = opponents[0]
        # one opponent call for all games: every game exposes its opponents' view and has a policy of the
        # lead's type that can act for many games (the lead checks it can act for the others)
        self._batch_opponents = (bool(self.spec.opponent_ids) and callable(getattr(lead, "act_batch", None))
                                 and all(callable(getattr(env, "opponent_view", None)) for env in self.games)
                                 and all(type(o) is type(lead) for o in opponents))

    @property
    def batches_opponents(self) -> bool:
        """True when the opponents of all games act in one ``act_batch`` call per step."""
        return self._batch_opponents

    @property
    def alive_EN(self) -> np.ndarray:
        """bool [E, N]: game g's ``alive_N`` after its reset, else as its last step returned it."""
        return self._alive_EN.copy()

    def reset(self, seeds: Sequence[int], games: Any = None) -> np.ndarray:
        """Start a new episode in ``games`` (all when None), game ``games[i]`` with ``seeds[i]``.

        Args:
            seeds: one seed per reset game.
            games: int indices of the games to reset; None = all E.

        Returns:
            float32 obs_ENO of the whole batch (a view of an internal buffer: copy before keeping it).
        """
        idx = list(range(self.num_games)) if games is None else [int(g) for g in games]
        seeds = [int(s) for s in seeds]
        if len(seeds) != len(idx):
            raise ValueError(f"LockstepBatch.reset: expected {len(idx)} seeds, got {len(seeds)}")
        for g, s in zip(idx, seeds):
            self._obs_ENO[g] = self.games[g].reset(seed=s)
            self._alive_EN[g] = self.games[g].alive_N
            self._over_E[g] = False
        return self._obs_ENO

    def step(self, actions_EN: Any) -> BatchStepResult:
        """Advance every game whose episode is not over by one step.

        Args:
            actions_EN: int [E, N] (numpy or a tensor); rows of finished games are ignored.

        Returns:
            BatchStepResult of numpy arrays (obs_ENO a view of an internal buffer); info has
            'all_agent_reward_E', 'opponent_reward_E', 'team_alive_E' (learners still in the game: the env's
            'team_alive' where it reports one, else ``alive_EN``'s count) and 'opponent_alive_E' (0 without
            opponents).
        """
        e, n = self.num_games, self.spec.n_agents
        acts_EN = np.asarray(actions_EN.cpu() if hasattr(actions_EN, "cpu") else actions_EN).reshape(e, n)
        live = np.flatnonzero(~self._over_E)
        # games over before this step: zero rows, nobody alive (the step that ended them kept its last obs)
        self._obs_ENO[self._over_E] = 0.0
        self._alive_EN[self._over_E] = False
        opp_LM = None
        if self._batch_opponents and live.size:
            views = [self.games[g].opponent_view() for g in live]  # type: ignore[attr-defined]
            obs_LMO = np.stack([v[0] for v in views])
            alive_LM = np.stack([v[1] for v in views])
            peers = [self.games[g].opponent for g in live]  # type: ignore[attr-defined]
            opp_LM = np.asarray(peers[0].act_batch(obs_LMO, alive_LM, peers))
        reward_EN = np.zeros((e, n), dtype=np.float32)
        terminated_EN = np.zeros((e, n), dtype=bool)
        truncated_EN = np.zeros((e, n), dtype=bool)
        all_agent_E, opp_reward_E = np.zeros(e), np.zeros(e)
        team_alive_E, opp_alive_E = np.zeros(e, dtype=np.int64), np.zeros(e, dtype=np.int64)
        for i, g in enumerate(live.tolist()):
            env = self.games[g]
            if opp_LM is not None:
                res = env.step(acts_EN[g], opp_LM[i])  # type: ignore[call-arg]
            else:
                res = env.step(acts_EN[g])
            reward_EN[g], terminated_EN[g], truncated_EN[g] = res.reward_N, res.terminated_N, res.truncated_N
            all_agent_E[g] = res.info.get("all_agent_reward", float(res.reward_N.sum()))
            opp_reward_E[g] = res.info.get("opponent_reward", 0.0)
            team_alive_E[g] = res.info.get("team_alive", int(res.alive_N.sum()))
            opp_alive_E[g] = res.info.get("opponent_alive", 0)
            self._obs_ENO[g], self._alive_EN[g] = res.obs_NO, res.alive_N  # the last obs, also when it ends
            self._over_E[g] = res.episode_over
        return BatchStepResult(
            obs_ENO=self._obs_ENO, reward_EN=reward_EN, terminated_EN=terminated_EN, truncated_EN=truncated_EN,
            alive_EN=self._alive_EN.copy(), episode_over_E=self._over_E.copy(),
            info={"all_agent_reward_E": all_agent_E, "opponent_reward_E": opp_reward_E,
                  "team_alive_E": team_alive_E, "opponent_alive_E": opp_alive_E})

    def close(self) -> None:
        """Close every game."""
        for env in self.games:
            env.close()
