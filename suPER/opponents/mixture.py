"""A mixture of frozen teams as the env's opponent: one member per episode, seeded.

File format (``<name>.mixture.json``, read wherever ``--opponent`` / ``env.opponent`` takes a PATH)::

    {"format": "super-marl-mixture", "version": "1", "env": "battle",
     "members": [{"policy": "red/001", "file": "red_001.safetensors", "weight": 0.75},
                 {"policy": "random", "file": "random", "weight": 0.25}]}

``file`` is a team file (``suPER.opponents`` format) relative to the mixture file's folder, or
``random`` (a uniformly random team). Weights are normalised; members of weight 0 are not loaded.

Loading: every distinct file's header (env, side, shapes) is checked when the mixture is built, so a bad
file is one line before anything runs; its weights are read the first time one of its members is drawn,
once, and shared by every member and every game of a batch that names it. A mixture of thousands of
members (up to ``MAX_MIXTURE_MEMBERS``) builds in the time of its distinct headers.

Sampling: at every episode start the env calls ``new_episode(seed)``. With a seed (evaluation, matches:
every episode is seeded) the member is drawn from ``default_rng([MEMBER_SEED_TAG, seed])``, so an
episode depends only on its seed and two mixtures with the same weights pick the same members; without
one (training: episodes continue the env's streams) from the mixture's own generator, seeded when the
env is built. A member acts for the whole episode (a per-step mixture would be a different policy,
none of the population).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suPER import config as C
from suPER.envs import MultiAgentEnv, OpponentPolicy, RandomOpponent
from suPER.opponents.policy import NetworkOpponent
from suPER.opponents.team_file import OpponentFileError, inspect_team, load_team
from suPER.runs import atomic_write_json

FORMAT = "super-marl-mixture"
FORMAT_VERSION = "1"
SUFFIX = ".mixture.json"
MEMBER_SEED_TAG = 17
"""first word of the seed sequence that draws an episode's member (keeps it apart from the env's own use)"""


@dataclass(frozen=True)
class Member:
    """One policy of a mixture file."""

    policy: str
    """the policy's name in the population (``red/001``, ``random``)"""
    file: str
    """team file relative to the mixture file, or ``random``"""
    weight: float


def write_mixture(path: Path, env_name: str, members: list[Member]) -> None:
    """Write a mixture file atomically (members of weight 0 are kept: the file records the whole strategy)."""
    total = sum(m.weight for m in members)
    if not members or total <= 0 or any(m.weight < 0 for m in members):
        raise ValueError(f"{path}: a mixture needs non-negative weights with a positive sum")
    atomic_write_json(Path(path), {"format": FORMAT, "version": FORMAT_VERSION, "env": env_name,
                                   "members": [{"policy": m.policy, "file": m.file, "weight": m.weight / total}
                                               for m in members]})


def read_mixture(path: Path) -> tuple[str, list[Member]]:
    """Read a mixture file: (env name, members). Raises OpponentFileError (one line) on a bad file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or str(data.get("version")) != FORMAT_VERSION:
            raise OpponentFileError(f"{path}: expected a {FORMAT} v{FORMAT_VERSION} file, found format "
                                    f"{data.get('format')!r} version {data.get('version')!r}")
        members = [Member(str(m["policy"]), str(m["file"]), float(m["weight"])) for m in data["members"]]
        env_name = str(data["env"])
    except OSError as exc:
        raise OpponentFileError(f"{path}: cannot read the mixture file ({exc.strerror})") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OpponentFileError(f"{path}: malformed mixture file ({type(exc).__name__}: {exc})") from exc
    if not members or any(not np.isfinite(m.weight) or m.weight < 0 for m in members) or \
            sum(m.weight for m in members) <= 0:
        raise OpponentFileError(f"{path}: expected members with non-negative weights and a positive sum")
    return env_name, members


MemberFactory = Callable[[int | None], OpponentPolicy]
"""Builds a member policy from its exploration seed when it is first drawn (``load_mixture_opponent``)."""


def member_seed(seed: int | None, k: int) -> int | None:
    """Exploration seed of member ``k`` of a mixture seeded ``seed``."""
    return None if seed is None else seed + 7919 * (k + 1)


class MixtureOpponent:
    """Plays one member team per episode, drawn with the mixture's weights (module docstring).

    Args:
        members: K opponent policies (``act(obs_MO, alive_M) -> actions_M``), or factories that build member k
            from ``member_seed(seed, k)`` when it is first drawn.
        weights_K: their probabilities (normalised here).
        seed: seed of the generator used for unseeded episodes.
        names: the members' policy names (for logs and tests).
    """

    def __init__(self, members: Sequence[OpponentPolicy | MemberFactory], weights_K: Any, seed: int | None = None,
                 names: list[str] | None = None) -> None:
        w = np.asarray(weights_K, dtype=np.float64)
        if len(members) != len(w) or not len(w) or (w < 0).any() or w.sum() <= 0:
            raise ValueError("MixtureOpponent: expected one non-negative weight per member, with a positive sum")
        self.seed, self.weights_K = seed, w / w.sum()
        self.factories: list[MemberFactory | None] = [None if hasattr(m, "act") else m for m in members]  # type: ignore[misc]
        self.built: list[OpponentPolicy | None] = [m if hasattr(m, "act") else None for m in members]  # type: ignore[misc]
        """member k's policy, None until it is first drawn (a factory member)"""
        self.names = list(names) if names is not None else [str(k) for k in range(len(members))]
        self.rng = np.random.default_rng(seed)
        self.current = int(self.rng.choice(len(self.built), p=self.weights_K))
        """index of the member playing the current episode"""
        self.member(self.current)

    def member(self, k: int) -> OpponentPolicy:
        """Member ``k``'s policy, built now if it was never drawn."""
        policy = self.built[k]
        if policy is None:
            factory = self.factories[k]
            assert factory is not None
            policy = self.built[k] = factory(member_seed(self.seed, k))
        return policy

    def fork(self, seed: int | None) -> MixtureOpponent:
        """A copy for another game of a batch: the same member networks (not copied), generators from ``seed``
        (``suPER.opponents.make_batch`` calls it, so E games hold one copy of every member's weights)."""
        members: list[OpponentPolicy | MemberFactory] = []
        for k, (m, factory) in enumerate(zip(self.built, self.factories)):
            if factory is not None:
                members.append(factory)  # built from the fork's seed when drawn, on the shared weights
            elif isinstance(m, NetworkOpponent):
                members.append(NetworkOpponent(m.net, m.epsilon, member_seed(seed, k)))
            elif isinstance(m, RandomOpponent):
                members.append(RandomOpponent(m.n_actions, member_seed(seed, k)))
            else:
                raise TypeError(f"MixtureOpponent.fork: cannot copy a member of type {type(m).__name__}")
        return MixtureOpponent(members, self.weights_K, seed, self.names)

    def new_episode(self, seed: int | None) -> None:
        """Draw the member of the episode that starts now (``MAgentEnv.reset`` calls this)."""
        rng = self.rng if seed is None else np.random.default_rng([MEMBER_SEED_TAG, int(seed)])
        self.current = int(rng.choice(len(self.built), p=self.weights_K))
        member = self.member(self.current)
        if seed is not None and isinstance(member, RandomOpponent):
            member.rng = np.random.default_rng(seed)  # as the env's own random opponent: per-seed episodes

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        """The current member's actions [M]."""
        return self.member(self.current).act(obs_MO, alive_M)


MAX_MIXTURE_MEMBERS = 1000
"""Members (of positive weight) a mixture file may have: a population of PSRO iterations has tens; a file of thousands
is refused with one line rather than loading for minutes."""


def load_mixture_opponent(path: Path, env: MultiAgentEnv, cfg: C.EnvConfig, seed: int | None) -> MixtureOpponent:
    """Build the ``MixtureOpponent`` of a mixture file against ``env``'s opponent team.

    Every distinct member file is checked now (``suPER.opponents.inspect_team``: env, side, shapes) and read when a
    member naming it is first drawn (its weights' finiteness then), once: members that name the same team share its
    network. Members act greedily, or epsilon-greedily with ``cfg.opponent_epsilon``.

    Raises:
        OpponentFileError: a bad mixture file, more than ``MAX_MIXTURE_MEMBERS`` members, a member for another
            env, or a bad member file.
    """
    env_name, members = read_mixture(path)
    if env_name != env.spec.name:
        raise OpponentFileError(f"{path}: a mixture for {env_name}, not {env.spec.name}")
    kept = [m for m in members if m.weight > 0]
    if len(kept) > MAX_MIXTURE_MEMBERS:
        raise OpponentFileError(f"{path}: expected at most {MAX_MIXTURE_MEMBERS} members of positive weight, got "
                                f"{len(kept)}")
    teams: dict[Path, _SharedTeam] = {}
    factories: list[MemberFactory] = []
    for m in kept:
        if m.file == "random":
            n_actions = int(env.opponent_n_actions)  # type: ignore[attr-defined]
            factories.append(lambda s, n=n_actions: RandomOpponent(n, s))
        else:
            file = (Path(path).parent / m.file).resolve()
            if file not in teams:
                meta = inspect_team(file, env, "opponent")  # a bad file is one line now, not when first drawn
                meta.empty_net()  # torch's draws of reading the file here (load_team builds one net), so a run's
                teams[file] = _SharedTeam(file)  # networks, initialised after its opponent, start as before
            factories.append(lambda s, team=teams[file]: NetworkOpponent(team.net(), cfg.opponent_epsilon, s))
    return MixtureOpponent(factories, [m.weight for m in kept], seed, names=[m.policy for m in kept])


class _SharedTeam:
    """One team file's network, read on first use and shared by every member (and game) that names it."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._net: Any = None

    def net(self) -> Any:
        if self._net is None:
            with torch.random.fork_rng(devices=[]):  # mid-run: no draw from torch's global generator
                self._net, _ = load_team(self.file, None, "opponent")  # checked against the env by inspect_team
        return self._net
