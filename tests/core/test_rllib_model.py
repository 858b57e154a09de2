"""PaperDQNTorchRLModule: the paper's Q-network (ReferenceQNet) as an RLlib DQN RLModule."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.utils import update_target_network
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from suPER.core.rllib_model import (
    PaperDQNTorchRLModule,
    load_reference_weights,
    reference_to_module_name,
    to_reference,
)
from suPER.core.rllib_runner import build_config, paper_model_config
from suPER.core.trainers import fresh_td_on_learner, suPERDQN, suPERDQNConfig
from suPER.models.qnet import ReferenceQNet
from suPER.resolve import resolve

CASES = [(body, dueling) for body in ("conv", "mlp") for dueling in (True, False)]
OBS_SHAPE = (7, 7, 3)  # pursuit
N_ACTIONS = 5


def make_module(body: str, dueling: bool, flat_obs: bool = False, hiddens: int = 256,
                inference_only: bool = False) -> PaperDQNTorchRLModule:
    shape = (int(np.prod(OBS_SHAPE)),) if flat_obs else OBS_SHAPE
    mc = {"dueling": dueling, "double_q": True, "epsilon": [(0, 0.1), (100, 0.001)], "num_atoms": 1,
          **paper_model_config(body, hiddens, OBS_SHAPE)}
    module = PaperDQNTorchRLModule(observation_space=gym.spaces.Box(-np.inf, np.inf, shape, np.float32),
                                   action_space=gym.spaces.Discrete(N_ACTIONS), inference_only=inference_only,
                                   model_config=mc)
    if not inference_only:
        module.make_target_networks()
    return module


def obs_for(module: PaperDQNTorchRLModule, obs_BO: torch.Tensor) -> torch.Tensor:
    return obs_BO.reshape(obs_BO.shape[0], -1) if len(module.observation_space.shape) == 1 else obs_BO


@pytest.mark.parametrize(("body", "dueling"), CASES)
def test_parameters_match_reference_one_to_one(body: str, dueling: bool) -> None:
    module = make_module(body, dueling)
    ref = ReferenceQNet(OBS_SHAPE, N_ACTIONS, body=body, dueling=dueling, hiddens=256)
    params = {n: tuple(p.shape) for n, p in module.named_parameters()}
    ref_params = {n: tuple(p.shape) for n, p in ref.named_parameters()}
    online = {n: s for n, s in params.items() if not n.startswith("_target_")}
    target = {n: s for n, s in params.items() if n.startswith("_target_")}
    assert {reference_to_module_name(n): s for n, s in ref_params.items()} == online  # a bijection, same shapes
    assert {reference_to_module_name(n, target=True): s for n, s in ref_params.items()} == target
    assert sum(int(np.prod(s)) for s in online.values()) == sum(p.numel() for p in ref.parameters())
    # the layer sequence is the paper's, activations included
    kinds = [type(m).__name__ for m in module.encoder.modules() if not list(m.children())]
    if body == "conv":
        assert kinds == ["Conv2d", "ReLU", "Conv2d", "ReLU", "Conv2d", "ReLU", "Flatten", "Linear", "ReLU", "Linear"]
        assert [p.shape[0] for n, p in module.encoder.named_parameters() if n.endswith("weight")] == [32, 64, 64, 64, 256]
    else:
        assert kinds == ["Linear", "Tanh", "Linear", "Tanh"]
    assert hasattr(module, "vf") == dueling


@pytest.mark.parametrize(("body", "dueling"), CASES)
def test_q_values_equal_reference_with_copied_weights(body: str, dueling: bool) -> None:
    torch.manual_seed(0)
    ref = ReferenceQNet(OBS_SHAPE, N_ACTIONS, body=body, dueling=dueling, hiddens=256)
    target_ref = ReferenceQNet(OBS_SHAPE, N_ACTIONS, body=body, dueling=dueling, hiddens=256)
    for flat in ((False, True) if body == "mlp" else (False,)):
        module = make_module(body, dueling, flat_obs=flat)
        load_reference_weights(module, ref.state_dict())
        obs = torch.rand(64, *OBS_SHAPE) * 4 - 1
        next_obs = torch.rand(64, *OBS_SHAPE) * 4 - 1
        with torch.no_grad():
            q_ref, q_next_ref = ref(obs), ref(next_obs)
            q = module.compute_q_values({Columns.OBS: obs_for(module, obs)})[QF_PREDS]
            torch.testing.assert_close(q, q_ref, atol=1e-5, rtol=0)
            torch.testing.assert_close(module.forward_target({Columns.OBS: obs_for(module, obs)})[QF_PREDS], q_ref,
                                       atol=1e-5, rtol=0)
            actions = module.forward_inference({Columns.OBS: obs_for(module, obs)})[Columns.ACTIONS]
            assert torch.equal(actions, q.argmax(-1))  # greedy over its own Q (exact); q ~ q_ref above, and an
            # argmax of q_ref could flip on a near tie within the 1e-5 between the two implementations
            # the train pass (double-Q: online on o and o', target on o') with different target weights
            tgt = dict(module.named_parameters())
            for n, v in target_ref.state_dict().items():
                tgt[reference_to_module_name(n, target=True)].copy_(v)
            out = module.forward_train({Columns.OBS: obs_for(module, obs), Columns.NEXT_OBS: obs_for(module, next_obs)})
            torch.testing.assert_close(out[QF_PREDS], q_ref, atol=1e-5, rtol=0)
            torch.testing.assert_close(out[QF_NEXT_PREDS], q_next_ref, atol=1e-5, rtol=0)
            torch.testing.assert_close(out[QF_TARGET_NEXT_PREDS], target_ref(next_obs), atol=1e-5, rtol=0)
        # and back: the module's online / target weights as ReferenceQNets
        torch.testing.assert_close(to_reference(module)(obs), q_ref, atol=0, rtol=0)
        torch.testing.assert_close(to_reference(module, target=True)(obs), target_ref(obs), atol=0, rtol=0)


@pytest.mark.parametrize(("body", "dueling"), CASES)
def test_target_network_api_covers_every_layer(body: str, dueling: bool) -> None:
    module = make_module(body, dueling)
    ref = ReferenceQNet(OBS_SHAPE, N_ACTIONS, body=body, dueling=dueling, hiddens=256)
    load_reference_weights(module, ref.state_dict(), target=False)  # online changes, target keeps the init
    obs = torch.rand(8, *OBS_SHAPE)
    with torch.no_grad():
        assert not torch.allclose(module.forward_target({Columns.OBS: obs_for(module, obs)})[QF_PREDS], ref(obs))
        for main, target in module.get_target_network_pairs():
            update_target_network(main_net=main, target_net=target, tau=1.0)
        torch.testing.assert_close(module.forward_target({Columns.OBS: obs_for(module, obs)})[QF_PREDS], ref(obs),
                                   atol=0, rtol=0)
    assert not any(p.requires_grad for n, p in module.named_parameters() if n.startswith("_target_"))
    # an inference-only copy (the EnvRunner's) has no target nets and the same online parameter names
    light = make_module(body, dueling, inference_only=True)
    assert {n for n, _ in light.named_parameters()} == {n for n, _ in module.named_parameters()
                                                       if not n.startswith("_target_")}


def test_exploration_is_uniform_over_all_actions_even_when_q_is_zero() -> None:
    """RLlib's default draws from multinomial(Q != 0) and crashes on all-zero Q (zero-bias mlp, zero obs)."""
    module = make_module("mlp", True)
    obs = {Columns.OBS: torch.zeros(4000, *OBS_SHAPE)}
    with torch.no_grad():
        assert torch.count_nonzero(module.compute_q_values(obs)[QF_PREDS]) == 0
        module.epsilon_schedule = type(module.epsilon_schedule)(fixed_value_or_schedule=1.0, framework="torch")
        counts = torch.bincount(module.forward_exploration(obs, t=0)[Columns.ACTIONS], minlength=N_ACTIONS)
        assert counts.min() > 700 and counts.max() < 900  # 800 expected each
        module.epsilon_schedule = type(module.epsilon_schedule)(fixed_value_or_schedule=0.0, framework="torch")
        x = {Columns.OBS: torch.rand(16, *OBS_SHAPE)}
        assert torch.equal(module.forward_exploration(x, t=0)[Columns.ACTIONS],
                           module.compute_q_values(x)[QF_PREDS].argmax(-1))


def test_init_matches_reference_distribution() -> None:
    """Same initialisers as ReferenceQNet: with the same torch seed, the same weights."""
    torch.manual_seed(5)
    module = make_module("conv", True)
    torch.manual_seed(5)
    ref = ReferenceQNet(OBS_SHAPE, N_ACTIONS, body="conv", dueling=True, hiddens=256)
    params = dict(module.named_parameters())
    for n, p in ref.named_parameters():
        assert torch.equal(params[reference_to_module_name(n)], p), n


def test_rejects_distributional_and_bad_obs() -> None:
    with pytest.raises(ValueError, match="num_atoms"):
        PaperDQNTorchRLModule(observation_space=gym.spaces.Box(0, 1, OBS_SHAPE), action_space=gym.spaces.Discrete(3),
                              model_config={"dueling": True, "double_q": True, "epsilon": 0.1, "num_atoms": 51,
                                            "paper_body": "conv"})
    with pytest.raises(ValueError, match="not \\(H, W, C\\)"):
        PaperDQNTorchRLModule(observation_space=gym.spaces.Box(0, 1, (10,)), action_space=gym.spaces.Discrete(3),
                              model_config={"dueling": True, "double_q": True, "epsilon": 0.1, "num_atoms": 1,
                                            "paper_body": "conv"})


def first_module_spec(cfg: Any) -> Any:
    """The RLModuleSpec of the first module of the runner's config for ``cfg`` (built against its env)."""
    config = build_config(cfg)
    env = config.env(config.env_config)
    try:
        spec = config.get_multi_rl_module_spec(env=env)
    finally:
        env.close()
    return next(iter(spec.rl_module_specs.values()))


@pytest.mark.parametrize("model", ["conv", "mlp"])
def test_runner_config_uses_the_paper_module(model: str) -> None:
    sub = first_module_spec(resolve("pursuit", overrides={"dqn.model": model, "dqn.hiddens": 32}))
    assert sub.module_class is PaperDQNTorchRLModule
    module = sub.build()
    assert module.paper_config == {"obs_shape": OBS_SHAPE, "n_actions": N_ACTIONS, "body": model, "dueling": True,
                                   "hiddens": 32, "obs_scale": 1.0}


def test_runner_config_scales_uint8_images_as_the_native_network() -> None:
    """A PettingZoo env of uint8 images (tests/envs/tiny_pz.py's image_env): the module's encoder reads x / 255,
    as the native network (``EnvSpec.obs_scale``); a model config without the key builds an unscaled module."""
    cfg = resolve("pettingzoo:tests.envs.tiny_pz:image_env", overrides={"dqn.hiddens": 16})
    module = first_module_spec(cfg).build()
    assert module.paper_config["body"] == "conv" and module.paper_config["obs_scale"] == 1 / 255
    scaled = to_reference(module)
    assert scaled.obs_scale == 1 / 255
    plain = ReferenceQNet((6, 6, 3), 3, body="conv", dueling=scaled.dueling, hiddens=16)
    plain.load_state_dict(scaled.state_dict())
    x = torch.randint(0, 256, (4, 6, 6, 3)).float()
    with torch.no_grad():
        torch.testing.assert_close(module.compute_q_values({Columns.OBS: x})[QF_PREDS], plain(x / 255))
    old = {k: v for k, v in module.model_config.items() if k != "paper_obs_scale"}  # a module saved before the key
    rebuilt = PaperDQNTorchRLModule(observation_space=module.observation_space, action_space=module.action_space,
                                    model_config=old)
    assert rebuilt.paper_config["obs_scale"] == 1.0


# ---- suPERDQN's relay TD pass with the paper module (online and target nets on the learner)


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("double_q", [True, False])
def test_relay_td_uses_the_paper_module_online_and_target_nets(two_agent_env: type, tiny_training: dict[str, Any],
                                                                double_q: bool) -> None:
    model = {**paper_model_config("mlp", 8, (1, 1, 2))}
    config = (suPERDQNConfig().environment(two_agent_env)
              .env_runners(num_env_runners=0, rollout_fragment_length=4)
              .training(**{**tiny_training, "target_network_update_freq": 1000}, double_q=double_q,
                        suPER_bandwidth=0.5)
              .rl_module(rl_module_spec=RLModuleSpec(module_class=PaperDQNTorchRLModule), model_config=model)
              .reporting(min_sample_timesteps_per_iteration=16, min_time_s_per_iteration=0)
              .debugging(seed=3))
    algo = suPERDQN(config=config)
    try:
        for _ in range(2):
            algo.train()
        learner = algo.learner_group._learner
        module = learner.module["a0"].unwrapped()
        assert isinstance(module, PaperDQNTorchRLModule)
        online, target = to_reference(module), to_reference(module, target=True)
        obs = torch.rand(4, 1, 1, 2)
        assert not torch.allclose(online(obs), target(obs))  # updates happened since the only target sync
        buf = algo.local_replay_buffer
        rows = list(buf.last_fresh["a0"])
        assert rows
        episodes = [buf.transition_episode(e, a, ts, "a0", 1, 0.99, row=k) for k, (e, a, ts) in enumerate(rows)]
        tags, td = fresh_td_on_learner(learner, episodes)["a0"]
        # the same TD with plain ReferenceQNets from the module's weights
        o = torch.as_tensor(np.stack([ep.get_observations(0) for ep in episodes]), dtype=torch.float32)
        o2 = torch.as_tensor(np.stack([ep.get_observations(-1) for ep in episodes]), dtype=torch.float32)
        a = torch.as_tensor([int(ep.get_actions(0)) for ep in episodes])
        r = torch.as_tensor([float(ep.get_rewards(0)) for ep in episodes])
        done = torch.as_tensor([float(ep.is_terminated) for ep in episodes])
        with torch.no_grad():
            o, o2 = o.reshape(-1, 1, 1, 2), o2.reshape(-1, 1, 1, 2)
            q_next_t = target(o2)
            a_star = (online(o2) if double_q else q_next_t).argmax(-1, keepdim=True)
            expected = (online(o).gather(-1, a[:, None])[:, 0]
                        - (r + 0.99 * (1 - done) * q_next_t.gather(-1, a_star)[:, 0])).abs()
        np.testing.assert_allclose(td, expected.numpy()[tags], atol=1e-5)
    finally:
        algo.stop()
