"""A multi-agent prioritized episode buffer for RLlib 2.60 that can hold SUPER's relayed transitions.

RLlib's new API stack keeps DQN's replay data in ONE ``MultiAgentPrioritizedEpisodeReplayBuffer``
holding whole ``MultiAgentEpisode``s. Each module has its own list of index entries
``_module_to_indices[module] = [(ma_episode_idx, agent_id, agent_ts, tree_idx), ...]`` and its own
sum/min segment trees, so sampling and priorities are independent per module. This subclass adds
what SUPER needs and fixes what is broken:

(a) **Relayed transitions without copies.** ``add_relayed`` appends an index entry that points at
    the *sender's* agent step to the *receiver's* index list and trees (at the receiver's max
    priority by default). No data is copied; a pointer expires when its source episode is evicted
    (the stock eviction loop already filters every module's entries by episode). Pointers do not
    consume ``capacity`` (which counts env steps of stored episodes); the original suPER's copies
    did consume the receiver's per-policy capacity (documented in docs/rllib.md).
(b) **Routing.** ``_sample_independent`` labels each sampled row with the module id *of the stored
    episode* (``sa_episode.module_id``), so a relayed row would train the sender. ``sample`` relabels
    every row of module ``m``'s block with ``m``; the learner connector (``AgentToModuleMapping``,
    keyed by ``(multi_agent_episode_id, agent_id, module_id)``) then routes it to the receiver.
(c) **Priority-ordering fix.** The learner connector groups a module's rows by that key (first
    appearance order), so the TD errors that come back are in *grouped* order, while
    ``update_priorities`` zips them with ``_module_to_last_sampled_indices`` in *sample* order:
    whenever two episodes (or two agents of one module) interleave in a sample, priorities land on
    the wrong rows. ``sample`` reorders each module's block into the connector's grouped order and
    permutes ``_module_to_last_sampled_indices`` identically, so each priority lands on its own row.
(d) **Fresh rows.** ``add`` records the (episode, agent, timestep) of every agent step it indexed
    (``last_fresh``) and calls ``on_add`` (set by ``suPERDQN``), which is the SUPER hook: it runs
    right after DQN's ``self.local_replay_buffer.add(episodes)`` (ray/rllib/algorithms/dqn/dqn.py:668)
    and before any sampling of that training step.
(e) **Seeding.** The stock episode buffers draw from ``np.random.default_rng(None)``
    (utils/replay_buffers/episode_replay_buffer.py:173), ignoring ``config.seed``, and visit modules in
    ``set`` order (which follows PYTHONHASHSEED); this class takes a ``seed`` kwarg and samples modules
    in sorted order. The receivers' segment trees grow on demand (with bandwidth 1 a receiver indexes
    up to team-size times its own steps, more than the stock fixed-size trees hold).

Private RLlib internals used (hence ``ray[rllib]==2.60.0`` is pinned): the attributes in
``PRIVATE_ATTRIBUTES``, the methods in ``PRIVATE_METHODS``, the index-quadlet layout above, and the
learner connector's ``(multi_agent_episode_id, agent_id, module_id)`` batch key.
``check_rllib_internals()`` verifies them and raises ``RLlibInternalsChanged`` naming what moved;
``suPERDQN.setup`` calls it, and tests/core/test_rllib_buffer.py checks the behaviour end to end.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.signal
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.execution.segment_tree import MinSegmentTree, SumSegmentTree
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)

TESTED_RAY_VERSION = "2.60.0"
"""The ray[rllib] version whose private buffer internals this module was written against."""

BUFFER_PATH = "suPER.core.rllib_buffer.RelayMultiAgentPrioritizedEpisodeReplayBuffer"
"""Import path to put in ``replay_buffer_config["type"]``. RLlib needs a *string* there: it tests
``"EpisodeReplayBuffer" in type`` (ray/rllib/algorithms/algorithm.py:4475), which fails on a class."""

ROW_KEY = "suPER_row"
"""Extra column tagging fresh transitions so their TD errors can be matched back whatever the order."""

PRIVATE_ATTRIBUTES = (
    "episodes", "episode_id_to_index", "_num_episodes_evicted", "_module_to_indices", "_num_module_timesteps",
    "_module_to_max_priority", "_module_to_sum_segment", "_module_to_min_segment", "_module_to_free_nodes",
    "_module_to_tree_idx_to_sample_idx", "_module_to_last_sampled_indices", "_alpha", "rng",
)
"""Instance attributes of ``MultiAgentPrioritizedEpisodeReplayBuffer`` (2.60) that this class reads or writes."""

PRIVATE_METHODS: dict[str, tuple[str, ...]] = {
    "_add_new_module_indices": ("self", "ma_episode", "ma_episode_idx", "ma_episode_exists", "weight"),
    "_get_free_node_per_module_and_assign": ("self", "module_id", "sample_index", "weight"),
    "_evict_module_episodes": ("self", "ma_episode"),
    "_sample_independent": ("self", "batch_size_B", "batch_length_T", "n_step", "gamma", "include_infos",
                            "include_extra_model_outputs", "modules_to_sample", "beta"),
    "update_priorities": ("self", "priorities", "module_id"),
}
"""Methods this class overrides or calls, with the parameter names it relies on."""


class RLlibInternalsChanged(RuntimeError):
    """The installed RLlib no longer has the private internals SUPER's buffer relies on."""


def check_rllib_internals(check_version: bool = True) -> None:
    """Fail loudly if the RLlib internals this module relies on have moved.

    Args:
        check_version: also require ray == TESTED_RAY_VERSION.

    Raises:
        RLlibInternalsChanged: naming each missing attribute or changed signature, and what to do.
    """
    import ray
    from ray.rllib.connectors.connector_v2 import ConnectorV2
    from ray.rllib.core.learner.learner import Learner

    problems: list[str] = []
    if check_version and ray.__version__ != TESTED_RAY_VERSION:
        problems.append(f"ray is {ray.__version__}, this code was written against {TESTED_RAY_VERSION}")
    probe = MultiAgentPrioritizedEpisodeReplayBuffer(capacity=8)
    for name in PRIVATE_ATTRIBUTES:
        if not hasattr(probe, name):
            problems.append(f"MultiAgentPrioritizedEpisodeReplayBuffer has no attribute {name!r}")
    for name, params in PRIVATE_METHODS.items():
        fn = getattr(MultiAgentPrioritizedEpisodeReplayBuffer, name, None)
        if fn is None:
            problems.append(f"MultiAgentPrioritizedEpisodeReplayBuffer.{name} is gone")
            continue
        got = tuple(inspect.signature(fn).parameters)
        if got != params:
            problems.append(f"MultiAgentPrioritizedEpisodeReplayBuffer.{name}{got} != expected {params}")
    # the learner connector's per-row batch key (routing and the ordering fix both depend on it)
    probe_row = SingleAgentEpisode(agent_id="agent", module_id="module", multi_agent_episode_id="episode")
    batch: dict[str, Any] = {}
    ConnectorV2.add_batch_item(batch, "column", 0, probe_row)
    if list(batch.get("column", {})) != [("episode", "agent", "module")]:
        problems.append(f"ConnectorV2.add_batch_item keys rows by {list(batch.get('column', {}))}, expected "
                        "(multi_agent_episode_id, agent_id, module_id)")
    if "_learner_connector" not in inspect.getsource(Learner.build):
        problems.append("Learner.build no longer sets Learner._learner_connector (used for the fresh-TD pass)")
    if problems:
        raise RLlibInternalsChanged(
            "suPER's RLlib replay buffer relies on private internals of ray[rllib]=="
            f"{TESTED_RAY_VERSION} that changed:\n  - " + "\n  - ".join(problems)
            + "\nPin ray[rllib]==2.60.0 (pyproject.toml) or port suPER/core/rllib_buffer.py to the new "
            "internals (see docs/rllib.md, 'Private internals').")


class RelayMultiAgentPrioritizedEpisodeReplayBuffer(MultiAgentPrioritizedEpisodeReplayBuffer):
    """``MultiAgentPrioritizedEpisodeReplayBuffer`` + relayed pointers, routing, ordering fix, seeding.

    Args:
        capacity: env steps of stored episodes (as the stock buffer; relayed pointers are free).
        seed: seeds the sampling generator (the stock buffer is always unseeded).
        fix_priority_order: reorder sampled rows so learner TD errors land on their own rows
            (False reproduces the stock RLlib 2.60 behaviour, for tests).
        **kwargs: passed to the stock buffer (alpha, batch_size_B, ...; ``beta`` is ignored as there).
    """

    def __init__(self, capacity: int = 10000, *, seed: int | None = None, fix_priority_order: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(capacity=capacity, **kwargs)
        self.rng = np.random.default_rng(seed)
        self.fix_priority_order = fix_priority_order
        self._relayed_into: dict[str, dict[str, int]] = {}
        """multi-agent episode id -> receiver module -> relayed pointers into that episode"""
        self.last_fresh: dict[str, list[tuple[str, Any, int]]] = {}
        """module -> (multi-agent episode id, agent id, agent timestep) indexed by the last ``add``"""
        self.on_add: Callable[[RelayMultiAgentPrioritizedEpisodeReplayBuffer], None] | None = None
        """called at the end of every ``add`` (the SUPER hook; set by suPERDQN)"""

    # ---- add: remember the fresh rows, then call the hook

    def add(self, episodes: Any, weight: Any = None) -> None:
        """Add episode chunks as the stock buffer does, record their rows in ``last_fresh``, call ``on_add``."""
        self.last_fresh = {}
        super().add(episodes, weight=weight)
        if self.on_add is not None:
            self.on_add(self)

    def _add_new_module_indices(self, ma_episode: Any, ma_episode_idx: int, ma_episode_exists: bool = True,
                                weight: Any = None) -> None:
        before = {m: len(v) for m, v in self._module_to_indices.items()}
        super()._add_new_module_indices(ma_episode, ma_episode_idx, ma_episode_exists, weight)
        for module_id, entries in self._module_to_indices.items():
            new = entries[before.get(module_id, 0):]
            if new:
                self.last_fresh.setdefault(module_id, []).extend((ma_episode.id_, q[1], q[2]) for q in new)

    # ---- relayed pointers

    def add_relayed(self, receivers: Sequence[str], episode_ids: Sequence[str], agent_ids: Sequence[Any],
                    timesteps: Sequence[int], priorities: Sequence[float] | None = None) -> int:
        """Index K stored agent steps in the receivers' trees (pointers, no copies).

        Args:
            receivers: receiving module of each relayed row, [K].
            episode_ids: multi-agent episode id of the source step, [K].
            agent_ids: agent that took the source step, [K].
            timesteps: the agent's timestep within its single-agent episode, [K].
            priorities: initial priority of each pointer (before ^alpha); None = the receiver's current
                max priority (the PER convention for new data).

        Returns:
            Number of pointers added (rows whose source episode was already evicted are skipped).
        """
        added = 0
        for k, (recv, eps_id, agent_id, ts) in enumerate(zip(receivers, episode_ids, agent_ids, timesteps)):
            eps_idx = self.episode_id_to_index.get(eps_id)
            if eps_idx is None:
                continue
            entries = self._module_to_indices[recv]
            prio = self._module_to_max_priority[recv] if priorities is None else float(priorities[k])
            tree_idx = self._get_free_node_per_module_and_assign(recv, len(entries), prio)
            entries.append((eps_idx, agent_id, int(ts), tree_idx))
            self._num_module_timesteps[recv] += 1
            per_eps = self._relayed_into.setdefault(eps_id, {})
            per_eps[recv] = per_eps.get(recv, 0) + 1
            added += 1
        return added

    def num_relayed(self, module_id: str) -> int:
        """Relayed pointers currently indexed for ``module_id``."""
        return sum(d.get(module_id, 0) for d in self._relayed_into.values())

    def _evict_module_episodes(self, ma_episode: Any) -> None:
        super()._evict_module_episodes(ma_episode)
        # the stock loop already dropped the pointers into this episode; fix the receivers' counters
        for recv, n in self._relayed_into.pop(ma_episode.id_, {}).items():
            self._num_module_timesteps[recv] -= n

    def _get_free_node_per_module_and_assign(self, module_id: str, sample_index: int, weight: float = 1.0) -> int:
        if not self._module_to_free_nodes[module_id]:
            self._grow_module_trees(module_id)
        return super()._get_free_node_per_module_and_assign(module_id, sample_index, weight)

    def _grow_module_trees(self, module_id: str) -> None:
        """Double a module's segment trees (keeping every leaf) when its free nodes run out."""
        old_sum, old_min = self._module_to_sum_segment[module_id], self._module_to_min_segment[module_id]
        cap = old_sum.capacity
        new_sum, new_min = SumSegmentTree(2 * cap), MinSegmentTree(2 * cap)
        for new, old in ((new_sum, old_sum), (new_min, old_min)):
            v = new.value
            v[2 * cap: 3 * cap] = old.value[cap: 2 * cap]
            for i in range(2 * cap - 1, 0, -1):
                v[i] = new.operation(v[2 * i], v[2 * i + 1])
        self._module_to_sum_segment[module_id] = new_sum
        self._module_to_min_segment[module_id] = new_min
        free = self._module_to_free_nodes[module_id]
        self._module_to_free_nodes[module_id] = deque(list(free) + list(range(cap, 2 * cap)), maxlen=2 * cap)

    # ---- sample: route relayed rows to the receiver and fix the priority order

    def sample(self, num_items: int | None = None, *, batch_size_B: int | None = None,
               batch_length_T: int | None = None, n_step: Any = 1, gamma: float = 0.99,
               include_infos: bool = False, include_extra_model_outputs: bool = False,
               replay_mode: str = "independent", modules_to_sample: Any = None, beta: float = 0.0,
               **kwargs: Any) -> list[Any]:
        """Stock prioritized sampling (B rows per module), then routing and the ordering fix.

        Returns:
            1-step SingleAgentEpisodes, module by module; every row of module m's block has
            ``module_id == m`` and the block is in the learner connector's grouped order.
        """
        # sorted: the stock code iterates set(module ids), whose order follows PYTHONHASHSEED, so the
        # per-module draws of a seeded buffer would differ between processes
        modules = list(modules_to_sample) if modules_to_sample else sorted(self._module_to_indices.keys())
        rows = super().sample(num_items, batch_size_B=batch_size_B, batch_length_T=batch_length_T, n_step=n_step,
                              gamma=gamma, include_infos=include_infos,
                              include_extra_model_outputs=include_extra_model_outputs, replay_mode=replay_mode,
                              modules_to_sample=modules, beta=beta, **kwargs)
        if replay_mode != "independent":
            return rows
        size = num_items if num_items is not None else (batch_size_B or self.batch_size_B)
        if len(rows) != size * len(modules):
            raise RLlibInternalsChanged(f"expected {size} sampled rows per module for {len(modules)} modules, got "
                                        f"{len(rows)}; the stock _sample_independent changed")
        out: list[Any] = []
        for k, module_id in enumerate(modules):
            block = rows[k * size:(k + 1) * size]
            for row in block:
                row.module_id = module_id
            if self.fix_priority_order:
                block = self._learner_order(module_id, block)
            out.extend(block)
        return out

    def _learner_order(self, module_id: str, block: list[Any]) -> list[Any]:
        """Put a module's rows in the order the learner connector will batch them, indices alike."""
        keys = [(r.multi_agent_episode_id, r.agent_id, r.module_id) for r in block]
        first: dict[Any, int] = {}
        for key in keys:
            first.setdefault(key, len(first))
        perm = sorted(range(len(block)), key=lambda i: first[keys[i]])  # stable: keeps time order in a group
        last = self._module_to_last_sampled_indices[module_id]
        tail = last[len(last) - len(block):]
        last[len(last) - len(block):] = [tail[i] for i in perm]
        return [block[i] for i in perm]

    # ---- fresh transitions for the TD pass

    def transition_episode(self, episode_id: str, agent_id: Any, ts: int, module_id: str, n_step: int,
                           gamma: float, row: int) -> SingleAgentEpisode:
        """A stored agent step as the 1-step SingleAgentEpisode DQN learns from (as ``_sample_independent``).

        With ``n_step > 1`` a fresh step near the end of the stored chunk uses the steps available
        (``k = min(n_step, steps left)``, discounted by ``gamma**k`` in the target).

        Args:
            episode_id: multi-agent episode id; agent_id/ts: the agent step; module_id: module to label it with.
            n_step: n-step return length; gamma: discount.
            row: tag stored in the ``suPER_row`` column, to match the TD error back.
        """
        ma_episode = self.episodes[self.episode_id_to_index[episode_id] - self._num_episodes_evicted]
        sa = ma_episode.agent_episodes[agent_id]
        k = max(1, min(int(n_step), len(sa) - ts))
        raw = sa.get_rewards(slice(ts, ts + k))
        reward = scipy.signal.lfilter([1], [1, -gamma], raw[::-1], axis=0)[-1]
        last = ts + k >= len(sa)
        return SingleAgentEpisode(
            id_=sa.id_, agent_id=sa.agent_id, module_id=module_id, multi_agent_episode_id=ma_episode.id_,
            observations=[sa.get_observations(ts), sa.get_observations(ts + k)],
            observation_space=sa.observation_space, actions=[sa.get_actions(ts)], action_space=sa.action_space,
            rewards=[reward], terminated=last and sa.is_terminated, truncated=last and sa.is_truncated,
            extra_model_outputs={"weights": [1.0], "n_step": [k], ROW_KEY: [row]}, len_lookback_buffer=0,
            t_started=ts)

    def spaces_of(self, episode_id: str, agent_id: Any) -> tuple[Any, Any]:
        """(observation_space, action_space) of a stored agent."""
        ma_episode = self.episodes[self.episode_id_to_index[episode_id] - self._num_episodes_evicted]
        sa = ma_episode.agent_episodes[agent_id]
        return sa.observation_space, sa.action_space

    # ---- state

    def get_state(self) -> dict[str, Any]:
        """Stock state plus the relayed-pointer counters."""
        state = super().get_state()
        state["_suPER_relayed_into"] = {k: dict(v) for k, v in self._relayed_into.items()}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore; also repairs the stock set_state, which gives new modules a *sum* tree as min tree."""
        super().set_state(state)
        self._relayed_into = {k: dict(v) for k, v in state.get("_suPER_relayed_into", {}).items()}
        cap = int(2 ** np.ceil(np.log2(self.capacity)))
        self._module_to_min_segment.default_factory = lambda: MinSegmentTree(2 * cap)
