"""Packed runs: R independent DQN runs (seeds, relay settings, ...) trained in one process as one program.

Why: one run's update (N small networks x 32 samples) leaves a GPU idle, and on a CPU R processes pay R
times the Python overhead. Here the R x N Q-networks are one ``PackedQNet`` (a ``BatchedQNet`` of R*N
policies), so acting, the relay's TD pass and the update of all R runs are one batched call each.

Everything else stays per run, exactly as ``suPER.native.dqn.train`` does it for one run: its
``RunLoop`` (envs, evaluation schedule, metrics.csv, checkpoints, resume), exploration generator and
epsilon schedule, prioritized buffers and their generator, relay windows and generator, target syncs
and counters. A run's ``latest.pt`` / ``final.pt`` hold its networks and Adam state in the layout of an
unpacked run (``PackedQNet.run_state_dict`` / ``run_adam_state``), so each folder plots, resumes and
exports on its own.

Read top to bottom like ``dqn.train``: per run seed -> loop -> net init -> buffers -> relay -> resume;
then the pack's nets and optimizer; then the loop, one rollout fragment per iteration, in the same phase
order: act, step, record (each env step), TD for the relay, store, relay, learn, sync target, checkpoint.

Loss per policy (as ``dqn.train``, the same ``suPER.native.dqn_loss`` functions): ``L_p = mean_b w_b huber(td_b)``, ``td = Q(o, a) - [r + gamma_run
(1 - d) Q_target(o', a*)]``; the R*N losses are summed and stepped by one Adam. Adam is elementwise
and the gradient of ``sum L`` w.r.t. run r's slice is run r's own gradient, so this is R separate
Adams (each with its own learning rate: ``PackedAdam`` scales run r's slice of the step by lr_r),
provided all runs update at the same fragments (one shared step counter per tensor): a pack requires
equal budgets, fragment length, learning_starts and batch size (``pack_key``), and refuses
to resume runs that stopped at different points.

Equivalence (``tests/native/test_packed.py``): each run of a pack takes the same actions, stores the
same replay rows and logs the same losses as the same config trained as a pack of one, bit for bit
on CPU (``PackedQNet`` is slice-stable and ``packed_adam`` elementwise-exact). Against the unpacked
``dqn.train`` acting is bit-identical and training agrees to float rounding (its NCHW conv layout and
fused Adam round differently; see docs/design.md, "Packed runs").

Replay on the device (``run.replay_device``, ``replay_device_of``): each run's buffers are ``TorchPER``
tensors on the pack's device (views of one buffer when the runs' replay settings agree, so the learn phase
samples and re-prioritises every run with one call, each run's draws from its own generator), its relay
windows are tensors and the relay selects on the TD tensor, and on pursuit's batched env the fragments keep
the env's observation tensors, so no observation goes through the host. The same rows as the numpy buffers,
tested (``tests/native/test_packed.py``, ``tests/replay/test_torch_per.py``); checkpoints are the same layout.

Failures: an exception in one run's own phases (its env, evaluation, buffers, checkpoint writes) stops
that run only (its manifest says failed, it resumes from its last checkpoint); its slot in the pack
keeps computing on stale inputs with zero loss weight, so the other runs are unaffected.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from suPER.arrays import concatenate, is_tensor, like, stack, zeros, zeros_like
from suPER.config import ConfigError, ExperimentConfig
from suPER.core.relay import InsertionPolicy, Relay, plan_many
from suPER.envs import StepResult, env_record, make_batched_env
from suPER.loop import ProgressFn, RunLoop, resolve_device, to_numpy
from suPER.models import BatchedQNet, clip_grad_norm_per_policy
from suPER.models.packed import PackedQNet, packed_adam
from suPER.native import dqn_loss
from suPER.native.dqn import (
    Fragment,
    RowIndex,
    Rows,
    fragment_index,
    relay_fragment,
    relay_index,
    store_fragment,
)
from suPER.native.dqn_loss import q_of_actions
from suPER.replay import CompactPER, MultiAgentPER, load_replay_state
from suPER.replay.torch_per import TorchPER
from suPER.runs import Logger, RunFolder, Summary
from suPER.seeds import REPLAY_SEED_OFFSET

PACK_KEYS = (
    "env", "dqn.model", "dqn.dueling", "dqn.hiddens", "dqn.double_q", "dqn.parameter_sharing",
    "dqn.adam_eps", "dqn.grad_clip", "dqn.batch_size", "dqn.shared_batch", "dqn.rollout_fragment_length", "dqn.learning_starts",
    "run.num_timesteps", "run.device", "run.threads", "run.algo", "run.replay_device",
)
"""Settings every run of a pack must share: the network and its shapes, the one optimizer's settings, and
the update schedule (all runs update at the same fragments). Anything else may differ per run: seed,
learning rate (``PackedAdam``'s per-run step sizes), relay (mode, bandwidth, window, team, ...), gamma, epsilon schedule, PER settings, buffer size, target
period, evaluation settings, output folder."""


def _get(cfg: ExperimentConfig, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj.to_dict() if hasattr(obj, "to_dict") else obj


def pack_key(cfg: ExperimentConfig) -> tuple[Any, ...]:
    """The values of ``PACK_KEYS``: runs with equal keys can be trained as one pack."""
    return tuple(repr(_get(cfg, k)) for k in PACK_KEYS)


def check_packable(cfgs: Sequence[ExperimentConfig]) -> None:
    """Refuse a pack whose runs differ in a ``PACK_KEYS`` setting or do not use the DQN trainer.

    Raises:
        ConfigError: naming the first differing setting and the two runs.
    """
    if not cfgs:
        raise ConfigError("--pack: a pack needs at least one run")
    for cfg in cfgs:
        if cfg.run.algo not in ("dqn", "ddqn"):
            raise ConfigError(f"--pack: packs DQN runs (--algo dqn or ddqn), got --algo {cfg.run.algo}")
    first = pack_key(cfgs[0])
    for cfg in cfgs[1:]:
        for name, a, b in zip(PACK_KEYS, first, pack_key(cfg)):
            if a != b:
                raise ConfigError(f"--pack: runs {cfgs[0].run_name} and {cfg.run_name} differ in {name} ({a} vs {b}); "
                                 f"a pack shares the network, optimizer and update schedule")


@dataclass
class _Run:
    """One run of the pack: everything ``dqn.train`` keeps per run, plus its failure if it stopped."""

    cfg: ExperimentConfig
    loop: RunLoop
    rng: np.random.Generator
    buffer: MultiAgentPER | TorchPER
    relay: Relay | None
    insertion: InsertionPolicy
    frag: Fragment
    init_state: dict[str, torch.Tensor]
    updates: int = 0
    last_target_sync: int = 0
    learn_after: int = 0
    losses: list[float] = field(default_factory=list)
    relay_fraction: list[np.ndarray] = field(default_factory=list)
    relay_received: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ep_return_N: np.ndarray = field(default_factory=lambda: np.zeros(0))
    obs_NO: np.ndarray | None = None
    alive_N: np.ndarray | None = None
    failure: BaseException | None = None
    summary: Summary | None = None

    @property
    def active(self) -> bool:
        return self.failure is None and self.summary is None


def train_pack(cfgs: Sequence[ExperimentConfig], folders: Sequence[RunFolder],
               loggers: Sequence[Logger | None] | None = None,
               progress: ProgressFn | None = None, batched_env: bool | None = None,
               run_progress: Sequence[ProgressFn | None] | None = None) -> list[Summary | BaseException]:
    """Train R DQN runs as one pack (see the module docstring).

    Args:
        cfgs: the runs' validated configs (``check_packable``).
        folders: one run folder per config (as ``dqn.train`` gets; fresh or holding a checkpoint to resume).
        loggers: one scalar sink per run (None: metrics.csv only).
        progress: called after every fragment with (env steps of each run, {}) (benchmarks time with it).
        batched_env: step the R runs' training games as one batched env (``PackEnvs``), instead of each
            run's own single game; None: when the env has one (the env record's ``batched``: pursuit).
        run_progress: one callback per run, called as ``dqn.train`` calls its ``progress`` (after every
            fragment: the run's env steps, last evaluation's team return, training return), and once
            with ``{"failed": 1.0}`` when the run stops (the Tune table's per-run rows).

    Returns:
        Per run, its Summary, or the exception that stopped it (the other runs went on).

    Raises:
        ValueError: the configs cannot be packed, or their checkpoints stopped at different points.
    """
    check_packable(cfgs)
    if any(cfg.run.eval_parallel for cfg in cfgs):
        print("note: --eval-parallel: packed runs evaluate in-process (their runs checkpoint at the same env steps)",
              file=sys.stderr)
    loggers = list(loggers) if loggers is not None else [None] * len(cfgs)
    run_progress = list(run_progress) if run_progress is not None else [None] * len(cfgs)
    R = len(cfgs)
    d0 = cfgs[0].dqn

    # ---- per run: seed, loop, network init, buffers, relay (each in dqn.train's order, so the same draws)
    replay_device = replay_device_of(cfgs[0])
    shared = _SharedReplay(R) if replay_device is not None and _same_per(cfgs) else None
    runs: list[_Run] = []
    for r, (cfg, folder, logger, run_prog) in enumerate(zip(cfgs, folders, loggers, run_progress)):
        runs.append(_build_run(cfg, folder, logger, run_prog, replay_device, shared, r))
    spec, device = runs[0].loop.spec, runs[0].loop.device
    on_device = replay_device is not None
    n_agents, obs_shape, n_actions = spec.n_agents, spec.obs_shape, spec.n_actions
    n_pol = 1 if d0.parameter_sharing else n_agents
    group = n_agents // n_pol  # learners per policy
    policy_of_agent_N = np.zeros(n_agents, dtype=np.int64) if d0.parameter_sharing else np.arange(n_agents)
    batch_per_policy = d0.rows_per_update(n_agents, len(spec.opponent_ids))
    T = d0.rollout_fragment_length

    # ---- the pack's networks: run r's policies are slots r*P .. r*P+P-1
    q_net = PackedQNet(R, n_pol, obs_shape, n_actions, body=d0.model, dueling=d0.dueling, hiddens=d0.hiddens)
    for r, run in enumerate(runs):
        q_net.load_run_state_dict(r, run.init_state)
    q_net = q_net.to(device)
    target_net = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = packed_adam(q_net.parameters(), lr=[run.cfg.dqn.lr for run in runs], eps=d0.adam_eps, device=device)
    gamma_P1 = torch.tensor([[run.cfg.dqn.gamma] for run in runs for _ in range(n_pol)], device=device)
    eval_net = q_net.unpacked().to(device).requires_grad_(False)  # one run's weights, for its evaluations

    relay_windows = _stack_relay_windows(runs) if shared is not None else None  # before a resume fills them

    # ---- resume: every run from its own latest.pt, in the unpacked layout
    saved = [run.loop.restore() for run in runs]
    if any(s is not None for s in saved):
        _restore_pack(runs, saved, q_net, target_net, optimizer)
    if batched_env is None:
        batched_env = env_record(cfgs[0].env.name).batched is not None
    envs = PackEnvs(runs, batched_env, obs_on_device=on_device)
    for r, run in enumerate(runs):
        run.obs_NO = envs.first_reset(r)
        run.alive_N = np.ones(n_agents, dtype=bool)
    # the batched env's runs as one state: each run's fragment (its observations on the env's device when the pack
    # keeps them there), observations, alive flags and episode returns are views of [R, ...] arrays, so a step of
    # all runs is recorded with one write per field (_record_all)
    whole_state = (_PackState.of(runs, T, device if envs.obs_on_device else None) if envs.batched is not None
                   else None)

    def q_values(net: BatchedQNet, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """obs [R*P, B, *O] (any numeric dtype) -> q [R*P, B, A] on ``device``."""
        return net(torch.as_tensor(obs, device=device).float())

    def greedy_batch_of(r: int) -> Any:
        """Run r's evaluation policy: ``dqn.train``'s greedy_batch on a copy of its weights."""
        eval_net.load_state_dict(q_net.run_state_dict(r))

        @torch.no_grad()
        def greedy_batch(obs_ENO: np.ndarray | torch.Tensor, alive_EN: np.ndarray | None = None) -> np.ndarray:
            e = obs_ENO.shape[0]
            obs_PBO = torch.as_tensor(obs_ENO, device=device).reshape(e, n_pol, group, *obs_shape).transpose(0, 1)
            q_PBA = eval_net(obs_PBO.reshape(n_pol, e * group, *obs_shape).float())
            return q_PBA.argmax(-1).reshape(n_pol, e, group).transpose(0, 1).reshape(e, n_agents).cpu().numpy()

        return greedy_batch

    def taken(q_PBA: torch.Tensor, actions: np.ndarray) -> torch.Tensor:
        return q_of_actions(q_PBA, torch.as_tensor(actions, device=device))

    @torch.no_grad()
    def td_target(rewards, next_obs, dones, q_next_online: torch.Tensor | None = None) -> torch.Tensor:
        """r + gamma_run (1 - d) Q_target(o', a*), a* from the online (double-Q) or the target net."""
        q_next_target = q_values(target_net, next_obs)
        if d0.double_q:
            q_next_online = q_values(q_net, next_obs) if q_next_online is None else q_next_online
        return dqn_loss.td_target(torch.as_tensor(rewards, device=device), torch.as_tensor(dones, device=device),
                                  q_next_target, q_next_online if d0.double_q else None, gamma_P1)

    @torch.no_grad()
    def td_errors(obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        """|TD| of [R*P, B] transitions with the current nets; one online pass covers o and o'."""
        n = obs.shape[1]
        q_both = q_values(q_net, concatenate([obs, next_obs], axis=1))
        return (taken(q_both[:, :n], actions) - td_target(rewards, next_obs, dones, q_both[:, n:])).abs()

    def eval_columns(run: _Run) -> dict[str, Any]:
        """dqn.train's metrics.csv columns for one run."""
        row: dict[str, Any] = {"loss": float(np.mean(run.losses)) if run.losses else float("nan"),
                               "epsilon": run.cfg.dqn.epsilon(run.loop.env_steps), "updates": run.updates}
        relay = run.relay
        if relay is not None:
            frac_N = np.mean(run.relay_fraction, axis=0) if run.relay_fraction else np.zeros(n_pol)
            row["fraction_shared_mean"] = float(frac_N[relay.participants_N].mean()) if relay.active else 0.0
            row.update({f"fraction_shared_{a}": float(f) for a, f in zip(relay.agent_ids, frac_N)})
            row["relayed_rows_total"] = int(run.relay_received.sum())
        run.losses.clear()
        run.relay_fraction.clear()
        return row

    def trainer_state(r: int) -> dict[str, Any]:
        """Run r's checkpoint, in dqn.train's layout."""
        run = runs[r]
        return {
            "updates": run.updates, "last_target_sync": run.last_target_sync, "learn_after": run.learn_after,
            "q_net": q_net.run_state_dict(r), "target_net": target_net.run_state_dict(r),
            "optimizer": q_net.run_adam_state(optimizer, r),
            "replay": run.buffer.state_dict(copy=False) if run.cfg.run.checkpoint_replay else None,
            "rng": {"explore": run.rng.bit_generator.state, "replay": run.buffer.rng.bit_generator.state},
            "relay": run.relay.state_dict() if run.relay is not None else None,
            "relay_received": run.relay_received, "relay_fraction": list(run.relay_fraction),
            "losses": list(run.losses),
        }

    def evaluate_run(r: int) -> Any:
        """Run r's evaluation (metrics row with its trainer columns), as a callback for its env step."""
        return lambda: runs[r].loop.evaluate(greedy_batch_of(r), eval_columns(runs[r]))

    def guarded(r: int, what: str, fn: Any, *args: Any) -> Any:
        """Run one run's own phase; an exception stops that run only (reported on stderr)."""
        run = runs[r]
        if not run.active:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure of one run must not stop the pack
            run.failure = exc
            print(f"{run.cfg.run_name}: stopped during {what} ({type(exc).__name__}: {exc}); the other runs of the "
                  f"pack go on", file=sys.stderr)
            if run.loop.record.progress is not None:
                run.loop.record.progress(run.loop.env_steps, {"failed": 1.0})
            for env in [*run.loop.envs, run.loop.eval_env]:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 - already failing; closing is best effort
                    pass
            return None

    for r, (run, s) in enumerate(zip(runs, saved)):
        if s is None:  # step 0: the untrained greedy policy
            guarded(r, "evaluation", run.loop.evaluate, greedy_batch_of(r), eval_columns(run))
            guarded(r, "checkpoint", run.loop.save, trainer_state(r))

    # ---- loop: one iteration = one rollout fragment of every run
    obs_RNO = (whole_state.obs_RNO if whole_state is not None else
               zeros((R, n_agents, *obs_shape), device if envs.obs_on_device else None, dtype="float32"))
    while any(run.active and not run.loop.done for run in runs):
        live = [r for r, run in enumerate(runs) if run.active and not run.loop.done]
        for r in live:
            runs[r].frag.valid_TN[:] = False
        for t in range(T):
            live = [r for r in live if runs[r].active and not runs[r].loop.done]
            if not live:
                break
            every_run = whole_state is not None and len(live) == R  # all runs in step: one write per field
            # act: one forward for every run's learners, then each run's own epsilon-greedy draws
            if not every_run:
                for r in live:
                    obs_RNO[r] = runs[r].obs_NO
            with torch.no_grad():
                q_PBA = q_values(q_net, obs_RNO.reshape(R * n_pol, group, *obs_shape))
            greedy_RN = q_PBA.argmax(-1).reshape(R, n_agents).cpu().numpy()
            actions_RN = np.zeros((R, n_agents), dtype=np.int64)
            for r in live:
                actions_RN[r] = _explore(runs[r], greedy_RN[r])
            # step: each run's game (or one batched step of all R games), then record each run's transition
            if every_run:
                assert whole_state is not None
                _record_all(runs, whole_state, t, actions_RN, envs.step_all(actions_RN), evaluate_run, envs, guarded)
                continue
            results = envs.step(actions_RN, live, guarded)
            for r, res in results.items():
                guarded(r, "env step", _record, runs[r], t, actions_RN[r], res, evaluate_run(r),
                        lambda r=r: envs.reset(r))

        # TD of the fresh rows with each sender's pre-update nets (for the relay, and legacy priorities)
        live = [r for r in live if runs[r].active]
        needs_td = [r for r in live if (runs[r].relay is not None and runs[r].relay.active)
                    or (runs[r].insertion.rule == "legacy" and runs[r].insertion.sender_side)]
        td_RNT: np.ndarray | torch.Tensor | None = None
        if needs_td:
            if whole_state is not None and len(live) == R:  # the runs' fragments are views of one: one op per field
                stacked = whole_state.frag.grouped(n_pol, runs=True)
            else:
                parts = [runs[r].frag.grouped(n_pol) if r in live else _zeros_like_grouped(runs[live[0]].frag, n_pol)
                         for r in range(R)]
                stacked = [concatenate([p[i] for p in parts]) for i in range(5)]
            td_t = td_errors(*stacked).reshape(R, n_agents, -1)
            td_RNT = td_t if on_device else td_t.cpu().numpy()  # device replay: the relay selects on the device

        # store, relay: each run into its own buffers; one add of every run's rows when they share one buffer
        td_of = {r: td_RNT[r] if td_RNT is not None and r in needs_td else None for r in live}
        if shared is not None and shared.whole is not None and len(live) == R:
            _store_and_relay_joined(shared.whole, runs, n_pol, policy_of_agent_N, td_RNT, td_of, relay_windows, guarded,
                                    None if whole_state is None else whole_state.frag)
        else:
            for r in live:
                guarded(r, "store / relay", _store_and_relay, runs[r], policy_of_agent_N, td_of[r])

        # learn: one gradient step of every run's policies, each on its own prioritized batch
        live = [r for r in live if runs[r].active]
        learners = [r for r in live if runs[r].loop.env_steps > runs[r].learn_after]
        if learners and len(learners) != len(live):
            raise RuntimeError("packed runs went out of lockstep (some learn, some do not); report this as a bug")
        fields = ("obs", "actions", "rewards", "next_obs", "dones", "weights")
        whole = shared.whole if shared is not None and len(learners) == R else None  # all runs in one sample
        batches: dict[int, Any] = {}
        cols: list[Any] = []
        indices_all: Any = None
        if whole is not None:
            # each run's own stratified draws, in its own generator's order: the same rows as R samples
            u_PB = np.concatenate([runs[r].buffer.rng.random((n_pol, batch_per_policy)) for r in range(R)])
            batch = whole.sample(batch_per_policy, uniform_PB=u_PB)
            cols, indices_all = [getattr(batch, f) for f in fields], batch.indices
            batches = {r: _RunIndices(batch.indices[r * n_pol:(r + 1) * n_pol]) for r in learners}
        elif learners:
            batches = {r: guarded(r, "replay sampling", runs[r].buffer.sample, batch_per_policy) for r in learners}
            learners = [r for r in learners if runs[r].active]
            if learners:
                b0 = batches[learners[0]]
                cols = [_stack([getattr(batches[r], f) if r in learners else None for r in range(R)], getattr(b0, f))
                        for f in fields]
        if learners and cols:
            obs, actions, rewards, next_obs, dones, weights = cols
            q_sa = taken(q_values(q_net, obs), actions)
            td = q_sa - td_target(rewards, next_obs, dones)
            weights_t = torch.as_tensor(weights, device=device)
            loss_P = dqn_loss.weighted_loss(td, weights_t)
            optimizer.zero_grad(set_to_none=True)
            loss_P.sum().backward()
            clip_grad_norm_per_policy(q_net, d0.grad_clip)
            optimizer.step()
            td_abs_t = td.detach().abs().reshape(R, n_pol, -1)
            td_abs_RPB = td_abs_t if on_device else td_abs_t.cpu().numpy()
            loss_R = loss_P.detach().reshape(R, n_pol).mean(1).cpu().numpy()  # one copy to the host, not R
            if whole is not None and _update_all(whole, indices_all, td_abs_t.reshape(R * n_pol, -1)):
                batches = {}  # every run's priorities are set
            for r in learners:
                run = runs[r]
                if r in batches:
                    guarded(r, "priority update", run.buffer.update_priorities, batches[r].indices,
                            td_abs_RPB[r])
                run.losses.append(float(loss_R[r]))
                run.updates += 1
                # sync target: hard copy every target_update_freq env steps (first sync at the first update)
                if (run.loop.env_steps - run.last_target_sync >= run.cfg.dqn.target_update_freq
                        or run.updates == 1):
                    target_net.copy_run_from(q_net, r)
                    run.last_target_sync = run.loop.env_steps

        # checkpoint: after every fragment that evaluated, so a resumed run logs each evaluation once
        for r in live:
            if runs[r].active and runs[r].loop.checkpoint_due:
                guarded(r, "checkpoint", runs[r].loop.save, trainer_state(r))
            if runs[r].active:
                runs[r].loop.report_progress()  # per run, as dqn.train reports after each fragment
        if progress is not None:
            progress(max(run.loop.env_steps for run in runs), {})

    # ---- final evaluation and final.pt of every run that did not fail
    envs.close()
    out: list[Summary | BaseException] = []
    for r, run in enumerate(runs):
        if run.active:
            final = {"q_net": q_net.run_state_dict(r), "target_net": target_net.run_state_dict(r),
                     "optimizer": q_net.run_adam_state(optimizer, r), "updates": run.updates}
            run.summary = guarded(r, "final evaluation", run.loop.finish, greedy_batch_of(r), final, eval_columns(run))
        out.append(run.summary if run.summary is not None else run.failure or RuntimeError("run did not finish"))
    return out


# --------------------------------------------------------------------------------------------------
# per-run pieces


def replay_device_of(cfg: ExperimentConfig) -> torch.device | None:
    """The device a pack keeps its replay on (``run.replay_device``), or None for numpy buffers on the host.

    ``auto``: the networks' device when it is not the CPU; ``device``: the networks' device (also the CPU,
    where it is the tested equivalent of the GPU path); ``numpy``: None.
    """
    mode = cfg.run.replay_device
    if mode == "numpy":
        return None
    device = resolve_device(cfg.run.device)
    return device if mode == "device" or device.type != "cpu" else None


class _SharedReplay:
    """The device buffers of a pack's runs as views of one ``TorchPER`` of R x P policies (``TorchPER.view``).

    Each run keeps its own buffer (rows, generator, checkpoint); the learn phase samples and updates all of
    them with one call on ``whole`` (the runs' draws concatenated), R times fewer device operations. Used when
    the runs' replay settings agree (``_same_per``), else each run gets its own ``TorchPER``.
    """

    def __init__(self, n_runs: int) -> None:
        self.n_runs = n_runs
        self.whole: TorchPER | None = None

    def part(self, r: int, n_pol: int, capacity: int, obs_shape: tuple[int, ...], obs_dtype: Any,
             device: torch.device, rng: np.random.Generator, **per: Any) -> TorchPER:
        """Run r's buffer (the first call allocates the whole)."""
        if self.whole is None:
            self.whole = TorchPER(self.n_runs * n_pol, capacity, obs_shape, obs_dtype, device=device, **per)
        return self.whole.view(r, self.n_runs, rng)


def _same_per(cfgs: Sequence[ExperimentConfig]) -> bool:
    """Whether the runs' buffers can be one: the same capacity and PER exponents / epsilon."""
    return len({(c.dqn.buffer_size, c.dqn.per_alpha, c.dqn.per_beta, c.dqn.per_eps) for c in cfgs}) == 1


@dataclass
class _RunIndices:
    """A run's rows of the pack's one sample (what the per-run priority update reads)."""

    indices: torch.Tensor


def _update_all(whole: TorchPER, indices_PB: torch.Tensor, td_abs_PB: torch.Tensor) -> bool:
    """Every run's priority update as one; False (nothing written) when some run's TD errors are not finite, so
    the caller updates run by run and only that run stops."""
    try:
        whole.update_priorities(indices_PB, td_abs_PB)
    except ValueError:
        return False
    return True


def _build_run(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None, progress: ProgressFn | None = None,
               replay_device: torch.device | None = None, shared: _SharedReplay | None = None, r: int = 0) -> _Run:
    """One run's loop, initial weights, buffers and relay, drawing its randomness as ``dqn.train`` does.

    ``replay_device``: keep the buffers (``TorchPER``; run ``r``'s part of ``shared`` when given), the relay
    windows and the fragment's observations there.
    """
    d, rc, run_cfg = cfg.dqn, cfg.relay, cfg.run
    # seeds python, numpy and torch from the run seed; evaluates in-process (a pack's runs checkpoint in lockstep)
    loop = RunLoop(cfg, folder, logger, progress, allow_eval_parallel=False)
    seed, spec = run_cfg.seed, loop.spec
    rng = np.random.default_rng(seed)
    n_agents, obs_shape = spec.n_agents, spec.obs_shape
    n_pol = 1 if d.parameter_sharing else n_agents
    init = BatchedQNet(n_pol, obs_shape, spec.n_actions, body=d.model, dueling=d.dueling, hiddens=d.hiddens)
    per_kwargs: dict[str, Any] = dict(alpha=d.per_alpha, beta=d.per_beta, eps=d.per_eps, rng=np.random.default_rng(seed + REPLAY_SEED_OFFSET))
    buffer: MultiAgentPER | TorchPER
    if shared is not None and replay_device is not None:
        buffer = shared.part(r, n_pol, d.buffer_size, obs_shape, spec.obs_dtype, replay_device, **per_kwargs)
    elif replay_device is not None:
        buffer = TorchPER(n_pol, d.buffer_size, obs_shape, spec.obs_dtype, device=replay_device, **per_kwargs)
    elif run_cfg.replay_layout == "compact":
        buffer = CompactPER(n_pol, d.buffer_size, obs_shape, spec.obs_dtype, n_streams=n_agents, **per_kwargs)
    else:
        buffer = MultiAgentPER(n_pol, d.buffer_size, obs_shape, spec.obs_dtype, **per_kwargs)
    relay = None
    sender_side = env_record(spec.name).sender_side_priorities
    if rc.enabled:
        relay = Relay.from_config(rc, [spec.learner_ids[i] for i in range(n_pol)] if n_pol > 1 else [spec.team],
                                  seed=seed, per_eps=d.per_eps, sender_side=sender_side, device=replay_device)
    insertion = relay.insertion if relay is not None else InsertionPolicy.from_config(rc, d.per_eps, sender_side)
    return _Run(cfg=cfg, loop=loop, rng=rng, buffer=buffer, relay=relay, insertion=insertion,
                frag=Fragment.empty(d.rollout_fragment_length, n_agents, obs_shape), init_state=init.state_dict(),
                learn_after=d.learning_starts, relay_received=np.zeros(n_agents, dtype=np.int64),
                ep_return_N=np.zeros(n_agents))


def _restore_pack(runs: list[_Run], saved: list[dict[str, Any] | None], q_net: PackedQNet, target_net: PackedQNet,
                  optimizer: torch.optim.Optimizer) -> None:
    """Load every run's checkpoint into its slot; refuse runs that stopped at different points.

    Raises:
        ValueError: some runs have a checkpoint and others not, or they differ in env steps / updates.
    """
    where = {(run.loop.env_steps, None if s is None else int(s["updates"])) for run, s in zip(runs, saved)}
    if len(where) > 1:
        names = ", ".join(f"{run.cfg.run_name} at env step {run.loop.env_steps}" for run in runs)
        raise ConfigError(f"--pack: the runs stopped at different points ({names}); a pack updates in lockstep, so "
                         f"resume them without --pack (their checkpoints are unpacked runs' checkpoints)")
    for r, (run, raw) in enumerate(zip(runs, saved)):
        assert raw is not None
        state = to_numpy(raw, keep=("q_net", "target_net", "optimizer"))
        run.updates, run.last_target_sync, run.learn_after = (state["updates"], state["last_target_sync"],
                                                              state["learn_after"])
        q_net.load_run_state_dict(r, state["q_net"])
        target_net.load_run_state_dict(r, state["target_net"])
        q_net.load_run_adam_state(optimizer, r, state["optimizer"])
        if state["replay"] is not None:
            load_replay_state(run.buffer, state["replay"])
        else:
            run.learn_after = run.loop.env_steps + run.cfg.dqn.learning_starts
        run.rng.bit_generator.state = state["rng"]["explore"]
        run.buffer.rng.bit_generator.state = state["rng"]["replay"]
        if run.relay is not None and state["relay"] is not None:
            run.relay.load_state_dict(state["relay"])
        run.relay_received[:] = state["relay_received"]
        run.relay_fraction[:] = list(state["relay_fraction"])
        run.losses[:] = state["losses"]
    if len({run.learn_after for run in runs}) > 1:
        raise ConfigError("--pack: the runs' replay was checkpointed for some and not for others; resume them "
                         "without --pack")


def _explore(run: _Run, greedy_N: np.ndarray) -> np.ndarray:
    """Epsilon-greedy actions of one run, epsilon scheduled by its env steps (its own generator)."""
    n_agents = len(greedy_N)
    explore_N = run.rng.random(n_agents) < run.cfg.dqn.epsilon(run.loop.env_steps)
    return np.where(explore_N, run.rng.integers(0, run.loop.spec.n_actions, n_agents), greedy_N)


def _record(run: _Run, t: int, actions_N: np.ndarray, res: StepResult, evaluate: Any, reset: Any) -> None:
    """Record one run's transition, evaluate when due, reset a finished episode (``reset() -> obs_NO``)."""
    loop, frag = run.loop, run.frag
    assert run.obs_NO is not None and run.alive_N is not None
    terminal_N = res.terminated_N | (res.truncated_N & run.cfg.env.truncation_is_terminal)
    frag.obs_TNO[t], frag.next_obs_TNO[t], frag.action_TN[t] = run.obs_NO, res.obs_NO, actions_N
    frag.reward_TN[t], frag.done_TN[t], frag.valid_TN[t] = res.reward_N, terminal_N, run.alive_N
    run.ep_return_N += np.where(run.alive_N, res.reward_N, 0.0)
    if loop.tick():
        evaluate()  # at exact multiples of the interval, on its own env
    if res.episode_over:
        loop.episode_finished(run.ep_return_N.sum())
        run.ep_return_N[:] = 0.0
        run.obs_NO, run.alive_N = reset(), np.ones(len(actions_N), dtype=bool)
    else:
        run.obs_NO, run.alive_N = res.obs_NO, res.alive_N


@dataclass
class _PackState:
    """What ``_record`` keeps per run, for all runs of a batched env at once: each run's ``frag``, ``obs_NO``,
    ``alive_N`` and ``ep_return_N`` are views of these (``of``), so per-run code reads the same values."""

    frag: Fragment
    """[R, T, N, ...] fields (obs on the env's device when the pack keeps them there)"""
    obs_RNO: Any
    alive_RN: np.ndarray
    ep_return_RN: np.ndarray
    terminal_on_truncation_R: np.ndarray
    """bool [R]: the run's ``env.truncation_is_terminal``"""

    @classmethod
    def of(cls, runs: list[_Run], steps: int, obs_device: Any) -> _PackState:
        """Stack the runs' current state and make each run's fields views of it."""
        R, (n_agents, *obs_shape) = len(runs), runs[0].frag.obs_TNO.shape[1:]
        one = Fragment.empty(steps, n_agents, tuple(obs_shape), device=obs_device)
        stacked = [stack([getattr(one, name)] * R) for name in Fragment.__dataclass_fields__]
        state = cls(Fragment(*stacked), stack([like(stacked[0], run.obs_NO) for run in runs]),
                    np.stack([run.alive_N for run in runs]), np.stack([run.ep_return_N for run in runs]),
                    np.array([run.cfg.env.truncation_is_terminal for run in runs]))
        for r, run in enumerate(runs):
            run.frag = Fragment(*(x[r] for x in stacked))
            run.obs_NO, run.alive_N, run.ep_return_N = state.obs_RNO[r], state.alive_RN[r], state.ep_return_RN[r]
        return state


def _record_all(runs: list[_Run], state: _PackState, t: int, actions_RN: np.ndarray, step: Any, evaluate_of: Any,
                envs: PackEnvs, guarded: Any) -> None:
    """``_record`` of every run of a batched env: the transition written with one op per field for all runs, then
    per run only its counters and due evaluation, and one reset call for the games whose episodes ended (after
    their evaluations, as ``_record``; run by run if that call fails, so only a failing run stops).

    ``step``: ``PackEnvs.step_all``'s (obs_RNO, reward_RN, terminated_RN, truncated_RN, alive_RN, over_R).
    """
    obs_next, reward_RN, term_RN, cut_RN, alive_next_RN, over_R = step
    f = state.frag
    f.obs_TNO[:, t] = state.obs_RNO
    f.next_obs_TNO[:, t] = obs_next
    f.action_TN[:, t] = actions_RN
    f.reward_TN[:, t] = reward_RN
    f.done_TN[:, t] = term_RN | (cut_RN & state.terminal_on_truncation_R[:, None])
    f.valid_TN[:, t] = state.alive_RN
    state.ep_return_RN += np.where(state.alive_RN, reward_RN, 0.0)
    for r, run in enumerate(runs):
        if run.loop.tick():
            guarded(r, "env step", evaluate_of(r))  # at exact multiples of the interval, on its own env
    state.obs_RNO[...] = obs_next
    state.alive_RN[...] = alive_next_RN
    ended = [int(r) for r in np.flatnonzero(over_R) if runs[r].active]
    for r in ended:
        runs[r].loop.episode_finished(state.ep_return_RN[r].sum())
        state.ep_return_RN[r] = 0.0
    if not ended:
        return
    try:
        state.obs_RNO[ended] = envs.reset_games(ended)
        state.alive_RN[ended] = True
    except Exception:  # noqa: BLE001 - then each run's own reset, so only a failing run stops
        for r in ended:
            obs = guarded(r, "env step", envs.reset, r)
            if obs is not None:
                state.obs_RNO[r] = obs
                state.alive_RN[r] = True


class PackEnvs:
    """The training envs of a pack: each run's own single game, or one batched env of R games (pursuit).

    Batched: game r is run r's; an episode is seeded by ``episode_seed`` (run seed and the env step it
    starts at), so it depends only on its run, whatever else the pack holds, and a resumed run restarts
    the same way. Its episodes are not the single game's for the same seed (``VecPursuitEnv`` draws from
    its own counter-based hash), so a batched pack equals its runs packed alone on the batched env.

    Args:
        runs: the pack's runs.
        batched: one ``make_batched_env`` of R games instead of each run's ``loop.envs[0]``.
        obs_on_device: with ``batched``, hand out the batched env's observation tensors as they are (on the
            networks' device: a GPU pack never copies them to the host); else numpy copies.
    """

    def __init__(self, runs: list[_Run], batched: bool, obs_on_device: bool = False) -> None:
        self.runs = runs
        self.batched = None
        if batched:
            cfg = runs[0].cfg
            self.batched = make_batched_env(cfg.env, len(runs), device=str(runs[0].loop.device))
        self.obs_on_device = bool(batched and obs_on_device)

    def _obs(self, obs: torch.Tensor) -> Any:
        return obs if self.obs_on_device else obs.cpu().numpy()

    @staticmethod
    def episode_seed(run: _Run) -> int:
        """Seed of the batched episode a run starts now: a hash of (train seed, env steps), < 2**31."""
        base = run.cfg.run.seed + run.cfg.env.seed_offset
        return int((base * 1_000_003 + run.loop.env_steps * 7_919) % (2**31 - 1))

    def reset(self, r: int) -> np.ndarray:
        """Start run r's next episode; its obs_NO."""
        run = self.runs[r]
        if self.batched is None:
            return run.loop.envs[0].reset()
        return self._obs(self.batched.reset([self.episode_seed(run)], games=[r])[r])

    def reset_games(self, rs: list[int]) -> Any:
        """Start the next episode of the batched env's games ``rs`` (runs) with one reset call; their obs
        ``[len(rs), N, ...]`` (each game seeded by its own run, so the same as resetting them one by one)."""
        assert self.batched is not None
        obs = self.batched.reset([self.episode_seed(self.runs[r]) for r in rs], games=rs)
        return self._obs(obs[torch.as_tensor(rs, device=obs.device)])

    def first_reset(self, r: int) -> np.ndarray:
        """The first episode of this process (fresh: the run's env seed; resumed: tied to env_steps)."""
        if self.batched is None:
            return self.runs[r].loop.reset_envs()[0]
        return self.reset(r)

    def step(self, actions_RN: np.ndarray, live: list[int], guarded: Any) -> dict[int, StepResult]:
        """Step every live run's game; a run whose env raises stops (``guarded``)."""
        if self.batched is None:
            out = {}
            for r in live:
                run = self.runs[r]
                with run.loop.timer("env"):
                    res = guarded(r, "env step", run.loop.envs[0].step, actions_RN[r])
                if res is not None:
                    out[r] = res
            return out
        obs, rew, term, cut, alive, over = self.step_all(actions_RN)
        return {r: StepResult(obs[r], rew[r], term[r], cut[r], alive[r], bool(over[r])) for r in live}

    def step_all(self, actions_RN: np.ndarray) -> tuple[Any, ...]:
        """One step of the batched env's R games: (obs_RNO (the pack's kind), reward, terminated, truncated,
        alive, episode_over) as [R, ...] host arrays but the observations; timed as each run's ``env``."""
        assert self.batched is not None
        t0 = time.perf_counter()
        b = self.batched.step(actions_RN)
        out = (self._obs(b.obs_ENO), b.reward_EN.cpu().numpy(), b.terminated_EN.cpu().numpy(),
               b.truncated_EN.cpu().numpy(), b.alive_EN.cpu().numpy(), b.episode_over_E.cpu().numpy())
        _charge(self.runs, "env", t0)
        return out

    def close(self) -> None:
        if self.batched is not None:
            self.batched.close()


def _store_and_relay(run: _Run, policy_of_agent_N: np.ndarray, td_NT: np.ndarray | None) -> None:
    """Store the fragment's own rows, then relay surprising ones (``dqn.store_fragment`` / ``relay_fragment``)."""
    legacy = run.insertion.rule == "legacy"
    with run.loop.timer("store"):
        store_fragment(run.buffer, run.frag, policy_of_agent_N, td_NT if legacy else None, run.insertion)
    if run.relay is not None and run.relay.active and td_NT is not None:
        with run.loop.timer("relay"):
            plan = relay_fragment(run.buffer, run.frag, run.relay, td_NT)
            run.relay_fraction.append(plan.fraction_N)
            run.relay_received += plan.received_N


def _stack_relay_windows(runs: list[_Run]) -> Any:
    """The runs' relay windows as one ``[R, N, W]`` array / tensor whose row r is run r's window (a view), so
    ``relay.plan_many`` selects for all runs at once; None when the runs' windows differ in length or kind."""
    relays = {r: run.relay for r, run in enumerate(runs) if run.relay is not None}
    if not relays:
        return None
    shapes = {(tuple(rel.windows.values_NW.shape), is_tensor(rel.windows.values_NW),
               str(getattr(rel.windows.values_NW, "device", "host"))) for rel in relays.values()}
    if len(shapes) != 1:
        return None
    first = next(iter(relays.values())).windows.values_NW
    stacked = zeros((len(runs), *first.shape), first.device if is_tensor(first) else None)
    for r, rel in relays.items():
        stacked[r] = rel.windows.values_NW
        rel.windows.values_NW = stacked[r]  # a view: the run's pushes, checkpoints and restores land in the stack
    return stacked


def _store_and_relay_joined(whole: TorchPER, runs: list[_Run], n_pol: int, policy_of_agent_N: np.ndarray,
                            td_RNT: Any, td_of: dict[int, Any], relay_windows: Any, guarded: Any,
                            stacked: Fragment | None = None) -> None:
    """``_store_and_relay`` of every run with two adds to the pack's one buffer instead of two per run, and one
    relay selection for all runs (``relay.plan_many`` on the stacked windows) instead of one per run and sender.

    Each run's own rows and relay plan are made as alone (``fragment_index``; ``plan_many`` equals each relay's
    ``plan``: its windows and generator); run r's policy p is row ``r * n_pol + p`` of ``whole``, so every policy
    receives the same rows in the same order as from its run's own adds (own rows first, then relayed ones) and ends in the same slots with
    the same priorities. ``stacked``: the runs' fragments are its views (``_PackState``), so each add's rows are
    gathered from it with one op per field for all runs (``RowIndex.join``) instead of per run. A run that fails
    while its rows are made stops alone; when the joined add refuses its input (rows with and without insertion
    priorities, a non-finite priority: nothing written), the rows are added run by run, so only a run whose own
    add fails stops.
    """
    t0 = time.perf_counter()
    relaying = [r for r, run in enumerate(runs) if run.active and run.relay is not None and run.relay.active
                and td_of[r] is not None]
    plans: dict[int, Any] = {}
    if relaying:
        valid_RNT = np.stack([runs[r].frag.valid_TN.T for r in relaying])
        made = plan_many([runs[r].relay for r in relaying], td_RNT[like(td_RNT, np.asarray(relaying))], valid_RNT,
                         relay_windows, rows=relaying)
        plans = dict(zip(relaying, made))
    own: dict[int, RowIndex] = {}
    relayed: dict[int, RowIndex] = {}
    for r, run in enumerate(runs):
        td_NT = td_of[r]
        index = guarded(r, "store / relay", fragment_index, run.frag, policy_of_agent_N,
                        td_NT if run.insertion.rule == "legacy" else None, run.insertion)
        if index is None:
            continue
        if r in plans:
            made = guarded(r, "store / relay", relay_index, run.frag, run.relay, td_NT, plans[r])
            if made is None:
                continue
            copies, plan = made
            if copies is not None:
                relayed[r] = copies
            run.relay_fraction.append(plan.fraction_N)
            run.relay_received += plan.received_N
        own[r] = index
    for parts in (own, relayed):
        if not parts:
            continue
        try:
            if stacked is not None:
                RowIndex.join(parts, stacked, n_pol).add_to(whole)
            else:
                Rows.join([p.rows(runs[r].frag) for r, p in parts.items()], [r * n_pol for r in parts]).add_to(whole)
        except ValueError:
            for r, index in parts.items():
                if runs[r].active:
                    guarded(r, "store / relay", lambda r=r, index=index: index.rows(runs[r].frag).add_to(runs[r].buffer))
    _charge(runs, "store", t0)


def _charge(runs: list[_Run], phase: str, t0: float) -> None:
    """Share the time since ``t0`` of one call made for all runs equally among their ``phase`` timers."""
    dt = (time.perf_counter() - t0) / max(len(runs), 1)
    for run in runs:
        run.loop.timer.total[phase] = run.loop.timer.total.get(phase, 0.0) + dt


def _zeros_like_grouped(frag: Fragment, n_pol: int) -> list[Any]:
    return [zeros_like(x) for x in frag.grouped(n_pol)]


def _stack(parts: list[Any], like: Any) -> Any:
    """Concatenate per-run [P, B, ...] arrays (or tensors) along P; a stopped run's slot is zeros (zero loss weight)."""
    zeros = zeros_like(like)
    return concatenate([zeros if p is None else p for p in parts])
