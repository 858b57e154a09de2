"""The team weights format: safetensors team files, the original's pickle, run checkpoints as teams.

A team file is what ``experiments/opponents/<env>.safetensors`` ships (its card, ``<env>.card.md``, is
written next to it by ``suPER.selfplay.write_card`` and records the file's SHA-256, ``sha256``).

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
import json
import math
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from suPER import config as C
from suPER.models import BatchedQNet
from suPER.models.qnet import ReferenceQNet, batched_from_reference
from suPER.runs import atomic_write_bytes

if TYPE_CHECKING:
    from suPER.envs import MultiAgentEnv

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


def canonical_safetensors(data: bytes) -> bytes:
    """The same safetensors file with its JSON header's keys sorted, so equal tensors and metadata give equal bytes.

    Why: safetensors serializes the header's ``__metadata__`` from a Rust ``HashMap``, whose order is random per
    map, so saving the same team twice gave files with different bytes and checksums (the cards' sha256).
    Layout (the format's): 8-byte little-endian header length N, N bytes of JSON padded with spaces to a
    multiple of 8, then the tensor data, whose offsets are relative to its start and so stay valid.
    """
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + data[8 + n:]


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
    data = canonical_safetensors(save(tensors, metadata=meta.to_strings()))
    atomic_write_bytes(Path(path), lambda tmp: Path(tmp).write_bytes(data))
    return hashlib.sha256(data).hexdigest()


def _expect(meta: TeamMeta, env: MultiAgentEnv | None, side: str, path: Path) -> None:
    """Check the file's team fits the env's ``side`` (opponent | team): count, obs shape, actions."""
    if env is None:
        return
    if meta.env and meta.env != env.spec.name:
        raise OpponentFileError(f"{path}: expected a team of {env.spec.name}, got a team file of {meta.env}")
    if side == "opponent":
        ids = env.spec.opponent_ids
        shape, n = tuple(getattr(env, "opponent_obs_shape", ())), int(getattr(env, "opponent_n_actions", 0))
    else:
        ids, shape, n = env.spec.learner_ids, tuple(env.spec.obs_shape), env.spec.n_actions
    if (len(meta.agent_ids), tuple(meta.obs_shape), meta.n_actions) != (len(ids), shape, n):
        raise OpponentFileError(
            f"{path}: expected {len(ids)} agents with obs {shape} and {n} actions ({env.spec.name} {side}), found "
            f"{len(meta.agent_ids)} agents with obs {tuple(meta.obs_shape)} and {meta.n_actions} actions")


def inspect_team(path: Path | str, env: MultiAgentEnv | None = None, side: str = "opponent") -> TeamMeta:
    """Check a ``.safetensors`` team file without reading its weights: the header, the metadata, the env and side
    it was made for, and every tensor's shape (what ``load_team`` checks, except finiteness).

    Raises:
        OpponentFileError: missing, unreadable, truncated or mismatching file (one line).
    """
    path = Path(path)
    if not path.is_file():
        raise OpponentFileError(f"{path}: no such weights file")
    if path.suffix != ".safetensors":
        raise OpponentFileError(f"{path}: expected a .safetensors team file")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = TeamMeta.from_strings(dict(f.metadata() or {}), path)
            found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except SafetensorError as exc:
        raise OpponentFileError(f"{path}: not a readable safetensors file, truncated or corrupt ({exc})") from exc
    _expect(meta, env, side, path)
    with torch.random.fork_rng(devices=[]):  # a check draws nothing: the runs' networks are initialised from
        net = meta.empty_net()               # torch's global generator after the opponent is loaded
    _check_shapes(path, {f"{agent}.{name}": tuple(t.shape) for p, agent in enumerate(meta.agent_ids)
                         for name, t in net.policy_state_dict(p).items()}, found)
    return meta


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
    if path.is_file() and path.suffix != ".safetensors":
        if not allow_pickle:
            raise OpponentFileError(f"{path}: expected a .safetensors team file; the original's pickle format "
                                    f"loads only with --allow-pickle (unpickling runs code from the file)")
        return load_original_pickle(path, env, side)
    from safetensors import SafetensorError, safe_open

    meta = inspect_team(path, env, side)  # a missing file, the header, the env and side, the shapes
    net = meta.empty_net()
    expected = [f"{agent}.{name}" for p, agent in enumerate(meta.agent_ids) for name in net.policy_state_dict(p)]
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in expected}
    except SafetensorError as exc:
        raise OpponentFileError(f"{path}: not a readable safetensors file, truncated or corrupt ({exc})") from exc
    bad = [k for k, t in tensors.items() if not torch.isfinite(t.float()).all()]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise OpponentFileError(f"{path}: expected finite weights, got NaN or inf in {bad[0]}{more}")
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
# where teams come from


def opponent_path(env_name: str, opponent: str) -> Path:
    """``pretrained`` -> the shipped ``experiments/opponents/<env>.safetensors``; anything else is a path."""
    return OPPONENTS_DIR / f"{env_name}.safetensors" if opponent == "pretrained" else Path(opponent)



def team_from_checkpoint(path: Path, env: MultiAgentEnv) -> BatchedQNet:
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
                      dueling=d.get("dueling", True), hiddens=d.get("hiddens", 256), obs_scale=spec.obs_scale)
    expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    _check_shapes(path, expected, {k: tuple(v.shape) for k, v in q.items()})
    net.load_state_dict(q)
    if self_play:
        net = net.subset([all_ids.index(a) for a in spec.learner_ids])
    return net.eval().requires_grad_(False)
