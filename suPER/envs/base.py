"""The array interface every environment adapter exposes to the trainers.

PettingZoo speaks dicts keyed by agent id; trainers speak arrays with the agent as the first axis.
The conversion happens exactly once, here at the env boundary (STYLE rule 10). Only the *learning*
team appears in the arrays; a fixed opponent team is driven inside the adapter and never leaves it.

Shapes (suffixes as in STYLE rule 11): ``N`` learners, ``O...`` one learner's observation ((H, W, C) or any shape),
``E`` games of a batched env (:class:`BatchedMultiAgentEnv`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class EnvSpec:
    """Static description of an adapted environment."""

    name: str
    """the env's name: its record's (pursuit | battle | adversarial_pursuit), or for a generic adapter the name it
    was built under (``pz-<module>``); ``suPER.envs.env_record(spec.name)`` finds its record"""
    learner_ids: tuple[str, ...]
    """ids of the N learning agents, in array order"""
    opponent_ids: tuple[str, ...]
    """ids of the fixed opponents driven inside the adapter (empty for pursuit)"""
    obs_shape: tuple[int, ...]
    """one learner's observation shape: (H, W, C) for images, any shape otherwise"""
    obs_dtype: Any
    """compact dtype the replay buffer stores observations in (lossless for this env)"""
    n_actions: int
    """size of each learner's discrete action space"""
    team: str
    """learning-team name (pursuer | blue | prey)"""
    cell_codes: bool = False
    """observations are grids of few distinct cell vectors (agent counts, presence and HP): the compact replay may
    store each cell as a uint16 code (``suPER.replay.compact.CellCodec``). False for observations of continuous
    values, whose distinct vectors would overflow its 65,536 codes mid-run"""
    obs_scale: float = 1.0
    """factor the Q-network multiplies an observation by before its first layer: 1 / 255 for uint8 images (their
    0..255 read as 0..1, as CleanRL's Atari networks divide by 255), 1.0 (no multiply) for every other env. The
    replay keeps the env's own values (``obs_dtype``, lossless), so the scale is the network's"""

    @property
    def n_agents(self) -> int:
        """Number of learners N."""
        return len(self.learner_ids)


@dataclass
class StepResult:
    """What one env step returns, as arrays over the N learners.

    A learner's transition for this step is valid iff it was alive when it acted (the caller knows
    that mask from before the step). For a learner that died in this step, ``obs_NO`` holds its last
    observation and ``terminated_N`` is True; from the next step on ``alive_N`` is False and its
    rows of ``obs_NO`` are zeros.
    """

    obs_NO: np.ndarray
    """float32 [N, *obs_shape]: next observation of every learner (zeros for long-dead ones)"""
    reward_N: np.ndarray
    """float32 [N]: this step's reward"""
    terminated_N: np.ndarray
    """bool [N]: true terminal for that learner (death, game over)"""
    truncated_N: np.ndarray
    """bool [N]: cut by the horizon / max_cycles (bootstrap unless truncation_is_terminal)"""
    alive_N: np.ndarray
    """bool [N]: the learner acts in the next step"""
    episode_over: bool
    """the episode has ended for the learning team: call reset() before stepping again"""
    info: dict[str, Any] = field(default_factory=dict)
    """extras; always has 'all_agent_reward' (sum over every agent incl. opponents, as RLlib logged)"""


class MultiAgentEnv(Protocol):
    """A multi-agent env seen as arrays over its learners."""

    spec: EnvSpec

    @property
    def alive_N(self) -> np.ndarray:
        """bool [N] (a copy): the learners in the game now. After ``reset``, those that start the episode; after a
        step, that step's ``StepResult.alive_N``.

        Why: a PettingZoo env may list fewer ``agents`` than ``possible_agents`` at reset (a learner that joins
        later has no observation yet: its row of obs_NO is zeros). Callers read this after every reset instead
        of taking every learner as alive, so such a learner stores no transition and counts no reward before it
        joins. All True for pursuit and MAgent, whose learners all start in the game."""
        ...

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode; return float32 obs_NO (``alive_N`` says which learners start it). Only the first
        reset of a run passes a seed."""
        ...

    def step(self, actions_N: np.ndarray) -> StepResult:
        """Advance one env step with one action per learner (ignored for dead learners)."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


@dataclass
class BatchStepResult:
    """What one step of E games returns: :class:`StepResult` with a leading game axis ``E``.

    Arrays are numpy for games stepped on the CPU and torch tensors (on the env's device) for a
    device-resident env; the fields and their meaning are those of :class:`StepResult`, per game.
    A game whose episode is over stays over (its rows zeros, ``alive_EN`` False, ``episode_over_E``
    True, rewards 0) until it is reset.
    """

    obs_ENO: Any
    """float32 [E, N, *obs_shape]"""
    reward_EN: Any
    """float32 [E, N]"""
    terminated_EN: Any
    """bool [E, N]"""
    truncated_EN: Any
    """bool [E, N]"""
    alive_EN: Any
    """bool [E, N]"""
    episode_over_E: Any
    """bool [E]: that game's episode has ended for the learning team"""
    info: dict[str, Any] = field(default_factory=dict)
    """extras; always has 'all_agent_reward_E' (float [E], as StepResult's 'all_agent_reward')"""


class BatchedMultiAgentEnv(Protocol):
    """E independent games of one env stepped together (evaluation batches, packed runs).

    Games are reset individually, each with its own seed, so an episode is reproducible from its seed
    whatever else the batch holds.
    """

    spec: EnvSpec
    num_games: int
    """E"""

    @property
    def alive_EN(self) -> Any:
        """bool [E, N] (a copy; numpy, or a tensor on the env's device as its step results): the learners in each
        game now. For a game just reset, those that start its episode (``MultiAgentEnv.alive_N``: a learner
        that joins later is False until it does); for the others, as the last step returned them."""
        ...

    def reset(self, seeds: Sequence[int], games: Any = None) -> Any:
        """Start a new episode in ``games`` (int indices; all E when None), one seed each; return obs_ENO of
        the whole batch (the other games' rows unchanged; ``alive_EN`` says which learners start)."""
        ...

    def step(self, actions_EN: Any) -> BatchStepResult:
        """Advance every game whose episode is not over by one env step (actions of dead learners and of
        finished games are ignored)."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class OpponentPolicy(Protocol):
    """A fixed (never trained) policy for the opponent team, batched over its M agents."""

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        """Return int64 actions [M] for the opponents' observations."""
        ...


class RandomOpponent:
    """Uniformly random opponent actions from its own seeded generator."""

    def __init__(self, n_actions: int, seed: int | None = None) -> None:
        self.n_actions = n_actions
        self.rng = np.random.default_rng(seed)

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        """Uniform actions in [0, n_actions)."""
        return self.rng.integers(0, self.n_actions, size=len(obs_MO), dtype=np.int64)
