"""Backends side by side on pursuit, identical settings, one run: env-steps/s of RLlib's DQN, suPERDQN
on RLlib, and the native trainer with SUPER, with the ratios.

Usage: python benchmarks/backends.py [--steps 1200] [--learning-starts 200] [--threads 1]

All three use the paper's pursuit (8 pursuers, 30 evaders), DDQN, one update of every agent (32
samples each) per 4-env-step fragment, learning from ``--learning-starts``, SUPER quantile b = 0.1 where
it applies, and no evaluation. Throughput = env steps / training wall time (Ray start-up excluded for
the RLlib backends; build time included, as a user pays it).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from suPER import config as C  # noqa: E402
from suPER.resolve import resolve
from suPER.runs import RunFolder, Summary, package_versions  # noqa: E402


def settings(steps: int, learning_starts: int, threads: int, super_: bool) -> C.ExperimentConfig:
    return resolve("pursuit", "ddqn", overrides={
        "run.num_timesteps": steps, "run.eval_interval": steps, "run.eval_episodes": 0, "run.threads": threads,
        "run.progress": False, "run.device": "cpu", "dqn.learning_starts": learning_starts,
        "relay.enabled": super_, "relay.mode": "quantile", "relay.bandwidth": 0.1})


def timed(fn, cfg: C.ExperimentConfig) -> Summary:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as d:
        return fn(cfg, RunFolder(Path(d)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--learning-starts", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import ray

    from suPER.core.rllib_runner import train_rllib
    from suPER.native.dqn import train as train_native

    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        rows = []
        for label, fn, super_ in (("RLlib DQN (suPERDQN, suPER=False)", train_rllib, False),
                                  ("suPERDQN on RLlib, SUPER quantile b=0.1", train_rllib, True),
                                  ("native, SUPER quantile b=0.1", train_native, True)):
            t0 = time.perf_counter()
            s = timed(fn, settings(args.steps, args.learning_starts, args.threads, super_))
            rows.append((label, s.env_steps_per_sec, time.perf_counter() - t0))
    finally:
        ray.shutdown()
    base = rows[0][1]
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, torch threads {args.threads}, "
          f"ray {package_versions(['ray'])['ray']}, torch {package_versions(['torch'])['torch']}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("| backend | env-steps/s | x RLlib DQN | wall s |\n|---|---|---|---|")
    for label, sps, wall in rows:
        print(f"| {label} | {sps:.1f} | {sps / base:.2f} | {wall:.0f} |")
    print(f"command: python benchmarks/backends.py --steps {args.steps} --learning-starts {args.learning_starts} "
          f"--threads {args.threads}")


if __name__ == "__main__":
    main()
