"""SEAC's loss and returns on tiny hand-checked batches (Christianos et al. 2020, eq. 4-5; official a2c.py)."""

from __future__ import annotations

import math

import pytest
import torch

from seac.model import SEACNet
from seac.trainer import IS_EPS, nstep_returns, seac_loss


def softmax(z: list[float]) -> list[float]:
    e = [math.exp(x) for x in z]
    return [x / sum(e) for x in e]


# 2 agents, 2 rows each, 2 actions. logits[i][k][b] = agent i's logits on agent k's row b.
LOGITS = [[[[0.0, 1.0], [2.0, 0.0]], [[0.5, -0.5], [0.0, 0.0]]],
          [[[1.0, 1.0], [-1.0, 0.5]], [[0.3, 0.2], [1.5, -1.0]]]]
VALUES = [[[0.5, -1.0], [2.0, 0.0]], [[1.0, 0.2], [-0.5, 0.3]]]  # V_i(o_k,b)
ACTIONS = [[1, 0], [0, 1]]
BEHAVIOUR_P = [[0.6, 0.7], [0.4, 0.5]]  # pi_k(a_k|o_k) when k acted
RETURNS = [[1.0, 2.0], [-1.0, 0.5]]
VC, HC = 0.5, 0.01


def expected(lam: float, valid: list[list[float]]) -> float:
    """The formula written out row by row."""
    total = 0.0
    for i in range(2):
        for k in range(2):
            for b in range(2):
                p = softmax(LOGITS[i][k][b])
                logp = math.log(p[ACTIONS[k][b]])
                adv = RETURNS[k][b] - VALUES[i][k][b]
                if i == k:
                    w, coef = 1.0, 1.0
                    total -= HC * valid[k][b] * -sum(q * math.log(q) for q in p) / 2
                else:
                    w, coef = p[ACTIONS[k][b]] / (BEHAVIOUR_P[k][b] + IS_EPS), lam
                total += coef * valid[k][b] * (-w * logp * adv + VC * w * adv**2) / 2  # mean over B = 2
    return total


@pytest.mark.parametrize("lam", [0.0, 1.0, 0.3])
@pytest.mark.parametrize("valid", [[[1, 1], [1, 1]], [[1, 0], [1, 1]]])
def test_loss_equals_formula(lam: float, valid: list[list[float]]) -> None:
    loss, stats = seac_loss(torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(VALUES, dtype=torch.float64),
                            torch.tensor(ACTIONS), torch.tensor(BEHAVIOUR_P, dtype=torch.float64).log(),
                            torch.tensor(RETURNS, dtype=torch.float64), torch.tensor(valid, dtype=torch.float64),
                            lam, VC, HC)
    assert float(loss) == pytest.approx(expected(lam, valid), rel=1e-12, abs=1e-12)
    w01 = softmax(LOGITS[0][1][0])[0] / 0.4  # agent 0 on agent 1's first row: pi_0(a=0) / pi_1(a=0)
    assert w01 != pytest.approx(1.0)  # the check above really exercises the importance weights
    assert stats["importance_weight_mean"] > 0


def test_gradient_is_detached_through_the_weights_and_advantages() -> None:
    """d loss / d logits of the shared term = -lambda w (R - V) d log pi / 2 (w and adv held constant)."""
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    values = torch.tensor(VALUES, dtype=torch.float64, requires_grad=True)
    loss, _ = seac_loss(logits, values, torch.tensor(ACTIONS), torch.tensor(BEHAVIOUR_P, dtype=torch.float64).log(),
                        torch.tensor(RETURNS, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64), 1.0, VC, 0.0)
    loss.backward()
    p = softmax(LOGITS[0][1][0])
    w, adv = p[0] / (0.4 + IS_EPS), RETURNS[1][0] - VALUES[0][1][0]
    dlogp = [1.0 - p[0], -p[1]]  # d log p[a=0] / d logits
    assert logits.grad[0, 1, 0].tolist() == pytest.approx([-w * adv * g / 2 for g in dlogp], rel=1e-10)
    assert float(values.grad[0, 1, 0]) == pytest.approx(VC * w * -2 * adv / 2, rel=1e-10)


def test_nstep_returns_with_termination_and_truncation() -> None:
    g = 0.9
    reward = torch.tensor([[[1.0]], [[2.0]], [[3.0]]])  # T=3, E=1, N=1
    value = torch.tensor([[[10.0]], [[20.0]], [[30.0]]])
    boot = torch.tensor([[5.0]])
    ones = torch.ones(3, 1, 1)
    none = torch.zeros(3, 1, 1)
    r = nstep_returns(reward, value, boot, ones, none, g)[:, 0, 0].tolist()
    assert r == pytest.approx([1 + g * (2 + g * (3 + g * 5)), 2 + g * (3 + g * 5), 3 + g * 5])
    cont = torch.tensor([[[1.0]], [[0.0]], [[1.0]]])  # episode terminates after step 1
    r = nstep_returns(reward, value, boot, cont, none, g)[:, 0, 0].tolist()
    assert r == pytest.approx([1 + g * 2, 2, 3 + g * 5])
    cut = torch.tensor([[[0.0]], [[1.0]], [[0.0]]])  # step 1 cut by the horizon: R_1 = V(o_1)
    r = nstep_returns(reward, value, boot, cont, cut, g)[:, 0, 0].tolist()
    assert r == pytest.approx([1 + g * 20, 20, 3 + g * 5])


@pytest.mark.parametrize("body", ["mlp", "conv"])
def test_batched_nets_are_independent(body: str) -> None:
    """Agent p's outputs depend only on p's parameters: a change to agent 1's slice leaves agent 0 alone."""
    torch.manual_seed(0)
    net = SEACNet(3, (5, 5, 2), 4, body=body)
    obs = torch.rand(3, 6, 5, 5, 2)
    logits0, value0 = net(obs)
    with torch.no_grad():
        for prm in net.parameters():
            prm.unflatten(0, (3, -1))[1].add_(0.5)
    logits1, value1 = net(obs)
    assert torch.equal(logits0[0], logits1[0]) and torch.equal(value0[2], value1[2])
    assert not torch.allclose(logits0[1], logits1[1])
    # the gradient of agent 2's outputs reaches only agent 2's parameter slices
    net.zero_grad()
    (logits1[2].sum() + value1[2].sum()).backward()
    for prm in net.parameters():
        g = prm.grad.unflatten(0, (3, -1))
        assert g[0].abs().sum() == 0 and g[1].abs().sum() == 0


@pytest.mark.parametrize("shape", [(18,), (27, 5), (2, 3, 4, 5)])
def test_the_mlp_body_takes_any_observation_shape(shape: tuple[int, ...]) -> None:
    """Vector and table observations (PettingZoo envs) train SEAC with its MLP; the conv body still needs (H, W, C)."""
    net = SEACNet(3, shape, 4, body="mlp")
    logits, values = net(torch.rand(3, 5, *shape))
    assert logits.shape == (3, 5, 4) and values.shape == (3, 5)
    assert net.actor1.weight.shape == (3, math.prod(shape), 64)
    with pytest.raises(ValueError, match="seac.model=mlp"):
        SEACNet(3, shape, 4, body="conv")
