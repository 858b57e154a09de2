"""An env with its opponent team: the one builder every trainer, evaluation and match calls.

``suPER.envs`` builds adapters whose opponent is random, learning (self-play) or a policy the caller hands in
(``build_adapter``); a network opponent (``env.opponent``: ``pretrained`` or a PATH) is a torch model loaded
from a team file or a mixture file, which is this package's business. So the env as a config describes it,
opponent included, is built here, one layer above both:

- ``make_env(cfg, seed)``: one env, whatever its ``env.opponent`` (random, learning, ``pretrained`` or a PATH);
- ``make_batch(cfg, E, seed)``: E games in lockstep sharing one network opponent;
- ``make_eval_batch(cfg, E, seed, device)``: the batch an evaluation or a match plays on (pursuit's vectorized
  env where the env record has one, else ``make_batch``);
- ``check_opponent(cfg)``: load the configured opponent once, so a bad file fails before a run folder is written;
- ``random_team_return(cfg)``: a uniformly random team's return, the bar the learning checks must clear.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from suPER.config import EnvConfig
from suPER.envs import (
    MultiAgentEnv,
    OpponentPolicy,
    build_adapter,
    env_record,
    has_network_opponent,
    make_batched_env,
)
from suPER.envs.base import BatchedMultiAgentEnv
from suPER.envs.batched import LockstepBatch
from suPER.evaluation import play_episodes
from suPER.opponents.mixture import load_mixture_opponent
from suPER.opponents.policy import NetworkOpponent
from suPER.opponents.team_file import load_team, opponent_path

OPPONENT_FILE_LOADERS: dict[str, Callable[[Path, MultiAgentEnv, EnvConfig, int | None], OpponentPolicy]] = {
    ".json": load_mixture_opponent}
"""opponent file suffix -> ``loader(path, env, env_cfg, seed) -> OpponentPolicy`` for opponent files that are not
team files: a population's mixture of teams (``suPER.opponents.mixture``)"""


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
    env = build_adapter(cfg, seed=seed, opponent=_Placeholder())
    path = opponent_path(cfg.name, cfg.opponent)
    try:
        loader = OPPONENT_FILE_LOADERS.get(path.suffix)
        if loader is not None:
            opponent: OpponentPolicy = loader(path, env, cfg, seed)
        else:
            net, _ = load_team(path, env, "opponent", cfg.opponent_allow_pickle)
            opponent = NetworkOpponent(net, cfg.opponent_epsilon, seed, cfg.opponent_epsilon_final,
                                       cfg.opponent_epsilon_timesteps)
    except BaseException:
        env.close()
        raise
    env.set_opponent(opponent)  # type: ignore[attr-defined]
    return env


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
        env = build_adapter(cfg, seed=game_seed, opponent=_Placeholder())
        shared = first.opponent  # type: ignore[attr-defined]
        if isinstance(shared, NetworkOpponent):
            env.set_opponent(NetworkOpponent(shared.net, cfg.opponent_epsilon, game_seed,  # type: ignore[attr-defined]
                                             cfg.opponent_epsilon_final, cfg.opponent_epsilon_timesteps))
        else:  # another opponent file kind (a mixture of teams): a copy sharing its networks, its own generators
            env.set_opponent(shared.fork(game_seed))  # type: ignore[attr-defined]
        return env

    return LockstepBatch(make_one, num_games)  # closes the games built so far when one fails


def make_eval_batch(cfg: EnvConfig, num_games: int, seed: int | None = None,
                    device: str = "cpu") -> BatchedMultiAgentEnv:
    """The batch of ``num_games`` games an evaluation (or a match) plays its episodes on.

    Envs with a vectorized version (the env record's ``batched``: pursuit) get it, on ``device``: one
    tensor step for all games instead of E adapter steps, the env being what bounds a batched pursuit
    evaluation. The others (MAgent: battle, adversarial pursuit) get ``make_batch``, E adapters in
    lockstep with one opponent forward for all games.

    Args:
        cfg: env config, as for ``make_env``.
        num_games: E >= 1.
        seed: seeds the lockstep games' opponent generators (a vectorized env has no opponents; its games
            are seeded by ``reset(seeds)`` only).
        device: torch device of a vectorized env's tensors.

    Returns:
        The batch; call ``reset(seeds, games)`` before stepping (``play_episodes`` does).
    """
    if env_record(cfg.name).batched is not None:
        return make_batched_env(cfg, num_games, device=device)  # type: ignore[no-any-return]
    return make_batch(cfg, num_games, seed=seed)


def check_opponent(cfg: EnvConfig) -> None:
    """Load the configured opponent once (before a run folder is written): bad files fail early."""
    if has_network_opponent(cfg):
        make_env(cfg).close()


def random_team_return(env_cfg: EnvConfig, episodes: int = 20, seed: int = 12345) -> float:
    """Team return of a uniformly random policy on a seeded game: the bar the learning checks must clear.

    The game is seeded by one ``reset(seed)`` (``make_env``'s seed only seeds opponents) and the episodes
    continue its RNG, with actions from ``default_rng(0)``, so the baseline is the same number on every call
    (and the number this function gave before it moved onto ``play_episodes``).
    """
    env = make_env(env_cfg, seed=seed)
    try:
        env.reset(seed=seed)
        rng = np.random.default_rng(0)
        n, n_actions = env.spec.n_agents, env.spec.n_actions
        return play_episodes(env, lambda obs, alive: rng.integers(0, n_actions, (len(obs), n)),
                             [None] * episodes).summary().team_return_mean
    finally:
        env.close()


class _Placeholder:
    """Stands in for the network opponent until its file is loaded against the built env."""

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        raise RuntimeError("opponent not loaded")
