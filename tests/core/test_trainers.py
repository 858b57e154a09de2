"""suPERDQN / suPERDQNConfig on RLlib 2.60: README snippet, exact relay, DQN equivalence, checkpoints, runners, Tune."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.dqn import DQNConfig

from suPER.core.rllib_buffer import BUFFER_PATH, RelayMultiAgentPrioritizedEpisodeReplayBuffer
from suPER.core.trainers import suPERDQN, suPERDQNConfig

pytestmark = pytest.mark.usefixtures("ray_local")


def small(config: Any, tiny_training: dict[str, Any], tiny_model: dict[str, Any], seed: int = 3) -> Any:
    """Shrink any DQN config: fragments of 4 env steps, 16 env steps per iteration, tiny nets."""
    return (config.env_runners(num_env_runners=0, rollout_fragment_length=4)
            .training(**tiny_training)
            .rl_module(model_config=tiny_model)
            .reporting(min_sample_timesteps_per_iteration=16, min_time_s_per_iteration=0)
            .debugging(seed=seed))


def own_and_relayed(buf: RelayMultiAgentPrioritizedEpisodeReplayBuffer, module: str) -> tuple[list, list]:
    """(own, relayed) (episode idx, agent, ts) entries of a module (module id == agent id here)."""
    entries = [(q[0], q[1], q[2]) for q in buf._module_to_indices[module]]
    return [e for e in entries if e[1] == module], [e for e in entries if e[1] != module]


# ---- the README snippet


def test_readme_snippet_runs_verbatim_and_trains(two_agent_env: type, tiny_training: dict, tiny_model: dict) -> None:
    from suPER.core.trainers import suPERDQN, suPERDQNConfig  # noqa: F811 - verbatim
    config = suPERDQNConfig().training(suPER_bandwidth=0.2).environment(two_agent_env)
    small(config, tiny_training, tiny_model)  # the small budget (the README leaves it to the user)
    trainer = suPERDQN(config=config)
    try:
        trainer.train()
        result = trainer.train()
        assert set(trainer.config.policies) == {"a0", "a1"}  # one module per agent, set up automatically
        for m in ("a0", "a1"):
            assert result["learners"][m]["num_module_steps_trained"] > 0
            assert 0.0 <= result["suPER"][f"fraction_shared_{m}"] <= 1.0
        assert "fraction_shared_mean" in result["suPER"] and result["suPER"]["relayed_rows_lifetime"] > 0
        assert result["timers"]["suPER_relay"] > 0
    finally:
        trainer.stop()


def test_train_is_an_alias_of_training() -> None:
    config = suPERDQNConfig().train(suPER_bandwidth=0.2, suPER_mode="stochastic", lr=1e-3)
    assert (config.suPER_bandwidth, config.suPER_mode, config.lr) == (0.2, "stochastic", 1e-3)
    assert suPERDQNConfig().training(suPER_mean_stddev_window=77).suPER_window == 77  # the original's key


@pytest.mark.parametrize(("key", "value", "match"), [
    ("suPER_bandwidth", 1.5, r"suPER_bandwidth: expected a number in \[0, 1\], got 1.5"),
    ("suPER_bandwidth", float("nan"), "suPER_bandwidth"),
    ("suPER_mode", "median", "suPER_mode: expected one of quantile, gaussian"),
    ("suPER_window", 0, "suPER_window: expected an integer >= 1, got 0"),
    ("suPER_window", 2.5, "suPER_window"),
    ("suPER_team_sharing", 3, "suPER_team_sharing"),
    ("suPER_insertion_priority", "min", "suPER_insertion_priority: expected one of max, sender, legacy"),
    ("suPER", "yes", "suPER: expected True or False"),
    ("num_atoms", 51, "num_atoms"),
    ("suPER_params", {"k": 0}, r"suPER_params\['k'\]: expected an integer >= 1, got 0"),  # topk's, by its record
    ("suPER_params", {"k": 2.0}, r"suPER_params\['k'\]: expected an integer >= 1, got 2.0"),  # not coerced
    ("suPER_params", {"j": 1}, "suPER_params: expected a dict with keys among k"),
])
def test_validate_rejects_bad_values(key: str, value: Any, match: str) -> None:
    config = suPERDQNConfig().training(**{key: value})
    with pytest.raises(ValueError, match=match):
        config.validate()


def test_validate_swaps_in_the_relay_buffer_and_rejects_foreign_ones() -> None:
    config = suPERDQNConfig().training(replay_buffer_config={"type": "MultiAgentPrioritizedEpisodeReplayBuffer",
                                                             "capacity": 123, "alpha": 0.5, "beta": 0.3})
    config.validate()
    assert config.replay_buffer_config == {"type": BUFFER_PATH, "capacity": 123, "alpha": 0.5, "beta": 0.3}
    config = suPERDQNConfig().training(replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 9})
    with pytest.raises(ValueError, match="replay_buffer_config"):
        config.validate()
    config = suPERDQNConfig().training(suPER=False, replay_buffer_config={
        "type": "MultiAgentPrioritizedEpisodeReplayBuffer", "alpha": 0.6, "beta": 0.4})
    config.validate()  # suPER off: the user's buffer stays (plain DQN)
    assert config.replay_buffer_config["type"] == "MultiAgentPrioritizedEpisodeReplayBuffer"


# ---- exact relay on a tiny two-agent env


def build(two_agent_env: type, tiny_training: dict, tiny_model: dict, **suPER: Any) -> suPERDQN:
    config = small(suPERDQNConfig().environment(two_agent_env), tiny_training, tiny_model).training(**suPER)
    return suPERDQN(config=config)


def test_bandwidth_one_relays_exactly_the_other_modules_fresh_transitions(
        two_agent_env: type, tiny_training: dict, tiny_model: dict) -> None:
    algo = build(two_agent_env, tiny_training, tiny_model, suPER_bandwidth=1.0)
    try:
        for _ in range(2):
            result = algo.train()
        buf = algo.local_replay_buffer
        own0, relayed0 = own_and_relayed(buf, "a0")
        own1, relayed1 = own_and_relayed(buf, "a1")
        assert len(own0) == len(own1) == 32  # 32 env steps sampled, no eviction
        assert sorted(relayed0) == sorted(own1)  # exactly the other module's fresh transitions, once each
        assert sorted(relayed1) == sorted(own0)
        assert buf.num_relayed("a0") == buf.num_relayed("a1") == 32
        assert result["suPER"]["fraction_shared_a0"] == result["suPER"]["fraction_shared_a1"] == 1.0
        assert result["suPER"]["relayed_rows"] == 32  # this iteration: 16 env steps x 2 senders
        # relayed rows reach the receiver's learner: a0's replay batches contain a1's steps relabelled a0
        rows = buf.sample(num_items=64, modules_to_sample=["a0"], beta=0.4)
        assert {r.module_id for r in rows} == {"a0"} and {r.agent_id for r in rows} == {"a0", "a1"}
    finally:
        algo.stop()


def test_relay_metrics_describe_each_iteration_alone(two_agent_env: type, tiny_training: dict,
                                                    tiny_model: dict) -> None:
    """An iteration's fraction is the plain mean of its own fragments: RLlib 2.60 clears a reduce="mean" stat at each
    reduce (MeanStats), although log_value's docstring describes EMA smoothing for a mean without a window. An EMA
    (coefficient 0.01) would read 0.99 after the bandwidth drops from 1 to 0, a running mean 0.5."""
    algo = build(two_agent_env, tiny_training, tiny_model, suPER_bandwidth=1.0)
    try:
        first = algo.train()["suPER"]
        assert first["fraction_shared_mean"] == 1.0 and first["relayed_rows"] == 32
        assert algo.relay is not None
        algo.relay.bandwidth = 0.0
        second = algo.train()["suPER"]
        assert second["fraction_shared_mean"] == second["fraction_shared_a0"] == second["fraction_shared_a1"] == 0.0
        assert second["relayed_rows"] == 0 and second["relayed_rows_lifetime"] == 32
    finally:
        algo.stop()


def test_bandwidth_zero_relays_nothing(two_agent_env: type, tiny_training: dict, tiny_model: dict) -> None:
    algo = build(two_agent_env, tiny_training, tiny_model, suPER_bandwidth=0.0)
    try:
        for _ in range(2):
            result = algo.train()
        buf = algo.local_replay_buffer
        for m in ("a0", "a1"):
            own, relayed = own_and_relayed(buf, m)
            assert len(own) == 32 and relayed == [] and buf.num_relayed(m) == 0
            assert result["suPER"][f"fraction_shared_{m}"] == 0.0
        assert result["suPER"]["relayed_rows"] == 0
    finally:
        algo.stop()


def test_non_trainable_modules_neither_send_nor_receive(two_agent_env: type, tiny_training: dict,
                                                        tiny_model: dict) -> None:
    config = small(suPERDQNConfig().environment(two_agent_env), tiny_training, tiny_model)
    config.training(suPER_bandwidth=1.0).multi_agent(policies={"a0", "a1"}, policy_mapping_fn=lambda a, *_, **__: a,
                                                     policies_to_train=["a0"])
    algo = suPERDQN(config=config)
    try:
        result = algo.train()
        assert not algo.relay.active
        assert algo.local_replay_buffer.num_relayed("a0") == algo.local_replay_buffer.num_relayed("a1") == 0
        assert result["suPER"]["fraction_shared_mean"] == 0.0
    finally:
        algo.stop()


# ---- suPER=False is RLlib's DQN


def module_weights(algo: Algorithm) -> dict[str, dict[str, Any]]:
    return {m: algo.get_module(m).get_state() for m in ("a0", "a1")}


def test_suPER_false_equals_rllib_dqn(two_agent_env: type, tiny_training: dict, tiny_model: dict) -> None:  # noqa: N802
    stock_buffer = {"type": "MultiAgentPrioritizedEpisodeReplayBuffer", "capacity": 2000, "alpha": 0.6, "beta": 0.4}

    def run(config: Any) -> tuple[dict, dict]:
        config = small(config.environment(two_agent_env), tiny_training, tiny_model)
        config.multi_agent(policies={"a0", "a1"}, policy_mapping_fn=lambda a, *_, **__: a)
        config.training(replay_buffer_config=stock_buffer)
        algo = config.build_algo()
        algo.local_replay_buffer.rng = np.random.default_rng(0)  # RLlib 2.60's buffers ignore config.seed
        try:
            for _ in range(3):
                result = algo.train()
            return module_weights(algo), result
        finally:
            algo.stop()

    w_dqn, r_dqn = run(DQNConfig())
    w_super, r_super = run(suPERDQNConfig().training(suPER=False))
    for m in ("a0", "a1"):
        for k, v in w_dqn[m].items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(w_super[m][k])), (m, k)
        assert r_dqn["learners"][m]["qf_loss"] == r_super["learners"][m]["qf_loss"]
    assert "suPER" not in r_super


# ---- checkpoints


def test_checkpoint_round_trip_keeps_relay_windows_and_settings(two_agent_env: type, tiny_training: dict,
                                                                tiny_model: dict, tmp_path: Any) -> None:
    algo = build(two_agent_env, tiny_training, tiny_model, suPER_bandwidth=0.3, suPER_mode="gaussian",
                 suPER_window=20, suPER_insertion_priority="sender")
    restored = None
    try:
        algo.train()
        algo.train()
        before = algo.relay.state_dict()
        assert before["windows"]["count_N"].tolist() == [32, 32]
        path = algo.save(str(tmp_path / "ckpt")).checkpoint.path
        restored = Algorithm.from_checkpoint(path)
        assert isinstance(restored, suPERDQN)
        assert restored.relay_settings() == algo.relay_settings()
        assert (restored.config.suPER_bandwidth, restored.config.suPER_mode, restored.config.suPER_window) == (
            0.3, "gaussian", 20)
        after = restored.relay.state_dict()
        np.testing.assert_array_equal(after["windows"]["values_NW"], before["windows"]["values_NW"])
        np.testing.assert_array_equal(after["windows"]["count_N"], before["windows"]["count_N"])
        assert after["rng"] == before["rng"]
        restored.train()  # and it keeps training
        assert restored.relay.state_dict()["windows"]["count_N"].tolist() == [48, 48]
    finally:
        algo.stop()
        if restored is not None:
            restored.stop()


# ---- remote EnvRunners (an RLlib example env with int agent ids) and Tune


def cartpole_config(tiny_training: dict, tiny_model: dict) -> Any:
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    config = suPERDQNConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
    return small(config, tiny_training, tiny_model).training(suPER_bandwidth=0.5)


def test_remote_env_runner_smoke(tiny_training: dict, tiny_model: dict) -> None:
    config = cartpole_config(tiny_training, tiny_model).env_runners(num_env_runners=1)
    algo = config.build_algo()
    try:
        algo.train()
        result = algo.train()
        assert set(algo.relay.agent_ids) == {"0", "1"}
        assert result["suPER"]["relayed_rows_lifetime"] > 0
        assert result["learners"]["0"]["num_module_steps_trained"] > 0
    finally:
        algo.stop()


def test_tune_smoke(two_agent_env: type, tiny_training: dict, tiny_model: dict, tmp_path: Any) -> None:
    """Tune runs the trial in an actor (the local env class pickles by value) and checkpoints at the end; the
    algorithm is found by its registered name, as RLlib's built-ins are.

    (MultiAgentCartPole cannot be used here: its int agent ids break RLlib 2.60's MetricsLogger.get_state,
    i.e. every checkpoint, for plain DQN too.)
    """
    from ray import tune

    config = small(suPERDQNConfig().environment(two_agent_env), tiny_training, tiny_model).training(suPER_bandwidth=0.5)
    tuner = tune.Tuner("suPERDQN", param_space=config,
                       run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path),
                                                 verbose=0))
    result = tuner.fit().get_best_result(metric="training_iteration", mode="max")
    assert result.error is None
    assert result.metrics["training_iteration"] == 2
    assert 0.0 <= result.metrics["suPER"]["fraction_shared_mean"] <= 1.0
    assert result.metrics["suPER"]["relayed_rows_lifetime"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_learner_relays(two_agent_env: type, tiny_training: dict, tiny_model: dict) -> None:
    """The fresh-TD pass runs where the learner's nets live (cuda) and comes back as numpy."""
    config = small(suPERDQNConfig().environment(two_agent_env), tiny_training, tiny_model)
    config.training(suPER_bandwidth=1.0).learners(num_learners=0, num_gpus_per_learner=1)
    algo = suPERDQN(config=config)
    try:
        device = next(iter(algo.learner_group.foreach_learner(lambda learner: str(learner._device)))).get()
        assert device.startswith("cuda")
        result = algo.train()
        assert result["suPER"]["relayed_rows"] == 32
    finally:
        algo.stop()
