"""Fixtures for the RLlib tests: one local, loopback-only Ray instance per session, tiny envs and configs."""

from __future__ import annotations

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Ray 2.60 turns token auth on by default
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


def _env_class() -> type:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    class TwoAgentCounter(MultiAgentEnv):
        """Deterministic two-agent env: obs = [t / 10, agent index], reward = action - 0.5 * index.

        Episodes are ``horizon`` steps long (truncated), so rollout fragments cross episode boundaries.
        """

        def __init__(self, config: dict[str, Any] | None = None) -> None:
            super().__init__()
            config = dict(config or {})
            self.horizon = int(config.get("horizon", 7))
            self.possible_agents = ["a0", "a1"]
            self.agents = list(self.possible_agents)
            box = gym.spaces.Box(-1.0, 10.0, (2,), np.float32)
            self.observation_spaces = {a: box for a in self.possible_agents}
            self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
            self.t = 0

        def _obs(self) -> dict[str, np.ndarray]:
            return {a: np.array([self.t / 10.0, i], np.float32) for i, a in enumerate(self.possible_agents)}

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            self.t = 0
            self.agents = list(self.possible_agents)
            return self._obs(), {}

        def step(self, action_dict: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
            self.t += 1
            rew = {a: float(action_dict[a]) - 0.5 * i for i, a in enumerate(self.possible_agents) if a in action_dict}
            done = self.t >= self.horizon
            return self._obs(), rew, {"__all__": False}, {"__all__": done}, {}

    return TwoAgentCounter


@pytest.fixture(scope="session")
def two_agent_env() -> type:
    """The TwoAgentCounter MultiAgentEnv class (agents a0, a1)."""
    return _env_class()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray instance bound to loopback for the whole session, shut down at the end."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()


@pytest.fixture
def tiny_training() -> dict[str, Any]:
    """``.training(...)`` kwargs for fast tests (learning from env step 8, batches of 8 per module)."""
    return {
        "num_steps_sampled_before_learning_starts": 8,
        "train_batch_size_per_learner": 8,
        "target_network_update_freq": 16,
        "replay_buffer_config": {"capacity": 2000, "alpha": 0.6, "beta": 0.4},
    }


@pytest.fixture
def tiny_model() -> dict[str, Any]:
    """``.rl_module(model_config=...)`` for small MLP Q-nets."""
    return {"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]}
