"""Aggregate training env-steps/s of R packed runs vs R separate processes.

Usage::

    python benchmarks/packed.py                 # R = 1, 2, 4, 8 on CPU (+ CUDA when present), paper pursuit
    python benchmarks/packed.py --quick         # smoke mode (< 2 min): R = 1, 2, tiny budget, numbers mean nothing
    python benchmarks/packed.py --runs 1 2 4 --steps 400
    python benchmarks/packed.py --devices cuda --packed-only --runs 1 8 39 --steps 2000   # the GPU pack alone
    python benchmarks/packed.py --host-overhead --runs 1 8 39     # the pack's per-step work besides arithmetic
    python benchmarks/packed.py --count-ops --runs 1 8 39         # torch ops per pack step (what a GPU launches)

Both sides train the same R configs (paper pursuit: 8 pursuers, 30 evaders, 16x16, the paper's conv dueling
network, batch 32, one update per 4-step fragment; seeds 1..R; learning starts at step 40 so the budget is
spent at the paper's replay ratio; one evaluation episode at the start and one after the budget):

* packed: one process, ``suPER.native.packed.train_pack`` over the R configs, ``--pack-threads`` torch threads
  (default 1, so on CPU the pack uses one core where the separate processes share all of them);
* separate: R processes started together, each ``suPER.native.dqn.train`` with one torch thread.

Aggregate throughput = env steps trained / seconds, timed from the end of the first rollout fragment to the end
of the last (a progress callback), so imports, setup and the two evaluations are outside the window; for the
separate side the env steps of all R processes over the window of the slowest (they share the cores). Prints per
R and device::

    packed/separate aggregate throughput (R=<r>, <device>): <x>x

``--host-overhead`` measures what a pack spends per pack step besides its networks' arithmetic: the same packs
of SUPER quantile runs with replay, relay windows and observations on the device (``run.replay_device=device``)
but a nearly free network (the MLP body, heads of 8), so the time per pack step is the host's Python, small-tensor
ops and (on a GPU) kernel launches. If it grows with R, a GPU pack is bound by it whatever the device's speed::

    host time per pack step (R=<r>, <device>): <x> ms (<y> ms per run): <z> aggregate env-steps/s at most

``--count-ops`` counts the torch (aten) operations the same host-overhead packs dispatch per pack step, in the same
window, by the ``suPER`` module that issued them. On a GPU each is a kernel launch (or a host-side op) of some
microseconds whatever the tensors' sizes, so the count bounds a GPU pack's rate from the host side; it is the
same on every machine, so it can be measured here::

    torch ops per pack step (R=<r>, <device>): <n> (<m> per run)

Besides that, the packed/separate lines give the same ratio of env steps per CPU-second of the processes involved (``process_time``), which a loaded
machine distorts less: there the OS gives R separate processes about R times the CPU share of one pack
process, so the wall-clock ratio measures the scheduler as much as the code. Ratios are measured in one
invocation on the same machine; on a loaded machine they are noisy (say so when you quote them). The target: a pack is not slower than separate processes by more than 10 % on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def make_cfg(seed: int, steps: int, device: str, threads: int, out: str, hiddens: int, host_only: bool = False) -> Any:
    """Paper pursuit, paper network; eval only at the start and the end (1 episode of 100 steps). ``host_only``:
    SUPER quantile b = 0.1 with device replay and the MLP body with heads of 8 (``--host-overhead``)."""
    from suPER.resolve import resolve

    host = {"dqn.model": "mlp", "dqn.hiddens": 8, "run.replay_device": "device", "relay.enabled": True,
            "relay.mode": "quantile", "relay.bandwidth": 0.1} if host_only else {}
    return resolve("pursuit", "ddqn", overrides={
        "dqn.learning_starts": 40, "dqn.buffer_size": 5000, "dqn.hiddens": hiddens, "env.horizon": 100,
        "run.eval_episodes": 1, "run.checkpoint_replay": False, **host,
    }, named={"run.seed": seed, "run.num_timesteps": steps, "run.eval_interval": 10 * steps, "run.device": device,
              "run.threads": threads, "run.out": out})


class OpCounter:
    """Counts the aten ops dispatched while active, by the ``suPER`` module (file) that issued each one."""

    def __init__(self) -> None:
        import collections

        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
                if counter.on:
                    counter.total += 1
                    counter.by_module[counter.caller()] += 1
                return func(*args, **(kwargs or {}))

        self.on = False
        """counting: ``Clock`` turns it on at the end of the first fragment and off at the end of the last, so the
        totals are the timed window's (setup and evaluations are not counted)"""
        self.total = 0
        self.by_module: collections.Counter[str] = collections.Counter()
        self.mode = _Mode()

    @staticmethod
    def caller() -> str:
        """The innermost ``suPER/`` source file on the Python stack (``?`` if none)."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if f"{os.sep}suPER{os.sep}" in name:
                return name.rsplit(f"{os.sep}suPER{os.sep}", 1)[1]
            frame = frame.f_back
        return "?"


class Clock:
    """Progress callback: the time and env steps of the first fragment and of the last one.

    With ``report_every`` > 0 it also prints the rate so far every that many seconds (``runs`` x env steps per
    run since the first fragment / seconds), so a run stopped by a timeout (benchmarks/device_check.sh) still
    leaves a number.
    """

    def __init__(self, report_every: float = 0.0, runs: int = 1, ops: OpCounter | None = None,
                 last_step: int = 0) -> None:
        self.first: tuple[float, float, int] | None = None
        self.last: tuple[float, float, int] = (0.0, 0.0, 0)
        self.report_every, self.runs, self._reported_at = report_every, runs, 0.0
        self.ops, self.last_step = ops, last_step

    def __call__(self, env_steps: int, stats: dict[str, float]) -> None:
        now = (time.perf_counter(), time.process_time(), env_steps)
        if self.ops is not None:
            self.ops.on = env_steps < self.last_step  # the window: from the first fragment to the last
        if self.first is None:
            self.first, self._reported_at = now, now[0]
        self.last = now
        if self.report_every > 0 and now[0] - self._reported_at >= self.report_every:
            self._reported_at = now[0]
            wall, _, steps = self.rate()
            print(f"  progress: {steps} env steps per run in {wall:.1f} s: {self.runs * steps / wall:,.0f} aggregate "
                  f"env-steps/s so far", flush=True)

    def rate(self) -> tuple[float, float, int]:
        """(wall seconds, CPU seconds of this process, env steps) from the end of the first fragment to the
        end of the last."""
        assert self.first is not None
        return self.last[0] - self.first[0], self.last[1] - self.first[1], self.last[2] - self.first[2]


def worker(seed: int, steps: int, device: str, hiddens: int) -> None:
    """One separate run (child process): prints {"train_s": ...} as JSON."""
    from suPER.native import dqn
    from suPER.runs import RunFolder

    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_cfg(seed, steps, device, 1, tmp, hiddens)
        clock = Clock()
        dqn.train(cfg, RunFolder(Path(tmp) / cfg.run_name), progress=clock)
    seconds, cpu_s, env_steps = clock.rate()
    print(json.dumps({"train_s": seconds, "cpu_s": cpu_s, "env_steps": env_steps}))


def separate(r: int, steps: int, device: str, hiddens: int) -> tuple[float, float]:
    """(aggregate env-steps/s, env steps per CPU-second) of r concurrent processes."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(seed), "--steps", str(steps), "--device",
                               device, "--hiddens", str(hiddens)], stdout=subprocess.PIPE, text=True, env=env)
             for seed in range(1, r + 1)]
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"benchmarks/packed.py: a separate run failed (exit {p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(x["env_steps"] for x in results)
    return total / max(x["train_s"] for x in results), total / sum(x["cpu_s"] for x in results)


def packed(r: int, steps: int, device: str, hiddens: int, threads: int = 1,
           report_every: float = 0.0, host_only: bool = False) -> tuple[float, float]:
    """(aggregate env-steps/s, env steps per CPU-second) of one pack of r runs (``host_only``: see make_cfg)."""
    from suPER.native.packed import train_pack
    from suPER.runs import RunFolder

    with tempfile.TemporaryDirectory() as tmp:
        cfgs = [make_cfg(seed, steps, device, threads, tmp, hiddens, host_only) for seed in range(1, r + 1)]
        clock = Clock(report_every, r)
        out = train_pack(cfgs, [RunFolder(Path(tmp) / c.run_name) for c in cfgs], progress=clock)
    for s in out:
        if isinstance(s, BaseException):
            raise SystemExit(f"benchmarks/packed.py: a packed run failed ({s})")
    seconds, cpu_s, env_steps = clock.rate()
    return r * env_steps / seconds, r * env_steps / cpu_s


def count_ops(r: int, steps: int, device: str) -> tuple[float, dict[str, float]]:
    """Torch ops per pack step of a host-overhead pack of r runs, total and by ``suPER`` module, between the end of
    its first fragment and the end of its last (the window ``packed`` times)."""
    from suPER.native.packed import train_pack
    from suPER.runs import RunFolder

    counter = OpCounter()
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = [make_cfg(seed, steps, device, 1, tmp, 8, host_only=True) for seed in range(1, r + 1)]
        clock = Clock(ops=counter, last_step=steps)
        with counter.mode:
            out = train_pack(cfgs, [RunFolder(Path(tmp) / c.run_name) for c in cfgs], progress=clock)
    if any(isinstance(s, BaseException) for s in out):
        raise SystemExit(f"benchmarks/packed.py: a packed run failed ({out})")
    pack_steps = clock.last[2] - clock.first[2]
    return counter.total / pack_steps, {k: v / pack_steps for k, v in counter.by_module.most_common()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4, 8], help="pack sizes R")
    ap.add_argument("--steps", type=int, default=400, help="training env steps per run")
    ap.add_argument("--hiddens", type=int, default=256, help="head width (paper: 256)")
    ap.add_argument("--quick", action="store_true", help="smoke mode: R = 1, 2, 80 steps, hiddens 32")
    ap.add_argument("--pack-threads", type=int, default=1, help="torch threads of the pack (default 1: on a busy "
                    "2-core machine 2 threads measured 7x slower)")
    ap.add_argument("--progress-every", type=float, default=0.0, help="with --packed-only: print the pack's rate so "
                    "far every this many seconds (default 0: never)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    ap.add_argument("--devices", default=None, help="comma-separated devices to measure (default: cpu, and cuda when "
                    "present)")
    ap.add_argument("--host-overhead", action="store_true", help="time per pack step with a nearly free network "
                    "and device replay (what is not arithmetic), packs only")
    ap.add_argument("--count-ops", action="store_true", help="torch ops per pack step of the --host-overhead packs, "
                    "by suPER module (what a GPU pack launches per step), packs only")
    ap.add_argument("--packed-only", action="store_true", help="measure the pack alone, no separate processes (on a "
                    "GPU, R separate processes would each hold a CUDA context: not the comparison of interest)")
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, args.steps, args.device, args.hiddens)
        return
    if args.quick:
        args.runs, args.steps, args.hiddens = [1, 2], 80, 32
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if args.devices is not None:
        devices = [d for d in args.devices.split(",") if d]
        if "cuda" in devices and not torch.cuda.is_available():
            print("benchmarks/packed.py: --devices cuda: no CUDA device here", file=sys.stderr)
            raise SystemExit(2)
    gpu = f", {torch.cuda.get_device_name()}" if any(d.startswith("cuda") for d in devices) else ""
    host_only = args.host_overhead or args.count_ops
    net = "MLP body, heads 8, SUPER quantile, device replay" if host_only else f"hiddens {args.hiddens}"
    print(f"# packed vs separate: {platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}, torch "
          f"{torch.__version__}, {args.steps} env steps per run, {net}")
    results = []
    for device in devices:
        for r in args.runs:
            if args.count_ops:
                n, by = count_ops(r, args.steps, device)
                results.append({"R": r, "device": device, "ops_per_pack_step": n, "ops_by_module": by})
                top = ", ".join(f"{k} {v:.0f}" for k, v in list(by.items())[:8])
                print(f"torch ops per pack step (R={r}, {device}): {n:.0f} ({n / r:.1f} per run)   [{top}]", flush=True)
                continue
            if args.host_overhead:
                pk, _ = packed(r, args.steps, device, 8, args.pack_threads, host_only=True)
                ms = 1000 * r / pk  # seconds per pack step = R / aggregate rate
                results.append({"R": r, "device": device, "host_ms_per_pack_step": ms, "packed_sps": pk})
                print(f"host time per pack step (R={r}, {device}): {ms:.1f} ms ({ms / r:.2f} ms per run): {pk:,.0f} "
                      f"aggregate env-steps/s at most", flush=True)
                continue
            if args.packed_only:
                if device.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                pk, pk_cpu = packed(r, args.steps, device, args.hiddens, args.pack_threads, args.progress_every)
                wall = time.perf_counter() - t0
                peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
                results.append({"R": r, "device": device, "packed_sps": pk, "packed_steps_per_cpu_s": pk_cpu,
                                "call_s": wall, "peak_gib": peak})
                mem = "" if peak is None else f"; peak device memory {peak:.2f} GiB"
                print(f"packed aggregate throughput (R={r}, {device}): {pk:,.0f} env-steps/s   (per CPU-second "
                      f"{pk_cpu:,.0f}; {r} x {args.steps} env steps, {wall:.1f} s with setup and evaluations{mem})",
                      flush=True)
                continue
            sep, sep_cpu = separate(r, args.steps, device, args.hiddens)
            pk, pk_cpu = packed(r, args.steps, device, args.hiddens, args.pack_threads)
            results.append({"R": r, "device": device, "packed_sps": pk, "separate_sps": sep, "ratio": pk / sep,
                            "packed_steps_per_cpu_s": pk_cpu, "separate_steps_per_cpu_s": sep_cpu,
                            "cpu_ratio": pk_cpu / sep_cpu})
            print(f"R={r} {device}: packed {pk:.1f} env-steps/s, separate {sep:.1f} env-steps/s (aggregate); "
                  f"per CPU-second: packed {pk_cpu:.1f}, separate {sep_cpu:.1f}")
            print(f"packed/separate aggregate throughput (R={r}, {device}): {pk / sep:.2f}x", flush=True)
            print(f"packed/separate env steps per CPU-second (R={r}, {device}): {pk_cpu / sep_cpu:.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "hiddens": args.hiddens, "results": results}, indent=1))


if __name__ == "__main__":
    main()
