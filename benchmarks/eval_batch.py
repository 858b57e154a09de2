"""Evaluation of K episodes: sequential (one at a time on one env) vs batched (K games in lockstep).

Usage::

    python benchmarks/eval_batch.py              # K = 20 episodes per env, horizon 100 (~5 min on 2 busy cores)
    python benchmarks/eval_batch.py --quick      # smoke mode (< 1 min): K = 4, horizon 15, numbers mean nothing
    python benchmarks/eval_batch.py --horizon 500 --train-steps 2000

For each env (pursuit, battle, adversarial_pursuit, with the YAML's settings and the shipped opponents) the
native DDQN trainer's greedy batched act on a fresh paper network plays the same K seeded episodes
(``episode_seeds``) both ways: ``run.eval_batch 0`` (one env, E = 1 per call) and ``run.eval_batch K``
(``suPER.envs.make_batch``: one learner forward and one opponent forward for all K games per step). It prints

    eval speedup batched/sequential (<env>): <x>x

and the share of evaluation in the wall time of a paper-protocol pursuit run: a short native DDQN run with
evaluation off gives the training env-steps/s; one evaluation's time is scaled from the measured horizon to
the paper's 500 steps (an untrained greedy policy never catches all evaders, so pursuit episodes run to the
horizon: an upper bound); share = 200 * t_eval / (800k / sps + 200 * t_eval), the paper's density of one
evaluation of 20 episodes per total/200 steps at the pursuit YAML's budget of 800k env steps.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np
import torch

from suPER import config as C
from suPER.envs import make_batch, make_env
from suPER.evaluation import episode_seeds, play_episodes
from suPER.models import BatchedQNet

ENVS = C.ENV_NAMES


def greedy_act(cfg: C.ExperimentConfig, spec) -> object:
    """The native DDQN trainer's evaluation act (independent learners, P = N) on a fresh paper network."""
    d = cfg.dqn
    n = spec.n_agents
    net = BatchedQNet(n, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling, hiddens=d.hiddens).eval()

    @torch.no_grad()
    def act(obs_ENO, alive_EN):
        e = obs_ENO.shape[0]
        q = net(torch.as_tensor(obs_ENO).reshape(e, n, *spec.obs_shape).transpose(0, 1))
        return q.argmax(-1).T.numpy()

    return act


def eval_speedup(env_name: str, episodes: int, horizon: int, seed: int = 1) -> dict[str, float]:
    """Seconds for ``episodes`` seeded evaluation episodes sequential vs batched, and their ratio."""
    torch.manual_seed(seed)
    cfg = C.resolve(env_name, "ddqn", named={"env.horizon": horizon})
    seeds = episode_seeds(seed, 0, episodes)
    single = make_env(cfg.env, seed=seed)
    batch = make_batch(cfg.env, episodes, seed=seed)
    try:
        act = greedy_act(cfg, single.spec)
        t0 = time.perf_counter()
        seq = play_episodes(single, act, seeds)
        t_seq = time.perf_counter() - t0
        t0 = time.perf_counter()
        bat = play_episodes(batch, act, seeds)
        t_bat = time.perf_counter() - t0
    finally:
        single.close()
        batch.close()
    same = float(np.mean(np.all(seq.agent_return_KN == bat.agent_return_KN, axis=1) & (seq.length_K == bat.length_K)))
    out = {"sequential_s": t_seq, "batched_s": t_bat, "speedup": t_seq / t_bat, "steps": float(seq.length_K.sum()),
           "identical_episodes": same}
    print(f"eval speedup batched/sequential ({env_name}): {out['speedup']:.2f}x   "
          f"({episodes} episodes, {int(out['steps'])} env steps: sequential {t_seq:.1f} s, batched {t_bat:.1f} s; "
          f"identical episodes {same:.0%} (float32 forwards round differently by batch size))")
    return out


def training_sps(steps: int) -> float:
    """Env-steps/s of a native DDQN pursuit run with the paper's settings, evaluation off."""
    from suPER.campaigns import execute

    with tempfile.TemporaryDirectory() as tmp:
        cfg = C.resolve("pursuit", "ddqn", named={"run.num_timesteps": steps, "run.eval_interval": steps,
                                                  "run.eval_episodes": 0, "run.out": tmp, "run.progress": False,
                                                  "run.threads": 1, "run.device": "cpu",
                                                  "run.checkpoint_replay": False})
        return float(execute(cfg).env_steps_per_sec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: K = 4, horizon 15, 100 training steps")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--horizon", type=int, default=100, help="episode horizon of the measured evaluations")
    p.add_argument("--train-steps", type=int, default=1500, help="env steps of the training-rate run")
    p.add_argument("--envs", default=",".join(ENVS))
    a = p.parse_args()
    if a.quick:  # explicit flags still win
        defaults = p.parse_args([])
        a.episodes = 4 if a.episodes == defaults.episodes else a.episodes
        a.horizon = 15 if a.horizon == defaults.horizon else a.horizon
        a.train_steps = 100 if a.train_steps == defaults.train_steps else a.train_steps
    torch.set_num_threads(1)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; torch threads 1")
    results = {name: eval_speedup(name, a.episodes, a.horizon) for name in a.envs.split(",")}
    if "pursuit" in results:
        sps = training_sps(a.train_steps)
        r = results["pursuit"]
        scale = 500 * a.episodes / max(r["steps"], 1.0) * 20 / a.episodes  # to 20 episodes of 500 steps
        total, evals = 800_000, 200
        train_s = total / sps
        for how in ("sequential", "batched"):
            t_eval = r[f"{how}_s"] * scale
            share = evals * t_eval / (train_s + evals * t_eval)
            print(f"eval share of a paper-protocol pursuit run ({how}): {share:.1%}   "
                  f"(800k steps at {sps:.0f} env steps/s = {train_s / 3600:.1f} h training + 200 evaluations x "
                  f"{t_eval:.0f} s; evaluation of 20 x 500-step episodes extrapolated from the measured "
                  f"{int(r['steps'])} steps)")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
