"""Prioritized experience replay for P independent policies, vectorized across policies.

This replaces RLlib's per-policy ``PrioritizedReplayBuffer`` (RLlib 2.1, as used by the original SUPER
code) with one object that holds the buffers of all ``P`` policies ("agents") side by side.

Design
------
* **Storage.** Every policy ``p`` owns a ring buffer of ``capacity`` rows. All rings live in preallocated
  arrays with a leading policy axis: ``obs`` and ``next_obs`` are ``[P, capacity, *obs_shape]`` in the
  storage dtype, ``actions``/``rewards``/``dones`` are ``[P, capacity]``. Each policy has its own write
  pointer ``ptr[p]`` and fill level ``size[p]``; when full, the oldest row of *that* policy is overwritten
  (FIFO). Arrays are allocated with ``np.zeros`` so the OS only backs pages once they are written.

* **One tree array per policy, one array for all.** Priorities use the classic binary segment trees of
  PER (Schaul et al., 2016): a sum tree (for proportional sampling) and a min tree (for the largest
  importance weight). With ``C = 2**ceil(log2(capacity))`` each policy's tree is a heap-ordered array of
  ``2C`` float64 values: node 1 is the root, node ``i`` has children ``2i`` and ``2i+1``, and the leaf of
  slot ``j`` is node ``C + j``. The trees of all policies are the rows of one ``[P, 2C]`` array, so the
  same node index means the same position in every policy's tree. An operation on ``P`` trees is then
  one gather/scatter over a flat index ``p * 2C + node`` instead of ``P`` Python calls.

* **Vectorized over levels, not rows.** An update writes all touched leaves at once, then walks the
  ``log2(C)`` levels (17 for ``capacity = 120000``) recomputing all touched parents of that level in one
  numpy operation: ``sum[i] = sum[2i] + sum[2i+1]``, ``min[i] = min(min[2i], min[2i+1])``. Sampling
  descends all ``P x B`` draws together, one level per step. The cost is ``O(log C)`` numpy calls on
  arrays of ``P * B`` elements, independent of ``capacity``, with no Python loop over transitions.

* **Float rounding.** Internal sums are rounded, so a draw ``u`` close to a subtree boundary (or rounded
  up to ``total_p``) could point into an empty (zero-priority) subtree. Draws that end on an empty leaf
  are redone with a guarded descent that only goes right when the right child is positive, so every
  sampled leaf has positive priority, i.e. is a stored row (``index < size[p]``). The guard is not on
  the fast path because it costs two numpy calls per level and is almost never needed.

Semantics (those of RLlib 2.1 unless noted)
-------------------------------------------
* New rows get the policy's current max priority ``max_p`` (initially 1.0) unless a raw priority is
  given. The stored tree value is ``priority ** alpha``.
* ``update_priorities`` sets ``p_i = |td_i| + eps`` and stores ``p_i ** alpha``;
  ``max_p = max(max_p, p_i)`` over every priority ever set (never decreases, also not on eviction).
  Given insertion priorities also raise ``max_p`` by default; RLlib 2.1's ``_add_single_batch`` does not
  (``track_inserted_max=False`` reproduces that).
* Sampling is stratified per policy (unlike RLlib 2.1's i.i.d. draws; the expected sample frequency is the
  same): ``[0, total_p)`` is split into ``B`` equal segments with one uniform draw in each, so
  ``P(i) = p_i^alpha / sum_j p_j^alpha``.
* Importance weights ``w_i = (n_p P(i))^(-beta) / (n_p P_min)^(-beta)``, ``n_p`` = rows stored by policy ``p``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from suPER.arrays import is_tensor, like, namespace, row_taker

__all__ = ["Batch", "MultiAgentPER", "descend", "ring_slots", "set_leaves"]


@dataclass
class Batch:
    """A batch sampled from :class:`MultiAgentPER`; every field has leading dims ``[P, B]``.

    Attributes:
        obs: ``[P, B, *obs_shape]`` observations, in the buffer's storage dtype (the caller converts).
        actions: int64 ``[P, B]`` actions.
        rewards: float32 ``[P, B]`` rewards.
        next_obs: ``[P, B, *obs_shape]`` next observations, storage dtype.
        dones: float32 ``[P, B]``; 1.0 means "do not bootstrap from ``next_obs``".
        weights: float32 ``[P, B]`` importance-sampling weights, ``max`` over the policy's buffer is 1.
        indices: int64 ``[P, B]`` slot indices into each policy's ring, for ``update_priorities``.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    dones: np.ndarray
    weights: np.ndarray
    indices: np.ndarray


_STATE_ARRAYS = (
    "actions",
    "rewards",
    "dones",
    "sum_tree",
    "min_tree",
    "ptr",
    "size",
    "max_priority",
)
_STATE_SCALARS = ("alpha", "beta", "eps")


def set_leaves(sum_flat: Any, min_flat: Any, sum_pairs: Any, min_pairs: Any, tree_base_M: Any, pair_base_M: Any,
               slot_M: Any, value_M: Any, leaf0: int, depth: int) -> None:
    """Write tree values and repair all ancestors, vectorized over entries and levels (numpy or torch).

    Each level recomputes ``sum[n] = sum[2n] + sum[2n+1]`` and ``min[n] = min(min[2n], min[2n+1])`` for the
    touched parents ``n``; a parent shared by several entries gets the same value from every write, so
    duplicates at inner levels are harmless. One definition for :class:`MultiAgentPER` (numpy) and
    :class:`~suPER.replay.torch_per.TorchPER` (tensors on a device).

    Args:
        sum_flat, min_flat: ``[P * 2C]`` flat views of the trees; ``sum_pairs``, ``min_pairs``: ``[P * C, 2]``.
        tree_base_M, pair_base_M: int64 ``[M]`` ``p * 2C`` and ``p * C`` of each entry's policy.
        slot_M: int64 ``[M]`` slot indices; the pairs ``(policy, slot)`` must be unique.
        value_M: float64 ``[M]`` tree values ``priority ** alpha``.
        leaf0, depth: ``C`` and ``log2(C)``.
    """
    take_sum, take_min = row_taker(sum_pairs), row_taker(min_pairs)
    node = slot_M + leaf0
    flat = tree_base_M + node
    sum_flat[flat] = value_M
    min_flat[flat] = value_M
    # every level's touched parents at once (node >> level), so a level is a gather, a reduction and a write per
    # tree: on a device, each op is a launch (a pack's adds and priority updates run this every fragment)
    pair_LM = pair_base_M + (node[None, :] >> like(node, np.arange(1, depth + 1, dtype=np.int64))[:, None])
    flat_LM = pair_LM + pair_base_M  # = tree_base + parent
    if is_tensor(sum_flat):
        for pair, flat in zip(pair_LM, flat_LM):  # children 2n, 2n+1 of each parent n
            sum_flat[flat] = take_sum(pair).sum(1)  # the sum of two numbers: s[:, 0] + s[:, 1], bit for bit
            min_flat[flat] = take_min(pair).amin(1)
        return
    for pair, flat in zip(pair_LM, flat_LM):  # numpy: two views and a ufunc beat a reduction on [M, 2]
        s = take_sum(pair)
        sum_flat[flat] = s[:, 0] + s[:, 1]
        m = take_min(pair)
        min_flat[flat] = np.minimum(m[:, 0], m[:, 1])


def descend(sum_pairs: Any, pair_base: Any, u: Any, depth: int, guard: bool) -> Any:
    """Find the leaves whose prefix-sum intervals contain ``u``, one tree level per array step (numpy or torch).

    Starting at the root ``n = 1``, with children ``L = sum[2n]``, ``R = sum[2n+1]``: go right
    (``u -= L``, ``n = 2n + 1``) if ``u >= L`` (and, with ``guard``, ``R > 0``), else left (``n = 2n``).
    The guard changes a leaf only where the unguarded descent would end on an empty (zero) leaf, so a
    caller may always guard (no data-dependent branch) and get the unguarded leaves wherever they are
    positive.

    Args:
        sum_pairs: ``[P * C, 2]`` pair view of the sum trees.
        pair_base: int64, ``p * C`` of each draw's policy, broadcastable to ``u``.
        u: float64 draws in ``[0, total_p)``, any shape; overwritten.
        depth: ``log2(C)``.
        guard: enable the rounding guard (one more comparison per level).

    Returns:
        int64 heap node index in ``[C, 2C)`` per draw (slot = node - C), shape of ``u``.
    """
    xp = namespace(u)
    take = row_taker(sum_pairs)
    subtract_where = _subtract_where_tensor if xp is not np else _subtract_where_numpy
    # q = p * C + n indexes the pair (sum[2n], sum[2n+1]) in sum_pairs.
    q = xp.zeros_like(u, dtype=xp.int64)
    q += pair_base + 1
    for _ in range(depth):
        children = take(q)  # [..., 2]
        left = children[..., 0]
        go_right = u >= left
        if guard:
            go_right &= children[..., 1] > 0
        subtract_where(u, left, go_right)  # u -= left where going right
        q <<= 1  # q -> p * C + 2n + go_right
        q -= pair_base
        q += go_right
    return q - pair_base


def check_settings(n_policies: int, capacity: int, alpha: float, beta: float, eps: float) -> None:
    """Raise ValueError unless ``n_policies, capacity >= 1`` and ``alpha, beta, eps >= 0`` (every PER layout)."""
    if n_policies < 1:
        raise ValueError(f"n_policies must be >= 1, got {n_policies}")
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if alpha < 0 or beta < 0 or eps < 0:
        raise ValueError(f"alpha, beta, eps must be >= 0, got {alpha}, {beta}, {eps}")


def check_can_sample(batch_size: int, size_P: np.ndarray) -> None:
    """Raise ValueError if ``batch_size < 1`` or some policy holds no rows (the message lists them)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    empty = np.flatnonzero(size_P == 0)
    if empty.size:
        raise ValueError(f"cannot sample: policies {empty.tolist()} hold no rows")


def _subtract_where_numpy(u: np.ndarray, x: np.ndarray, where: np.ndarray) -> None:
    np.subtract(u, x, out=u, where=where)


def _subtract_where_tensor(u: Any, x: Any, where: Any) -> None:
    u -= x * where  # x is a finite subtree mass, so x * False = 0 exactly


def ring_slots(pol_K: np.ndarray, ptr_P: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where ``add`` writes ``K`` rows: row ``k``, the ``r``-th row of policy ``p`` in the call, goes to slot
    ``(ptr[p] + r) % capacity`` (host bookkeeping shared by the numpy and the torch buffers).

    Args:
        pol_K: int64 ``[K]`` policy of each row.
        ptr_P: int64 ``[P]`` write pointers before the call.
        capacity: rows per policy.

    Returns:
        ``(slot_K, rank_K, counts_P, keep_K)``: slots, ranks within the policy, rows given per policy, and
        which rows are written (all but the earliest when one call gives a policy more than ``capacity`` rows).
    """
    K = pol_K.shape[0]
    counts = np.bincount(pol_K, minlength=ptr_P.shape[0])  # [P]
    order = np.argsort(pol_K, kind="stable")
    starts = np.cumsum(counts) - counts  # [P] first position of each policy in `order`
    rank = np.empty(K, dtype=np.int64)
    rank[order] = np.arange(K, dtype=np.int64) - starts[pol_K[order]]
    slots = (ptr_P[pol_K] + rank) % capacity
    keep = rank >= counts[pol_K] - capacity
    return slots, rank, counts, keep


def check_state(d: dict[str, Any], n_policies: int, capacity: int, width: int) -> int:
    """Validate the layout-independent part of a replay state dict; return ``M = max(size)``, its stored slots.

    Raises:
        ValueError: on missing keys or arrays whose shape/dtype do not fit a buffer of ``n_policies`` x
            ``capacity`` with ``width = 2C`` tree nodes.
    """
    missing = [k for k in (*_STATE_ARRAYS, *_STATE_SCALARS) if k not in d]
    if missing:
        raise ValueError(f"state dict lacks {missing}")
    P, N = n_policies, capacity
    size = np.asarray(d["size"])
    m = int(size.max()) if size.size else 0
    expected: dict[str, tuple[tuple[int, ...], np.dtype]] = {
        "actions": ((P, m), np.dtype(np.int64)),
        "rewards": ((P, m), np.dtype(np.float32)),
        "dones": ((P, m), np.dtype(np.float32)),
        "sum_tree": ((P, width), np.dtype(np.float64)),
        "min_tree": ((P, width), np.dtype(np.float64)),
        "ptr": ((P,), np.dtype(np.int64)),
        "size": ((P,), np.dtype(np.int64)),
        "max_priority": ((P,), np.dtype(np.float64)),
    }
    for k, (shape, dtype) in expected.items():
        a = np.asarray(d[k])
        if a.shape != shape or a.dtype != dtype:
            raise ValueError(f"state '{k}' has {a.shape} {a.dtype}, expected {shape} {dtype}")
    if m > N or (size < 0).any() or (np.asarray(d["ptr"]) >= N).any():
        raise ValueError("state sizes/pointers do not fit this buffer's capacity")
    return m


def check_plain_obs_state(d: dict[str, Any], m: int, n_policies: int, obs_shape: tuple[int, ...],
                          obs_dtype: np.dtype) -> None:
    """Validate the ``obs`` / ``next_obs`` arrays ``[P, m, *obs_shape]`` of a plain-layout state dict."""
    shape = (n_policies, m, *obs_shape)
    for k in ("obs", "next_obs"):
        if k not in d:
            raise ValueError(f"state dict lacks {[k]}")
        a = np.asarray(d[k])
        if a.shape != shape or a.dtype != obs_dtype:
            raise ValueError(f"state '{k}' has {a.shape} {a.dtype}, expected {shape} {obs_dtype}")


class MultiAgentPER:
    """Proportional prioritized replay for ``P`` policies, each with its own ring buffer and trees.

    Args:
        n_policies: ``P``, the number of independent buffers.
        capacity: rows per policy; the oldest row of a policy is overwritten when it is full.
        obs_shape: shape of one observation (without batch dims).
        obs_dtype: storage dtype of ``obs`` / ``next_obs`` (e.g. ``np.uint8`` or ``np.float32``).
        alpha: priority exponent; tree values are ``p ** alpha`` (0 gives uniform sampling).
        beta: default importance-sampling exponent (may be reassigned, e.g. annealed, or passed to
            :meth:`sample`).
        eps: added to ``|td|`` in :meth:`update_priorities` so every row keeps a positive priority.
        rng: random generator for :meth:`sample`; the caller owns (and checkpoints) its state.
        track_inserted_max: whether priorities given to :meth:`add` raise ``max_p`` (default). ``False``
            reproduces RLlib 2.1, where only :meth:`update_priorities` raises it.
    """

    def __init__(
        self,
        n_policies: int,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: npt.DTypeLike,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        rng: np.random.Generator | None = None,
        track_inserted_max: bool = True,
    ) -> None:
        check_settings(n_policies, capacity, alpha, beta, eps)
        self.n_policies = int(n_policies)
        self.capacity = int(capacity)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.track_inserted_max = bool(track_inserted_max)

        P, N = self.n_policies, self.capacity
        self._depth = max(0, (N - 1).bit_length())  # number of levels below the root
        self._leaf0 = 1 << self._depth  # C: node index of slot 0 (C >= capacity)
        self._width = 2 * self._leaf0  # nodes per policy tree (index 0 unused)

        self._init_obs_storage()
        self._actions = np.zeros((P, N), dtype=np.int64)
        self._rewards = np.zeros((P, N), dtype=np.float32)
        self._dones = np.zeros((P, N), dtype=np.float32)
        # Trees: rows are policies; empty leaves are 0 in the sum tree and +inf in the min tree.
        self._sum_tree = np.zeros((P, self._width), dtype=np.float64)
        self._min_tree = np.full((P, self._width), np.inf, dtype=np.float64)
        self._ptr = np.zeros(P, dtype=np.int64)
        self._size = np.zeros(P, dtype=np.int64)
        self._max_priority = np.ones(P, dtype=np.float64)
        # Views (no copies) for 1-D gathers/scatters: node n of policy p is flat[p * 2C + n]; its children
        # 2n, 2n+1 are the pair pairs[p * C + n] (one gather fetches both).
        self._sum_flat = self._sum_tree.reshape(-1)
        self._min_flat = self._min_tree.reshape(-1)
        self._sum_pairs = self._sum_tree.reshape(-1, 2)
        self._min_pairs = self._min_tree.reshape(-1, 2)
        self._tree_base = np.arange(P, dtype=np.int64) * self._width  # [P]  p * 2C
        self._pair_base = np.arange(P, dtype=np.int64) * self._leaf0  # [P]  p * C
        self._row_base = np.arange(P, dtype=np.int64) * N  # [P]  p * capacity (storage rows)
        self._actions_rows = self._actions.reshape(-1)
        self._rewards_rows = self._rewards.reshape(-1)
        self._dones_rows = self._dones.reshape(-1)

    # ------------------------------------------------------------------ observation storage (layout hooks)

    def _init_obs_storage(self) -> None:
        """Allocate the observation storage: here ``obs`` and ``next_obs``, both ``[P, capacity, *obs_shape]``."""
        P, N = self.n_policies, self.capacity
        self._obs = np.zeros((P, N, *self.obs_shape), dtype=self.obs_dtype)
        self._next_obs = np.zeros((P, N, *self.obs_shape), dtype=self.obs_dtype)
        self._obs_rows = self._obs.reshape(P * N, *self.obs_shape)
        self._next_obs_rows = self._next_obs.reshape(P * N, *self.obs_shape)

    def _obs_arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays that hold observations (for :attr:`nbytes`)."""
        return (self._obs, self._next_obs)

    def _store_obs(self, pol_w: np.ndarray, slot_w: np.ndarray, rank_w: np.ndarray, counts_P: np.ndarray,
                   obs: np.ndarray, next_obs: np.ndarray, stream_w: np.ndarray | None) -> None:
        """Write the observations of the rows kept by :meth:`add` (called before the pointers advance).

        Args:
            pol_w, slot_w: int64 ``[W]`` policy and slot of each written row, in input order.
            rank_w: int64 ``[W]`` rank of each row among its policy's rows in this call.
            counts_P: int64 ``[P]`` rows given per policy in this call (written or superseded).
            obs, next_obs: ``[W, *obs_shape]`` as given (any dtype; cast to the storage dtype here).
            stream_w: optional int64 ``[W]`` stream of each row (unused by this layout).
        """
        row = self._row_base[pol_w] + slot_w
        self._obs_rows[row] = obs
        self._next_obs_rows[row] = next_obs

    def _gather_obs(self, row_PB: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(obs, next_obs)`` of storage rows ``p * capacity + slot``, each ``[P, B, *obs_shape]``."""
        return self._obs_rows[row_PB], self._next_obs_rows[row_PB]

    def _obs_state(self, m: int) -> dict[str, np.ndarray]:
        """The observation part of :meth:`state_dict` (views), for the first ``m`` slots."""
        return {"obs": self._obs[:, :m], "next_obs": self._next_obs[:, :m]}

    def _check_obs_state(self, d: dict[str, Any], m: int) -> None:
        """Validate the observation part of a state dict with ``m`` slots; raise ValueError if it does not fit."""
        check_plain_obs_state(d, m, self.n_policies, self.obs_shape, self.obs_dtype)

    def _load_obs_state(self, d: dict[str, Any], m: int) -> None:
        """Load the (checked) observation part of a state dict with ``m`` slots."""
        for k, dst in (("obs", self._obs), ("next_obs", self._next_obs)):
            dst[:, :m] = d[k]
            dst[:, m:] = 0

    # ------------------------------------------------------------------ properties

    @property
    def sizes(self) -> np.ndarray:
        """int64 ``[P]``: rows currently stored per policy (a copy)."""
        return self._size.copy()

    def max_priority(self) -> np.ndarray:
        """float64 ``[P]``: each policy's max raw priority ``max_p`` (given to new rows by default)."""
        return self._max_priority.copy()

    def leaf_priorities(self) -> np.ndarray:
        """float64 ``[P, capacity]``: stored tree values ``p_i ** alpha`` per slot (0 for empty slots)."""
        return self._sum_tree[:, self._leaf0 : self._leaf0 + self.capacity].copy()

    def total_priority(self) -> np.ndarray:
        """float64 ``[P]``: ``sum_i p_i ** alpha`` per policy (the sum-tree roots)."""
        return self._sum_tree[:, 1].copy()

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays allocated by the buffer (storage, trees, pointers)."""
        arrays = (
            *self._obs_arrays(),
            self._actions,
            self._rewards,
            self._dones,
            self._sum_tree,
            self._min_tree,
            self._ptr,
            self._size,
            self._max_priority,
            self._tree_base,
            self._pair_base,
            self._row_base,
        )
        return int(sum(a.nbytes for a in arrays))

    # ------------------------------------------------------------------ trees

    def _set_leaves(self, pol: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
        """:func:`set_leaves` for entries ``(pol[m], slots[m])`` (unique pairs) with tree values ``values``."""
        set_leaves(self._sum_flat, self._min_flat, self._sum_pairs, self._min_pairs, self._tree_base[pol],
                   self._pair_base[pol], slots, values, self._leaf0, self._depth)

    def _descend(self, pair_base: np.ndarray, u: np.ndarray, guard: bool) -> np.ndarray:
        """:func:`descend` in this buffer's sum trees."""
        return descend(self._sum_pairs, pair_base, u, self._depth, guard)

    # ------------------------------------------------------------------ add

    def add(
        self,
        policy_K: np.ndarray,
        obs_K: np.ndarray,
        action_K: np.ndarray,
        reward_K: np.ndarray,
        next_obs_K: np.ndarray,
        done_K: np.ndarray,
        priority_K: np.ndarray | None = None,
        stream_K: np.ndarray | None = None,
    ) -> np.ndarray:
        """Append ``K`` rows, each to the ring of its policy.

        Rows may belong to any policies in any order, with several rows per policy. Row ``k`` of policy
        ``p`` that is the ``r``-th row of ``p`` in this call goes to slot ``(ptr[p] + r) % capacity``, so
        rows of one policy keep their order and the oldest rows are overwritten first (FIFO). Afterwards
        ``ptr[p] += n_p (mod capacity)`` and ``size[p] = min(size[p] + n_p, capacity)``.

        Args:
            policy_K: int ``[K]`` policy of each row, in ``[0, P)``.
            obs_K: ``[K, *obs_shape]``, cast to the storage dtype.
            action_K: int ``[K]``.
            reward_K: float ``[K]``.
            next_obs_K: ``[K, *obs_shape]``.
            done_K: bool/float ``[K]`` (1 = terminal, no bootstrap).
            priority_K: optional raw priorities ``[K]`` (> 0, before ``** alpha``). ``None`` gives each row
                its policy's current max priority ``max_p`` (as of before this call). Given priorities
                also raise ``max_p`` unless ``track_inserted_max`` is False.
            stream_K: optional int ``[K]`` stream of each row (e.g. the agent whose trajectory it is; -1 for
                none). Layouts that store an observation once (:class:`~suPER.replay.compact.CompactPER`) link a
                row's ``next_obs`` to the next row of the same policy and stream when the two are equal; this
                layout stores both and ignores it. Sampled rows never depend on it.

        Returns:
            int64 ``[K]`` slot index of each row within its policy's ring. If one call adds more than
            ``capacity`` rows to a policy, its earliest rows would be overwritten within the call; they
            are not written and their index is ``-1``.
        """
        pol = np.asarray(policy_K)
        if pol.ndim != 1 or (pol.size > 0 and not np.issubdtype(pol.dtype, np.integer)):
            raise ValueError(
                f"policy_K must be a 1-D integer array, got shape {pol.shape}, dtype {pol.dtype}"
            )
        K = pol.shape[0]
        pol = pol.astype(np.int64, copy=False)
        obs = np.asarray(obs_K)
        next_obs = np.asarray(next_obs_K)
        actions = np.asarray(action_K)
        rewards = np.asarray(reward_K)
        dones = np.asarray(done_K)
        for name, arr, shape in (
            ("obs_K", obs, (K, *self.obs_shape)),
            ("next_obs_K", next_obs, (K, *self.obs_shape)),
            ("action_K", actions, (K,)),
            ("reward_K", rewards, (K,)),
            ("done_K", dones, (K,)),
        ):
            if arr.shape != shape:
                raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
        if K == 0:
            return np.zeros(0, dtype=np.int64)
        if pol.min() < 0 or pol.max() >= self.n_policies:
            raise ValueError(f"policy_K must lie in [0, {self.n_policies}), got {np.unique(pol)}")

        if priority_K is None:
            prio = self._max_priority[pol]
        else:
            prio = np.asarray(priority_K, dtype=np.float64)
            if prio.shape != (K,):
                raise ValueError(f"priority_K has shape {prio.shape}, expected {(K,)}")
            if not np.all(np.isfinite(prio) & (prio > 0)):
                raise ValueError("priority_K must be finite and > 0")

        # Rank of each row among the rows of its policy in this call (stable: keeps input order); rows
        # superseded within this call (only when > capacity rows for one policy) are skipped.
        slots, rank, counts, keep = ring_slots(pol, self._ptr, self.capacity)
        if not keep.all():
            slots = np.where(keep, slots, -1)
            pol_w, slot_w, prio = pol[keep], slots[keep], prio[keep]
            obs, next_obs, actions, rewards, dones, rank_w = (
                obs[keep],
                next_obs[keep],
                actions[keep],
                rewards[keep],
                dones[keep],
                rank[keep],
            )
        else:
            pol_w, slot_w, rank_w = pol, slots, rank
        stream_w = None
        if stream_K is not None:
            stream = np.asarray(stream_K, dtype=np.int64)
            if stream.shape != (K,):
                raise ValueError(f"stream_K has shape {stream.shape}, expected {(K,)}")
            stream_w = stream if keep.all() else stream[keep]

        row = self._row_base[pol_w] + slot_w
        self._store_obs(pol_w, slot_w, rank_w, counts, obs, next_obs, stream_w)
        self._actions_rows[row] = actions
        self._rewards_rows[row] = rewards
        self._dones_rows[row] = dones
        self._set_leaves(pol_w, slot_w, prio**self.alpha)

        if priority_K is not None and self.track_inserted_max:
            np.maximum.at(self._max_priority, pol_w, prio)
        self._ptr += counts
        self._ptr %= self.capacity
        np.minimum(self._size + counts, self.capacity, out=self._size)
        return slots

    # ------------------------------------------------------------------ sample

    def sample(self, batch_size: int, beta: float | None = None) -> Batch:
        """Draw ``B = batch_size`` rows per policy, proportionally to ``p_i ** alpha`` (stratified).

        For policy ``p`` with total ``T_p = sum_j p_j^alpha``, draw ``u_pb = (b + U_pb) * T_p / B`` with
        ``U_pb ~ Uniform[0, 1)`` for ``b = 0..B-1`` and descend the sum tree to the leaf whose prefix-sum
        interval contains ``u_pb``, so ``P(i) = p_i^alpha / T_p``. Importance weights are

            ``w_i = (n_p * P(i))^(-beta) / (n_p * P_min)^(-beta)``,  ``P_min = min_j p_j^alpha / T_p``,

        with ``n_p`` the rows stored by policy ``p``.

        Args:
            batch_size: ``B`` >= 1 rows per policy (drawn with replacement).
            beta: importance exponent; defaults to ``self.beta``.

        Returns:
            A :class:`Batch` with leading dims ``[P, B]``.

        Raises:
            ValueError: if ``batch_size < 1`` or some policy holds no rows (the message lists them).
        """
        check_can_sample(batch_size, self._size)
        beta = self.beta if beta is None else float(beta)
        P, B = self.n_policies, int(batch_size)

        total = self._sum_tree[:, 1]  # [P]
        u = (np.arange(B, dtype=np.float64) + self.rng.random((P, B))) * (total[:, None] / B)  # [P, B]
        pair_base = self._pair_base[:, None]  # [P, 1]
        # Fast path without the rounding guard; the rare draws that end on an empty leaf (u rounded up to
        # >= the mass of a subtree whose right part is empty) are redone with the guard.
        node = self._descend(pair_base, u.copy(), guard=False)  # [P, B] heap index in [C, 2C)
        leaf = self._sum_flat.take(node + 2 * pair_base)  # [P, B]
        bad = leaf <= 0
        if bad.any():
            rows = np.nonzero(bad)[0]
            node[bad] = self._descend(self._pair_base[rows], u[bad], guard=True)
            leaf = self._sum_flat.take(node + 2 * pair_base)
        indices = node - self._leaf0  # [P, B], all with leaf > 0, hence < size

        # w_i / max_j w_j = (n P(i))^-beta / (n P_min)^-beta = (p_i^alpha / min_j p_j^alpha)^-beta
        min_leaf = self._min_tree[:, 1:2]  # [P, 1]
        weights = ((leaf / min_leaf) ** (-beta)).astype(np.float32)

        row = self._row_base[:, None] + indices  # [P, B]
        obs, next_obs = self._gather_obs(row)
        return Batch(
            obs=obs,
            actions=self._actions_rows[row],
            rewards=self._rewards_rows[row],
            next_obs=next_obs,
            dones=self._dones_rows[row],
            weights=weights,
            indices=indices,
        )

    # ------------------------------------------------------------------ priorities

    def update_priorities(self, indices_PB: np.ndarray, td_abs_PB: np.ndarray) -> None:
        """Set new priorities ``p = |td| + eps`` (tree value ``p ** alpha``) for sampled rows.

        Row ``p`` of both arrays belongs to policy ``p`` (as returned in :attr:`Batch.indices`).
        ``max_p = max(max_p, max_b p_pb)`` for every policy, counting every given entry.

        Duplicate indices within one row (a slot drawn twice): the LAST occurrence (largest ``b``) wins.

        Note:
            Indices refer to slots, not rows: if rows were added between :meth:`sample` and this call and
            overwrote a sampled slot, the priority lands on the new row (as in RLlib).

        Args:
            indices_PB: int ``[P, B]`` slot indices, each in ``[0, size[p])``.
            td_abs_PB: float ``[P, B]`` TD errors (the absolute value is taken); must be finite.

        Raises:
            ValueError: on shape mismatch, out-of-range indices, non-finite TD errors, or a zero priority
                (only possible with ``eps == 0``).
        """
        idx = np.asarray(indices_PB)
        td = np.asarray(td_abs_PB, dtype=np.float64)
        if idx.ndim != 2 or idx.shape[0] != self.n_policies or td.shape != idx.shape:
            raise ValueError(
                f"indices_PB {idx.shape} and td_abs_PB {td.shape} must both be [P={self.n_policies}, B]"
            )
        if idx.size == 0:
            return
        idx = idx.astype(np.int64, copy=False)
        if (idx < 0).any() or (idx >= self._size[:, None]).any():
            raise ValueError(f"indices_PB out of range for sizes {self._size.tolist()}")
        prio = np.abs(td) + self.eps  # [P, B]
        if not (np.isfinite(prio).all() and (prio > 0).all()):
            raise ValueError("td_abs_PB must be finite (and nonzero when eps == 0)")
        np.maximum(self._max_priority, prio.max(axis=1), out=self._max_priority)

        P, B = idx.shape
        pol = np.repeat(np.arange(P, dtype=np.int64), B)  # [P*B]
        slots = idx.reshape(-1)
        values = prio.reshape(-1) ** self.alpha
        key = self._row_base[pol] + slots  # unique id of (policy, slot)
        sorted_key = np.sort(key)
        if (sorted_key[1:] == sorted_key[:-1]).any():
            # Keep the last occurrence of each key: its first occurrence in the reversed order.
            _, first_rev = np.unique(key[::-1], return_index=True)
            last = key.size - 1 - first_rev
            pol, slots, values = pol[last], slots[last], values[last]
        self._set_leaves(pol, slots, values)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Everything needed to restore the buffer, as numpy arrays (the rng is the caller's).

        Storage arrays are trimmed to the first ``max(sizes)`` slots (the rest are never written).

        Args:
            copy: return copies (default). ``False`` returns views that change with the buffer.

        Returns:
            Dict with ``obs``, ``next_obs`` ``[P, M, *obs_shape]``, ``actions``, ``rewards``, ``dones``
            ``[P, M]`` (``M = max(sizes)``), ``sum_tree``, ``min_tree`` ``[P, 2C]``, ``ptr``, ``size``,
            ``max_priority`` ``[P]`` and 0-d ``alpha``, ``beta``, ``eps``.
        """
        m = int(self._size.max())
        out: dict[str, np.ndarray] = {
            **self._obs_state(m),
            "actions": self._actions[:, :m],
            "rewards": self._rewards[:, :m],
            "dones": self._dones[:, :m],
            "sum_tree": self._sum_tree,
            "min_tree": self._min_tree,
            "ptr": self._ptr,
            "size": self._size,
            "max_priority": self._max_priority,
            "alpha": np.asarray(self.alpha),
            "beta": np.asarray(self.beta),
            "eps": np.asarray(self.eps),
        }
        if copy:
            out = {k: np.array(v, copy=True) for k, v in out.items()}
        return out

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into this buffer (same ``P``, capacity, obs shape and dtype).

        ``alpha``, ``beta`` and ``eps`` are taken from the state (the trees hold ``p ** alpha``).

        Raises:
            ValueError: on missing keys or arrays whose shape/dtype do not fit this buffer.
        """
        m = check_state(d, self.n_policies, self.capacity, self._width)
        self._check_obs_state(d, m)

        self._load_obs_state(d, m)
        for k, dst in (
            ("actions", self._actions),
            ("rewards", self._rewards),
            ("dones", self._dones),
        ):
            dst[:, :m] = d[k]
            dst[:, m:] = 0
        np.copyto(self._sum_tree, d["sum_tree"])
        np.copyto(self._min_tree, d["min_tree"])
        np.copyto(self._ptr, d["ptr"])
        np.copyto(self._size, d["size"])
        np.copyto(self._max_priority, d["max_priority"])
        self.alpha = float(d["alpha"])
        self.beta = float(d["beta"])
        self.eps = float(d["eps"])
