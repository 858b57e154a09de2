"""Tiny PettingZoo parallel envs for the generic adapter's tests (not a test module).

``TinyLine`` (vector observations): three walkers on a line of ``size`` cells, each with its own target cell. Each step a walker moves left, stays or
moves right (the last walker only has left and stay: its action space is smaller), gets ``-distance / size``, and
+1 and terminates (leaves ``agents``) when it reaches its target. Observations are ``[position, target, time]``
scaled to [0, 1], plus the walker's index for all but the last walker (shapes (4,) and (3,): the adapter pads).
Truncated at ``max_cycles``. Deterministic given the reset seed.

Used as ``--env pettingzoo:tests.envs.tiny_pz:parallel_env`` (run from the repository root).
``late_joiner_env``: the same walkers, but ``walker_0`` is not in ``agents`` at reset: it joins in the first step,
with its first observation, its distance reward and no action taken (``pettingzoo:tests.envs.tiny_pz:late_joiner_env``).
``image_env``: ``TinyImage``, uint8 image observations (``pettingzoo:tests.envs.tiny_pz:image_env``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv


class TinyLine(ParallelEnv):
    """Walkers reaching their targets on a line (see the module docstring)."""

    metadata = {"name": "tiny_line_v0", "render_modes": []}

    def __init__(self, n_walkers: int = 3, size: int = 6, max_cycles: int = 30, render_mode: str | None = None,
                 joins_late: bool = False):
        if n_walkers < 2 or size < 2 or max_cycles < 1:
            raise ValueError(f"expected n_walkers >= 2, size >= 2, max_cycles >= 1, got {n_walkers}, {size}, "
                             f"{max_cycles}")
        self.n_walkers, self.size, self.max_cycles = int(n_walkers), int(size), int(max_cycles)
        self.joins_late = bool(joins_late)
        self.render_mode = render_mode
        self.possible_agents = [f"walker_{i}" for i in range(self.n_walkers)]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._pos: dict[str, int] = {}
        self._target: dict[str, int] = {}
        self._t = 0

        # one space object per agent: the API test wants the same object on every call
        self._obs_spaces = {a: spaces.Box(0.0, 1.0, (3 if self._last(a) else 4,), np.float32)
                            for a in self.possible_agents}
        self._act_spaces = {a: spaces.Discrete(2 if self._last(a) else 3) for a in self.possible_agents}

    def _last(self, agent: str) -> bool:
        return agent == self.possible_agents[-1]

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_spaces[agent]

    def _obs(self, agent: str) -> np.ndarray:
        i = self.possible_agents.index(agent)
        row = [self._pos[agent] / (self.size - 1), self._target[agent] / (self.size - 1), self._t / self.max_cycles]
        return np.array(row if self._last(agent) else [*row, i / self.n_walkers], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        for a in self.possible_agents:
            self._pos[a], self._target[a] = (int(v) for v in self._rng.choice(self.size, 2, replace=False))
        self.agents = list(self.possible_agents[1:] if self.joins_late else self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        rewards, terms = {}, {}
        for a in self.agents:
            move = int(actions.get(a, 1)) - 1  # 0 left, 1 stay, 2 right
            self._pos[a] = int(np.clip(self._pos[a] + move, 0, self.size - 1))
            reached = self._pos[a] == self._target[a]
            rewards[a] = 1.0 if reached else -abs(self._pos[a] - self._target[a]) / self.size
            terms[a] = reached
        listed = list(self.agents)
        if self.joins_late and self._t == 1:  # walker_0 arrives: listed from now on, it acts from the next step
            joiner = self.possible_agents[0]
            rewards[joiner] = -abs(self._pos[joiner] - self._target[joiner]) / self.size
            terms[joiner] = False
            listed = [joiner, *listed]
        cut = self._t >= self.max_cycles
        truncs = {a: cut and not terms[a] for a in listed}
        obs = {a: self._obs(a) for a in listed}
        infos: dict[str, dict] = {a: {} for a in listed}
        self.agents = [a for a in listed if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        pass


def parallel_env(n_walkers: int = 3, size: int = 6, max_cycles: int = 30, render_mode: str | None = None) -> TinyLine:
    """The env (``TinyLine``'s arguments)."""
    return TinyLine(n_walkers, size, max_cycles, render_mode)


def late_joiner_env(n_walkers: int = 3, size: int = 6, max_cycles: int = 30,
                    render_mode: str | None = None) -> TinyLine:
    """The env with ``walker_0`` joining in the first step (``TinyLine(joins_late=True)``)."""
    return TinyLine(n_walkers, size, max_cycles, render_mode, joins_late=True)


class TinyImage(ParallelEnv):
    """Two painters sharing a ``(size, size, 3)`` uint8 canvas (observations ``Box(0, 255)``, as Atari / butterfly
    frames): each step a painter adds 16 to every pixel of the channel its action names (saturating at 255),
    and both get the canvas's mean red level in [0, 1]. The canvas starts uniformly random; truncated at
    ``max_cycles``. Used as ``pettingzoo:tests.envs.tiny_pz:image_env``."""

    metadata = {"name": "tiny_image_v0", "render_modes": []}

    def __init__(self, size: int = 6, max_cycles: int = 10, render_mode: str | None = None, as_float: bool = False):
        if size < 4 or max_cycles < 1:
            raise ValueError(f"expected size >= 4, max_cycles >= 1, got {size}, {max_cycles}")
        self.size, self.max_cycles, self.render_mode = int(size), int(max_cycles), render_mode
        self.as_float = as_float  # observations canvas x float32(1 / 255) in Box(0, 1): what a scaled net reads
        self.possible_agents = ["painter_0", "painter_1"]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._canvas = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        self._t = 0
        self._obs_space = (spaces.Box(0.0, 1.0, (self.size, self.size, 3), np.float32) if as_float
                           else spaces.Box(0, 255, (self.size, self.size, 3), np.uint8))
        self._act_space = spaces.Discrete(3)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._canvas = self._rng.integers(0, 256, self._canvas.shape, dtype=np.uint8)
        return {a: self._observation() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        for a in self.agents:
            c = int(actions.get(a, 0))
            self._canvas[..., c] = np.minimum(self._canvas[..., c].astype(np.int64) + 16, 255).astype(np.uint8)
        red = float(self._canvas[..., 0].mean()) / 255
        cut = self._t >= self.max_cycles
        listed = list(self.agents)
        self.agents = [] if cut else listed
        return ({a: self._observation() for a in listed}, dict.fromkeys(listed, red), dict.fromkeys(listed, False),
                dict.fromkeys(listed, cut), {a: {} for a in listed})

    def _observation(self) -> np.ndarray:
        if self.as_float:
            return self._canvas.astype(np.float32) * np.float32(1 / 255)
        return self._canvas.copy()

    def close(self) -> None:
        pass


def image_env(size: int = 6, max_cycles: int = 10, render_mode: str | None = None) -> TinyImage:
    """The image env (``TinyImage``'s arguments)."""
    return TinyImage(size, max_cycles, render_mode)


def float_image_env(size: int = 6, max_cycles: int = 10, render_mode: str | None = None) -> TinyImage:
    """The image env's twin whose observations are already scaled: float32 ``canvas x float32(1 / 255)`` in
    ``Box(0, 1)`` (``pettingzoo:tests.envs.tiny_pz:float_image_env``). A network on it reads exactly what a network
    scaled by ``EnvSpec.obs_scale`` reads on ``image_env``, so the same seed trains both the same way."""
    return TinyImage(size, max_cycles, render_mode, as_float=True)
