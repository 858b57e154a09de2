"""Packed Q-networks: R runs x N policies of the paper's network as one ``BatchedQNet`` of R*N policies.

Why: a packed run (``super-marl train --num-seeds R --pack``) trains R independent runs in one process.
The R*N networks share no parameter, so they are exactly a ``BatchedQNet`` with ``P = R*N`` (grouped
convs with ``groups = R*N``, ``baddbmm`` over the policy axis): run ``r``'s policy ``n`` is policy
``r*N + n``. Acting, TD and the update of all runs are then one call each.

Layout: every parameter of a ``BatchedQNet`` carries the policy axis folded into dim 0, so run ``r``'s
part of a parameter is ``param.unflatten(0, (R, -1))[r]``, which has exactly the shape of the same
parameter of a ``BatchedQNet(N)``. ``run_state_dict`` / ``load_run_state_dict`` use that view to
export/import one run in the layout of an unpacked run (a packed run's checkpoint is an unpacked run's
checkpoint), and ``run_adam_state`` / ``load_run_adam_state`` do the same for an Adam optimizer over
the packed parameters: Adam is elementwise, so the slice of its moments is what R separate Adams hold.

Bit-identity: oneDNN's NCHW grouped conv (``BatchedQNet``'s layout with autograd on) rounds a group
differently for different group counts (~1e-9 relative), so ``PackedQNet`` uses the channels-last layout
in training too (``slice_stable``), which measured bit-identical per slice for any R (forward and
gradients, CPU, torch 2.13). A pack of R runs is then bit-for-bit R packs of one; against an unpacked
``BatchedQNet(N)`` it agrees to rounding in training and exactly when acting (``tests/models/test_packed.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from suPER.models.qnet import BatchedQNet, BodyChoice, copy_into_slices


class PackedQNet(BatchedQNet):
    """``R`` runs x ``N`` policies of the paper's dueling network, one ``BatchedQNet`` of ``R*N`` policies.

    ``forward`` keeps ``BatchedQNet``'s ``[P, B, *O] -> [P, B, A]`` with ``P = R*N`` (so the trainer's TD
    code takes either); ``forward_runs`` takes ``[R, N, B, *O]``. ``slice_stable``: each run's slice is
    computed bit-identically whatever R is (and equals ``PackedQNet(1, N)``), so a pack of R runs is R
    packs of one, bit for bit.

    Args:
        n_runs: R.
        n_policies_per_run: N (1 for parameter-sharing runs).
        obs_shape: one observation: (H, W, C) for the conv body, any shape for the mlp body.
        n_actions: actions per policy.
        body: ``"conv"``, ``"mlp"`` or ``"auto"`` (``suPER.models.qnet.resolve_body``).
        dueling: dueling heads.
        hiddens: head width.
        obs_scale: factor applied to the observations before the first layer (``EnvSpec.obs_scale``).
    """

    def __init__(self, n_runs: int, n_policies_per_run: int, obs_shape: tuple[int, ...], n_actions: int,
                 body: BodyChoice = "conv", dueling: bool = True, hiddens: int = 256, obs_scale: float = 1.0) -> None:
        if n_runs < 1 or n_policies_per_run < 1:
            raise ValueError(f"n_runs and n_policies_per_run must be >= 1, got {n_runs}, {n_policies_per_run}")
        self.n_runs, self.n_per_run = int(n_runs), int(n_policies_per_run)
        super().__init__(self.n_runs * self.n_per_run, obs_shape, n_actions, body=body, dueling=dueling,
                         hiddens=hiddens, obs_scale=obs_scale)

    slice_stable = True

    def forward_runs(self, obs_RNBO: torch.Tensor) -> torch.Tensor:
        """Q-values of every run's policies. Args: obs_RNBO ``[R, N, B, *O]``. Returns: ``q_RNBA``."""
        R, N, B = obs_RNBO.shape[:3]
        if (R, N) != (self.n_runs, self.n_per_run):
            raise ValueError(f"expected obs [R={self.n_runs}, N={self.n_per_run}, B, ...], got {tuple(obs_RNBO.shape)}")
        return self(obs_RNBO.reshape(R * N, B, *obs_RNBO.shape[3:])).reshape(R, N, B, -1)

    def unpacked(self) -> BatchedQNet:
        """A fresh ``BatchedQNet(N)`` with this net's configuration (weights: a fresh init)."""
        return BatchedQNet(self.n_per_run, self.obs_shape, self.n_actions, body=self.body, dueling=self.dueling,
                           hiddens=self.hiddens, obs_scale=self.obs_scale)

    def run_slice(self, param: torch.Tensor, r: int) -> torch.Tensor:
        """View of run ``r``'s part of a parameter (or a same-shaped tensor), shaped as in ``BatchedQNet(N)``."""
        if not 0 <= r < self.n_runs:
            raise IndexError(f"run index {r} out of range for R={self.n_runs}")
        return param.unflatten(0, (self.n_runs, -1))[r]

    def run_state_dict(self, r: int) -> dict[str, torch.Tensor]:
        """Run ``r``'s weights as the ``state_dict()`` of a ``BatchedQNet(N)`` (detached copies)."""
        return {name: self.run_slice(p.detach(), r).clone() for name, p in self.named_parameters()}

    def load_run_state_dict(self, r: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Overwrite run ``r``'s weights with a ``BatchedQNet(N).state_dict()`` (inverse of ``run_state_dict``)."""
        params = dict(self.named_parameters())
        if params.keys() != state_dict.keys():
            raise KeyError(f"run state dict does not match this net: missing {sorted(params.keys() - state_dict.keys())}, "
                           f"unexpected {sorted(state_dict.keys() - params.keys())}")
        copy_into_slices(params, state_dict, lambda p: self.run_slice(p, r))

    @torch.no_grad()
    def copy_run_from(self, other: PackedQNet, r: int) -> None:
        """Copy run ``r``'s weights of ``other`` (same layout) into this net: a per-run target sync."""
        for dst, src in zip(self.parameters(), other.parameters()):
            self.run_slice(dst, r).copy_(other.run_slice(src, r))

    # ------------------------------------------------------------------ optimizer state per run

    def run_adam_state(self, optimizer: torch.optim.Optimizer, r: int) -> dict[str, Any]:
        """Run ``r``'s part of an Adam ``state_dict()`` over ``self.parameters()``, as R separate Adams hold it.

        Args:
            optimizer: Adam with one param group holding exactly this net's parameters, in order.
            r: run index.

        Returns:
            A ``state_dict`` that ``Adam(BatchedQNet(N).parameters()).load_state_dict`` accepts (a
            ``PackedAdam``'s group ``lr`` replaced by run ``r``'s).
        """
        sd = optimizer.state_dict()
        state = {i: {k: (self.run_slice(v, r).clone() if k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
                         else v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
                 for i, s in sd["state"].items()}
        groups = [dict(g) for g in sd["param_groups"]]
        lr_R = getattr(optimizer, "lr_R", None)
        if lr_R is not None:  # a PackedAdam: the run's own learning rate, as its unpacked Adam would hold
            for g in groups:
                g["lr"] = lr_R[r]
        return {"state": state, "param_groups": groups}

    def load_run_adam_state(self, optimizer: torch.optim.Optimizer, r: int, run_state: Mapping[str, Any]) -> None:
        """Write one run's Adam state (``run_adam_state`` layout) into run ``r``'s slice of ``optimizer``.

        The step counter is shared by the pack (every run updates at the same fragments), so it is taken
        from ``run_state``; all runs of a pack must agree on it (the packed trainer checks).
        """
        params = list(self.parameters())
        for i, p in enumerate(params):
            src = run_state["state"].get(i)
            if src is None:
                continue
            st = optimizer.state[p]
            if not st:  # lazily initialised by Adam: build the zero state the first step would make
                st["step"] = torch.zeros((), dtype=torch.float32, device=p.device) if torch.is_tensor(src["step"]) \
                    else 0.0
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            for k in ("exp_avg", "exp_avg_sq"):
                self.run_slice(st[k], r).copy_(src[k])
            if torch.is_tensor(st["step"]):
                st["step"].copy_(torch.as_tensor(src["step"], dtype=st["step"].dtype))
            else:
                st["step"] = float(src["step"])


class PackedAdam(torch.optim.Adam):
    """Adam over a pack's stacked parameters with one learning rate per run.

    Runs are folded into dim 0 of every parameter, so per-run param groups are impossible; but Adam is
    elementwise and its learning rate enters only the last operation,

        p <- p + s_r * m / (sqrt(v / (1 - beta2^t)) + eps),   s_r = -lr_r / (1 - beta1^t),

    so a step with a per-run step size ``s_r`` broadcast over the run axis (``p.unflatten(0, (R, -1))``)
    is R separate Adams with their own learning rates. When every run has the same rate this is
    ``torch.optim.Adam`` itself (``super().step()``: CPU foreach / CUDA fused, bit for bit as before).
    Otherwise ``step`` runs the foreach path of torch's ``_multi_tensor_adam`` (no weight decay, amsgrad
    or maximize) with that last ``addcdiv`` per run: ``p + (s_r * m) / denom``, the same float32
    operations in the same order as torch's scalar ``addcdiv`` on CPU, so on CPU each run matches the
    same run packed alone (tested); on CUDA it differs from the fused kernel by float32 rounding.

    State and ``state_dict`` are ``torch.optim.Adam``'s (one step counter per tensor, shared by the pack);
    the group's ``lr`` is run 0's, and ``lr_R`` holds every run's.

    Args:
        params: the pack's parameters (dim 0 = runs x policies, ``PackedQNet``'s layout).
        lr_R: learning rate of each run, ``R`` values.
        eps: Adam epsilon (one for the pack).
        foreach, fused: as ``torch.optim.Adam`` (used when the rates are all equal).
    """

    def __init__(self, params: Any, lr_R: Sequence[float], eps: float, foreach: bool | None = None,
                 fused: bool | None = None) -> None:
        if not lr_R:
            raise ValueError("PackedAdam: lr_R needs one learning rate per run")
        self.lr_R = [float(x) for x in lr_R]
        super().__init__(params, lr=self.lr_R[0], eps=eps, foreach=foreach, fused=fused)

    @property
    def uniform(self) -> bool:
        """Every run has the same learning rate (then ``step`` is ``torch.optim.Adam.step``)."""
        return len(set(self.lr_R)) == 1

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One Adam step of every run (per-run step sizes unless the rates are all equal)."""
        if self.uniform:
            return super().step(closure)
        if closure is not None:
            raise ValueError("PackedAdam: closures are not supported with per-run learning rates")
        R = len(self.lr_R)
        for group in self.param_groups:
            if group["weight_decay"] or group["amsgrad"] or group["maximize"]:
                raise ValueError("PackedAdam: per-run learning rates support plain Adam only")
            beta1, beta2 = group["betas"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                st = self.state[p]
                if not st:  # what torch.optim.Adam's first step makes (non-capturable, non-fused)
                    st["step"] = torch.tensor(0.0, dtype=torch.float32)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            steps = [self.state[p]["step"] for p in params]
            torch._foreach_add_(steps, 1)
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, 1 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, [(1 - beta2 ** float(t)) ** 0.5 for t in steps])
            torch._foreach_add_(denom, group["eps"])
            for p, m_p, d_p, t in zip(params, m, denom, steps):
                bc1 = 1 - beta1 ** float(t)
                s_R = torch.tensor([(lr / bc1) * -1 for lr in self.lr_R], dtype=p.dtype, device=p.device)
                p_R, m_R, d_R = (x.unflatten(0, (R, -1)) for x in (p, m_p, d_p))
                p_R.addcdiv_(m_R * s_R.reshape(R, *[1] * (p_R.dim() - 1)), d_R)
        return None


def packed_adam(params: Any, lr: float | Sequence[float], eps: float, device: torch.device) -> PackedAdam:
    """The optimizer of a pack: one Adam over the stacked parameters (elementwise, so R separate Adams).

    On CPU the ``foreach`` implementation: CPU's ``fused`` Adam runs the tail of a tensor that does not fill
    a vector register in scalar code, which rounds a run's last elements differently depending on where its
    slice sits in the stacked tensor (measured: a differing bias element after 5 steps), so a pack would no
    longer train bit for bit as its runs alone. On CUDA the fused kernel (same arithmetic for every element)
    while the runs share one learning rate; ``PackedAdam``'s foreach step with per-run step sizes otherwise.

    Args:
        params: the pack's parameters.
        lr: learning rate of each run (``R`` values), or one for a pack of one.
        eps: Adam epsilon.
        device: where the parameters live.
    """
    lr_R = [float(lr)] if isinstance(lr, (int, float)) else list(lr)
    if device.type == "cuda":
        return PackedAdam(params, lr_R, eps=eps, fused=True)
    return PackedAdam(params, lr_R, eps=eps, foreach=True)
