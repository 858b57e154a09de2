"""SUPER relay overhead in the native trainer: env-steps/s with SUPER (b = 0.1) vs without, one run.

Usage: python benchmarks/relay_overhead.py [--env pursuit] [--steps 6000] [--mode quantile] [--threads 1]

Both runs use the same seed, the paper's network and replay ratio, learning from step 200 and no
evaluation, so the only difference is the relay step (TD pass on fresh rows, selection, copies).
Target: overhead <= 10 %.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from suPER import config as C
from suPER.native.dqn import train
from suPER.resolve import resolve
from suPER.runs import RunFolder, package_versions


def run(env: str, steps: int, threads: int, relay: dict[str, object]) -> tuple[float, dict[str, float]]:
    cfg = resolve(env, "ddqn", overrides={
        "run.num_timesteps": steps, "run.eval_interval": steps, "run.eval_episodes": 0, "run.threads": threads,
        "run.progress": False, "dqn.learning_starts": 200, **relay})
    with tempfile.TemporaryDirectory() as d:
        summary = train(cfg, RunFolder(Path(d)))
    return summary.env_steps_per_sec, summary.timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="pursuit", choices=C.ENV_NAMES)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--mode", default="quantile")
    ap.add_argument("--bandwidth", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {args.threads}, "
          f"torch {package_versions(['torch'])['torch']}, {time.strftime('%Y-%m-%d %H:%M')}")
    torch.manual_seed(0)
    plain, t_plain = run(args.env, args.steps, args.threads, {"relay.enabled": False})
    sup, t_sup = run(args.env, args.steps, args.threads, {"relay.enabled": True, "relay.mode": args.mode,
                                                          "relay.bandwidth": args.bandwidth})
    overhead = 1.0 - sup / plain
    print("| run | env-steps/s | relay s | learn s | env s |\n|---|---|---|---|---|")
    print(f"| DDQN | {plain:.1f} | - | {t_plain.get('learn', 0):.1f} | {t_plain.get('env', 0):.1f} |")
    print(f"| DDQN + SUPER {args.mode} b={args.bandwidth} | {sup:.1f} | {t_sup.get('relay', 0):.1f} | "
          f"{t_sup.get('learn', 0):.1f} | {t_sup.get('env', 0):.1f} |")
    print(f"SUPER / plain = {sup / plain:.3f}; overhead {100 * overhead:.1f} % "
          f"(target <= 10 %: {'MET' if overhead <= 0.10 else 'NOT MET'})")
    print(f"command: python benchmarks/relay_overhead.py --env {args.env} --steps {args.steps} "
          f"--mode {args.mode} --bandwidth {args.bandwidth} --threads {args.threads}")


if __name__ == "__main__":
    main()
