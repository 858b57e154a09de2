"""The native trainer and RLlib 2.60's DQN learner compute the same TD errors and loss for the same weights
and the same batch.

Native side: a two-policy ``BatchedQNet`` (online and target) and the functions ``suPER.native.dqn``'s
learn phase calls (``suPER.native.dqn_loss``). RLlib side: each policy's weights copied into a
``PaperDQNTorchRLModule`` of a real ``DQNTorchLearner`` (``load_reference_weights``), whose own
``compute_loss_for_module`` runs on a hand-built batch; its |TD| is read from the learner's metrics, where
RLlib's DQN logs the errors it hands to the replay buffer as priorities.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import TD_ERROR_KEY

from suPER.core.rllib_model import PaperDQNTorchRLModule, load_reference_weights
from suPER.core.rllib_runner import paper_model_config
from suPER.models.qnet import BatchedQNet, reference_from_batched
from suPER.native.dqn_loss import priorities, q_of_actions, td_target, weighted_loss

OBS_SHAPE, N_ACTIONS, HIDDENS, B, GAMMA = (7, 7, 3), 5, 16, 8, 0.9
MODULES = ("a0", "a1")


@pytest.fixture(scope="module")
def learner() -> Any:
    """A DQNTorchLearner with one paper module per policy (dueling, double-Q forward pass)."""
    space = gym.spaces.Box(-np.inf, np.inf, OBS_SHAPE, np.float32)
    config = (DQNConfig().framework("torch")
              .rl_module(rl_module_spec=RLModuleSpec(module_class=PaperDQNTorchRLModule),
                         model_config=paper_model_config("conv", HIDDENS, OBS_SHAPE))
              .training(double_q=True, dueling=True, gamma=GAMMA, n_step=1, td_error_loss_fn="huber")
              .multi_agent(policies=set(MODULES), policy_mapping_fn=lambda agent_id, *a, **k: agent_id))
    return config.build_learner(spaces={m: (space, gym.spaces.Discrete(N_ACTIONS)) for m in MODULES})


@pytest.mark.parametrize("double_q", [True, False])
def test_native_and_rllib_td_errors_agree(learner: Any, double_q: bool) -> None:
    torch.manual_seed(0)
    q_net = BatchedQNet(len(MODULES), OBS_SHAPE, N_ACTIONS, body="conv", dueling=True, hiddens=HIDDENS)
    target_net = BatchedQNet(len(MODULES), OBS_SHAPE, N_ACTIONS, body="conv", dueling=True, hiddens=HIDDENS)
    g = torch.Generator().manual_seed(1)
    obs_PBO, next_obs_PBO = (torch.rand(len(MODULES), B, *OBS_SHAPE, generator=g) * 4 for _ in range(2))
    action_PB = torch.randint(0, N_ACTIONS, (len(MODULES), B), generator=g)
    reward_PB = torch.randn(len(MODULES), B, generator=g)
    done_PB = (torch.arange(B) % 3 == 0).float().expand(len(MODULES), B)
    weight_PB = torch.rand(len(MODULES), B, generator=g) + 0.5

    # native: exactly the learn phase of suPER.native.dqn.train
    with torch.no_grad():
        y_PB = td_target(reward_PB, done_PB, target_net(next_obs_PBO), q_net(next_obs_PBO) if double_q else None, GAMMA)
        td_PB = q_of_actions(q_net(obs_PBO), action_PB) - y_PB
        native_td_PB, native_loss_P = priorities(td_PB), weighted_loss(td_PB, weight_PB, "huber")

    for p, module_id in enumerate(MODULES):
        module = learner.module[module_id].unwrapped()
        load_reference_weights(module, reference_from_batched(target_net, p).state_dict(), target=True)
        load_reference_weights(module, reference_from_batched(q_net, p).state_dict(), target=False)
        batch = {Columns.OBS: obs_PBO[p], Columns.NEXT_OBS: next_obs_PBO[p], Columns.ACTIONS: action_PB[p],
                 Columns.REWARDS: reward_PB[p], Columns.TERMINATEDS: done_PB[p].bool(),
                 "n_step": torch.ones(B), "weights": weight_PB[p]}
        config = learner.config.get_config_for_module(module_id).copy(copy_frozen=False)
        config.double_q = double_q
        with torch.no_grad():
            loss = learner.compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                                   fwd_out=module.forward_train(batch))
        rllib_td_B = np.concatenate([np.ravel(x) for x in learner.metrics.peek((module_id, TD_ERROR_KEY))])[-B:]
        assert native_td_PB[p].abs().max() > 0.1  # a real comparison, not of zeros
        # fp32: the grouped conv / baddbmm of BatchedQNet vs nn.Conv2d / nn.Linear differ by rounding only
        np.testing.assert_allclose(rllib_td_B, native_td_PB[p].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(loss), float(native_loss_P[p]), rtol=1e-5, atol=1e-6)
