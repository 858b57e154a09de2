"""Packed runs: R independent DQN runs (seeds, relay settings, ...) trained in one process as one program.

Why: one run's update (N small networks x 32 samples) leaves a GPU idle, and on a CPU R processes pay R
times the Python overhead. Here the R x N Q-networks are one ``PackedQNet`` (a ``BatchedQNet`` of R*N
policies), so acting, the relay's TD pass and the update of all R runs are one batched call each.

Everything else stays per run: each run is a ``suPER.native.dqn_run.DQNRun``, as the one of
``suPER.native.dqn.train`` (its ``RunLoop``: envs, evaluation schedule, metrics.csv, checkpoints, resume; its
exploration generator and epsilon schedule, prioritized buffers and their generator, relay windows and
generator, target syncs and counters), and the network passes are the same functions. A run's ``latest.pt`` / ``final.pt`` hold its networks and Adam state in the layout of an
unpacked run (``PackedQNet.run_state_dict`` / ``run_adam_state``), so each folder plots, resumes and
exports on its own.

Read top to bottom like ``dqn.train``: per run seed -> loop -> net init -> buffers -> relay -> resume;
then the pack's nets and optimizer; then the loop, one rollout fragment per iteration, in the same phase
order: act, step, record (each env step), TD for the relay, store, relay, learn, sync target, checkpoint.

Loss per policy (``dqn_run.dqn_update``, as ``dqn.train``): ``L_p = mean_b w_b huber(td_b)``,
``td = Q(o, a) - [r + gamma_run (1 - d) Q_target(o', a*)]``; the R*N losses are summed and stepped by one Adam. Adam is elementwise
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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suPER.arrays import concatenate, is_tensor, like, stack, zeros, zeros_like
from suPER.config import ConfigError, ExperimentConfig
from suPER.core.relay import plan_many
from suPER.envs import StepResult, env_record, make_batched_env
from suPER.loop import ProgressFn, RunLoop, resolve_device
from suPER.models.packed import PackedQNet, packed_adam
from suPER.native.dqn_run import (
    DQNRun,
    dqn_update,
    fresh_abs_td,
    greedy_actions,
    q_values,
    replay_buffer,
    replay_buffer_kwargs,
)
from suPER.native.fragment import Fragment, RowIndex, Rows, fragment_index, relay_index
from suPER.replay import MultiAgentPER
from suPER.replay.torch_per import TorchPER
from suPER.runs import Logger, RunFolder, Summary

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
    runs = [_build_run(cfg, folder, logger, run_prog, replay_device, shared, r)
            for r, (cfg, folder, logger, run_prog) in enumerate(zip(cfgs, folders, loggers, run_progress))]
    spec, device = runs[0].loop.spec, runs[0].loop.device
    on_device = replay_device is not None
    n_agents, obs_shape, n_actions = spec.n_agents, spec.obs_shape, spec.n_actions
    n_pol = 1 if d0.parameter_sharing else n_agents
    group = n_agents // n_pol  # learners per policy
    policy_of_agent_N = runs[0].policy_of_agent_N
    batch_per_policy = d0.rows_per_update(n_agents, len(spec.opponent_ids))
    T = d0.rollout_fragment_length

    # ---- the pack's networks: run r's policies are slots r*P .. r*P+P-1
    q_net = PackedQNet(R, n_pol, obs_shape, n_actions, body=d0.model, dueling=d0.dueling, hiddens=d0.hiddens,
                       obs_scale=spec.obs_scale)
    for r, run in enumerate(runs):
        q_net.load_run_state_dict(r, run.init_net.state_dict())
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
        run.obs_NO, run.alive_N = envs.first_reset(r)
    # the batched env's runs as one state: each run's fragment (its observations on the env's device when the pack
    # keeps them there), observations, alive flags and episode returns are views of [R, ...] arrays, so a step of
    # all runs is recorded with one write per field (_record_all)
    whole_state = (_PackState.of(runs, T, device if envs.obs_on_device else None) if envs.batched is not None
                   else None)

    def greedy_batch_of(r: int) -> Any:
        """Run r's evaluation policy: greedy actions of a copy of its weights."""
        eval_net.load_state_dict(q_net.run_state_dict(r))
        return lambda obs_ENO, alive_EN=None: greedy_actions(eval_net, obs_ENO, n_pol, device)

    def networks(r: int) -> dict[str, Any]:
        """Run r's networks and Adam state, in an unpacked run's layout."""
        return {"q_net": q_net.run_state_dict(r), "target_net": target_net.run_state_dict(r),
                "optimizer": q_net.run_adam_state(optimizer, r)}

    def evaluate_run(r: int) -> Any:
        """Run r's evaluation (metrics row with its trainer columns), as a callback for its env step."""
        return lambda: runs[r].loop.evaluate(greedy_batch_of(r), runs[r].eval_columns())

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
            guarded(r, "evaluation", run.loop.evaluate, greedy_batch_of(r), run.eval_columns())
            guarded(r, "checkpoint", run.loop.save, run.checkpoint(networks(r)))

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
                q_PBA = q_values(q_net, obs_RNO.reshape(R * n_pol, group, *obs_shape), device)
            greedy_RN = q_PBA.argmax(-1).reshape(R, n_agents).cpu().numpy()
            actions_RN = np.zeros((R, n_agents), dtype=np.int64)
            for r in live:
                actions_RN[r] = runs[r].explore(greedy_RN[r])
            # step: each run's game (or one batched step of all R games), then record each run's transition
            if every_run:
                assert whole_state is not None
                _record_all(runs, whole_state, t, actions_RN, envs.step_all(actions_RN), evaluate_run, envs, guarded)
                continue
            results = envs.step(actions_RN, live, guarded)
            for r, res in results.items():
                guarded(r, "env step", runs[r].record, t, actions_RN[r], res, evaluate_run(r),
                        lambda r=r: envs.reset(r))

        # TD of the fresh rows with each sender's pre-update nets (for the relay, and legacy priorities)
        live = [r for r in live if runs[r].active]
        needs_td = [r for r in live if runs[r].needs_fresh_td]
        td_RNT: np.ndarray | torch.Tensor | None = None
        if needs_td:
            if whole_state is not None and len(live) == R:  # the runs' fragments are views of one: one op per field
                stacked = whole_state.frag.grouped(n_pol, runs=True)
            else:
                parts = [runs[r].frag.grouped(n_pol) if r in live else _zeros_like_grouped(runs[live[0]].frag, n_pol)
                         for r in range(R)]
                stacked = [concatenate([p[i] for p in parts]) for i in range(5)]
            td_t = fresh_abs_td(q_net, target_net, *stacked, gamma_P1, d0.double_q, device).reshape(R, n_agents, -1)
            td_RNT = td_t if on_device else td_t.cpu().numpy()  # device replay: the relay selects on the device

        # store, relay: each run into its own buffers; one add of every run's rows when they share one buffer
        td_of = {r: td_RNT[r] if td_RNT is not None and r in needs_td else None for r in live}
        if shared is not None and shared.whole is not None and len(live) == R:
            _store_and_relay_joined(shared.whole, runs, n_pol, policy_of_agent_N, td_RNT, td_of, relay_windows, guarded,
                                    None if whole_state is None else whole_state.frag)
        else:
            for r in live:
                guarded(r, "store / relay", runs[r].store_and_relay, td_of[r])

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
            batches = {r: DQNRunIndices(batch.indices[r * n_pol:(r + 1) * n_pol]) for r in learners}
        elif learners:
            batches = {r: guarded(r, "replay sampling", runs[r].buffer.sample, batch_per_policy) for r in learners}
            learners = [r for r in learners if runs[r].active]
            if learners:
                b0 = batches[learners[0]]
                cols = [_stack([getattr(batches[r], f) if r in learners else None for r in range(R)], getattr(b0, f))
                        for f in fields]
        if learners and cols:
            td_abs_PB, loss_P = dqn_update(q_net, target_net, optimizer, *cols, gamma_P1, d0.double_q, d0.grad_clip,
                                           device)
            td_abs_t = td_abs_PB.reshape(R, n_pol, -1)
            td_abs_RPB = td_abs_t if on_device else td_abs_t.cpu().numpy()
            loss_R = loss_P.reshape(R, n_pol).mean(1).cpu().numpy()  # one copy to the host, not R
            if whole is not None and _update_all(whole, indices_all, td_abs_t.reshape(R * n_pol, -1)):
                batches = {}  # every run's priorities are set
            for r in learners:
                run = runs[r]
                if r in batches:
                    guarded(r, "priority update", run.buffer.update_priorities, batches[r].indices,
                            td_abs_RPB[r])
                if run.note_update(float(loss_R[r])):  # sync target: a hard copy of the run's slots
                    target_net.copy_run_from(q_net, r)

        # checkpoint: after every fragment that evaluated, so a resumed run logs each evaluation once
        for r in live:
            if runs[r].active and runs[r].loop.checkpoint_due:
                guarded(r, "checkpoint", runs[r].loop.save, runs[r].checkpoint(networks(r)))
            if runs[r].active:
                runs[r].loop.report_progress()  # per run, as dqn.train reports after each fragment
        if progress is not None:
            progress(max(run.loop.env_steps for run in runs), {})

    # ---- final evaluation and final.pt of every run that did not fail
    envs.close()
    out: list[Summary | BaseException] = []
    for r, run in enumerate(runs):
        if run.active:
            run.summary = guarded(r, "final evaluation", run.loop.finish, greedy_batch_of(r),
                                  DQNRun.final(networks(r), run.updates), run.eval_columns())
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
class DQNRunIndices:
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
               replay_device: torch.device | None = None, shared: _SharedReplay | None = None, r: int = 0) -> DQNRun:
    """One run of the pack (``DQNRun.build``: the same draws as alone), evaluating in-process (a pack's runs
    checkpoint in lockstep).

    ``replay_device``: keep the buffers (``TorchPER``; run ``r``'s part of ``shared`` when given), the relay
    windows and the fragment's observations there.
    """
    def make_buffer(n_pol: int, loop: RunLoop) -> MultiAgentPER | TorchPER:
        if shared is None or replay_device is None:
            return replay_buffer(cfg, loop.spec.n_agents, n_pol, loop.spec, replay_device)
        d = cfg.dqn
        return shared.part(r, n_pol, d.buffer_size, loop.spec.obs_shape, loop.spec.obs_dtype, replay_device,
                           **replay_buffer_kwargs(cfg))

    return DQNRun.build(cfg, folder, logger, progress, allow_eval_parallel=False, make_buffer=make_buffer,
                        relay_device=replay_device)


def _restore_pack(runs: list[DQNRun], saved: list[dict[str, Any] | None], q_net: PackedQNet, target_net: PackedQNet,
                  optimizer: torch.optim.Optimizer) -> None:
    """Load every run's checkpoint into its slot; refuse runs that stopped at different points.

    Raises:
        ConfigError: some runs have a checkpoint and others not, they differ in env steps / updates, or some
            checkpointed their replay and others not.
    """
    where = {(run.loop.env_steps, None if s is None else int(s["updates"])) for run, s in zip(runs, saved)}
    if len(where) > 1:
        names = ", ".join(f"{run.cfg.run_name} at env step {run.loop.env_steps}" for run in runs)
        raise ConfigError(f"--pack: the runs stopped at different points ({names}); a pack updates in lockstep, so "
                         f"resume them without --pack (their checkpoints are unpacked runs' checkpoints)")
    for r, (run, raw) in enumerate(zip(runs, saved)):
        assert raw is not None
        nets = run.restore(raw)
        q_net.load_run_state_dict(r, nets["q_net"])
        target_net.load_run_state_dict(r, nets["target_net"])
        q_net.load_run_adam_state(optimizer, r, nets["optimizer"])
    if len({run.learn_after for run in runs}) > 1:
        raise ConfigError("--pack: the runs' replay was checkpointed for some and not for others; resume them "
                         "without --pack")


@dataclass
class _PackState:
    """What ``DQNRun.record`` keeps per run, for all runs of a batched env at once: each run's ``frag``, ``obs_NO``,
    ``alive_N`` and ``ep_return_N`` are views of these (``of``), so per-run code reads the same values."""

    frag: Fragment
    """[R, T, N, ...] fields (obs on the env's device when the pack keeps them there)"""
    obs_RNO: Any
    alive_RN: np.ndarray
    ep_return_RN: np.ndarray
    terminal_on_truncation_R: np.ndarray
    """bool [R]: the run's ``env.truncation_is_terminal``"""

    @classmethod
    def of(cls, runs: list[DQNRun], steps: int, obs_device: Any) -> _PackState:
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


def _record_all(runs: list[DQNRun], state: _PackState, t: int, actions_RN: np.ndarray, step: Any, evaluate_of: Any,
                envs: PackEnvs, guarded: Any) -> None:
    """``DQNRun.record`` of every run of a batched env: the transition written with one op per field for all runs, then
    per run only its counters and due evaluation, and one reset call for the games whose episodes ended (after
    their evaluations, as ``DQNRun.record``; run by run if that call fails, so only a failing run stops).

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
        state.obs_RNO[ended], state.alive_RN[ended] = envs.reset_games(ended)
    except Exception:  # noqa: BLE001 - then each run's own reset, so only a failing run stops
        for r in ended:
            started = guarded(r, "env step", envs.reset, r)
            if started is not None:
                state.obs_RNO[r], state.alive_RN[r] = started


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

    def __init__(self, runs: list[DQNRun], batched: bool, obs_on_device: bool = False) -> None:
        self.runs = runs
        self.batched = None
        if batched:
            cfg = runs[0].cfg
            self.batched = make_batched_env(cfg.env, len(runs), device=str(runs[0].loop.device))
        self.obs_on_device = bool(batched and obs_on_device)

    def _obs(self, obs: torch.Tensor) -> Any:
        return obs if self.obs_on_device else obs.cpu().numpy()

    @staticmethod
    def episode_seed(run: DQNRun) -> int:
        """Seed of the batched episode a run starts now: a hash of (train seed, env steps), < 2**31."""
        base = run.cfg.run.seed + run.cfg.env.seed_offset
        return int((base * 1_000_003 + run.loop.env_steps * 7_919) % (2**31 - 1))

    def reset(self, r: int) -> tuple[Any, np.ndarray]:
        """Start run r's next episode; its (obs_NO, alive_N: the learners that start it)."""
        run = self.runs[r]
        if self.batched is None:
            env = run.loop.envs[0]
            return env.reset(), env.alive_N
        obs = self._obs(self.batched.reset([self.episode_seed(run)], games=[r])[r])
        return obs, self.batched.alive_EN[r].cpu().numpy()

    def reset_games(self, rs: list[int]) -> tuple[Any, np.ndarray]:
        """Start the next episode of the batched env's games ``rs`` (runs) with one reset call; their obs
        ``[len(rs), N, ...]`` (each game seeded by its own run, so the same as resetting them one by one) and
        alive masks ``[len(rs), N]`` (host)."""
        assert self.batched is not None
        obs = self.batched.reset([self.episode_seed(self.runs[r]) for r in rs], games=rs)
        rows = torch.as_tensor(rs, device=obs.device)
        return self._obs(obs[rows]), self.batched.alive_EN[rows].cpu().numpy()

    def first_reset(self, r: int) -> tuple[Any, np.ndarray]:
        """The first episode of this process (fresh: the run's env seed; resumed: tied to env_steps); its
        (obs_NO, alive_N)."""
        if self.batched is None:
            return self.runs[r].loop.reset_envs()[0], self.runs[r].loop.envs[0].alive_N
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


def _stack_relay_windows(runs: list[DQNRun]) -> Any:
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


def _store_and_relay_joined(whole: TorchPER, runs: list[DQNRun], n_pol: int, policy_of_agent_N: np.ndarray,
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
            run.note_relay(plan)
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


def _charge(runs: list[DQNRun], phase: str, t0: float) -> None:
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
