"""Compact observation storage for :class:`~suPER.replay.per.MultiAgentPER`: each frame once, cells as codes.

:class:`CompactPER` keeps the trees, priorities, sampling and the ``Batch`` of ``MultiAgentPER`` (it is a
subclass that only replaces the three observation hooks) and stores observations in two ways that change
no sampled value:

* **One frame per row, next_obs by reference.** Row ``(p, slot)`` always owns its ``obs`` frame
  (``frames[p, slot]``). Its ``next_obs`` is ``next_ref[p, slot]``: either the storage row of the *next row
  of the same policy and stream* (``stream_K`` in ``add``: the agent whose trajectory it is, or the sender
  of a relayed row), when that row's ``obs`` is bit-identical to this ``next_obs``; or a frame in an
  ``extra`` pool (episode ends, dead agents, relayed rows without a relayed successor, and the newest row
  of every stream until its successor arrives, possibly in the next ``add``). Links are made only by
  exact comparison, so a link can never change a value: what is wrong is merely not linked. A link
  always points from an older row to a newer row of the same ring, and rings overwrite oldest first, so a
  referenced frame outlives every row that references it; a row's extra frame is released when the row
  is overwritten or linked. The pool grows on demand (released frames are reused first), so its size is
  the largest number of unlinked rows held at once.
* **Cells as codes** (:class:`CellCodec`, for observations ``[..., C]`` whose channel vector is wider than
  2 bytes, e.g. MAgent's ``13 x 13 x 5`` float16): every distinct channel vector (bit-exact, in the
  storage dtype) gets a uint16 code in a palette learnt as rows arrive; a frame is stored as
  ``[*obs_shape[:-1]]`` codes. Lossless by construction (each encode is verified by decoding); a 65,537th
  distinct vector raises :class:`ObsCodecError` (never rounds).

Checkpoints: :meth:`CompactPER.load_state_dict` also takes a state dict of the plain layout (``obs`` and
``next_obs`` arrays), encoding it and linking rows whose ``next_obs`` equals the next slot's ``obs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from suPER.replay.per import MultiAgentPER

__all__ = ["CellCodec", "CompactPER", "ObsCodecError", "load_replay_state"]


class ObsCodecError(ValueError):
    """An observation cannot be stored losslessly by the compact layout (set ``dqn.replay_layout: plain``)."""


class CellCodec:
    """Lossless uint16 codes for the channel vectors (last axis) of observations, with a learnt palette.

    Args:
        obs_shape: ``(*cells, C)``; each of the ``prod(cells)`` positions holds a channel vector of ``C`` values.
        dtype: storage dtype of the values; codes are over their exact bit patterns.
    """

    MAX_CODES = 1 << 16
    """uint16 codes"""

    def __init__(self, obs_shape: tuple[int, ...], dtype: npt.DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self.n_channels = int(obs_shape[-1])
        self.frame_shape = tuple(int(d) for d in obs_shape[:-1])
        self._bits = np.dtype(f"u{self.dtype.itemsize}")
        # odd 64-bit multipliers: key = sum_c bits_c * mult_c (mod 2^64); collisions are caught by verification
        self._mult = np.random.default_rng(0x5EED).integers(1, 2**63, size=self.n_channels, dtype=np.uint64) | 1
        self._palette = np.zeros((256, self.n_channels), dtype=self.dtype)
        self._n = 0
        self._keys = np.zeros(0, dtype=np.uint64)  # sorted
        self._key_codes = np.zeros(0, dtype=np.uint16)

    @staticmethod
    def applies(obs_shape: tuple[int, ...], dtype: npt.DTypeLike) -> bool:
        """Whether codes save memory: at least 2-D observations whose channel vector is wider than 2 bytes."""
        dt = np.dtype(dtype)
        return len(obs_shape) >= 2 and dt.kind in "fiub" and dt.itemsize <= 8 and dt.itemsize * obs_shape[-1] > 2

    @property
    def n_codes(self) -> int:
        """Distinct channel vectors seen so far."""
        return self._n

    @property
    def palette(self) -> np.ndarray:
        """``[n_codes, C]`` channel vector of each code (a view)."""
        return self._palette[: self._n]

    @property
    def nbytes(self) -> int:
        """Bytes held by the palette and its lookup arrays."""
        return int(self._palette.nbytes + self._keys.nbytes + self._key_codes.nbytes + self._mult.nbytes)

    def _key(self, bits_XC: np.ndarray) -> np.ndarray:
        return (bits_XC.astype(np.uint64) * self._mult).sum(axis=-1, dtype=np.uint64)

    def _learn(self, bits_XC: np.ndarray) -> None:
        """Add the distinct vectors of ``bits_XC`` (none of them known yet) to the palette."""
        keys, first = np.unique(self._key(bits_XC), return_index=True)
        m = keys.size
        if self._n + m > self.MAX_CODES:
            raise ObsCodecError(
                f"observations hold more than {self.MAX_CODES} distinct channel vectors; the compact replay layout "
                f"cannot store them losslessly: set dqn.replay_layout=plain")
        if self._n + m > self._palette.shape[0]:
            grown = np.zeros((min(self.MAX_CODES, max(2 * self._palette.shape[0], self._n + m)), self.n_channels),
                             dtype=self.dtype)
            grown[: self._n] = self._palette[: self._n]
            self._palette = grown
        self._palette[self._n : self._n + m] = bits_XC[first].view(self.dtype)
        keys_all = np.concatenate([self._keys, keys])
        codes_all = np.concatenate([self._key_codes, np.arange(self._n, self._n + m, dtype=np.uint16)])
        order = np.argsort(keys_all, kind="stable")
        self._keys, self._key_codes = keys_all[order], codes_all[order]
        if (self._keys[1:] == self._keys[:-1]).any():
            raise ObsCodecError("two distinct channel vectors share a hash key; set dqn.replay_layout=plain")
        self._n += m

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``[..., *cells, C]`` values in the storage dtype -> uint16 codes ``[..., *cells]``, learning new vectors.

        Raises:
            ObsCodecError: the palette is full, or (never seen) a hash collision.
        """
        x = np.ascontiguousarray(x, dtype=self.dtype)
        bits = x.view(self._bits).reshape(-1, self.n_channels)
        key = self._key(bits)
        pos = np.searchsorted(self._keys, key)
        hit = pos < self._keys.size
        hit[hit] = self._keys[pos[hit]] == key[hit]
        if not hit.all():
            self._learn(bits[~hit])
            pos = np.searchsorted(self._keys, key)
        codes = self._key_codes[pos]
        if not np.array_equal(self._palette[: self._n].view(self._bits).take(codes, axis=0), bits):
            raise ObsCodecError("an observation did not survive encoding (hash collision); set dqn.replay_layout=plain")
        return codes.reshape(x.shape[:-1])

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """uint16 codes ``[..., *cells]`` -> values ``[..., *cells, C]`` in the storage dtype."""
        return self._palette.take(codes, axis=0)

    def load_palette(self, palette: np.ndarray) -> None:
        """Replace the palette by ``[n, C]`` vectors (from a checkpoint); code ``i`` means ``palette[i]``."""
        palette = np.asarray(palette)
        if palette.ndim != 2 or palette.shape[1] != self.n_channels or palette.dtype != self.dtype:
            raise ValueError(f"state 'palette' has {palette.shape} {palette.dtype}, expected [n, {self.n_channels}] "
                             f"{self.dtype}")
        n = palette.shape[0]
        if n > self.MAX_CODES:
            raise ValueError(f"state 'palette' has {n} > {self.MAX_CODES} vectors")
        self._palette = np.zeros((max(256, n), self.n_channels), dtype=self.dtype)
        self._palette[:n] = palette
        self._n = 0
        self._keys = np.zeros(0, dtype=np.uint64)
        self._key_codes = np.zeros(0, dtype=np.uint16)
        if n:
            bits = np.ascontiguousarray(palette).view(self._bits)
            keys = self._key(bits)
            order = np.argsort(keys, kind="stable")
            self._keys, self._key_codes = keys[order], order.astype(np.uint16)
            if (self._keys[1:] == self._keys[:-1]).any():
                raise ValueError("state 'palette' holds duplicate channel vectors")
            self._n = n


class CompactPER(MultiAgentPER):
    """:class:`MultiAgentPER` that stores each observation frame once and, where it pays, as cell codes.

    Sampled batches (values and dtypes), priorities and checkpoints' meaning are those of ``MultiAgentPER``
    for the same calls; see the module docstring for the layout.

    Args:
        n_streams: ``S``; ``stream_K`` in :meth:`add` lies in ``[-1, S)`` (-1: not linked to anything).
            Default: ``n_policies``.
        codec: store cells as :class:`CellCodec` codes; default ``CellCodec.applies(obs_shape, obs_dtype)``.
        *args, **kwargs: those of :class:`MultiAgentPER`.
    """

    def __init__(self, n_policies: int, capacity: int, obs_shape: tuple[int, ...], obs_dtype: npt.DTypeLike,
                 *args: Any, n_streams: int | None = None, codec: bool | None = None, **kwargs: Any) -> None:
        self.n_streams = int(n_policies if n_streams is None else n_streams)
        if self.n_streams < 0:
            raise ValueError(f"n_streams must be >= 0, got {n_streams}")
        self._use_codec = CellCodec.applies(tuple(obs_shape), obs_dtype) if codec is None else bool(codec)
        super().__init__(n_policies, capacity, obs_shape, obs_dtype, *args, **kwargs)

    # ------------------------------------------------------------------ storage

    def _init_obs_storage(self) -> None:
        P, N, S = self.n_policies, self.capacity, self.n_streams
        self.codec = CellCodec(self.obs_shape, self.obs_dtype) if self._use_codec else None
        self._frame_shape = self.codec.frame_shape if self.codec is not None else self.obs_shape
        self._frame_dtype = np.dtype(np.uint16) if self.codec is not None else self.obs_dtype
        self._frame_bits = np.dtype(f"u{self._frame_dtype.itemsize}")
        self._frames = np.zeros((P, N, *self._frame_shape), dtype=self._frame_dtype)
        self._frame_rows = self._frames.reshape(P * N, *self._frame_shape)
        self._next_ref = np.full((P, N), -1, dtype=np.int64)  # < P*N: a storage row's frame; else P*N + extra id
        self._next_ref_rows = self._next_ref.reshape(-1)
        self._extra = np.zeros((min(P * N, 64), *self._frame_shape), dtype=self._frame_dtype)
        self._extra_used = 0  # extra ids [0, used) were handed out at least once
        self._free = np.zeros(self._extra.shape[0], dtype=np.int64)  # stack of released ids
        self._n_free = 0
        self._total = np.zeros(P, dtype=np.int64)  # rows ever given per policy; row serial g lives at slot g % N
        self._pending_slot = np.full((P, S), -1, dtype=np.int64)  # newest row of stream s in policy p
        self._pending_serial = np.full((P, S), -1, dtype=np.int64)

    def _obs_arrays(self) -> tuple[np.ndarray, ...]:
        palette = (self.codec._palette, self.codec._keys, self.codec._key_codes) if self.codec is not None else ()
        return (self._frames, self._next_ref, self._extra, self._free, self._total, self._pending_slot,
                self._pending_serial, *palette)

    @property
    def extra_frames(self) -> int:
        """Extra frames in use (rows whose ``next_obs`` is not linked to a stored row)."""
        return self._extra_used - self._n_free

    def nbytes_at_capacity(self, unlinked_share: float, n_codes: int = CellCodec.MAX_CODES) -> int:
        """:attr:`nbytes` this buffer would report once every policy holds ``capacity`` rows.

        Everything but the extra-frame pool and the palette is allocated at construction, so only those two
        need an assumption: ``U = ceil(unlinked_share * P * capacity)`` rows hold their own ``next_obs`` frame
        at the pool's peak, and the palette holds ``n_codes`` channel vectors (default: its maximum, an upper
        bound). The pool's array is the first size of its growth sequence (64, then ``cap * 3 // 2 + 64``,
        capped at ``P * capacity``) that holds ``U`` frames, with one int64 free-list slot per frame; the
        palette array doubles from 256 vectors. Exact for the layout, given ``U`` and ``n_codes``.
        """
        if not 0.0 <= unlinked_share <= 1.0:
            raise ValueError(f"unlinked_share must lie in [0, 1], got {unlinked_share}")
        PN = self.n_policies * self.capacity
        need = int(np.ceil(unlinked_share * PN))
        cap = self._extra.shape[0]
        while cap < need:
            cap = min(PN, cap * 3 // 2 + 64)
        frame_bytes = int(np.prod(self._frame_shape, dtype=np.int64)) * self._frame_dtype.itemsize
        now = self.nbytes - self._extra.nbytes - self._free.nbytes
        full = now + cap * (frame_bytes + np.dtype(np.int64).itemsize)
        if self.codec is not None:
            n = min(int(n_codes), CellCodec.MAX_CODES)
            rows = self.codec._palette.shape[0]
            while rows < n:
                rows = min(CellCodec.MAX_CODES, 2 * rows)
            item = self.codec.n_channels * self.codec.dtype.itemsize
            full += (rows - self.codec._palette.shape[0]) * item + (n - self.codec.n_codes) * (8 + 2)
        return int(full)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=self.obs_dtype)
        return self.codec.encode(x) if self.codec is not None else x

    def _decode(self, f: np.ndarray) -> np.ndarray:
        return self.codec.decode(f) if self.codec is not None else f

    def _same(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """bool ``[M]``: frames ``a[i]`` and ``b[i]`` are bit-identical."""
        if a.shape[0] == 0:
            return np.zeros(0, dtype=bool)
        va = np.ascontiguousarray(a).view(self._frame_bits).reshape(a.shape[0], -1)
        vb = np.ascontiguousarray(b).view(self._frame_bits).reshape(b.shape[0], -1)
        return (va == vb).all(axis=1)

    def _release(self, ids: np.ndarray) -> None:
        m = ids.size
        if m:
            self._free[self._n_free : self._n_free + m] = ids
            self._n_free += m

    def _allocate(self, m: int) -> np.ndarray:
        """``m`` extra ids: released ones first (LIFO), then fresh ones, growing the pool when needed."""
        k = min(m, self._n_free)
        reused = self._free[self._n_free - k : self._n_free].copy()
        self._n_free -= k
        fresh = np.arange(self._extra_used, self._extra_used + m - k, dtype=np.int64)
        self._extra_used += m - k
        if self._extra_used > self._extra.shape[0]:
            cap = min(self.n_policies * self.capacity, max(self._extra_used, self._extra.shape[0] * 3 // 2 + 64))
            grown = np.zeros((cap, *self._frame_shape), dtype=self._frame_dtype)
            grown[: self._extra.shape[0]] = self._extra
            self._extra = grown
            free = np.zeros(cap, dtype=np.int64)
            free[: self._n_free] = self._free[: self._n_free]
            self._free = free
        return np.concatenate([reused, fresh])

    def _store_obs(self, pol_w: np.ndarray, slot_w: np.ndarray, rank_w: np.ndarray, counts_P: np.ndarray,
                   obs: np.ndarray, next_obs: np.ndarray, stream_w: np.ndarray | None) -> None:
        N, S, PN = self.capacity, self.n_streams, self.n_policies * self.capacity
        row = self._row_base[pol_w] + slot_w
        w = row.size
        both = self._encode(np.concatenate([np.asarray(obs), np.asarray(next_obs)]))  # one codec pass
        f_obs, f_next = both[:w], both[w:]
        # overwritten rows release their extra frame (frames they link to belong to newer rows)
        old = self._next_ref_rows[row]
        self._release(old[old >= PN] - PN)
        self._frame_rows[row] = f_obs
        total_after = self._total + counts_P
        ref = np.full(row.size, -1, dtype=np.int64)
        if stream_w is not None and S > 0 and row.size:
            if (stream_w < -1).any() or (stream_w >= S).any():
                raise ValueError(f"stream_K must lie in [-1, {S}), got {np.unique(stream_w)}")
            idx = np.flatnonzero(stream_w >= 0)
            g = pol_w[idx] * S + stream_w[idx]
            o = np.argsort(g, kind="stable")
            order, gs = idx[o], g[o]  # rows grouped by (policy, stream), in input (= time) order
            same = gs[1:] == gs[:-1]
            # within the call: row a's next_obs is row b's obs
            a, b = order[:-1][same], order[1:][same]
            eq = self._same(f_next[a], f_obs[b])
            ref[a[eq]] = row[b[eq]]
            if order.size:
                first = np.concatenate([[True], ~same])
                last = np.concatenate([~same, [True]])
                # the stream's newest row from an earlier call, if still stored: link it to this call's first row
                j, gj = order[first], gs[first]
                pslot, pser = self._pending_slot.reshape(-1)[gj], self._pending_serial.reshape(-1)[gj]
                alive = (pslot >= 0) & (pser >= total_after[pol_w[j]] - N)
                j, prow = j[alive], self._row_base[pol_w[j[alive]]] + pslot[alive]
                pref = self._next_ref_rows[prow]
                eq = self._same(self._extra[pref - PN], f_obs[j])
                self._next_ref_rows[prow[eq]] = row[j[eq]]
                self._release(pref[eq] - PN)
                jl = order[last]
                self._pending_slot.reshape(-1)[gs[last]] = slot_w[jl]
                self._pending_serial.reshape(-1)[gs[last]] = self._total[pol_w[jl]] + rank_w[jl]
        need = np.flatnonzero(ref < 0)
        ids = self._allocate(need.size)
        self._extra[ids] = f_next[need]
        ref[need] = PN + ids
        self._next_ref_rows[row] = ref
        self._total += counts_P

    def _gather_obs(self, row_PB: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        PN = self.n_policies * self.capacity
        f_obs = self._frame_rows[row_PB]
        ref = self._next_ref_rows[row_PB]
        ext = ref >= PN
        both = np.empty((2, *f_obs.shape), dtype=f_obs.dtype)
        both[0] = f_obs
        f_next = both[1]
        f_next[~ext] = self._frame_rows[ref[~ext]]
        f_next[ext] = self._extra[ref[ext] - PN]
        out = self._decode(both)  # one codec pass
        return out[0], out[1]

    # ------------------------------------------------------------------ checkpoints

    def _obs_state(self, m: int) -> dict[str, np.ndarray]:
        palette = self.codec.palette if self.codec is not None else np.zeros((0, 0), dtype=self.obs_dtype)
        return {"frames": self._frames[:, :m], "next_ref": self._next_ref[:, :m],
                "extra": self._extra[: self._extra_used], "free": self._free[: self._n_free], "total": self._total,
                "pending_slot": self._pending_slot, "pending_serial": self._pending_serial, "palette": palette}

    def _check_obs_state(self, d: dict[str, Any], m: int) -> None:
        P, S = self.n_policies, self.n_streams
        missing = [k for k in self._obs_state(0) if k not in d]
        if missing:
            raise ValueError(f"state dict lacks {missing}")
        extra = np.asarray(d["extra"])
        expected = {"frames": ((P, m, *self._frame_shape), self._frame_dtype), "next_ref": ((P, m), np.int64),
                    "extra": ((extra.shape[0], *self._frame_shape), self._frame_dtype),
                    "total": ((P,), np.int64), "pending_slot": ((P, S), np.int64), "pending_serial": ((P, S), np.int64)}
        for k, (shape, dtype) in expected.items():
            a = np.asarray(d[k])
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(f"state '{k}' has {a.shape} {a.dtype}, expected {shape} {np.dtype(dtype)} "
                                 f"(obs stored as {'codes' if self.codec is not None else 'values'})")
        free = np.asarray(d["free"])
        if free.ndim != 1 or free.size > extra.shape[0] or (free.size and (free < 0).any()):
            raise ValueError("state 'free' does not fit state 'extra'")
        if extra.shape[0] > P * self.capacity:
            raise ValueError("state 'extra' holds more frames than this buffer has rows")

    def _load_obs_state(self, d: dict[str, Any], m: int) -> None:
        extra, free = np.asarray(d["extra"]), np.asarray(d["free"], dtype=np.int64)
        self._frames[:, :m] = d["frames"]
        self._frames[:, m:] = 0
        self._next_ref[:, :m] = d["next_ref"]
        self._next_ref[:, m:] = -1
        cap = max(extra.shape[0], min(self.n_policies * self.capacity, 64))
        self._extra = np.zeros((cap, *self._frame_shape), dtype=self._frame_dtype)
        self._extra[: extra.shape[0]] = extra
        self._extra_used = extra.shape[0]
        self._free = np.zeros(cap, dtype=np.int64)
        self._free[: free.size] = free
        self._n_free = free.size
        np.copyto(self._total, d["total"])
        np.copyto(self._pending_slot, d["pending_slot"])
        np.copyto(self._pending_serial, d["pending_serial"])
        if self.codec is not None:
            self.codec.load_palette(d["palette"])

    def plain_state_dict(self) -> dict[str, np.ndarray]:
        """The state dict :class:`MultiAgentPER` would hold after the same calls (``obs``/``next_obs`` decoded)."""
        d = self.state_dict(copy=True)
        m = int(self._size.max())
        row = self._row_base[:, None] + np.arange(m, dtype=np.int64)[None, :]
        obs, next_obs = self._gather_obs(row) if m else (np.zeros((self.n_policies, 0, *self.obs_shape),
                                                                  dtype=self.obs_dtype),) * 2
        # slots never written hold zeros in the plain layout
        stored = (np.arange(m)[None, :] < self._size[:, None]).reshape(self.n_policies, m, *(1,) * len(self.obs_shape))
        for k in self._obs_state(0):
            d.pop(k)
        d["obs"], d["next_obs"] = np.where(stored, obs, 0).astype(self.obs_dtype), \
            np.where(stored, next_obs, 0).astype(self.obs_dtype)
        return d

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a state dict of this layout, or migrate one of the plain ``MultiAgentPER`` layout.

        A plain state (``obs`` and ``next_obs`` arrays) is encoded; a row whose ``next_obs`` is bit-identical
        to the ``obs`` of the row stored after it in its ring is linked to it, every other row keeps its own
        ``next_obs`` frame. Sampling afterwards returns what the plain buffer would.

        Raises:
            ValueError: on missing keys or arrays that do not fit this buffer.
        """
        if "frames" not in d and "obs" in d:
            d = self._migrate_plain(d)
        super().load_state_dict(d)

    def _migrate_plain(self, d: dict[str, Any]) -> dict[str, Any]:
        """A plain layout's state dict -> this layout's (everything else passes through unchanged)."""
        P, N, PN = self.n_policies, self.capacity, self.n_policies * self.capacity
        size = np.asarray(d["size"]).astype(np.int64)
        ptr = np.asarray(d["ptr"]).astype(np.int64)
        if size.shape != (P,) or ptr.shape != (P,):
            raise ValueError(f"state 'size'/'ptr' must be [{P}]")
        m = int(size.max()) if size.size else 0
        MultiAgentPER._check_obs_state(self, d, m)  # obs / next_obs shapes and dtype
        saved = self.codec
        if saved is not None:
            self.codec = CellCodec(self.obs_shape, self.obs_dtype)
        try:
            frames = self._encode(np.asarray(d["obs"]))  # [P, m, ...]
            f_next = self._encode(np.asarray(d["next_obs"]))
            codec = self.codec
        finally:
            self.codec = saved
        slot = np.arange(m, dtype=np.int64)
        succ = (slot[None, :] + 1) % N  # [1, m] the next row in ring (= age) order
        linkable = (slot[None, :] < size[:, None]) & (succ < size[:, None]) & (slot[None, :] != (ptr[:, None] - 1) % N)
        next_ref = np.full((P, m), -1, dtype=np.int64)
        if m:
            p_i, s_i = np.nonzero(linkable)
            eq = self._same(f_next[p_i, s_i], frames[p_i, succ[0, s_i]])
            next_ref[p_i[eq], s_i[eq]] = p_i[eq] * N + succ[0, s_i[eq]]
        unlinked = (next_ref < 0) & (slot[None, :] < size[:, None])
        p_u, s_u = np.nonzero(unlinked)
        next_ref[p_u, s_u] = PN + np.arange(p_u.size)
        out = {k: v for k, v in d.items() if k not in ("obs", "next_obs")}
        out.update({
            "frames": frames, "next_ref": next_ref, "extra": f_next[p_u, s_u], "free": np.zeros(0, dtype=np.int64),
            "total": np.where(size < N, size, N + ptr),
            "pending_slot": np.full((P, self.n_streams), -1, dtype=np.int64),
            "pending_serial": np.full((P, self.n_streams), -1, dtype=np.int64),
            "palette": codec.palette.copy() if codec is not None else np.zeros((0, 0), dtype=self.obs_dtype),
        })
        return out


def load_replay_state(buffer: Any, d: dict[str, Any]) -> None:
    """Load a state dict of either layout into ``buffer`` of either layout (checkpoints survive a layout change).

    Args:
        buffer: a :class:`MultiAgentPER`, :class:`CompactPER` or :class:`~suPER.replay.torch_per.TorchPER` (plain
            layout on a device).
        d: what ``state_dict`` of either class returned.
    """
    if isinstance(buffer, CompactPER) or "frames" not in d:
        buffer.load_state_dict(d)  # CompactPER migrates plain states itself
        return
    coded = np.asarray(d["frames"]).ndim == 1 + len(buffer.obs_shape)  # [P, M, *cells]: codes
    compact = CompactPER(buffer.n_policies, buffer.capacity, buffer.obs_shape, buffer.obs_dtype,
                         n_streams=np.asarray(d["pending_slot"]).shape[1], codec=coded)
    compact.load_state_dict(d)
    buffer.load_state_dict(compact.plain_state_dict())
