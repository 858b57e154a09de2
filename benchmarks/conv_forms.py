"""The paper network's convs as a grouped conv (the library) vs im2col + baddbmm, and the CPU's fp32 ceiling.

Usage: python benchmarks/conv_forms.py [--envs pursuit battle adversarial_pursuit] [--threads 1] [--reps 200] [--quick]

``BatchedQNet`` runs an env's N policies of the paper's dueling conv network (three 2x2 convs, dense layers
as ``baddbmm``) in one call, the convs as one grouped conv (``groups=N``; NCHW with autograd on,
channels-last without). The alternative timed here writes each conv as im2col (the ``k*k`` shifted views
concatenated on the channel axis, NHWC per policy) + one ``baddbmm`` over the policy axis, on the same
weights and inputs. Cases:

- act: greedy forward, B = 1 row per policy (a training step's action choice);
- eval: greedy forward, B = 20 rows per policy (a batched evaluation of 20 games);
- update: forward + backward at the paper's batch B = 32 per policy (one learner update's online pass).

Prints CPU milliseconds per call (``time.process_time``), the ratio ``grouped/bmm``, the library path's
achieved GFLOP/s (2 x multiply-adds of convs and dense layers; forward + backward counted as 3 forwards),
that rate as a fraction of a large single-thread SGEMM's rate (the practical fp32 ceiling of this core), and
the largest difference of the two paths' Q-values. Why: the 10x batched/sequential evaluation target
needs the batched forward to run above that ceiling on a 2-core Zen1 (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from suPER import config as C
from suPER.models.qnet import BatchedQNet
from suPER.opponents import make_env
from suPER.resolve import resolve
from suPER.runs import package_versions


def im2col_bmm_forward(net: BatchedQNet, obs_PBO: torch.Tensor) -> torch.Tensor:
    """``net.forward`` with each conv as im2col + one ``baddbmm`` over the policy axis (same weights)."""
    P, B = obs_PBO.shape[:2]
    x = obs_PBO
    for conv in net.convs:
        k = conv.weight.shape[-1]
        h, w, c = x.shape[2:]
        ho, wo = h - k + 1, w - k + 1
        cols = torch.cat([x[:, :, i:i + ho, j:j + wo] for i in range(k) for j in range(k)], dim=-1)
        w_PKO = conv.weight.unflatten(0, (P, -1)).permute(0, 3, 4, 2, 1).reshape(P, k * k * c, -1)
        x = F.relu_(torch.baddbmm(conv.bias.view(P, 1, -1), cols.reshape(P, B * ho * wo, k * k * c), w_PKO))
        x = x.view(P, B, ho, wo, w_PKO.shape[-1])
    x = x.permute(0, 1, 4, 2, 3).reshape(P, B, net.fc1.weight.shape[1])  # each policy's NCHW flatten
    f = net.fc2(F.relu_(net.fc1(x)))
    a = net.adv_out(F.relu_(net.adv_hidden(f)))
    v = net.val_out(F.relu_(net.val_hidden(f)))
    return v + (a - a.mean(-1, keepdim=True))


def sgemm_gflops(reps: int = 10, n: int = 1024) -> float:
    """GFLOP/s of an ``n x n x n`` float32 matmul on this thread: the practical fp32 ceiling."""
    a, b = torch.rand(n, n), torch.rand(n, n)
    return 2 * n ** 3 / (cpu_ms(lambda: a @ b, reps) * 1e-3) / 1e9


def forward_macs(net: BatchedQNet) -> int:
    """Multiply-adds of one forward of one row of one policy (convs and dense layers)."""
    h, w, _ = net.obs_shape
    macs = 0
    for conv in net.convs:
        out_ch, in_ch, k, _ = conv.weight.shape
        h, w = h - k + 1, w - k + 1
        macs += h * w * (out_ch // net.n_policies) * in_ch * k * k
    for lin in (net.fc1, net.fc2, net.adv_hidden, net.adv_out, net.val_hidden, net.val_out):
        macs += lin.weight.shape[1] * lin.weight.shape[2]
    return macs


def cpu_ms(fn: Callable[[], object], reps: int) -> float:
    """CPU milliseconds per call of ``fn``, after 5 warm-up calls."""
    for _ in range(5):
        fn()
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps * 1e3


def call(forward: Callable[[BatchedQNet, torch.Tensor], torch.Tensor], net: BatchedQNet, obs: torch.Tensor,
         grad: bool) -> Callable[[], object]:
    """One timed call: the forward alone, or with ``grad`` a forward + backward of the summed Q-values."""
    if not grad:
        return lambda: forward(net, obs)

    def step() -> None:
        net.zero_grad(set_to_none=True)
        forward(net, obs).sum().backward()
    return step


def bench_env(env: str, reps: int) -> list[tuple[str, float, float, float, float]]:
    """Rows (case, grouped ms, bmm ms, grouped GFLOP/s, max |dQ|) for one env's network."""
    spec = make_env(resolve(env, "ddqn").env, seed=0).spec
    d = resolve(env, "ddqn").dqn
    torch.manual_seed(0)
    net = BatchedQNet(spec.n_agents, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling,
                      hiddens=d.hiddens)
    macs = forward_macs(net)
    rows = []
    for case, batch, grad in (("act B=1", 1, False), ("eval B=20", 20, False), ("update B=32", 32, True)):
        obs = torch.rand(spec.n_agents, batch, *spec.obs_shape)

        with torch.set_grad_enabled(grad):
            diff = (im2col_bmm_forward(net, obs) - net(obs)).abs().max().item()
            old = cpu_ms(call(BatchedQNet.forward, net, obs, grad), reps)
            new = cpu_ms(call(im2col_bmm_forward, net, obs, grad), reps)
        gflops = 2 * macs * spec.n_agents * batch * (3 if grad else 1) / (old * 1e-3) / 1e9
        rows.append((case, old, new, gflops, diff))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=list(C.ENV_NAMES), choices=C.ENV_NAMES)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="pursuit only, 20 reps (< 1 min)")
    args = ap.parse_args()
    envs, reps = (["pursuit"], 20) if args.quick else (args.envs, args.reps)
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {args.threads}, "
          f"torch {package_versions(['torch'])['torch']}, {time.strftime('%Y-%m-%d %H:%M')}")
    ceiling = sgemm_gflops()
    print(f"fp32 ceiling: 1024^3 SGEMM {ceiling:.1f} GFLOP/s on one thread")
    print("| env | case | grouped conv ms | im2col+bmm ms | grouped/bmm | grouped GFLOP/s | of SGEMM | max abs dQ |")
    print("|---|---|---|---|---|---|---|---|")
    for env in envs:
        for case, old, new, gflops, diff in bench_env(env, reps):
            print(f"| {env} | {case} | {old:.3f} | {new:.3f} | {old / new:.2f}x | {gflops:.1f} | "
                  f"{gflops / ceiling:.0%} | {diff:.1e} |")
    print("(update: forward + backward counted as 3 forwards)")


if __name__ == "__main__":
    main()
