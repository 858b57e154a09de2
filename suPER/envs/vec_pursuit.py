"""SISL pursuit with E independent games stepped together as torch tensors (CPU or CUDA).

Why: one ``PursuitEnv`` game costs ~1 ms of Python per cycle, so evaluation batches and packed runs
are bound by the env. Here the state of E games lives in a few tensors on one device and a cycle is
a fixed sequence of tensor ops over the game axis, so observations never leave the device.

Dynamics: those of ``pettingzoo.sisl.pursuit_v5`` (``Pursuit`` in ``pursuit_base.py``) at every
constructor setting our YAML can set, for the same state and the same random draws
(``tests/envs/test_vec_pursuit.py`` replays our draws into PettingZoo's game and compares every step):

* Pursuers move "sequentially" within a cycle, but a move depends only on the mover's own cell and
  the static map (agents never block each other), so all N moves are computed at once. What *is*
  sequential is the reward: after pursuer i's sub-step, PettingZoo computes every pursuer's tag
  reward with pursuers 0..i already moved and i+1.. not yet. We build all N sub-step vectors at once
  as an [E, N, N] tensor (row i: counts after the move for pursuers 0..i, before it for the others),
  each element with PettingZoo's operation order
  (``tag * count / N``; on the last sub-step ``+ catch * surrounded`` then ``+ urgency``; then the
  ``local_ratio`` mix), and sum the N rows in order, as ``aec_to_parallel_wrapper`` does, with one
  cumulative sum over the row axis (a sequential scan from 0 for a non-innermost axis). Same
  IEEE operations in the same order give bit-identical float64 sums; they are cast to float32 once.
* Tag reward counts evaders in the 4 neighbour cells *clipped to the map* (an edge pursuer counts
  its own cell for the missing neighbour), as ``Pursuit.reward`` does.
* On the last sub-step, before evaders move: with ``surround`` an evader is caught when the number of
  its 4 neighbour cells holding a pursuer equals ``need_to_surround`` of its cell (taken from the
  library's own method); without it, when its cell holds ``>= n_catch`` pursuers. Every pursuer on
  a cell that counted for a caught evader gets ``catch_reward`` once. Caught evaders are removed
  (slots keep their order, as the library's list does), then the survivors move.
* Evaders move uniformly at random (or stay, ``freeze_evaders``); moves into walls / off the map are
  no-ops. The episode terminates when no evader is left and truncates at ``max_cycles`` (which
  pre-empts termination, as ``raw_env.step``) or at ``horizon``.
* Spawning follows ``create_agents(randinit=True)``: within the ``constraint_window``, each agent on
  a free cell not on or next to an earlier agent of its own team. PettingZoo finds that cell by
  rejection sampling; we draw it uniformly among the feasible cells directly, which is the same
  distribution and needs no data-dependent loop (and fails loudly where PettingZoo loops forever).

Randomness: every draw is a counter-based hash of (game seed, draw kind, counters) made by
:class:`PursuitDraws`, so an episode depends only on its seed, whatever else the batch holds, and
needs no per-game generator objects. It cannot reproduce numpy's PCG64 stream, so a batched episode
is not the single-game episode of the same seed; the distribution matches (statistical test).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from pettingzoo.sisl.pursuit.pursuit_base import Pursuit

from suPER.envs.base import BatchStepResult
from suPER.envs.pursuit_spec import pursuit_spec

_M32 = 0xFFFFFFFF
_SUPPORTED_KWARGS = {"x_size", "y_size", "max_cycles", "shared_reward", "n_evaders", "n_pursuers", "obs_range",
                     "n_catch", "freeze_evaders", "tag_reward", "catch_reward", "urgency_reward", "surround",
                     "constraint_window", "render_mode", "evader_controller", "pursuer_controller"}


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32) without int64 overflow (c split into 16-bit halves)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + ((x * hi) & 0xFFFF) * 65536) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: full avalanche, so neighbouring counters give unrelated bits."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def _hash(key: torch.Tensor, *words: torch.Tensor | int) -> torch.Tensor:
    """Fold words (each < 2**32) into key (< 2**32): h <- fmix32(h * golden + word + 1) per word."""
    h = key
    for w in words:
        h = _fmix32((_mul32(h, 0x9E3779B1) + w + 1) & _M32)
    return h


class PursuitDraws:
    """The random numbers of E pursuit games, one method per draw kind (what a test replaces or records).

    Counter-based: a draw is ``hash(game key, kind, counters)`` with the game key a hash of its 64-bit
    seed, so it depends on nothing but the seed and the position of the draw in the episode. Uniforms
    have 32-bit resolution; evader actions are ``floor(hash * 5 / 2**32)`` (bias below 1e-9).

    Evader actions are made ``BLOCK`` cycles ahead: a hash round is ~27 small tensor ops, which on a GPU
    are ~27 kernel launches whatever the batch size, so hashing every cycle made the evaders' draws a
    quarter of a step's launches. Every ``BLOCK``-th call hashes the next ``BLOCK`` cycles of every game at
    once ([E, BLOCK, M]) and the calls in between read a column; ``seed`` refills a reset game's rows for
    its new episode. The values are those of :meth:`evader_actions_at` (the hash of the cycle), so the
    block changes when draws are computed, never what they are (tested). On this project's 2-core CPU it
    also made the env 1.1x (E = 4096) to 1.5x (E = 1) faster (docs/performance.md).
    """

    WINDOW, SPAWN, EVADER = 1, 2, 3
    BLOCK = 32

    def __init__(self, num_games: int, device: torch.device) -> None:
        self.device = device
        self.key_E = torch.zeros(num_games, dtype=torch.int64, device=device)
        self._block_EBM: torch.Tensor | None = None  # evader actions of the block's cycles
        self._column = 0  # the block column the next evader_actions call reads
        self._layout = (0, 0)  # (n_slots, n_actions) the block was made for

    def seed(self, games_G: torch.Tensor, seeds_G: torch.Tensor) -> None:
        """Give ``games_G`` new episodes keyed by ``seeds_G`` (int64 >= 0); their cycle count restarts at 0."""
        self.key_E[games_G] = _hash(seeds_G & _M32, (seeds_G >> 32) & _M32)
        if self._block_EBM is not None:  # the next call reads column c: it is cycle 0 of the new episode
            cycles_GB = (torch.arange(self.BLOCK, device=self.device) - self._column).clamp(min=0)
            self._block_EBM[games_G] = self.evader_actions_at(games_G, cycles_GB.expand(games_G.numel(), -1),
                                                              *self._layout)

    def window_starts(self, games_G: torch.Tensor) -> torch.Tensor:
        """float64 [G, 2] uniforms in [0, 1): the spawn window's x and y start (scaled by 1 - window)."""
        axis = torch.arange(2, device=self.device)
        h = _hash(self.key_E[games_G][:, None], self.WINDOW, axis[None, :])
        return h.to(torch.float64) * 2.0**-32

    def spawn_uniforms(self, games_G: torch.Tensor, n_agents: int) -> torch.Tensor:
        """float64 [G, K] uniforms in [0, 1): which feasible cell agent k spawns on (pursuers, then evaders)."""
        k = torch.arange(n_agents, device=self.device)
        h = _hash(self.key_E[games_G][:, None], self.SPAWN, k[None, :])
        return h.to(torch.float64) * 2.0**-32

    def evader_actions_at(self, games_G: torch.Tensor, t_GB: torch.Tensor, n_slots: int, n_actions: int) -> torch.Tensor:
        """int64 [G, B, M] actions in [0, n_actions) of every evader slot of games ``games_G`` in cycles ``t_GB``."""
        m = torch.arange(n_slots, device=self.device)
        h_GB = _hash(self.key_E[games_G][:, None], self.EVADER + 4 * t_GB)  # per game and cycle first
        return (_hash(h_GB[..., None], m) * n_actions) >> 32

    def evader_actions(self, t_E: torch.Tensor, n_slots: int, n_actions: int) -> torch.Tensor:
        """int64 [E, M] actions of every evader slot in cycle ``t_E`` (dead slots ignored).

        Call once per env cycle, with each game's cycle count advanced by one since the last call or reset by
        ``seed`` (games that did not advance are finished: their rows are not read until they are reset).
        The result is a view of the block: read it before the next call or ``seed``.
        """
        if self._block_EBM is None or self._column == self.BLOCK or self._layout != (n_slots, n_actions):
            self._layout = (n_slots, n_actions)
            t_EB = t_E[:, None] + torch.arange(self.BLOCK, device=self.device)
            self._block_EBM = self.evader_actions_at(torch.arange(t_E.numel(), device=self.device), t_EB, *self._layout)
            self._column = 0
        self._column += 1
        return self._block_EBM[:, self._column - 1]


def _pairwise_sum(x_EN: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis in numpy's ``pairwise_sum`` order, so float64 means are bit-identical.

    numpy adds fewer than 8 values left to right; up to 128 it keeps 8 strided accumulators combined
    as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) and adds the rest left to right; above it splits in halves.
    """
    n = x_EN.shape[-1]
    if n < 8:
        s = x_EN[..., 0]
        for i in range(1, n):
            s = s + x_EN[..., i]
        return s
    if n > 128:
        n2 = n // 2
        n2 -= n2 % 8
        return _pairwise_sum(x_EN[..., :n2]) + _pairwise_sum(x_EN[..., n2:])
    full = n - n % 8
    r = x_EN[..., 0:8]
    for i in range(8, full, 8):
        r = r + x_EN[..., i:i + 8]
    r = r[..., 0::2] + r[..., 1::2]
    r = r[..., 0::2] + r[..., 1::2]
    s = r[..., 0] + r[..., 1]
    for i in range(full, n):
        s = s + x_EN[..., i]
    return s


class VecPursuitEnv:
    """E pursuit games as one :class:`~suPER.envs.base.BatchedMultiAgentEnv` on a torch device.

    All pursuers learn (no opponents). Arrays are torch tensors on ``device``: obs float32
    [E, N, R, R, 3] in ``PursuitEnv``'s layout (axis 2 = map y offset, axis 3 = map x offset,
    channels walls / pursuer counts / evader counts), rewards float32 [E, N]. A game that ended is
    left alone until ``reset(seeds, games)``; stepping it returns zeros, ``alive`` False and
    ``episode_over`` True, with ``terminated`` / ``truncated`` False (no transition happened).

    Internally positions are flat indices into a padded map of Xp x Yp cells (padding = max(obs
    offset, 1)): a move is an index add plus one lookup in a static "blocked" table, a neighbourhood
    is index + constant offsets, and an observation window is one gather from the per-game count map
    ``_map_EF3`` (walls, pursuer counts, evader counts), kept current by +-1 index adds.
    """

    def __init__(self, kwargs: dict[str, Any], num_games: int, horizon: int = 500,
                 device: str | torch.device = "cpu", draws: PursuitDraws | None = None) -> None:
        """Build E games with ``pursuit_v5`` constructor arguments.

        Args:
            kwargs: ``pursuit_v5`` keyword arguments (n_pursuers, n_evaders, x_size, y_size, max_cycles,
                shared_reward, obs_range, n_catch, surround, freeze_evaders, tag_reward, catch_reward,
                urgency_reward, constraint_window); custom controllers and rendering are refused.
            num_games: E >= 1.
            horizon: env steps after which an episode is truncated (in addition to max_cycles).
            device: torch device holding the state and the returned tensors.
            draws: the random-number source (default: a :class:`PursuitDraws` on ``device``).

        Raises:
            ValueError: unsupported kwargs, E < 1, horizon < 1.
        """
        unknown = set(kwargs) - _SUPPORTED_KWARGS
        if unknown:
            raise ValueError(f"env.kwargs: VecPursuitEnv does not know {sorted(unknown)}")
        for k in ("render_mode", "evader_controller", "pursuer_controller"):
            if kwargs.get(k) is not None:
                raise ValueError(f"env.kwargs.{k}: VecPursuitEnv supports only None, got {kwargs[k]!r}")
        if num_games < 1 or horizon < 1:
            raise ValueError(f"num_games and horizon: expected integers >= 1, got {num_games!r}, {horizon!r}")
        # The library's own game fixes defaults, the map and need_to_surround; we only read it. It is
        # built with one agent per team because its constructor spawns them and would loop forever
        # where our reset raises (no free cell).
        defaults = inspect.signature(Pursuit.__init__).parameters
        self.n_pursuers = int(kwargs.get("n_pursuers", defaults["n_pursuers"].default))
        self.n_evaders = int(kwargs.get("n_evaders", defaults["n_evaders"].default))
        if self.n_pursuers < 1 or self.n_evaders < 1:
            raise ValueError(f"env.kwargs: n_pursuers and n_evaders must be >= 1, got {self.n_pursuers}, "
                             f"{self.n_evaders}")
        game = Pursuit(**dict(kwargs, n_pursuers=1, n_evaders=1))
        self.device = torch.device(device)
        self.num_games = int(num_games)
        self.horizon = int(horizon)
        self.n_actions = int(game.act_dims[0])
        self.max_cycles = int(game.max_cycles)
        self.x_size, self.y_size = x, y = int(game.x_size), int(game.y_size)
        self.tag_reward, self.catch_reward = float(game.tag_reward), float(game.catch_reward)
        self.urgency_reward, self.local_ratio = float(game.urgency_reward), float(game.local_ratio)
        self.surround, self.n_catch = bool(game.surround), int(game.n_catch)
        self.freeze_evaders = bool(game.freeze_evaders)
        self.constraint_window = float(game.constraint_window)
        r, o = int(game.obs_range), int(game.obs_offset)
        self.obs_range, self.obs_offset = r, o
        n = self.n_pursuers
        self.spec = pursuit_spec(n, self.n_evaders, r, self.n_actions)

        dev = self.device
        p = max(o, 1)
        self._pad = p
        xp, yp = x + 2 * p, y + 2 * p
        self._xp, self._f = xp, xp * yp  # cells are y-major: a row of an obs window is contiguous
        wall_XY = game.map_matrix == -1
        gx, gy = np.meshgrid(np.arange(x), np.arange(y), indexing="ij")
        cell_XY = (gy + p) * xp + (gx + p)
        blocked_F = np.ones(self._f, dtype=bool)  # off-map or building: a move there is a no-op
        blocked_F[cell_XY[~wall_XY]] = False
        self._blocked_F = torch.as_tensor(blocked_F, device=dev)
        walls_F = np.ones(self._f, dtype=np.float32)  # channel 0 of obs: |map|, 1 off the map
        walls_F[cell_XY.ravel()] = np.abs(game.map_matrix).ravel()
        self._walls_F = torch.as_tensor(walls_F, device=dev)
        motion_A2 = np.array([[-1, 0], [1, 0], [0, 1], [0, -1], [0, 0]])  # DiscreteAgent.motion_range
        self._delta_A = torch.as_tensor(motion_A2[:, 0] + motion_A2[:, 1] * xp, device=dev)
        sm = game.surround_mask
        self._sur_4 = torch.as_tensor(sm[:, 0] + sm[:, 1] * xp, device=dev)
        tag_F4 = np.zeros((self._f, 4), dtype=np.int64)  # Pursuit.reward's neighbours, clipped to the map
        tx = np.clip(gx[..., None] + sm[:, 0], 0, x - 1)
        ty = np.clip(gy[..., None] + sm[:, 1], 0, y - 1)
        tag_F4[cell_XY.ravel()] = ((ty + p) * xp + (tx + p)).reshape(-1, 4)
        self._tag_F4 = torch.as_tensor(tag_F4, device=dev)
        need_F = np.zeros(self._f, dtype=np.int64)
        need_F[cell_XY.ravel()] = [game.need_to_surround(i, j) for i in range(x) for j in range(y)]
        self._need_F = torch.as_tensor(need_F, device=dev)
        w = 2 * o + 1
        self._win = w
        # obs[n, y, x, :] = map[px - o + x, py - o + y, :]: row y is w cells (3 floats each) from (px - o, py - o + y)
        self._win_rows_w = torch.as_tensor((np.arange(w) - o) * xp - o, device=dev)
        self._cells_C = torch.as_tensor(cell_XY.ravel(), device=dev)
        self._cx_C = torch.as_tensor(gx.ravel(), device=dev)
        self._cy_C = torch.as_tensor(gy.ravel(), device=dev)
        self._free_C = torch.as_tensor(~wall_XY.ravel(), device=dev)
        self._free_cell = int(cell_XY[~wall_XY][0])  # any in-map cell: centre of the all-zero window
        game.close()

        e = self.num_games
        self.draws = draws if draws is not None else PursuitDraws(e, dev)
        # game E (one past the last) is all zeros: finished games gather their obs from it
        self._map_EF3 = torch.zeros(e + 1, self._f, 3, dtype=torch.float32, device=dev)
        self._pur_EN = torch.full((e, n), self._free_cell, dtype=torch.int64, device=dev)
        self._ev_EM = torch.full((e, self.n_evaders), self._free_cell, dtype=torch.int64, device=dev)
        self._ev_alive_EM = torch.zeros(e, self.n_evaders, dtype=torch.bool, device=dev)
        self._t_E = torch.zeros(e, dtype=torch.int64, device=dev)
        self._over_E = torch.ones(e, dtype=torch.bool, device=dev)
        self._alive_EN = torch.zeros(e, n, dtype=torch.bool, device=dev)
        self._games_E = torch.arange(e, device=dev)
        self._obs_ENO = torch.zeros(e, n, r, r, 3, dtype=torch.float32, device=dev)
        self._minus_plus_E2N = torch.cat([torch.full((e, n), -1.0, device=dev), torch.ones(e, n, device=dev)], 1)
        self._mark_EF = torch.zeros(e, self._f, dtype=torch.uint8, device=dev)
        # [i, j]: pursuer j has moved by the end of sub-step i (j <= i)
        self._moved_IN = torch.ones(n, n, dtype=torch.bool, device=dev).tril()

    # ------------------------------------------------------------------------------------------

    @property
    def alive_EN(self) -> torch.Tensor:
        """bool [E, N] on the env's device: True for every pursuer of a game just reset (pursuers never leave a
        game), else as the last step returned it."""
        return self._alive_EN.clone()

    def reset(self, seeds: Sequence[int] | torch.Tensor, games: Any = None) -> torch.Tensor:
        """Start new episodes in ``games`` (all E when None), one seed each.

        Args:
            seeds: int seeds >= 0, one per reset game.
            games: int game indices (sequence or tensor), or None for all.

        Returns:
            float32 [E, N, R, R, 3]: the new observations of the reset games, the last returned ones
            of the others.

        Raises:
            ValueError: seed/game count mismatch, negative seeds, or a game where an agent has no free
                cell to spawn on (PettingZoo would loop forever there).
        """
        dev = self.device
        games_G = self._games_E if games is None else torch.as_tensor(games, dtype=torch.int64, device=dev).reshape(-1)
        seeds_G = torch.as_tensor(seeds, dtype=torch.int64, device=dev).reshape(-1)
        if seeds_G.shape != games_G.shape:
            raise ValueError(f"reset: expected {games_G.numel()} seeds, got {seeds_G.numel()}")
        if bool((seeds_G < 0).any()):
            raise ValueError("reset: seeds must be >= 0")
        self.draws.seed(games_G, seeds_G)
        g = games_G.numel()
        n, m = self.n_pursuers, self.n_evaders
        # spawn window, as Pursuit.reset: start = uniform(0, 1 - window), bounds int(size * ...)
        cw = self.constraint_window
        start_G2 = (1.0 - cw) * self.draws.window_starts(games_G)
        lo_x = (self.x_size * start_G2[:, 0]).floor().long()
        hi_x = (self.x_size * (start_G2[:, 0] + cw)).floor().long()
        lo_y = (self.y_size * start_G2[:, 1]).floor().long()
        hi_y = (self.y_size * (start_G2[:, 1] + cw)).floor().long()
        cx, cy = self._cx_C[None, :], self._cy_C[None, :]
        inwin_GC = (cx >= lo_x[:, None]) & (cx < hi_x[:, None]) & (cy >= lo_y[:, None]) & (cy < hi_y[:, None])
        inwin_GC &= self._free_C[None, :]
        u_GK = self.draws.spawn_uniforms(games_G, n + m)
        pur_GN = self._spawn(inwin_GC, u_GK[:, :n])
        ev_GM = self._spawn(inwin_GC, u_GK[:, n:])
        if pur_GN is None or ev_GM is None:
            raise ValueError("reset: no free cell left to spawn an agent (agents may not spawn on or next to "
                             "a teammate); use fewer agents, a larger grid or a larger constraint_window")
        self._pur_EN[games_G] = pur_GN
        self._ev_EM[games_G] = ev_GM
        self._ev_alive_EM[games_G] = True
        self._t_E[games_G] = 0
        self._over_E = self._over_E.index_fill(0, games_G, False)  # not in place: the last step returned it
        self._alive_EN = self._alive_EN.index_fill(0, games_G, True)
        map_GF3 = torch.zeros(g, self._f, 3, dtype=torch.float32, device=dev)
        map_GF3[:, :, 0] = self._walls_F
        ones = torch.ones(1, dtype=torch.float32, device=dev)
        map_GF3[:, :, 1].scatter_add_(1, pur_GN, ones.expand(g, n))
        map_GF3[:, :, 2].scatter_add_(1, ev_GM, ones.expand(g, m))
        self._map_EF3[games_G] = map_GF3
        obs_ENO = self._obs_ENO.clone()
        obs_ENO[games_G] = self._observe(games_G, pur_GN)
        self._obs_ENO = obs_ENO
        return obs_ENO

    def _spawn(self, inwin_GC: torch.Tensor, u_GK: torch.Tensor) -> torch.Tensor | None:
        """Place K agents of one team, each uniformly on a feasible cell (create_agents' rule).

        Returns:
            int64 [G, K] padded flat cells, or None if some game had no feasible cell for some agent.
        """
        g, k = u_GK.shape
        dev = self.device
        blocked_GF = torch.zeros(g, self._f, dtype=torch.bool, device=dev)
        out_GK = torch.empty(g, k, dtype=torch.int64, device=dev)
        rows_G = torch.arange(g, device=dev)
        stencil_5 = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), self._sur_4])
        empty_G = torch.zeros(g, dtype=torch.bool, device=dev)
        for j in range(k):
            feas_GC = inwin_GC & ~blocked_GF[:, self._cells_C]
            csum_GC = feas_GC.cumsum(1)
            count_G = csum_GC[:, -1]
            empty_G |= count_G == 0
            rank_G = torch.minimum((u_GK[:, j] * count_G).floor().long(), (count_G - 1).clamp(min=0))
            idx_G = torch.searchsorted(csum_GC, (rank_G + 1)[:, None]).squeeze(1).clamp(max=csum_GC.shape[1] - 1)
            cell_G = self._cells_C[idx_G]
            out_GK[:, j] = cell_G
            blocked_GF[rows_G[:, None], cell_G[:, None] + stencil_5] = True
        return None if bool(empty_G.any()) else out_GK

    def step(self, actions_EN: Any) -> BatchStepResult:
        """Advance every unfinished game by one cycle (all pursuers in id order, then the evaders).

        Args:
            actions_EN: int [E, N] actions in [0, 5) (tensor or array; rows of finished games ignored).

        Returns:
            BatchStepResult of torch tensors on the env's device; info has 'all_agent_reward_E' (float64
            sum of the N rewards before the float32 cast) and 'evaders_left_E' (int64).
        """
        dev = self.device
        e, n, m = self.num_games, self.n_pursuers, self.n_evaders
        act_EN = torch.as_tensor(actions_EN, device=dev).long()
        if act_EN.shape != (e, n):
            raise ValueError(f"VecPursuitEnv.step: expected actions of shape {(e, n)}, got {tuple(act_EN.shape)}")
        bad = (act_EN < 0) | (act_EN >= self.n_actions)
        if dev.type == "cpu":
            if bool(bad.any()):
                raise ValueError(f"VecPursuitEnv.step: actions must lie in [0, {self.n_actions})")
        else:  # no host sync on an accelerator: a device-side assertion instead
            torch._assert_async(~bad.any())
        active_E = ~self._over_E
        # counts live in channels 1 / 2 of the contiguous [E, F * 3] map: flat index cell * 3 + channel
        map_EC = self._map_EF3.view(e + 1, -1)[:e]

        def take(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return table.index_select(0, idx.reshape(-1)).view(*idx.shape, *table.shape[1:])

        # pursuers: every move at once (moves are independent); channel 1 by -1 / +1
        p0_EN = self._pur_EN
        tgt_EN = p0_EN + take(self._delta_A, act_EN)
        p1_EN = torch.where(active_E[:, None] & ~take(self._blocked_F, tgt_EN), tgt_EN, p0_EN)
        self._pur_EN = p1_EN
        p01_E2N = torch.cat([p0_EN, p1_EN], 1)
        map_EC.scatter_add_(1, p01_E2N * 3 + 1, self._minus_plus_E2N)

        # tag counts before / after each pursuer's own move (evaders change only after the last sub-step)
        c01_E2N = torch.gather(map_EC, 1, take(self._tag_F4, p01_E2N).view(e, -1) * 3 + 2).view(e, 2 * n, 4).sum(-1)
        c0_EN, c1_EN = c01_E2N.to(torch.float64).split(n, dim=1)

        # catches, from the pursuer counts after all moves; "mark" = cells whose pursuers caught one
        ev_EM, alive0_EM = self._ev_EM, self._ev_alive_EM & active_E[:, None]
        if self.surround:
            nbr_EM4 = ev_EM[..., None] + self._sur_4
            occ_EM = (torch.gather(map_EC, 1, nbr_EM4.view(e, -1) * 3 + 1).view(e, m, 4) > 0).sum(-1)
            caught_EM = alive0_EM & (occ_EM == take(self._need_F, ev_EM))
            mark_EK = torch.where(caught_EM[..., None], nbr_EM4, 0).view(e, -1)
        else:
            caught_EM = alive0_EM & (torch.gather(map_EC, 1, ev_EM * 3 + 1) >= self.n_catch)
            mark_EK = torch.where(caught_EM, ev_EM, 0)
        # cell 0 is padding (no pursuer ever stands there): it takes the marks of evaders not caught
        mark_EF = self._mark_EF.zero_().scatter_(1, mark_EK, 1)
        sur_EN = torch.gather(mark_EF, 1, p1_EN) > 0

        # rewards: the N sub-step vectors of PettingZoo at once, row i = after pursuer i's sub-step (pursuers
        # 0..i moved); then summed over i in order (see module docstring)
        cnt_EIN = torch.where(self._moved_IN, c1_EN[:, None, :], c0_EN[:, None, :])
        lrs_EIN = self.tag_reward * cnt_EIN / n
        last_EN = lrs_EIN[:, n - 1] + self.catch_reward * sur_EN.to(torch.float64)
        lrs_EIN[:, n - 1] = last_EN + self.urgency_reward
        # local_ratio is 1 or 0 (shared_reward): 1*x + 0*mean == x and 0*x + 1*mean == mean exactly
        if self.local_ratio != 1.0:
            mean_EI = _pairwise_sum(lrs_EIN) / n
            lrs_EIN = self.local_ratio * lrs_EIN + (1 - self.local_ratio) * mean_EI[..., None]
        # a scan over a non-innermost axis is a sequential loop from 0 on CPU and CUDA alike:
        # ((0 + r_0) + r_1) + ... bit for bit, as the wrapper's running sum
        acc_EN = torch.cumsum(lrs_EIN, dim=1)[:, n - 1]
        acc_EN = torch.where(active_E[:, None], acc_EN, 0.0)

        # evaders: caught ones leave, the others move; channel 2 by -1 (old cell) / +1 (new cell)
        alive1_EM = alive0_EM & ~caught_EM
        if self.freeze_evaders:
            ev1_EM = ev_EM
        else:
            a_EM = self.draws.evader_actions(self._t_E, m, self.n_actions)
            tgt_EM = ev_EM + take(self._delta_A, a_EM)
            ev1_EM = torch.where(alive1_EM & ~take(self._blocked_F, tgt_EM), tgt_EM, ev_EM)
        self._ev_EM = ev1_EM
        self._ev_alive_EM = self._ev_alive_EM & ~caught_EM
        map_EC.scatter_add_(1, torch.cat([ev_EM, ev1_EM], 1) * 3 + 2,
                            torch.cat([-alive0_EM.to(torch.float32), alive1_EM.to(torch.float32)], 1))

        # flags, as PursuitEnv.step: max_cycles truncation pre-empts termination; termination beats horizon
        self._t_E = self._t_E + active_E.long()
        left_E = self._ev_alive_EM.sum(1)
        max_cut_E = self._t_E >= self.max_cycles
        term_E = active_E & ~max_cut_E & (left_E == 0)
        cut_E = active_E & (max_cut_E | (self._t_E >= self.horizon)) & ~term_E
        over_E = self._over_E = self._over_E | term_E | cut_E  # over before (= not active) or now

        obs_ENO = self._observe(self._games_E, p1_EN, active_E)
        self._obs_ENO = obs_ENO
        self._alive_EN = (active_E & ~term_E)[:, None].expand(e, n)  # never written in place (reset: index_fill)
        return BatchStepResult(
            obs_ENO=obs_ENO,
            reward_EN=acc_EN.to(torch.float32),
            terminated_EN=term_E[:, None].expand(e, n).clone(),
            truncated_EN=cut_E[:, None].expand(e, n).clone(),
            alive_EN=self._alive_EN.clone(),
            episode_over_E=over_E,
            info={"all_agent_reward_E": acc_EN.sum(1), "evaders_left_E": left_E},
        )

    def close(self) -> None:
        """Nothing to release (tensors are freed with the object)."""

    # ------------------------------------------------------------------------------------------

    def state(self) -> dict[str, torch.Tensor]:
        """The batch's game state in map coordinates (for tests and debugging).

        Returns:
            dict: 'pursuers_EN2' and 'evaders_EM2' int64 (x, y) per slot, 'evader_alive_EM' bool,
            't_E' cycles played, 'over_E' bool.
        """
        def xy(f: torch.Tensor) -> torch.Tensor:
            return torch.stack([f % self._xp - self._pad, f // self._xp - self._pad], dim=-1)

        return {"pursuers_EN2": xy(self._pur_EN), "evaders_EM2": xy(self._ev_EM),
                "evader_alive_EM": self._ev_alive_EM.clone(), "t_E": self._t_E.clone(), "over_E": self._over_E.clone()}

    def _observe(self, games_G: torch.Tensor, pur_GN: torch.Tensor, active_G: torch.Tensor | None = None) -> torch.Tensor:
        """Every pursuer's window of the count map, identical to ``raw_env.observe``.

        Args:
            games_G: games to observe; pur_GN their pursuers' cells; active_G: games to observe for real
                (the others read the all-zero game E).

        Returns:
            float32 [G, N, R, R, 3] (new tensor).
        """
        centre_GN = games_G[:, None] * self._f + pur_GN
        if active_G is not None:
            centre_GN = torch.where(active_G[:, None], centre_GN, self.num_games * self._f + self._free_cell)
        idx = (centre_GN[..., None] + self._win_rows_w).view(-1)
        g, n, w, r = pur_GN.shape[0], self.n_pursuers, self._win, self.obs_range
        # rows of w cells x 3 channels starting at every cell (an overlapping view, no copy)
        rows_C = self._map_EF3.view(-1).unfold(0, 3 * w, 3)
        win_GNww3 = rows_C.index_select(0, idx).view(g, n, w, w, 3)
        if w == r:
            return win_GNww3
        # even obs_range: the game's window is one cell short; the rest keeps its fill (wall 1, counts 0)
        obs = torch.zeros(g, n, r, r, 3, dtype=torch.float32, device=self.device)
        obs[..., 0] = 1.0
        if active_G is not None:
            obs[..., 0] *= active_G[:, None, None, None].to(torch.float32)
        obs[:, :, :w, :w] = win_GNww3
        return obs
