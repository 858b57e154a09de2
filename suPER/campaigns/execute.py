"""Executing one run into its run folder: a fresh start, a resume from its latest checkpoint, or a refusal.

Used by ``super-marl train``, by every Ray Tune trial of ``grid run`` and by every submitted job.
"""

from __future__ import annotations

from typing import Any

from suPER import config as C
from suPER.resolve import without_volatile

# --------------------------------------------------------------------------------------------------
# executing one run: fresh, resumed or refused


def trainer_for(backend: str, algo: str = "ddqn") -> Any:
    """The ``train(cfg, folder, logger, progress) -> Summary`` function of a backend and algorithm.

    Resolved lazily from the algorithm's record (``AlgorithmSpec.trainers``, ``"module:function"``), so
    the CLI stays instant and a missing optional dependency only matters to the runs that need it.

    Raises:
        ConfigError: unknown backend or algorithm, an algorithm the backend does not run, or a trainer
            that cannot be imported.
    """
    from suPER.algorithms import BACKENDS, backend_algo_names, resolve_entry_point

    if backend not in BACKENDS:
        raise C.ConfigError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    spec = C.algorithm(algo)
    if backend not in spec.trainers:
        raise C.ConfigError(f"--backend {backend}: runs --algo {' or '.join(backend_algo_names(backend))} only, "
                            f"got --algo {algo}")
    entry = spec.trainers[backend]
    try:
        return resolve_entry_point(entry)
    except ModuleNotFoundError as exc:  # an optional dependency (or a trainer of a later version) is missing
        raise C.ConfigError(f"--{'algo ' + algo if backend == 'native' else 'backend ' + backend}: its trainer "
                            f"({entry}) is not available in this version ({exc})") from exc


def opponent_file(cfg: C.ExperimentConfig) -> dict[str, Any]:
    """Which opponent weights a run plays against (path and SHA-256), for its manifest: ``pretrained``
    names a file that a later version of the repository may replace."""
    from suPER.opponents import has_network_opponent, opponent_path, sha256

    if not has_network_opponent(cfg.env):
        return {}
    path = opponent_path(cfg.env.name, cfg.env.opponent)
    if not path.is_file():
        return {}
    return {"opponent_file": str(path), "opponent_sha256": sha256(path)}


def play_final_games(cfg: C.ExperimentConfig, folder: Any, backend: str = "native") -> dict[str, Any] | None:
    """The final policy's games against the env's opponent team (``opponents.final_games``), written to
    ``final_games.json`` and printed in one line; None when the run has none to play."""
    from suPER.opponents import final_games
    from suPER.runs import atomic_write_json

    record = final_games(cfg, folder.checkpoints / "final.pt", backend)
    if record is None:
        return None
    atomic_write_json(folder.final_games, record)
    ci = record["win_rate_ci"]
    print(f"{cfg.run_name}: final policy in {record['games']} games against {record['opponent']} (epsilon "
          f"{record['opponent_epsilon']:g}): win {record['win_rate']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}], loss "
          f"{record['loss_rate']:.2f}, tie {record['tie_rate']:.2f}, team return {record['team_return']:.2f}, "
          f"mean length {record['episode_len']:.0f}", flush=True)
    return record


def execute(cfg: C.ExperimentConfig, overwrite: bool = False, backend: str = "native", progress: Any = None,
            on_start: Any = None, extra_manifest: dict[str, Any] | None = None, train_fn: Any = None) -> Any:
    """Train one run into ``cfg.run.out/cfg.run_name``: a fresh start, a resume, or a refusal.

    The whole call holds the folder's writer lock (a second writer is refused). Under it:

    * a finished run is refused (``RunFolderError``) unless ``overwrite``, and so is a folder whose
      manifest cannot be read (or is missing next to config.json, metrics.csv or a checkpoint);
    * an unfinished run (manifest ``running`` / ``failed`` / ``interrupted``) with ``checkpoints/latest.pt``
      is resumed from that checkpoint, provided config.json and the checkpoint are readable and match
      ``cfg`` (up to ``config.VOLATILE_RUN_KEYS``) and metrics.csv can be restored up to the checkpoint;
      what was found (a restored metrics.csv, temp files of a killed writer) is printed as notes;
    * anything else starts fresh (old metrics.csv and checkpoints are removed).

    Every check happens before anything is written: a refusal changes nothing. Once the run starts, any
    exception leaves the manifest ``failed`` (``interrupted`` for Ctrl-C), or, when even that write
    fails (disk full), ``running`` with no writer holding the lock: both resume.

    The manifest records status, provenance and every resume; when the run finishes the large
    ``latest.pt`` is removed (``final.pt`` stays) and ``curve.png`` is drawn.

    Args:
        cfg: validated config.
        overwrite: replace a finished run (or an unfinished one) instead of refusing / resuming it.
        backend: trainer backend (``suPER.algorithms.BACKENDS``).
        progress: per-fragment callback ``(env_steps, stats)`` passed to the trainer.
        on_start: called as ``on_start(folder, resumed)`` once the folder is ready, before training.
        extra_manifest: extra manifest fields (e.g. the grid entry).
        train_fn: the ``train(cfg, folder, logger, progress)`` to call instead of the backend's (packed runs
            pass one that hands the run to its pack, ``suPER.campaigns.packed``).

    Returns:
        The trainer's Summary.

    Raises:
        RunFolderError: the folder cannot be used as asked (nothing written).
        RunFailure: the run stopped on a failed write (disk full, I/O error); the folder is resumable.
    """

    from suPER import runs

    backend_fn = trainer_for(backend, cfg.run.algo)  # before touching the disk: an unavailable backend writes nothing
    train_fn = train_fn or backend_fn
    if cfg.run.wandb:
        try:
            runs.check_wandb_credentials(cfg.run.wandb_mode)
        except runs.WandbError as exc:  # bad set-up, found before anything is written: input error (exit 2)
            raise runs.RunFolderError(str(exc)) from None
    folder = runs.prepare_run_folder(cfg.run.out, cfg.run_name, overwrite=overwrite)
    with folder.lock():
        try:
            return _execute_locked(cfg, folder, train_fn, overwrite, backend, progress, on_start, extra_manifest)
        except OSError as exc:
            raise runs.RunFailure(f"{runs.describe_os_error(exc)}; the run stopped and {folder.path} is resumable: "
                                  f"rerun the same command") from exc


def _execute_locked(cfg: C.ExperimentConfig, folder: Any, train_fn: Any, overwrite: bool, backend: str,
                    progress: Any, on_start: Any, extra_manifest: dict[str, Any] | None) -> Any:
    """``execute`` once the writer lock is held: check, then write."""
    import socket
    import sys
    import time

    from suPER import runs
    from suPER.plotting import plot_curve

    previous = {} if overwrite else (folder.checked_manifest() or {})  # again, under the lock
    if previous.get("status") == runs.FINISHED:
        raise runs.RunFolderError(f"--out: {folder.path} already holds a finished run",
                                  "choose another --out or --tag", "replace it")
    latest = folder.checkpoints / "latest.pt"
    resume = not overwrite and bool(previous) and latest.exists()
    notes = check_resumable(cfg, folder) if resume else []
    removed, size = folder.remove_stale_temp_files()
    if removed:
        notes.append(f"{folder.path}: removed {removed} temp file(s) of a killed writer ({size / 1e6:.1f} MB)")
    if previous and not resume and folder.metrics.exists():
        trained = [r for r in runs.CSVMetrics(folder.metrics).rows if (r.get("env_steps") or "0").strip() != "0"]
        if trained:  # evaluations of training that no checkpoint can continue: starting over would drop them
            raise runs.RunFolderError(
                f"{latest}: missing, but {folder.metrics} holds {len(trained)} evaluation(s) after step 0 that it "
                f"would continue", "restore the checkpoint", "start over (discards metrics.csv)")
        notes.append(f"{folder.path}: unfinished run without a checkpoint (stopped before its first one); starting it "
                     f"over")
    if previous.get("status") == runs.RUNNING:
        notes.append(f"{folder.manifest}: said running, but no process was writing it (crashed or killed)")
    for note in notes:
        print(note, file=sys.stderr)

    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if resume:
        manifest = dict(previous, status=runs.RUNNING, end_time=None, **(extra_manifest or {}))
        manifest["resumed"] = [*previous.get("resumed", []), {"time": now, "after_status": previous.get("status"),
                                                               "host": socket.gethostname(), **runs.cpu_info()}]
    else:
        manifest = runs.new_manifest(cfg.run.seed, extra={"run_name": cfg.run_name, "tag": cfg.run.tag,
                                                          "backend": backend, **(extra_manifest or {})})
    manifest.update(opponent_file(cfg))
    if cfg.run.wandb and not manifest.get("wandb_id"):
        manifest["wandb_id"] = f"{cfg.run_name}-{int(time.time())}"[-64:]
    # manifest first: a kill right after it leaves an unfinished run (resumed or restarted), never a folder
    # with data but no manifest (which is refused)
    runs.atomic_write_json(folder.manifest, manifest)
    status = runs.FAILED
    logger: runs.Logger = runs.NoLogger()
    try:
        if not resume:
            for old in (folder.metrics, latest, folder.checkpoints / "final.pt"):
                old.unlink(missing_ok=True)
        runs.atomic_write_json(folder.config, cfg.to_dict())
        if cfg.run.wandb:
            logger = runs.WandbLogger(folder.path, cfg.run.wandb_project, cfg.run.wandb_group, cfg.run_name,
                                      cfg.to_dict(), mode=cfg.run.wandb_mode,
                                      tags=[cfg.run.tag] if cfg.run.tag else None, run_id=manifest["wandb_id"])
        if on_start is not None:
            on_start(folder, resume)
        summary = train_fn(cfg, folder, logger=logger, progress=progress)
        play_final_games(cfg, folder, backend)
        plot_curve([folder.path], folder.curve, title=cfg.run_name)
        if isinstance(logger, runs.WandbLogger):  # the curve and the evaluation rows as W&B sees them
            logger.log_files({"curve": folder.curve}, {"metrics": folder.metrics})
        status = runs.FINISHED
    except (KeyboardInterrupt, SystemExit):
        # SystemExit: Ray Tune ends a trial it was told to stop (grid run's Ctrl-C) with sys.exit(0) inside
        # the trial's report(); the run was stopped, not broken, and resumes like any interrupted run
        status = runs.INTERRUPTED
        raise
    finally:
        try:
            logger.close()
        finally:
            manifest.update(status=status, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            try:
                runs.atomic_write_json(folder.manifest, manifest)
            except OSError:
                if status == runs.FINISHED:
                    raise
                # disk full: the manifest keeps 'running' and nobody holds the lock, which reads as a crashed
                # writer; the run resumes from its last checkpoint either way
    manifest.update(env_steps=summary.env_steps, final_team_return=summary.final_team_return,
                    env_steps_per_sec=summary.env_steps_per_sec, wall_time_s=summary.wall_time_s,
                    timings_s=summary.timings)
    runs.atomic_write_json(folder.manifest, manifest)
    latest.unlink(missing_ok=True)  # only unfinished runs need it; final.pt stays
    return summary


def check_resumable(cfg: C.ExperimentConfig, folder: Any) -> list[str]:
    """Check that an unfinished folder can continue ``cfg`` from its ``latest.pt``, without writing anything.

    Returns:
        Notes on what the resume will repair (metrics.csv restored from the checkpoint's copy of its rows).

    Raises:
        RunFolderError: config.json unreadable or of another configuration, latest.pt unreadable or of another
            configuration, metrics.csv damaged while the checkpoint (format 1) has no copy of its rows.
    """
    import json

    from suPER import runs
    from suPER.loop import RESTART, read_checkpoint

    try:
        old = json.loads(folder.config.read_text())
    except FileNotFoundError:
        raise runs.RunFolderError(f"{folder.config}: missing in an unfinished run", "restore it", RESTART) from None
    except (OSError, ValueError) as exc:
        raise runs.RunFolderError(f"{folder.config}: expected the run's JSON config, got an unreadable file ({exc})",
                                  "restore it", RESTART) from None
    if not isinstance(old, dict):
        raise runs.RunFolderError(f"{folder.config}: expected the run's JSON config, got a JSON {type(old).__name__}",
                                  "restore it", RESTART)
    if without_volatile(old) != without_volatile(cfg.to_dict()):
        diff = first_difference(without_volatile(old), without_volatile(cfg.to_dict()))
        raise runs.RunFolderError(
            f"--out: {folder.path} holds an unfinished run of a different configuration ({diff})", "use another --tag",
            "start it over")
    latest = folder.checkpoints / "latest.pt"
    raw = read_checkpoint(latest, cfg, mmap=True)
    steps = int(raw["loop"]["env_steps"])
    record = raw.get("metrics")
    if record is None:  # format 1: no copy of the rows, so metrics.csv must be whole
        problem = runs.check_rows(folder.metrics)
        if problem is not None:
            raise runs.RunFolderError(f"{folder.metrics}: {problem}, and {latest} (format 1) holds no copy of the rows "
                                      f"to restore it from", "repair the file", RESTART)
        return []
    problem = runs.compare_with_record(folder.metrics, record)
    if problem is None:
        return []
    return [f"{folder.metrics}: {problem}; restored its {len(record['rows'])} row(s) up to env step {steps} from "
            f"{latest}"]


def first_difference(a: Any, b: Any, prefix: str = "") -> str:
    """``"dqn.lr: 0.001 vs 0.0003"`` for the first differing key of two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
        return "identical"
    return f"{prefix.rstrip('.')}: {a!r} in the folder vs {b!r} now"
