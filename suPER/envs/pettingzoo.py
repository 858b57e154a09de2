"""Any PettingZoo parallel env with discrete actions as a ``MultiAgentEnv``: the generic adapter.

``--env pettingzoo:<module>:<function>`` (e.g. ``pettingzoo:mpe2.simple_spread_v3:parallel_env``) trains the env
``<module>.<function>(**env.kwargs)``; runs record it as ``pz-<module>[-<function>]`` (``suPER.config``), and
every lookup by that name finds this adapter's record (``suPER.config.env_key``). Everything the suite needs is
read from the env's own spaces:

- learners: ``possible_agents``, in that order, all of them (there is no opponent team);
- actions: every agent's space must be ``Discrete``; agents with fewer actions than the largest get the largest
  count, and an action out of an agent's range is sent as its first action (SuperSuit's
  ``pad_action_space_v0`` rule, which the MAgent adapter applies to adversarial pursuit too);
- observations: every agent's space must be a ``Box`` of one rank; smaller ones are zero-padded at the high end
  of each axis to the element-wise largest shape (SuperSuit's ``pad_observations_v0``). Images ``(H, W, C)`` get
  the conv body under ``dqn.model: auto`` (this adapter's settings file), any other shape the MLP;
- stored as uint8 when every space is uint8 or bool (images: lossless), else float32 (what the network reads);
- scaled in the network (``EnvSpec.obs_scale``, ``obs_scale``): by 1 / high when every space is an integer Box over
  [0, high] with one finite high > 1 (uint8 images: 1 / 255, so the conv body reads 0..1, as CleanRL's Atari
  networks do), else not at all (float observations are read as the env gives them).

Agents that die or appear (death semantics as in ``suPER.envs.magent``): a learner acts while it is listed in the
env's ``agents``. In the step it leaves, it reports its last observation, its reward and ``terminated_N`` (or
``truncated_N`` if the env truncated it); from the next step on ``alive_N`` is False, its observation rows are
zeros, its reward 0 and its action is never sent. A learner absent at reset (in ``possible_agents``, not in
``agents``) has zero rows and ``alive_N`` False (the adapter's ``alive_N`` after ``reset``, which the trainers and
the evaluation read), so it stores no transition and counts no reward before it joins. A learner that joins
``agents`` reports ``alive_N`` True from the step it joined, with its first observation, and acts from the next
step (a reward the env gives it in the step it joins follows no action of its and is not counted). The episode is
over when the env lists no agent, or at ``horizon`` env steps (every learner still in the game truncated).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import numpy as np

from suPER.config import ConfigError, pettingzoo_entry_point
from suPER.envs.base import EnvSpec, StepResult
from suPER.envs.check import ANY_KWARG
from suPER.envs.record import EnvRecord, UnusableEnvError, own_record


def obs_scale(spaces: list[Any]) -> float:
    """``EnvSpec.obs_scale`` for observations of these ``Box`` spaces: 1 / high when every space holds integers over
    [0, high] with the same finite high > 1 in every element (uint8 images: 1 / 255), else 1.0.

    Why only integer spaces: an integer Box over [0, high] is a raster or image of codes whose declared range is
    the real one (uint8's 0..255), and its values reach a network unnormalised (a conv body's inputs and
    initialisation assume order-1 values; CleanRL divides Atari frames by 255). A float space's bounds are often
    loose or infinite (mpe2's are -inf..inf) and its values are already the env's chosen scale, so dividing by a
    declared high would shrink them for no reason. One high for all elements and agents keeps the scale one
    number; per-channel ranges (rare) are left unscaled rather than guessed.

    Args:
        spaces: every learner's observation space (gymnasium ``Box``).

    Returns:
        The factor the Q-network applies to an observation before its first layer.
    """
    highs: set[float] = set()
    for space in spaces:
        if not np.issubdtype(np.dtype(space.dtype), np.integer) or np.any(space.low != 0):
            return 1.0
        highs.update(np.unique(space.high).tolist())
    high = highs.pop() if len(highs) == 1 else None
    return 1.0 / float(high) if high is not None and 1 < high < np.inf else 1.0


def _typed(name: str) -> str:
    """``pz-<module>[-<function>]`` -> ``pettingzoo:<module>:<function>``, the ``--env`` spelling (for messages)."""
    module, function = pettingzoo_entry_point(name)
    return f"pettingzoo:{module}:{function}"


def _entry_point(name: str) -> tuple[Any, Any]:
    """The module and the env function a PettingZoo env name points at.

    Raises:
        UnusableEnvError: the name is malformed, its module does not import, or has no such function.
    """
    try:
        module_name, function = pettingzoo_entry_point(name)
    except ConfigError as exc:
        raise UnusableEnvError(str(exc).removeprefix("env.name: ")) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # also a module of an optional extra that is not installed
        # PettingZoo keeps retired versions as attributes of their package (knights_archers_zombies_v10), whose
        # functions say which version replaced them
        parent, _, leaf = module_name.rpartition(".")
        try:
            module = getattr(importlib.import_module(parent), leaf) if parent else None
        except (ImportError, AttributeError):
            module = None
        if module is None:
            raise UnusableEnvError(f"expected pettingzoo:<module>:<function> with a module that imports, got "
                                   f"{_typed(name)!r} ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        offered = [f for f in ("parallel_env", "env", "raw_env") if callable(getattr(module, f, None))]
        has = ", ".join(offered) if offered else "none of parallel_env, env, raw_env"
        raise UnusableEnvError(f"expected a function of {module_name} (it has {has}), got {_typed(name)!r}")
    return module, fn


class PettingzooEnv:
    """A PettingZoo parallel env over all its agents (see the module docstring for the rules)."""

    record = EnvRecord(name="pettingzoo", sender_side_priorities=False, generic=True)

    @classmethod
    def constructor_kwargs(cls, name: str) -> set[str]:
        """Argument names of the env function (``env.kwargs``), or of the module's ``raw_env`` / ``env`` when the
        function only forwards ``**kwargs`` (``parallel_wrapper_fn``); ``{ANY_KWARG}`` when none names them.

        Raises:
            UnusableEnvError: the name does not point at a function.
        """
        module, fn = _entry_point(name)  # the named module: parallel_wrapper_fn's closure lives in PettingZoo's
        for candidate in (fn, getattr(module, "raw_env", None), getattr(module, "env", None)):
            if not callable(candidate):
                continue
            params = inspect.signature(candidate).parameters.values()
            named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            if named:
                return named
        return {ANY_KWARG}

    def __init__(self, kwargs: dict[str, Any], horizon: int = 500, *, name: str) -> None:
        """Build the PettingZoo env and check its spaces.

        Args:
            kwargs: the env function's arguments (``env.kwargs``).
            horizon: env steps after which an episode is truncated (in addition to the env's own limit).
            name: ``pz-<module>[-<function>]``.

        Raises:
            UnusableEnvError: a module or function that is not there, an env that is not a parallel env, an action
                space that is not ``Discrete``, an observation space that is not a ``Box`` of one rank.
        """
        from gymnasium import spaces
        from pettingzoo.utils.env import ParallelEnv

        if horizon < 1:
            raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
        own_record(type(self))
        self.horizon = int(horizon)
        _, fn = _entry_point(name)
        try:
            env = fn(**kwargs)
        except ImportError as exc:  # PettingZoo's DeprecatedEnv (knights_archers_zombies_v10 -> v11) is one
            raise UnusableEnvError(f"expected an env PettingZoo still provides, got {_typed(name)!r} ({exc})") from None
        if not isinstance(env, ParallelEnv):
            close = getattr(env, "close", None)
            if callable(close):
                close()
            raise UnusableEnvError(f"expected a function that returns a PettingZoo parallel env, got {_typed(name)!r}, "
                                   f"which returns {type(env).__name__} (for an AEC env use the module's parallel_env)")
        self.library_env = env
        """the wrapped PettingZoo parallel env (what ``pettingzoo.test.parallel_api_test`` checks)"""
        agents = tuple(env.possible_agents)
        problems = [f"{a}: action space {env.action_space(a)}" for a in agents
                    if not isinstance(env.action_space(a), spaces.Discrete)]
        problems += [f"{a}: observation space {env.observation_space(a)}" for a in agents
                     if not isinstance(env.observation_space(a), spaces.Box)]
        if not agents or problems:
            env.close()
            raise UnusableEnvError(f"expected a parallel env with agents, Discrete actions and Box observations, got "
                                   f"{_typed(name)!r} with {'; '.join(problems[:2]) or 'no agents'}")
        shapes = {a: tuple(int(d) for d in env.observation_space(a).shape) for a in agents}
        if len({len(s) for s in shapes.values()}) > 1:
            env.close()
            raise UnusableEnvError(f"expected observations of one rank, got {_typed(name)!r} with shapes "
                                   f"{sorted(set(shapes.values()))}")
        obs_shape = tuple(int(d) for d in np.max(np.array(list(shapes.values())), axis=0))
        self._n_N = np.array([int(env.action_space(a).n) for a in agents], dtype=np.int64)
        self._start_N = np.array([int(env.action_space(a).start) for a in agents], dtype=np.int64)
        compact = all(np.dtype(env.observation_space(a).dtype) in (np.uint8, np.bool_) for a in agents)
        self.spec = EnvSpec(name=name, learner_ids=agents, opponent_ids=(), obs_shape=obs_shape,
                            obs_dtype=np.uint8 if compact else np.float32, n_actions=int(self._n_N.max()),
                            team="agents", obs_scale=obs_scale([env.observation_space(a) for a in agents]))
        self._slot = {a: (i, tuple(slice(0, d) for d in shapes[a])) for i, a in enumerate(agents)}
        self._obs_NO = np.zeros((len(agents), *obs_shape), dtype=np.float32)
        self._alive_N = np.zeros(len(agents), dtype=bool)
        self._t = 0
        self._over = True

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode, as ``parallel_env.reset(seed=seed)`` does.

        Args:
            seed: reseeds the env when not None; None continues its current random stream.

        Returns:
            float32 [N, *obs_shape]: every learner's observation (zeros for one not in the game yet, whose
            ``alive_N`` is False).
        """
        obs, _ = self.library_env.reset(seed=seed)
        self._t = 0
        self._over = False
        self._write_obs(obs)
        listed = set(self.library_env.agents)
        self._alive_N[:] = [a in listed for a in self.spec.learner_ids]
        return self._obs_NO.copy()

    @property
    def alive_N(self) -> np.ndarray:
        """bool [N]: the learners listed in the env's ``agents`` now (at reset, those that start the episode)."""
        return self._alive_N.copy()

    def step(self, actions_N: np.ndarray) -> StepResult:
        """Advance one env step with one action per learner (entries of learners not in the game are ignored).

        Returns:
            StepResult over the N learners; info has 'all_agent_reward' (the sum of every agent's reward).
        """
        if self._over:
            raise RuntimeError("PettingzooEnv.step: the episode is over (or never started); call reset() first")
        n = self.spec.n_agents
        acts_N = np.asarray(actions_N, dtype=np.int64).reshape(-1)
        if acts_N.shape[0] != n:
            raise ValueError(f"PettingzooEnv.step: expected {n} actions, got shape {np.shape(actions_N)}")
        # padded actions beyond an agent's own count become its first action (SuperSuit's rule)
        sent_N = np.where((acts_N >= 0) & (acts_N < self._n_N), acts_N, 0) + self._start_N
        env = self.library_env
        actions = {a: int(sent_N[self._slot[a][0]]) for a in env.agents if a in self._slot}
        obs, rewards, terms, truncs, _ = env.step(actions)
        self._t += 1

        reward_N = np.zeros(n, dtype=np.float32)
        terminated_N = np.zeros(n, dtype=bool)
        truncated_N = np.zeros(n, dtype=bool)
        for a, r in rewards.items():
            if a in self._slot:
                reward_N[self._slot[a][0]] = r
        for a in self._slot:
            i = self._slot[a][0]
            terminated_N[i] = bool(terms.get(a, False))
            truncated_N[i] = bool(truncs.get(a, False)) and not terminated_N[i]
        self._write_obs(obs)
        was_alive_N = self._alive_N.copy()
        listed = set(env.agents)
        self._alive_N[:] = [a in listed for a in self.spec.learner_ids]
        cut = self._t >= self.horizon
        if cut:  # every learner still in the game is cut by the horizon
            truncated_N |= was_alive_N & ~terminated_N
        self._over = bool(cut or not listed)
        return StepResult(
            obs_NO=self._obs_NO.copy(),
            reward_N=reward_N,
            terminated_N=terminated_N,
            truncated_N=truncated_N,
            alive_N=self._alive_N.copy(),
            episode_over=self._over,
            info={"all_agent_reward": float(sum(rewards.values()))},
        )

    def close(self) -> None:
        """Release the env (and its renderer, if any)."""
        self.library_env.close()

    def _write_obs(self, obs: dict[str, Any]) -> None:
        """Copy returned observations into the learner rows, zero-padded at the high end; agents absent from
        ``obs`` get zero rows."""
        self._obs_NO.fill(0.0)
        for a, o in obs.items():
            slot = self._slot.get(a)
            if slot is not None:
                self._obs_NO[(slot[0], *slot[1])] = o
