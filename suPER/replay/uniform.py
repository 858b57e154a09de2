"""A uniform ring buffer of rows with named fields (MADDPG's joint transitions, QMIX's episodes).

Preallocated numpy arrays with a leading capacity axis ``C``; ``add`` writes ``K`` rows at the ring
position, ``sample`` draws ``B`` row indices uniformly (with replacement) from its own generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class UniformReplay:
    """Ring buffer over rows of named numpy fields with uniform sampling.

    Args:
        capacity: C, rows kept (the oldest are overwritten).
        fields: name -> (row shape, dtype).
        rng: generator for sampling.
    """

    def __init__(self, capacity: int, fields: dict[str, tuple[tuple[int, ...], Any]], rng: np.random.Generator) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.rng = rng
        # np.zeros maps untouched pages lazily: memory grows with the rows actually written
        self.data: dict[str, np.ndarray] = {k: np.zeros((self.capacity, *shape), dtype=dtype)
                                            for k, (shape, dtype) in fields.items()}
        self.size = 0
        self.pos = 0

    def __len__(self) -> int:
        return self.size

    def add(self, **rows: np.ndarray) -> None:
        """Write ``K`` rows (every field given, each ``[K, *shape]``); values are cast to the field's dtype."""
        if rows.keys() != self.data.keys():
            raise KeyError(f"expected fields {sorted(self.data)}, got {sorted(rows)}")
        k = len(next(iter(rows.values())))
        idx_K = (self.pos + np.arange(k)) % self.capacity
        for name, arr in self.data.items():
            arr[idx_K] = rows[name]
        self.pos = (self.pos + k) % self.capacity
        self.size = min(self.capacity, self.size + k)

    def sample(self, batch: int) -> dict[str, np.ndarray]:
        """``batch`` rows drawn uniformly with replacement: name -> ``[B, *shape]`` (copies)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty buffer")
        idx_B = self.rng.integers(0, self.size, batch)
        return {k: v[idx_B] for k, v in self.data.items()}

    def state_dict(self) -> dict[str, Any]:
        """The rows written so far (``data[:size]``: rows fill from 0 until the ring wraps), counters and RNG."""
        return {"size": self.size, "pos": self.pos, "rng": self.rng.bit_generator.state,
                "data": {k: v[: self.size] for k, v in self.data.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of ``state_dict`` (arrays may arrive as numpy arrays or tensors)."""
        self.size, self.pos = int(state["size"]), int(state["pos"])
        self.rng.bit_generator.state = state["rng"]
        for k, v in self.data.items():
            v[: self.size] = np.asarray(state["data"][k])
