"""SUPER as a drop-in RLlib 2.60 algorithm: ``suPERDQN`` / ``suPERDQNConfig``.

Usage (the paper README's promise)::

    from suPER.core.trainers import suPERDQN, suPERDQNConfig
    config = suPERDQNConfig().training(suPER_bandwidth=0.2).environment(...)
    trainer = suPERDQN(config=config)

Works for any RLlib ``MultiAgentEnv`` trained with one module per agent (RLlib's new API stack:
RLModule / Learner / EnvRunner / episode replay buffers). If the config names no policies, one module
per agent is set up from the env's ``possible_agents`` (plain ``DQN`` would fail on a multi-agent
env configured like that).

The hook. RLlib's ``DQN._training_step_new_api_stack`` (ray/rllib/algorithms/dqn/dqn.py:648) samples
episode chunks from the EnvRunners, calls ``self.local_replay_buffer.add(episodes)`` (dqn.py:668),
then (after ``num_steps_sampled_before_learning_starts``) samples B rows per module, updates the
learners and writes the learners' TD errors back as priorities (dqn.py:742-753). ``suPERDQN`` does
not copy that method: its replay buffer (``suPER.core.rllib_buffer``) calls ``suPERDQN._relay_fresh``
at the end of every ``add``, i.e. right after dqn.py:668 and before any replay of that step, from the
very first fragment (warm-up included), as the original (SUPER-REFERENCE 1.3). ``_relay_fresh``:

1. builds the fresh agent steps of the added chunks as 1-step episodes, exactly as the buffer
   samples them for learning;
2. computes their |TD| on the learner (``fresh_td_on_learner``, no grad), each with the *sender*
   module's online and target networks before this step's update, through the learner's own
   connector pipeline (so custom obs connectors and GPU learners work as in training) and with the
   same target as ``DQNTorchLearner`` (double-Q and n-step as configured);
3. selects and routes with the shared ``suPER.core.relay.Relay`` (quantile / gaussian /
   gaussian_variance / stochastic; team filter; non-trainable modules excluded);
4. inserts the selected steps into the receivers' prioritized index lists as pointers
   (``add_relayed``), at the priority ``suPER_insertion_priority`` asks for;
5. logs ``suPER/fraction_shared_mean``, ``suPER/fraction_shared_<module>`` and
   ``suPER/relayed_rows`` in the results dict (means/sums over the iteration).

Private internals: the buffer subclass relies on private attributes of RLlib 2.60's
``MultiAgentPrioritizedEpisodeReplayBuffer`` (listed and checked in ``suPER.core.rllib_buffer``),
and the TD pass calls ``Learner._learner_connector``. ``setup`` runs ``check_rllib_internals`` and
fails with a clear message on any other ray version. Everything else is public API.

With ``suPER=False`` nothing here runs: the algorithm is RLlib's DQN (same results for the same seed
and buffer; tests/core/test_trainers.py checks it).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.dqn.dqn import DQN, DQNConfig
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.utils.metrics import TIMERS

from suPER.config import ConfigError, RelayConfig, check_relay_setting, in_range
from suPER.core.relay import INSERTION_PRIORITIES, Relay, RelayPlan
from suPER.core.rllib_buffer import (
    BUFFER_PATH,
    ROW_KEY,
    RelayMultiAgentPrioritizedEpisodeReplayBuffer,
    check_rllib_internals,
)
from suPER.core.selection import SELECTION_RULES, check_mode

logger = logging.getLogger(__name__)

STOCK_PRIORITIZED_BUFFERS = ("PrioritizedEpisodeReplayBuffer", "MultiAgentPrioritizedEpisodeReplayBuffer")
"""Buffer types that suPERDQN replaces with its relay buffer (same kwargs) when suPER is on."""

PRIORITY_EPS = 1e-6
"""Default ``suPER_priority_eps``: eps in ``|td| + eps`` for the sender/legacy insertion priorities
(``rllib_runner`` passes ``dqn.per_eps``, as the native trainer uses)."""

SUPER_STATE_KEY = "suPER_relay"
"""Key of the relay state in ``suPERDQN.get_state()`` (and so in checkpoints)."""

TIMER_KEY = "suPER_relay"
"""Timer of the relay step under results["timers"]."""


def module_per_agent(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    """Policy mapping used when the config names no policies: module id = str(agent id)."""
    return str(agent_id)


class suPERDQNConfig(DQNConfig):  # noqa: N801 - name fixed by the paper's README
    """DQNConfig plus SUPER's settings, set through ``.training(...)`` (or the README's ``.train(...)``).

    Attributes:
        suPER: relay surprising transitions to teammates (False = plain RLlib DQN).
        suPER_mode: a registered selection rule (``suPER.core.selection.SELECTION_RULES``: quantile,
            gaussian, gaussian_variance, stochastic, topk, ...).
        suPER_bandwidth: fraction of each sender's fresh transitions to relay, in [0, 1].
        suPER_window: length of each sender's sliding |TD| window (quantile/gaussian modes).
        suPER_team_sharing: None/"" = every trainable module; a string = substring of module ids
            (commas: explicit list); a list = explicit module ids.
        suPER_insertion_priority: max (receiver's max priority) | sender (|td| + eps) | legacy (1.0,
            the original's RLlib 2.1 behaviour without worker-side prioritization).
        suPER_module_per_agent: with no policies configured and a MultiAgentEnv, map every agent to
            its own module (module id = str(agent id)).
        suPER_params: the selection rule's own parameters by name (``{"k": 3}`` for topk); unset ones
            take the rule's defaults.
        suPER_priority_eps: eps of the sender/legacy insertion priorities ``|td| + eps``.
        suPER_env_name: the paper env trained on (pursuit | battle | adversarial_pursuit), which decides
            the legacy rule's sender-side flag as on the native backend; None for any other env.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or suPERDQN)
        self.suPER = True
        self.suPER_mode = "quantile"
        self.suPER_bandwidth = 0.1
        self.suPER_window = 1500
        self.suPER_team_sharing: str | list[str] | None = None
        self.suPER_insertion_priority = "max"
        self.suPER_module_per_agent = True
        self.suPER_params: dict[str, Any] = {}
        self.suPER_priority_eps = PRIORITY_EPS
        self.suPER_env_name: str | None = None
        # multi-agent prioritized replay with the relay buffer (a string: RLlib tests substrings of it)
        self.replay_buffer_config = {"type": BUFFER_PATH, "capacity": 50000, "alpha": 0.6, "beta": 0.4}

    def training(self, *, suPER: Any = NotProvided, suPER_mode: Any = NotProvided,  # noqa: N803
                 suPER_bandwidth: Any = NotProvided, suPER_window: Any = NotProvided,  # noqa: N803
                 suPER_team_sharing: Any = NotProvided, suPER_insertion_priority: Any = NotProvided,  # noqa: N803
                 suPER_module_per_agent: Any = NotProvided, suPER_params: Any = NotProvided,  # noqa: N803
                 suPER_priority_eps: Any = NotProvided, suPER_env_name: Any = NotProvided,  # noqa: N803
                 suPER_mean_stddev_window: Any = NotProvided,  # noqa: N803 - the original's name for window
                 **kwargs: Any) -> suPERDQNConfig:
        """DQNConfig.training plus the suPER_* settings (validated in ``validate``)."""
        super().training(**kwargs)
        if suPER_mean_stddev_window is not NotProvided:
            self.suPER_window = suPER_mean_stddev_window
        for name, value in (("suPER", suPER), ("suPER_mode", suPER_mode), ("suPER_bandwidth", suPER_bandwidth),
                            ("suPER_window", suPER_window), ("suPER_team_sharing", suPER_team_sharing),
                            ("suPER_insertion_priority", suPER_insertion_priority),
                            ("suPER_module_per_agent", suPER_module_per_agent), ("suPER_params", suPER_params),
                            ("suPER_priority_eps", suPER_priority_eps), ("suPER_env_name", suPER_env_name)):
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    def train(self, **kwargs: Any) -> suPERDQNConfig:
        """Alias of ``training`` (the spelling of the paper's README)."""
        return self.training(**kwargs)

    def validate(self) -> None:
        """DQN's checks plus SUPER's; may set one module per agent and the relay buffer type."""
        if self.suPER_module_per_agent and not self.is_multi_agent and not self._is_frozen:
            self._set_module_per_agent()
        super().validate()
        self._validate_suPER()

    def _validate_suPER(self) -> None:  # noqa: N802
        def bad(key: str, expected: str, got: Any) -> None:
            self._value_error(f"{key}: expected {expected}, got {got!r}")

        if not isinstance(self.suPER, bool):
            bad("suPER", "True or False", self.suPER)
        try:  # the checks every backend shares (the rules' records, suPER.config.check_relay_setting), named as typed
            check_mode(self.suPER_mode, "suPER_mode")
            for key, value in (("relay.bandwidth", self.suPER_bandwidth), ("relay.window", self.suPER_window)):
                check_relay_setting(key, value, key.replace("relay.", "suPER_"))
            known = {p.name for r in SELECTION_RULES.values() for p in r.params}
            if not isinstance(self.suPER_params, dict) or not set(self.suPER_params) <= known:
                bad("suPER_params", f"a dict with keys among {', '.join(sorted(known))}", self.suPER_params)
            for p in (p for r in SELECTION_RULES.values() for p in r.params if p.name in self.suPER_params):
                value = self.suPER_params[p.name]  # checked by the declaring rule's range; RLlib keys are not coerced
                if p.type in (int, float) and not in_range(p.range, value)[1]:
                    bad(f"suPER_params[{p.name!r}]", in_range(p.range, value)[0], value)
            check_relay_setting("dqn.per_eps", self.suPER_priority_eps, "suPER_priority_eps")
        except ConfigError as e:
            self._value_error(str(e))
        t = self.suPER_team_sharing
        if not (t is None or isinstance(t, str) or (isinstance(t, (list, tuple)) and all(isinstance(x, str) for x in t))):
            bad("suPER_team_sharing", "None, a substring of module ids, or a list of module ids", t)
        if self.suPER_insertion_priority not in INSERTION_PRIORITIES:
            bad("suPER_insertion_priority", f"one of {', '.join(INSERTION_PRIORITIES)}", self.suPER_insertion_priority)
        rbc = self.replay_buffer_config
        if isinstance(rbc.get("type"), type) and not self._is_frozen:
            # RLlib 2.60's update_from_dict (algorithm_config.py:843-846, the Tune / dict-config path) turns
            # an import path into a class, which Algorithm._create_local_replay_buffer_if_necessary
            # (algorithm.py:4475) then cannot handle ("'ABCMeta' is not iterable"): store the path again.
            self.replay_buffer_config = rbc = {**rbc, "type": f"{rbc['type'].__module__}.{rbc['type'].__qualname__}"}
        buffer_is_ours = _is_relay_buffer(rbc.get("type"))
        if self.suPER:
            if not self.enable_env_runner_and_connector_v2 or not self.enable_rl_module_and_learner:
                self._value_error("suPER: suPERDQN needs RLlib's new API stack (RLModule/Learner/EnvRunner); "
                                  "remove config.api_stack(...) overrides")
            if self.num_atoms != 1:
                bad("num_atoms (with suPER=True)", "1 (distributional DQN has no scalar TD error to select by)",
                    self.num_atoms)
            if not buffer_is_ours:
                if _type_name(rbc.get("type")) not in STOCK_PRIORITIZED_BUFFERS:
                    bad("replay_buffer_config['type'] (with suPER=True)",
                        f"{BUFFER_PATH!r} (or a subclass), or a stock prioritized episode buffer it replaces",
                        rbc.get("type"))
                if not self._is_frozen:  # same kwargs, relay-capable class
                    self.replay_buffer_config = {**rbc, "type": BUFFER_PATH}
                    buffer_is_ours = True
        if buffer_is_ours and self.seed is not None and "seed" not in self.replay_buffer_config \
                and not self._is_frozen:
            self.replay_buffer_config = {**self.replay_buffer_config, "seed": self.seed}
        for key in ("alpha", "beta"):  # DQN crashes later (beta=None) when a type change dropped them
            if self.replay_buffer_config.get(key) is None and buffer_is_ours:
                bad(f"replay_buffer_config[{key!r}]", "a number (a new 'type' replaces the whole dict in "
                    "DQNConfig.training, so pass alpha and beta with it)", None)

    def _set_module_per_agent(self) -> None:
        """One module per agent when no policies are configured and the env is a MultiAgentEnv."""
        env = _make_env_if_multi_agent(self.env, self.env_config)
        if env is None:
            return
        try:
            agents = list(getattr(env, "possible_agents", None) or getattr(env, "agents", []))
        finally:
            env.close()
        if agents:
            # in the env's agent order (a set's order of strings would follow PYTHONHASHSEED; RLlib builds and
            # initialises the modules in this order)
            self.multi_agent(policies=list(dict.fromkeys(map(module_per_agent, agents))),
                             policy_mapping_fn=module_per_agent)


class suPERDQN(DQN):  # noqa: N801 - name fixed by the paper's README
    """RLlib DQN whose fresh transitions are relayed to teammates' replay by TD error (SUPER).

    Attributes:
        relay: the shared selection/routing state (None when suPER is off).
    """

    @classmethod
    def get_default_config(cls) -> suPERDQNConfig:
        """suPERDQNConfig defaults (so Tune / dict configs get the suPER_* keys)."""
        return suPERDQNConfig()

    def setup(self, config: Any) -> None:
        """Build DQN, then the relay and the hook on the replay buffer (when suPER is on)."""
        super().setup(config)
        self.relay: Relay | None = None
        self._spaces_checked = False
        if not self.config.suPER:
            return
        check_rllib_internals()
        buffer = self.local_replay_buffer
        if not isinstance(buffer, RelayMultiAgentPrioritizedEpisodeReplayBuffer):
            raise TypeError(f"suPERDQN: the replay buffer is {type(buffer).__name__}; suPER needs "
                            f"replay_buffer_config['type'] = {BUFFER_PATH!r} (suPERDQNConfig sets it by default)")
        modules = self._learner_modules()
        ids = sorted(modules)
        team = self.config.suPER_team_sharing
        self.relay = relay_from_config(self.config, ids, exclude=[m for m in ids if not modules[m]])
        if not self.relay.active:
            logger.warning("suPERDQN: fewer than two trainable modules take part (modules %s, team %r); "
                           "the relay is a no-op", ids, team)
        buffer.on_add = self._relay_fresh

    def _learner_modules(self) -> dict[str, bool]:
        """Module id -> trainable, as the (first) learner sees them."""
        results = self.learner_group.foreach_learner(_modules_on_learner)
        return dict(_first_result(results))

    # ---- the relay step (called by the buffer right after DQN's add, dqn.py:668)

    def _relay_fresh(self, buffer: RelayMultiAgentPrioritizedEpisodeReplayBuffer) -> None:
        relay = self.relay
        if relay is None:
            return
        with self.metrics.log_time((TIMERS, TIMER_KEY)):
            ids = relay.agent_ids
            rows_N = [list(buffer.last_fresh.get(m, [])) for m in ids]
            T = max((len(r) for r in rows_N), default=0)
            valid_NT = np.zeros((len(ids), T), dtype=bool)
            td_NT = np.zeros((len(ids), T))
            for n, rows in enumerate(rows_N):
                valid_NT[n, :len(rows)] = True
            if relay.active and T > 0:
                td_NT = self._fresh_td(buffer, rows_N, T)
            plan = relay.plan(td_NT, valid_NT)
            if plan.n_relayed:
                src = [rows_N[s][r] for s, r in zip(plan.sender_K, plan.row_K)]
                receivers = [ids[r] for r in plan.receiver_K]
                self._check_spaces(buffer, src, receivers, rows_N)
                prio = relay.insertion.priorities(td_NT, plan)
                buffer.add_relayed(receivers, [x[0] for x in src], [x[1] for x in src], [x[2] for x in src], prio)
            self._log_relay(plan)

    def _fresh_td(self, buffer: RelayMultiAgentPrioritizedEpisodeReplayBuffer, rows_N: list[list[Any]],
                  T: int) -> np.ndarray:
        """|TD| [N, T] of the participants' fresh rows with each sender's own nets (zeros elsewhere)."""
        assert self.relay is not None
        ids = self.relay.agent_ids
        n_step = self.config.n_step
        n = int(n_step[0] if isinstance(n_step, (list, tuple)) else n_step)
        episodes, where = [], []
        for s in np.flatnonzero(self.relay.participants_N):
            for t, (eps_id, agent_id, ts) in enumerate(rows_N[s]):
                episodes.append(buffer.transition_episode(eps_id, agent_id, ts, ids[s], n, self.config.gamma,
                                                          row=len(where)))
                where.append((s, t))
        td_NT = np.zeros((len(ids), T))
        if not episodes:
            return td_NT
        by_module = _first_result(self.learner_group.foreach_learner(fresh_td_on_learner, episodes=episodes))
        td_K = np.full(len(episodes), np.nan)
        for rows_k, td_k in by_module.values():
            td_K[rows_k] = td_k
        if np.isnan(td_K).any():
            raise RuntimeError(f"suPERDQN: the learner returned no TD error for {int(np.isnan(td_K).sum())} of "
                               f"{len(td_K)} fresh rows (did a learner connector drop rows?)")
        s_K, t_K = np.array(where).T
        td_NT[s_K, t_K] = td_K
        return td_NT

    def _check_spaces(self, buffer: RelayMultiAgentPrioritizedEpisodeReplayBuffer, src: Sequence[Any],
                      receivers: Sequence[str], rows_N: list[list[Any]]) -> None:
        """Relaying across modules needs equal obs/action spaces; check once, fail with the pair."""
        if self._spaces_checked:
            return
        assert self.relay is not None
        own: dict[str, Any] = {}
        for m, rows in zip(self.relay.agent_ids, rows_N):
            if rows:
                own[m] = buffer.spaces_of(rows[0][0], rows[0][1])
        for (eps_id, agent_id, _), recv in zip(src, receivers):
            if recv in own and buffer.spaces_of(eps_id, agent_id) != own[recv]:
                raise ValueError(f"suPER_team_sharing: agent {agent_id!r} and module {recv!r} have different "
                                 "observation/action spaces, so their transitions cannot be relayed; restrict "
                                 "the team (suPER_team_sharing) to modules with equal spaces")
        self._spaces_checked = True

    def _log_relay(self, plan: RelayPlan) -> None:
        """Log one fragment's relay: each sender's fraction of its fresh rows relayed, and their mean over the
        participants, counting only senders that had rows in the fragment (a dead agent's empty fragment would
        read as a fraction of 0; the native trainer pools its counts the same way, ``RelayTally``)."""
        assert self.relay is not None
        had_rows = plan.fresh_N > 0
        part = self.relay.participants_N & had_rows
        if not self.relay.active or part.any():
            mean = float(plan.fraction_N[part].mean()) if self.relay.active else 0.0
            self.metrics.log_value(("suPER", "fraction_shared_mean"), mean, reduce="mean")
        for m, f, rows in zip(self.relay.agent_ids, plan.fraction_N, had_rows):
            if rows:
                self.metrics.log_value(("suPER", f"fraction_shared_{m}"), float(f), reduce="mean")
        self.metrics.log_value(("suPER", "relayed_rows"), int(plan.n_relayed), reduce="sum")
        self.metrics.log_value(("suPER", "relayed_rows_lifetime"), int(plan.n_relayed), reduce="lifetime_sum")

    # ---- checkpoints: the relay's windows and generator travel with the algorithm state

    def relay_settings(self) -> dict[str, Any]:
        """The suPER_* settings in effect."""
        c = self.config
        return {"suPER": c.suPER, "suPER_mode": c.suPER_mode, "suPER_bandwidth": c.suPER_bandwidth,
                "suPER_window": c.suPER_window, "suPER_team_sharing": c.suPER_team_sharing,
                "suPER_insertion_priority": c.suPER_insertion_priority, "suPER_params": dict(c.suPER_params)}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Algorithm state plus ``suPER_relay``: module ids, settings and the relay's windows + generator."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self.relay is not None and self._check_component(SUPER_STATE_KEY, components, not_components):
            state[SUPER_STATE_KEY] = {"module_ids": list(self.relay.agent_ids), "settings": self.relay_settings(),
                                      "relay": self.relay.state_dict()}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore; the relay windows must belong to the same module ids."""
        super().set_state(state)
        saved = state.get(SUPER_STATE_KEY)
        if saved is None or self.relay is None:
            return
        if list(saved["module_ids"]) != list(self.relay.agent_ids):
            raise ValueError(f"suPERDQN.set_state: checkpoint relays between modules {saved['module_ids']}, this "
                             f"algorithm between {self.relay.agent_ids}")
        if saved["settings"] != self.relay_settings():
            logger.warning("suPERDQN.set_state: checkpoint suPER settings %s differ from the config's %s; keeping "
                           "the config's settings and the checkpoint's windows", saved["settings"],
                           self.relay_settings())
        self.relay.load_state_dict(saved["relay"])


# --------------------------------------------------------------------------------------------------
# functions that run on the learner (module level so they pickle to remote learners)


def _modules_on_learner(learner: Any) -> list[tuple[str, bool]]:
    return [(mid, bool(learner.should_module_be_updated(mid))) for mid in learner.module.keys()]


def fresh_td_on_learner(learner: Any, episodes: list[Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """|TD| of 1-step episodes with each module's current online and target nets (no grad).

    The batch is built by the learner's own connector pipeline (as for training), and the target is
    ``DQNTorchLearner``'s: ``r + gamma^n (1 - terminated) Q_target(o', a*)`` with
    ``a* = argmax Q_online(o')`` (double_q) or ``argmax Q_target(o')``.

    Args:
        learner: a DQN torch Learner.
        episodes: 1-step SingleAgentEpisodes tagged with the ``suPER_row`` column.

    Returns:
        module id -> (row tags int [B], |td| float [B]).
    """
    import torch
    from ray.rllib.algorithms.dqn.dqn_learner import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
    from ray.rllib.core.columns import Columns

    batch = learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes, shared_data={},
                                       metrics=None)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with torch.no_grad():
        for module_id, b in batch.items():
            module = learner.module[module_id].unwrapped()
            cfg = learner.config.get_config_for_module(module_id)
            fwd = module.forward_train(b)
            actions = b[Columns.ACTIONS].long().unsqueeze(-1)
            q_sel = torch.nan_to_num(torch.gather(fwd[QF_PREDS], -1, actions), neginf=0.0).squeeze(-1)
            q_target_next = fwd[QF_TARGET_NEXT_PREDS]
            a_star = torch.argmax(fwd[QF_NEXT_PREDS] if cfg.double_q else q_target_next, dim=-1, keepdim=True)
            q_next = torch.nan_to_num(torch.gather(q_target_next, -1, a_star), neginf=0.0).squeeze(-1)
            target = b[Columns.REWARDS] + (cfg.gamma ** b["n_step"]) * (1.0 - b[Columns.TERMINATEDS].float()) * q_next
            td = torch.abs(q_sel - target)
            out[module_id] = (np.asarray(b[ROW_KEY].cpu().numpy(), dtype=np.int64), td.float().cpu().numpy())
    return out


def _first_result(results: Any) -> Any:
    """The first learner's return value (raising its error, if any)."""
    for r in results:
        if not r.ok:
            raise r.get()
        return r.get()
    raise RuntimeError("suPERDQN: no learner answered")


def _type_name(buffer_type: Any) -> str:
    if isinstance(buffer_type, str):
        return buffer_type.rsplit(".", 1)[-1]
    return getattr(buffer_type, "__name__", str(buffer_type))


def relay_config_of(config: suPERDQNConfig) -> RelayConfig:
    """The typed relay config of a ``suPERDQNConfig`` (its suPER_* keys) -- what the native trainer reads."""
    team = config.suPER_team_sharing
    own = {p.name for p in SELECTION_RULES[config.suPER_mode].params}
    return RelayConfig(enabled=bool(config.suPER), mode=config.suPER_mode, bandwidth=float(config.suPER_bandwidth),
                       window=int(config.suPER_window), team=team if isinstance(team, str) else "",
                       insertion_priority=config.suPER_insertion_priority,
                       params={k: v for k, v in config.suPER_params.items() if k in own})


def relay_from_config(config: suPERDQNConfig, module_ids: Sequence[str], exclude: Sequence[str] = ()) -> Relay:
    """``Relay.from_config`` for ``suPERDQN`` (the same constructor, seed offset, eps and legacy rule as native).

    Args:
        config: the algorithm's (validated) config.
        module_ids: the sharing modules in array order.
        exclude: modules that never take part (non-trainable).
    """
    from suPER.envs.record import sender_side_priorities

    team = config.suPER_team_sharing
    return Relay.from_config(relay_config_of(config), module_ids, seed=config.seed,
                             per_eps=float(config.suPER_priority_eps),
                             sender_side=sender_side_priorities(config.suPER_env_name),
                             team=team if team else None, exclude=exclude,
                             labels={"relay.mode": "suPER_mode", "relay.bandwidth": "suPER_bandwidth",
                                     "relay.window": "suPER_window"})


def _is_relay_buffer(buffer_type: Any) -> bool:
    """``buffer_type`` (class or import path) is RelayMultiAgentPrioritizedEpisodeReplayBuffer or a subclass."""
    if isinstance(buffer_type, str):
        if buffer_type == BUFFER_PATH:
            return True
        module_name, _, cls_name = buffer_type.rpartition(".")
        if not module_name:
            return False
        try:
            buffer_type = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError):
            return False
    return isinstance(buffer_type, type) and issubclass(buffer_type, RelayMultiAgentPrioritizedEpisodeReplayBuffer)


def _make_env_if_multi_agent(env: Any, env_config: Any) -> Any:
    """An instance of ``env`` if it is (or is registered as) a MultiAgentEnv, else None (gym ids: None)."""
    from ray.rllib.env.env_context import EnvContext
    from ray.tune.registry import ENV_CREATOR, _global_registry

    ctx = env_config if isinstance(env_config, EnvContext) else EnvContext(dict(env_config or {}), worker_index=0)
    if isinstance(env, type):
        return env(ctx) if issubclass(env, MultiAgentEnv) else None
    if isinstance(env, str) and _global_registry.contains(ENV_CREATOR, env):
        instance = _global_registry.get(ENV_CREATOR, env)(ctx)
        if isinstance(instance, MultiAgentEnv):
            return instance
        instance.close()
    return None


def _register_with_tune() -> None:
    """Register ``suPERDQN`` under its name, as RLlib's built-in algorithms are, so ``tune.Tuner("suPERDQN", ...)``
    and ``tune.run("suPERDQN")`` work after ``import suPER.core``, like ``tune.Tuner("DQN", ...)``."""
    from ray.tune.registry import register_trainable

    register_trainable("suPERDQN", suPERDQN)


_register_with_tune()
