"""Prioritized replay for P policies held as torch tensors on a chosen device (packed runs on a GPU).

:class:`TorchPER` is :class:`~suPER.replay.per.MultiAgentPER` with its storage, sum/min trees, priority
updates and stratified sampling on a torch device: the same layout (rows ``[P, capacity]``, trees
``[P, 2C]``), the same semantics (new rows at the policy's max priority, ``p = |td| + eps``, tree value
``p ** alpha``, stratified draws ``u_pb = (b + U_pb) T_p / B``, weights ``(p_i^alpha / min_j p_j^alpha)^-beta``)
and the same tree code: :func:`~suPER.replay.per.set_leaves` and :func:`~suPER.replay.per.descend` are
written once for numpy arrays and tensors. An update or a sample is ``O(log C)`` tensor operations on
``P x B`` elements, with no Python loop over rows or policies.

What stays on the host: the write pointers and fill levels (``ptr``, ``size``, int64 ``[P]``) and the slot
bookkeeping of :meth:`add` (:func:`~suPER.replay.per.ring_slots` on the ``K`` policy ids, which the trainer
has on the host anyway), so ``add`` and ``sample`` never wait for the device to decide a shape.

Draws: ``rng`` is a ``numpy.random.Generator`` (default; the ``P x B`` uniforms are drawn on the host and
moved, so the buffer returns the same rows, weights and indices as a ``MultiAgentPER`` with the same
generator state and contents, and a checkpoint's generator state means the same in both), or a
``torch.Generator`` on the device (no host round trip; a different stream). :meth:`sample` also takes the
uniforms directly (``uniform_PB``), for tests.

Sampling always takes the guarded descent (go right only into a positive subtree): it equals the numpy
buffer's fast path wherever that ends on a stored row and its redo where it does not, without the
data-dependent branch (a device sync).

Checkpoints: :meth:`state_dict` returns host numpy arrays in ``MultiAgentPER``'s layout (``obs``, ``next_obs``
``[P, M, ...]`` in the storage dtype, trimmed to ``M = max(sizes)``; trees, pointers, scalars), and
:meth:`load_state_dict` takes that layout (numpy arrays or tensors), so a packed run's checkpoint stays
resumable whichever buffer wrote it; a ``CompactPER`` state loads through
:func:`~suPER.replay.compact.load_replay_state`. Observations are stored plain (no compact codes on the device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from suPER.arrays import like, uniform
from suPER.replay.per import (
    _STATE_SCALARS,
    check_can_sample,
    check_plain_obs_state,
    check_settings,
    check_state,
    descend,
    ring_slots,
    set_leaves,
)

__all__ = ["TorchBatch", "TorchPER", "torch_dtype"]

_UNSIGNED_WIDE = {np.dtype(np.uint16): torch.int32, np.dtype(np.uint32): torch.int64}
"""numpy storage dtypes torch indexes poorly, and the (lossless) tensor dtype that holds them instead."""


def torch_dtype(dtype: npt.DTypeLike) -> torch.dtype:
    """The tensor dtype that stores numpy ``dtype`` losslessly (uint16 -> int32, uint32 -> int64, else the same)."""
    dt = np.dtype(dtype)
    return _UNSIGNED_WIDE.get(dt) or torch.from_numpy(np.zeros(0, dtype=dt)).dtype


@dataclass
class TorchBatch:
    """A batch sampled from :class:`TorchPER`; the fields of :class:`~suPER.replay.per.Batch`, as tensors on the
    buffer's device (``obs``/``next_obs`` in the storage dtype, ``indices`` int64)."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor
    weights: torch.Tensor
    indices: torch.Tensor


class TorchPER:
    """Proportional prioritized replay for ``P`` policies as tensors on ``device`` (module docstring).

    Args:
        n_policies, capacity, obs_shape, obs_dtype, alpha, beta, eps, track_inserted_max: as
            :class:`~suPER.replay.per.MultiAgentPER`.
        rng: ``numpy.random.Generator`` (host draws, the numpy buffer's numbers) or ``torch.Generator`` on
            ``device``; the caller owns (and checkpoints) its state.
        device: where storage and trees live.
    """

    def __init__(self, n_policies: int, capacity: int, obs_shape: tuple[int, ...], obs_dtype: npt.DTypeLike,
                 alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 rng: np.random.Generator | torch.Generator | None = None, track_inserted_max: bool = True,
                 device: str | torch.device = "cpu") -> None:
        check_settings(n_policies, capacity, alpha, beta, eps)
        self.n_policies, self.capacity = int(n_policies), int(capacity)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.rng: Any = rng if rng is not None else np.random.default_rng()
        self.track_inserted_max = bool(track_inserted_max)
        self.device = torch.device(device)

        P, N, dev = self.n_policies, self.capacity, self.device
        self._depth = max(0, (N - 1).bit_length())
        self._leaf0 = 1 << self._depth
        self._width = 2 * self._leaf0
        obs_t = torch_dtype(self.obs_dtype)
        self._obs = torch.zeros((P, N, *self.obs_shape), dtype=obs_t, device=dev)
        self._next_obs = torch.zeros_like(self._obs)
        self._actions = torch.zeros((P, N), dtype=torch.int64, device=dev)
        self._rewards = torch.zeros((P, N), dtype=torch.float32, device=dev)
        self._dones = torch.zeros((P, N), dtype=torch.float32, device=dev)
        self._sum_tree = torch.zeros((P, self._width), dtype=torch.float64, device=dev)
        self._min_tree = torch.full((P, self._width), float("inf"), dtype=torch.float64, device=dev)
        self._max_priority = torch.ones(P, dtype=torch.float64, device=dev)
        self._ptr = np.zeros(P, dtype=np.int64)  # host: the slot bookkeeping of add
        self._size = np.zeros(P, dtype=np.int64)
        self._size_t = torch.zeros(P, dtype=torch.int64, device=dev)  # device copy, for index checks
        self._bind()

    _ROW_STATE = ("_obs", "_next_obs", "_actions", "_rewards", "_dones", "_sum_tree", "_min_tree", "_max_priority",
                  "_ptr", "_size", "_size_t")
    """Per-policy state (leading axis P): what :meth:`split` slices."""

    def _bind(self) -> None:
        """Derived views and index bases of the per-policy state (node n of policy p is flat[p * 2C + n])."""
        P, N, dev = self.n_policies, self.capacity, self.device
        self._sum_flat, self._min_flat = self._sum_tree.view(-1), self._min_tree.view(-1)
        self._sum_pairs, self._min_pairs = self._sum_tree.view(-1, 2), self._min_tree.view(-1, 2)
        self._tree_base = torch.arange(P, dtype=torch.int64, device=dev) * self._width
        self._pair_base = torch.arange(P, dtype=torch.int64, device=dev) * self._leaf0
        self._row_base = torch.arange(P, dtype=torch.int64, device=dev) * N
        self._obs_rows = self._obs.view(P * N, *self.obs_shape)
        self._next_obs_rows = self._next_obs.view(P * N, *self.obs_shape)
        self._actions_rows, self._rewards_rows, self._dones_rows = (
            self._actions.view(-1), self._rewards.view(-1), self._dones.view(-1))

    def view(self, index: int, parts: int, rng: Any) -> TorchPER:
        """Part ``index`` of ``parts`` equal parts of the policies, as a buffer whose tensors are row slices of
        this one's (a pack's run: see :meth:`split`).

        Args:
            index: which part, in ``[0, parts)``.
            parts: number of parts; must divide ``n_policies``.
            rng: the part's own generator.
        """
        if parts < 1 or self.n_policies % parts or not 0 <= index < parts:
            raise ValueError(f"cannot take part {index} of {self.n_policies} policies in {parts} parts")
        k = self.n_policies // parts
        part = object.__new__(TorchPER)
        part.__dict__.update(self.__dict__)
        part.n_policies, part.rng = k, rng
        for name in self._ROW_STATE:
            setattr(part, name, getattr(self, name)[index * k:(index + 1) * k])  # views: writes land here
        part._bind()
        return part

    def split(self, parts: int, rngs: list[Any]) -> list[TorchPER]:
        """``parts`` buffers of ``P / parts`` policies each that are views of this one's rows (a pack's runs).

        Each part is a full :class:`TorchPER` (its own generator, add / sample / update / checkpoint in an
        unpacked run's layout) whose tensors are row slices of this buffer's, so a pack can also sample and
        update all runs at once through this buffer: with the parts' uniforms concatenated, one
        :meth:`sample` here returns every part's own :meth:`sample` (sampling is per policy), in
        ``O(log C)`` tensor operations instead of ``parts`` times as many.

        Args:
            parts: number of views; must divide ``n_policies``.
            rngs: one generator per view.
        """
        return [self.view(i, parts, rng) for i, rng in enumerate(rngs)]

    # ------------------------------------------------------------------ properties

    @property
    def sizes(self) -> np.ndarray:
        """int64 ``[P]``: rows currently stored per policy (a host copy)."""
        return self._size.copy()

    def max_priority(self) -> np.ndarray:
        """float64 ``[P]``: each policy's max raw priority (host copy)."""
        return self._max_priority.cpu().numpy()

    def leaf_priorities(self) -> np.ndarray:
        """float64 ``[P, capacity]``: stored tree values per slot (host copy)."""
        return self._sum_tree[:, self._leaf0: self._leaf0 + self.capacity].cpu().numpy()

    def total_priority(self) -> np.ndarray:
        """float64 ``[P]``: the sum-tree roots (host copy)."""
        return self._sum_tree[:, 1].cpu().numpy()

    @property
    def nbytes(self) -> int:
        """Bytes of all tensors and host arrays the buffer allocated (device and host together)."""
        tensors = (self._obs, self._next_obs, self._actions, self._rewards, self._dones, self._sum_tree,
                   self._min_tree, self._max_priority, self._size_t, self._tree_base, self._pair_base, self._row_base)
        return int(sum(t.numel() * t.element_size() for t in tensors) + self._ptr.nbytes + self._size.nbytes)

    # ------------------------------------------------------------------ add

    def add(self, policy_K: Any, obs_K: Any, action_K: Any, reward_K: Any, next_obs_K: Any, done_K: Any,
            priority_K: Any = None, stream_K: Any = None) -> np.ndarray:
        """Append ``K`` rows, each to the ring of its policy (:meth:`MultiAgentPER.add`'s rules and arguments).

        The row fields may be numpy arrays or tensors (moved to the device); ``policy_K`` is read on the host
        (a tensor is copied there). ``stream_K`` is accepted and ignored (plain layout).

        Returns:
            int64 ``[K]`` host array: slot of each row, ``-1`` for rows superseded within the call.
        """
        pol = np.asarray(policy_K.cpu() if isinstance(policy_K, torch.Tensor) else policy_K)
        if pol.ndim != 1 or (pol.size > 0 and not np.issubdtype(pol.dtype, np.integer)):
            raise ValueError(f"policy_K must be a 1-D integer array, got shape {pol.shape}, dtype {pol.dtype}")
        K = pol.shape[0]
        pol = pol.astype(np.int64, copy=False)
        for name, arr, shape in (("obs_K", obs_K, (K, *self.obs_shape)), ("next_obs_K", next_obs_K, (K, *self.obs_shape)),
                                 ("action_K", action_K, (K,)), ("reward_K", reward_K, (K,)), ("done_K", done_K, (K,))):
            if tuple(arr.shape) != shape:
                raise ValueError(f"{name} has shape {tuple(arr.shape)}, expected {shape}")
        if K == 0:
            return np.zeros(0, dtype=np.int64)
        if pol.min() < 0 or pol.max() >= self.n_policies:
            raise ValueError(f"policy_K must lie in [0, {self.n_policies}), got {np.unique(pol)}")
        if priority_K is not None:
            prio_host = priority_K if not isinstance(priority_K, torch.Tensor) else None
            if tuple(priority_K.shape) != (K,):
                raise ValueError(f"priority_K has shape {tuple(priority_K.shape)}, expected {(K,)}")
            if prio_host is not None and not np.all(np.isfinite(prio_host) & (np.asarray(prio_host) > 0)):
                raise ValueError("priority_K must be finite and > 0")

        slots, _, counts, keep = ring_slots(pol, self._ptr, self.capacity)
        dev = self.device
        fields = [torch.as_tensor(x, device=dev) for x in (obs_K, next_obs_K, action_K, reward_K, done_K)]
        prio = None if priority_K is None else torch.as_tensor(priority_K, dtype=torch.float64, device=dev)
        pol_w, slot_w = pol, slots
        if not keep.all():
            keep_t = torch.as_tensor(keep, device=dev)
            fields = [x[keep_t] for x in fields]
            prio = None if prio is None else prio[keep_t]
            pol_w, slot_w = pol[keep], slots[keep]
            slots = np.where(keep, slots, -1)
        pol_t = torch.as_tensor(pol_w, device=dev)
        slot_t = torch.as_tensor(slot_w, device=dev)
        if prio is None:
            prio = self._max_priority[pol_t]
        row = self._row_base[pol_t] + slot_t
        obs, next_obs, actions, rewards, dones = fields
        self._obs_rows[row] = obs.to(self._obs.dtype)
        self._next_obs_rows[row] = next_obs.to(self._obs.dtype)
        self._actions_rows[row] = actions.to(torch.int64)
        self._rewards_rows[row] = rewards.to(torch.float32)
        self._dones_rows[row] = dones.to(torch.float32)
        set_leaves(self._sum_flat, self._min_flat, self._sum_pairs, self._min_pairs, self._tree_base[pol_t],
                   self._pair_base[pol_t], slot_t, prio**self.alpha, self._leaf0, self._depth)
        if priority_K is not None and self.track_inserted_max:
            self._max_priority.scatter_reduce_(0, pol_t, prio, reduce="amax")
        self._ptr += counts
        self._ptr %= self.capacity
        np.minimum(self._size + counts, self.capacity, out=self._size)
        self._size_t.copy_(torch.from_numpy(self._size))
        return slots

    # ------------------------------------------------------------------ sample

    def sample(self, batch_size: int, beta: float | None = None, uniform_PB: Any = None) -> TorchBatch:
        """Draw ``B`` rows per policy, stratified and proportional to ``p_i ** alpha`` (:meth:`MultiAgentPER.sample`).

        Args:
            batch_size: ``B`` >= 1.
            beta: importance exponent; defaults to ``self.beta``.
            uniform_PB: optional float64 ``[P, B]`` draws ``U_pb`` in ``[0, 1)`` to use instead of ``rng``'s.

        Returns:
            A :class:`TorchBatch` with leading dims ``[P, B]`` on the device.

        Raises:
            ValueError: if ``batch_size < 1`` or some policy holds no rows.
        """
        check_can_sample(batch_size, self._size)
        beta = self.beta if beta is None else float(beta)
        P, B, dev = self.n_policies, int(batch_size), self.device
        if uniform_PB is None:
            uniform_PB = uniform(self.rng, (P, B), self._sum_tree)
        U = torch.as_tensor(uniform_PB, dtype=torch.float64, device=dev)
        total = self._sum_tree[:, 1]  # [P]
        u = (torch.arange(B, dtype=torch.float64, device=dev) + U) * (total[:, None] / B)  # [P, B]
        pair_base = self._pair_base[:, None]
        node = descend(self._sum_pairs, pair_base, u, self._depth, guard=True)  # [P, B] in [C, 2C)
        leaf = self._sum_flat[node + 2 * pair_base]
        indices = node - self._leaf0
        weights = ((leaf / self._min_tree[:, 1:2]) ** (-beta)).to(torch.float32)
        row = self._row_base[:, None] + indices
        return TorchBatch(obs=self._obs_rows[row], actions=self._actions_rows[row], rewards=self._rewards_rows[row],
                          next_obs=self._next_obs_rows[row], dones=self._dones_rows[row], weights=weights,
                          indices=indices)

    # ------------------------------------------------------------------ priorities

    def update_priorities(self, indices_PB: Any, td_abs_PB: Any) -> None:
        """Set ``p = |td| + eps`` (tree value ``p ** alpha``) for sampled rows (:meth:`MultiAgentPER.update_priorities`).

        Duplicate indices within one policy's row: the last occurrence wins, as in the numpy buffer; every
        occurrence is written with that value (so the scatter's order does not matter, and no shape depends
        on the data). One device sync, for the range and finiteness checks.

        Raises:
            ValueError: on shape mismatch, out-of-range indices, non-finite TD errors or a zero priority.
        """
        dev = self.device
        idx = torch.as_tensor(indices_PB, device=dev).to(torch.int64)
        td = torch.as_tensor(td_abs_PB, device=dev).to(torch.float64)
        if idx.ndim != 2 or idx.shape[0] != self.n_policies or td.shape != idx.shape:
            raise ValueError(f"indices_PB {tuple(idx.shape)} and td_abs_PB {tuple(td.shape)} must both be "
                             f"[P={self.n_policies}, B]")
        if idx.numel() == 0:
            return
        prio = td.abs() + self.eps  # [P, B]
        bad_index = (idx < 0).any() | (idx >= self._size_t[:, None]).any()
        bad_prio = ~(torch.isfinite(prio).all() & (prio > 0).all())
        flags = torch.stack([bad_index, bad_prio]).cpu()
        if flags[0]:
            raise ValueError(f"indices_PB out of range for sizes {self._size.tolist()}")
        if flags[1]:
            raise ValueError("td_abs_PB must be finite (and nonzero when eps == 0)")
        torch.maximum(self._max_priority, prio.amax(dim=1), out=self._max_priority)
        P, B = idx.shape
        # last occurrence of each slot within its policy's row: max b' with idx[p, b'] == idx[p, b]
        same_PBB = idx[:, :, None] == idx[:, None, :]
        b_B = torch.arange(B, device=dev)
        last_PB = torch.where(same_PBB, b_B, -1).amax(dim=2)
        values = prio.gather(1, last_PB) ** self.alpha
        pol = torch.arange(P, device=dev).repeat_interleave(B)
        set_leaves(self._sum_flat, self._min_flat, self._sum_pairs, self._min_pairs, self._tree_base[pol],
                   self._pair_base[pol], idx.reshape(-1), values.reshape(-1), self._leaf0, self._depth)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self, copy: bool = True) -> dict[str, np.ndarray]:
        """:meth:`MultiAgentPER.state_dict`'s layout, as host numpy arrays (always copies; ``copy`` is accepted)."""
        m = int(self._size.max())
        obs = self._obs[:, :m].cpu().numpy().astype(self.obs_dtype, copy=False)
        next_obs = self._next_obs[:, :m].cpu().numpy().astype(self.obs_dtype, copy=False)
        return {
            "obs": obs, "next_obs": next_obs,
            "actions": self._actions[:, :m].cpu().numpy(), "rewards": self._rewards[:, :m].cpu().numpy(),
            "dones": self._dones[:, :m].cpu().numpy(),
            "sum_tree": self._sum_tree.cpu().numpy(), "min_tree": self._min_tree.cpu().numpy(),
            "ptr": self._ptr.copy(), "size": self._size.copy(), "max_priority": self._max_priority.cpu().numpy(),
            "alpha": np.asarray(self.alpha), "beta": np.asarray(self.beta), "eps": np.asarray(self.eps),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a plain-layout state dict (this class's or ``MultiAgentPER``'s; arrays or tensors).

        Raises:
            ValueError: on missing keys or arrays whose shape/dtype do not fit this buffer.
        """
        d = {k: v.cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in d.items()}
        m = check_state(d, self.n_policies, self.capacity, self._width)
        check_plain_obs_state(d, m, self.n_policies, self.obs_shape, self.obs_dtype)
        for k, dst in (("obs", self._obs), ("next_obs", self._next_obs), ("actions", self._actions),
                       ("rewards", self._rewards), ("dones", self._dones)):
            a = np.asarray(d[k])
            dst.zero_()
            dst[:, :m] = torch.as_tensor(a.astype(np.int64) if a.dtype in _UNSIGNED_WIDE else a).to(dst.dtype)
        for k, t in (("sum_tree", self._sum_tree), ("min_tree", self._min_tree), ("max_priority", self._max_priority)):
            t.copy_(like(t, np.asarray(d[k])))
        np.copyto(self._ptr, d["ptr"])
        np.copyto(self._size, d["size"])
        self._size_t.copy_(torch.from_numpy(self._size))
        self.alpha, self.beta, self.eps = (float(d[k]) for k in _STATE_SCALARS)
