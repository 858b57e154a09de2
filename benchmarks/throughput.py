"""Env-steps/s of the raw Pursuit env, our native DQN trainer and RLlib 2.60's multi-agent DQN, in one run.

Usage::

    python benchmarks/throughput.py                      # full run (~6-10 min on 2 busy cores)
    python benchmarks/throughput.py --quick              # smoke mode (well under a minute of measuring)
    python benchmarks/throughput.py --seconds 15 --steps 3000 --rllib-steps 1600 --threads 1,2

What it measures (all on SISL Pursuit with the paper's settings: 8 pursuers, 30 evaders, 16x16,
max_cycles 500, shared_reward False):

1. Raw env, random actions (numpy RNG, 8 draws per step), each for ``--seconds`` seconds:
   ``pursuit_v5.parallel_env``, our lean driver ``PursuitEnv(vectorized=False)`` and our default
   ``PursuitEnv()`` (vectorized game rules).
2. Our native trainer (``suPER.native.dqn.train``) with the paper's CNN (dueling + double Q), one
   update of all 8 agents (32 samples each) per 4-env-step fragment, learning from env step 200,
   evaluation off, for ``--steps`` env steps at each ``--threads`` value. Reported:
   ``Summary.env_steps_per_sec`` (whole run, start-up included, evaluation excluded) and the
   steady-state rate after the same warm-up as RLlib's (from per-fragment timestamps).
3. RLlib 2.60 new-API-stack DQN with 8 modules (one per pursuer), the same conv stack
   (``conv_filters`` [[32,2,1,"valid"],[64,2,1,"valid"],[64,2,1,"valid"]], head 64), dueling +
   double Q, ``rollout_fragment_length`` 4, ``train_batch_size_per_learner`` 32, 0 env runners,
   prioritized ``MultiAgentPrioritizedEpisodeReplayBuffer``, learning from step 200, target update
   1000, epsilon [(0, 0.1), (100000, 0.001)]. Steady-state env-steps/s from RLlib's own
   ``num_env_steps_sampled_lifetime`` counter over the wall time of ``algo.train()`` calls after a
   warm-up (one iteration before learning starts and one full learning iteration); Ray start-up,
   ``build_algo`` and warm-up times are reported separately.

Everything runs in this one process (RLlib's env runner and learner are local), so ``torch`` threads
set here govern both trainers. The machine's load average is printed at the start and the end:
throughput on a shared machine is noisy, so compare ratios from the same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

# Ray 2.60 turns on token auth by default and would write ~/.ray/auth_token; usage stats would try the network.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402

# torch is imported lazily (in main and the parts) so that --omp-passive can set OMP_WAIT_POLICY before
# libgomp is loaded.

PAPER_PURSUIT = {"n_pursuers": 8, "n_evaders": 30, "x_size": 16, "y_size": 16, "max_cycles": 500,
                 "shared_reward": False}
"""The paper's Pursuit settings (checked against experiments/envs/pursuit.yaml)."""

CONV_FILTERS = [[32, 2, 1, "valid"], [64, 2, 1, "valid"], [64, 2, 1, "valid"]]
"""RLlib conv stack equal to the paper's PursuitModel convs (STACK-NOTES 2.1)."""

TARGET_RATIO = 3.0
"""Goal: ours >= 3x RLlib with the paper CNN at the paper replay ratio."""


def log(msg: str) -> None:
    """Progress line on stderr (the report goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# machine info


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def version(dist: str) -> str:
    """Installed version of a distribution, or '-'."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def machine_info() -> dict[str, Any]:
    """CPU, cores, threads, load and library versions."""
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": affinity,
        "torch_default_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(unset)"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {d: version(d) for d in ("torch", "ray", "pettingzoo", "numpy", "gymnasium", "super-marl")},
    }


def cpu_snapshot() -> tuple[float, float, float, float]:
    """(wall, machine busy CPU-s, machine steal CPU-s, this process's CPU-s) for CPU-use accounting."""
    busy = steal = float("nan")
    try:
        f = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        tick = os.sysconf("SC_CLK_TCK")
        busy = (f[0] + f[1] + f[2] + f[5] + f[6]) / tick  # user nice system irq softirq
        steal = f[7] / tick
    except (OSError, ValueError, IndexError):
        pass
    return time.perf_counter(), busy, steal, time.process_time()


def cpu_use(before: tuple[float, float, float, float], after: tuple[float, float, float, float]) -> dict[str, float]:
    """Average cores busy on the whole machine, stolen, and used by this process, between two snapshots."""
    wall = max(after[0] - before[0], 1e-9)
    return {"wall_s": wall, "machine_busy_cores": (after[1] - before[1]) / wall,
            "steal_cores": (after[2] - before[2]) / wall, "this_process_cores": (after[3] - before[3]) / wall}


def loadavg() -> str:
    """1/5/15-minute load averages."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# --------------------------------------------------------------------------------------------------
# 1. raw env


def bench_parallel_env(kwargs: dict[str, Any], seconds: float, seed: int = 0) -> dict[str, Any]:
    """``pursuit_v5.parallel_env`` stepped with random actions for ``seconds``."""
    from pettingzoo.sisl import pursuit_v5

    env = pursuit_v5.parallel_env(**kwargs)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    agents = list(env.agents)
    n_act = int(env.action_space(agents[0]).n)
    steps, episodes = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        acts = rng.integers(0, n_act, len(agents)).tolist()
        _, _, terms, truncs, _ = env.step(dict(zip(agents, acts)))
        steps += 1
        if not env.agents or all(terms.values()) or all(truncs.values()):
            episodes += 1
            env.reset()
            agents = list(env.agents)
    dt = time.perf_counter() - t0
    env.close()
    return {"env_steps": steps, "seconds": dt, "env_steps_per_sec": steps / dt, "episodes_done": episodes}


def bench_pursuit_env(kwargs: dict[str, Any], seconds: float, vectorized: bool, seed: int = 0) -> dict[str, Any]:
    """Our ``PursuitEnv`` (lean driver, optionally vectorized) with random actions for ``seconds``."""
    from suPER.envs.pursuit import PursuitEnv

    env = PursuitEnv(dict(kwargs), horizon=int(kwargs.get("max_cycles", 500)), vectorized=vectorized)
    rng = np.random.default_rng(seed)
    n, n_act = env.spec.n_agents, env.spec.n_actions
    env.reset(seed=seed)
    steps, episodes = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        res = env.step(rng.integers(0, n_act, n))
        steps += 1
        if res.episode_over:
            episodes += 1
            env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return {"env_steps": steps, "seconds": dt, "env_steps_per_sec": steps / dt, "episodes_done": episodes}


# --------------------------------------------------------------------------------------------------
# 2. our native trainer


class _TimeCap(Exception):
    """Raised from the progress callback to stop a native run that exceeds its time cap."""


def bench_native(steps: int, threads: int, learning_starts: int, warmup_steps: int, max_seconds: float = 0.0,
                 seed: int = 1) -> dict[str, Any]:
    """Train our native DDQN (paper CNN, paper replay ratio) for ``steps`` env steps, evaluation off.

    Args:
        steps: env steps to train for.
        threads: torch intra-op threads (run.threads).
        learning_starts: env steps before the first update.
        warmup_steps: env steps excluded from the steady-state window (counted from 0).
        max_seconds: stop the run after this many seconds (0 = never). A stopped run has no Summary:
            its env_steps_per_sec is then computed the same way (env steps / train wall time) from the
            per-fragment timestamps, and ``capped`` is True.
        seed: run seed.

    Returns:
        Summary.env_steps_per_sec, a steady-state rate from per-fragment timestamps, timings, updates.
    """
    import torch

    from suPER.models import BatchedQNet
    from suPER.native.dqn import train
    from suPER.resolve import resolve
    from suPER.runs import RunFolder, read_metrics

    cfg = resolve("pursuit", "ddqn", overrides={
        "run.num_timesteps": steps,
        "run.threads": threads,
        "run.device": "cpu",
        "run.seed": seed,
        "run.eval_episodes": 0,
        "run.eval_interval": 10**9,
        "run.progress": False,
        "dqn.learning_starts": learning_starts,
    })
    d = cfg.dqn
    assert (d.rollout_fragment_length, d.batch_size, d.double_q, d.dueling, d.model) == (4, 32, True, True, "conv")
    assert not cfg.relay.enabled and not d.parameter_sharing
    stamps: list[tuple[float, int]] = []
    t_start = time.perf_counter()

    def progress(env_steps: int, _stats: dict[str, float]) -> None:
        now = time.perf_counter()
        stamps.append((now, env_steps))
        if max_seconds > 0 and now - t_start > max_seconds and env_steps < steps:
            raise _TimeCap

    capped = False
    with tempfile.TemporaryDirectory(prefix="bench_native_") as tmp:
        folder = RunFolder(Path(tmp) / "run")
        folder.path.mkdir(parents=True)
        try:
            summary = train(cfg, folder, progress=progress)
            env_steps, rate, wall, timings = (summary.env_steps, summary.env_steps_per_sec, summary.wall_time_s,
                                              summary.timings)
            rows = read_metrics(folder.metrics)
            updates = int(rows["updates"][-1]) if "updates" in rows and len(rows["updates"]) else -1
        except _TimeCap:
            capped = True
            env_steps = stamps[-1][1]
            wall = stamps[-1][0] - t_start
            rate = env_steps / wall
            timings = {}
            updates = max(0, (env_steps - learning_starts) // d.rollout_fragment_length)  # one per fragment
    torch_threads = torch.get_num_threads()

    steady = float("nan")
    window = [(t, s) for t, s in stamps if s >= warmup_steps]
    if len(window) >= 2 and window[-1][1] > window[0][1]:
        steady = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
    net = BatchedQNet(8, (7, 7, 3), 5, body=d.model, dueling=d.dueling, hiddens=d.hiddens)
    params_per_agent = sum(p.numel() for p in net.parameters()) // 8
    return {
        "threads": threads,
        "torch_threads_seen": torch_threads,
        "capped": capped,
        "env_steps": env_steps,
        "env_steps_per_sec": rate,
        "steady_env_steps_per_sec": steady,
        "steady_window_env_steps": (window[-1][1] - window[0][1]) if len(window) >= 2 else 0,
        "wall_time_s": wall,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "updates": updates,
        "updates_per_4_env_steps": updates / max(1, (env_steps - learning_starts)) * 4,
        "params_per_agent": params_per_agent,
    }


# --------------------------------------------------------------------------------------------------
# 3. RLlib 2.60 multi-agent DQN


def bench_rllib(kwargs: dict[str, Any], measure_steps: int, threads: list[int], learning_starts: int,
                iter_steps: int, seed: int = 1) -> dict[str, Any]:
    """RLlib 2.60 new-stack DQN, 8 modules, paper CNN and replay ratio; one Ray cluster, one algo per thread count.

    Args:
        kwargs: pursuit_v5 constructor arguments.
        measure_steps: env steps to time after the warm-up (rounded up to whole iterations).
        threads: torch thread counts to measure (each gets a fresh algo).
        learning_starts: num_steps_sampled_before_learning_starts.
        iter_steps: min_sample_timesteps_per_iteration (env steps per algo.train()).
        seed: config.debugging(seed=...).

    Returns:
        Ray init time and, per thread count, build/warm-up times and steady env-steps/s.
    """
    import torch

    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    import ray
    from pettingzoo.sisl import pursuit_v5
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.rllib.utils.metrics import (
        ALL_MODULES,
        ENV_RUNNER_RESULTS,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_MODULE_STEPS_TRAINED_LIFETIME,
        TIMERS,
    )
    from ray.tune.registry import register_env

    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level=logging.ERROR,
             log_to_driver=False)
    init_s = time.perf_counter() - t0
    for name in ("ray", "ray.rllib", "ray.tune", "ray.data"):  # after ray.init, which sets up Ray's loggers
        logging.getLogger(name).setLevel(logging.ERROR)
    out: dict[str, Any] = {"ray_import_s": import_s, "ray_init_s": init_s, "runs": []}
    env_kwargs = dict(kwargs)
    try:
        register_env("bench_pursuit", lambda _cfg: ParallelPettingZooEnv(pursuit_v5.parallel_env(**env_kwargs)))
        n = int(env_kwargs["n_pursuers"])
        policies = {f"pursuer_{i}" for i in range(n)}
        for th in threads:
            torch.set_num_threads(th)
            config = (
                DQNConfig()
                .environment("bench_pursuit")
                .framework("torch")
                .env_runners(num_env_runners=0, rollout_fragment_length=4, num_envs_per_env_runner=1)
                .learners(num_learners=0)
                .multi_agent(policies=policies, policy_mapping_fn=lambda aid, *a, **k: aid,
                             count_steps_by="env_steps")
                .rl_module(
                    rl_module_spec=MultiRLModuleSpec(rl_module_specs={p: RLModuleSpec() for p in policies}),
                    model_config=DefaultModelConfig(conv_filters=CONV_FILTERS, head_fcnet_hiddens=[64]),
                )
                .training(
                    train_batch_size_per_learner=32, lr=1.6e-4, gamma=0.99, n_step=1, double_q=True, dueling=True,
                    target_network_update_freq=1000, num_steps_sampled_before_learning_starts=learning_starts,
                    epsilon=[(0, 0.1), (100000, 0.001)],
                    # the type must be a string: a class breaks build_algo's "EpisodeReplayBuffer" in type check
                    replay_buffer_config={"type": "MultiAgentPrioritizedEpisodeReplayBuffer", "capacity": 120000,
                                          "alpha": 0.6, "beta": 0.4},
                )
                .reporting(min_sample_timesteps_per_iteration=iter_steps, min_time_s_per_iteration=0,
                           min_train_timesteps_per_iteration=0)
                .debugging(seed=seed)
            )
            t0 = time.perf_counter()
            algo = config.build_algo()
            build_s = time.perf_counter() - t0
            try:
                module = algo.get_module("pursuer_0")
                params_per_agent = sum(p.numel() for p in module.parameters())

                def counters(res: dict[str, Any]) -> tuple[float, float]:
                    env_steps = res[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
                    trained = res.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {}).get(NUM_MODULE_STEPS_TRAINED_LIFETIME, 0)
                    return float(env_steps), float(trained)

                # warm-up: iterations until one full iteration has run with learning on
                t0 = time.perf_counter()
                warm_iters = 0
                steps_done, trained_done = 0.0, 0.0
                while steps_done < learning_starts + iter_steps:
                    res = algo.train()
                    warm_iters += 1
                    steps_done, trained_done = counters(res)
                warmup_s = time.perf_counter() - t0
                warm_steps = steps_done
                # measured iterations
                per_iter: list[float] = []
                measured_s = 0.0
                start_steps, start_trained = steps_done, trained_done
                timers: dict[str, float] = {}
                while steps_done - start_steps < measure_steps:
                    t_it = time.perf_counter()
                    res = algo.train()
                    dt = time.perf_counter() - t_it
                    measured_s += dt
                    new_steps, trained_done = counters(res)
                    per_iter.append((new_steps - steps_done) / dt)
                    steps_done = new_steps
                    timers = {k: float(v) for k, v in res.get(TIMERS, {}).items() if isinstance(v, (int, float))}
                measured_steps = steps_done - start_steps
                updates = (trained_done - start_trained) / (n * 32)
                out["runs"].append({
                    "threads": th,
                    "torch_threads_seen": torch.get_num_threads(),
                    "build_s": build_s,
                    "warmup_s": warmup_s,
                    "warmup_iterations": warm_iters,
                    "warmup_env_steps": warm_steps,
                    "measured_env_steps": measured_steps,
                    "measured_s": measured_s,
                    "env_steps_per_sec": measured_steps / measured_s if measured_s > 0 else float("nan"),
                    "per_iteration_env_steps_per_sec": [round(x, 2) for x in per_iter],
                    "updates_per_4_env_steps": updates / max(1.0, measured_steps) * 4,
                    "params_per_agent": params_per_agent,
                    "timers_ema_s": {k: round(v, 4) for k, v in timers.items()},
                })
            finally:
                algo.stop()
    finally:
        ray.shutdown()
    return out


# --------------------------------------------------------------------------------------------------
# report


def fmt(x: float, nd: int = 1) -> str:
    """Number for the table ('-' for NaN)."""
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.{nd}f}"


def report(results: dict[str, Any]) -> str:
    """Text report with the markdown table, ratios and the target line."""
    lines: list[str] = []
    m = results["machine"]
    a = results["args"]
    lines.append("# Throughput benchmark: Pursuit (8 pursuers, 30 evaders, 16x16), paper CNN, paper replay ratio")
    lines.append("")
    lines.append(f"command: `{results['command']}`")
    lines.append(f"date: {results['date']}  host CPU: {m['cpu_model']}  cores: {m['logical_cores']} logical, "
                 f"{m['usable_cores']} usable  torch default threads: {m['torch_default_threads']}  "
                 f"OMP_NUM_THREADS: {m['OMP_NUM_THREADS']}  OMP_WAIT_POLICY: {m['OMP_WAIT_POLICY']}")
    lines.append("versions: python " + m["python"] + ", " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
    lines.append(f"load average (1/5/15 min): start {results['load_start']}, end {results['load_end']}"
                 " (other processes share this machine; compare ratios within one run)")
    lines.append(f"total benchmark wall time: {results['total_s']:.0f} s")
    lines.append("")
    lines.append("| what | threads | env-steps/s | notes |")
    lines.append("|---|---|---|---|")
    env = results.get("env", {})
    labels = {"parallel_env": "raw `pursuit_v5.parallel_env`, random actions",
              "lean": "raw `PursuitEnv(vectorized=False)` (lean driver)",
              "vectorized": "raw `PursuitEnv()` (lean + vectorized, our default)"}
    for key, label in labels.items():
        if key in env:
            r = env[key]
            lines.append(f"| {label} | - | {fmt(r['env_steps_per_sec'])} | {r['env_steps']} steps in "
                         f"{r['seconds']:.1f} s |")
    for r in results.get("native", []):
        t = r["timings_s"]
        split = ", ".join(f"{k} {v:.1f}" for k, v in t.items() if k != "eval")
        capped = (f"STOPPED at the {a['native_max_seconds']:g} s cap after {r['env_steps']} of {a['steps']} steps "
                  "(rate = env steps / wall time from per-fragment timestamps, as Summary computes it); "
                  if r.get("capped") else f"{r['env_steps']} steps, ")
        lines.append(f"| ours: native DDQN, paper CNN (`Summary.env_steps_per_sec`) | {r['threads']} | "
                     f"**{fmt(r['env_steps_per_sec'])}** | {capped}{r['wall_time_s']:.1f} s wall incl. "
                     f"start-up; steady state after warm-up {fmt(r['steady_env_steps_per_sec'])}; "
                     f"{r['updates']} updates ({r['updates_per_4_env_steps']:.2f} per 4 env steps)"
                     + (f"; split (s): {split}" if split else "") + " |")
    rl = results.get("rllib")
    if rl:
        for r in rl["runs"]:
            pi = r["per_iteration_env_steps_per_sec"]
            tm = r["timers_ema_s"]
            split = ", ".join(f"{k.replace('_timer', '')} {1e3 * v:.0f}"
                              for k, v in tm.items() if k in ("env_runner_sampling_timer", "replay_buffer_add_data_timer",
                                                               "replay_buffer_sampling_timer", "learner_update_timer",
                                                               "replay_buffer_update_prios_timer", "synch_weights"))
            lines.append(
                f"| RLlib 2.60 DQN, 8 modules, same CNN (steady state) | {r['threads']} | "
                f"**{fmt(r['env_steps_per_sec'])}** | {int(r['measured_env_steps'])} steps in {r['measured_s']:.1f} s "
                f"over {len(pi)} iterations (per iteration {min(pi):.1f}-{max(pi):.1f}); "
                f"{r['updates_per_4_env_steps']:.2f} updates per 4 env steps; ray.init {rl['ray_init_s']:.1f} s, "
                f"build_algo {r['build_s']:.1f} s, warm-up {r['warmup_s']:.1f} s ({int(r['warmup_env_steps'])} steps); "
                f"EMA ms per training_step: {split} |")
    lines.append("")

    ratios = results.get("ratios", {})
    if ratios:
        lines.append("| ratio | value |")
        lines.append("|---|---|")
        for k, v in ratios.items():
            lines.append(f"| {k} | **{v:.2f}x** |")
        lines.append("")
    if "target_met" in results:
        status = "MET" if results["target_met"] else "NOT MET"
        lines.append(f"target: >= {TARGET_RATIO:g}x RLlib with the paper CNN at the paper replay ratio: {status} "
                     f"({results['target_basis']})")
    if a.get("quick"):
        lines.append("(--quick smoke mode: numbers are not meaningful)")
    if results.get("cpu_use"):
        lines.append("")
        lines.append(f"CPU use per part (cores busy on average, of {m['usable_cores']}; machine = all processes, "
                     "incl. other users and Ray's daemons):")
        lines.append("")
        lines.append("| part | wall s | machine busy | this process | steal |")
        lines.append("|---|---|---|---|---|")
        for label, u in results["cpu_use"].items():
            lines.append(f"| {label} | {u['wall_s']:.1f} | {u['machine_busy_cores']:.2f} | "
                         f"{u['this_process_cores']:.2f} | {u['steal_cores']:.2f} |")
    np_ = results.get("native", [])
    if np_ and rl and rl["runs"]:
        lines.append("")
        lines.append(f"note: network size per agent: ours {np_[0]['params_per_agent']:,} parameters (paper "
                     f"PursuitModel: conv stack, dense 64, 256-wide dueling heads), RLlib "
                     f"{rl['runs'][0]['params_per_agent']:,} (same conv stack, 64-wide dueling heads); "
                     "ours does slightly more compute per update.")
    return "\n".join(lines)


def compute_ratios(results: dict[str, Any]) -> None:
    """Fill ratios and the target verdict (same-thread comparison when possible)."""
    native = {r["threads"]: r["env_steps_per_sec"] for r in results.get("native", [])}
    rl_runs = results.get("rllib", {}).get("runs", []) if results.get("rllib") else []
    rllib = {r["threads"]: r["env_steps_per_sec"] for r in rl_runs}
    if not native or not rllib:
        return
    base_t = 1 if 1 in rllib else min(rllib)
    base = rllib[base_t]
    ratios: dict[str, float] = {}
    for t, v in sorted(native.items()):
        ratios[f"ours ({t} thread{'s' if t > 1 else ''}) / RLlib ({base_t} thread{'s' if base_t > 1 else ''})"] = v / base
    for t, v in sorted(rllib.items()):
        if t != base_t and t in native:
            ratios[f"ours ({t} threads) / RLlib ({t} threads)"] = native[t] / v
    steady = {r["threads"]: r["steady_env_steps_per_sec"] for r in results.get("native", [])}
    if base_t in steady and not np.isnan(steady[base_t]):
        ratios[f"ours steady state / RLlib steady state ({base_t} thread{'s' if base_t > 1 else ''})"] = (
            steady[base_t] / base)
    best_ours, best_rl = max(native.values()), max(rllib.values())
    ratios["best ours / best RLlib"] = best_ours / best_rl
    results["ratios"] = ratios
    # Verdict: at equal threads (the conservative comparison) if both were measured at the same count.
    common = sorted(set(native) & set(rllib))
    if common:
        t = common[0]
        r = native[t] / rllib[t]
        results["target_basis"] = f"ours {native[t]:.1f} vs RLlib {rllib[t]:.1f} env-steps/s at {t} thread(s) = {r:.2f}x"
    else:
        r = best_ours / best_rl
        results["target_basis"] = f"best ours vs best RLlib = {r:.2f}x"
    results["target_met"] = bool(r >= TARGET_RATIO)


def parse_threads(text: str) -> list[int]:
    """'1,2' -> [1, 2]."""
    vals = [int(x) for x in text.split(",") if x.strip()]
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return vals


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run the selected parts, print the report; return the results dict."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=None, help="seconds per raw-env measurement (default 15; quick 1)")
    p.add_argument("--steps", type=int, default=None,
                   help="env steps for each native-trainer run (default 3000; quick 80)")
    p.add_argument("--rllib-steps", type=int, default=None,
                   help="env steps timed for RLlib after its warm-up (default 1600; quick 20)")
    p.add_argument("--threads", type=parse_threads, default=None,
                   help="torch thread counts for our trainer, comma-separated (default 1,2)")
    p.add_argument("--rllib-threads", type=parse_threads, default=None,
                   help="torch thread counts for RLlib, comma-separated (default 1)")
    p.add_argument("--iter-steps", type=int, default=None,
                   help="RLlib min_sample_timesteps_per_iteration (default 200; quick 20)")
    p.add_argument("--learning-starts", type=int, default=None, help="env steps before learning (default 200; quick 20)")
    p.add_argument("--native-max-seconds", type=float, default=None,
                   help="stop a native run after this many seconds (default 180; quick 30; 0 = no cap). Guards "
                        "against the multi-thread OpenMP slowdown on a shared machine (see README)")
    p.add_argument("--omp-passive", action="store_true",
                   help="set OMP_WAIT_POLICY=PASSIVE before torch loads (no spin-waiting OpenMP threads)")
    p.add_argument("--quick", action="store_true", help="smoke mode: a second per env, tiny step counts")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: env, native, rllib")
    p.add_argument("--json", type=Path, default=None, help="also write all results to this JSON file")
    args = p.parse_args(argv)
    q = args.quick
    seconds = args.seconds if args.seconds is not None else (1.0 if q else 15.0)
    steps = args.steps if args.steps is not None else (80 if q else 3000)
    rllib_steps = args.rllib_steps if args.rllib_steps is not None else (20 if q else 1600)
    threads = args.threads or [1, 2]
    rllib_threads = args.rllib_threads or [1]
    iter_steps = args.iter_steps if args.iter_steps is not None else (20 if q else 200)
    learning_starts = args.learning_starts if args.learning_starts is not None else (20 if q else 200)
    native_cap = args.native_max_seconds if args.native_max_seconds is not None else (30.0 if q else 180.0)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - {"env", "native", "rllib"}:
        p.error(f"--skip: unknown part(s) {sorted(skip - {'env', 'native', 'rllib'})}")

    if args.omp_passive:
        if "torch" in sys.modules and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
            log("warning: torch is already imported in this process; --omp-passive cannot take effect")
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import torch

    from suPER.resolve import resolve

    kwargs = dict(resolve("pursuit").env.kwargs)
    if {k: kwargs.get(k) for k in PAPER_PURSUIT} != PAPER_PURSUIT:
        raise SystemExit(f"experiments/envs/pursuit.yaml kwargs {kwargs} differ from the paper's {PAPER_PURSUIT}")

    argv_list = sys.argv[1:] if argv is None else list(argv)
    results: dict[str, Any] = {
        "command": shlex.join(["python", "benchmarks/throughput.py", *argv_list]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine_info(),
        "load_start": loadavg(),
        "args": {"seconds": seconds, "steps": steps, "rllib_steps": rllib_steps, "threads": threads,
                 "rllib_threads": rllib_threads, "iter_steps": iter_steps, "learning_starts": learning_starts,
                 "native_max_seconds": native_cap, "omp_passive": args.omp_passive,
                 "quick": q, "skip": sorted(skip)},
        "env_kwargs": kwargs,
    }
    t_total = time.perf_counter()

    results["cpu_use"] = {}

    def timed(label: str, fn: Callable[[], Any]) -> Any:
        log(f"{label} ... (load {loadavg()})")
        before = cpu_snapshot()
        r = fn()
        use = cpu_use(before, cpu_snapshot())
        results["cpu_use"][label] = use
        log(f"{label}: done in {use['wall_s']:.1f} s; machine busy {use['machine_busy_cores']:.2f} cores, "
            f"this process {use['this_process_cores']:.2f}")
        return r

    if "env" not in skip:
        torch.set_num_threads(1)
        results["env"] = {
            "parallel_env": timed("raw pursuit_v5.parallel_env", lambda: bench_parallel_env(kwargs, seconds)),
            "lean": timed("raw PursuitEnv(vectorized=False)", lambda: bench_pursuit_env(kwargs, seconds, False)),
            "vectorized": timed("raw PursuitEnv()", lambda: bench_pursuit_env(kwargs, seconds, True)),
        }
        for k, r in results["env"].items():
            log(f"  {k}: {r['env_steps_per_sec']:.1f} env-steps/s")
    if "native" not in skip:
        results["native"] = []
        for t in threads:
            r = timed(f"native DDQN, {steps} env steps, threads={t}",
                      lambda t=t: bench_native(steps, t, learning_starts, learning_starts + iter_steps, native_cap))
            log(f"  Summary.env_steps_per_sec {r['env_steps_per_sec']:.1f}, steady {r['steady_env_steps_per_sec']:.1f}")
            results["native"].append(r)
    if "rllib" not in skip:
        results["rllib"] = timed(f"RLlib DQN, warm-up + {rllib_steps} env steps, threads={rllib_threads}",
                                 lambda: bench_rllib(kwargs, rllib_steps, rllib_threads, learning_starts, iter_steps))
        for r in results["rllib"]["runs"]:
            log(f"  RLlib threads={r['threads']}: {r['env_steps_per_sec']:.1f} env-steps/s")
    results["total_s"] = time.perf_counter() - t_total
    results["load_end"] = loadavg()
    compute_ratios(results)
    text = report(results)
    print(text, flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


if __name__ == "__main__":
    main()
