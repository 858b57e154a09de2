"""Env-steps/s of single-game and batched envs, measured in one run, with the ratios between them.

Usage::

    python benchmarks/envs.py                 # full run (~2-3 min on 2 busy cores)
    python benchmarks/envs.py --quick         # smoke mode (< 1 min): numbers mean little
    python benchmarks/envs.py --threads 1 --sizes 1,16,256,4096 --seconds 5 --json out.json
    python benchmarks/envs.py --only pursuit --devices cuda   # the CUDA rows (and the CPU single-game reference)

An env step is one step of one game (so E games stepped once are E env steps). Actions are uniform
random, drawn outside the timed env call's cost as far as possible (one tensor per batch step).
Finished games are reset inside the batch with fresh seeds, as a trainer would. Each env has one
function returning rows (``BENCHES`` below): pursuit's single game vs ``VecPursuitEnv`` at each E (CPU, and
CUDA when present); battle and adversarial pursuit's single game vs E games in lockstep (MAgent2 has no
batched engine: the batch shares one opponent forward per step); the batched-evaluation speed-ups; replay
bytes per run at full buffers, plain vs compact layout (computed from the buffers' layout, not filled).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PURSUIT = {"n_pursuers": 8, "n_evaders": 30, "x_size": 16, "y_size": 16, "max_cycles": 500, "shared_reward": False}
"""the paper's pursuit setting (experiments/envs/pursuit.yaml)"""


def _time_single(env: Any, seconds: float, seed: int = 0) -> tuple[int, float, float]:
    """Step one ``MultiAgentEnv`` with random actions for about ``seconds``; return (env steps, wall s, CPU s)."""
    rng = np.random.default_rng(seed)
    n, a = env.spec.n_agents, env.spec.n_actions
    env.reset(seed)
    steps, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        res = env.step(rng.integers(0, a, n))
        steps += 1
        if res.episode_over:
            env.reset()
        if steps % 50 == 0 and time.perf_counter() - t0 >= seconds:
            return steps, time.perf_counter() - t0, time.process_time() - c0


def _time_batched(env: Any, seconds: float, seed: int = 0) -> tuple[int, float, float]:
    """Step a ``BatchedMultiAgentEnv`` (torch) for about ``seconds``; return (env steps, wall s, CPU s)."""
    import torch

    e, n, a = env.num_games, env.spec.n_agents, env.spec.n_actions
    dev = env.device
    g = torch.Generator(device=dev).manual_seed(seed)
    next_seed = e
    env.reset(list(range(e)))
    for _ in range(3):  # warm-up: allocator, first-call dispatch
        env.step(torch.randint(0, a, (e, n), generator=g, device=dev))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    steps, calls, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
    while True:
        res = env.step(torch.randint(0, a, (e, n), generator=g, device=dev))
        steps, calls = steps + e, calls + 1
        over = torch.nonzero(res.episode_over_E).squeeze(1)
        if over.numel():
            env.reset(list(range(next_seed, next_seed + over.numel())), over)
            next_seed += over.numel()
        if calls % 5 == 0:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                return steps, time.perf_counter() - t0, time.process_time() - c0


def bench_pursuit(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pursuit: ``PursuitEnv`` (one game, numpy) vs ``VecPursuitEnv`` at each E, on CPU and CUDA if present."""
    from suPER.envs.pursuit import PursuitEnv
    from suPER.envs.vec_pursuit import VecPursuitEnv

    rows = []
    steps, wall, cpu = _time_single(PursuitEnv(PURSUIT), args.seconds)
    rows.append({"env": "pursuit", "impl": "PursuitEnv (single game)", "device": "cpu", "E": 1,
                 "env_steps": steps, "seconds": wall, "cpu_seconds": cpu, "env_steps_per_sec": steps / wall,
                 "env_steps_per_cpu_sec": steps / cpu})
    for dev in args.devices:
        for e in args.sizes:
            env = VecPursuitEnv(PURSUIT, e, device=dev)
            steps, wall, cpu = _time_batched(env, args.seconds)
            rows.append({"env": "pursuit", "impl": "VecPursuitEnv", "device": dev, "E": e,
                         "env_steps": steps, "seconds": wall, "cpu_seconds": cpu, "env_steps_per_sec": steps / wall,
                         "env_steps_per_cpu_sec": steps / cpu})
            env.close()
    return rows


def _time_lockstep(batch: Any, seconds: float, seed: int = 0) -> tuple[int, float, float]:
    """Step a ``LockstepBatch`` of MAgent games with random actions (dead agents' actions are ignored by the
    env); finished games are reset with fresh seeds. Returns (env steps, wall s, CPU s)."""
    rng = np.random.default_rng(seed)
    e, n, a = batch.num_games, batch.spec.n_agents, batch.spec.n_actions
    batch.reset(list(range(e)))
    next_seed = e
    steps, calls, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
    while True:
        res = batch.step(rng.integers(0, a, (e, n)))
        steps, calls = steps + e, calls + 1
        over = np.flatnonzero(res.episode_over_E)
        if over.size:
            batch.reset(list(range(next_seed, next_seed + over.size)), over)
            next_seed += over.size
        if calls % 5 == 0 and time.perf_counter() - t0 >= seconds:
            return steps, time.perf_counter() - t0, time.process_time() - c0


def bench_magent(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """A MAgent env (paper settings, the shipped network opponent): one game vs E games in lockstep
    (``suPER.opponents.make_batch``: one opponent forward for all E games per step), E = ``args.magent_sizes``."""
    from suPER.opponents import make_batch, make_env
    from suPER.resolve import resolve

    cfg = resolve(name).env
    rows = []
    env = make_env(cfg, seed=0)
    steps, wall, cpu = _time_single(env, args.seconds)
    env.close()
    rows.append({"env": name, "impl": "MAgentEnv (single game)", "device": "cpu", "E": 1, "env_steps": steps,
                 "seconds": wall, "cpu_seconds": cpu, "env_steps_per_sec": steps / wall,
                 "env_steps_per_cpu_sec": steps / cpu})
    for e in args.magent_sizes:
        batch = make_batch(cfg, e, seed=0)
        steps, wall, cpu = _time_lockstep(batch, args.seconds)
        batch.close()
        rows.append({"env": name, "impl": "LockstepBatch", "device": "cpu", "E": e, "env_steps": steps,
                     "seconds": wall, "cpu_seconds": cpu, "env_steps_per_sec": steps / wall,
                     "env_steps_per_cpu_sec": steps / cpu})
    return rows


def bench_evaluation(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Greedy evaluation of K seeded episodes, sequential vs batched (``benchmarks/eval_batch.py``'s measure):
    prints ``eval speedup batched/sequential (<env>): <x>x`` per env; rows give env-steps/s of both ways."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from eval_batch import eval_speedup

    rows = []
    for name, dev in [(n, d) for d in args.devices for n in args.eval_envs if d == "cpu" or n == "pursuit"]:
        r = eval_speedup(name, args.eval_episodes, args.eval_horizon, device=dev)
        for how in ("sequential", "batched"):
            rows.append({"env": f"evaluation: {name}", "impl": f"{how} ({args.eval_episodes} episodes)",
                         "device": dev if how == "batched" else "cpu", "E": args.eval_episodes if how == "batched" else 1,
                         "env_steps": int(r[f"{how}_steps"]), "seconds": r[f"{how}_s"],
                         "cpu_seconds": r[f"{how}_cpu_s"], "env_steps_per_sec": r[f"{how}_steps"] / r[f"{how}_s"],
                         "env_steps_per_cpu_sec": r[f"{how}_steps"] / r[f"{how}_cpu_s"]})
    return rows


REPLAY_UNLINKED = {"pursuit": 0.37, "battle": 0.30, "adversarial_pursuit": 0.37}
"""assumed share of rows that keep their own next_obs frame at full buffers: ``extra_frames / rows`` measured by
``benchmarks/replay_memory.py`` (bandwidth 0.1, random play; benchmarks/README.md, 'unlinked rows')"""


def bench_replay(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Replay bytes per run at full buffers, plain ``MultiAgentPER`` vs ``CompactPER``, without filling them.

    Both buffers are built at the env's real ``dqn.buffer_size``, obs shape and dtype (``np.zeros`` pages are
    only backed once written, so this costs a few MB). Plain: ``nbytes`` (everything is allocated up front).
    Compact: ``nbytes_at_capacity(REPLAY_UNLINKED[env])``, its pool of unlinked ``next_obs`` frames sized by
    the measured share and the MAgent palette at its maximum of 65,536 codes (an upper bound: <= 1.3 MB).
    Prints ``replay bytes per run at full buffers (<env>): plain <x> GB, compact <y> GB, compact/plain <r>``.
    """
    from suPER.opponents import make_env
    from suPER.replay import CompactPER, MultiAgentPER
    from suPER.resolve import resolve

    rows = []
    for name in args.replay_envs:
        cfg = resolve(name, overrides={"env.opponent": "random"} if name != "pursuit" else {})  # spec only
        env = make_env(cfg.env, seed=0)
        spec = env.spec
        env.close()
        cap, P = cfg.dqn.buffer_size, spec.n_agents
        plain = MultiAgentPER(P, cap, spec.obs_shape, spec.obs_dtype).nbytes
        compact = CompactPER(P, cap, spec.obs_shape, spec.obs_dtype).nbytes_at_capacity(REPLAY_UNLINKED[name])
        print(f"replay bytes per run at full buffers ({name}): plain {plain / 1e9:.3f} GB, compact "
              f"{compact / 1e9:.3f} GB, compact/plain {compact / plain:.3f}", flush=True)
        for layout, nbytes in (("plain MultiAgentPER", plain), ("compact CompactPER", compact)):
            rows.append({"env": f"replay: {name}", "impl": layout, "device": "cpu", "E": 1, "capacity": cap,
                         "policies": P, "replay_bytes": int(nbytes), "ratio_vs_plain": nbytes / plain})
    return rows


BENCHES: dict[str, Callable[[argparse.Namespace], list[dict[str, Any]]]] = {
    "pursuit": bench_pursuit,
    "battle": lambda args: bench_magent("battle", args),
    "adversarial_pursuit": lambda args: bench_magent("adversarial_pursuit", args),
    "evaluation": bench_evaluation,
    "replay": bench_replay,
}
"""env (or part) -> benchmark function returning table rows"""


def report(rows: list[dict[str, Any]]) -> str:
    """Markdown table; ratio = env-steps per CPU second over the same env's single-game row.

    Env-steps per CPU second (``time.process_time``, one torch thread) is the rate on one core whatever
    else the machine runs; wall env-steps/s equals it on an idle core and is lower on a shared one.
    """
    single = {r["env"]: r["env_steps_per_cpu_sec"] for r in rows if r["impl"].endswith("(single game)")}
    lines = ["| env | implementation | device | E | env-steps/s (wall) | env-steps per CPU-s | x single game |",
             "|---|---|---|---|---|---|---|"]
    replay = [r for r in rows if "replay_bytes" in r]
    for r in rows:
        if "replay_bytes" in r:
            continue
        ratio = r["env_steps_per_cpu_sec"] / single[r["env"]] if r["env"] in single else float("nan")
        r["ratio_vs_single"] = ratio
        lines.append(f"| {r['env']} | {r['impl']} | {r['device']} | {r['E']} | {r['env_steps_per_sec']:,.0f} | "
                     f"{r['env_steps_per_cpu_sec']:,.0f} | {ratio:.1f} |")
    if len(lines) == 2:
        lines = []
    if replay:
        lines += [""] * bool(lines) + ["| replay at full buffers | layout | policies | capacity | GB per run | x plain |",
                                       "|---|---|---|---|---|---|"]
        lines += [f"| {r['env'].removeprefix('replay: ')} | {r['impl']} | {r['policies']} | {r['capacity']:,} | "
                  f"{r['replay_bytes'] / 1e9:.3f} | {r['ratio_vs_plain']:.3f} |" for r in replay]
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the selected benchmarks, print the table (and write JSON); return the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke mode: 0.5 s per measurement, E up to 256")
    p.add_argument("--seconds", type=float, default=None, help="seconds per measurement (default 5; quick 0.5)")
    p.add_argument("--sizes", type=_sizes, default=None, help="batch sizes E (default 1,16,256,4096; quick 1,16,256)")
    p.add_argument("--magent-sizes", type=_sizes, default=None, help="MAgent batch sizes E (default 1,16,64; quick 1,4)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: 'one core')")
    p.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHES)}")
    p.add_argument("--cpu-only", action="store_true", help="skip CUDA even when present")
    p.add_argument("--devices", default=None, help="comma-separated devices of the batched pursuit rows and of the "
                   "batched side of pursuit's evaluation (default: cpu, and cuda when present; e.g. cuda for the "
                   "GPU rows alone: the single-game CPU row stays as the reference)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    p.add_argument("--eval-envs", default=None,
                   help="envs of the evaluation benchmark (default pursuit,battle,adversarial_pursuit; quick pursuit)")
    p.add_argument("--eval-episodes", type=int, default=None, help="K episodes per evaluation (default 20; quick 4)")
    p.add_argument("--eval-horizon", type=int, default=None, help="their horizon (default 100; quick 15)")
    p.add_argument("--replay-envs", default="pursuit,battle,adversarial_pursuit",
                   help=f"envs of the replay-bytes rows (default all: {', '.join(REPLAY_UNLINKED)})")
    args = p.parse_args(argv)
    args.replay_envs = [s for s in args.replay_envs.split(",") if s]
    if set(args.replay_envs) - set(REPLAY_UNLINKED):
        p.error(f"--replay-envs: unknown {sorted(set(args.replay_envs) - set(REPLAY_UNLINKED))}; "
                f"expected some of {', '.join(REPLAY_UNLINKED)}")
    args.eval_envs = (args.eval_envs or ("pursuit" if args.quick else "pursuit,battle,adversarial_pursuit")).split(",")
    args.eval_episodes = args.eval_episodes or (4 if args.quick else 20)
    args.eval_horizon = args.eval_horizon or (15 if args.quick else 100)
    args.seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 5.0)
    args.sizes = args.sizes or ([1, 16, 256] if args.quick else [1, 16, 256, 4096])
    args.magent_sizes = args.magent_sizes or ([1, 4] if args.quick else [1, 16, 64])
    import torch

    torch.set_num_threads(args.threads)
    if args.devices is None:
        args.devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and not args.cpu_only else [])
    else:
        args.devices = [d for d in args.devices.split(",") if d]
        if "cuda" in args.devices and not torch.cuda.is_available():
            p.error("--devices cuda: no CUDA device here")
    names = [s for s in args.only.split(",") if s] or list(BENCHES)
    unknown = set(names) - set(BENCHES)
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}; expected some of {', '.join(BENCHES)}")
    print(f"# envs benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {args.threads} thread(s), load {os.getloadavg()[0]:.2f}, "
          f"cuda {'yes' if torch.cuda.is_available() else 'no'}", flush=True)
    rows: list[dict[str, Any]] = []
    for name in names:
        rows.extend(BENCHES[name](args))
    print(report(rows))
    print(f"# load at end {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
