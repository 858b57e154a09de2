"""The DQN update's pure functions (suPER.native.dqn_loss) equal their formulas on a hand-computed batch."""

from __future__ import annotations

import pytest
import torch

from suPER.native.dqn_loss import priorities, q_of_actions, td_target, weighted_loss

# two rows, three actions; values chosen so that every term is exact in binary-friendly decimals
Q_BA = torch.tensor([[0.5, 2.0, 1.0], [-1.0, 0.0, 3.0]])
ACTION_B = torch.tensor([1, 2])
REWARD_B = torch.tensor([1.0, -0.5])
DONE_B = torch.tensor([0.0, 1.0])
Q_NEXT_TARGET_BA = torch.tensor([[1.0, 3.0, 2.0], [0.5, -1.0, 0.0]])
Q_NEXT_ONLINE_BA = torch.tensor([[4.0, 0.0, 5.0], [0.0, 2.0, 1.0]])
WEIGHT_B = torch.tensor([1.0, 0.5])
GAMMA = 0.9


def test_q_of_actions_picks_the_taken_action() -> None:
    torch.testing.assert_close(q_of_actions(Q_BA, ACTION_B), torch.tensor([2.0, 3.0]))


@pytest.mark.parametrize(("double_q", "expected_y"), [
    # double DQN: a* = argmax online = (2, 1) -> Q_target = (2, -1); row 1 is terminal
    (True, [1.0 + 0.9 * 2.0, -0.5]),
    # DQN: a* = argmax target = (1, 0) -> Q_target = (3, 0.5)
    (False, [1.0 + 0.9 * 3.0, -0.5]),
])
def test_td_target(double_q: bool, expected_y: list[float]) -> None:
    y = td_target(REWARD_B, DONE_B, Q_NEXT_TARGET_BA, Q_NEXT_ONLINE_BA if double_q else None, GAMMA)
    torch.testing.assert_close(y, torch.tensor(expected_y))


@pytest.mark.parametrize(("kind", "td", "expected"), [
    # td = (2 - 2.8, 3 + 0.5) = (-0.8, 3.5); huber = (0.5 * 0.64, 3.5 - 0.5); weighted mean (0.32 + 1.5) / 2
    ("huber", [-0.8, 3.5], 0.91),
    # squared: (0.64, 12.25) -> (0.64 + 6.125) / 2
    ("mse", [-0.8, 3.5], 3.3825),
])
def test_weighted_loss_and_its_gradient(kind: str, td: list[float], expected: float) -> None:
    q_sa = q_of_actions(Q_BA, ACTION_B).requires_grad_(True)
    td_B = q_sa - td_target(REWARD_B, DONE_B, Q_NEXT_TARGET_BA, Q_NEXT_ONLINE_BA, GAMMA)
    torch.testing.assert_close(td_B.detach(), torch.tensor(td))
    loss = weighted_loss(td_B, WEIGHT_B, kind)  # type: ignore[arg-type]
    torch.testing.assert_close(loss.detach(), torch.tensor(expected))
    (grad,) = torch.autograd.grad(loss, q_sa)
    # dL/dQ(o,a) = w * l'(td) / B; huber's l' is td clipped to [-1, 1], the square's 2 td
    slope = [-0.8, 1.0] if kind == "huber" else [-1.6, 7.0]
    torch.testing.assert_close(grad, torch.tensor([1.0 * slope[0] / 2, 0.5 * slope[1] / 2]))
    torch.testing.assert_close(priorities(td_B), torch.tensor([0.8, 3.5]))


def test_leading_dims_are_independent_policies() -> None:
    """[E, P, B] inputs give per-(e, p) results equal to the single-policy call (packed runs rely on it)."""
    g = torch.Generator().manual_seed(0)
    q_EPBA, q_next_EPBA, q_next_online_EPBA = (torch.randn(2, 3, 4, 5, generator=g) for _ in range(3))
    action_EPB = torch.randint(0, 5, (2, 3, 4), generator=g)
    reward_EPB, weight_EPB = torch.randn(2, 3, 4, generator=g), torch.rand(2, 3, 4, generator=g)
    done_EPB = (torch.rand(2, 3, 4, generator=g) < 0.3).float()
    td_EPB = q_of_actions(q_EPBA, action_EPB) - td_target(reward_EPB, done_EPB, q_next_EPBA, q_next_online_EPBA, 0.99)
    loss_EP = weighted_loss(td_EPB, weight_EPB)
    assert loss_EP.shape == (2, 3)
    for e in range(2):
        for p in range(3):
            td_B = (q_of_actions(q_EPBA[e, p], action_EPB[e, p])
                    - td_target(reward_EPB[e, p], done_EPB[e, p], q_next_EPBA[e, p], q_next_online_EPBA[e, p], 0.99))
            torch.testing.assert_close(td_EPB[e, p], td_B)
            torch.testing.assert_close(loss_EP[e, p], weighted_loss(td_B, weight_EPB[e, p]))


def test_unknown_loss_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="huber"):
        weighted_loss(torch.zeros(2), torch.ones(2), "l1")  # type: ignore[arg-type]
