"""numpy-or-torch helpers, so one formula serves host arrays and device tensors.

The replay trees (``suPER.replay.per``) and the selection rules (``suPER.core.selection``) are written once
against the operations numpy and torch share (indexing, arithmetic, ``where``, ``minimum``, ...); the few
spellings that differ live here (the ``*_last`` helpers work along the last axis, as the selection rules do).
torch is imported only when a tensor is passed in, so importing this module (and the selection rules) stays
torch-free.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (checked by type, without importing torch)."""
    return type(x).__module__.split(".")[0] == "torch"


def namespace(x: Any) -> Any:
    """The module whose functions apply to ``x``: ``torch`` for tensors, else ``numpy``."""
    if is_tensor(x):
        import torch

        return torch
    return np


def row_taker(a: Any) -> Any:
    """``idx -> a[idx]`` along axis 0 (numpy's ``take``, its fastest gather; torch's indexing), chosen once for a
    loop."""
    if is_tensor(a):
        return a.__getitem__
    take = a.take
    return lambda idx: take(idx, 0)


def to_numpy(x: Any) -> np.ndarray:
    """A host numpy array of ``x`` (a tensor is copied off its device; an array is returned as is)."""
    return x.detach().cpu().numpy() if is_tensor(x) else np.asarray(x)


def like(x: Any, values: Any) -> Any:
    """``values`` (host data) as the kind of ``x``: a tensor on ``x``'s device, or a numpy array."""
    if is_tensor(x):
        import torch

        return torch.as_tensor(values, device=x.device)
    return np.asarray(values)


def zeros(shape: tuple[int, ...], device: Any = None, dtype: str = "float64") -> Any:
    """Zeros of ``dtype`` (a name numpy and torch share): a numpy array (``device`` None) or a tensor on ``device``."""
    if device is None:
        return np.zeros(shape, dtype=dtype)
    import torch

    return torch.zeros(shape, dtype=getattr(torch, dtype), device=device)


def zeros_like(x: Any) -> Any:
    """Zeros of ``x``'s shape, dtype and kind (and device)."""
    if is_tensor(x):
        import torch

        return torch.zeros_like(x)
    return np.zeros_like(x)


def concatenate(parts: Any, axis: int = 0) -> Any:
    """Concatenate numpy arrays, or tensors (host arrays among them are moved to the first tensor's device)."""
    return _join(parts, axis, np.concatenate, "cat")


def stack(parts: Any, axis: int = 0) -> Any:
    """Stack numpy arrays, or tensors (host arrays among them are moved to the first tensor's device)."""
    return _join(parts, axis, np.stack, "stack")


def _join(parts: Any, axis: int, numpy_fn: Any, torch_fn: str) -> Any:
    tensors = [p for p in parts if is_tensor(p)]
    if not tensors:
        return numpy_fn(parts, axis=axis)
    import torch

    dev = tensors[0].device
    return getattr(torch, torch_fn)([torch.as_tensor(p, device=dev) for p in parts], dim=axis)


def uniform(rng: Any, shape: tuple[int, ...], like_x: Any) -> Any:
    """Float64 ``Uniform[0, 1)`` draws of ``shape``, as the kind of ``like_x``.

    ``rng`` is a ``numpy.random.Generator`` (drawn on the host, then moved: the same numbers as a numpy
    caller drawing from the same generator state) or a ``torch.Generator`` (drawn on its device, no host
    round trip; a different stream).
    """
    if isinstance(rng, np.random.Generator):
        return like(like_x, rng.random(shape))
    import torch

    return torch.rand(shape, generator=rng, dtype=torch.float64, device=rng.device)


def quantile_last(x: Any, q: float) -> Any:
    """The ``q`` quantile (linear interpolation) along the last axis: ``[..., n] -> [...]``."""
    return x.quantile(q, dim=-1) if is_tensor(x) else np.quantile(x, q, axis=-1)


def argsort_last(x: Any) -> Any:
    """Stable argsort along the last axis (ties keep their order): int64 indices of ``x``'s shape and kind."""
    return x.argsort(dim=-1, stable=True) if is_tensor(x) else np.argsort(x, axis=-1, kind="stable")


def take_last(x: Any, idx: Any) -> Any:
    """``x`` gathered along the last axis at ``idx`` (numpy's ``take_along_axis``, torch's ``gather``)."""
    return x.gather(-1, idx) if is_tensor(x) else np.take_along_axis(x, idx, axis=-1)


def put_last(x: Any, idx: Any, value: Any) -> Any:
    """``x`` with ``value`` written along the last axis at ``idx``, in place; returns ``x``."""
    if is_tensor(x):
        return x.scatter_(-1, idx, value)
    np.put_along_axis(x, idx, value, axis=-1)
    return x


def nan_rows(x: Any) -> Any:
    """float64 NaN of shape ``x.shape[:-1]``, of ``x``'s kind (and device): a rule's "no threshold" per sender."""
    if is_tensor(x):
        import torch

        return torch.full(x.shape[:-1], float("nan"), dtype=torch.float64, device=x.device)
    return np.full(x.shape[:-1], np.nan)
