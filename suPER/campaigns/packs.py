"""Packs of a grid: which runs train as one program (``grid run --pack``), and each pack's memory before it starts.

Grouping: runs with equal ``suPER.native.packed.pack_key`` (same network shapes, optimizer settings and update
schedule) can share one ``train_pack``; a group is cut into packs of at most ``pack_size`` runs, in grid
order. Runs the packed trainer does not train (other algorithms) stay single-run "packs" and run unpacked.

Memory of a pack: the sum of its runs' ``suPER.native.pack_memory.run_memory_bytes`` (replay at full
buffers + networks and Adam state), checked against ``--pack-memory-gb`` or the device's memory before Ray
starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suPER import config as C
from suPER.campaigns.grid import GridRun

PACKED_ALGOS = ("dqn", "ddqn")
"""Algorithms the packed trainer trains (``check_packable``); other runs run as single trials."""


@dataclass
class Pack:
    """Runs of a grid trained as one program (one run: trained unpacked), with the pack's memory estimate."""

    runs: list[GridRun]
    bytes: int
    """estimated bytes at full replay (0 for a run the packed trainer does not train)"""
    packed: bool
    """trained by the packed trainer (False: an algorithm it does not train, run as a single trial)"""

    @property
    def name(self) -> str:
        """The first run's folder name, ``+<k>`` for the k other runs of the pack."""
        first = self.runs[0].run_name
        return first if len(self.runs) == 1 else f"{first}+{len(self.runs) - 1}"


def plan_packs(runs_: Sequence[GridRun], out: Path, pack_size: int | None = None,
               **run_fields: Any) -> list[Pack]:
    """Group ``runs_`` (runnable, not finished) by ``pack_key`` into packs of at most ``pack_size`` runs.

    Args:
        runs_: the runs to train (``plan_runs(...).todo``), in grid order.
        out: campaign folder (``run.out`` of each config).
        pack_size: most runs per pack; None = all runs of a group.
        run_fields: the ``run.*`` settings the trials will use (threads, device): they are part of the key.

    Returns:
        Packs in the order of their first run.

    Raises:
        ConfigError: ``pack_size < 1``.
    """
    from suPER.native.pack_memory import env_spec, run_memory_bytes
    from suPER.native.packed import pack_key

    if pack_size is not None and pack_size < 1:
        raise C.ConfigError(f"--pack-size: expected a number >= 1, got {pack_size}")
    groups: dict[Any, list[tuple[int, GridRun, C.ExperimentConfig]]] = {}
    singles: list[tuple[int, Pack]] = []
    for i, run in enumerate(runs_):
        cfg = run.config(out=out, progress=False, **run_fields)
        if cfg.run.algo not in PACKED_ALGOS:
            singles.append((i, Pack([run], 0, packed=False)))
            continue
        groups.setdefault(pack_key(cfg), []).append((i, run, cfg))
    packs: list[tuple[int, Pack]] = list(singles)
    for members in groups.values():
        size = pack_size or len(members)
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            total = sum(run_memory_bytes(cfg, env_spec(cfg)) for _, _, cfg in chunk)
            packs.append((chunk[0][0], Pack([run for _, run, _ in chunk], total, packed=True)))
    return [p for _, p in sorted(packs, key=lambda ip: ip[0])]


def device_memory_bytes(device: str) -> int:
    """Memory of ``device``: CUDA device 0's total memory, else this machine's physical RAM."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_memory(packs: Sequence[Pack], limit_bytes: int, flag: str) -> None:
    """Refuse the first pack whose estimate exceeds ``limit_bytes``.

    Raises:
        ConfigError: one line naming the pack, its estimate, the limit and ``flag``.
    """
    for pack in packs:
        if pack.bytes > limit_bytes:
            raise C.ConfigError(
                f"{flag}: pack {pack.name} ({len(pack.runs)} runs) needs about {pack.bytes / 1e9:.3g} GB at full "
                f"replay, more than the {limit_bytes / 1e9:.3g} GB limit; use a smaller --pack-size or a "
                f"larger {flag}")
