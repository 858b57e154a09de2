"""Cost model of the paper grid: wall time predicted from measured per-step costs (docs/performance.md).

Per run of env ``e`` (``n`` learners, budget ``S`` env steps, learning from step ``L``, one update of batch
``B`` per learner every ``F`` env steps, ``K`` evaluations of ``M`` episodes of ``H`` steps), in CPU-seconds
of one core:

    cpu_run = S * c_step[e] + (S - L) / F * (n * B * u[e] + c_replay[e]) + K * M * H * c_eval[e]

- ``c_step``: one training env step plus the acting forward of all learners (the epsilon-greedy pass);
- ``u``: one update per policy-sample (online forward on o and o', target forward on o', Huber loss,
  backward, grad clip, Adam), for the env's network (the paper's conv dueling net, 256-wide heads);
- ``c_replay``: one fragment's replay adds plus one prioritized sample + priority update (plain layout,
  from ``benchmarks/replay_memory.py``, benchmarks/README.md);
- ``c_eval``: one game-step of batched greedy evaluation (``evaluate_episodes`` on ``M`` games at once).

Baselines (QMIX, MADDPG, SEAC) cost ``S * c_base[algo]`` plus the same evaluation term, with ``c_base`` from
their measured pursuit runs (docs/results.md), assumed equal on the other envs (not measured there).

Machines (the grid has many more runs than cores, and runs are independent):

    wall(cores k)      = sum_runs cpu_run / k             (2-core machine, 16 cores, Ray cluster: k = W * cores)
    wall(one GPU, packed) = not measured: the network terms on the device at an assumed time per packed
                            fragment, the env, replay and evaluation env steps on the host cores
                            (``gpu_prediction``)

``--measure`` times ``c_step``, ``u`` and ``c_eval`` here (process CPU time, one torch thread); without it,
the inputs below (measured earlier, stated with their command and commit in docs/performance.md) are used.
``--check-steps N`` trains a real ``dqn.train`` run of N env steps whose CPU time the model must predict.
Parameter-sharing runs update one policy on ``n * B`` samples and are charged the same ``n * B * u``. Prints the inputs, the
grid's runs and env steps (``experiments/paper_grid.yaml`` expanded by ``campaigns.load_grid``, --seeds 3
as the original), and the predictions. No timings in tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ENVS = ("pursuit", "battle", "adversarial_pursuit")

# CPU-seconds per unit, one core, 1 torch thread; measured by `python benchmarks/cost_model.py --measure`
# (docs/performance.md: machine, load, commit). Replaced by fresh numbers with --measure.
MEASURED: dict[str, dict[str, float]] = {
    "pursuit": {"c_step": 2.175e-3, "u": 2.302e-4, "c_eval": 3.467e-4},
    "battle": {"c_step": 7.319e-3, "u": 7.982e-4, "c_eval": 1.894e-3},
    "adversarial_pursuit": {"c_step": 5.011e-3, "u": 4.560e-4, "c_eval": 1.270e-3},
}
"""``--measure`` at commit c2df50e, 2026-12-01 18:05 UTC, the 2-core AMD EPYC VM with nothing else running
(load ~2 from the measurement before it; the campaign paused), process CPU time (docs/performance.md)."""
C_REPLAY = {"pursuit": (2.2 + 4.4) * 1e-3, "battle": (2.4 + 1.9) * 1e-3, "adversarial_pursuit": (2.1 + 2.3) * 1e-3}
"""one fragment's adds + one sample and priority update, plain layout (benchmarks/README.md, replay_memory.py)"""
C_BASE = {"seac": 5.7 * 60 / 100_000, "qmix": 8.2 * 60 / 100_000, "maddpg": 17.5 * 60 / 100_000}
"""baselines' seconds per training env step on pursuit (docs/results.md: SEAC CPU time 5.7 min per 100k;
QMIX and MADDPG wall time at load ~4, an upper bound on CPU time: 8.2 and 17.5 min per 100k)"""


def measure(env_name: str, steps: int = 200, updates: int = 6, eval_steps: int = 40) -> dict[str, float]:
    """``c_step``, ``u`` and ``c_eval`` of ``env_name`` (process CPU seconds, one torch thread)."""
    import numpy as np
    import torch

    from suPER.evaluation import evaluate_episodes
    from suPER.models import BatchedQNet, clip_grad_norm_per_policy
    from suPER.native import dqn_loss
    from suPER.native.dqn_loss import q_of_actions
    from suPER.opponents import make_env, make_eval_batch
    from suPER.resolve import resolve

    torch.set_num_threads(1)
    cfg = resolve(env_name, "ddqn", overrides={"run.device": "cpu"})
    d = cfg.dqn
    env = make_env(cfg.env, 1)
    spec = env.spec
    n, obs_shape, A = spec.n_agents, spec.obs_shape, spec.n_actions
    net = BatchedQNet(n, obs_shape, A, body=d.model, dueling=d.dueling, hiddens=d.hiddens)
    target = BatchedQNet(n, obs_shape, A, body=d.model, dueling=d.dueling, hiddens=d.hiddens).requires_grad_(False)
    rng = np.random.default_rng(0)

    # c_step: acting forward + one env step
    obs = env.reset()
    t0 = time.process_time()
    for _ in range(steps):
        with torch.no_grad():
            q = net(torch.as_tensor(obs).float().reshape(n, 1, *obs_shape))
        greedy = q.argmax(-1).reshape(n).numpy()
        actions = np.where(rng.random(n) < 0.1, rng.integers(0, A, n), greedy)
        res = env.step(actions)
        obs = env.reset() if res.episode_over else res.obs_NO
    c_step = (time.process_time() - t0) / steps
    env.close()

    # u: one update of all n policies, B samples each, per policy-sample
    opt = torch.optim.Adam(net.parameters(), lr=d.lr, eps=d.adam_eps, foreach=True)
    B = d.batch_size
    o = torch.rand(n, B, *obs_shape)
    o2 = torch.rand(n, B, *obs_shape)
    a = torch.as_tensor(rng.integers(0, A, (n, B)))
    r, dn, w = torch.rand(n, B), torch.zeros(n, B), torch.ones(n, B)
    gamma = torch.full((n, 1), d.gamma)

    def update() -> None:
        with torch.no_grad():
            q_next_online = net(o2)
            y = dqn_loss.td_target(r, dn, target(o2), q_next_online if d.double_q else None, gamma)
        td = q_of_actions(net(o), a) - y
        loss = dqn_loss.weighted_loss(td, w)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        clip_grad_norm_per_policy(net, d.grad_clip)
        opt.step()

    update()
    t0 = time.process_time()
    for _ in range(updates):
        update()
    u = (time.process_time() - t0) / (updates * n * B)

    # c_eval: batched greedy evaluation, M games of a short horizon (per game-step)
    M = cfg.run.eval_episodes
    short = resolve(env_name, "ddqn", overrides={"env.horizon": eval_steps})
    batch = make_eval_batch(short.env, M, seed=7)

    @torch.no_grad()
    def act(obs_ENO: Any, alive_EN: Any = None) -> Any:
        e = obs_ENO.shape[0]
        x = torch.as_tensor(obs_ENO).float().reshape(e, n, *obs_shape).transpose(0, 1)
        return net(x).argmax(-1).transpose(0, 1).numpy()

    t0 = time.process_time()
    evaluate_episodes(batch, act, list(range(M)))
    c_eval = (time.process_time() - t0) / (M * eval_steps)
    batch.close()
    return {"c_step": c_step, "u": u, "c_eval": c_eval}


def forward_flops(env_name: str) -> float:
    """FLOPs of one policy-sample's forward through the env's network (``torch.utils.flop_counter``).

    An update per policy-sample costs about 5 forwards: forward + backward (2x) on o, and the online and
    target forwards on o'; ``UPDATE_FORWARDS`` of them.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from suPER.models import BatchedQNet
    from suPER.native.pack_memory import env_spec
    from suPER.resolve import resolve

    cfg = resolve(env_name, "ddqn", overrides={"run.device": "cpu"})
    spec, d = env_spec(cfg), cfg.dqn
    net = BatchedQNet(spec.n_agents, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling,
                      hiddens=d.hiddens)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(torch.rand(spec.n_agents, d.batch_size, *spec.obs_shape))
    return counter.get_total_flops() / (spec.n_agents * d.batch_size)


UPDATE_FORWARDS = 5
"""forward-equivalents of one update per policy-sample (forward + backward on o, two forwards on o')"""


def check_run(env_name: str, steps: int, inputs: dict[str, dict[str, float]]) -> tuple[float, float]:
    """(measured, predicted) CPU-seconds of a real ``dqn.train`` run of ``steps`` env steps (DDQN, paper
    network, 3 evaluations of 2 episodes at the env's horizon), the model's check point."""
    import tempfile

    from suPER.native import dqn
    from suPER.resolve import resolve
    from suPER.runs import RunFolder

    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve(env_name, "ddqn", overrides={"run.device": "cpu", "run.threads": 1, "run.eval_episodes": 2},
                      named={"run.num_timesteps": steps, "run.eval_interval": steps // 2, "run.out": tmp})
        t0 = time.process_time()
        dqn.train(cfg, RunFolder(Path(tmp) / cfg.run_name))
        measured = time.process_time() - t0
    return measured, sum(cost_of(cfg, env_name, "ddqn", inputs)[:2])


def recorded_checks(inputs: dict[str, dict[str, float]], results: Path = Path("results/fig1")) -> list[str]:
    """Predicted CPU-s vs recorded wall time of the finished Figure 1 runs (``results/<grid>/<run>``)."""
    import json

    from suPER.resolve import from_dict

    lines = []
    for manifest in sorted(results.glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        cfg = from_dict(json.loads((manifest.parent / "config.json").read_text()))
        train, ev, S = cost_of(cfg, cfg.env.name, cfg.run.algo, inputs)
        wall, sps = float(m["wall_time_s"]), float(m["env_steps_per_sec"])
        lines.append(f"{m['run_name']}: {S:,} steps, predicted {train + ev:,.0f} CPU-s on one core (training "
                     f"{S / train:.1f} env steps/s); recorded wall {wall:,.0f} s, training {sps:.1f} env steps/s "
                     f"-> the run had {(train + ev) / wall:.2f} of a core on average")
    return lines


def cost_of(cfg: Any, e: str, algo: str, inputs: dict[str, dict[str, float]]) -> tuple[float, float, int]:
    """(training CPU-s, evaluation CPU-s, env steps) of one run's resolved config."""
    S = cfg.run.num_timesteps
    evals = S // cfg.eval_interval + 1  # the step-0 evaluation too
    eval_s = evals * cfg.run.eval_episodes * cfg.env.horizon * inputs[e]["c_eval"]
    if algo in C_BASE:
        return S * C_BASE[algo], eval_s, S
    from suPER.native.pack_memory import env_spec

    d = cfg.dqn
    n = env_spec(cfg).n_agents
    F, L = d.rollout_fragment_length, d.learning_starts
    updates = max(0, S - L) / F
    train = S * inputs[e]["c_step"] + updates * (n * d.batch_size * inputs[e]["u"] + C_REPLAY[e])
    return train, eval_s, S


def grid_cost(grid_file: str, seeds: int, inputs: dict[str, dict[str, float]]) -> dict[str, Any]:
    """``run_cost`` summed over the grid's runs (pending entries skipped), per env, with what the GPU line needs.

    Returns:
        ``per_env[e]``: train / eval CPU-s, env steps, runs, DQN-family env steps, baselines' CPU-s, evaluation
        game-steps, the DQN packs (distinct algo x parameter sharing: the pack keys of ``grid run --pack``)
        and the longest budget; plus totals ``runs``, ``steps``, ``cpu_s`` and the longest run's CPU-s.
    """
    from suPER import campaigns

    grid = campaigns.load_grid(Path(grid_file), seeds=seeds)
    per_env: dict[str, dict[str, Any]] = {}
    longest = 0.0
    for r in grid.runs:
        if r.pending:
            continue
        cfg = r.config()
        train, ev, S = cost_of(cfg, r.env, r.algo, inputs)
        acc = per_env.setdefault(r.env, {"train": 0.0, "eval": 0.0, "steps": 0, "runs": 0, "dqn_steps": 0,
                                         "base_cpu": 0.0, "eval_steps": 0, "packs": set(), "S": 0})
        acc["train"] += train
        acc["eval"] += ev
        acc["steps"] += S
        acc["runs"] += 1
        acc["S"] = max(acc["S"], S)
        acc["eval_steps"] += (S // cfg.eval_interval + 1) * cfg.run.eval_episodes * cfg.env.horizon
        if r.algo in C_BASE:
            acc["base_cpu"] += train + ev
        else:
            acc["dqn_steps"] += S
            acc["packs"].add((r.algo, cfg.dqn.parameter_sharing))
        longest = max(longest, train + ev)
    return {"per_env": per_env, "runs": sum(v["runs"] for v in per_env.values()),
            "cpu_s": sum(v["train"] + v["eval"] for v in per_env.values()),
            "steps": sum(v["steps"] for v in per_env.values()), "longest_s": longest}


ENV_STEP_S = {"pursuit": 1 / 1_218, "battle": 1 / 245, "adversarial_pursuit": 1 / 488}
"""CPU-s of one single-game env step with random actions (benchmarks/README.md, `benchmarks/envs.py`, env-steps
per CPU-s: pursuit 1,218 at e6b2a13; battle 245, adversarial pursuit 488 at b81624c, opponent forward included)"""


def gpu_prediction(grid: dict[str, Any], host_cores: int, fragment_s: float) -> tuple[float, float, float]:
    """(wall, device, host) seconds of the grid packed on one GPU: NOT measured, ``fragment_s`` is assumed.

    Device: each DQN pack (``grid run --pack``: one per env x algo x parameter sharing, all seeds and relay
    settings of a column) does per fragment of F = 4 env steps 4 acting forwards, a TD pass and one update
    for all its runs; on a GPU these small-net kernels are launch-bound, so a fragment costs ``fragment_s``
    whatever R is (the assumption), and the packs run one after another: ``sum_packs S / 4 * fragment_s``.
    Host (``host_cores`` cores, runs independent): every DQN run's env steps (``ENV_STEP_S``) and replay
    (``C_REPLAY``, numpy today), the evaluation episodes' env steps, and the baselines (CPU, unpacked).
    Wall = max(device, host): the two overlap at best, so this is a lower bound of the packed grid.
    """
    device = host = 0.0
    for e, v in grid["per_env"].items():
        device += len(v["packs"]) * v["S"] / 4 * fragment_s
        host += (v["dqn_steps"] * ENV_STEP_S[e] + v["dqn_steps"] / 4 * C_REPLAY[e] + v["eval_steps"] * ENV_STEP_S[e]
                 + v["base_cpu"]) / host_cores
    return max(device, host), device, host


def g_n(env_name: str) -> int:
    """Learners of the env (its spec's agents)."""
    from suPER.native.pack_memory import env_spec
    from suPER.resolve import resolve

    return int(env_spec(resolve(env_name, "ddqn", overrides={"run.device": "cpu"})).n_agents)


def hours(s: float) -> str:
    return f"{s / 3600:,.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="experiments/paper_grid.yaml")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per entry (the original ran 3)")
    parser.add_argument("--measure", action="store_true", help="time c_step, u, c_eval here first")
    parser.add_argument("--check-steps", type=int, default=0,
                        help="also train a real DDQN run this long and compare its CPU time (e.g. 1600)")
    parser.add_argument("--check-env", default="pursuit", choices=ENVS)
    parser.add_argument("--workers", type=int, default=8, help="W for the Ray cluster line")
    parser.add_argument("--worker-cores", type=int, default=16)
    parser.add_argument("--gpu-tflops", type=float, default=20.0,
                        help="ASSUMED sustained fp32 rate of the GPU for the FLOP floor (not measured)")
    parser.add_argument("--fragment-ms", type=float, default=10.0,
                        help="ASSUMED GPU time of one packed fragment: 4 acting forwards + TD + update (not measured); "
                        "the default is the launch-bound end: 4 pack steps x ~415-480 torch ops, a count flat in R "
                        "(benchmarks/packed.py --count-ops, docs/performance.md) x ~5 us per op")
    args = parser.parse_args()
    inputs = {e: dict(v) for e, v in MEASURED.items()}
    if args.measure:
        for e in ENVS:
            t0 = time.time()
            inputs[e] = measure(e)
            print(f"measured {e} in {time.time() - t0:.0f} s wall: {inputs[e]}", flush=True)
    print("inputs (CPU-seconds, one core, 1 torch thread):")
    for e in ENVS:
        v = inputs[e]
        print(f"  {e}: c_step {v['c_step'] * 1e3:.3f} ms/env-step, u {v['u'] * 1e6:.2f} us/policy-sample, "
              f"c_eval {v['c_eval'] * 1e3:.3f} ms/eval-game-step, c_replay {C_REPLAY[e] * 1e3:.1f} ms/fragment")
    flops = {e: forward_flops(e) for e in ENVS}
    for e in ENVS:
        f = UPDATE_FORWARDS * flops[e]
        print(f"  {e}: update {f / 1e6:.2f} MFLOP per policy-sample ({UPDATE_FORWARDS} x forward "
              f"{flops[e] / 1e6:.2f}), achieved {f / inputs[e]['u'] / 1e9:.1f} GFLOP/s on one core")
    g = grid_cost(args.grid, args.seeds, inputs)
    print(f"{args.grid} --seeds {args.seeds}: {g['runs']} runs, {g['steps']:,} training env steps")
    for e, v in g["per_env"].items():
        print(f"  {e}: {v['runs']} runs, {v['steps']:,} steps, training {hours(v['train'])}, evaluation "
              f"{hours(v['eval'])} ({v['eval_steps']:,} game-steps), baselines {hours(v['base_cpu'])} (CPU)")
    cpu = g["cpu_s"]
    print(f"total: {hours(cpu)} of one core")
    print(f"predicted wall, this 2-core machine (unloaded, 2 runs at a time): {hours(cpu / 2)}")
    print(f"predicted wall, a 16-core machine (16 runs at a time): {hours(cpu / 16)}")
    k = args.workers * args.worker_cores
    print(f"predicted wall, Ray cluster of W={args.workers} x {args.worker_cores} cores: "
          f"{hours(max(cpu / k, g['longest_s']))} (the longest run, {hours(g['longest_s'])}, is the floor)")
    wall, device, host = gpu_prediction(g, 16, args.fragment_ms / 1e3)
    print(f"predicted wall, one GPU + 16 host cores, packed (NOT measured; assumes {args.fragment_ms:g} ms of "
          f"device time per packed fragment): {hours(wall)} (device {hours(device)}, host {hours(host)})")
    update_flops = sum(v["dqn_steps"] / 4 * g_n(e) * 32 * UPDATE_FORWARDS * flops[e] for e, v in g["per_env"].items())
    print(f"  device FLOP floor: {update_flops / 1e15:.1f} PFLOP of updates -> {hours(update_flops / (args.gpu_tflops * 1e12))} "
          f"at an ASSUMED sustained {args.gpu_tflops:g} TFLOP/s (not measured)")
    for line in recorded_checks(inputs):
        print("check (recorded, docs/results.md):", line)
    if args.check_steps:
        measured, predicted = check_run(args.check_env, args.check_steps, inputs)
        print(f"check: a real {args.check_env} DDQN run of {args.check_steps} env steps (3 evaluations x 2 episodes) took "
              f"{measured:.1f} CPU-s; the model predicts {predicted:.1f} (ratio {measured / predicted:.2f})")


if __name__ == "__main__":
    main()
