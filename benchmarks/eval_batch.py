"""Evaluation of K episodes: sequential (one at a time on one env) vs batched (K games in lockstep).

Usage::

    python benchmarks/eval_batch.py              # K = 20 episodes per env, horizon 100, a 20k-step pursuit run
    python benchmarks/eval_batch.py --quick      # smoke mode (< 1 min): K = 4, horizon 15, numbers mean nothing
    python benchmarks/eval_batch.py --envs pursuit --run-steps 0    # the speedups only
    python benchmarks/eval_batch.py --envs none --run-steps 8000 --eval-parallel   # the run's share, forked too

For each env (pursuit, battle, adversarial_pursuit, with the YAML's settings and the shipped opponents) the
native DDQN trainer's greedy batched act on a fresh paper network plays the same K seeded episodes
(``episode_seeds``) both ways: ``run.eval_batch 0`` (one env, E = 1 per call) and ``run.eval_batch K``
(``opponents.make_eval_batch``: pursuit's ``VecPursuitEnv`` with one learner forward for all K games per
step; MAgent: K games in lockstep with one learner and one opponent forward per step). It prints

    eval speedup batched/sequential (<env>): <x>x

and the share of evaluation in the wall time of a paper-protocol pursuit run, measured: a native DDQN
pursuit run of ``--run-steps`` env steps (default 20k) with the paper's density, one evaluation of
20 x 500-step episodes every 4000 steps (200 over the YAML's 800k) plus the step-0 one, batched; share =
evaluation seconds / run wall seconds. The sequential share is that run with its evaluation time scaled by
the measured pursuit speedup. Wall-clock ratios: both sides of a ratio run in the same process, minutes
apart at most, on whatever load the machine has.

With ``--eval-parallel`` the run is made twice, in-process and with ``run.eval_parallel`` (evaluations forked,
``suPER.forked``), whose ``eval`` seconds are only the time training waited (the forks, and collecting a result
not yet ready); one line each::

    eval share of a paper-protocol pursuit run (in-process|forked): <x>%
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch

from suPER import config as C
from suPER.evaluation import episode_seeds, play_episodes
from suPER.models import BatchedQNet
from suPER.opponents import make_env, make_eval_batch
from suPER.resolve import resolve

ENVS = C.ENV_NAMES


def paper_net(cfg: C.ExperimentConfig, spec) -> BatchedQNet:
    """A fresh paper network of the native DDQN trainer (independent learners, P = N), on CPU."""
    d = cfg.dqn
    return BatchedQNet(spec.n_agents, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling,
                       hiddens=d.hiddens)


def greedy_act(cfg: C.ExperimentConfig, spec, device: str = "cpu", net: BatchedQNet | None = None) -> object:
    """The native DDQN trainer's evaluation act on ``net`` (default a fresh ``paper_net``), copied to ``device``.

    On CPU it returns numpy actions; on another device (the CUDA evaluation of benchmarks/device_check.sh) the
    network lives there and the actions stay there as a tensor, so a device-resident env never copies
    observations or actions through the host (``play_episodes`` still reads rewards back per step).
    """
    n = spec.n_agents
    net = copy.deepcopy(net if net is not None else paper_net(cfg, spec)).to(device).eval()

    @torch.no_grad()
    def act(obs_ENO, alive_EN):
        e = obs_ENO.shape[0]
        q = net(torch.as_tensor(obs_ENO, device=device).reshape(e, n, *spec.obs_shape).transpose(0, 1))
        a_EN = q.argmax(-1).T
        return a_EN.numpy() if device == "cpu" else a_EN

    return act


def eval_speedup(env_name: str, episodes: int, horizon: int, seed: int = 1, device: str = "cpu") -> dict[str, float]:
    """Seconds for ``episodes`` seeded evaluation episodes sequential vs batched, and their ratio.

    The sequential side is always the CPU one (one game, the network on CPU: what an evaluation did before
    batching); ``device`` places the batched side (pursuit's ``VecPursuitEnv`` and the network; a MAgent
    lockstep batch is a CPU batch whatever ``device`` says, so only its network moves).
    """
    torch.manual_seed(seed)
    cfg = resolve(env_name, "ddqn", named={"env.horizon": horizon})
    seeds = episode_seeds(seed, 0, episodes)
    single = make_env(cfg.env, seed=seed)
    batch = make_eval_batch(cfg.env, episodes, seed=seed, device=device)
    try:
        net = paper_net(cfg, single.spec)  # the same weights on both sides
        act = greedy_act(cfg, single.spec, net=net)
        act_batch = act if device == "cpu" else greedy_act(cfg, single.spec, device, net=net)
        t0, c0 = time.perf_counter(), time.process_time()
        seq = play_episodes(single, act, seeds)
        t_seq, c_seq = time.perf_counter() - t0, time.process_time() - c0
        if device.startswith("cuda"):  # warm-up: CUDA context, kernels' first launch (not timed)
            play_episodes(batch, act_batch, seeds[:1])
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        bat = play_episodes(batch, act_batch, seeds)
        t_bat, c_bat = time.perf_counter() - t0, time.process_time() - c0
    finally:
        single.close()
        batch.close()
    same = float(np.mean(np.all(seq.agent_return_KN == bat.agent_return_KN, axis=1) & (seq.length_K == bat.length_K)))
    # per env step: the two sides may play episodes of other lengths (pursuit's vectorized env)
    speedup = (t_seq / max(seq.length_K.sum(), 1)) / (t_bat / max(bat.length_K.sum(), 1))
    out = {"sequential_s": t_seq, "batched_s": t_bat, "sequential_cpu_s": c_seq, "batched_cpu_s": c_bat,
           "sequential_steps": float(seq.length_K.sum()), "batched_steps": float(bat.length_K.sum()),
           "speedup": speedup, "cpu_speedup": (c_seq / max(seq.length_K.sum(), 1)) / (c_bat / max(bat.length_K.sum(), 1)),
           "steps": float(seq.length_K.sum()),
           "identical_episodes": same}
    how = ("other episodes: the vectorized env draws from a hash, same distribution" if env_name == "pursuit" else
           f"identical episodes {same:.0%} (float32 forwards round differently by batch size)")
    where = "" if device == "cpu" else f", batched on {device}"
    print(f"eval speedup batched/sequential ({env_name}{where}): {out['speedup']:.2f}x   "
          f"(per env step, wall; {out['cpu_speedup']:.2f}x in CPU time; {episodes} episodes, {int(out['steps'])} + "
          f"{int(bat.length_K.sum())} env steps: sequential {t_seq:.1f} s, batched {t_bat:.1f} s; {how})", flush=True)
    return out


def paper_run_share(steps: int, interval: int, episodes: int, horizon: int, eval_batch: int,
                    eval_parallel: bool = False) -> dict[str, float]:
    """Measure a native DDQN pursuit run with the paper's evaluation density; return its timings.

    The run trains ``steps`` env steps (YAML settings, one torch thread, CPU) and evaluates every
    ``interval`` steps (and at step 0) on ``episodes`` greedy episodes of ``horizon`` steps, played as
    ``run.eval_batch`` games at once. share = evaluation seconds / the run's wall seconds (``Summary.timings``).
    """
    from suPER.campaigns import execute

    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve("pursuit", "ddqn", named={
            "run.num_timesteps": steps, "run.eval_interval": interval, "run.eval_episodes": episodes,
            "run.eval_batch": eval_batch, "env.horizon": horizon, "run.out": tmp, "run.progress": False,
            "run.threads": 1, "run.device": "cpu", "run.checkpoint_replay": False, "run.eval_parallel": eval_parallel})
        s = execute(cfg)
    evals = steps // interval + 1
    t_eval = s.timings.get("eval", 0.0)
    return {"wall_s": s.wall_time_s, "eval_s": t_eval, "share": t_eval / s.wall_time_s, "evaluations": evals,
            "train_sps": s.env_steps_per_sec, "per_eval_s": t_eval / evals}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: K = 4, horizon 15, a 200-step run")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--horizon", type=int, default=100, help="episode horizon of the measured evaluations")
    p.add_argument("--run-steps", type=int, default=20_000,
                   help="env steps of the measured paper-protocol pursuit run (0 = skip it)")
    p.add_argument("--train-steps", type=int, default=None, help=argparse.SUPPRESS)  # old name of --run-steps
    p.add_argument("--envs", default=",".join(ENVS), help="envs of the speedup lines (none: skip them)")
    p.add_argument("--eval-parallel", action="store_true",
                   help="make the paper-protocol run in-process and with run.eval_parallel (forked), and compare")
    p.add_argument("--device", default="cpu", help="device of the batched side (pursuit's env and the network; "
                   "e.g. cuda); the sequential side stays on CPU")
    a = p.parse_args()
    if a.device != "cpu" and not torch.cuda.is_available():
        print(f"benchmarks/eval_batch.py: --device {a.device}: no CUDA device here", file=sys.stderr)
        raise SystemExit(2)
    if a.train_steps is not None:
        a.run_steps = a.train_steps
    # the paper's density: 200 evaluations of 20 x 500-step episodes over 800k env steps
    interval, run_episodes, run_horizon = 800_000 // 200, 20, 500
    if a.quick:  # explicit flags still win
        defaults = p.parse_args([])
        a.episodes = 4 if a.episodes == defaults.episodes else a.episodes
        a.horizon = 15 if a.horizon == defaults.horizon else a.horizon
        a.run_steps = 200 if a.train_steps is None and a.run_steps == defaults.run_steps else a.run_steps
        interval, run_episodes, run_horizon = max(1, a.run_steps // 2), a.episodes, a.horizon
    torch.set_num_threads(1)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; torch threads 1")
    names = [] if a.envs == "none" else a.envs.split(",")
    results = {name: eval_speedup(name, a.episodes, a.horizon, device=a.device) for name in names}
    if a.run_steps > 0 and a.eval_parallel:
        for forked in (False, True):
            r = paper_run_share(a.run_steps, interval, run_episodes, run_horizon, run_episodes, eval_parallel=forked)
            how = "forked" if forked else "in-process"
            print(f"eval share of a paper-protocol pursuit run ({how}): {r['share']:.1%}   ({a.run_steps} env steps, "
                  f"{r['evaluations']} evaluations of {run_episodes} x {run_horizon}-step episodes: training waited "
                  f"{r['eval_s']:.1f} s of {r['wall_s']:.0f} s wall; training {r['train_sps']:.0f} env steps/s)",
                  flush=True)
    elif "pursuit" in results and a.run_steps > 0:
        r = paper_run_share(a.run_steps, interval, run_episodes, run_horizon, eval_batch=run_episodes)
        speedup = results["pursuit"]["speedup"]
        seq_eval = r["eval_s"] * speedup
        seq_share = seq_eval / (r["wall_s"] - r["eval_s"] + seq_eval)
        print(f"eval share of a paper-protocol pursuit run (batched): {r['share']:.1%}   (measured: {a.run_steps} env "
              f"steps, {r['evaluations']} evaluations of {run_episodes} x {run_horizon}-step episodes, one every "
              f"{interval} steps: {r['eval_s']:.0f} s of {r['wall_s']:.0f} s wall, {r['per_eval_s']:.1f} s per "
              f"evaluation; training {r['train_sps']:.0f} env steps/s)")
        print(f"eval share of a paper-protocol pursuit run (sequential, from the speedup above): {seq_share:.1%}")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
