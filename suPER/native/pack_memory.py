"""A packed run's memory before it starts, from the layouts of its replay buffer and networks.

Why here: ``grid run --pack`` refuses a pack that cannot fit its device before anything starts, and the
numbers come from the trainer's own components (``suPER.replay`` layouts, ``BatchedQNet``), which the
campaign layer does not import.

Memory of a pack (bytes, estimated, not measured):

    M_pack = sum_r [ replay_r + 5 * params_r ]

- ``replay_r``: the run's prioritized buffer at full capacity ``C`` for its ``P`` policies (``P = 1`` with
  parameter sharing, else ``N``), from the buffer's own layout (``suPER.replay``): the plain layout holds
  ``obs`` and ``next_obs`` ``[P, C, *obs_shape]`` (obs dtype), actions int64, rewards and dones float32,
  and sum and min trees ``[P, 2 * 2^ceil(log2 C)]`` float64; the compact layout holds one frame per row
  (``uint16`` cell codes ``[*obs_shape[:-1]]`` where ``CellCodec.applies``, else the observation), a
  next-frame reference int64, an extra frame per episode end in the buffer (``C / horizon`` per policy,
  at least the initial 64) and at most ``CellCodec.MAX_CODES`` palette entries. Tested: the plain
  buffer's ``nbytes`` (all allocated up front); the compact one's at allocation plus the palette's growth.
- ``5 * params_r``: online and target network, gradient, and Adam's two moments, all float32.

Not counted: activations of one update (``batch_size x P`` samples, small next to a full replay at
the paper's sizes), the env, Python and CUDA context overheads. So the limit is a floor check: a pack
the estimate refuses cannot fit; one it admits may still need some headroom.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from suPER import config as C

ADAM_COPIES = 5
"""float32 copies of the parameters a training run holds: online, target, gradient, Adam m and v."""


def replay_bytes(n_policies: int, capacity: int, obs_shape: tuple[int, ...], obs_dtype: Any, layout: str = "plain",
                 n_streams: int | None = None, horizon: int = 500, cell_codes: bool = True) -> int:
    """Bytes of a ``MultiAgentPER`` (``layout="plain"``) or ``CompactPER`` (``"compact"``) at full capacity.

    Args:
        n_policies: ``P``, buffers (policies) of the run.
        capacity: ``C``, rows per policy.
        obs_shape, obs_dtype: one observation, as the env spec gives it.
        layout: plain | compact (``run.replay_layout``).
        n_streams: compact layout's streams (agents); default ``P``.
        horizon: episode length (the compact layout keeps one extra frame per episode end).
        cell_codes: the env's ``spec.cell_codes`` (False: the compact layout stores values, not codes).
    """
    from suPER.replay.compact import CellCodec

    P, N = int(n_policies), int(capacity)
    leaf0 = 1 << max(0, (N - 1).bit_length())
    dt = np.dtype(obs_dtype)
    # actions int64, rewards + dones float32; sum + min trees float64; ptr, size, max_priority, tree/pair/row bases
    common = P * N * (8 + 4 + 4) + 2 * P * 2 * leaf0 * 8 + 6 * P * 8
    if layout == "plain":
        return int(common + 2 * P * N * math.prod(obs_shape) * dt.itemsize)
    if layout != "compact":
        raise C.ConfigError(f"run.replay_layout: expected plain or compact, got {layout!r}")
    S = P if n_streams is None else int(n_streams)
    coded = cell_codes and CellCodec.applies(tuple(obs_shape), dt)
    frame = math.prod(obs_shape[:-1]) * 2 if coded else math.prod(obs_shape) * dt.itemsize
    extra = max(min(P * N, 64), P * -(-N // max(1, horizon)))
    palette = CellCodec.MAX_CODES * (obs_shape[-1] * dt.itemsize + 8 + 2) if coded else 0
    return int(common + P * N * (frame + 8) + extra * (frame + 8) + P * 8 + 2 * P * S * 8 + palette)


def run_memory_bytes(cfg: C.ExperimentConfig, spec: Any) -> int:
    """One run's estimated bytes at full replay: ``replay + ADAM_COPIES * params`` (module docstring)."""
    from suPER.models import BatchedQNet

    d = cfg.dqn
    n_pol = 1 if d.parameter_sharing else spec.n_agents
    net = BatchedQNet(n_pol, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling, hiddens=d.hiddens)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    # a device replay (TorchPER) holds the plain layout; a pack sized for a GPU counts "auto" as on the device
    on_device = cfg.run.replay_device == "device" or (cfg.run.replay_device == "auto" and cfg.run.device != "cpu")
    replay = replay_bytes(n_pol, d.buffer_size, spec.obs_shape, spec.obs_dtype,
                          "plain" if on_device else cfg.run.replay_layout,
                          n_streams=spec.n_agents, horizon=cfg.env.horizon, cell_codes=spec.cell_codes)
    return int(replay + ADAM_COPIES * params)


def env_spec(cfg: C.ExperimentConfig, _cache: dict[str, Any] = {}) -> Any:  # noqa: B006 - a per-process cache
    """The env spec of ``cfg.env`` (built once per distinct env config, then closed)."""
    from suPER.opponents import make_env

    key = repr(cfg.env.to_dict() if hasattr(cfg.env, "to_dict") else cfg.env)
    if key not in _cache:
        env = make_env(cfg.env, cfg.run.seed)
        try:
            _cache[key] = env.spec
        finally:
            env.close()
    return _cache[key]
