"""Building envs from an ``EnvConfig``: the one factory every trainer, evaluation and match calls.

Two functions, two contracts:

- ``make_env(cfg, seed)``: the env a config describes, whatever its ``env.opponent`` (random, learning,
  ``pretrained`` or a team file PATH). This is what callers want.
- ``build_adapter(cfg, seed, opponent)``: the adapter with an opponent policy the caller built itself;
  ``make_env`` uses it, and so do tests that drive an adapter with a scripted opponent.

A network opponent (``pretrained`` / PATH) is a torch model; this package does not import torch (STYLE
module map), so ``make_env`` reaches ``suPER.opponents`` through a call-time import (an arrow the layering
test lists explicitly). ``make_batch`` builds E games in lockstep sharing one network opponent;
``make_batched_env`` the device-resident batched version of an env (``record.batched``).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from suPER.config import EnvConfig, env_key
from suPER.envs.base import MultiAgentEnv, OpponentPolicy
from suPER.envs.batched import LockstepBatch
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
            other than ``record.opponent_kinds`` (``make_env`` loads those).

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
                         f"suPER.envs.make_env (or pass opponent=), or use one of {', '.join(rec.opponent_kinds)}")
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


def make_env(cfg: EnvConfig, seed: int | None = None) -> MultiAgentEnv:
    """The env an ``EnvConfig`` describes, its opponent team included (random | learning | pretrained | PATH).

    Args:
        cfg: env config; ``opponent`` is random | learning | pretrained | PATH, ``opponent_epsilon`` a network
            opponent's exploration, ``opponent_allow_pickle`` admits the original's pickle format.
        seed: seeds the opponent's generator (random actions or epsilon draws).

    Returns:
        The adapter with its opponent set; call ``reset(seed)`` before stepping.

    Raises:
        ValueError: unknown env name.
        suPER.opponents.OpponentFileError: a weights file that is missing, unreadable or does not fit the env.
    """
    if not has_network_opponent(cfg):
        return build_adapter(cfg, seed=seed)
    team_file = importlib.import_module("suPER.opponents.team_file")
    env = build_adapter(cfg, seed=seed, opponent=_Placeholder())
    path = team_file.opponent_path(cfg.name, cfg.opponent)
    try:
        loader = OPPONENT_FILE_LOADERS.get(path.suffix)
        if loader is not None:
            module, fn = loader.split(":")
            opponent = getattr(importlib.import_module(module), fn)(path, env, cfg, seed)
        else:
            policy = importlib.import_module("suPER.opponents.policy")
            net, _ = team_file.load_team(path, env, "opponent", cfg.opponent_allow_pickle)
            opponent = policy.NetworkOpponent(net, cfg.opponent_epsilon, seed, cfg.opponent_epsilon_final,
                                              cfg.opponent_epsilon_timesteps)
    except BaseException:
        env.close()
        raise
    env.set_opponent(opponent)  # type: ignore[attr-defined]
    return env


OPPONENT_FILE_LOADERS: dict[str, str] = {".json": "suPER.population.mixture:load_mixture_opponent"}
"""opponent file suffix -> ``module:function(path, env, env_cfg, seed) -> OpponentPolicy`` (imported lazily)
for opponent files that are not team files: a population's mixture of teams (``suPER.population.mixture``)"""


def make_batch(cfg: EnvConfig, num_games: int, seed: int | None = None) -> LockstepBatch:
    """``num_games`` games of ``make_env(cfg)`` stepped in lockstep (``suPER.envs.batched.LockstepBatch``).

    A network opponent's weights are loaded once and shared by every game (its actions for all games come
    from one forward per step); game g's opponent generator (epsilon draws) is seeded ``seed + g``.

    Args:
        cfg: env config, as for ``make_env``.
        num_games: E >= 1.
        seed: seeds the games' opponent generators (the games themselves are seeded by ``reset(seeds)``).
    """
    first = make_env(cfg, seed=seed)

    def make_one(g: int) -> MultiAgentEnv:
        if g == 0:
            return first
        game_seed = None if seed is None else seed + g
        if not has_network_opponent(cfg):
            return make_env(cfg, seed=game_seed)
        policy = importlib.import_module("suPER.opponents.policy")
        env = build_adapter(cfg, seed=game_seed, opponent=_Placeholder())
        shared = first.opponent  # type: ignore[attr-defined]
        if isinstance(shared, policy.NetworkOpponent):
            env.set_opponent(policy.NetworkOpponent(shared.net, cfg.opponent_epsilon, game_seed,  # type: ignore[attr-defined]
                                                    cfg.opponent_epsilon_final, cfg.opponent_epsilon_timesteps))
        else:  # another opponent file kind (a mixture of teams): a copy sharing its networks, its own generators
            env.set_opponent(shared.fork(game_seed))  # type: ignore[attr-defined]
        return env

    return LockstepBatch(make_one, num_games)  # closes the games built so far when one fails


def check_opponent(cfg: EnvConfig) -> None:
    """Load the configured opponent once (before a run folder is written): bad files fail early."""
    if has_network_opponent(cfg):
        make_env(cfg).close()


class _Placeholder:
    """Stands in for the network opponent until its file is loaded against the built env."""

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        raise RuntimeError("opponent not loaded")


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
