"""Independent (double/dueling) DQN for N learners, batched across agents, with optional SUPER relay.

Read top to bottom: seed -> envs -> nets -> buffers -> relay -> resume -> loop -> save. One loop
iteration is one rollout fragment of ``rollout_fragment_length`` env steps, in the original's order
(REFERENCE 1.3): act, step, record (for each env step), then store, relay, learn, sync target,
evaluate/log, checkpoint.

Envs, the evaluation schedule, metrics.csv, checkpoints and resume come from ``suPER.loop.RunLoop``
(shared with the baseline trainers). At the end of every fragment in which an evaluation ran (and after
the step-0 evaluation) the trainer checkpoints ``latest.pt``: networks, target, optimizer, the replay
buffers (unless ``run.checkpoint_replay`` is false), the numpy generators of exploration, replay sampling
and the relay, the relay windows and counters (the loop adds its own counters and torch's RNG). When the
run folder already holds ``latest.pt``, ``train`` continues from it. Not restored: the environments'
internal state, so a resumed run is a valid continuation with the same budget, evaluation schedule and
update count, but not bit-identical to an uninterrupted run.

All N learners' Q-networks are one ``BatchedQNet`` (P = N policies, or P = 1 with parameter
sharing), so acting, TD computation and the update are one batched call each. Replay is one
``CompactPER`` (``run.replay_layout: plain``: ``MultiAgentPER``) holding P independent prioritized buffers;
rows carry their agent (own rows) or sender (relayed rows) as stream, so a row's next_obs can be the next
row's obs.

Loss per policy p (REFERENCE 3.3): ``L_p = mean_b w_b * huber(td_b)`` with
``td = Q(o, a) - [r + gamma * (1 - d) * Q_target(o', a*)]``, ``a* = argmax Q(o')`` (double-Q) or
``argmax Q_target(o')``; the policies' losses are summed (Adam is elementwise, so this equals P
separate optimisers) and each policy's gradient is clipped to norm ``grad_clip`` on its own. The formulas
are pure functions in ``suPER.native.dqn_loss`` (TD target, weighted loss, priorities).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suPER.arrays import concatenate
from suPER.config import ExperimentConfig
from suPER.core.relay import InsertionPolicy, Relay, RelayPlan
from suPER.envs import env_record
from suPER.loop import ProgressFn, RunLoop, to_numpy
from suPER.models import BatchedQNet, clip_grad_norm_per_policy
from suPER.native.dqn_loss import priorities, q_of_actions, td_target, weighted_loss
from suPER.replay import CompactPER, MultiAgentPER, load_replay_state
from suPER.replay.torch_per import TorchPER
from suPER.runs import Logger, RunFolder, Summary
from suPER.seeds import EXPLORATION_SEED_OFFSET, REPLAY_SEED_OFFSET


def train(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
          progress: ProgressFn | None = None) -> Summary:
    """Train independent DQN learners (plus SUPER relay when ``cfg.relay.enabled``).

    Args:
        cfg: validated experiment config.
        folder: run folder to write metrics.csv and checkpoints into.
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: optional per-fragment callback.

    Returns:
        Summary of the run.
    """
    d, rc, run = cfg.dqn, cfg.relay, cfg.run
    # ---- seed, envs, evaluation schedule, metrics and checkpoints: the shared RunLoop
    loop = RunLoop(cfg, folder, logger, progress)
    device, seed, spec, timer = loop.device, run.seed, loop.spec, loop.timer
    env = loop.envs[0]
    rng = np.random.default_rng(seed + EXPLORATION_SEED_OFFSET)  # exploration draws
    n_agents, obs_shape, n_actions = spec.n_agents, spec.obs_shape, spec.n_actions
    n_pol = 1 if d.parameter_sharing else n_agents
    policy_of_agent_N = np.zeros(n_agents, dtype=np.int64) if d.parameter_sharing else np.arange(n_agents)

    # ---- networks: online + target, one batched module for all policies
    q_net = BatchedQNet(n_pol, obs_shape, n_actions, body=d.model, dueling=d.dueling, hiddens=d.hiddens).to(device)
    if d.init_from:  # warm start (population best responses): the team file's networks, learner p = file agent p
        q_net.load_state_dict(load_init_team(d.init_from, q_net))
    target_net = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=d.lr, eps=d.adam_eps, fused=True)  # 10x faster step on CPU

    # ---- replay: P independent prioritized buffers; with sharing one buffer gets N x batch rows (dqn.shared_batch)
    # (compact layout: next_obs linked to the same agent's next row, streams = agents; identical samples)
    per_kwargs = dict(alpha=d.per_alpha, beta=d.per_beta, eps=d.per_eps,
                      rng=np.random.default_rng(seed + REPLAY_SEED_OFFSET))
    buffer = (CompactPER(n_pol, d.buffer_size, obs_shape, spec.obs_dtype, n_streams=n_agents, **per_kwargs)
              if run.replay_layout == "compact" else MultiAgentPER(n_pol, d.buffer_size, obs_shape, spec.obs_dtype,
                                                                   **per_kwargs))
    batch_per_policy = d.rows_per_update(n_agents, len(spec.opponent_ids))

    # ---- relay (SUPER): sharing is between policies, so parameter sharing makes it a no-op
    relay = None
    sender_side = env_record(spec.name).sender_side_priorities
    if rc.enabled:
        relay = Relay.from_config(rc, [spec.learner_ids[i] for i in range(n_pol)] if n_pol > 1 else [spec.team],
                                  seed=seed, per_eps=d.per_eps, sender_side=sender_side)
        if not relay.active:
            print("note: SUPER relay is a no-op here (fewer than two sharing policies, e.g. parameter sharing)")
    insertion = relay.insertion if relay is not None else InsertionPolicy.from_config(rc, d.per_eps, sender_side)
    legacy_priorities = insertion.rule == "legacy"

    def q_values(net: BatchedQNet, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """obs [P, B, *O] (any numeric dtype) -> q [P, B, A] on ``device``."""
        return net(torch.as_tensor(obs, device=device).float())

    @torch.no_grad()
    def greedy(obs_NO: np.ndarray, alive_N: np.ndarray | None = None) -> np.ndarray:
        """Greedy action per learner: one batched forward, obs grouped by policy."""
        q_PBA = q_values(q_net, obs_NO.reshape(n_pol, n_agents // n_pol, *obs_shape))
        return q_PBA.argmax(-1).reshape(n_agents).cpu().numpy()

    @torch.no_grad()
    def greedy_batch(obs_ENO: np.ndarray | torch.Tensor, alive_EN: np.ndarray | None = None) -> np.ndarray:
        """Greedy actions [E, N] of E games (evaluation): one forward, game e's learner n in policy n // G's batch."""
        e, g = obs_ENO.shape[0], n_agents // n_pol
        obs_PBO = torch.as_tensor(obs_ENO, device=device).reshape(e, n_pol, g, *obs_shape).transpose(0, 1)
        q_PBA = q_values(q_net, obs_PBO.reshape(n_pol, e * g, *obs_shape))
        return q_PBA.argmax(-1).reshape(n_pol, e, g).transpose(0, 1).reshape(e, n_agents).cpu().numpy()

    def on_device(x: np.ndarray) -> torch.Tensor:
        """A numpy batch column as a tensor on ``device``."""
        return torch.as_tensor(x, device=device)

    @torch.no_grad()
    def fresh_td_PB(obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        """|TD| of [P, B] fresh transitions with the current nets (relay, legacy priorities): one online pass
        covers o and o'."""
        n = obs.shape[1]
        q_both_PBA = q_values(q_net, np.concatenate([obs, next_obs], axis=1))
        y_PB = td_target(on_device(rewards), on_device(dones), q_values(target_net, next_obs),
                         q_both_PBA[:, n:] if d.double_q else None, d.gamma)
        return priorities(q_of_actions(q_both_PBA[:, :n], on_device(actions)) - y_PB)

    # ---- bookkeeping
    updates, last_target_sync = 0, 0
    learn_after = d.learning_starts  # updates run while env_steps > learn_after (raised on resume without replay)
    losses: list[float] = []
    relay_fraction: list[np.ndarray] = []
    relay_received = np.zeros(n_agents, dtype=np.int64)
    ep_return_N = np.zeros(n_agents)
    T = d.rollout_fragment_length
    frag = Fragment.empty(T, n_agents, obs_shape)

    def eval_columns() -> dict[str, Any]:
        """This trainer's metrics.csv columns (the loop adds env_steps, returns, throughput, wall time)."""
        row: dict[str, Any] = {"loss": float(np.mean(losses)) if losses else float("nan"),
                               "epsilon": d.epsilon(loop.env_steps), "updates": updates}
        if relay is not None:
            frac_N = np.mean(relay_fraction, axis=0) if relay_fraction else np.zeros(n_pol)
            row["fraction_shared_mean"] = float(frac_N[relay.participants_N].mean()) if relay.active else 0.0
            row.update({f"fraction_shared_{a}": float(f) for a, f in zip(relay.agent_ids, frac_N)})
            row["relayed_rows_total"] = int(relay_received.sum())
        losses.clear()
        relay_fraction.clear()
        return row

    def trainer_state() -> dict[str, Any]:
        """Everything besides the loop's counters that the loop needs to continue (see the module docstring)."""
        return {
            "updates": updates, "last_target_sync": last_target_sync, "learn_after": learn_after,
            "q_net": q_net.state_dict(), "target_net": target_net.state_dict(), "optimizer": optimizer.state_dict(),
            "replay": buffer.state_dict(copy=False) if run.checkpoint_replay else None,
            "rng": {"explore": rng.bit_generator.state, "replay": buffer.rng.bit_generator.state},
            "relay": relay.state_dict() if relay is not None else None,
            "relay_received": relay_received, "relay_fraction": list(relay_fraction), "losses": list(losses),
        }

    # ---- resume: continue from this folder's latest checkpoint, if there is one
    saved = loop.restore()
    if saved is not None:
        state = to_numpy(saved, keep=("q_net", "target_net", "optimizer"))
        updates, last_target_sync, learn_after = state["updates"], state["last_target_sync"], state["learn_after"]
        q_net.load_state_dict(state["q_net"])
        target_net.load_state_dict(state["target_net"])
        optimizer.load_state_dict(state["optimizer"])
        if state["replay"] is not None:
            load_replay_state(buffer, state["replay"])  # either layout's checkpoint
        else:  # refill the empty buffers before learning again
            learn_after = loop.env_steps + d.learning_starts
        rng.bit_generator.state = state["rng"]["explore"]
        buffer.rng.bit_generator.state = state["rng"]["replay"]
        if relay is not None and state["relay"] is not None:
            relay.load_state_dict(state["relay"])
        relay_received[:] = state["relay_received"]
        relay_fraction[:] = list(state["relay_fraction"])
        losses[:] = state["losses"]
    obs_NO = loop.reset_envs()[0]  # env state is not checkpointed: a resumed run starts fresh episodes
    if saved is None:
        loop.evaluate(greedy_batch, eval_columns())  # step 0: the untrained greedy policy
        loop.save(trainer_state())

    # ---- loop: one iteration = one rollout fragment
    alive_N = np.ones(n_agents, dtype=bool)
    while not loop.done:
        frag.valid_TN[:] = False
        for t in range(T):
            if loop.done:
                break
            # act: epsilon-greedy with epsilon scheduled by env steps
            with timer("act"):
                actions_N = greedy(obs_NO)
                explore_N = rng.random(n_agents) < d.epsilon(loop.env_steps)
                actions_N = np.where(explore_N, rng.integers(0, n_actions, n_agents), actions_N)
            # step
            with timer("env"):
                res = env.step(actions_N)
            # record the transition of every learner that acted
            terminal_N = res.terminated_N | (res.truncated_N & cfg.env.truncation_is_terminal)
            frag.obs_TNO[t], frag.next_obs_TNO[t], frag.action_TN[t] = obs_NO, res.obs_NO, actions_N
            frag.reward_TN[t], frag.done_TN[t], frag.valid_TN[t] = res.reward_N, terminal_N, alive_N
            ep_return_N += np.where(alive_N, res.reward_N, 0.0)
            if loop.tick():  # evaluate at exact multiples of the interval, on its own env
                loop.evaluate(greedy_batch, eval_columns())
            if res.episode_over:
                loop.episode_finished(ep_return_N.sum())
                ep_return_N[:] = 0.0
                obs_NO, alive_N = env.reset(), np.ones(n_agents, dtype=bool)
            else:
                obs_NO, alive_N = res.obs_NO, res.alive_N

        # TD of the fresh rows with each sender's pre-update nets (for the relay, and legacy priorities)
        td_NT = None
        if (relay is not None and relay.active) or (legacy_priorities and insertion.sender_side):
            with timer("relay"):
                td_NT = fresh_td_PB(*frag.grouped(n_pol)).reshape(n_agents, T).cpu().numpy()

        # store: the fragment's own rows go to each agent's policy buffer
        with timer("store"):
            store_fragment(buffer, frag, policy_of_agent_N, td_NT if legacy_priorities else None, insertion)

        # relay: select surprising fresh rows and copy them into teammates' buffers
        if relay is not None and relay.active and td_NT is not None:
            with timer("relay"):
                plan = relay_fragment(buffer, frag, relay, td_NT)
                relay_fraction.append(plan.fraction_N)
                relay_received += plan.received_N

        # learn: one gradient step of every policy on its own prioritized batch
        if loop.env_steps > learn_after:
            with timer("learn"):
                b = buffer.sample(batch_per_policy)
                q_sa_PB = q_of_actions(q_values(q_net, b.obs), on_device(b.actions))
                with torch.no_grad():  # the target is a constant: gradients flow through Q(o, a) only
                    q_next_target_PBA = q_values(target_net, b.next_obs)
                    q_next_online_PBA = q_values(q_net, b.next_obs) if d.double_q else None
                    y_PB = td_target(on_device(b.rewards), on_device(b.dones), q_next_target_PBA,
                                     q_next_online_PBA, d.gamma)
                td_PB = q_sa_PB - y_PB
                loss_P = weighted_loss(td_PB, on_device(b.weights), "huber")
                optimizer.zero_grad(set_to_none=True)
                loss_P.sum().backward()
                clip_grad_norm_per_policy(q_net, d.grad_clip)
                optimizer.step()
                buffer.update_priorities(b.indices, priorities(td_PB).cpu().numpy())
                losses.append(float(loss_P.detach().mean()))
                updates += 1
            # sync target: hard copy every target_update_freq env steps (first sync at the first update)
            if loop.env_steps - last_target_sync >= d.target_update_freq or updates == 1:
                target_net.load_state_dict(q_net.state_dict())
                last_target_sync = loop.env_steps

        # checkpoint: after every fragment that evaluated, so a resumed run logs each evaluation once
        if loop.checkpoint_due:
            loop.save(trainer_state())
        loop.report_progress()

    # ---- final evaluation (unless the last step evaluated) and final.pt (networks, optimizer, counters)
    return loop.finish(greedy_batch, {"q_net": q_net.state_dict(), "target_net": target_net.state_dict(),
                                "optimizer": optimizer.state_dict(), "updates": updates}, eval_columns())


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


def load_init_team(path: str, q_net: BatchedQNet) -> dict[str, torch.Tensor]:
    """The state dict of team file ``path`` for ``q_net`` (``dqn.init_from``); ConfigError when it does not fit."""
    from suPER.config import ConfigError
    from suPER.opponents import load_team

    net, meta = load_team(path)
    theirs = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    mine = {k: tuple(v.shape) for k, v in q_net.state_dict().items()}
    if theirs != mine:
        raise ConfigError(f"dqn.init_from: {path} holds {net.n_policies} networks of obs {meta.obs_shape}, "
                          f"{meta.n_actions} actions, hiddens {meta.hiddens}, which do not fit this run's "
                          f"{q_net.n_policies} policies")
    return {k: v.to(next(q_net.parameters()).device) for k, v in net.state_dict().items()}


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
