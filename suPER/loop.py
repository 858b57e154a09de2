"""What every native trainer shares around its update rule: envs, evaluation schedule, metrics rows,
checkpoints, resume and the run summary.

A trainer owns its networks, buffers and loss; ``RunLoop`` owns the rest (device, threads and seeds through
``start_run``; rows, timings and throughput through ``RunRecord``, which the RLlib runner uses too), so the
baselines (SEAC, MADDPG, QMIX) read like CleanRL scripts: build the loop, build the nets, then::

    loop = RunLoop(cfg, folder, logger, progress)
    state = loop.restore()                       # None for a fresh run, else what loop.save() stored
    obs = loop.reset_envs()                      # one obs_NO per training env
    if state is None:
        loop.evaluate(greedy)                    # the step-0 row
        loop.save(trainer_state())
    while not loop.done:
        ...act in every env, step, learn...
        for done_env_return in finished_episodes: loop.episode_finished(done_env_return)
        if loop.tick(num_envs):                  # counts env steps; True when an evaluation is due
            loop.evaluate(greedy, {"loss": ...})
        if loop.checkpoint_due:
            loop.save(trainer_state())
        loop.report_progress()
    return loop.finish(greedy, final_state)      # last evaluation if needed, final.pt, close envs

Evaluation happens at exact multiples of ``ExperimentConfig.eval_interval`` env steps (env steps summed
over parallel envs), on separate envs with greedy actions (``suPER.evaluation.evaluate_episodes``): the
K episodes of evaluation i are seeded ``episode_seeds(eval_seed, i, K)`` and played as batches of
``run.eval_batch`` games (``opponents.make_eval_batch``: one batched policy call per step; 0 = one at a
time), and
writes one metrics.csv row: ``env_steps``, ``team_return_mean`` and the rest of ``EvalResult.as_row``,
``train_return_mean`` (last 20 training episodes), ``env_steps_per_sec`` (evaluation and checkpoint
time excluded), ``wall_time_s`` and whatever the trainer adds.

With ``run.eval_parallel`` an evaluation is forked (``suPER.forked``): the child plays the same seeded episodes
on a snapshot of the trainer while the parent trains on; its row is appended when it has finished (polled by
``tick``, awaited by the next ``evaluate``, by ``save`` and by ``finish``), with the env steps, trainer columns
and throughput of the evaluation step. At most one evaluation is in flight, so rows stay in order, and a
checkpoint is written only after the row of every evaluation before it, so a resume still logs each evaluation
exactly once (a run killed while an evaluation is in flight redoes that interval).

Checkpoints: ``save(state)`` writes ``checkpoints/latest.pt`` atomically with the trainer's state plus
the loop's counters, torch's RNG, bookkeeping and a copy of the metrics rows written so far;
``restore()`` reads it back when the folder holds one (``suPER.campaigns.execute`` checks it with
``read_checkpoint`` first and deletes it for fresh starts), makes metrics.csv exactly the checkpoint's
copy of the rows (a deleted file or a row cut by a crash comes back; rows logged after the checkpoint
go, they are logged again) and returns the trainer's part. Env states are not saved (see docs/design.md): after a resume the
training envs restart from seeds derived from (seed, env_steps).
"""

from __future__ import annotations

import pickle
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suPER.config import ConfigError, ExperimentConfig, RunConfig
from suPER.envs import MultiAgentEnv
from suPER.envs.base import BatchedMultiAgentEnv
from suPER.evaluation import (
    BatchActFn,
    BatchResetFn,
    EvalResult,
    episode_seeds,
    evaluate_episodes,
)
from suPER.forked import ForkedCall, ForkedCallError, fork_supported
from suPER.opponents import make_env, make_eval_batch
from suPER.resolve import without_volatile
from suPER.runs import (
    CSVMetrics,
    Logger,
    NoLogger,
    RunFailure,
    RunFolder,
    RunFolderError,
    Summary,
    atomic_write_bytes,
    namespaced_metrics,
    seed_everything,
)

FORKED_EVAL_TIMEOUT_S = 1800.0
"""Longest wait for a forked evaluation (``run.eval_parallel``) at the next checkpoint: a worker that stopped
responding is killed then and the run stops with one line (it resumes from its last checkpoint). An evaluation of
the paper's 20 episodes takes seconds to a few minutes on one core."""

LOOP_CHECKPOINT_VERSION = 2
"""Format version of the ``latest.pt`` files ``RunLoop.save`` writes (2: with a copy of the metrics rows)."""

READABLE_CHECKPOINT_VERSIONS = (1, 2)
"""Versions ``restore`` continues from; version 1 has no copy of the metrics rows (metrics.csv is checked instead)."""

RESTART = "restart the run from scratch (this discards its metrics.csv and checkpoints)"
"""What ``--overwrite`` does to an unfinished run that cannot be continued (``RunFolderError``'s ``overwrite``)."""


def torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a Python file object: a full disk then raises OSError (ENOSPC) naming the file,
    where torch's own path writer raises an opaque RuntimeError."""
    with open(path, "wb") as f:
        torch.save(obj, f)


def read_checkpoint(path: Path, cfg: ExperimentConfig, mmap: bool = False) -> dict[str, Any]:
    """Load a ``latest.pt`` and check it can continue ``cfg``: format version, configuration, loop counters.

    Args:
        path: the checkpoint.
        cfg: the run's config.
        mmap: map the file instead of reading it (a cheap check: the tensors' bytes are not read).

    Raises:
        RunFolderError: empty, truncated or damaged, not a checkpoint (e.g. objects a weights-only load
            refuses to build), another format version, another configuration.
    """
    def refuse(why: str) -> RunFolderError:
        return RunFolderError(f"{path}: {why}", overwrite=RESTART)

    try:
        if path.stat().st_size == 0:
            raise refuse("expected a checkpoint, got an empty file")
        raw = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except RunFolderError:
        raise
    except pickle.UnpicklingError:
        raise refuse("expected a checkpoint, got a file with objects a checkpoint never holds (not loaded)") from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError, TypeError, AttributeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise refuse(f"expected a checkpoint, got a truncated or damaged file ({first})") from None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), dict) for k in ("config", "loop")):
        raise refuse("expected a checkpoint written by this suite, got another kind of file")
    if raw.get("version") not in READABLE_CHECKPOINT_VERSIONS:
        raise refuse(f"expected checkpoint format {' or '.join(map(str, READABLE_CHECKPOINT_VERSIONS))}, got "
                     f"{raw.get('version')!r}")
    if without_volatile(raw["config"]) != without_volatile(cfg.to_dict()):
        raise RunFolderError(f"{path}: was written by a different configuration", "use another --tag",
                             "start the run over")
    try:
        int(raw["loop"]["env_steps"])
        record = raw.get("metrics")
        if record is not None:
            columns = list(record["columns"])
            if "env_steps" not in columns or any(len(r) != len(columns) for r in record["rows"]):
                raise ValueError("metrics record")
    except (KeyError, TypeError, ValueError):
        raise refuse("expected a checkpoint written by this suite, got one with damaged counters") from None
    return raw

ProgressFn = Callable[[int, dict[str, float]], None]
"""Called after every iteration with (env_steps, latest stats) - the CLI draws its progress bar with it."""

ENV_SEED_STRIDE = 1_000
"""Training env i of a run is seeded with seed + env.seed_offset + i * ENV_SEED_STRIDE."""


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a CUDA device is refused.

    Raises:
        ValueError: ``cuda`` asked for where there is none (the message names ``--device``).
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here (use cpu or auto)")
    return torch.device(name)


def set_threads(threads: int) -> None:
    """torch's intra-op threads (``run.threads``, ``--threads``); 0 keeps torch's default (all cores)."""
    if threads > 0:
        torch.set_num_threads(threads)


def env_seeds(cfg: ExperimentConfig) -> tuple[int, int]:
    """(training env seed, evaluation env seed) of a run: ``seed + env.seed_offset`` and that plus
    ``env.eval_seed_offset`` (both backends; training env i adds ``i * ENV_SEED_STRIDE``)."""
    train_seed = cfg.run.seed + cfg.env.seed_offset
    return train_seed, train_seed + cfg.env.eval_seed_offset


def make_eval_env(cfg: ExperimentConfig, eval_seed: int) -> MultiAgentEnv | BatchedMultiAgentEnv:
    """A run's evaluation env, for both backends: a batch of ``min(run.eval_batch, run.eval_episodes)``
    games (``opponents.make_eval_batch``: pursuit's ``VecPursuitEnv``, else a ``LockstepBatch``), or one env
    when ``run.eval_batch`` is 0. Opponents (if any) are seeded from ``eval_seed`` and explore with
    ``env.eval_opponent_epsilon`` (training games use ``env.opponent_epsilon``); episodes by their own seeds."""
    games = min(cfg.run.eval_batch, cfg.run.eval_episodes)
    env_cfg = replace(cfg.env, opponent_epsilon=cfg.env.eval_opponent_epsilon, opponent_epsilon_timesteps=0)
    return make_eval_batch(env_cfg, games, seed=eval_seed) if games > 0 else make_env(env_cfg, seed=eval_seed)


def start_run(run: RunConfig) -> torch.device:
    """What every trainer does first, native or RLlib: device, threads, then every global RNG from ``run.seed``.

    Args:
        run: the run's settings (``device``, ``threads``, ``seed``).

    Returns:
        the torch device for the networks (``run.device`` resolved).
    """
    device = resolve_device(run.device)
    set_threads(run.threads)
    seed_everything(run.seed)
    return device


class Timer:
    """Accumulates wall time per phase (perf/ metrics): ``with timer("env"): ...``."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self._phase = ""
        self._t0 = 0.0

    def __call__(self, phase: str) -> Timer:
        self._phase = phase
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.total[self._phase] = self.total.get(self._phase, 0.0) + time.perf_counter() - self._t0


THROUGHPUT_EXCLUDED = ("eval", "checkpoint", "startup")
"""Timer phases that ``env_steps_per_sec`` leaves out: evaluation, checkpoints, and (RLlib) Ray's start and the
algorithm build."""


class RunRecord:
    """metrics.csv rows, phase timings, throughput, wall time and progress reports of one run.

    ``RunLoop`` records through it, and so does the RLlib runner (``suPER.core.rllib_runner``), so both
    backends write the same columns in the same order with the same throughput rule.

    Attributes:
        t_start: ``perf_counter`` at the run's start (moved back by a resumed run's elapsed time).
        timer: wall time per phase.
        metrics: the run folder's metrics.csv.
        last_eval: the latest metrics row.
    """

    def __init__(self, folder: RunFolder, logger: Logger | None = None, progress: ProgressFn | None = None) -> None:
        self.folder, self.logger, self.progress = folder, logger or NoLogger(), progress
        self.t_start = time.perf_counter()
        self.timer = Timer()
        self.metrics = CSVMetrics(folder.metrics)
        self.last_eval: dict[str, Any] = {}

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self.t_start

    def overhead(self) -> float:
        """Seconds in the phases ``THROUGHPUT_EXCLUDED`` (not training)."""
        return sum(self.timer.total.get(phase, 0.0) for phase in THROUGHPUT_EXCLUDED)

    def throughput(self, env_steps: int, elapsed: float, overhead: float | None = None) -> float:
        """Training env steps per second: ``env_steps / (elapsed - overhead)`` (overhead: default ``overhead()``)."""
        return env_steps / max(elapsed - (self.overhead() if overhead is None else overhead), 1e-9)

    def evaluate(self, eval_env: MultiAgentEnv | BatchedMultiAgentEnv, eval_seed: int, episodes: int,
                 act: BatchActFn, on_reset: BatchResetFn | None = None) -> EvalResult:
        """Play evaluation i's greedy episodes (timed as ``eval``), i = the rows already in metrics.csv.

        The episodes are seeded ``episode_seeds(eval_seed, i, episodes)``, so a resumed run continues the
        count and every evaluation is reproducible from the run seed (both backends).
        """
        with self.timer("eval"):
            seeds = episode_seeds(eval_seed, len(self.metrics.rows), episodes)
            return evaluate_episodes(eval_env, act, seeds, on_reset)

    def fork_evaluation(self, eval_env: MultiAgentEnv | BatchedMultiAgentEnv, eval_seed: int, episodes: int,
                        act: BatchActFn, on_reset: BatchResetFn | None, env_steps: int) -> ForkedCall:
        """``evaluate`` in a forked child (``suPER.forked``): the same episodes, on a snapshot of the caller.

        The parent's ``eval`` time is the fork itself; the caller keeps the ``ForkedCall`` and appends its row
        when it is done (``row(..., at=...)``).
        """
        seeds = episode_seeds(eval_seed, len(self.metrics.rows), episodes)
        with self.timer("eval"):
            return ForkedCall(lambda: evaluate_episodes(eval_env, act, seeds, on_reset),
                              f"evaluation at env step {env_steps}")

    def row(self, env_steps: int, result: EvalResult, learner_ids: Sequence[str], train_return: float,
            extra: dict[str, Any] | None = None, at: tuple[float, float] | None = None) -> dict[str, Any]:
        """Append one metrics.csv row and log it (namespaced, with the timings).

        Columns, in order: ``env_steps``, ``EvalResult.as_row``, ``train_return_mean``, the trainer's
        ``extra`` columns, ``env_steps_per_sec``, ``wall_time_s``.

        Args:
            env_steps: env steps taken so far.
            result: the evaluation's statistics.
            learner_ids: the learning team's agent ids (per-agent return columns).
            train_return: mean team return of recent training episodes (NaN before the first one).
            extra: trainer columns (loss, epsilon, relay statistics, ...).
            at: ``(elapsed, overhead)`` seconds when the evaluation started, for a row appended later (a
                forked evaluation); default now.

        Returns:
            The row written.
        """
        elapsed, overhead = at if at is not None else (self.elapsed(), self.overhead())
        row: dict[str, Any] = {"env_steps": env_steps, **result.as_row(learner_ids)}
        row["train_return_mean"] = train_return
        row.update(extra or {})
        row["env_steps_per_sec"] = self.throughput(env_steps, elapsed, overhead)
        row["wall_time_s"] = elapsed
        self.metrics.append(row)
        self.logger.log(namespaced_metrics(row, self.timer.total), step=env_steps)
        self.last_eval = row
        return row

    def report_progress(self, env_steps: int, train_return: float) -> None:
        """Tell the progress callback (the CLI's bar) where the run is."""
        if self.progress is not None:
            self.progress(env_steps, {"team_return": self.last_eval.get("team_return_mean", float("nan")),
                                      "train_return": train_return})

    def summary(self, env_steps: int) -> Summary:
        """The run's ``Summary``: final greedy return, training throughput, wall time, timings."""
        wall = self.elapsed()
        return Summary(self.folder.path, env_steps, float(self.last_eval["team_return_mean"]),
                       self.throughput(env_steps, wall), wall, dict(self.timer.total))


def to_torch(obj: Any) -> Any:
    """numpy arrays -> tensors and numpy scalars -> Python numbers, recursively (for ``weights_only`` loads)."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj if obj.flags.c_contiguous else obj.copy())  # (ascontiguousarray makes 0-d 1-d)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: to_torch(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_torch(v) for v in obj)
    return obj


def to_numpy(obj: Any, keep: tuple[str, ...] = ()) -> Any:
    """Inverse of :func:`to_torch` (tensors -> numpy), leaving the top-level keys in ``keep`` as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.numpy()
    if isinstance(obj, dict):
        return {k: v if k in keep else to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_numpy(v) for v in obj]
    return obj


class RunLoop:
    """Envs, evaluation schedule, metrics, checkpoints and resume of one run (see the module docstring).

    Attributes:
        cfg: the run's config.
        device: torch device for the trainer's networks (``run.device`` resolved).
        envs: the training envs (``num_envs`` of them, seeded ``seed + seed_offset + i * ENV_SEED_STRIDE``).
        eval_env: the evaluation env: a batch of ``min(run.eval_batch, run.eval_episodes)`` games
            (``opponents.make_eval_batch``: pursuit's ``VecPursuitEnv``, else a ``LockstepBatch``), or one env
            when ``run.eval_batch`` is 0; every episode is reset with its own seed.
        eval_seed: the run's evaluation seed (``seed + env.seed_offset + env.eval_seed_offset``).
        spec: the learning team's ``EnvSpec``.
        env_steps: env steps taken so far, summed over the training envs.
        timer: wall time per phase; ``eval`` and ``checkpoint`` are excluded from the throughput.
        last_eval: the latest metrics row.
        eval_parallel: evaluations are forked (``run.eval_parallel`` where ``forked.fork_supported``).

    Args:
        allow_eval_parallel: False makes ``run.eval_parallel`` evaluate in-process (packed runs: their runs
            must checkpoint at the same env steps).
    """

    def __init__(self, cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
                 progress: ProgressFn | None = None, num_envs: int = 1, allow_eval_parallel: bool = True) -> None:
        run = cfg.run
        self.cfg, self.folder = cfg, folder
        self.device = start_run(run)
        self.seed = run.seed
        self.record = RunRecord(folder, logger, progress)
        self.timer, self.metrics = self.record.timer, self.record.metrics
        self._train_seed, self.eval_seed = env_seeds(cfg)
        self.envs: list[MultiAgentEnv] = [make_env(cfg.env, seed=self._train_seed + i * ENV_SEED_STRIDE)
                                          for i in range(num_envs)]
        self.eval_env: MultiAgentEnv | BatchedMultiAgentEnv = make_eval_env(cfg, self.eval_seed)
        self.spec = self.envs[0].spec
        folder.checkpoints.mkdir(parents=True, exist_ok=True)
        self.latest: Path = folder.checkpoints / "latest.pt"
        self.eval_every = cfg.eval_interval
        self.env_steps = 0
        self.next_eval = self.eval_every
        self.train_returns: deque[float] = deque(maxlen=20)
        self.checkpoint_due = False
        self._resumed = False
        self.eval_parallel = bool(run.eval_parallel and allow_eval_parallel and fork_supported(self.device))
        if run.eval_parallel and allow_eval_parallel and not self.eval_parallel:
            print(f"note: --eval-parallel: evaluations are forked only for CPU networks on Linux (device "
                  f"{self.device}); evaluating in-process", file=sys.stderr)
        self._pending: _PendingEvaluation | None = None

    # ---- schedule

    @property
    def done(self) -> bool:
        """The budget ``run.num_timesteps`` is spent."""
        return self.env_steps >= self.cfg.run.num_timesteps

    def tick(self, n: int = 1) -> bool:
        """Count ``n`` env steps; True when an evaluation is due (``evaluate`` then moves the schedule on).

        Also appends the row of a forked evaluation that has finished (``run.eval_parallel``).
        """
        self.env_steps += n
        if self._pending is not None and self._pending.call.ready():
            self.collect_evaluation()
        return self.env_steps >= self.next_eval

    def episode_finished(self, team_return: float) -> None:
        """Record a finished training episode's team return (for ``train_return_mean``)."""
        self.train_returns.append(float(team_return))

    def reset_envs(self) -> list[np.ndarray]:
        """Reset every training env; fresh runs use the run's env seeds, resumed runs seeds tied to env_steps."""
        base = self._train_seed + (self.env_steps if self._resumed else 0)
        return [env.reset(seed=base + i * ENV_SEED_STRIDE) for i, env in enumerate(self.envs)]

    # ---- evaluation and logging

    @property
    def last_eval(self) -> dict[str, Any]:
        """The latest metrics row."""
        return self.record.last_eval

    def train_return(self) -> float:
        """Mean team return of the last 20 training episodes (NaN before the first)."""
        return float(np.mean(self.train_returns)) if self.train_returns else float("nan")

    def evaluate(self, act: BatchActFn, extra: dict[str, Any] | None = None,
                 on_reset: BatchResetFn | None = None) -> dict[str, Any]:
        """Greedy evaluation episodes on the evaluation env; append the metrics row and log it.

        Evaluation i (i = rows already in metrics.csv, so a resumed run continues the count) plays the
        episodes seeded ``episode_seeds(eval_seed, i, run.eval_episodes)``.

        Args:
            act: ``(obs_ENO, alive_EN) -> actions_EN`` of the learning team for E games at once.
            extra: trainer columns (loss, entropy, ...) for this row.
            on_reset: called with E when E evaluation episodes start (recurrent policies reset their state).

        Returns:
            The row written to metrics.csv; None when the evaluation was forked (``eval_parallel``: its row is
            appended when it finishes).
        """
        self.collect_evaluation()  # the previous forked evaluation first: rows in order, one in flight
        row: dict[str, Any] | None = None
        if self.eval_parallel:
            call = self.record.fork_evaluation(self.eval_env, self.eval_seed, self.cfg.run.eval_episodes, act,
                                               on_reset, self.env_steps)
            self._pending = _PendingEvaluation(call, self.env_steps, self.train_return(), dict(extra or {}),
                                               (self.record.elapsed(), self.record.overhead()))
        else:
            res = self.record.evaluate(self.eval_env, self.eval_seed, self.cfg.run.eval_episodes, act, on_reset)
            row = self.record.row(self.env_steps, res, self.spec.learner_ids, self.train_return(), extra)
            self.checkpoint_due = True
        while self.next_eval <= self.env_steps:
            self.next_eval += self.eval_every
        return row

    def collect_evaluation(self) -> dict[str, Any] | None:
        """Wait for the forked evaluation in flight, if any, and append its row (then a checkpoint is due).

        Raises:
            ForkedCallError: the evaluation failed in its child (as an in-process one would have raised).
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        with self.timer("eval"):
            try:
                res = pending.call.result(timeout_s=FORKED_EVAL_TIMEOUT_S)
            except ForkedCallError as exc:  # one line, exit 1; the folder resumes from its last checkpoint
                raise RunFailure(f"{exc}; the run stopped and {self.folder.path} is resumable: rerun the same "
                                 f"command (or evaluate in-process: --no-eval-parallel)") from None
        row = self.record.row(pending.env_steps, res, self.spec.learner_ids, pending.train_return, pending.extra,
                              at=pending.at)
        self.checkpoint_due = True
        return row

    def report_progress(self) -> None:
        """Tell the progress callback (the CLI's bar) where the run is."""
        self.record.report_progress(self.env_steps, self.train_return())

    # ---- checkpoints

    def save(self, trainer_state: dict[str, Any]) -> None:
        """Write ``latest.pt`` atomically: the trainer's state (tensors, numpy arrays, generator states,
        numbers) plus the loop's counters, torch's RNG, timings and bookkeeping.

        A forked evaluation still in flight is awaited first: a checkpoint past an evaluation step always holds
        that evaluation's row."""
        self.collect_evaluation()
        state = {
            "version": LOOP_CHECKPOINT_VERSION, "config": self.cfg.to_dict(),
            "loop": {"env_steps": self.env_steps, "next_eval": self.next_eval, "train_returns": list(self.train_returns),
                     "last_eval": self.last_eval, "timings": dict(self.timer.total),
                     "elapsed_s": self.record.elapsed(), "torch_rng": torch.get_rng_state(),
                     "opponents": [_opponent_state(env) for env in self.envs]},
            "metrics": self.metrics.record(),  # metrics.csv up to here: a resume restores it exactly
            "trainer": trainer_state,
        }
        with self.timer("checkpoint"):
            atomic_write_bytes(self.latest, lambda p: torch_save(to_torch(state), p))
        self.checkpoint_due = False

    def restore(self) -> dict[str, Any] | None:
        """Continue from ``latest.pt`` when the folder holds one: restore the loop, return the trainer's state.

        Arrays come back as tensors (``load_state_dict`` takes them; use ``to_numpy`` for numpy state).

        Raises:
            RunFolderError: the checkpoint cannot be read, has another format version or another configuration.
        """
        if not self.latest.exists():
            return None
        raw = read_checkpoint(self.latest, self.cfg)
        loop = raw["loop"]
        self.env_steps, self.next_eval = int(loop["env_steps"]), int(loop["next_eval"])
        self.train_returns.extend(float(x) for x in loop["train_returns"])
        self.record.last_eval = dict(loop["last_eval"])
        self.timer.total.update(loop["timings"])
        self.record.t_start -= float(loop["elapsed_s"])
        torch.set_rng_state(loop["torch_rng"])
        for env, state in zip(self.envs, loop.get("opponents") or []):  # absent in checkpoints before it was kept
            if state is not None and hasattr(getattr(env, "opponent", None), "load_state_dict"):
                env.opponent.load_state_dict(to_numpy(state))  # type: ignore[attr-defined]
        if raw.get("metrics") is not None:
            self.metrics.restore(raw["metrics"])  # exactly the rows up to the checkpoint
        else:  # format 1: execute checked metrics.csv; rows logged after the checkpoint are logged again
            self.metrics.truncate_after(self.env_steps)
        self._resumed = True
        return raw["trainer"]

    def finish(self, act: BatchActFn, final_state: dict[str, Any], extra: dict[str, Any] | None = None,
               on_reset: BatchResetFn | None = None) -> Summary:
        """Evaluate at the final step (unless just done), write ``final.pt`` (networks for later use), close envs.

        Args:
            act: greedy policy of the learning team.
            final_state: what ``final.pt`` holds besides counters and config (state dicts of the networks).
            extra: trainer columns for a final metrics row.
            on_reset: as in ``evaluate``.
        """
        self.collect_evaluation()
        if self.last_eval.get("env_steps") != self.env_steps:
            self.eval_parallel = False  # nothing left to overlap with
            self.evaluate(act, extra, on_reset)
        state = {**final_state, "env_steps": self.env_steps, "config": self.cfg.to_dict()}
        atomic_write_bytes(self.folder.checkpoints / "final.pt", lambda p: torch_save(to_torch(state), p))
        for env in [*self.envs, self.eval_env]:
            env.close()
        return self.record.summary(self.env_steps)


def _opponent_state(env: Any) -> Any:
    """A training env's opponent exploration state (``NetworkOpponent.state_dict``: action counts, generator), or
    None for an env without one; kept in ``latest.pt`` so a decaying opponent epsilon resumes where it was."""
    opponent = getattr(env, "opponent", None)
    return opponent.state_dict() if hasattr(opponent, "state_dict") else None


@dataclass
class _PendingEvaluation:
    """A forked evaluation in flight and what its row needs from the step it started at."""

    call: ForkedCall
    env_steps: int
    train_return: float
    extra: dict[str, Any]
    at: tuple[float, float]
    """(elapsed, overhead) seconds of the run when it started: the row's throughput and wall time"""
