"""Fixed network opponents: the weights file format, the batched greedy policy, matches between teams.

In the paper the learning team (battle: blue; adversarial pursuit: prey) plays against a frozen,
pretrained opponent team (red; predators) of per-agent DDQN policies with the learners' network
(REFERENCE section 8). The original's weights were never published, so this project trains its own
(``suPER.selfplay``) and ships them as ``experiments/opponents/<env>.safetensors``.

File format (safetensors, no pickle): one team of M agents, each with its own network (a
``BatchedQNet`` with P = M). Tensor ``"<agent_id>.<param>"`` holds agent ``agent_id``'s slice of
``BatchedQNet`` parameter ``<param>`` in the ``P = 1`` layout of ``BatchedQNet.policy_state_dict``.
The safetensors metadata (all strings) says what the tensors are::

    format = super-marl-team, version = 1, env, agent_ids (JSON list, the policy order),
    obs_shape (JSON [H, W, C]), n_actions, body, dueling, hiddens, dtype (float16 | float32)

Files are written atomically to a new path and never modified in place. A file that is missing,
truncated or whose tensors do not match its metadata or the env fails with one line naming the file,
the expected and the found shapes (``OpponentFileError``, a ``ConfigError``: the CLI prints it and
exits with 2).

The original's own format, a pickle of ``{policy_id: {param_name: ndarray}}`` (RLlib 2.1
``Algorithm.get_weights()``, names of REFERENCE section 5), loads only with ``allow_pickle=True``
(``--allow-pickle``) and a warning, because unpickling runs arbitrary code.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suPER import config as C
from suPER.envs import OPPONENT_KINDS, MultiAgentEnv
from suPER.envs import make_env as _make_env
from suPER.envs.batched import LockstepBatch
from suPER.evaluation import BatchActFn, episode_seeds, play_episodes
from suPER.models import BatchedQNet
from suPER.models.qnet import ReferenceQNet, batched_from_reference
from suPER.runs import atomic_write_bytes
from suPER.stats import bootstrap_ci

FORMAT = "super-marl-team"
FORMAT_VERSION = "1"
OPPONENTS_DIR = C.EXPERIMENTS_DIR / "opponents"
"""Where the shipped opponents live: ``<env>.safetensors`` and ``<env>.card.md``."""
UNUSED_REFERENCE_PARAMS = ("value_fn.weight", "value_fn.bias")
"""RLlib 2.1 body parameters the original saved but never used (REFERENCE section 5)."""


class OpponentFileError(C.ConfigError):
    """A weights file that cannot be used: the message names the file, what was expected and found."""


@dataclass(frozen=True)
class TeamMeta:
    """What a team file holds (its safetensors metadata)."""

    env: str
    agent_ids: tuple[str, ...]
    obs_shape: tuple[int, int, int]
    n_actions: int
    body: str = "conv"
    dueling: bool = True
    hiddens: int = 256
    dtype: str = "float16"

    def to_strings(self) -> dict[str, str]:
        """The metadata as safetensors stores it (str -> str)."""
        return {"format": FORMAT, "version": FORMAT_VERSION, "env": self.env,
                "agent_ids": json.dumps(list(self.agent_ids)), "obs_shape": json.dumps(list(self.obs_shape)),
                "n_actions": str(self.n_actions), "body": self.body, "dueling": str(self.dueling).lower(),
                "hiddens": str(self.hiddens), "dtype": self.dtype}

    @classmethod
    def from_strings(cls, meta: dict[str, str], path: Path) -> TeamMeta:
        """Parse stored metadata; raise OpponentFileError when keys are missing or malformed."""
        if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise OpponentFileError(f"{path}: expected a {FORMAT} v{FORMAT_VERSION} safetensors file, found "
                                    f"format {meta.get('format')!r} version {meta.get('version')!r}")
        try:
            shape = tuple(int(x) for x in json.loads(meta["obs_shape"]))
            return cls(env=meta["env"], agent_ids=tuple(json.loads(meta["agent_ids"])),
                       obs_shape=(shape[0], shape[1], shape[2]), n_actions=int(meta["n_actions"]),
                       body=meta["body"], dueling=meta["dueling"] == "true", hiddens=int(meta["hiddens"]),
                       dtype=meta["dtype"])
        except (KeyError, ValueError, IndexError, TypeError) as exc:
            raise OpponentFileError(f"{path}: malformed metadata ({type(exc).__name__}: {exc})") from exc

    def empty_net(self) -> BatchedQNet:
        """A ``BatchedQNet`` of this shape (P = number of agents); its weights are to be overwritten."""
        return BatchedQNet(len(self.agent_ids), self.obs_shape, self.n_actions, body=self.body,  # type: ignore[arg-type]
                           dueling=self.dueling, hiddens=self.hiddens)


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file (recorded in the opponent cards)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_team(path: Path, net: BatchedQNet, meta: TeamMeta) -> str:
    """Write a team file atomically (a new file; an existing one is replaced whole, never edited).

    Args:
        path: destination (``.safetensors``).
        net: the team's networks, policy p = ``meta.agent_ids[p]``.
        meta: env, ids and network configuration; ``meta.dtype`` is the on-disk dtype.

    Returns:
        SHA-256 of the written file.
    """
    from safetensors.torch import save

    if net.n_policies != len(meta.agent_ids):
        raise ValueError(f"save_team: {net.n_policies} policies but {len(meta.agent_ids)} agent ids")
    dtype = getattr(torch, meta.dtype)
    tensors = {f"{agent}.{name}": t.to(dtype).contiguous()
               for p, agent in enumerate(meta.agent_ids) for name, t in net.policy_state_dict(p).items()}
    data = save(tensors, metadata=meta.to_strings())
    atomic_write_bytes(Path(path), lambda tmp: Path(tmp).write_bytes(data))
    return hashlib.sha256(data).hexdigest()


def _expect(meta: TeamMeta, env: MultiAgentEnv | None, side: str, path: Path) -> None:
    """Check the file's team fits the env's ``side`` (opponent | team): count, obs shape, actions."""
    if env is None:
        return
    if side == "opponent":
        ids = env.spec.opponent_ids
        shape, n = tuple(getattr(env, "opponent_obs_shape", ())), int(getattr(env, "opponent_n_actions", 0))
    else:
        ids, shape, n = env.spec.learner_ids, tuple(env.spec.obs_shape), env.spec.n_actions
    if (len(meta.agent_ids), tuple(meta.obs_shape), meta.n_actions) != (len(ids), shape, n):
        raise OpponentFileError(
            f"{path}: expected {len(ids)} agents with obs {shape} and {n} actions ({env.spec.name} {side}), found "
            f"{len(meta.agent_ids)} agents with obs {tuple(meta.obs_shape)} and {meta.n_actions} actions")


def load_team(path: Path | str, env: MultiAgentEnv | None = None, side: str = "opponent",
              allow_pickle: bool = False) -> tuple[BatchedQNet, TeamMeta]:
    """Read a team file into a float32 ``BatchedQNet`` (read-only: the file is never written).

    Args:
        path: a ``.safetensors`` team file, or with ``allow_pickle`` the original's pickle.
        env: when given, the team must fit its opponent (``side="opponent"``) or learning team.
        side: ``opponent`` or ``team``.
        allow_pickle: accept the original's pickle format (runs code from the file; warns).

    Returns:
        (net in eval mode without gradients, metadata).

    Raises:
        OpponentFileError: missing, unreadable, truncated or mismatching file (one line).
    """
    path = Path(path)
    if not path.is_file():
        raise OpponentFileError(f"{path}: no such weights file")
    if path.suffix != ".safetensors":
        if not allow_pickle:
            raise OpponentFileError(f"{path}: expected a .safetensors team file; the original's pickle format "
                                    f"loads only with --allow-pickle (unpickling runs code from the file)")
        return load_original_pickle(path, env, side)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = TeamMeta.from_strings(dict(f.metadata() or {}), path)
            found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            _expect(meta, env, side, path)
            net = meta.empty_net()
            expected = {f"{agent}.{name}": tuple(t.shape) for p, agent in enumerate(meta.agent_ids)
                        for name, t in net.policy_state_dict(p).items()}
            _check_shapes(path, expected, found)
            tensors = {k: f.get_tensor(k) for k in expected}
    except SafetensorError as exc:
        raise OpponentFileError(f"{path}: not a readable safetensors file, truncated or corrupt ({exc})") from exc
    for p, agent in enumerate(meta.agent_ids):
        net.load_policy_state_dict(p, {name: tensors[f"{agent}.{name}"].float() for name in
                                       net.policy_state_dict(p)})
    return net.eval().requires_grad_(False), meta


def _check_shapes(path: Path, expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]]) -> None:
    """One-line error on the first missing / extra / mis-shaped tensor (and how many more there are)."""
    bad = [f"{k}: expected {v}, found {found.get(k, 'nothing')}" for k, v in expected.items() if found.get(k) != v]
    bad += [f"{k}: unexpected tensor of shape {v}" for k, v in found.items() if k not in expected]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise OpponentFileError(f"{path}: tensor {bad[0]}{more}")


# --------------------------------------------------------------------------------------------------
# the original's pickle format


def load_original_pickle(path: Path, env: MultiAgentEnv | None, side: str = "opponent") -> tuple[BatchedQNet, TeamMeta]:
    """Map the original's ``{policy_id: {rllib_param: ndarray}}`` pickle onto our network.

    ``ReferenceQNet`` carries RLlib 2.1's parameter names (``model.{0,2,4,7}``, ``policy_fn``,
    ``advantage_module.dueling_A_0._model.0``, ``value_module.V._model.0``, ...), so each policy's dict
    loads with ``load_state_dict`` once the unused ``value_fn.*`` entries are dropped; the policies of
    the env's team (``side``) are then stacked into a ``BatchedQNet`` in the env's agent order.
    """
    print(f"warning: {path}: loading a pickle runs code from the file; only do this for files you trust",
          file=sys.stderr)
    try:
        with open(path, "rb") as fh:
            weights = pickle.load(fh)  # noqa: S301 - explicitly allowed by the caller (--allow-pickle)
    except Exception as exc:  # any unpickling failure: truncated, wrong protocol, missing classes
        raise OpponentFileError(f"{path}: cannot unpickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(weights, dict) or not weights:
        raise OpponentFileError(f"{path}: expected a pickled dict {{policy_id: state_dict}}, found "
                                f"{type(weights).__name__}")
    if env is not None:
        ids = env.spec.opponent_ids if side == "opponent" else env.spec.learner_ids
        missing = [a for a in ids if a not in weights]
        if missing:
            raise OpponentFileError(f"{path}: expected policies {list(ids)}, found {sorted(weights)}")
        shape = tuple(env.opponent_obs_shape) if side == "opponent" else tuple(env.spec.obs_shape)  # type: ignore[attr-defined]
        n_actions = int(env.opponent_n_actions) if side == "opponent" else env.spec.n_actions  # type: ignore[attr-defined]
        name = env.spec.name
    else:
        ids = tuple(sorted(weights))
        first = weights[ids[0]]
        a_out = np.shape(first.get("advantage_module.A._model.0.weight", np.zeros((0, 0))))[0]
        conv_in = np.shape(first.get("model.0.weight", np.zeros((0, 0, 0, 0))))[1]
        fc_in = np.shape(first.get("model.7.weight", np.zeros((0, 0))))[1]
        side_len = int(round(math.sqrt(fc_in / 64))) + 3
        shape, n_actions, name = (side_len, side_len, conv_in), int(a_out), "unknown"
    nets = []
    for a in ids:
        net = ReferenceQNet(shape, n_actions)  # type: ignore[arg-type]
        sd = {k: torch.as_tensor(np.asarray(v)) for k, v in dict(weights[a]).items()
              if k not in UNUSED_REFERENCE_PARAMS}
        expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        _check_shapes(Path(f"{path}[{a}]"), expected, {k: tuple(v.shape) for k, v in sd.items()})
        net.load_state_dict({k: v.float() for k, v in sd.items()})
        nets.append(net)
    meta = TeamMeta(env=name, agent_ids=tuple(ids), obs_shape=shape, n_actions=n_actions, dtype="float32")  # type: ignore[arg-type]
    return batched_from_reference(nets).eval().requires_grad_(False), meta


# --------------------------------------------------------------------------------------------------
# policies


class NetworkOpponent:
    """A team of M frozen per-agent Q-networks acting greedily (or epsilon-greedily), batched.

    One forward pass of the ``BatchedQNet`` per env step: agent p's observation is policy p's batch
    of one row, ``a_p = argmax_a Q_p(o_p, a)``. With ``epsilon > 0`` each agent independently takes a
    uniform action with probability epsilon (the original's opponents kept their epsilon-greedy
    exploration during training rollouts, REFERENCE 8); the draws come from the policy's own
    generator, seeded from the env seed, so acting never touches numpy's or torch's global RNG.

    Args:
        net: the team's networks (P = M).
        epsilon: exploration probability in [0, 1]; 0 = greedy (default).
        seed: seed of the exploration generator.
    """

    def __init__(self, net: BatchedQNet, epsilon: float = 0.0, seed: int | None = None) -> None:
        self.net = net.eval().requires_grad_(False)
        self.epsilon = float(epsilon)
        self.rng = np.random.default_rng(seed)

    @torch.no_grad()
    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        """Actions [M] (int64); dead agents' rows are computed too (their actions are not sent)."""
        obs = torch.as_tensor(np.asarray(obs_MO, dtype=np.float32))[:, None]
        actions_M = self.net(obs)[:, 0].argmax(-1).numpy().astype(np.int64)
        if self.epsilon > 0:
            m = len(actions_M)
            explore_M = self.rng.random(m) < self.epsilon
            actions_M = np.where(explore_M, self.rng.integers(0, self.net.n_actions, m), actions_M)
        return actions_M

    @torch.no_grad()
    def act_batch(self, obs_EMO: np.ndarray, alive_EM: np.ndarray,
                  peers: Sequence[NetworkOpponent] | None = None) -> np.ndarray:
        """Actions [E, M] for E games at once: one forward over all E x M observations.

        Args:
            obs_EMO: float32 [E, M, *obs_shape], game e's opponents in row e.
            alive_EM: bool [E, M].
            peers: game e's own policy at index e (default: this one for every game); its generator draws
                game e's exploration, so a game explores exactly as when it is played alone. Every peer must
                act with this policy's network.

        Raises:
            ValueError: a peer with another network.
        """
        obs = torch.as_tensor(np.asarray(obs_EMO, dtype=np.float32))
        e = obs.shape[0]
        actions_EM = self.net(obs.transpose(0, 1)).argmax(-1).T.numpy().astype(np.int64)
        peers = [self] * e if peers is None else list(peers)
        if any(p.net is not self.net for p in peers):
            raise ValueError("NetworkOpponent.act_batch: every game's opponent must share this network")
        for g, p in enumerate(peers):
            if p.epsilon > 0:
                m = actions_EM.shape[1]
                explore_M = p.rng.random(m) < p.epsilon
                actions_EM[g] = np.where(explore_M, p.rng.integers(0, p.net.n_actions, m), actions_EM[g])
        return actions_EM


def opponent_path(env_name: str, opponent: str) -> Path:
    """``pretrained`` -> the shipped ``experiments/opponents/<env>.safetensors``; anything else is a path."""
    return OPPONENTS_DIR / f"{env_name}.safetensors" if opponent == "pretrained" else Path(opponent)


def has_network_opponent(cfg: C.EnvConfig) -> bool:
    """True when ``cfg``'s opponent team is a weights file (``pretrained`` or a PATH), not random / learning."""
    return cfg.name in OPPONENT_ENVS and cfg.opponent not in OPPONENT_KINDS


def make_env(cfg: C.EnvConfig, seed: int | None = None) -> MultiAgentEnv:
    """``suPER.envs.make_env`` plus network opponents: ``env.opponent`` = pretrained or a file PATH.

    Args:
        cfg: env config; ``opponent`` is random | learning | pretrained | PATH, ``opponent_epsilon`` the
            opponents' exploration, ``opponent_allow_pickle`` admits the original's pickle format.
        seed: seeds the opponent's generator (random actions or epsilon draws).

    Returns:
        The adapter with its opponent set.
    """
    env = _make_env(cfg, seed=seed, opponent=None if cfg.opponent in OPPONENT_KINDS else _Placeholder())
    if has_network_opponent(cfg):
        path = opponent_path(cfg.name, cfg.opponent)
        loader = OPPONENT_FILE_LOADERS.get(path.suffix)
        try:
            if loader is not None:
                module, fn = loader.split(":")
                opponent = getattr(importlib.import_module(module), fn)(path, env, cfg, seed)
            else:
                net, _ = load_team(path, env, "opponent", cfg.opponent_allow_pickle)
                opponent = NetworkOpponent(net, cfg.opponent_epsilon, seed)
        except BaseException:
            env.close()
            raise
        env.set_opponent(opponent)  # type: ignore[attr-defined]
    return env


OPPONENT_FILE_LOADERS: dict[str, str] = {".json": "suPER.population.mixture:load_mixture_opponent"}
"""opponent file suffix -> ``module:function(path, env, env_cfg, seed) -> OpponentPolicy`` (imported lazily)
for opponent files that are not team files: a population's mixture of teams (``suPER.population.mixture``)"""


MATCH_BATCH = 20
"""games a match (``opponents eval``, self-play snapshot matches) plays together in lockstep"""


def make_batch(cfg: C.EnvConfig, num_games: int, seed: int | None = None) -> LockstepBatch:
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
        env = _make_env(cfg, seed=game_seed, opponent=_Placeholder())
        shared = first.opponent  # type: ignore[attr-defined]
        if isinstance(shared, NetworkOpponent):
            env.set_opponent(NetworkOpponent(shared.net, cfg.opponent_epsilon, game_seed))  # type: ignore[attr-defined]
        else:  # another opponent file kind (a mixture of teams): a copy sharing its networks, its own generators
            env.set_opponent(shared.fork(game_seed))  # type: ignore[attr-defined]
        return env

    return LockstepBatch(make_one, num_games)  # closes the games built so far when one fails


OPPONENT_ENVS = ("battle", "adversarial_pursuit")
"""Envs with an opponent team."""


class _Placeholder:
    """Stands in for the network opponent until its file is loaded against the built env."""

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        raise RuntimeError("opponent not loaded")


def check_opponent(cfg: C.EnvConfig) -> None:
    """Load the configured opponent once (before a run folder is written): bad files fail early."""
    if has_network_opponent(cfg):
        make_env(cfg).close()


# --------------------------------------------------------------------------------------------------
# matches


@dataclass
class MatchResult:
    """K episodes of a team against the env's opponent; outcomes from the team's point of view."""

    team_return_K: np.ndarray
    """float [K] team (learners') return per episode"""
    opponent_return_K: np.ndarray
    """float [K] opponent team's return per episode"""
    outcome_K: np.ndarray
    """int [K]: +1 the team won, 0 tie, -1 the opponent won (``OUTCOME`` per env)"""
    length_K: np.ndarray
    """int [K] episode lengths"""

    def summary(self, seed: int = 0) -> dict[str, Any]:
        """Means with 95% CIs: percentile bootstrap for returns, Wilson for win / loss rates."""
        k = len(self.outcome_K)
        wins, losses = int((self.outcome_K > 0).sum()), int((self.outcome_K < 0).sum())
        return {
            "episodes": k,
            "team_return": float(self.team_return_K.mean()), "team_return_ci": mean_ci(self.team_return_K, seed),
            "opponent_return": float(self.opponent_return_K.mean()),
            "opponent_return_ci": mean_ci(self.opponent_return_K, seed),
            "win_rate": wins / k, "win_rate_ci": wilson(wins, k),
            "loss_rate": losses / k, "loss_rate_ci": wilson(losses, k),
            "tie_rate": (k - wins - losses) / k, "episode_len": float(self.length_K.mean()),
        }


def outcome_battle(team_alive: int, opponent_alive: int, opponent_return: float) -> int:
    """Battle: the team with more surviving agents at the end wins (a wiped-out team has 0); equal = tie."""
    return int(np.sign(team_alive - opponent_alive))


def outcome_adversarial_pursuit(team_alive: int, opponent_alive: int, opponent_return: float) -> int:
    """Adversarial pursuit has no winner in the game: the predators (the opponent) win an episode when their
    team return is positive, i.e. their tags (+1 each) outweigh the -0.2 of every tag action they took; the
    prey (the team) win when it is negative; 0 (no tag action at all) is a tie."""
    return int(-np.sign(opponent_return))


OUTCOME: dict[str, Callable[[int, int, float], int]] = {
    "battle": outcome_battle, "adversarial_pursuit": outcome_adversarial_pursuit,
}
"""env -> outcome rule (team alive, opponent alive, opponent return) -> +1 / 0 / -1 for the team"""


def play(env: MultiAgentEnv | LockstepBatch, act: BatchActFn, episodes: int, seed: int) -> MatchResult:
    """Play ``episodes`` episodes of the env's learners (acting with ``act``) against its opponent.

    Episode k is seeded ``episode_seeds(seed, 0, episodes)[k]``, so a fixed seed gives a fixed set of episodes
    (for a deterministic team and opponent), the same whether they are played one at a time on an env or as
    a batch of games (``make_batch``: one batched call of each team per step).

    Args:
        env: one env (episodes one at a time) or a batch of games.
        act: ``(obs_ENO, alive_EN) -> actions_EN`` of the learning team (``team_policy``).
        episodes: K.
        seed: the match seed.
    """
    ep = play_episodes(env, act, episode_seeds(seed, 0, episodes))
    rule = OUTCOME[env.spec.name]
    out_K = np.array([rule(int(a), int(o), float(r)) for a, o, r in
                      zip(ep.team_alive_K, ep.opponent_alive_K, ep.opponent_return_K)], dtype=np.int64)
    return MatchResult(ep.agent_return_KN.sum(axis=1), ep.opponent_return_K, out_K, ep.length_K)


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a binomial rate: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean (``suPER.stats.bootstrap_ci``, 2000 resamples, seeded); a sample
    of one episode or of equal values has the point itself as its interval."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 or np.all(x == x[0]):
        return (float(x.mean()), float(x.mean())) if len(x) else (float("nan"), float("nan"))
    low, high = bootstrap_ci(x, np.mean, n_resamples=2000, seed=seed, confidence=0.95)
    return float(low), float(high)


# --------------------------------------------------------------------------------------------------
# teams for `opponents eval`


def team_policy(spec: str, env: MultiAgentEnv | LockstepBatch, seed: int, allow_pickle: bool = False) -> BatchActFn:
    """The learning side of a match: ``random``, a run's ``checkpoints/final.pt`` or a team file, as a batched
    act ``(obs_ENO, alive_EN) -> actions_EN``.

    A run checkpoint holds P = N policies (independent learners) or P = 1 (parameter sharing); a
    self-play checkpoint (P = all agents) contributes the learning team's policies.
    """
    if isinstance(env, LockstepBatch):
        env = env.games[0]  # the games' common shapes and ids
    n, n_actions = env.spec.n_agents, env.spec.n_actions
    if spec == "random":
        rng = np.random.default_rng(seed)
        return lambda obs, alive: rng.integers(0, n_actions, (len(obs), n))
    path = Path(spec)
    if path.suffix == ".pt":
        net = _net_from_checkpoint(path, env)
    else:
        net, _ = load_team(path, env, "team", allow_pickle)
    if net.n_policies == 1 and n > 1:
        return lambda obs, alive: _shared_act(net, obs)
    return NetworkOpponent(net, 0.0, seed).act_batch


@torch.no_grad()
def _shared_act(net: BatchedQNet, obs_ENO: np.ndarray) -> np.ndarray:
    """Greedy actions [E, N] of one shared network for every learner of E games."""
    e, n = obs_ENO.shape[:2]
    obs = torch.as_tensor(np.asarray(obs_ENO, dtype=np.float32)).reshape(1, e * n, *obs_ENO.shape[2:])
    return net(obs)[0].argmax(-1).reshape(e, n).numpy().astype(np.int64)


def _net_from_checkpoint(path: Path, env: MultiAgentEnv) -> BatchedQNet:
    """The learning team's policies from a native run's ``final.pt`` / ``latest.pt``."""
    if not path.is_file():
        raise OpponentFileError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        cfg = state["config"]
        q = state["trainer"]["q_net"] if "trainer" in state else state["q_net"]  # latest.pt nests it (RunLoop)
    except Exception as exc:  # torch raises several types for truncated / foreign files
        raise OpponentFileError(f"{path}: not a readable run checkpoint ({type(exc).__name__})") from exc
    d = cfg.get("dqn", {})
    spec = env.spec
    n_pol = int(q["fc1.weight"].shape[0])
    self_play = cfg.get("env", {}).get("opponent") == "learning" and n_pol != spec.n_agents
    # a self-play checkpoint holds all agents in env order; the learning team's slices are kept
    all_ids = [*getattr(env, "opponent_team_ids", ()), *spec.learner_ids] if self_play else []
    if self_play and n_pol != len(all_ids):
        raise OpponentFileError(f"{path}: expected {len(all_ids)} self-play policies, found {n_pol}")
    if not self_play and n_pol not in (1, spec.n_agents):
        raise OpponentFileError(f"{path}: expected 1 or {spec.n_agents} policies for {spec.name}, found {n_pol}")
    net = BatchedQNet(n_pol, spec.obs_shape, spec.n_actions, body=d.get("model", "conv"),  # type: ignore[arg-type]
                      dueling=d.get("dueling", True), hiddens=d.get("hiddens", 256))
    expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    _check_shapes(path, expected, {k: tuple(v.shape) for k, v in q.items()})
    net.load_state_dict(q)
    if self_play:
        net = net.subset([all_ids.index(a) for a in spec.learner_ids])
    return net.eval().requires_grad_(False)
