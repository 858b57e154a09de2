"""MAgent2 battle and adversarial pursuit as ``MultiAgentEnv`` over the learning team.

One base class, ``MAgentEnv``, adapts a ``magent2`` parallel env: the learning team becomes the
array axis, the other team is driven inside the adapter by a fixed ``OpponentPolicy`` (uniformly
random by default), batched over all its M agents every step (dead ones get zero rows and
``alive_M`` False; their actions are not sent).

Death semantics (battle; measured, see STACK-NOTES 1.3): in the step an agent dies, magent2 still
returns it with ``terminations=True``, its last observation and a reward including dead_penalty;
from the next step it is gone from ``env.agents``. Here that step reports the learner with
``terminated_N`` True and its last obs/reward; afterwards ``alive_N`` is False, its obs rows are
zeros, its reward 0 and its action is ignored (never sent: magent2 would misalign actions of
agents it no longer lists). When a team is wiped out magent2 terminates every agent.

Padding (``pad_like_original``): the original wrapped the env in SuperSuit's ``pad_observations_v0``
and ``pad_action_space_v0``, which pad every agent's observation with zeros at the high end of each
axis to the element-wise largest shape over all agents, and widen every Discrete space to the
largest n, mapping an agent's out-of-range actions to 0 (no-op). The same rule is applied here to
learners and opponents; it only changes adversarial pursuit's prey ((9,9,5) -> (10,10,5), 9 -> 13
actions), since battle's teams share one shape.

Self-play (``self_play=True``, ``env.opponent: learning``): every agent of both teams is a learner, in
the env's own agent order (battle: red_0..5 then blue_0..5; adversarial pursuit: predator_0..3 then
prey_0..7), and there is no fixed opponent. This is how ``super-marl opponents train`` trains the
opponent teams with the unchanged native DQN trainer (one independent network per agent), and what
the original's ``*_plaindqn`` battle / adversarial-pursuit lines did (REFERENCE 14.11). Both teams
must share one observation shape and action count (adversarial pursuit needs ``pad_like_original``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, ClassVar

import numpy as np

from suPER.envs.base import EnvSpec, OpponentPolicy, RandomOpponent, StepResult
from suPER.envs.record import EnvRecord, own_record


class MAgentEnv:
    """Shared adapter for the two-team MAgent2 envs; subclasses only name the env and the teams.

    ``alive_N`` means "not dead": it turns False the step after a learner terminated and stays
    True for survivors when the episode is truncated. ``truncated_N`` is set for learners cut by
    the horizon or max_cycles that did not terminate in that step.
    """

    record: ClassVar[EnvRecord]
    """the env's facts (``suPER.envs.record``); ``record.name`` is the registry key"""
    library_module: ClassVar[str]
    """dotted name of the magent2 env module (``parallel_env``, ``default_reward_args``), imported on first use
    (``library``), so ``import suPER.envs`` needs no magent2: pursuit-only code (the GPU device check,
    benchmarks/device_check.sh) runs where magent2 is not installed"""
    team: ClassVar[str]
    """id prefix of the learning team"""
    opponent_team: ClassVar[str]
    """id prefix of the fixed opponent team"""

    @classmethod
    def library(cls) -> Any:
        """The magent2 env module named by ``library_module`` (imported here, not at module level)."""
        return importlib.import_module(cls.library_module)

    @classmethod
    def constructor_kwargs(cls) -> set[str]:
        """Argument names of the magent2 ``parallel_env`` plus its reward arguments (``default_reward_args``)."""
        lib = cls.library()
        return set(inspect.signature(lib.parallel_env).parameters) | set(lib.default_reward_args)

    def __init__(
        self,
        kwargs: dict[str, Any],
        horizon: int = 500,
        opponent: OpponentPolicy | None = None,
        pad_like_original: bool = True,
        self_play: bool = False,
        swap_teams: bool = False,
    ) -> None:
        """Build the magent2 parallel env.

        Args:
            kwargs: constructor arguments of the magent2 ``parallel_env`` (map_size, max_cycles,
                minimap_mode, extra_features, reward arguments).
            horizon: env steps after which an episode is truncated (in addition to max_cycles).
            opponent: fixed policy of the other team; None = uniformly random, reseeded by every
                ``reset(seed)`` with a seed.
            pad_like_original: pad observations and action spaces as SuperSuit's
                ``pad_observations_v0``/``pad_action_space_v0`` did in the original.
            self_play: both teams are learners (N = all agents, no opponent; see the module docstring).
            swap_teams: the opponent team (battle: red; adversarial pursuit: predators) learns and the
                learning team is the fixed opponent (population training's best responses for that side).
        """
        if horizon < 1:
            raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
        self.horizon = int(horizon)
        self._env = self._make_parallel_env(**kwargs)
        env = self._env
        agents = env.possible_agents
        team, opponent_team = (self.opponent_team, self.team) if swap_teams else (self.team, self.opponent_team)
        self.swap_teams = bool(swap_teams)
        learner_ids = tuple(a for a in agents if a.startswith(team + "_"))
        opponent_ids = tuple(a for a in agents if a.startswith(opponent_team + "_"))
        if not learner_ids or len(learner_ids) + len(opponent_ids) != len(agents):
            raise ValueError(f"{self.record.name}: cannot split agents {agents} into {team}/{opponent_team}")
        self.self_play = bool(self_play)
        self.team_ids: tuple[str, ...] = learner_ids
        """ids of the (normally) learning team, also in self-play"""
        self.opponent_team_ids: tuple[str, ...] = opponent_ids
        """ids of the (normally) fixed opponent team, also in self-play (where they learn)"""
        if self.self_play:
            learner_ids, opponent_ids = tuple(agents), ()
        native_obs = {a: tuple(env.observation_space(a).shape) for a in agents}
        self._native_n = {a: int(env.action_space(a).n) for a in agents}
        if self.self_play and not pad_like_original and (
                len({native_obs[a] for a in agents}) > 1 or len(set(self._native_n.values())) > 1):
            raise ValueError(f"{self.record.name}: self-play needs one obs shape and action count for both teams; "
                             f"set env.pad_like_original=true")
        if pad_like_original:
            padded = tuple(int(d) for d in np.max(np.array(list(native_obs.values())), axis=0))
            learner_obs = opponent_obs = padded
            learner_n = opponent_n = max(self._native_n.values())
        else:
            learner_obs, opponent_obs = native_obs[learner_ids[0]], native_obs[self.opponent_team_ids[0]]
            learner_n, opponent_n = self._native_n[learner_ids[0]], self._native_n[self.opponent_team_ids[0]]
        self.pad_like_original = pad_like_original
        self.spec = EnvSpec(
            name=own_record(type(self)).name,
            learner_ids=learner_ids,
            opponent_ids=opponent_ids,
            obs_shape=learner_obs,
            # obs hold 0/1 presence and HP fractions: float16 keeps them within 5e-4 (not lossless)
            obs_dtype=np.float16,
            n_actions=learner_n,
            team=f"{opponent_team}+{team}" if self.self_play else team,
            cell_codes=True,
        )
        self.opponent_obs_shape: tuple[int, ...] = opponent_obs
        """one opponent's observation shape as given to the opponent policy"""
        self.opponent_n_actions: int = opponent_n
        """size of each opponent's action space as seen by the opponent policy"""
        self._owns_opponent = opponent is None
        self.opponent: OpponentPolicy = opponent if opponent is not None else RandomOpponent(opponent_n)
        """the fixed policy acting for the opponent team every step"""

        n, m = len(learner_ids), len(opponent_ids)
        # native action counts per row: padded actions >= native n become 0 (SuperSuit's rule)
        self._learner_native_n_N = np.array([self._native_n[a] for a in learner_ids], dtype=np.int64)
        self._opp_native_n_M = np.array([self._native_n[a] for a in opponent_ids], dtype=np.int64)
        self._learner_slot = {a: (i, native_obs[a]) for i, a in enumerate(learner_ids)}
        self._opp_slot = {a: (i, native_obs[a]) for i, a in enumerate(opponent_ids)}
        self._obs_NO = np.zeros((n, *learner_obs), dtype=np.float32)
        self._opp_obs_MO = np.zeros((m, *opponent_obs), dtype=np.float32)
        self._alive_N = np.zeros(n, dtype=bool)
        self._opp_alive_M = np.zeros(m, dtype=bool)
        self._t = 0
        self._over = True

    def _make_parallel_env(self, **kwargs: Any) -> Any:
        """Build the wrapped magent2 parallel env (overridden per env)."""
        raise NotImplementedError

    def set_opponent(self, opponent: OpponentPolicy) -> None:
        """Replace the opponent policy; the adapter never reseeds a policy given from outside.

        Args:
            opponent: acts for all M opponents each step; sees obs of ``opponent_obs_shape`` and
                must return actions in [0, ``opponent_n_actions``).
        """
        self.opponent = opponent
        self._owns_opponent = False

    # ------------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode, as ``parallel_env.reset(seed=seed)`` does.

        An opponent policy with a ``new_episode(seed)`` method is told of every reset (a mixture of teams
        draws its member for the episode there; ``suPER.opponents.mixture``).

        Args:
            seed: reseeds MAgent's RNG (and the default random opponent) when not None; None
                continues the current streams.

        Returns:
            float32 [N, *obs_shape]: every learner's observation.
        """
        if seed is not None and self._owns_opponent and isinstance(self.opponent, RandomOpponent):
            self.opponent.rng = np.random.default_rng(seed)
        new_episode = getattr(self.opponent, "new_episode", None)
        if callable(new_episode):
            new_episode(seed)
        obs, _ = self._env.reset(seed=seed)
        self._t = 0
        self._over = False
        self._write_obs(obs)
        self._alive_N[:] = [a in obs for a in self.spec.learner_ids]
        self._opp_alive_M[:] = [a in obs for a in self.spec.opponent_ids]
        return self._obs_NO.copy()

    @property
    def alive_N(self) -> np.ndarray:
        """bool [N]: the learners not dead (all True after a reset: MAgent starts every agent)."""
        return self._alive_N.copy()

    def opponent_view(self) -> tuple[np.ndarray, np.ndarray]:
        """What the opponent policy sees before the next step (for a batch that acts for many games at once).

        Returns:
            (float32 obs [M, *opponent_obs_shape], bool alive [M]): views of internal buffers, valid until
            the next ``step``/``reset`` (copy before keeping them).
        """
        return self._opp_obs_MO, self._opp_alive_M

    def step(self, actions_N: np.ndarray, opponent_actions_M: np.ndarray | None = None) -> StepResult:
        """Advance one env step: learners act with ``actions_N``, opponents with their policy.

        Args:
            actions_N: int [N] actions in [0, n_actions); entries of dead learners are ignored.
            opponent_actions_M: the opponents' actions for this step, computed by the caller from
                ``opponent_view()`` (``suPER.envs.batched.LockstepBatch`` batches them over games); None =
                ask ``self.opponent``.

        Returns:
            StepResult over the N learners; info has 'all_agent_reward' (every agent, opponents
            included, as RLlib logged it), 'opponent_reward' (sum over opponents), and 'team_alive' and
            'opponent_alive': learners and opponents still in the game after this step, as the engine counts
            them (``_survivors``; not ``alive_N``, which is False for everyone once the engine ends the game).
        """
        if self._over:
            raise RuntimeError(f"{type(self).__name__}.step: the episode is over (or never started); call reset()")
        env = self._env
        n = self.spec.n_agents
        acts_N = np.asarray(actions_N, dtype=np.int64).reshape(-1)
        if acts_N.shape[0] != n:
            raise ValueError(f"{type(self).__name__}.step: expected {n} actions, got shape {np.shape(actions_N)}")
        # act (opponents): one batched call over all M rows, dead rows are zeros and masked
        if opponent_actions_M is None:
            opponent_actions_M = self.opponent.act(self._opp_obs_MO, self._opp_alive_M.copy())
        opp_M = np.asarray(opponent_actions_M, dtype=np.int64).reshape(-1)
        acts_N = np.where(acts_N < self._learner_native_n_N, acts_N, 0).tolist()
        opp_M = np.where(opp_M < self._opp_native_n_M, opp_M, 0).tolist()
        actions = {}
        for a in env.agents:  # only listed agents: magent2 assigns actions by position in env.agents
            slot = self._learner_slot.get(a)
            actions[a] = acts_N[slot[0]] if slot is not None else opp_M[self._opp_slot[a][0]]

        obs, rewards, terms, truncs, _ = env.step(actions)
        self._t += 1

        reward_N = np.zeros(n, dtype=np.float32)
        terminated_N = np.zeros(n, dtype=bool)
        all_reward = opponent_reward = 0.0
        for a, r in rewards.items():
            all_reward += r
            slot = self._learner_slot.get(a)
            if slot is not None:
                reward_N[slot[0]] = r
                terminated_N[slot[0]] = terms[a]
            else:
                opponent_reward += r
        opp_terminated = [terms.get(a, False) for a in self.spec.opponent_ids]
        self._write_obs(obs)
        cut_all = self._t >= self.horizon or any(truncs.values())
        truncated_N = self._alive_N & ~terminated_N if cut_all else np.zeros(n, dtype=bool)
        self._alive_N &= ~terminated_N
        self._opp_alive_M &= ~np.array(opp_terminated, dtype=bool)
        self._over = bool(cut_all or not env.agents or not self._alive_N.any())
        team_alive, opponent_alive = self._survivors() if self._over else (int(self._alive_N.sum()),
                                                                          int(self._opp_alive_M.sum()))
        return StepResult(
            obs_NO=self._obs_NO.copy(),
            reward_N=reward_N,
            terminated_N=terminated_N,
            truncated_N=truncated_N,
            alive_N=self._alive_N.copy(),
            episode_over=self._over,
            info={
                "all_agent_reward": float(all_reward),
                "opponent_reward": float(opponent_reward),
                "team_alive": team_alive,
                "opponent_alive": opponent_alive,
            },
        )

    def _survivors(self) -> tuple[int, int]:
        """(learners, opponents) the MAgent engine still holds after this step: dead agents are cleared from
        it every step, so its remaining agent ids are the survivors.

        Not the termination flags: when the engine ends the game early (battle: a team wiped out), magent2
        terminates every agent, survivors included (``magent_parallel_env._compute_terminates``), so
        ``alive_N`` and the opponents' flags are all False and a win by elimination would read 0 vs 0.
        """
        names = self._env.possible_agents
        alive = {names[i] for h in self._env.handles for i in self._env.env.get_agent_id(h)}
        return (sum(a in alive for a in self.spec.learner_ids), sum(a in alive for a in self.spec.opponent_ids))

    def close(self) -> None:
        """Release the env (and its renderer, if any)."""
        self._env.close()

    # ------------------------------------------------------------------------------------------

    def _write_obs(self, obs: dict[str, np.ndarray]) -> None:
        """Copy returned obs into the learner/opponent arrays, zero-padded at the high end.

        Agents absent from ``obs`` (dead before this step) get zero rows.
        """
        self._obs_NO.fill(0.0)
        self._opp_obs_MO.fill(0.0)
        for a, o in obs.items():
            slot = self._learner_slot.get(a)
            target = self._obs_NO if slot is not None else self._opp_obs_MO
            i, (h, w, c) = slot if slot is not None else self._opp_slot[a]
            target[i, :h, :w, :c] = o


def outcome_battle(team_alive: int, opponent_alive: int, opponent_return: float) -> int:
    """Battle: the team with more surviving agents at the end wins (a wiped-out team has 0); equal = tie."""
    return int(np.sign(team_alive - opponent_alive))


def outcome_adversarial_pursuit(team_alive: int, opponent_alive: int, opponent_return: float) -> int:
    """Adversarial pursuit has no winner in the game: the predators (the opponent) win an episode when their
    team return is positive, i.e. their tags (+1 each) outweigh the -0.2 of every tag action they took; the
    prey (the team) win when it is negative; 0 (no tag action at all) is a tie."""
    return int(-np.sign(opponent_return))


class BattleEnv(MAgentEnv):
    """``magent2`` battle_v4: blue learns against a fixed red team (6 vs 6 on map 18)."""

    record = EnvRecord(
        name="battle", sender_side_priorities=True, has_opponents=True, outcome=outcome_battle,
        win_definition="the team with more surviving agents at the end of the episode wins (a wiped-out team "
                       "has 0); equal numbers are a tie",
        # about an hour on 2 shared cores at 1 torch thread (~17 env steps/s for 12 learners, docs/design.md)
        opponent_train_budget=60_000)
    library_module = "magent2.environments.battle.battle"
    team = "blue"
    opponent_team = "red"

    def _make_parallel_env(self, **kwargs: Any) -> Any:
        return self.library().parallel_env(**kwargs)


class AdversarialPursuitEnv(MAgentEnv):
    """``magent2`` adversarial_pursuit_v4: prey learn against fixed predators (8 vs 4 on map 18)."""

    record = EnvRecord(
        name="adversarial_pursuit", sender_side_priorities=True, has_opponents=True,
        outcome=outcome_adversarial_pursuit,
        win_definition="the predators win an episode when their team return is positive (tags, +1 each, "
                       "outweigh the -0.2 of every tag action), lose when it is negative, tie at 0",
        opponent_train_budget=60_000)
    library_module = "magent2.environments.adversarial_pursuit.adversarial_pursuit"
    team = "prey"
    opponent_team = "predator"

    def _make_parallel_env(self, **kwargs: Any) -> Any:
        return self.library().parallel_env(**kwargs)
