"""Environment adapters: PettingZoo/MAgent2 envs seen as arrays over the learning team.

Registry ``ENVS`` maps each key (= ``experiments/envs/<key>.yaml`` and ``EnvConfig.name``) to its
adapter class; ``make_env`` builds one from an ``EnvConfig``.

Adding a new environment:
    1. Write ``suPER/envs/<key>.py`` with a class implementing ``MultiAgentEnv`` (``base.py``): a
       constructor ``(kwargs, horizon, ...)``, ``spec``, ``reset(seed)``, ``step(actions_N)``,
       ``close()``. Convert dicts to ``[N, ...]`` arrays there and nowhere else.
    2. Add it to ``ENVS`` below and, if it has an opponent team, to ``_HAS_OPPONENTS``.
    3. Add ``experiments/envs/<key>.yaml`` and the key to ``suPER.config.ENV_NAMES``.
    4. Add ``tests/envs/test_<key>.py`` comparing the adapter with the library env step by step.
    5. Optionally a batched version (``BatchedMultiAgentEnv``, E games at once) in ``BATCHED_ENVS``,
       built by ``make_batched_env``; trainers keep using ``make_env`` until they opt in.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from suPER.config import EnvConfig, load_env_defaults
from suPER.envs.base import EnvSpec, MultiAgentEnv, OpponentPolicy, RandomOpponent, StepResult
from suPER.envs.magent import AdversarialPursuitEnv, BattleEnv, MAgentEnv
from suPER.envs.pursuit import PursuitEnv

__all__ = [
    "ENVS",
    "AdversarialPursuitEnv",
    "BattleEnv",
    "EnvSpec",
    "MAgentEnv",
    "MultiAgentEnv",
    "OpponentPolicy",
    "PursuitEnv",
    "RandomOpponent",
    "StepResult",
    "env_info",
    "make_env",
    "OPPONENT_KINDS",
    "BATCHED_ENVS",
    "make_batched_env",
]

ENVS: dict[str, type] = {
    "pursuit": PursuitEnv,
    "battle": BattleEnv,
    "adversarial_pursuit": AdversarialPursuitEnv,
}
"""registry key -> adapter class"""

_HAS_OPPONENTS = ("battle", "adversarial_pursuit")

BATCHED_ENVS: dict[str, str] = {
    "pursuit": "suPER.envs.vec_pursuit:VecPursuitEnv",
}
"""registry key -> batched adapter (``module:Class``, imported lazily: it needs torch)"""


OPPONENT_KINDS = ("random", "learning")
"""``env.opponent`` values this package resolves itself; ``pretrained`` and a file PATH need the network
opponents of ``suPER.opponents`` (which builds the ``OpponentPolicy`` and passes it to ``make_env``)."""


def make_env(cfg: EnvConfig, seed: int | None = None, opponent: OpponentPolicy | None = None) -> MultiAgentEnv:
    """Build the adapter an ``EnvConfig`` describes.

    Args:
        cfg: env section of the experiment config (name, kwargs, horizon, opponent,
            pad_like_original).
        seed: seeds the fixed random opponent's generator until the first ``reset(seed)``, which reseeds it
            with the episode's seed (the env itself is seeded by ``reset(seed)``, as the original did).
        opponent: the opponent team's policy, built by the caller for ``env.opponent`` values other
            than random / learning (``suPER.opponents.make_env`` does this); overrides ``cfg.opponent``.

    Returns:
        The adapter; call ``reset(seed)`` before stepping.

    Raises:
        ValueError: unknown env name or opponent.
    """
    if cfg.name not in ENVS:
        raise ValueError(f"env.name: expected one of {', '.join(ENVS)}, got {cfg.name!r}")
    cls = ENVS[cfg.name]
    if cfg.name not in _HAS_OPPONENTS:
        return cls(dict(cfg.kwargs), horizon=cfg.horizon)
    if opponent is None and cfg.opponent not in OPPONENT_KINDS:
        raise ValueError(f"env.opponent: {cfg.opponent!r} needs a network opponent; build the env with "
                         f"suPER.opponents.make_env (or pass opponent=), or use one of {', '.join(OPPONENT_KINDS)}")
    self_play = opponent is None and cfg.opponent == "learning"
    env = cls(dict(cfg.kwargs), horizon=cfg.horizon, pad_like_original=cfg.pad_like_original, self_play=self_play,
              swap_teams=cfg.swap_teams)
    if opponent is not None:
        env.set_opponent(opponent)
    elif seed is not None:
        # the adapter's own random opponent: every reset(seed) reseeds it, so an episode depends only on its
        # seed (evaluation episodes are seeded one by one); until then it draws from ``seed``
        env.opponent.rng = np.random.default_rng(seed)
    return env


def make_batched_env(cfg: EnvConfig, num_games: int, device: str = "cpu") -> Any:
    """Build E games of the env an ``EnvConfig`` describes, stepped together (``BatchedMultiAgentEnv``).

    Args:
        cfg: env section of the experiment config (name, kwargs, horizon).
        num_games: E.
        device: torch device of the batched env's tensors (cpu, cuda, ...).

    Returns:
        The batched adapter; call ``reset(seeds)`` before stepping.

    Raises:
        ValueError: the env has no batched version.
    """
    if cfg.name not in BATCHED_ENVS:
        raise ValueError(f"env.name: a batched env exists for {', '.join(BATCHED_ENVS)}, got {cfg.name!r}")
    module, cls = BATCHED_ENVS[cfg.name].split(":")
    return getattr(importlib.import_module(module), cls)(dict(cfg.kwargs), num_games, horizon=cfg.horizon,
                                                         device=device)


def env_info(name: str) -> dict[str, Any]:
    """Describe an env built with its YAML defaults (for the CLI ``envs`` command).

    Args:
        name: registry key.

    Returns:
        dict with name, team, learner_ids, opponent_ids, obs_shape, obs_dtype, n_actions,
            opponent_obs_shape, opponent_n_actions (empty/0 without opponents), kwargs.
    """
    section = load_env_defaults(name).get("env", {})
    cfg = EnvConfig(name=name, kwargs=dict(section.get("kwargs", {})), opponent="random",
                    pad_like_original=bool(section.get("pad_like_original", True)))
    env = make_env(cfg)
    try:
        spec = env.spec
        return {
            "name": spec.name,
            "team": spec.team,
            "learner_ids": list(spec.learner_ids),
            "opponent_ids": list(spec.opponent_ids),
            "obs_shape": list(spec.obs_shape),
            "obs_dtype": str(spec.obs_dtype.__name__),
            "n_actions": spec.n_actions,
            "opponent_obs_shape": list(getattr(env, "opponent_obs_shape", ())),
            "opponent_n_actions": getattr(env, "opponent_n_actions", 0),
            "kwargs": cfg.kwargs,
        }
    finally:
        env.close()
