"""A rollout fragment's transitions and the rows they become in the replay buffers.

A fragment is ``T`` env steps of ``N`` learners, ``[T, N, ...]`` arrays (a pack stacks its runs' fragments as
``[R, T, N, ...]``). Its rows go to buffers twice: every valid row into its own agent's policy buffer
(``fragment_index``), and with SUPER the selected rows into the teammates' buffers (``relay_index``). Both
first make a ``RowIndex`` (which rows, for which policy, with which priority), so a pack can gather every
run's rows from its stacked fragment with one op per field (``RowIndex.join``); ``Rows`` are the gathered
transitions of one ``buffer.add`` call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suPER.arrays import concatenate
from suPER.core.relay import InsertionPolicy, Relay, RelayPlan
from suPER.replay import MultiAgentPER
from suPER.replay.torch_per import TorchPER


@dataclass
class Fragment:
    """One rollout fragment's transitions, [T, N, ...]; ``valid_TN`` marks learners that acted."""

    obs_TNO: Any
    """float32 [T, N, *O]: a numpy array, or a tensor on a packed run's device (``empty(device=...)``)"""
    next_obs_TNO: Any
    action_TN: np.ndarray
    reward_TN: np.ndarray
    done_TN: np.ndarray
    valid_TN: np.ndarray

    @classmethod
    def empty(cls, steps: int, n_agents: int, obs_shape: tuple[int, ...], device: Any = None) -> Fragment:
        """Preallocated zero arrays (reused every fragment); with ``device``, the observations are float32 tensors
        there (a packed run whose vectorized env and replay share the device), the rest stays numpy."""
        obs: Any = np.zeros((steps, n_agents, *obs_shape), dtype=np.float32)
        next_obs: Any = np.zeros_like(obs)
        if device is not None:
            obs = torch.zeros((steps, n_agents, *obs_shape), device=device)
            next_obs = torch.zeros_like(obs)
        return cls(obs, next_obs, np.zeros((steps, n_agents), dtype=np.int64),
                   np.zeros((steps, n_agents), dtype=np.float32), np.zeros((steps, n_agents), dtype=np.float32),
                   np.zeros((steps, n_agents), dtype=bool))

    def grouped(self, n_policies: int, runs: bool = False) -> list[np.ndarray]:
        """(obs, action, reward, next_obs, done) as [P, N/P * T, ...] for one batched TD pass; with ``runs``, of a
        pack's stacked fragment ([R, T, N, ...]) as [R * P, N/P * T, ...], equal to concatenating each run's."""
        arrays = (self.obs_TNO, self.action_TN, self.reward_TN, self.next_obs_TNO, self.done_TN)
        if runs:
            return [x.swapaxes(1, 2).reshape(x.shape[0] * n_policies, -1, *x.shape[3:]) for x in arrays]
        return [x.swapaxes(0, 1).reshape(n_policies, -1, *x.shape[2:]) for x in arrays]

    def rows(self, *index_K: np.ndarray) -> tuple[np.ndarray, ...]:
        """(obs, action, reward, next_obs, done) of the rows ``(t_K, n_K)``; of a pack's stacked fragment (fields
        ``[R, T, N, ...]``, ``_PackState``) the rows ``(r_K, t_K, n_K)``, one gather per field for all runs."""
        return (self.obs_TNO[index_K], self.action_TN[index_K], self.reward_TN[index_K],
                self.next_obs_TNO[index_K], self.done_TN[index_K])


@dataclass
class Rows:
    """Rows for one ``buffer.add`` call: ``K`` transitions, each with its policy (and optional priority, stream)."""

    policy_K: np.ndarray
    fields: tuple[Any, ...]
    """(obs, action, reward, next_obs, done), each with leading dim K (observations may be device tensors)"""
    priority_K: np.ndarray | None
    stream_K: np.ndarray

    def add_to(self, buffer: MultiAgentPER | TorchPER) -> None:
        buffer.add(self.policy_K, *self.fields, priority_K=self.priority_K, stream_K=self.stream_K)

    @staticmethod
    def join(parts: list[Rows], policy_offsets: list[int]) -> Rows:
        """One add of several runs' rows into a buffer holding their policies side by side (run i's policy p is
        ``policy_offsets[i] + p``). Each policy receives its rows in the same order as from its own add.

        Raises:
            ValueError: some parts carry priorities and others not (one add takes all or none).
        """
        return Rows(np.concatenate([p.policy_K + off for p, off in zip(parts, policy_offsets)]),
                    tuple(concatenate([p.fields[i] for p in parts]) for i in range(5)),
                    _join_priorities([p.priority_K for p in parts]), np.concatenate([p.stream_K for p in parts]))


def _join_priorities(priorities: list[np.ndarray | None]) -> np.ndarray | None:
    """The insertion priorities of one joined add: all None (the buffer's max) or all given.

    Raises:
        ValueError: some parts carry priorities and others not (one add takes all or none).
    """
    if len({p is None for p in priorities}) > 1:
        raise ValueError("cannot join rows with and without insertion priorities in one add")
    return None if priorities[0] is None else np.concatenate(priorities)


@dataclass
class RowIndex:
    """Which rows of a fragment go to which buffer: ``Rows`` before the observations are gathered, so a pack can
    gather every run's rows from its stacked fragment at once (``join``)."""

    policy_K: np.ndarray
    t_K: np.ndarray
    n_K: np.ndarray
    priority_K: np.ndarray | None
    stream_K: np.ndarray

    def rows(self, frag: Fragment) -> Rows:
        """The rows themselves, from the fragment the indices were made on."""
        return Rows(self.policy_K, frag.rows(self.t_K, self.n_K), self.priority_K, self.stream_K)

    @staticmethod
    def join(parts: Mapping[int, RowIndex], stacked: Fragment, n_pol: int) -> Rows:
        """``Rows.join`` of runs' rows gathered from the pack's stacked fragment (run r's fragment is ``stacked``'s
        ``[r]``, its policy p the buffer's ``r * n_pol + p``): one gather per field for all runs, the same rows in
        the same order as joining each run's ``rows``.

        Raises:
            ValueError: some parts carry priorities and others not (one add takes all or none).
        """
        ix = list(parts.values())
        priority_K = _join_priorities([p.priority_K for p in ix])  # refuses a mix before anything is gathered
        r_K = np.concatenate([np.full(len(p.t_K), r, dtype=np.int64) for r, p in parts.items()])
        t_K, n_K = np.concatenate([p.t_K for p in ix]), np.concatenate([p.n_K for p in ix])
        return Rows(np.concatenate([p.policy_K + r * n_pol for r, p in parts.items()]), stacked.rows(r_K, t_K, n_K),
                    priority_K, np.concatenate([p.stream_K for p in ix]))


def fragment_index(frag: Fragment, policy_of_agent_N: np.ndarray, legacy_td_NT: np.ndarray | None,
                   insertion: InsertionPolicy) -> RowIndex:
    """Every valid row of ``frag``, for its agent's policy buffer.

    Priority: the policy's running max (PER convention), or with ``legacy_td_NT`` given the original's
    RLlib 2.1 rule -- 1.0 without sender-side prioritization, else the sender's ``|td| + eps`` of that
    agent's first row of the fragment for all of its rows (REFERENCE 1.8).
    """
    t_K, n_K = np.nonzero(frag.valid_TN)
    priority = None
    if legacy_td_NT is not None:
        priority = (legacy_td_NT[n_K, frag.valid_TN.argmax(axis=0)[n_K]] + insertion.eps if insertion.sender_side
                    else np.ones(len(n_K)))
    return RowIndex(policy_of_agent_N[n_K], t_K, n_K, priority, n_K)


def fragment_rows(frag: Fragment, policy_of_agent_N: np.ndarray, legacy_td_NT: np.ndarray | None,
                  insertion: InsertionPolicy) -> Rows:
    """The rows of ``fragment_index``."""
    return fragment_index(frag, policy_of_agent_N, legacy_td_NT, insertion).rows(frag)


def store_fragment(buffer: MultiAgentPER | TorchPER, frag: Fragment, policy_of_agent_N: np.ndarray,
                   legacy_td_NT: np.ndarray | None, insertion: InsertionPolicy) -> None:
    """Add every valid row of ``frag`` to its agent's policy buffer (``fragment_rows``)."""
    fragment_rows(frag, policy_of_agent_N, legacy_td_NT, insertion).add_to(buffer)


def relay_index(frag: Fragment, relay: Relay, td_NT: np.ndarray,
                plan: RelayPlan | None = None) -> tuple[RowIndex | None, RelayPlan]:
    """SUPER: select rows of ``frag`` by |TD| (``relay.plan``: advances its windows and generator; or the ``plan``
    already made, e.g. by ``relay.plan_many`` for a pack) and the copies for the receivers' buffers
    (``relay.insertion`` priorities); None when nothing is relayed."""
    plan = relay.plan(td_NT, frag.valid_TN.T) if plan is None else plan
    if not plan.n_relayed:
        return None, plan
    s_K, r_K = plan.sender_K, plan.row_K
    return RowIndex(plan.receiver_K, r_K, s_K, relay.insertion.priorities(td_NT, plan), s_K), plan


def relay_rows(frag: Fragment, relay: Relay, td_NT: np.ndarray,
               plan: RelayPlan | None = None) -> tuple[Rows | None, RelayPlan]:
    """The rows of ``relay_index``."""
    index, plan = relay_index(frag, relay, td_NT, plan)
    return (None if index is None else index.rows(frag)), plan


def relay_fragment(buffer: MultiAgentPER | TorchPER, frag: Fragment, relay: Relay, td_NT: np.ndarray) -> RelayPlan:
    """SUPER: select rows of ``frag`` by |TD| and add copies to the receivers' buffers (``relay_rows``)."""
    rows, plan = relay_rows(frag, relay, td_NT)
    if rows is not None:
        rows.add_to(buffer)
    return plan
