"""Packs of a grid: which runs train as one program (``grid run --pack``), and each pack's memory before it starts.

Grouping: runs with equal ``suPER.native.packed.pack_key`` (same network shapes, optimizer settings and update
schedule) can share one ``train_pack``; a group is cut, in grid order, into packs of at most ``pack_size``
runs, or (no ``pack_size``) into the fewest packs that each fit a memory limit (a run joins the current pack
while the pack's estimate stays within the limit, else it starts the next one), evened out in size when the
even cut fits too (pack trials run side by side, so 5 + 4 finishes before 8 + 1). Runs the packed trainer does not train
(other algorithms) stay single-run "packs" and run unpacked.

Memory of a pack: the sum of its runs' ``suPER.native.pack_memory.run_memory_bytes`` (replay at full
buffers + networks and Adam state). The limit (``memory_limit``) is ``--pack-memory-gb`` as given, else

    limit = HEADROOM * available * share

with ``available`` the device's free memory now (``available_memory_bytes``: CUDA ``mem_get_info``, CPU
``MemAvailable``) and ``share`` the part of it one trial gets (``gpus_per_trial`` of a GPU; on CPU
``cpus_per_trial / cores``, since that many trials run side by side). A pack over the limit (a single
run that cannot fit) is refused with one line before any training.
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


def plan_packs(runs_: Sequence[GridRun], out: Path, pack_size: int | None = None, limit_bytes: int | None = None,
               **run_fields: Any) -> list[Pack]:
    """Group ``runs_`` (runnable, not finished) by ``pack_key`` into packs (module docstring).

    Args:
        runs_: the runs to train (``plan_runs(...).todo``), in grid order.
        out: campaign folder (``run.out`` of each config).
        pack_size: most runs per pack; None = sized by ``limit_bytes``.
        limit_bytes: with no ``pack_size``, the most estimated bytes per pack (a run larger than it is a
            pack of one, which ``check_memory`` refuses); None too = all runs of a group.
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
        sized = [(i, run, run_memory_bytes(cfg, env_spec(cfg))) for i, run, cfg in members]
        chunks: list[list[tuple[int, GridRun, int]]] = [[]]
        for member in sized:
            chunk = chunks[-1]
            full = (len(chunk) >= pack_size if pack_size is not None else
                    limit_bytes is not None and sum(b for _, _, b in chunk) + member[2] > limit_bytes)
            if chunk and full:
                chunks.append([])
            chunks[-1].append(member)
        if pack_size is None and len(chunks) > 1:  # as many packs, evened out (9 runs for 8 a pack: 5 + 4, not 8 + 1)
            even = _even_split(sized, len(chunks))
            if all(sum(b for _, _, b in chunk) <= limit_bytes for chunk in even):  # type: ignore[operator]
                chunks = even
        for chunk in chunks:
            packs.append((chunk[0][0], Pack([run for _, run, _ in chunk], sum(b for _, _, b in chunk), packed=True)))
    return [p for _, p in sorted(packs, key=lambda ip: ip[0])]


def _even_split(items: list[Any], k: int) -> list[list[Any]]:
    """``items`` cut in order into ``k`` runs of sizes differing by at most one (the first ones larger)."""
    base, extra = divmod(len(items), k)
    out, start = [], 0
    for i in range(k):
        size = base + (1 if i < extra else 0)
        out.append(items[start:start + size])
        start += size
    return out


HEADROOM = 0.8
"""Part of the free memory a pack's estimate may fill: the estimate leaves out activations, envs, Python and
the CUDA context (``suPER.native.pack_memory``), and other processes allocate meanwhile."""


def available_memory_bytes(device: str) -> int:
    """Memory free on ``device`` now: CUDA, the least free of the visible devices (``torch.cuda.mem_get_info``;
    a trial may get any of them); CPU, ``psutil``'s available memory if installed, else ``MemAvailable`` of
    /proc/meminfo, else the physical RAM."""
    if device.startswith("cuda"):
        import torch

        return int(min(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())))
    try:
        import psutil  # type: ignore[import-untyped]

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def trial_share(device: str, cpus_per_trial: float, gpus_per_trial: float, cores: int | None = None) -> float:
    """Part of the device's memory one trial gets: its GPU fraction, or on CPU ``cpus_per_trial / cores``."""
    if device.startswith("cuda"):
        return min(1.0, gpus_per_trial)
    return min(1.0, cpus_per_trial / max(1, cores or os.cpu_count() or 1))


def memory_limit(device: str, cpus_per_trial: float, gpus_per_trial: float,
                 available: int | None = None) -> int:
    """``HEADROOM * available * trial_share``: the bytes one pack may take (module docstring).

    Args:
        device: ``cuda`` or ``cpu`` (the trials' ``run.device``).
        cpus_per_trial, gpus_per_trial: what each trial reserves.
        available: free bytes measured elsewhere (a cluster worker); None = measured here.
    """
    free = available_memory_bytes(device) if available is None else available
    return int(HEADROOM * free * trial_share(device, cpus_per_trial, gpus_per_trial))


def worker_memory_limit(device: str, cpus_per_trial: float, gpus_per_trial: float) -> int:
    """``memory_limit`` measured on a cluster worker: a Ray task holding one trial's resources (Ray connected)."""
    import ray

    @ray.remote(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial)
    def probe() -> tuple[int, int]:
        return available_memory_bytes(device), os.cpu_count() or 1

    free, cores = ray.get(probe.remote())
    return int(HEADROOM * free * trial_share(device, cpus_per_trial, gpus_per_trial, cores))


def check_memory(packs: Sequence[Pack], limit_bytes: int, flag: str) -> None:
    """Refuse the first pack whose estimate exceeds ``limit_bytes``.

    Raises:
        ConfigError: one line naming the pack, its estimate, the limit and ``flag``.
    """
    for pack in packs:
        if pack.bytes > limit_bytes:
            fix = (f"a single run cannot fit: use a larger {flag} or a smaller dqn.buffer_size" if len(pack.runs) == 1
                   else f"use a smaller --pack-size or a larger {flag}")
            raise C.ConfigError(
                f"{flag}: pack {pack.name} ({len(pack.runs)} runs) needs about {pack.bytes / 1e9:.3g} GB at full "
                f"replay, more than the {limit_bytes / 1e9:.3g} GB limit; {fix}")
