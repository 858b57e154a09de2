"""The DQN update as pure tensor functions: TD target (DQN and double DQN), TD error, the
importance-weighted loss and the replay priorities (REFERENCE 3.3).

``suPER.native.dqn`` calls them in its learn and relay phases; they take Q-values, not networks, so
any caller that batches differently (one policy, ``P`` policies, ``E x P`` packed runs) uses them
unchanged. Every function works on arbitrary leading dims ``...`` and reduces only the last one
where it reduces at all (``B``, the batch rows of one policy). Dueling is part of the network (the
Q-values passed in are already ``V + A - mean A``); the update is 1-step, as the original's and both
backends' (RLlib: ``n_step=1``): an n-step caller passes the n-step return as ``reward`` and
``gamma ** n`` as ``gamma``.

The RLlib backend computes the same quantities in RLlib 2.60's ``DQNTorchLearner.compute_loss_for_module``
(``tests/native/test_dqn_loss.py`` checks both against each other on the same weights and batch).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

LossKind = Literal["huber", "mse"]
"""``huber`` (delta 1, the original's and RLlib's ``td_error_loss_fn="huber"``) or ``mse``."""

HUBER_DELTA = 1.0
"""Huber loss threshold: quadratic for |td| <= 1, linear beyond (the original's and RLlib's default)."""


def q_of_actions(q_XA: torch.Tensor, action_X: torch.Tensor) -> torch.Tensor:
    """Q-value of the action taken in each row: ``Q(o, a)``.

    Args:
        q_XA: Q-values ``[..., A]``.
        action_X: integer actions ``[...]`` (same leading dims).

    Returns:
        ``[...]``: ``q_XA[..., action_X]``.
    """
    return q_XA.gather(-1, action_X.long()[..., None])[..., 0]


def td_target(reward_X: torch.Tensor, done_X: torch.Tensor, q_next_target_XA: torch.Tensor,
              q_next_online_XA: torch.Tensor | None, gamma: float | torch.Tensor) -> torch.Tensor:
    """Bootstrapped TD target ``y = r + gamma * (1 - d) * Q_target(o', a*)``.

    ``a* = argmax_a Q_online(o', a)`` for double DQN (van Hasselt et al. 2016: the online net picks the
    action, the target net values it), ``a* = argmax_a Q_target(o', a)`` for plain DQN (pass
    ``q_next_online_XA=None``). Ties go to the first maximal action (``argmax``), as in RLlib.

    Args:
        reward_X: rewards ``[...]``.
        done_X: 1.0 where ``o'`` is terminal (no bootstrap), else 0.0 ``[...]``.
        q_next_target_XA: target-network Q-values of ``o'`` ``[..., A]``.
        q_next_online_XA: online-network Q-values of ``o'`` ``[..., A]`` (double DQN), or None (DQN).
        gamma: discount of the bootstrap term (``gamma ** n`` for n-step returns); a tensor broadcasting
            against ``[...]`` gives each leading index its own (packed runs: one gamma per run).

    Returns:
        ``y`` ``[...]``; the caller detaches it (or computes it under ``torch.no_grad``).
    """
    chooser_XA = q_next_target_XA if q_next_online_XA is None else q_next_online_XA
    a_star_X1 = chooser_XA.argmax(-1, keepdim=True)
    bootstrap_X = q_next_target_XA.gather(-1, a_star_X1)[..., 0]
    return reward_X + gamma * (1.0 - done_X) * bootstrap_X


def weighted_loss(td_XB: torch.Tensor, weight_XB: torch.Tensor, kind: LossKind = "huber") -> torch.Tensor:
    """Importance-weighted TD loss per leading index: ``L = mean_b w_b * l(td_b)``.

    ``l`` is Huber with delta 1 (``0.5 td^2`` for ``|td| <= 1``, ``|td| - 0.5`` beyond) or the squared
    error ``td^2``; ``w`` are PER's importance weights ``(N P(i))^-beta / max_j (N P(j))^-beta``, which
    undo the bias of sampling by priority (Schaul et al. 2016).

    Args:
        td_XB: TD errors ``Q(o, a) - y`` ``[..., B]`` (gradients flow through ``Q(o, a)``).
        weight_XB: importance weights ``[..., B]``.
        kind: ``huber`` or ``mse``.

    Returns:
        ``[...]``: one loss per policy (sum them for one optimizer step: Adam is elementwise).
    """
    zeros = torch.zeros_like(td_XB)
    if kind == "huber":
        per_row = F.huber_loss(td_XB, zeros, reduction="none", delta=HUBER_DELTA)
    elif kind == "mse":
        per_row = F.mse_loss(td_XB, zeros, reduction="none")
    else:
        raise ValueError(f"loss kind must be 'huber' or 'mse', got {kind!r}")
    return (weight_XB * per_row).mean(-1)


def priorities(td_X: torch.Tensor) -> torch.Tensor:
    """New replay priorities of sampled rows: ``|td|`` (the buffer adds ``per_eps`` and raises to alpha).

    Args:
        td_X: TD errors ``[...]``.

    Returns:
        ``|td|`` ``[...]``, detached.
    """
    return td_X.detach().abs()
