"""Run folders, atomic writes, the manifest, seeding, and the injected loggers.

A run writes everything about itself to ``OUT/<run-name>/``::

    config.json     the fully resolved ExperimentConfig
    manifest.json   versions, git commit, seed, host, start/end time, status
    metrics.csv     one row per evaluation (env_steps, team_return_mean, ...)
    curve.png       learning curve drawn from metrics.csv
    checkpoints/    trainer checkpoints

Every file is written atomically (write to a temp file in the same folder, fsync, rename), so a
killed run never leaves a half-written file. Trainers take a ``Logger`` and never import wandb.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

PACKAGES = ("super-marl", "torch", "ray", "pettingzoo", "magent2", "supersuit", "gymnasium", "numpy",
            "scipy", "wandb", "typer")
"""Distributions whose versions every manifest records."""

FINISHED = "finished"
RUNNING = "running"
FAILED = "failed"
INTERRUPTED = "interrupted"


class RunFolderError(ValueError):
    """The output folder cannot be used (unwritable, or already holds a finished run)."""


# --------------------------------------------------------------------------------------------------
# atomic files


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_write_bytes(path: Path, writer: Any) -> None:
    """Atomically write a file produced by ``writer(file_path)`` (e.g. torch.save, savefig)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# --------------------------------------------------------------------------------------------------
# run folder


@dataclass
class RunFolder:
    """Paths of one run's folder."""

    path: Path

    @property
    def config(self) -> Path:
        """The resolved config."""
        return self.path / "config.json"

    @property
    def manifest(self) -> Path:
        """Provenance and status."""
        return self.path / "manifest.json"

    @property
    def metrics(self) -> Path:
        """One row per evaluation."""
        return self.path / "metrics.csv"

    @property
    def curve(self) -> Path:
        """Learning-curve picture."""
        return self.path / "curve.png"

    @property
    def checkpoints(self) -> Path:
        """Checkpoint folder."""
        return self.path / "checkpoints"

    def read_manifest(self) -> dict[str, Any]:
        """The manifest, or {} when there is none yet."""
        try:
            return dict(json.loads(self.manifest.read_text()))
        except (OSError, ValueError):
            return {}

    def status(self) -> str | None:
        """``finished`` / ``running`` / ``failed`` / ``interrupted``, or None for a fresh folder."""
        return self.read_manifest().get("status")


def prepare_run_folder(out: str | Path, name: str, overwrite: bool = False) -> RunFolder:
    """Create (or reuse) ``out/name`` after checking it is safe to write there.

    Raises RunFolderError when ``out`` is not writable or the folder already holds a finished run
    (unless ``overwrite``); nothing existing is touched in that case.
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"--out: cannot create folder {out} ({exc.strerror})") from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise RunFolderError(f"--out: folder {out} is not writable")
    folder = RunFolder(out / name)
    if folder.status() == FINISHED and not overwrite:
        raise RunFolderError(
            f"--out: {folder.path} already holds a finished run; choose another --out or --tag, or pass --overwrite")
    folder.path.mkdir(parents=True, exist_ok=True)
    return folder


def git_commit(cwd: Path | None = None) -> str | None:
    """The current git commit of the source tree (with '-dirty' if modified), or None."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "")


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (None when absent)."""
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def new_manifest(seed: int, argv: list[str] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Provenance for a starting run."""
    return {
        "status": RUNNING,
        "seed": seed,
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "end_time": None,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "command": argv if argv is not None else sys.argv,
        "git_commit": git_commit(),
        "packages": package_versions(),
        **(extra or {}),
    }


@dataclass
class Summary:
    """What a finished training run reports."""

    run_dir: Path
    env_steps: int
    final_team_return: float
    env_steps_per_sec: float
    wall_time_s: float
    timings: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# seeding


def seed_everything(seed: int, deterministic_torch: bool = True) -> None:
    """Seed python, numpy's global RNG and torch (and cuDNN determinism), all from ``seed``.

    Components with their own randomness (replay sampling, relay, envs) get their own generators
    derived from the same seed; nothing in this project draws from numpy's global RNG on purpose.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    import torch

    torch.manual_seed(seed)
    if deterministic_torch and torch.cuda.is_available():
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


# --------------------------------------------------------------------------------------------------
# loggers


class Logger(Protocol):
    """Where trainers send scalar metrics; injected, so trainers never import wandb."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` at ``step`` env steps."""
        ...

    def close(self) -> None:
        """Flush and release."""
        ...


class NoLogger:
    """Discards everything (the default)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Ignore."""

    def close(self) -> None:
        """Nothing to release."""


class MultiLogger:
    """Fans out to several loggers."""

    def __init__(self, loggers: Iterable[Logger]) -> None:
        self.loggers = list(loggers)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log to each."""
        for lg in self.loggers:
            lg.log(metrics, step)

    def close(self) -> None:
        """Close each."""
        for lg in self.loggers:
            lg.close()


class WandbError(RuntimeError):
    """W&B online logging cannot start (no credentials, or the service does not answer in time): the run
    fails before it trains (exit 1), instead of hanging or training unlogged."""


WANDB_INIT_TIMEOUT_S = 20.0
"""How long ``wandb.init`` may try to reach the service (wandb's default is 90 s, plus retries); override
with ``WANDB_INIT_TIMEOUT``. Offline mode never waits."""


class WandbLogger:
    """Weights & Biases through the official package; offline by default (files under the run folder).

    Online mode needs credentials wandb reads itself: ``WANDB_API_KEY`` in the environment, or a netrc
    file (``~/.netrc`` or ``$NETRC``; what ``wandb login`` writes, and what cluster/aws.yaml installs on
    the nodes). The key is never passed to ``wandb.init`` nor put into the run's config, so it cannot
    reach config.json, manifest.json or the W&B files. Online mode fails within ``WANDB_INIT_TIMEOUT_S``
    with :class:`WandbError` when the service does not answer (decisions.md: fail, don't fall back).
    """

    def __init__(self, run_dir: Path, project: str, group: str, name: str, config: Mapping[str, Any],
                 mode: str = "offline", tags: list[str] | None = None, run_id: str | None = None) -> None:
        """Start (or, with the ``run_id`` of an earlier session, continue) a W&B run.

        Raises:
            WandbError: online, and no credentials or no answer within the init timeout.
        """
        if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _netrc_path().is_file()):
            raise WandbError("--wandb-mode online: no W&B credentials (set WANDB_API_KEY, run `wandb login`, "
                             "or use --wandb-mode offline)")
        import wandb  # lazy: optional at runtime

        self._wandb = wandb
        try:
            timeout = float(os.environ.get("WANDB_INIT_TIMEOUT") or WANDB_INIT_TIMEOUT_S)
        except ValueError:
            timeout = WANDB_INIT_TIMEOUT_S
        # wandb prints its login notes to stderr unless silent, and Settings(silent=...) comes too late for them
        silent, os.environ["WANDB_SILENT"] = os.environ.get("WANDB_SILENT"), "true"
        try:
            self.run = wandb.init(project=project, group=group or None, name=name, config=dict(config),
                                  dir=str(run_dir), mode=mode,  # type: ignore[arg-type]
                                  tags=tags or None, reinit="finish_previous", id=run_id,
                                  resume="allow" if run_id else None,
                                  settings=wandb.Settings(init_timeout=timeout, silent=True))
        except (wandb.errors.Error, OSError, TimeoutError, ValueError) as exc:  # ValueError: bad WANDB_* env
            reason = " ".join(str(exc).split())[:300]
            raise WandbError(f"--wandb-mode {mode}: W&B did not start within {timeout:g} s ({reason}); check the "
                             f"network and credentials, or use --wandb-mode offline and `wandb sync` later") from None
        finally:
            if silent is None:
                os.environ.pop("WANDB_SILENT", None)
            else:
                os.environ["WANDB_SILENT"] = silent

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log at env-step ``step``."""
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Finish the W&B run."""
        self.run.finish()


def _netrc_path() -> Path:
    """The netrc file wandb reads its credentials from (``$NETRC``, else ``~/.netrc``)."""
    return Path(os.environ.get("NETRC") or "~/.netrc").expanduser()


class CSVMetrics:
    """``metrics.csv``: one row per evaluation; rewritten atomically on each append.

    Columns are those of the first row, extended by any new key a later row brings (earlier rows leave
    it empty; e.g. ``loss`` appears once learning starts). Existing rows are loaded on construction so
    a resumed run appends.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            with self.path.open() as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or [])
                self.rows = list(reader)

    def append(self, row: Mapping[str, Any]) -> None:
        """Add one row and rewrite the file atomically."""
        self.columns += [k for k in row if k not in self.columns]
        self.rows.append(dict(row))
        self._write()

    def _write(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: _fmt(r.get(k, "")) for k in self.columns})
        atomic_write_text(self.path, buf.getvalue())

    def truncate_after(self, env_steps: int) -> None:
        """Drop rows logged after ``env_steps`` (used when resuming from an earlier checkpoint); rewrites the file."""
        kept = [r for r in self.rows if int(float(r["env_steps"])) <= env_steps]
        if len(kept) != len(self.rows):
            self.rows = kept
            self._write()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def read_metrics(path: Path) -> dict[str, np.ndarray]:
    """Load a metrics.csv into column arrays (numeric columns as float)."""
    with Path(path).open() as f:
        rows = list(csv.DictReader(f))
    cols: dict[str, np.ndarray] = {}
    if not rows:
        return cols
    for k in rows[0]:
        try:
            cols[k] = np.array([float(r[k]) if r[k] != "" else np.nan for r in rows])
        except ValueError:
            cols[k] = np.array([r[k] for r in rows])
    return cols


def namespaced_metrics(row: dict[str, Any], timings: dict[str, float]) -> dict[str, float]:
    """metrics.csv columns -> namespaced W&B keys (charts/, losses/, relay/, perf/; see docs/metrics.md)."""
    out: dict[str, float] = {}
    for k, v in row.items():
        if k == "env_steps":
            continue
        if k == "loss" or k.endswith("_loss"):
            out[f"losses/{k}"] = v
        elif k.startswith(("fraction_shared", "relayed_")):
            out[f"relay/{k}"] = v
        elif k in ("env_steps_per_sec", "wall_time_s", "updates"):
            out[f"perf/{k}"] = v
        else:
            out[f"charts/{k}"] = v
    out.update({f"perf/time_{k}_s": v for k, v in timings.items()})
    return out
