"""One DQN run: its own state and its per-run phases, for the single-run trainer and the pack alike.

``suPER.native.dqn.train`` trains one ``DQNRun`` with its own networks; ``suPER.native.packed.train_pack`` trains
R of them with one set of packed networks. Everything a run owns lives here once: its loop (envs, evaluation
schedule, metrics, checkpoints), exploration generator, replay buffers, relay and counters; its epsilon-greedy
draws, transition record, store-and-relay phase, metrics columns, target-sync schedule and checkpoint layout. The
network passes both trainers make are here too, as functions of the networks (``greedy_actions``,
``fresh_abs_td``, ``dqn_update``), so a change to the update, the metrics or the checkpoint is made in one place.

Randomness, in the order ``build`` draws it (so a run packed or alone takes the same draws): the loop seeds python,
numpy and torch from the run seed; the initial networks (torch); exploration ``default_rng(seed +
EXPLORATION_SEED_OFFSET)``; replay sampling ``default_rng(seed + REPLAY_SEED_OFFSET)``; the relay its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from suPER.arrays import concatenate
from suPER.config import ConfigError, ExperimentConfig
from suPER.core.relay import InsertionPolicy, Relay, RelayPlan, RelayTally
from suPER.envs import EnvSpec, StepResult, env_record
from suPER.loop import ProgressFn, RunLoop, to_numpy
from suPER.models import BatchedQNet, clip_grad_norm_per_policy
from suPER.native.dqn_loss import priorities, q_of_actions, td_target, weighted_loss
from suPER.native.fragment import Fragment, relay_fragment, store_fragment
from suPER.replay import CompactPER, MultiAgentPER, load_replay_state
from suPER.replay.torch_per import TorchPER
from suPER.runs import Logger, RunFolder
from suPER.seeds import EXPLORATION_SEED_OFFSET, REPLAY_SEED_OFFSET

NETWORK_KEYS = ("q_net", "target_net", "optimizer")
"""the checkpoint entries a trainer fills from its networks (the rest is the run's: ``DQNRun.checkpoint``)"""


@dataclass
class DQNRun:
    """One DQN run's own state (see the module docstring); ``failure`` / ``summary`` once it stopped."""

    cfg: ExperimentConfig
    loop: RunLoop
    rng: np.random.Generator
    """exploration draws"""
    buffer: MultiAgentPER | TorchPER
    relay: Relay | None
    insertion: InsertionPolicy
    frag: Fragment
    init_net: BatchedQNet
    """the run's initial networks (on the CPU; ``dqn.init_from``'s team when given)"""
    n_pol: int
    """policies: the learners, or 1 with parameter sharing"""
    updates: int = 0
    last_target_sync: int = 0
    learn_after: int = 0
    """updates run while env_steps > learn_after (raised on a resume without replay, to refill the buffers)"""
    losses: list[float] = field(default_factory=list)
    relay_tally: RelayTally = field(default_factory=lambda: RelayTally.zeros(0))
    """rows each sender relayed and had since the last evaluation"""
    relay_received: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ep_return_N: np.ndarray = field(default_factory=lambda: np.zeros(0))
    obs_NO: Any = None
    alive_N: np.ndarray | None = None
    failure: BaseException | None = None
    summary: Any = None

    @classmethod
    def build(cls, cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
              progress: ProgressFn | None = None, *, allow_eval_parallel: bool = True,
              make_buffer: Callable[[int, RunLoop], MultiAgentPER | TorchPER] | None = None,
              relay_device: torch.device | None = None) -> DQNRun:
        """The run's loop, initial networks, buffers and relay, drawing its randomness in the module's order.

        Args:
            allow_eval_parallel: False evaluates in-process (a pack's runs checkpoint in lockstep).
            make_buffer: ``(n_pol, loop) -> buffer``, the run's replay when the caller makes it (a pack's device
                buffers); None: ``replay_buffer`` on the host, in ``run.replay_layout``.
            relay_device: keep the relay windows there (a pack's device replay).
        """
        d, rc, seed = cfg.dqn, cfg.relay, cfg.run.seed
        loop = RunLoop(cfg, folder, logger, progress, allow_eval_parallel=allow_eval_parallel)  # seeds everything
        spec = loop.spec
        n_agents, n_pol = spec.n_agents, 1 if d.parameter_sharing else spec.n_agents
        init_net = BatchedQNet(n_pol, spec.obs_shape, spec.n_actions, body=d.model, dueling=d.dueling,
                               hiddens=d.hiddens, obs_scale=spec.obs_scale)
        if d.init_from:  # warm start (population best responses): the team file's networks, learner p = file agent p
            init_net.load_state_dict(load_init_team(d.init_from, init_net))
        rng = np.random.default_rng(seed + EXPLORATION_SEED_OFFSET)
        buffer = (make_buffer(n_pol, loop) if make_buffer is not None
                  else replay_buffer(cfg, n_agents, n_pol, spec))
        # relay (SUPER): sharing is between policies, so parameter sharing makes it a no-op
        relay = None
        sender_side = env_record(spec.name).sender_side_priorities
        if rc.enabled:
            relay = Relay.from_config(rc, [spec.learner_ids[i] for i in range(n_pol)] if n_pol > 1 else [spec.team],
                                      seed=seed, per_eps=d.per_eps, sender_side=sender_side, device=relay_device)
            if not relay.active:
                print(f"{cfg.run_name}: note: SUPER relay is a no-op here (fewer than two sharing policies, e.g. "
                      f"parameter sharing)")
        insertion = relay.insertion if relay is not None else InsertionPolicy.from_config(rc, d.per_eps, sender_side)
        return cls(cfg=cfg, loop=loop, rng=rng, buffer=buffer, relay=relay, insertion=insertion,
                   frag=Fragment.empty(d.rollout_fragment_length, n_agents, spec.obs_shape), init_net=init_net,
                   n_pol=n_pol, learn_after=d.learning_starts, relay_received=np.zeros(n_agents, dtype=np.int64),
                   relay_tally=RelayTally.zeros(n_agents), ep_return_N=np.zeros(n_agents))

    @property
    def active(self) -> bool:
        """Neither failed nor finished."""
        return self.failure is None and self.summary is None

    @property
    def policy_of_agent_N(self) -> np.ndarray:
        """Each learner's policy: its own, or 0 for all with parameter sharing."""
        n_agents = self.loop.spec.n_agents
        return np.zeros(n_agents, dtype=np.int64) if self.n_pol == 1 else np.arange(n_agents)

    @property
    def needs_fresh_td(self) -> bool:
        """Whether the fragment's rows need their |TD| before they are stored: for the relay's selection, or for
        the original's sender-side insertion priorities (``insertion.rule == "legacy"``)."""
        return ((self.relay is not None and self.relay.active)
                or (self.insertion.rule == "legacy" and self.insertion.sender_side))

    # ---- acting and recording (each env step)

    def explore(self, greedy_N: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions: each learner explores with probability epsilon(env steps), uniformly."""
        n_agents = len(greedy_N)
        explore_N = self.rng.random(n_agents) < self.cfg.dqn.epsilon(self.loop.env_steps)
        return np.where(explore_N, self.rng.integers(0, self.loop.spec.n_actions, n_agents), greedy_N)

    def record(self, t: int, actions_N: np.ndarray, res: StepResult, evaluate: Any, reset: Any) -> None:
        """Write step ``t``'s transition of every learner that acted into the fragment, evaluate when due (at exact
        multiples of the interval, on its own env: ``evaluate()``), and start the next episode when this one ended
        (``reset() -> (obs_NO, alive_N)``: the env's mask of the learners that start it, so one that joins later
        records nothing before it does). A step that ends by truncation bootstraps unless
        ``env.truncation_is_terminal``."""
        loop, frag = self.loop, self.frag
        assert self.alive_N is not None
        terminal_N = res.terminated_N | (res.truncated_N & self.cfg.env.truncation_is_terminal)
        frag.obs_TNO[t], frag.next_obs_TNO[t], frag.action_TN[t] = self.obs_NO, res.obs_NO, actions_N
        frag.reward_TN[t], frag.done_TN[t], frag.valid_TN[t] = res.reward_N, terminal_N, self.alive_N
        self.ep_return_N += np.where(self.alive_N, res.reward_N, 0.0)
        if loop.tick():
            evaluate()
        if res.episode_over:
            loop.episode_finished(self.ep_return_N.sum())
            self.ep_return_N[:] = 0.0
            self.obs_NO, self.alive_N = reset()
        else:
            self.obs_NO, self.alive_N = res.obs_NO, res.alive_N

    # ---- after each fragment

    def store_and_relay(self, td_NT: Any) -> None:
        """Store the fragment's own rows in their agents' policy buffers (with the original's insertion priorities
        from ``td_NT`` under ``insertion.rule == "legacy"``), then relay the surprising ones into teammates'."""
        with self.loop.timer("store"):
            store_fragment(self.buffer, self.frag, self.policy_of_agent_N,
                           td_NT if self.insertion.rule == "legacy" else None, self.insertion)
        if self.relay is not None and self.relay.active and td_NT is not None:
            with self.loop.timer("relay"):
                self.note_relay(relay_fragment(self.buffer, self.frag, self.relay, td_NT))

    def note_relay(self, plan: RelayPlan) -> None:
        """Count one fragment's relay for the metrics (fraction each sender shared, rows each receiver got)."""
        self.relay_tally.add(plan)
        self.relay_received += plan.received_N

    def note_update(self, loss: float) -> bool:
        """Count one gradient step; True when the target network is to be synced now (a hard copy every
        ``target_update_freq`` env steps, the first at the first update), which it records as done."""
        self.losses.append(loss)
        self.updates += 1
        if self.loop.env_steps - self.last_target_sync >= self.cfg.dqn.target_update_freq or self.updates == 1:
            self.last_target_sync = self.loop.env_steps
            return True
        return False

    def eval_columns(self) -> dict[str, Any]:
        """The trainer's metrics.csv columns since the last evaluation (the loop adds env_steps, returns,
        throughput, wall time): mean loss, epsilon, updates, and with SUPER the fraction of fresh rows each sender
        relayed and the rows relayed in total."""
        row: dict[str, Any] = {"loss": float(np.mean(self.losses)) if self.losses else float("nan"),
                               "epsilon": self.cfg.dqn.epsilon(self.loop.env_steps), "updates": self.updates}
        relay = self.relay
        if relay is not None:
            tally = self.relay_tally
            row["fraction_shared_mean"] = tally.mean_fraction(relay.participants_N) if relay.active else 0.0
            row.update({f"fraction_shared_{a}": float(f) for a, f in zip(relay.agent_ids, tally.fraction_N())})
            row["relayed_rows_total"] = int(self.relay_received.sum())
        self.losses.clear()
        self.relay_tally.clear()
        return row

    # ---- checkpoints

    def checkpoint(self, networks: dict[str, Any]) -> dict[str, Any]:
        """The run's ``latest.pt`` (the loop adds its own counters and torch's RNG): counters, the ``NETWORK_KEYS``
        state dicts in an unpacked run's layout, the replay (unless ``run.checkpoint_replay`` is false), the numpy
        generators of exploration and replay sampling, the relay's windows and generator, and the metrics'
        running sums."""
        return {
            "updates": self.updates, "last_target_sync": self.last_target_sync, "learn_after": self.learn_after,
            **{k: networks[k] for k in NETWORK_KEYS},
            "replay": self.buffer.state_dict(copy=False) if self.cfg.run.checkpoint_replay else None,
            "rng": {"explore": self.rng.bit_generator.state, "replay": self.buffer.rng.bit_generator.state},
            "relay": self.relay.state_dict() if self.relay is not None else None,
            "relay_received": self.relay_received,
            "relay_tally": {"selected": self.relay_tally.selected_N, "fresh": self.relay_tally.fresh_N},
            "losses": list(self.losses),
        }

    @staticmethod
    def final(networks: dict[str, Any], updates: int) -> dict[str, Any]:
        """The run's ``final.pt``: its networks, optimizer and update count."""
        return {**{k: networks[k] for k in NETWORK_KEYS}, "updates": updates}

    def restore(self, saved: dict[str, Any]) -> dict[str, Any]:
        """Continue from a ``checkpoint``: counters, replay (or an empty one refilled for ``learning_starts`` env
        steps before learning again), generators, relay and metric sums; returns the ``NETWORK_KEYS`` state dicts
        for the caller's networks."""
        state = to_numpy(saved, keep=NETWORK_KEYS)
        self.updates, self.last_target_sync, self.learn_after = (state["updates"], state["last_target_sync"],
                                                                 state["learn_after"])
        if state["replay"] is not None:
            load_replay_state(self.buffer, state["replay"])  # either layout's checkpoint
        else:
            self.learn_after = self.loop.env_steps + self.cfg.dqn.learning_starts
        self.rng.bit_generator.state = state["rng"]["explore"]
        self.buffer.rng.bit_generator.state = state["rng"]["replay"]
        if self.relay is not None and state["relay"] is not None:
            self.relay.load_state_dict(state["relay"])
        self.relay_received[:] = state["relay_received"]
        if "relay_tally" in state:  # a checkpoint from before the tally (its per-fragment fractions) starts it at 0
            self.relay_tally.selected_N[:] = state["relay_tally"]["selected"]
            self.relay_tally.fresh_N[:] = state["relay_tally"]["fresh"]
        self.losses[:] = state["losses"]
        return {k: state[k] for k in NETWORK_KEYS}


def replay_buffer(cfg: ExperimentConfig, n_agents: int, n_pol: int, spec: EnvSpec,
                  device: torch.device | None = None) -> MultiAgentPER | TorchPER:
    """P independent prioritized buffers with their own generator (``seed + REPLAY_SEED_OFFSET``).

    On ``device``: ``TorchPER`` tensors there. On the host: ``CompactPER`` (``run.replay_layout: compact``, next
    observations linked to the same agent's next row, streams = agents; cells as codes where ``spec.cell_codes``
    says they repeat) or ``MultiAgentPER`` (``plain``); both draw identical samples. With parameter sharing the one
    buffer gets N x batch rows (``dqn.shared_batch``).
    """
    d, per = cfg.dqn, replay_buffer_kwargs(cfg)
    obs_shape, obs_dtype = spec.obs_shape, spec.obs_dtype
    if device is not None:
        return TorchPER(n_pol, d.buffer_size, obs_shape, obs_dtype, device=device, **per)
    if cfg.run.replay_layout == "compact":
        return CompactPER(n_pol, d.buffer_size, obs_shape, obs_dtype, n_streams=n_agents,
                          codec=None if spec.cell_codes else False, **per)
    return MultiAgentPER(n_pol, d.buffer_size, obs_shape, obs_dtype, **per)


def replay_buffer_kwargs(cfg: ExperimentConfig) -> dict[str, Any]:
    """The PER settings of a run's buffers and their generator (``seed + REPLAY_SEED_OFFSET``)."""
    d = cfg.dqn
    return dict(alpha=d.per_alpha, beta=d.per_beta, eps=d.per_eps,
                rng=np.random.default_rng(cfg.run.seed + REPLAY_SEED_OFFSET))


def load_init_team(path: str, q_net: BatchedQNet) -> dict[str, torch.Tensor]:
    """The state dict of team file ``path`` for ``q_net`` (``dqn.init_from``); ConfigError when it does not fit."""
    from suPER.opponents import load_team

    net, meta = load_team(path)
    theirs = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    mine = {k: tuple(v.shape) for k, v in q_net.state_dict().items()}
    if theirs != mine:
        raise ConfigError(f"dqn.init_from: {path} holds {net.n_policies} networks of obs {meta.obs_shape}, "
                          f"{meta.n_actions} actions, hiddens {meta.hiddens}, which do not fit this run's "
                          f"{q_net.n_policies} policies")
    return {k: v.to(next(q_net.parameters()).device) for k, v in net.state_dict().items()}


# ---- the network passes of both trainers (any number of policies P: one run's, or R runs' R * P)


def q_values(net: BatchedQNet, obs: Any, device: torch.device) -> torch.Tensor:
    """obs [P, B, *O] (numpy or tensor, any numeric dtype) -> q [P, B, A] on ``device``."""
    return net(torch.as_tensor(obs, device=device).float())


@torch.no_grad()
def greedy_actions(net: BatchedQNet, obs_ENO: Any, n_pol: int, device: torch.device) -> np.ndarray:
    """Greedy actions [E, N] of E games (acting: E = 1; evaluation: a batch of games) with one forward pass: game
    e's learner n is in policy ``n // (N / P)``'s batch."""
    e, n_agents, obs_shape = obs_ENO.shape[0], obs_ENO.shape[1], tuple(obs_ENO.shape[2:])
    g = n_agents // n_pol
    obs_PBO = torch.as_tensor(obs_ENO, device=device).reshape(e, n_pol, g, *obs_shape).transpose(0, 1)
    q_PBA = q_values(net, obs_PBO.reshape(n_pol, e * g, *obs_shape), device)
    return q_PBA.argmax(-1).reshape(n_pol, e, g).transpose(0, 1).reshape(e, n_agents).cpu().numpy()


def bootstrap_target(q_net: BatchedQNet, target_net: BatchedQNet, rewards: Any, next_obs: Any, dones: Any,
                     gamma: float | torch.Tensor, double_q: bool, device: torch.device,
                     q_next_online_PBA: torch.Tensor | None = None) -> torch.Tensor:
    """``y = r + gamma (1 - d) Q_target(o', a*)`` [P, B] (``dqn_loss.td_target``), a constant (no gradient);
    ``a*`` from the online net (double-Q: its Q-values of ``o'``, computed unless given) or the target net."""
    with torch.no_grad():
        q_next_target_PBA = q_values(target_net, next_obs, device)
        if double_q and q_next_online_PBA is None:
            q_next_online_PBA = q_values(q_net, next_obs, device)
        return td_target(torch.as_tensor(rewards, device=device), torch.as_tensor(dones, device=device),
                         q_next_target_PBA, q_next_online_PBA if double_q else None, gamma)


@torch.no_grad()
def fresh_abs_td(q_net: BatchedQNet, target_net: BatchedQNet, obs: Any, actions: Any, rewards: Any, next_obs: Any,
                 dones: Any, gamma: float | torch.Tensor, double_q: bool, device: torch.device) -> torch.Tensor:
    """|TD| [P, B] of fresh transitions with the current networks (the relay's scores, legacy priorities): one
    online pass covers ``o`` and ``o'``."""
    n = obs.shape[1]
    q_both_PBA = q_values(q_net, concatenate([obs, next_obs], axis=1), device)
    y_PB = bootstrap_target(q_net, target_net, rewards, next_obs, dones, gamma, double_q, device,
                            q_both_PBA[:, n:] if double_q else None)
    return priorities(q_of_actions(q_both_PBA[:, :n], torch.as_tensor(actions, device=device)) - y_PB)


def dqn_update(q_net: BatchedQNet, target_net: BatchedQNet, optimizer: torch.optim.Optimizer, obs: Any,
               actions: Any, rewards: Any, next_obs: Any, dones: Any, weights: Any, gamma: float | torch.Tensor,
               double_q: bool, grad_clip: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One gradient step of every policy on its own batch [P, B]: ``L_p = mean_b w_b huber(td_b)``, ``td = Q(o, a)
    - y``; the policies' losses are summed (Adam is elementwise: P separate optimisers) and each policy's gradient
    clipped to norm ``grad_clip`` on its own. Returns (|td| [P, B] for the new priorities, loss [P]), detached."""
    q_sa_PB = q_of_actions(q_values(q_net, obs, device), torch.as_tensor(actions, device=device))
    td_PB = q_sa_PB - bootstrap_target(q_net, target_net, rewards, next_obs, dones, gamma, double_q, device)
    loss_P = weighted_loss(td_PB, torch.as_tensor(weights, device=device), "huber")
    optimizer.zero_grad(set_to_none=True)
    loss_P.sum().backward()
    clip_grad_norm_per_policy(q_net, grad_clip)
    optimizer.step()
    return priorities(td_PB), loss_P.detach()
