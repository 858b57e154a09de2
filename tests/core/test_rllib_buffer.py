"""The relay buffer subclass: RLlib-internals guard, the priority-ordering fix, pointers, routing, growth."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)

from suPER.core import rllib_buffer
from suPER.core.rllib_buffer import (
    RelayMultiAgentPrioritizedEpisodeReplayBuffer,
    RLlibInternalsChanged,
    check_rllib_internals,
)

MODULE_OF = {"a0": "m0", "a1": "m1"}


def to_module(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    return MODULE_OF[agent_id]


def reward_of(k: int, agent: int, t: int) -> float:
    """A unique positive reward per (episode, agent, step): the row's identity and its test priority."""
    return 1.0 + 100.0 * k + 50.0 * agent + t


def make_episodes(env_cls: type, n_episodes: int = 4, length: int = 6) -> list[MultiAgentEpisode]:
    env = env_cls()
    out = []
    for k in range(n_episodes):
        eps = MultiAgentEpisode(agent_to_module_mapping_fn=to_module, observation_space=env.observation_space,
                                action_space=env.action_space)
        obs, _ = env.reset()
        eps.add_env_reset(observations=obs, infos={})
        for t in range(length):
            actions = {"a0": 0, "a1": 1}
            obs, _, _, _, _ = env.step(actions)
            rewards = {a: reward_of(k, i, t) for i, a in enumerate(("a0", "a1"))}
            eps.add_env_step(obs, actions, rewards, infos={}, terminateds={"__all__": False},
                             truncateds={"__all__": t == length - 1})
        out.append(eps.to_numpy())
    return out


@pytest.fixture(scope="module")
def learner_connector() -> Any:
    """RLlib's own DQN learner connector pipeline for modules m0/m1 (the order TD errors come back in)."""
    cfg = DQNConfig().multi_agent(policies={"m0", "m1"}, policy_mapping_fn=to_module)
    return cfg.build_learner_connector(input_observation_space=None, input_action_space=None)


# ---- guard on the private internals


def test_rllib_internals_are_the_ones_we_rely_on() -> None:
    assert ray.__version__ == rllib_buffer.TESTED_RAY_VERSION, (
        f"suPER's RLlib buffer is written against ray[rllib]=={rllib_buffer.TESTED_RAY_VERSION}, found "
        f"{ray.__version__}: re-check suPER/core/rllib_buffer.py (docs/rllib.md) before changing the pin")
    check_rllib_internals()  # raises RLlibInternalsChanged naming whatever moved


def test_guard_names_a_changed_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MultiAgentPrioritizedEpisodeReplayBuffer, "_add_new_module_indices",
                        lambda self, episode, index: None)
    with pytest.raises(RLlibInternalsChanged, match="_add_new_module_indices"):
        check_rllib_internals()


def test_guard_names_a_missing_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rllib_buffer, "PRIVATE_ATTRIBUTES", (*rllib_buffer.PRIVATE_ATTRIBUTES, "_gone_in_2_61"))
    with pytest.raises(RLlibInternalsChanged, match="no attribute '_gone_in_2_61'"):
        check_rllib_internals()


def test_guard_names_a_version_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "__version__", "2.99.0")
    with pytest.raises(RLlibInternalsChanged, match=r"(?s)ray is 2\.99\.0.*ray\[rllib\]==2\.60\.0"):
        check_rllib_internals()


def test_index_layout_and_connector_key_are_as_assumed(two_agent_env: type, learner_connector: Any) -> None:
    """Behavioural half of the guard: the (episode, agent, ts, tree) quadlets and the connector's grouping."""
    buf = MultiAgentPrioritizedEpisodeReplayBuffer(capacity=100)
    eps = make_episodes(two_agent_env, n_episodes=1, length=3)
    buf.add(eps)
    assert buf._module_to_indices["m0"] == [(0, "a0", t, t) for t in range(3)]
    rows = buf.sample(num_items=4, modules_to_sample=["m0"])
    assert {r.module_id for r in rows} == {"m0"}
    batch = learner_connector(rl_module=None, batch={}, episodes=rows, shared_data={})
    assert len(batch["m0"]["rewards"]) == 4


# ---- the priority-ordering defect and its fix


def sample_update_and_check(buf: MultiAgentPrioritizedEpisodeReplayBuffer, connector: Any) -> list[str]:
    """Sample, run RLlib's learner connector, feed back 'TD errors' = each batch row's own reward.

    Returns the rows whose tree leaf did NOT receive their own value (alpha = 1).
    """
    rows = buf.sample(num_items=12, beta=0.4, modules_to_sample=["m0", "m1"])
    batch = connector(rl_module=None, batch={}, episodes=rows, shared_data={})
    wrong = []
    for m in ("m0", "m1"):
        sampled = [r for r in rows if r.module_id == m]
        tree_idx = list(buf._module_to_last_sampled_indices[m])
        buf.update_priorities(np.asarray(batch[m]["rewards"], dtype=float), m)
        for row, i in zip(sampled, tree_idx):
            if buf._module_to_sum_segment[m][i] != pytest.approx(float(row.get_rewards(0))):
                wrong.append(f"{m}: leaf {i} of {row.agent_id} t={row.t_started}")
    return wrong


def test_stock_buffer_puts_priorities_on_the_wrong_rows(two_agent_env: type, learner_connector: Any) -> None:
    buf = MultiAgentPrioritizedEpisodeReplayBuffer(capacity=1000, alpha=1.0)
    buf.rng = np.random.default_rng(0)
    buf.add(make_episodes(two_agent_env))
    wrong = sample_update_and_check(buf, learner_connector)
    assert wrong, "RLlib's stock buffer no longer mis-assigns priorities: the ordering fix may be unnecessary"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relay_buffer_puts_each_priority_on_its_row(two_agent_env: type, learner_connector: Any, seed: int) -> None:
    buf = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=1000, alpha=1.0, seed=seed)
    buf.add(make_episodes(two_agent_env))
    for _ in range(3):  # repeated sample/update rounds
        assert sample_update_and_check(buf, learner_connector) == []


def test_fix_keeps_the_stock_draws(two_agent_env: type) -> None:
    """Same generator state -> the same multiset of rows as the stock buffer (only the order differs)."""
    stock = MultiAgentPrioritizedEpisodeReplayBuffer(capacity=1000, alpha=1.0)
    stock.rng = np.random.default_rng(5)
    ours = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=1000, alpha=1.0, seed=5)
    episodes = make_episodes(two_agent_env)
    for b in (stock, ours):
        b.add(episodes)
    a = stock.sample(num_items=10, modules_to_sample=["m0", "m1"])
    b = ours.sample(num_items=10, modules_to_sample=["m0", "m1"])
    key = [(r.module_id, r.multi_agent_episode_id, r.agent_id, r.t_started) for r in a]
    assert sorted(key) == sorted((r.module_id, r.multi_agent_episode_id, r.agent_id, r.t_started) for r in b)


# ---- relayed pointers


def test_relayed_rows_are_routed_to_the_receiver_and_expire_with_their_episode(two_agent_env: type) -> None:
    buf = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=12, alpha=0.6, seed=0)
    first = make_episodes(two_agent_env, n_episodes=1, length=6)
    buf.add(first)
    fresh = buf.last_fresh
    assert fresh["m1"] == [(first[0].id_, "a1", t) for t in range(6)]
    own_m0 = buf.get_num_timesteps("m0")
    assert buf.add_relayed(["m0"] * 6, *zip(*fresh["m1"])) == 6
    assert buf.get_num_timesteps("m0") == own_m0 + 6 and buf.num_relayed("m0") == 6
    rows = buf.sample(num_items=40, modules_to_sample=["m0"], beta=0.4)
    assert {r.module_id for r in rows} == {"m0"}
    assert {r.agent_id for r in rows} == {"a0", "a1"}  # relayed rows from a1 train m0
    # two more episodes push the first (and the pointers into it) out
    buf.add(make_episodes(two_agent_env, n_episodes=2, length=6))
    assert buf.num_relayed("m0") == 0
    assert buf.get_num_timesteps("m0") == len(buf._module_to_indices["m0"])
    assert all(q[1] == "a0" for q in buf._module_to_indices["m0"])


def test_trees_grow_when_a_receiver_holds_more_than_the_stock_capacity(two_agent_env: type) -> None:
    buf = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=8, alpha=1.0, seed=0)
    buf.add(make_episodes(two_agent_env, n_episodes=1, length=6))
    cap = buf._module_to_sum_segment["m0"].capacity
    src = buf.last_fresh["m1"]
    n = 0
    while n <= cap:
        n += buf.add_relayed(["m0"] * len(src), *zip(*src), priorities=[2.0] * len(src))
    tree = buf._module_to_sum_segment["m0"]
    assert tree.capacity == 2 * cap
    assert tree.sum() == pytest.approx(6 * 1.0 + n * 2.0)  # own rows at max priority 1, pointers at 2
    assert buf._module_to_min_segment["m0"].min() == pytest.approx(1.0)
    rows = buf.sample(num_items=16, modules_to_sample=["m0"], beta=0.4)
    assert len(rows) == 16


def test_seeded_buffers_sample_identically(two_agent_env: type) -> None:
    bufs = [RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=100, seed=7) for _ in range(2)]
    eps = make_episodes(two_agent_env)
    for b in bufs:
        b.add(eps)
    a, b = (x.sample(num_items=8, modules_to_sample=["m0", "m1"]) for x in bufs)
    assert [(r.multi_agent_episode_id, r.t_started) for r in a] == [(r.multi_agent_episode_id, r.t_started) for r in b]


def test_state_round_trip_keeps_pointer_counts(two_agent_env: type) -> None:
    buf = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=100, seed=0)
    buf.add(make_episodes(two_agent_env, n_episodes=1))
    buf.add_relayed(["m0"] * 3, *zip(*buf.last_fresh["m1"][:3]))
    other = RelayMultiAgentPrioritizedEpisodeReplayBuffer(capacity=100, seed=0)
    other.set_state(buf.get_state())
    assert other.num_relayed("m0") == 3
    assert other._module_to_indices["m0"] == buf._module_to_indices["m0"]
