"""Environment adapters: PettingZoo/MAgent2 envs seen as arrays over the learning team.

Registry ``ENVS`` (``suPER.envs.record``) maps each key (= ``experiments/envs/<key>.yaml`` and
``EnvConfig.name``) to its adapter class; the class carries the env's facts as ``record = EnvRecord(...)``.
``build_adapter`` (``suPER.envs.factory``) builds the adapter an ``EnvConfig`` describes with a random or
learning opponent team; ``suPER.opponents.make_env`` builds it with any opponent, a network team included.
Adding an environment: docs/extending.md ("Add an environment").
"""

from __future__ import annotations

from typing import Any

from suPER.config import EnvConfig, load_env_defaults
from suPER.envs.base import EnvSpec, MultiAgentEnv, OpponentPolicy, RandomOpponent, StepResult
from suPER.envs.factory import build_adapter, has_network_opponent, make_batched_env
from suPER.envs.magent import AdversarialPursuitEnv, BattleEnv, MAgentEnv
from suPER.envs.pettingzoo import PettingzooEnv
from suPER.envs.pursuit import PursuitEnv
from suPER.envs.record import (
    ENVS,
    OPPONENT_KINDS,
    EnvRecord,
    EnvRegistrationError,
    UnusableEnvError,
    adapter_class,
    env_record,
    opponent_env_names,
    own_record,
    register,
)

__all__ = [
    "ENVS",
    "AdversarialPursuitEnv",
    "BattleEnv",
    "EnvRecord",
    "EnvRegistrationError",
    "EnvSpec",
    "MAgentEnv",
    "MultiAgentEnv",
    "OpponentPolicy",
    "PettingzooEnv",
    "PursuitEnv",
    "RandomOpponent",
    "StepResult",
    "UnusableEnvError",
    "adapter_class",
    "build_adapter",
    "env_info",
    "env_record",
    "has_network_opponent",
    "OPPONENT_KINDS",
    "make_batched_env",
    "opponent_env_names",
    "own_record",
    "register",
]

# the registry: one line per environment (listing order)
register(PursuitEnv)
register(BattleEnv)
register(AdversarialPursuitEnv)
register(PettingzooEnv)  # generic: every PettingZoo parallel env, named pz-<module>[-<function>]


def env_info(name: str) -> dict[str, Any]:
    """Describe an env built with its YAML defaults (for the CLI ``envs`` command).

    Args:
        name: registry key, or a generic adapter's env name (``pz-mpe2.simple_spread_v3``).

    Returns:
        dict with name, team, learner_ids, opponent_ids, obs_shape, obs_dtype, obs_scale, n_actions,
            opponent_obs_shape, opponent_n_actions (empty/0 without opponents), kwargs.
    """
    section = load_env_defaults(name).get("env", {})
    cfg = EnvConfig(name=name, kwargs=dict(section.get("kwargs", {})), opponent="random",
                    pad_like_original=bool(section.get("pad_like_original", True)))
    env = build_adapter(cfg)
    try:
        spec = env.spec
        return {
            "name": spec.name,
            "team": spec.team,
            "learner_ids": list(spec.learner_ids),
            "opponent_ids": list(spec.opponent_ids),
            "obs_shape": list(spec.obs_shape),
            "obs_dtype": str(spec.obs_dtype.__name__),
            "obs_scale": float(spec.obs_scale),
            "n_actions": spec.n_actions,
            "opponent_obs_shape": list(getattr(env, "opponent_obs_shape", ())),
            "opponent_n_actions": getattr(env, "opponent_n_actions", 0),
            "kwargs": cfg.kwargs,
        }
    finally:
        env.close()
