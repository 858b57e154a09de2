"""QMIX: the loss equals its formula on a tiny hand-checked batch, the mixer is monotonic, dead learners are
masked, resume."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suPER.baselines import qmix

N, OBS, A, H, E = 2, 3, 3, 4, 5


def nets() -> tuple[qmix.RNNAgent, qmix.QMixer, qmix.RNNAgent, qmix.QMixer]:
    torch.manual_seed(0)
    return (qmix.RNNAgent(OBS, H, A), qmix.QMixer(N, N * OBS, E), qmix.RNNAgent(OBS, H, A), qmix.QMixer(N, N * OBS, E))


def batch() -> dict[str, torch.Tensor]:
    """Two episodes padded to T = 3: lengths 3 (truncated) and 2 (terminal); learner 1 of episode 1 dies at t=1."""
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(2, 4, N, OBS, generator=g)
    alive = torch.ones(2, 4, N, dtype=torch.bool)
    alive[1, 1:, 1] = False
    obs[1, 1:, 1] = 0.0  # the env's zeros for a dead learner
    obs[1, 3] = 0.0      # padding after episode 1's final observation (t = 2)
    alive[1, 3] = False
    return {"obs": obs, "alive": alive, "action": torch.tensor([[[0, 1], [2, 2], [1, 0]], [[1, 1], [0, 2], [0, 0]]]),
            "reward": torch.tensor([[1.0, -0.5, 2.0], [0.5, 3.0, 0.0]]),
            "terminal": torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
            "mask": torch.tensor([[True, True, True], [True, True, False]])}


def mix_by_hand(mixer: qmix.QMixer, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Q_tot = elu(q . |W1(s)| + b1(s)) . |W2(s)| + V(s) for one row."""
    w1 = mixer.hyper_w1(s).abs().reshape(N, E)
    hidden = F.elu(q @ w1 + mixer.hyper_b1(s))
    return hidden @ mixer.hyper_w2(s).abs() + mixer.value(s)[0]


def step_by_step_q(agent: qmix.RNNAgent, obs_TNO: torch.Tensor) -> torch.Tensor:
    """Q of one episode by feeding the agent net one step at a time, as when acting: [T, N, A]."""
    h = torch.zeros(1, N, H)
    out = []
    for t in range(obs_TNO.shape[0]):
        q, h = agent(obs_TNO[t][None], h)
        out.append(q[0])
    return torch.stack(out)


@pytest.mark.parametrize("double_q", [True, False])
def test_loss_equals_the_formula(double_q: bool) -> None:
    agent, mixer, t_agent, t_mixer = nets()
    b = batch()
    got = qmix.qmix_loss(agent, mixer, t_agent, t_mixer, b, 0.9, double_q)
    terms = []
    for e in range(2):
        q, qt = step_by_step_q(agent, b["obs"][e]), step_by_step_q(t_agent, b["obs"][e])
        for t in range(3):
            if not b["mask"][e, t]:
                continue
            s, s_next = b["obs"][e, t].reshape(-1), b["obs"][e, t + 1].reshape(-1)
            alive, alive_next = b["alive"][e, t].float(), b["alive"][e, t + 1].float()
            q_taken = torch.stack([q[t, i, b["action"][e, t, i]] for i in range(N)]) * alive
            chooser = q if double_q else qt
            q_next = torch.stack([qt[t + 1, i, chooser[t + 1, i].argmax()] for i in range(N)]) * alive_next
            y = b["reward"][e, t] + 0.9 * (1 - b["terminal"][e, t]) * mix_by_hand(t_mixer, q_next, s_next)
            terms.append((mix_by_hand(mixer, q_taken, s) - y) ** 2)
    torch.testing.assert_close(got, torch.stack(terms).mean())


def test_mixer_is_monotonic_in_every_agent_q() -> None:
    torch.manual_seed(1)
    mixer = qmix.QMixer(4, 10, 8)
    q = (torch.randn(256, 4) * 5).requires_grad_(True)
    state = torch.randn(256, 10) * 3
    (grad,) = torch.autograd.grad(mixer(q, state).sum(), q)
    assert (grad >= 0).all() and (grad > 0).any()


def test_dead_learner_does_not_change_the_loss() -> None:
    agent, mixer, t_agent, t_mixer = nets()
    b = batch()
    base = qmix.qmix_loss(agent, mixer, t_agent, t_mixer, b, 0.9, True)
    b["action"][1, 1, 1] = 1  # learner 1 of episode 1 is dead at t = 1 and t = 2
    b["action"][1, 2, 1] = 2
    b["reward"][1, 2] = 100.0  # and step t = 2 of episode 1 is padding
    torch.testing.assert_close(qmix.qmix_loss(agent, mixer, t_agent, t_mixer, b, 0.9, True), base)


