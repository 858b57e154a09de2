"""Building adapters from an ``EnvConfig``.

- ``build_adapter(cfg, seed, opponent)``: the adapter with its random or learning opponent team, or with an
  opponent policy the caller built itself (tests drive an adapter with a scripted opponent);
- ``has_network_opponent(cfg)``: whether ``env.opponent`` names a weights file (``pretrained`` or a PATH);
- ``make_batched_env(cfg, E, device)``: the device-resident batched version of an env (``record.batched``).

The env a config describes with a network opponent (a torch model loaded from a team or mixture file) is built
one layer up, by ``suPER.opponents.make_env`` / ``make_batch``: this package imports neither torch at import
time nor the opponents package.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from suPER.config import EnvConfig, env_key
from suPER.envs.base import MultiAgentEnv, OpponentPolicy
from suPER.envs.record import ENVS, env_record


def has_network_opponent(cfg: EnvConfig) -> bool:
    """True when ``cfg``'s opponent team is a weights file (``pretrained`` or a PATH), not random / learning."""
    return env_key(cfg.name) in ENVS and env_record(cfg.name).has_opponents and cfg.opponent not in env_record(
        cfg.name).opponent_kinds


def build_adapter(cfg: EnvConfig, seed: int | None = None, opponent: OpponentPolicy | None = None) -> MultiAgentEnv:
    """Build the adapter an ``EnvConfig`` describes, with the opponent policy given (or one it resolves).

    Args:
        cfg: env section of the experiment config (name, kwargs, horizon, opponent, pad_like_original).
        seed: seeds the fixed random opponent's generator until the first ``reset(seed)``, which reseeds it
            with the episode's seed (the env itself is seeded by ``reset(seed)``, as the original did).
        opponent: the opponent team's policy; overrides ``cfg.opponent``. Needed for ``env.opponent`` values
            other than ``record.opponent_kinds`` (``suPER.opponents.make_env`` loads those).

    Returns:
        The adapter; call ``reset(seed)`` before stepping.

    Raises:
        ValueError: unknown env name, or a network opponent without ``opponent``.
    """
    rec = env_record(cfg.name)
    cls = ENVS[rec.name]
    if not rec.has_opponents:
        named = {"name": cfg.name} if rec.generic else {}
        return cls(dict(cfg.kwargs), horizon=cfg.horizon, **named)  # type: ignore[no-any-return]
    if opponent is None and cfg.opponent not in rec.opponent_kinds:
        raise ValueError(f"env.opponent: {cfg.opponent!r} needs a network opponent; build the env with "
                         f"suPER.opponents.make_env (or pass opponent=), or use one of {', '.join(rec.opponent_kinds)}")
    self_play = opponent is None and cfg.opponent == "learning"
    env = cls(dict(cfg.kwargs), horizon=cfg.horizon, pad_like_original=cfg.pad_like_original, self_play=self_play,
              swap_teams=cfg.swap_teams)
    if opponent is not None:
        env.set_opponent(opponent)
    elif seed is not None:
        # the adapter's own random opponent: every reset(seed) reseeds it, so an episode depends only on its
        # seed (evaluation episodes are seeded one by one); until then it draws from ``seed``
        env.opponent.rng = np.random.default_rng(seed)
    return env  # type: ignore[no-any-return]


def make_batched_env(cfg: EnvConfig, num_games: int, device: str = "cpu") -> Any:
    """Build E games of the env an ``EnvConfig`` describes, stepped together (``BatchedMultiAgentEnv``).

    Args:
        cfg: env section of the experiment config (name, kwargs, horizon).
        num_games: E.
        device: torch device of the batched env's tensors (cpu, cuda, ...).

    Returns:
        The batched adapter (``record.batched``, imported here: it needs torch); call ``reset(seeds)`` first.

    Raises:
        ValueError: the env has no batched version.
    """
    batched = [n for n, cls in ENVS.items() if cls.record.batched]
    if env_key(cfg.name) not in batched:
        raise ValueError(f"env.name: a batched env exists for {', '.join(batched)}, got {cfg.name!r}")
    module, cls = str(env_record(cfg.name).batched).split(":")
    return getattr(importlib.import_module(module), cls)(dict(cfg.kwargs), num_games, horizon=cfg.horizon,
                                                         device=device)
