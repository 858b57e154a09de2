"""PackedQNet: R runs x N policies as one net equal to R separate BatchedQNet(N) (forward, export, Adam)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suPER.models import BatchedQNet, clip_grad_norm_per_policy
from suPER.models.packed import PackedQNet

R, N, OBS, A = 3, 2, (7, 7, 3), 5


def _pack(body: str = "conv", dueling: bool = True) -> tuple[PackedQNet, list[BatchedQNet]]:
    torch.manual_seed(0)
    singles = [BatchedQNet(N, OBS, A, body=body, dueling=dueling, hiddens=16) for _ in range(R)]
    packed = PackedQNet(R, N, OBS, A, body=body, dueling=dueling, hiddens=16)
    for r, net in enumerate(singles):
        packed.load_run_state_dict(r, net.state_dict())
    return packed, singles


@pytest.mark.parametrize("body,dueling", [("conv", True), ("conv", False), ("mlp", True)])
@pytest.mark.parametrize("grad", [False, True])
def test_forward_equals_each_run_alone(body: str, dueling: bool, grad: bool) -> None:
    packed, singles = _pack(body, dueling)
    obs_RNBO = torch.rand(R, N, 6, *OBS)
    with torch.set_grad_enabled(grad):
        q_RNBA = packed.forward_runs(obs_RNBO)
        for r, net in enumerate(singles):
            if grad:  # autograd on: the unpacked net's NCHW conv rounds differently (see PackedQNet)
                torch.testing.assert_close(q_RNBA[r], net(obs_RNBO[r]), rtol=0, atol=1e-6)
            else:  # acting: the same kernels, bit for bit
                assert torch.equal(q_RNBA[r], net(obs_RNBO[r]))
    assert q_RNBA.shape == (R, N, 6, A)


def test_run_state_dict_is_an_unpacked_runs_layout() -> None:
    packed, singles = _pack()
    for r, net in enumerate(singles):
        sd = packed.run_state_dict(r)
        assert sd.keys() == net.state_dict().keys()
        fresh = BatchedQNet(N, OBS, A, hiddens=16)
        fresh.load_state_dict(sd)  # strict: same names, same shapes
        for k, v in net.state_dict().items():
            assert torch.equal(sd[k], v), k
    other = _pack()[0]
    target = PackedQNet(R, N, OBS, A, hiddens=16)
    target.copy_run_from(other, 1)
    assert all(torch.equal(target.run_state_dict(1)[k], v) for k, v in other.run_state_dict(1).items())
    assert not torch.equal(target.run_state_dict(0)["fc1.weight"], other.run_state_dict(0)["fc1.weight"])
    with pytest.raises(ValueError, match="expected obs"):
        packed.forward_runs(torch.zeros(R + 1, N, 1, *OBS))


def test_one_adam_over_the_pack_equals_separate_adams_and_exports_per_run() -> None:
    """R runs packed train bit for bit as R packs of one (slice-stable layout), each with its own Adam.

    foreach Adam: CPU's fused Adam runs a vector tail in scalar code, so a slice's last elements round
    differently depending on where the slice sits (seen after 5 steps here); see packed_adam."""
    packed, unpacked = _pack()
    singles = []
    for net in unpacked:
        one = PackedQNet(1, N, OBS, A, hiddens=16)
        one.load_run_state_dict(0, net.state_dict())
        singles.append(one)
    opt = torch.optim.Adam(packed.parameters(), lr=1e-2, foreach=True)
    opts = [torch.optim.Adam(net.parameters(), lr=1e-2, foreach=True) for net in singles]
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        obs_RNBO = torch.rand(R, N, 4, *OBS, generator=gen)
        y_RNBA = torch.randn(R, N, 4, A, generator=gen)
        loss_RN = F.mse_loss(packed.forward_runs(obs_RNBO), y_RNBA, reduction="none").mean((-1, -2))
        opt.zero_grad()
        loss_RN.sum().backward()
        clip_grad_norm_per_policy(packed, 0.5)
        opt.step()
        for r, (net, o) in enumerate(zip(singles, opts)):
            loss_N = F.mse_loss(net(obs_RNBO[r]), y_RNBA[r], reduction="none").mean((-1, -2))
            o.zero_grad()
            loss_N.sum().backward()
            clip_grad_norm_per_policy(net, 0.5)
            o.step()
            assert torch.equal(loss_RN[r].detach(), loss_N.detach())
    for r, (net, o) in enumerate(zip(singles, opts)):
        for k, v in net.state_dict().items():
            assert torch.equal(packed.run_state_dict(r)[k], v), k
        exported = packed.run_adam_state(opt, r)
        fresh_net = BatchedQNet(N, OBS, A, hiddens=16)
        fresh_opt = torch.optim.Adam(fresh_net.parameters(), lr=1e-2, foreach=True)
        fresh_opt.load_state_dict(exported)  # an unpacked run's optimizer accepts it
        for s_exp, s_ref in zip(exported["state"].values(), o.state_dict()["state"].values()):
            assert torch.equal(s_exp["exp_avg_sq"], s_ref["exp_avg_sq"])
            assert float(s_exp["step"]) == float(s_ref["step"]) == 5.0
    # and back: a run's exported state written into another pack's slot
    packed2 = PackedQNet(R, N, OBS, A, hiddens=16)
    opt2 = torch.optim.Adam(packed2.parameters(), lr=1e-2, foreach=True)
    packed2.load_run_adam_state(opt2, 2, packed.run_adam_state(opt, 2))
    back = packed2.run_adam_state(opt2, 2)
    for s_a, s_b in zip(back["state"].values(), packed.run_adam_state(opt, 2)["state"].values()):
        assert torch.equal(s_a["exp_avg"], s_b["exp_avg"]) and float(s_a["step"]) == float(s_b["step"])
