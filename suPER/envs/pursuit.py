"""SISL Pursuit (``pettingzoo.sisl.pursuit_v5``) as a ``MultiAgentEnv`` over its N pursuers.

Why a "lean driver" instead of ``pursuit_v5.parallel_env``: the AEC->parallel wrapper observes every
agent twice per cycle (``last()`` plus the final observation dict) and rebuilds several dicts per
agent sub-step. This adapter holds the game object ``raw_env(...).env`` would hold (a ``Pursuit``)
and calls its ``step(action, agent_index, is_last)`` for each pursuer in order, exactly as the AEC env
does, then observes all pursuers once per cycle with one vectorised gather. By default the game is
``_VectorizedPursuit``, a subclass whose per-sub-step rules (tag reward, catching, count maps) are
array code instead of Python loops. Observations, rewards, terminations and truncations are
bit-identical to ``parallel_env`` for the same seed and actions (``tests/envs/test_pursuit.py``
checks this over several episodes and random configurations). Measured on one core with the default
8 pursuers / 30 evaders: ~1,100 env steps/s vs ~150-190 for ``parallel_env``.

Reward semantics reproduced from ``aec_to_parallel_wrapper.step``: after each agent sub-step the AEC
env sets ``rewards[k] = game.latest_reward_state[k]`` for every pursuer k, and the parallel wrapper
sums those values over the N sub-steps of the cycle (it reads ``rewards``, not
``_cumulative_rewards``, which only feeds AEC ``last()``). So a pursuer's cycle reward is
``sum_i tag(k, after pursuer i moved) / N`` plus, from the last sub-step only, catch and urgency.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pettingzoo.sisl.pursuit.pursuit_base import Pursuit

from suPER.envs.base import StepResult
from suPER.envs.pursuit_spec import pursuit_spec
from suPER.envs.record import EnvRecord, own_record


class _VectorizedPursuit(Pursuit):
    """PettingZoo's ``Pursuit`` game with its two hot rules vectorised, results unchanged.

    Why: per cycle ``reward()`` runs N times with a per-pursuer Python loop of ``np.clip`` calls, and
    ``remove_agents()`` is an evaders x pursuers Python loop; together they are most of the game's
    step time. The overrides compute the same numbers with array ops (same dtypes, same integer
    sums, so the float64 rewards are bit-identical); the equivalence tests against
    ``pursuit_v5.parallel_env`` guard that. Everything else (movement, RNG use, evader policy) is
    the library's own code.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        x, y = self.x_size, self.y_size
        # need_to_surround depends only on the static map (model_state[0] is always map_matrix)
        self._need_XY = np.array([[self.need_to_surround(i, j) for j in range(y)] for i in range(x)])
        # flat indices of each cell's 4 neighbours clipped to the map, as reward() clips them
        gx_XY, gy_XY = np.meshgrid(np.arange(x), np.arange(y), indexing="ij")
        nx_XY4 = np.clip(gx_XY[..., None] + self.surround_mask[:, 0], 0, x - 1)
        ny_XY4 = np.clip(gy_XY[..., None] + self.surround_mask[:, 1], 0, y - 1)
        self._tag_cells_XY4 = nx_XY4 * y + ny_XY4
        self._occ_XY = np.zeros((x + 2, y + 2), dtype=bool)  # one-cell False border = off-map
        self._mark_XY = np.zeros((x + 2, y + 2), dtype=bool)

    def step(self, action: int, agent_id: int, is_last: bool) -> None:
        """One pursuer's sub-step; ``Pursuit.step`` without its redundant full-map recounts.

        The library rebuilds the pursuer count map after every move and the evader count map after
        every sub-step, although evaders only change in the last one. Here the moved pursuer's
        count is shifted in place, and the evader map is rebuilt only after the evaders moved;
        every other statement is the library's, in the library's order.

        Args:
            action: the pursuer's action in [0, 5).
            agent_id: index of the acting pursuer.
            is_last: this is the last pursuer of the cycle (then evaders are caught and move).
        """
        agent = self.pursuer_layer.allies[agent_id]
        x0, y0 = int(agent.current_pos[0]), int(agent.current_pos[1])
        agent.step(action)
        counts_XY = self.model_state[1]
        counts_XY[x0, y0] -= 1
        counts_XY[agent.current_pos[0], agent.current_pos[1]] += 1

        self.latest_reward_state = self.reward() / self.num_agents
        if is_last:
            ev_remove, pr_remove, pursuers_who_remove = self.remove_agents()
            opponent_layer = self.evader_layer
            for i in range(opponent_layer.n_agents()):
                a = self.evader_controller.act(self.model_state)
                opponent_layer.move_agent(i, a)
            self.latest_reward_state += self.catch_reward * pursuers_who_remove
            self.latest_reward_state += self.urgency_reward
            self.frames += 1
            self.model_state[2] = self.evader_layer.get_state_matrix()

        global_val = self.latest_reward_state.mean()
        local_val = self.latest_reward_state
        self.latest_reward_state = self.local_ratio * local_val + (1 - self.local_ratio) * global_val
        if self.render_mode == "human":
            self.render()

    def reward(self) -> np.ndarray:
        """Tag reward per pursuer: tag_reward x evaders in its 4-neighbourhood (clipped to the map).

        Reads the evader counts from ``model_state[2]``, which equals the evader layer's state
        matrix whenever ``reward()`` runs (evaders only change after it, in the last sub-step).

        Returns:
            float64 [n_pursuers].
        """
        pos_N2 = np.array([a.current_pos for a in self.pursuer_layer.allies])
        cells_N4 = self._tag_cells_XY4[pos_N2[:, 0], pos_N2[:, 1]]
        counts_N = self.model_state[2].ravel()[cells_N4].astype(np.int64).sum(axis=1)
        return self.tag_reward * counts_N

    def remove_agents(self) -> tuple[int, int, np.ndarray]:
        """Remove surrounded evaders; same contract and removal order as ``Pursuit.remove_agents``.

        Returns:
            (n_evaders_removed, n_pursuers_removed (always 0), bool [n_pursuers] who surrounded one).
        """
        if not self.surround:
            return super().remove_agents()
        purs_sur = np.zeros(self.n_pursuers, dtype=bool)
        evaders = self.evader_layer.allies
        if not evaders:
            return 0, 0, purs_sur
        pos_E2 = np.array([a.current_pos for a in evaders], dtype=np.intp)
        occ = self._occ_XY
        occ[1:-1, 1:-1] = self.model_state[1] != 0
        nx_E4 = pos_E2[:, 0:1] + 1 + self.surround_mask[:, 0]  # neighbour cells, padded coordinates
        ny_E4 = pos_E2[:, 1:2] + 1 + self.surround_mask[:, 1]
        caught_E = occ[nx_E4, ny_E4].sum(axis=1) == self._need_XY[pos_E2[:, 0], pos_E2[:, 1]]
        idx = np.flatnonzero(caught_E)
        if idx.size == 0:
            return 0, 0, purs_sur
        mark = self._mark_XY
        mark.fill(False)
        mark[nx_E4[idx], ny_E4[idx]] = True
        pos_N2 = np.array([a.current_pos for a in self.pursuer_layer.allies], dtype=np.intp)
        purs_sur[:] = mark[pos_N2[:, 0] + 1, pos_N2[:, 1] + 1]
        self.evaders_gone[np.flatnonzero(~self.evaders_gone)[idx]] = True
        for k, e in enumerate(idx.tolist()):
            self.evader_layer.remove_agent(e - k)
        return int(idx.size), 0, purs_sur


class PursuitEnv:
    """Pursuit with all pursuers learning; evaders move randomly inside the game (no opponents).

    The episode terminates for everyone when all evaders are caught, and is truncated at the game's
    ``max_cycles`` or at ``horizon`` env steps, whichever comes first. Pursuers never die, so
    ``alive_N`` is all True until the episode ends.
    """

    record = EnvRecord(name="pursuit", sender_side_priorities=False,
                       batched="suPER.envs.vec_pursuit:VecPursuitEnv")

    @classmethod
    def constructor_kwargs(cls) -> set[str]:
        """Argument names of PettingZoo's ``Pursuit.__init__`` (what ``pursuit_v4.parallel_env`` passes on)."""
        return set(inspect.signature(Pursuit.__init__).parameters)

    def __init__(self, kwargs: dict[str, Any], horizon: int = 500, *, vectorized: bool = True) -> None:
        """Build the PettingZoo game.

        Args:
            kwargs: constructor arguments of ``pursuit_v5`` (n_pursuers, n_evaders, x_size, y_size,
                max_cycles, shared_reward, obs_range, ...).
            horizon: env steps after which an episode is truncated (in addition to max_cycles).
            vectorized: use ``_VectorizedPursuit`` (array versions of ``step``'s bookkeeping,
                ``reward`` and ``remove_agents``; same results, ~3.5x faster); False drives
                PettingZoo's ``Pursuit`` unchanged (the plain lean driver).
        """
        if horizon < 1:
            raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
        self.horizon = int(horizon)
        # the same game object pursuit_v5.raw_env(**kwargs) keeps in its .env attribute
        self._game = (_VectorizedPursuit if vectorized else Pursuit)(**kwargs)
        game = self._game
        n = game.n_pursuers
        r = game.obs_range
        self.spec = pursuit_spec(n, game.n_evaders, r, int(game.act_dims[0]), own_record(type(self)).name)
        # Padded copy of |model_state[0:3]| with the game's out-of-map fill (walls=1, counts=0), so
        # every pursuer's window is a plain slice; the border never changes, only the interior.
        self._off = game.obs_offset
        self._win = 2 * self._off + 1  # equals obs_range when it is odd (the game fills the rest)
        x, y = game.x_size, game.y_size
        self._padded_CXY = np.zeros((3, x + 2 * self._off, y + 2 * self._off), dtype=np.float32)
        self._padded_CXY[0] = 1.0
        self._interior_CXY = self._padded_CXY[:, self._off:self._off + x, self._off:self._off + y]
        self._windows = sliding_window_view(self._padded_CXY, (self._win, self._win), axis=(1, 2))
        self._obs_NO = np.zeros((n, r, r, 3), dtype=np.float32)
        self._obs_NO[..., 0] = 1.0
        self._pos_N2 = np.zeros((n, 2), dtype=np.intp)
        self._reward_acc_N = np.zeros(n, dtype=np.float64)
        self._t = 0
        self._over = True
        self._terminal = False

    # ------------------------------------------------------------------------------------------

    @property
    def alive_N(self) -> np.ndarray:
        """bool [N]: all True, but after the step that caught the last evader (pursuers never leave the game)."""
        return np.full(self.spec.n_agents, not self._terminal)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode, as ``parallel_env.reset(seed=seed)`` does.

        Args:
            seed: reseeds the game's RNG when not None; None continues the current RNG stream.

        Returns:
            float32 [N, R, R, 3]: every pursuer's observation.
        """
        if seed is not None:
            self._game._seed(seed=seed)
        self._game.reset()
        self._t = 0
        self._over = False
        self._terminal = False
        return self._observe().copy()

    def step(self, actions_N: np.ndarray) -> StepResult:
        """Advance one cycle: every pursuer moves in id order, then the evaders move.

        Args:
            actions_N: int [N] actions in [0, n_actions).

        Returns:
            StepResult with float32 obs [N, R, R, 3] and rewards [N] summed over the N sub-steps.
        """
        if self._over:
            raise RuntimeError("PursuitEnv.step: the episode is over (or never started); call reset() first")
        game = self._game
        n = self.spec.n_agents
        acts = np.asarray(actions_N).reshape(-1)
        if acts.shape[0] != n:
            raise ValueError(f"PursuitEnv.step: expected {n} actions, got shape {np.shape(actions_N)}")
        acc_N = self._reward_acc_N
        acc_N.fill(0.0)
        last = n - 1
        for i, a in enumerate(acts.tolist()):
            game.step(a, i, i == last)
            acc_N += game.latest_reward_state
        self._t += 1
        # as raw_env.step: truncation at max_cycles pre-empts the termination update
        max_cut = game.frames >= game.max_cycles
        terminal = (not max_cut) and game.is_terminal
        cut = (max_cut or self._t >= self.horizon) and not terminal
        self._over = terminal or cut
        self._terminal = terminal
        return StepResult(
            obs_NO=self._observe().copy(),
            reward_N=acc_N.astype(np.float32),
            terminated_N=np.full(n, terminal),
            truncated_N=np.full(n, cut),
            alive_N=np.full(n, not terminal),
            episode_over=self._over,
            info={"all_agent_reward": float(acc_N.sum()), "evaders_left": game.evader_layer.n_agents()},
        )

    def close(self) -> None:
        """Release the game (and its renderer, if any)."""
        self._game.close()

    # ------------------------------------------------------------------------------------------

    def _observe(self) -> np.ndarray:
        """All pursuers' observations, identical to ``raw_env.observe`` (swapaxes(obs, 2, 0)).

        Returns:
            float32 [N, R, R, 3] view of an internal buffer (copy before keeping it). Axis 1 is the
            map's y offset and axis 2 its x offset, as PettingZoo's swapaxes produces.
        """
        game = self._game
        np.abs(game.model_state[0:3], out=self._interior_CXY)
        pos_N2 = self._pos_N2
        for i, agent in enumerate(game.pursuer_layer.allies):
            pos_N2[i] = agent.current_pos
        # windows[c, x, y, i, j] = padded[c, x + i, y + j]  ->  gathered [C, N, i(x), j(y)]
        win_CNXY = self._windows[:, pos_N2[:, 0], pos_N2[:, 1]]
        w = self._win
        self._obs_NO[:, :w, :w, :] = win_CNXY.transpose(1, 3, 2, 0)
        return self._obs_NO
