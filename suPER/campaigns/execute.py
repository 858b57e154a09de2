"""Executing one run into its run folder: a fresh start, a resume from its latest checkpoint, or a refusal.

Used by ``super-marl train``, by every Ray Tune trial of ``grid run`` and by every submitted job.
"""

from __future__ import annotations

from typing import Any

from suPER import config as C

# --------------------------------------------------------------------------------------------------
# executing one run: fresh, resumed or refused

BACKENDS = ("native", "rllib")
"""Trainer backends ``execute`` can call."""

TRAINERS: dict[str, str] = {
    "dqn": "suPER.native.dqn", "ddqn": "suPER.native.dqn",
    "seac": "seac.trainer", "maddpg": "suPER.baselines.maddpg", "qmix": "suPER.baselines.qmix",
}
"""Algorithm key -> module whose ``train(cfg, folder, logger, progress) -> Summary`` the native backend calls."""


def trainer_for(backend: str, algo: str = "ddqn") -> Any:
    """The ``train(cfg, folder, logger, progress) -> Summary`` function of a backend and algorithm (imported lazily).

    Raises:
        ConfigError: unknown or unavailable backend, or an algorithm the backend does not run.
    """
    import importlib

    if backend == "rllib":
        if algo not in C.DQN_ALGOS:
            raise C.ConfigError(f"--backend rllib: runs --algo {' or '.join(C.DQN_ALGOS)} only, got --algo {algo}")
        try:
            from suPER.core.rllib_runner import train_rllib  # type: ignore[import-not-found]
        except ImportError as exc:
            raise C.ConfigError(f"--backend rllib: not available in this version ({exc})") from exc
        return train_rllib
    if backend != "native":
        raise C.ConfigError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if algo not in TRAINERS:
        raise C.ConfigError(f"--algo: expected one of {', '.join(TRAINERS)}, got {algo!r}")
    try:
        module = importlib.import_module(TRAINERS[algo])
    except ModuleNotFoundError as exc:
        raise C.ConfigError(f"--algo {algo}: its trainer ({TRAINERS[algo]}) is not available in this version") from exc
    return module.train


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


def execute(cfg: C.ExperimentConfig, overwrite: bool = False, backend: str = "native", progress: Any = None,
            on_start: Any = None, extra_manifest: dict[str, Any] | None = None) -> Any:
    """Train one run into ``cfg.run.out/cfg.run_name``: a fresh start, a resume, or a refusal.

    * a finished run is refused (``RunFolderError``) unless ``overwrite``;
    * an unfinished run (manifest ``running`` / ``failed`` / ``interrupted``) with ``checkpoints/latest.pt``
      is resumed from that checkpoint, provided its config.json matches ``cfg`` (up to
      ``config.VOLATILE_RUN_KEYS``);
    * anything else starts fresh (old metrics.csv and latest.pt are removed).

    The manifest records status, provenance and every resume; when the run finishes the large
    ``latest.pt`` is removed (``final.pt`` stays) and ``curve.png`` is drawn.

    Args:
        cfg: validated config.
        overwrite: replace a finished run (or an unfinished one) instead of refusing / resuming it.
        backend: trainer backend (``BACKENDS``).
        progress: per-fragment callback ``(env_steps, stats)`` passed to the trainer.
        on_start: called as ``on_start(folder, resumed)`` once the folder is ready, before training.
        extra_manifest: extra manifest fields (e.g. the grid entry).

    Returns:
        The trainer's Summary.
    """
    import json
    import socket
    import time

    from suPER import runs
    from suPER.plotting import plot_curve

    train_fn = trainer_for(backend, cfg.run.algo)  # before touching the disk: an unavailable backend writes nothing
    folder = runs.prepare_run_folder(cfg.run.out, cfg.run_name, overwrite=overwrite)
    previous = folder.read_manifest()
    latest = folder.checkpoints / "latest.pt"
    resume = not overwrite and latest.exists() and previous.get("status") != runs.FINISHED
    if resume:
        try:
            old = json.loads(folder.config.read_text())
        except (OSError, ValueError):
            old = None
        if old is None or C.without_volatile(old) != C.without_volatile(cfg.to_dict()):
            diff = first_difference(C.without_volatile(old or {}), C.without_volatile(cfg.to_dict()))
            raise runs.RunFolderError(
                f"--out: {folder.path} holds an unfinished run of a different configuration ({diff}); pass "
                f"--overwrite to start it over, or use another --tag")
    else:
        folder.metrics.unlink(missing_ok=True)
        latest.unlink(missing_ok=True)
    runs.atomic_write_json(folder.config, cfg.to_dict())
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if resume:
        manifest = dict(previous, status=runs.RUNNING, end_time=None, **(extra_manifest or {}))
        manifest["resumed"] = [*previous.get("resumed", []), {"time": now, "after_status": previous.get("status"),
                                                               "host": socket.gethostname()}]
    else:
        manifest = runs.new_manifest(cfg.run.seed, extra={"run_name": cfg.run_name, "tag": cfg.run.tag,
                                                          "backend": backend, **(extra_manifest or {})})
    manifest.update(opponent_file(cfg))
    if cfg.run.wandb and not manifest.get("wandb_id"):
        manifest["wandb_id"] = f"{cfg.run_name}-{int(time.time())}"[-64:]
    runs.atomic_write_json(folder.manifest, manifest)
    logger: runs.Logger = runs.NoLogger()
    if cfg.run.wandb:
        try:
            logger = runs.WandbLogger(folder.path, cfg.run.wandb_project, cfg.run.wandb_group, cfg.run_name,
                                      cfg.to_dict(), mode=cfg.run.wandb_mode,
                                      tags=[cfg.run.tag] if cfg.run.tag else None, run_id=manifest["wandb_id"])
        except runs.WandbError:  # nothing trained: the manifest must not say "running"
            manifest.update(status=runs.FAILED, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            runs.atomic_write_json(folder.manifest, manifest)
            raise
    if on_start is not None:
        on_start(folder, resume)
    status = runs.FAILED
    try:
        summary = train_fn(cfg, folder, logger=logger, progress=progress)
        status = runs.FINISHED
    except KeyboardInterrupt:
        status = runs.INTERRUPTED
        raise
    finally:
        logger.close()
        manifest.update(status=status, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        runs.atomic_write_json(folder.manifest, manifest)
    manifest.update(env_steps=summary.env_steps, final_team_return=summary.final_team_return,
                    env_steps_per_sec=summary.env_steps_per_sec, wall_time_s=summary.wall_time_s,
                    timings_s=summary.timings)
    runs.atomic_write_json(folder.manifest, manifest)
    latest.unlink(missing_ok=True)  # only unfinished runs need it; final.pt stays
    plot_curve([folder.path], folder.curve, title=cfg.run_name)
    return summary


def first_difference(a: Any, b: Any, prefix: str = "") -> str:
    """``"dqn.lr: 0.001 vs 0.0003"`` for the first differing key of two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
        return "identical"
    return f"{prefix.rstrip('.')}: {a!r} in the folder vs {b!r} now"
