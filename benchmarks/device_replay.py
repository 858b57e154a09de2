"""Replay sample + priority update time of a pack's buffers: numpy (MultiAgentPER) vs torch (TorchPER).

A pack of R runs holds R buffers of P = 8 policies (paper pursuit: 8 pursuers, obs 7x7x3 uint8, capacity
``--capacity``, batch 32 per policy). One learn phase of ``train_pack`` samples every buffer and then updates
the priorities of the sampled rows; this times that phase (the R ``sample(32)`` + R ``update_priorities``
calls, on full buffers) for

* ``numpy``: ``MultiAgentPER`` on the host (``run.replay_device=numpy``), TD errors handed over as numpy;
* ``torch-<device>``: ``TorchPER`` on the CPU and, when present, on CUDA (``run.replay_device=device``), draws
  from the same numpy generators, TD errors as tensors on the device; CUDA is synchronized after each phase.
  Two ways: ``per-run``, R buffers sampled one by one (a pack whose runs' replay settings differ), and
  ``one-call``, the R buffers as views of one ``TorchPER`` of R x 8 policies sampled and updated by one call
  each (``train_pack``'s path when the runs' capacity and PER settings agree).

Prints per R the milliseconds per learn phase and::

    numpy/torch sample+update time (R=<r>, P=8, <device>, <way>): <x>x

(> 1: the torch buffer is faster). One invocation, one machine; on a loaded machine the ratios are noisy.

    python benchmarks/device_replay.py                 # R = 1, 8, 39; capacity 120000 (~2 GB host RAM at R = 39)
    python benchmarks/device_replay.py --quick         # smoke: R = 1, 2, capacity 1000; numbers mean nothing
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from suPER.replay import MultiAgentPER
from suPER.replay.torch_per import TorchPER

P, OBS, BATCH = 8, (7, 7, 3), 32


def fill(buf: Any, capacity: int, seed: int) -> Any:
    """Fill every policy's ring with ``capacity`` random rows (chunks of 4096, priorities at the running max)."""
    rng = np.random.default_rng(seed)
    left = capacity * P
    while left > 0:
        k = min(4096, left)
        pol = np.arange(k) % P
        obs = rng.integers(0, 256, (k, *OBS), dtype=np.uint8)
        buf.add(pol, obs, rng.integers(0, 5, k), rng.normal(size=k).astype(np.float32), obs, np.zeros(k, np.float32))
        left -= k
    return buf


def time_phase(buffers: list[Any], device: str | None, iters: int, whole: TorchPER | None = None) -> float:
    """Seconds per learn phase: sample every buffer, then update every buffer's sampled rows (with ``whole``:
    one sample and one update of the buffer the others are views of, the runs' draws concatenated)."""
    td = [np.abs(np.random.default_rng(i).normal(size=(P, BATCH))) for i in range(len(buffers))]
    tds = [torch.as_tensor(t, device=device) for t in td] if device else td
    td_all = torch.cat(tds) if device else None

    def phase() -> None:
        if whole is not None:
            u = np.concatenate([b.rng.random((P, BATCH)) for b in buffers])
            batch = whole.sample(BATCH, uniform_PB=u)
            whole.update_priorities(batch.indices, td_all)
        else:
            batches = [b.sample(BATCH) for b in buffers]
            for b, one, t in zip(buffers, batches, tds):
                b.update_priorities(one.indices, t)
        if device == "cuda":
            torch.cuda.synchronize()

    phase()  # warm-up (CUDA kernels, caches)
    t0 = time.perf_counter()
    for _ in range(iters):
        phase()
    return (time.perf_counter() - t0) / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 8, 39], help="pack sizes R")
    ap.add_argument("--capacity", type=int, default=120_000, help="rows per policy")
    ap.add_argument("--iters", type=int, default=50, help="timed learn phases per setting")
    ap.add_argument("--quick", action="store_true", help="smoke mode: R = 1, 2, capacity 1000, 5 iterations")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.capacity, args.iters = [1, 2], 1000, 5
    torch.set_num_threads(1)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"# P={P} policies per run, obs {OBS} uint8, capacity {args.capacity}, batch {BATCH}; torch {torch.__version__}")
    for R in args.runs:
        host = [fill(MultiAgentPER(P, args.capacity, OBS, np.uint8, rng=np.random.default_rng(r)), args.capacity, r)
                for r in range(R)]
        t_np = time_phase(host, None, args.iters)
        print(f"R={R:3d} numpy       {1e3 * t_np:8.2f} ms per sample+update of {R} buffers")
        for dev in devices:
            whole = TorchPER(R * P, args.capacity, OBS, np.uint8, device=dev)
            bufs = whole.split(R, [np.random.default_rng(r) for r in range(R)])
            for b, h in zip(bufs, host):
                b.load_state_dict(h.state_dict(copy=False))
            for way, w in (("per-run", None), ("one-call", whole)):
                t_t = time_phase(bufs, dev, args.iters, w)
                print(f"R={R:3d} torch-{dev:5s} {way:8s} {1e3 * t_t:8.2f} ms")
                print(f"numpy/torch sample+update time (R={R}, P={P}, {dev}, {way}): {t_np / t_t:.2f}x")
            del bufs, whole
        del host


if __name__ == "__main__":
    main()
