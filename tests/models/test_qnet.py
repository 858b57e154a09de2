"""BatchedQNet == P separate ReferenceQNets: outputs, gradients, optimiser steps, export."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from suPER.models import (
    BatchedQNet,
    ReferenceQNet,
    batched_from_reference,
    clip_grad_norm_per_policy,
    conv_flat_size,
    copy_reference_into,
    reference_from_batched,
    resolve_body,
)
from suPER.models.packed import PackedQNet

# (obs_shape HWC, n_actions): pursuit, battle, adversarial pursuit
ENVS = [((7, 7, 3), 5), ((13, 13, 5), 21), ((10, 10, 5), 13)]
ENV_IDS = ["pursuit", "battle", "adv_pursuit"]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(1234)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    # tiny nets: intra-op threads only add OpenMP spin/sync overhead (severe on a busy 2-core box)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _refs(
    p: int, shape: tuple[int, int, int], n_actions: int, body: str, dueling: bool
) -> list[ReferenceQNet]:
    return [ReferenceQNet(shape, n_actions, body=body, dueling=dueling) for _ in range(p)]


def _ref_q(refs: list[ReferenceQNet], obs_PBO: torch.Tensor) -> torch.Tensor:
    return torch.stack([net(obs_PBO[i]) for i, net in enumerate(refs)])


def _grads_as_reference(batched: BatchedQNet, p: int) -> dict[str, torch.Tensor]:
    """Policy p's gradient, laid out as the reference net's state dict (via the weight mapping)."""
    holder = BatchedQNet(
        batched.n_policies, batched.obs_shape, batched.n_actions, batched.body, batched.dueling
    ).to(batched.fc1.weight.dtype)
    holder.load_state_dict({name: prm.grad for name, prm in batched.named_parameters()})
    return reference_from_batched(holder, p).state_dict()


# ------------------------------------------------------------------------------------------ forward


@pytest.mark.parametrize("n_policies", [1, 3])
@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
@pytest.mark.parametrize("body", ["conv", "mlp"])
@pytest.mark.parametrize(("shape", "n_actions"), ENVS, ids=ENV_IDS)
def test_batched_equals_separate_reference_nets(shape, n_actions, body, dueling, n_policies) -> None:
    refs = _refs(n_policies, shape, n_actions, body, dueling)
    batched = batched_from_reference(refs)
    obs = torch.rand(n_policies, 6, *shape)
    q = batched(obs)
    assert q.shape == (n_policies, 6, n_actions)
    assert (q - _ref_q(refs, obs)).abs().max().item() < 1e-5
    with torch.inference_mode():  # the no-autograd path (acting, targets) computes the same
        assert (batched(obs) - q).abs().max().item() < 1e-6
    # and back: each policy extracted again is the same function
    for p, net in enumerate(refs):
        assert (reference_from_batched(batched, p)(obs[p]) - net(obs[p])).abs().max().item() < 1e-6


def test_fresh_init_equals_sequentially_built_reference_nets() -> None:
    for body in ("conv", "mlp"):
        torch.manual_seed(7)
        batched = BatchedQNet(3, (7, 7, 3), 5, body=body)
        torch.manual_seed(7)
        refs = _refs(3, (7, 7, 3), 5, body, True)
        for p, net in enumerate(refs):
            got = reference_from_batched(batched, p).state_dict()
            for name, value in net.state_dict().items():
                assert torch.equal(got[name], value), (body, p, name)


def test_init_distributions() -> None:
    net = ReferenceQNet((13, 13, 5), 21)
    # conv body: PyTorch defaults, U(+-1/sqrt(fan_in)) for weight and bias
    for layer in [*[m for m in net.model if isinstance(m, torch.nn.Conv2d)], net.model[7], net.policy_fn]:
        fan_in = layer.weight[0].numel()
        bound = 1 / math.sqrt(fan_in)
        assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
        assert layer.weight.abs().max() > 0.9 * bound
    # heads: xavier uniform, zero bias
    for slim in [*net.advantage_module, *net.value_module]:
        lin = slim._model[0]
        bound = math.sqrt(6 / (lin.in_features + lin.out_features))
        assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.9 * bound
        assert torch.count_nonzero(lin.bias) == 0
    # mlp body: RLlib normc(1.0) rows, zero bias
    mlp = ReferenceQNet((7, 7, 3), 5, body="mlp")
    for slim in mlp._hidden_layers:
        lin = slim._model[0]
        assert torch.allclose(lin.weight.norm(dim=1), torch.ones(lin.out_features), atol=1e-5)
        assert torch.count_nonzero(lin.bias) == 0


def test_shapes_and_sizes() -> None:
    assert [conv_flat_size(s) for s, _ in ENVS] == [1024, 6400, 3136]
    for (shape, n_actions), flat in zip(ENVS, [1024, 6400, 3136]):
        net = BatchedQNet(2, shape, n_actions)
        assert net.fc1.weight.shape == (2, flat, 64)
        assert net.convs[0].weight.shape == (2 * 32, shape[2], 2, 2)
        assert net(torch.rand(2, 3, *shape)).shape == (2, 3, n_actions)
        assert net(torch.rand(2, 0, *shape)).shape == (2, 0, n_actions)
        assert ReferenceQNet(shape, n_actions).model[7].in_features == flat
    mlp = BatchedQNet(2, (7, 7, 3), 5, body="mlp", dueling=False)
    assert mlp.fc1.weight.shape == (2, 147, 64) and mlp.adv_hidden.weight.shape == (2, 64, 256)
    assert not hasattr(mlp, "val_hidden")
    with pytest.raises(ValueError, match="expected obs of shape"):
        mlp(torch.rand(3, 4, 7, 7, 3))
    with pytest.raises(ValueError, match="expected obs of shape"):
        mlp(torch.rand(2, 4, 7, 7, 4))
    with pytest.raises(ValueError, match="H, W > 3"):
        BatchedQNet(2, (3, 7, 3), 5)


def test_reference_parameter_names_follow_rllib() -> None:
    keys = list(ReferenceQNet((7, 7, 3), 5).state_dict())
    assert keys == [
        *[f"model.{i}.{t}" for i in (0, 2, 4, 7) for t in ("weight", "bias")],
        "policy_fn.weight", "policy_fn.bias",
        "advantage_module.dueling_A_0._model.0.weight", "advantage_module.dueling_A_0._model.0.bias",
        "advantage_module.A._model.0.weight", "advantage_module.A._model.0.bias",
        "value_module.dueling_V_0._model.0.weight", "value_module.dueling_V_0._model.0.bias",
        "value_module.V._model.0.weight", "value_module.V._model.0.bias",
    ]  # fmt: skip


def test_dueling_identity() -> None:
    net = BatchedQNet(3, (10, 10, 5), 13)
    obs = torch.rand(3, 8, 10, 10, 5)
    q = net(obs)
    v = net.val_out(F.relu(net.val_hidden(net.features(obs))))
    assert v.shape == (3, 8, 1)
    assert (q - v).mean(-1).abs().max().item() < 1e-5
    # the non-dueling net is the raw advantage branch
    plain = BatchedQNet(3, (10, 10, 5), 13, dueling=False)
    a = plain.adv_out(F.relu(plain.adv_hidden(plain.features(obs))))
    assert torch.equal(plain(obs), a)


def test_non_float_obs_are_cast() -> None:
    net = BatchedQNet(2, (7, 7, 3), 5)
    obs = torch.randint(0, 2, (2, 4, 7, 7, 3), dtype=torch.uint8)
    assert torch.equal(net(obs), net(obs.float()))


# ------------------------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
@pytest.mark.parametrize("body", ["conv", "mlp"])
def test_gradient_of_one_policy_touches_only_its_slice(body, dueling) -> None:
    P = 3
    net = BatchedQNet(P, (10, 10, 5), 13, body=body, dueling=dueling)
    obs = torch.rand(P, 16, 10, 10, 5)
    weights = torch.randn(16, 13)  # a generic loss: sum_a of Q would have zero grad into A (dueling)
    for p in range(P):
        net.zero_grad(set_to_none=True)
        (net(obs)[p] * weights).sum().backward()
        for name, prm in net.named_parameters():
            assert prm.grad is not None, name
            for other in range(P):
                g = net.policy_slice(prm.grad, other)
                if other == p:
                    assert torch.count_nonzero(g) > 0, (name, p)
                else:
                    assert torch.count_nonzero(g) == 0, (name, p, other)


def test_policy_slice_covers_each_parameter_exactly_once() -> None:
    net = BatchedQNet(3, (7, 7, 3), 5)
    for prm in net.parameters():
        marks = torch.zeros_like(prm)
        for p in range(3):
            net.policy_slice(marks, p).add_(p + 1)
        assert sorted(marks.unique().tolist()) == [1, 2, 3]
        assert all(torch.count_nonzero(marks == p + 1) == prm.numel() // 3 for p in range(3))
    with pytest.raises(IndexError):
        net.policy_slice(net.fc1.weight, 3)


# ------------------------------------------------------------------------------------------ export


@pytest.mark.parametrize("body", ["conv", "mlp"])
def test_policy_state_dict_round_trip(body) -> None:
    src = BatchedQNet(3, (13, 13, 5), 21, body=body)
    dst = BatchedQNet(4, (13, 13, 5), 21, body=body)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    obs3 = torch.rand(3, 5, 13, 13, 5)

    sd = src.policy_state_dict(1)
    single = BatchedQNet(1, (13, 13, 5), 21, body=body)
    assert set(sd) == set(single.state_dict())
    assert all(v.shape == single.state_dict()[k].shape and v.is_contiguous() for k, v in sd.items())
    single.load_state_dict(sd)  # the layout of a P=1 net
    assert torch.allclose(single(obs3[1:2])[0], src(obs3)[1], atol=1e-6)
    assert single.policy_state_dict(0).keys() == sd.keys()

    dst.load_policy_state_dict(2, sd)
    obs4 = torch.rand(4, 5, 13, 13, 5)
    obs4[2] = obs3[1]
    assert torch.allclose(dst(obs4)[2], src(obs3)[1], atol=1e-6)
    for name, prm in dst.named_parameters():  # other policies untouched
        for p in (0, 1, 3):
            assert torch.equal(dst.policy_slice(prm.detach(), p), dst.policy_slice(before[name], p))
        assert torch.equal(dst.policy_slice(prm.detach(), 2), sd[name])

    sd["fc1.weight"] = sd["fc1.weight"].detach().clone()
    sd["fc1.weight"].add_(1.0)  # the export is a copy, not a view
    assert not torch.equal(dst.policy_state_dict(2)["fc1.weight"], sd["fc1.weight"])
    with pytest.raises(KeyError, match="missing"):
        dst.load_policy_state_dict(0, {k: v for k, v in sd.items() if k != "fc1.bias"})
    with pytest.raises(ValueError, match="expected shape"):
        dst.load_policy_state_dict(0, {**sd, "fc1.bias": torch.zeros(64)})
    with pytest.raises(KeyError, match="unexpected"):
        BatchedQNet(2, (13, 13, 5), 21, body=body, dueling=False).load_policy_state_dict(0, sd)


@pytest.mark.parametrize("dueling", [True, False])
def test_subset_keeps_the_chosen_policies_in_order(dueling) -> None:
    full = BatchedQNet(4, (7, 7, 3), 5, body="conv", dueling=dueling, hiddens=32)
    part = full.subset([3, 1])
    assert (part.n_policies, part.dueling, part.hiddens) == (2, dueling, 32)
    obs = torch.rand(4, 6, 7, 7, 3)
    torch.testing.assert_close(part(obs[[3, 1]]), full(obs)[[3, 1]])
    before = full(obs)
    next(part.parameters()).data.add_(1.0)  # a copy: the source net is untouched
    assert not torch.allclose(part(obs[[3, 1]]), before[[3, 1]])
    torch.testing.assert_close(full(obs), before)


def test_copy_reference_into_and_config_checks() -> None:
    refs = _refs(2, (7, 7, 3), 5, "conv", True)
    batched = BatchedQNet(2, (7, 7, 3), 5)
    copy_reference_into(batched, 1, refs[1])
    obs = torch.rand(2, 4, 7, 7, 3)
    assert (batched(obs)[1] - refs[1](obs[1])).abs().max().item() < 1e-6
    with pytest.raises(ValueError, match="config mismatch"):
        copy_reference_into(batched, 0, ReferenceQNet((7, 7, 3), 5, dueling=False))
    with pytest.raises(ValueError, match="config mismatch"):
        batched_from_reference([refs[0], ReferenceQNet((7, 7, 3), 6)])


# ------------------------------------------------------------------------------------------ training


def _huber_losses(q_PBA: torch.Tensor, act_PB: torch.Tensor, y_PB: torch.Tensor) -> torch.Tensor:
    q_PB = q_PBA.gather(-1, act_PB.unsqueeze(-1)).squeeze(-1)
    return F.smooth_l1_loss(q_PB, y_PB, reduction="none").mean(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("max_norm", [None, 0.05], ids=["no_clip", "clip"])
@pytest.mark.parametrize("body", ["conv", "mlp"])
def test_adam_steps_equal_separate_reference_steps(body, max_norm, dtype) -> None:
    """Summed per-policy losses + per-policy clipping + one Adam over the batched net == P separate trainings.

    float64 shows the equality is exact up to rounding. In float32, Adam's per-element normalisation
    m / sqrt(v) turns the (valid) rounding differences between grouped and ungrouped kernels in
    near-zero gradient entries into parameter differences of a few percent of one step (lr), so the
    float32 check uses lr / 4 as its parameter tolerance and a tight one on the gradients themselves.
    """
    P, B, shape, A = 3, 12, (7, 7, 3), 5
    lr = 1.6e-4  # the paper's DQN lr
    f64 = dtype == torch.float64
    grad_tol, param_tol = (1e-9, 1e-9) if f64 else (1e-4, lr / 4)
    refs = [net.to(dtype) for net in _refs(P, shape, A, body, True)]
    batched = batched_from_reference(refs)
    assert batched.fc1.weight.dtype == dtype
    ref_opts = [torch.optim.Adam(n.parameters(), lr=lr) for n in refs]
    opt = torch.optim.Adam(batched.parameters(), lr=lr)
    loss_w = torch.tensor([1.0, 3.0, 1e-3], dtype=dtype)  # very different grad norms: clip 0 and 1, not 2
    for _ in range(3):
        obs = torch.rand(P, B, *shape, dtype=dtype)
        act = torch.randint(0, A, (P, B))
        y = torch.randn(P, B, dtype=dtype)

        opt.zero_grad(set_to_none=True)
        losses = _huber_losses(batched(obs), act, y) * loss_w
        losses.sum().backward()  # policy p's slice only sees loss p
        norms = clip_grad_norm_per_policy(batched, max_norm) if max_norm else None

        ref_norms = []
        for p, (net, ref_opt) in enumerate(zip(refs, ref_opts)):
            ref_opt.zero_grad(set_to_none=True)
            loss = _huber_losses(net(obs[p])[None], act[p : p + 1], y[p : p + 1])[0] * loss_w[p]
            assert abs(loss.item() - losses[p].item()) < 1e-6
            loss.backward()
            if max_norm:
                ref_norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm).item())
            got = _grads_as_reference(batched, p)
            for name, prm in net.named_parameters():
                assert torch.allclose(got[name], prm.grad, rtol=grad_tol, atol=grad_tol * 1e-2), (p, name)
            ref_opt.step()
        opt.step()

        if max_norm:
            assert norms is not None and norms.shape == (P,)
            assert torch.allclose(norms, torch.tensor(ref_norms, dtype=norms.dtype), rtol=grad_tol)
            assert (norms > max_norm).any() and (norms < max_norm).any()  # clipping active for some only
        for p, net in enumerate(refs):
            got = reference_from_batched(batched, p).state_dict()
            for name, value in net.state_dict().items():
                assert (got[name] - value).abs().max().item() < min(param_tol, 1e-5 if f64 else 1.0), (
                    p,
                    name,
                )


def test_clip_grad_norm_per_policy_scales_each_policy_independently() -> None:
    net = BatchedQNet(3, (7, 7, 3), 5, body="mlp")
    for prm in net.parameters():
        prm.grad = torch.randn_like(prm)
        net.policy_slice(prm.grad, 0).mul_(1e-4)  # policy 0 is far below the limit
    before = {n: prm.grad.clone() for n, prm in net.named_parameters()}
    norms = clip_grad_norm_per_policy(net, 1.0)
    expected = torch.stack(
        [torch.cat([net.policy_slice(g, p).flatten() for g in before.values()]).norm() for p in range(3)]
    )
    assert torch.allclose(norms, expected, rtol=1e-5)
    after = torch.stack(
        [
            torch.cat([net.policy_slice(prm.grad, p).flatten() for prm in net.parameters()]).norm()
            for p in range(3)
        ]
    )
    assert after[0].item() == pytest.approx(norms[0].item(), rel=1e-6)  # untouched (coef clamps to 1)
    assert torch.allclose(after[1:], torch.ones(2), rtol=1e-5)
    # parameters without grads are skipped
    net.adv_out.weight.grad = None
    clip_grad_norm_per_policy(net, 1.0)


@pytest.mark.parametrize("obs_shape", [(18,), (4, 6), (2, 3, 4, 5)])
def test_the_mlp_body_takes_any_observation_shape(obs_shape: tuple[int, ...]) -> None:
    """A vector observation (MPE's 18 floats), a matrix or a stack: the mlp body flattens it, and the batched net's
    policy p equals its reference network; the conv body still asks for (H, W, C) and says to use mlp."""
    import math

    from suPER.models import BatchedQNet
    from suPER.models.qnet import reference_from_batched

    torch.manual_seed(0)
    net = BatchedQNet(3, obs_shape, 5, body="mlp", hiddens=16)
    obs_PBO = torch.randn(3, 7, *obs_shape)
    q_PBA = net(obs_PBO)
    assert q_PBA.shape == (3, 7, 5) and net.fc1.weight.shape[1] == math.prod(obs_shape)
    for p in range(3):
        torch.testing.assert_close(reference_from_batched(net, p)(obs_PBO[p]), q_PBA[p], rtol=1e-5, atol=1e-6)
    if len(obs_shape) != 3:
        with pytest.raises(ValueError, match=r"conv body needs observations of shape \(H, W, C\).*--model mlp"):
            BatchedQNet(1, obs_shape, 5, body="conv")


@pytest.mark.parametrize("shape,body", [((18,), "mlp"), ((27, 5), "mlp"), ((3, 3, 2), "mlp"), ((2, 3, 4, 5), "mlp"),
                                        ((7, 7, 3), "conv"), ((13, 13, 5), "conv")])
def test_auto_builds_conv_for_images_and_the_mlp_for_any_other_shape(shape: tuple[int, ...], body: str) -> None:
    """``dqn.model: auto`` (the PettingZoo envs' default): conv where the conv stack fits an (H, W, C) image, the MLP
    for vectors, tables, small grids and higher ranks; the MLP itself takes any shape, in packs too."""
    assert resolve_body("auto", shape) == body and resolve_body("mlp", shape) == "mlp"
    for net in (BatchedQNet(2, shape, 4, body="auto", hiddens=8), PackedQNet(2, 1, shape, 4, body="auto", hiddens=8)):
        assert net.body == body and net(torch.rand(2, 3, *shape)).shape == (2, 3, 4)
    assert ReferenceQNet(shape, 4, body="auto", hiddens=8).body == body
    mlp = BatchedQNet(2, shape, 4, body="mlp", hiddens=8)
    assert mlp.fc1.weight.shape == (2, math.prod(shape), 64) and mlp(torch.rand(2, 1, *shape)).shape == (2, 1, 4)
    if body == "mlp" and len(shape) != 3:
        with pytest.raises(ValueError, match=r"needs observations of shape \(H, W, C\).*--model mlp"):
            BatchedQNet(2, shape, 4, body="conv")


@pytest.mark.parametrize("body", ["conv", "mlp"])
def test_obs_scale_multiplies_the_input_and_travels_with_every_copy(body: str) -> None:
    """``obs_scale`` (uint8 images: 1/255) is the net reading ``obs * scale``: equal to an unscaled net with the same
    weights on the scaled input, in every copy the trainers make; the state dict has no entry for it (checkpoints
    written before it existed load)."""
    shape, n_actions, scale = (6, 6, 3), 4, 1 / 255
    net = BatchedQNet(3, shape, n_actions, body=body, hiddens=16, obs_scale=scale)
    plain = BatchedQNet(3, shape, n_actions, body=body, hiddens=16)
    assert net.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(net.state_dict())
    obs_PBO = torch.randint(0, 256, (3, 5, *shape), dtype=torch.uint8)
    torch.testing.assert_close(net(obs_PBO), plain(obs_PBO.float() / 255))
    assert not torch.allclose(net(obs_PBO), plain(obs_PBO))
    ref = reference_from_batched(net, 1)
    torch.testing.assert_close(ref(obs_PBO[1].float()), net(obs_PBO)[1])
    copies = [net.subset([2, 0]), net.make_reference(), ref, batched_from_reference([ref]),
              PackedQNet(2, 3, shape, n_actions, body=body, hiddens=16, obs_scale=scale).unpacked()]
    assert [c.obs_scale for c in copies] == [scale] * len(copies)
    with pytest.raises(ValueError, match="obs_scale"):
        copy_reference_into(plain, 0, ref)  # a net of another input scale is another configuration
    assert BatchedQNet(1, shape, n_actions, body=body, hiddens=16).obs_scale == 1.0  # every env but integer images
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="obs_scale must be a finite number > 0"):
            BatchedQNet(1, shape, n_actions, body=body, hiddens=16, obs_scale=bad)
