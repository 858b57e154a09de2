"""Replay memory per run at full buffers, and add / sample speed, plain (MultiAgentPER) vs compact (CompactPER).

For each env it fills both layouts with the same rows, the way the native DQN trainer stores them: a rollout
fragment of ``rollout_fragment_length`` steps of real observations (random play on the real game, deaths and
episode ends included) per ``add`` of own rows, then SUPER's relayed copies (each row relayed with probability
``--bandwidth`` to every teammate, sender as stream), until every buffer holds ``dqn.buffer_size`` rows.
Memory is ``nbytes`` (every allocated array: observations, trees, pointers, the compact pool and palette).
Speed: time of the adds of one fragment and of one ``sample(batch_size) + update_priorities`` at the
trainer's batch size, on the full buffers; ratios compact / plain (< 1 is faster).

    python benchmarks/replay_memory.py            # the three envs, their full buffer sizes (~2-4 min, ~3 GB RAM)
    python benchmarks/replay_memory.py --quick    # smoke: small buffers, numbers mean nothing
    python benchmarks/replay_memory.py --trainer-steps 3000 --envs battle   # the whole trainer instead, both layouts

``--trainer-steps N`` instead trains the native DDQN with SUPER quantile (b = 0.1) for N env steps with each layout
(same seed, alternating, ``--trainer-reps`` times, one torch thread, two evaluations of one episode) and prints
the process CPU seconds of each ``train`` call and ``compact/plain trainer CPU time (<env>): <x>x``. CPU time, not
wall time, so a busy machine changes the ratio less; the two layouts sample the same rows, so the runs' final
losses must be equal (printed).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from suPER import config as C
from suPER.opponents import make_env
from suPER.replay import CompactPER, MultiAgentPER
from suPER.resolve import resolve


def fragments(name: str, n_frames: int, seed: int = 0) -> tuple[object, list[tuple[np.ndarray, ...]]]:
    """Real transitions of ``name`` (random play): a list of (obs_TNO, next_TNO, valid_TN, done_TN) fragments."""
    cfg = resolve(name, overrides={"env.opponent": "random"} if name != "pursuit" else {})
    env = make_env(cfg.env, seed=seed)
    spec, T = env.spec, cfg.dqn.rollout_fragment_length
    rng = np.random.default_rng(seed)
    obs, alive = env.reset(), np.ones(spec.n_agents, bool)
    out, steps = [], 0
    while steps < n_frames:
        o, nx = (np.zeros((T, spec.n_agents, *spec.obs_shape), np.float32) for _ in range(2))
        v, d = np.zeros((T, spec.n_agents), bool), np.zeros((T, spec.n_agents), np.float32)
        for t in range(T):
            res = env.step(rng.integers(0, spec.n_actions, spec.n_agents))
            o[t], nx[t], v[t], d[t] = obs, res.obs_NO, alive, res.terminated_N | res.truncated_N
            if res.episode_over:
                obs, alive = env.reset(), np.ones(spec.n_agents, bool)
            else:
                obs, alive = res.obs_NO, res.alive_N
        out.append((o, nx, v, d))
        steps += T
    env.close()
    return cfg, out


def fill(buf: MultiAgentPER, frags: list, capacity: int, bandwidth: float, rng: np.random.Generator,
         compact: bool) -> float:
    """Add fragments (cycling through them) until full; returns seconds per fragment (own + relayed adds)."""
    n = buf.n_policies
    t_add, n_add, i = 0.0, 0, 0
    while (buf.sizes < capacity).any() or i < len(frags):
        o, nx, v, d = frags[i % len(frags)]
        i += 1
        t_K, n_K = np.nonzero(v)
        own = (n_K, o[t_K, n_K], np.zeros(len(n_K), np.int64), np.zeros(len(n_K), np.float32), nx[t_K, n_K], d[t_K, n_K])
        sel = rng.random(len(n_K)) < bandwidth
        s = np.repeat(np.flatnonzero(sel), n - 1)
        recv = (n_K[s] + np.tile(np.arange(1, n), sel.sum())) % n
        rel = (recv, o[t_K[s], n_K[s]], np.zeros(len(s), np.int64), np.zeros(len(s), np.float32), nx[t_K[s], n_K[s]],
               d[t_K[s], n_K[s]])
        t0 = time.perf_counter()
        if compact:
            buf.add(*own, stream_K=n_K)
            buf.add(*rel, stream_K=n_K[s])
        else:
            buf.add(*own)
            buf.add(*rel)
        t_add += time.perf_counter() - t0
        n_add += 1
    return t_add / n_add


def sample_time(buf: MultiAgentPER, batch: int, reps: int) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(reps):
        b = buf.sample(batch)
        buf.update_priorities(b.indices, rng.random(b.indices.shape))
    return (time.perf_counter() - t0) / reps


def trainer_cpu(name: str, steps: int, layout: str, out: str) -> tuple[float, float]:
    """(process CPU seconds, final loss) of one native DDQN + SUPER quantile run of ``steps`` env steps."""
    import shutil

    from suPER.native.dqn import train
    from suPER.runs import RunFolder, read_metrics

    cfg = resolve(name, overrides={"run.num_timesteps": steps, "run.eval_points": 1, "run.eval_episodes": 1,
                                   "run.threads": 1, "run.device": "cpu", "run.seed": 1, "run.progress": False,
                                   "relay.enabled": True, "relay.mode": "quantile", "relay.bandwidth": 0.1,
                                   "run.replay_layout": layout})
    shutil.rmtree(out, ignore_errors=True)
    folder = RunFolder(Path(out))
    folder.path.mkdir(parents=True)
    t0 = time.process_time()
    train(cfg, folder)
    cpu = time.process_time() - t0
    return cpu, float(read_metrics(folder.metrics)["loss"][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small buffers (smoke test)")
    ap.add_argument("--envs", nargs="+", default=list(C.PAPER_ENVS))
    ap.add_argument("--bandwidth", type=float, default=0.1, help="fraction of rows relayed to every teammate")
    ap.add_argument("--reps", type=int, default=200, help="sample + update_priorities repetitions")
    ap.add_argument("--trainer-steps", type=int, default=0, help="also time the whole trainer for this many env steps")
    ap.add_argument("--trainer-reps", type=int, default=2, help="runs per layout (alternating)")
    args = ap.parse_args()
    if args.trainer_steps:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for name in args.envs:
                cpu: dict[str, list[float]] = {"plain": [], "compact": []}
                losses: dict[str, float] = {}
                for _ in range(args.trainer_reps):
                    for layout in ("plain", "compact"):
                        c, losses[layout] = trainer_cpu(name, args.trainer_steps, layout, f"{tmp}/{name}_{layout}")
                        cpu[layout].append(c)
                print(f"{name}: {args.trainer_steps} env steps, CPU s plain {cpu['plain']} compact {cpu['compact']}; "
                      f"final loss plain {losses['plain']:.6g} compact {losses['compact']:.6g}")
                print(f"compact/plain trainer CPU time ({name}): {min(cpu['compact']) / min(cpu['plain']):.3f}x",
                      flush=True)
        return
    rows = []
    for name in args.envs:
        cfg, frags = fragments(name, 400 if args.quick else 3000)
        spec = make_env(cfg.env).spec
        cap = 500 if args.quick else cfg.dqn.buffer_size
        res = {}
        for layout, cls in (("plain", MultiAgentPER), ("compact", CompactPER)):
            kw = {"n_streams": spec.n_agents} if cls is CompactPER else {}
            buf = cls(spec.n_agents, cap, spec.obs_shape, spec.obs_dtype, rng=np.random.default_rng(1), **kw)
            add_s = fill(buf, frags, cap, args.bandwidth, np.random.default_rng(2), cls is CompactPER)
            smp_s = sample_time(buf, cfg.dqn.batch_size, 20 if args.quick else args.reps)
            extra = buf.extra_frames / buf.sizes.sum() if cls is CompactPER else 1.0
            res[layout] = (buf.nbytes, add_s, smp_s, extra)
            del buf
        (pb, pa, ps, _), (cb, ca, cs, ce) = res["plain"], res["compact"]
        rows.append((name, spec.n_agents, cap, pb / 1e9, cb / 1e9, cb / pb, ce, ca / pa, cs / ps, pa * 1e3, ps * 1e3))
    print(f"bandwidth {args.bandwidth}, batch = dqn.batch_size per policy; times: add per fragment (own + relayed), "
          f"sample + update_priorities per update")
    print(f"{'env':22s} {'P':>2s} {'capacity':>8s} {'plain GB':>9s} {'compact GB':>10s} {'ratio':>6s} "
          f"{'unlinked':>8s} {'add x':>6s} {'sample x':>8s} {'plain add ms':>12s} {'plain sample ms':>15s}")
    for r in rows:
        print(f"{r[0]:22s} {r[1]:2d} {r[2]:8d} {r[3]:9.3f} {r[4]:10.3f} {r[5]:6.3f} {r[6]:8.3f} {r[7]:6.2f} "
              f"{r[8]:8.2f} {r[9]:12.3f} {r[10]:15.3f}")


if __name__ == "__main__":
    main()
