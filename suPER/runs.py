"""Run folders, atomic writes, the manifest, seeding, and the injected loggers.

A run writes everything about itself to ``OUT/<run-name>/``::

    config.json     the fully resolved ExperimentConfig
    manifest.json   versions, git commit, seed, host, start/end time, status
    metrics.csv     one row per evaluation (env_steps, team_return_mean, ...)
    curve.png       learning curve drawn from metrics.csv
    checkpoints/    trainer checkpoints

Every file is written atomically (write to a temp file in the same folder, fsync, rename), so a
killed run never leaves a half-written file; the temp files a killed writer leaves behind are removed by
the next writer (``RunFolder.remove_stale_temp_files``). One process at a time writes a folder: it holds
``RunFolder.lock()`` (``fcntl.flock`` on ``.writer.lock``, which the kernel releases when the holder dies,
even by SIGKILL, so a crash never leaves the folder stuck). Trainers take a ``Logger`` and never import wandb.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import functools
import io
import itertools
import json
import os
import platform
import random
import signal
import socket
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from suPER.config import ConfigError
from suPER.metrics import wandb_key

PACKAGES = ("super-marl", "torch", "ray", "pettingzoo", "magent2", "supersuit", "gymnasium", "numpy",
            "scipy", "wandb", "typer")
"""Distributions whose versions every manifest records."""

FINISHED = "finished"
RUNNING = "running"
FAILED = "failed"
INTERRUPTED = "interrupted"


START_OVER_ELSEWHERE = "move the run folder aside (this command then starts that run over)"
"""The start-over remedy of commands without ``--overwrite`` (``grid run``, ``reproduce``): a run whose folder is
gone is started over, where ``train`` would refuse or overwrite."""


class RunFolderError(ConfigError):
    """The output folder cannot be used as asked (unwritable, a finished run, a damaged file, another writer):
    bad input, one line, exit 2, nothing changed.

    The line is ``problem; remedies``. ``keep`` is the remedy that keeps what the folder holds ("restore it");
    ``overwrite`` is what ``--overwrite`` would do ("start the run over (discards its metrics.csv)"), the remedy
    that throws the folder's run away. Only ``train`` has that option, so the error carries its parts and each
    command words the last remedy its own way (``message``); ``str()`` is train's wording.
    """

    def __init__(self, problem: str, keep: str = "", overwrite: str = "") -> None:
        self.problem, self.keep, self.overwrite = problem, keep, overwrite
        super().__init__(self.message(can_overwrite=True))

    def message(self, can_overwrite: bool) -> str:
        """The line for a command that has (``can_overwrite``) or lacks ``--overwrite``."""
        start_over = "" if not self.overwrite else (f"pass --overwrite to {self.overwrite}" if can_overwrite
                                                    else START_OVER_ELSEWHERE)
        remedies = ", or ".join(r for r in (self.keep, start_over) if r)
        return f"{self.problem}; {remedies}" if remedies else self.problem


class RunFailure(RuntimeError):
    """A run stopped for an outside reason (disk full, I/O error): one line, exit 1. The folder stays
    resumable: the atomic writes keep every file whole and the last checkpoint stands."""


def describe_os_error(exc: OSError) -> str:
    """``"runs/x/checkpoints/latest.pt: No space left on device"`` for the one-line message of a failed write."""
    what = exc.strerror or str(exc)
    hint = " (free some space)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return f"{exc.filename}: {what}{hint}" if exc.filename else f"{what}{hint}"


# --------------------------------------------------------------------------------------------------
# atomic files


FINAL_GAMES_FILE = "final_games.json"
"""A run's final policy in varied games (``run.final_games``: battle's 100 against the exploring opponent)."""

TEMP_PREFIXES = ("config.json", "manifest.json", "metrics.csv", "curve.png", "latest.pt", "final.pt", FINAL_GAMES_FILE)
"""Files of a run folder written by the atomic writers; their temp files are ``.<name>.<random><suffix>``."""


@functools.cache
def _umask() -> int:
    """This process's umask, read once (Linux: from /proc without changing it; elsewhere set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _as_created(fd: int) -> None:
    """Give a temp file the mode an ordinary new file gets (0666 less the umask): ``mkstemp`` makes it 0600, and the
    rename keeps that, which would leave figures and tables in a shared results folder readable by their owner
    only."""
    os.fchmod(fd, 0o666 & ~_umask())


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old or the new file, never half.

    Raises:
        OSError: the write failed (e.g. disk full); ``filename`` is ``path`` (not the temp file), the old
            file is untouched and the temp file removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        _as_created(fd)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
        raise


def _named(exc: OSError, path: Path) -> OSError:
    """The same error, naming the destination: the user knows ``latest.pt``, not ``.latest.pt.k2j4x9.pt``."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else exc


def atomic_write_json(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """Atomically write ``rows`` as CSV with a header (``columns``; default: the first row's keys)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns if columns is not None else rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


@contextmanager
def interrupt_after() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then deliver it to the handler that was in place.

    For writes by other libraries' code: an interrupt inside ``torch.save``'s zip writer comes out as a
    ``RuntimeError`` ("unexpected pos"), i.e. exit 1 with a traceback instead of 130, and loses the checkpoint
    being written. Only the main thread can hold signals; elsewhere the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def atomic_write_bytes(path: Path, writer: Any) -> None:
    """Atomically write a file produced by ``writer(file_path)`` (e.g. torch.save, savefig), fsynced before the
    rename so that a crash of the machine cannot leave an empty file under the final name. A Ctrl-C during the
    write takes effect once the file is in place (:func:`interrupt_after`).

    Raises:
        OSError: as :func:`atomic_write_text`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    try:
        _as_created(fd)
    finally:
        os.close(fd)
    try:
        with interrupt_after():
            writer(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, RuntimeError) and "file write failed" in str(exc):
            # torch's zip writer reports a failed write (a full disk) as a RuntimeError: it is an OSError here, so
            # every caller (run folders, population folders) turns it into its one-line failure
            raise OSError(errno.EIO, "write failed (disk full?)", str(path)) from None
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
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


@dataclass(frozen=True)
class RunProgress:
    """Where a run stands (``RunFolder.progress``): env steps and ``wall_time_s`` of its last evaluation row (NaN
    without that column), its budget, and the seconds left at its recent pace (None until two rows exist)."""

    env_steps: int
    budget: int
    seconds_left: float | None
    wall_time_s: float

    def describe(self) -> str:
        """``42,500/100,000, ~2.6 h left`` (the time left only when known)."""
        text = f"{self.env_steps:,}/{self.budget:,}"
        if self.seconds_left is not None:
            left = self.seconds_left
            text += f", ~{left / 3600:.1f} h left" if left >= 5400 else f", ~{max(left / 60, 1):.0f} min left"
        return text


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
    def final_games(self) -> Path:
        """The final policy's varied games (``run.final_games``), in runs that play them."""
        return self.path / FINAL_GAMES_FILE

    @property
    def curve(self) -> Path:
        """Learning-curve picture."""
        return self.path / "curve.png"

    @property
    def checkpoints(self) -> Path:
        """Checkpoint folder."""
        return self.path / "checkpoints"

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the one process writing the folder; holds its pid, host and start time."""
        return self.path / ".writer.lock"

    def read_manifest(self) -> dict[str, Any]:
        """The manifest, or {} when there is none yet (or it cannot be read: see ``checked_manifest``)."""
        try:
            return dict(json.loads(self.manifest.read_text()))
        except (OSError, ValueError, TypeError):
            return {}

    def status(self) -> str | None:
        """``finished`` / ``running`` / ``failed`` / ``interrupted``, or None for a fresh folder."""
        return self.read_manifest().get("status")

    def progress(self, rate_rows: int = 5) -> RunProgress | None:
        """How far the run is, from its config and metrics.csv; None when the folder has no readable config or
        metrics yet. What ``grid list`` shows for an unfinished run.

        The time left is ``(budget - env_steps) x median(dwall / dsteps)`` over the last ``rate_rows`` intervals
        between evaluation rows (``wall_time_s`` includes evaluation and checkpoints, and continues across
        resumes), so it is the recent pace of this run on this machine; the median, so that one slow interval
        (another job's burst beside it, a resume's start-up) does not set it. None with fewer than two rows.
        """
        try:
            budget = int(json.loads(self.config.read_text())["run"]["num_timesteps"])
            with self.metrics.open(newline="") as f:
                rows = list(csv.DictReader(f))  # at most a few hundred evaluation rows
            steps = [float(r["env_steps"]) for r in rows]
            walls = [float(r.get("wall_time_s") or "nan") for r in rows]
        except (OSError, ValueError, TypeError, KeyError):
            return None
        env_steps = int(steps[-1]) if steps else 0
        seconds_left = None
        recent = list(zip(steps, walls, strict=True))[-(rate_rows + 1):]
        paces = [(w1 - w0) / (s1 - s0) for (s0, w0), (s1, w1) in itertools.pairwise(recent)
                 if s1 > s0 and w1 > w0]  # NaN (no wall_time_s column) fails the comparison
        if paces:
            seconds_left = max(budget - env_steps, 0) * statistics.median(paces)
        return RunProgress(env_steps, budget, seconds_left, walls[-1] if walls else float("nan"))

    def data_files(self) -> list[str]:
        """The files (relative to the folder) that make it hold a run: config, metrics, checkpoints."""
        names = ["config.json", "metrics.csv", "checkpoints/latest.pt", "checkpoints/final.pt",
                 "checkpoints/rllib_final"]
        return [n for n in names if (self.path / n).exists()]

    def checked_manifest(self) -> dict[str, Any] | None:
        """The manifest, None for a fresh folder; refuses a folder whose run cannot be told.

        Why: without a readable manifest a finished run looks fresh, and starting it again would replace
        its metrics.csv and final.pt.

        Raises:
            RunFolderError: manifest.json exists but is not a JSON object with a status, or it is missing
                while the folder holds config.json, metrics.csv or a checkpoint.
        """
        start_over = f"start {self.path} over"
        if not self.manifest.exists():
            held = self.data_files()
            if held:
                raise RunFolderError(f"{self.manifest}: missing, but the folder holds {', '.join(held)} (a run whose "
                                     f"status cannot be told)", "restore manifest.json", start_over)
            return None
        try:
            data = json.loads(self.manifest.read_text())
        except UnicodeDecodeError:
            raise RunFolderError(f"{self.manifest}: expected a JSON manifest, got undecodable bytes", "repair it",
                                 start_over) from None
        except ValueError as exc:
            raise RunFolderError(f"{self.manifest}: expected a JSON manifest, got invalid JSON ({exc})", "repair it",
                                 start_over) from None
        except OSError as exc:
            raise RunFolderError(f"{self.manifest}: cannot be read ({exc.strerror})", "repair it", start_over) from None
        if not isinstance(data, dict) or data.get("status") not in (FINISHED, RUNNING, FAILED, INTERRUPTED):
            got = f"status {data.get('status')!r}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise RunFolderError(f"{self.manifest}: expected a manifest with status finished, running, failed or "
                                 f"interrupted, got {got}", "repair it", start_over)
        return data

    def writer_exited(self) -> bool:
        """True when the process that held the writer lock is gone: its lock file names a pid on this host that no
        longer exists (a killed writer leaves the file; one that ends releases it and sets the manifest's status),
        so a manifest saying ``running`` is stale. False when the writer may live, runs on another host, or left
        no lock file (folders written before the lock existed): what cannot be told is not called stopped.

        Read-only on purpose: probing the flock itself could make a writer starting at that instant refuse.
        """
        try:
            info = _holder(self.lock_file.read_bytes())
        except OSError:
            return False
        if info is None or info.get("host") != socket.gethostname():
            return False
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, KeyError, TypeError, ValueError, OverflowError):
            return False
        return False

    def lock(self, elsewhere: str = "--out or --tag") -> FolderLock:
        """Take the writer lock of this folder (see :class:`FolderLock`); the folder must exist.

        Args:
            elsewhere: the flags that choose another folder, named in the refusal (a population has no --tag).
        """
        return FolderLock(self, elsewhere)

    def remove_stale_temp_files(self) -> tuple[int, int]:
        """Delete the temp files killed writers left (``.latest.pt.*`` and the like); call only holding ``lock()``.

        Returns:
            (number of files, bytes) removed.
        """
        count = size = 0
        for where in (self.path, self.checkpoints):
            if not where.is_dir():
                continue
            for p in where.iterdir():
                if p.is_file() and any(p.name.startswith(f".{name}.") for name in TEMP_PREFIXES):
                    size += p.stat().st_size
                    p.unlink(missing_ok=True)
                    count += 1
        return count, size


def _open_regular(path: Path, flags: int) -> int:
    """``os.open`` of a file the suite writes in a run or population folder, never through a link: a symbolic link
    (``O_NOFOLLOW``) or anything but a regular file (a FIFO, a device) there is refused, so a planted link cannot make
    the writer truncate the link's target (any file the user can write).

    Raises:
        RunFolderError: naming the file and what it is.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise RunFolderError(f"{path}: expected a regular file written by this suite, got a symbolic link (not "
                             f"followed); remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFolderError(f"{path}: expected a regular file written by this suite, got another kind of file "
                             f"(not used); remove it")
    return fd


class FolderLock:
    """The writer lock of a run folder: ``fcntl.flock`` on ``.writer.lock``.

    Why flock: the kernel drops it when the holder's process ends in any way (SIGKILL included), so a
    crashed writer never leaves a folder stuck, and a second writer (the same command started twice, a job
    resubmitted while the first still runs) is refused at once instead of mixing its files with the first.
    The file is removed on release (by the holder, while holding it); ``acquire`` checks that the file it
    locked is still the one on disk, so a file removed in between is never trusted.
    """

    def __init__(self, folder: RunFolder, elsewhere: str = "--out or --tag") -> None:
        self.folder = folder
        self.elsewhere = elsewhere
        self.fd: int | None = None

    def acquire(self) -> FolderLock:
        """Take the lock or refuse.

        Raises:
            RunFolderError: another live process holds it (its pid and host in the message).
        """
        path = self.folder.lock_file
        while True:
            fd = _open_regular(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunFolderError(
                    f"--out: {self.folder.path} is being written by another process ({holder}); wait for it to "
                    f"finish or stop it, or use another {self.elsewhere}") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode())
        self.fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self.fd is None:
            return
        try:
            self.folder.lock_file.unlink(missing_ok=True)
        except OSError:
            pass  # an unremovable lock file is harmless: the next writer locks it again
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire() if self.fd is None else self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(lock_bytes: bytes) -> dict[str, Any] | None:
    """What a lock file says of its writer (``{"pid", "host", "since"}`` as ``FolderLock.acquire`` writes it);
    None when it is empty or not such a JSON object (a writer between truncating and writing it)."""
    try:
        info = json.loads(lock_bytes or b"{}")
    except ValueError:
        return None
    return info if isinstance(info, dict) and info else None


def _read_holder(fd: int) -> str:
    """The lock holder for a refusal message: its pid, host and start time, or "holder unknown"."""
    try:
        info = _holder(os.pread(fd, 4096, 0)) or {}
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, KeyError):
        return "holder unknown"


def writable_folder(path: Path, flag: str = "--out", create: bool = True) -> Path:
    """Create ``path`` (with its parents) and check this process can write there, before anything starts.

    With ``create=False`` (a dry run: nothing may be written) only a file in the way is refused.

    Raises:
        RunFolderError: it cannot be created (a file in the way, no permission) or is not writable; the line
            names ``flag``.
    """
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"{flag}: expected a folder, got the file {path}")
    if not create:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"{flag}: cannot create folder {path} ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunFolderError(f"{flag}: folder {path} is not writable")
    return path


def prepare_run_folder(out: str | Path, name: str, overwrite: bool = False) -> RunFolder:
    """Create (or reuse) ``out/name`` after checking it is safe to write there.

    Raises RunFolderError when ``out`` is not writable, the folder already holds a finished run or its
    manifest cannot be read (unless ``overwrite``); nothing existing is touched in that case. Callers that
    write the folder then take ``folder.lock()`` and check again under the lock.
    """
    out = writable_folder(Path(out))
    folder = RunFolder(out / name)
    if not overwrite and (folder.checked_manifest() or {}).get("status") == FINISHED:
        raise RunFolderError(f"--out: {folder.path} already holds a finished run", "choose another --out or --tag",
                             "replace it")
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


CPU_KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")
"""Environment variables that pin the instruction set of torch's CPU kernels (ATen, oneDNN convolutions, MKL
GEMM); ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2`` makes an AVX-512 machine compute what an
AVX2 one does."""


def cpu_info() -> dict[str, Any]:
    """The CPU a run trains on: its model name, the vector instruction set torch's kernels use, and the
    ``CPU_KERNEL_ENV`` variables that were set.

    Same seed, commit and packages reproduce a run bit for bit only with the same kernels: torch picks them by
    the instruction set (AVX2 and AVX-512 round differently), so trajectories part after the first updates
    (docs/design.md, "Reproducibility across machines").
    """
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        capability: str | None = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        capability = None
    pinned = {k: os.environ[k] for k in CPU_KERNEL_ENV if os.environ.get(k)}
    return {"cpu": model or platform.processor() or None, "cpu_capability": capability,
            **({"cpu_kernel_env": pinned} if pinned else {})}


def new_manifest(seed: int, argv: list[str] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Provenance for a starting run."""
    return {
        "status": RUNNING,
        "seed": seed,
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "end_time": None,
        "host": socket.gethostname(),
        **cpu_info(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        # Python's string hash seed: iteration over a set of strings follows it, and RLlib's connectors iterate
        # sets of agent ids, so an RLlib run repeats only under the same value ("random" when unset)
        "python_hash_seed": os.environ.get("PYTHONHASHSEED") or "random",
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
    with :class:`WandbError` when the service does not answer (docs/design.md, "Security": fail, don't fall back).
    """

    def __init__(self, run_dir: Path, project: str, group: str, name: str, config: Mapping[str, Any],
                 mode: str = "offline", tags: list[str] | None = None, run_id: str | None = None) -> None:
        """Start (or, with the ``run_id`` of an earlier session, continue) a W&B run.

        Raises:
            WandbError: online, and no credentials or no answer within the init timeout.
        """
        check_wandb_credentials(mode)
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

    def log_files(self, images: Mapping[str, Path], tables: Mapping[str, Path]) -> None:
        """Log figures (PNG) as W&B images and CSV files as W&B tables, each under its key, so a W&B user sees
        what ``plot`` draws; missing files are left out."""
        wandb = self._wandb
        logged: dict[str, Any] = {key: wandb.Image(str(path)) for key, path in images.items() if Path(path).is_file()}
        for key, path in tables.items():
            if Path(path).is_file():
                with Path(path).open(newline="") as f:
                    rows = list(csv.reader(f))
                if rows:
                    logged[key] = wandb.Table(columns=rows[0], data=rows[1:])
        if logged:
            self.run.log(logged)

    def close(self) -> None:
        """Finish the W&B run."""
        self.run.finish()


def check_wandb_credentials(mode: str) -> None:
    """Online W&B needs credentials wandb reads itself (``WANDB_API_KEY`` or a netrc file); checked before a
    run writes anything, so a run that cannot log is refused rather than started.

    Raises:
        WandbError: online and neither is there.
    """
    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _netrc_path().is_file()):
        raise WandbError("--wandb-mode online: no W&B credentials (set WANDB_API_KEY, run `wandb login`, "
                         "or use --wandb-mode offline)")


def _netrc_path() -> Path:
    """The netrc file wandb reads its credentials from (``$NETRC``, else ``~/.netrc``)."""
    return Path(os.environ.get("NETRC") or "~/.netrc").expanduser()


class CSVMetrics:
    """``metrics.csv``: one row per evaluation; rewritten atomically on each append.

    Columns are those of the first row, extended by any new key a later row brings (earlier rows leave
    it empty; e.g. ``loss`` appears once learning starts). Rows are kept as the strings written to the
    file, so ``record()`` (which checkpoints store) restores the file byte for byte. Existing rows are
    loaded on construction so a resumed run appends; a file that cannot be read loads as empty with
    ``load_error`` set (resuming then restores it from the checkpoint's record).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.columns: list[str] = []
        self.rows: list[dict[str, str]] = []
        self.load_error: str | None = None
        if self.path.exists():
            try:
                with self.path.open(newline="") as f:
                    reader = csv.DictReader(f)
                    self.columns = list(reader.fieldnames or [])
                    self.rows = [{k: v for k, v in r.items() if k is not None} for r in reader]
            except (OSError, UnicodeDecodeError, csv.Error) as exc:
                self.columns, self.rows, self.load_error = [], [], str(exc)

    def append(self, row: Mapping[str, Any]) -> None:
        """Add one row and rewrite the file atomically."""
        self.columns += [k for k in row if k not in self.columns]
        self.rows.append({k: _cell(v) for k, v in row.items()})
        self._write()

    def _write(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: r.get(k) or "" for k in self.columns})
        atomic_write_text(self.path, buf.getvalue())

    def record(self) -> dict[str, Any]:
        """The rows so far as checkpoints store them: ``{"columns": [...], "rows": [[cell, ...], ...]}``."""
        return {"columns": list(self.columns), "rows": [[r.get(k) or "" for k in self.columns] for r in self.rows]}

    def restore(self, record: Mapping[str, Any]) -> bool:
        """Make the rows exactly ``record`` (a checkpoint's copy); rewrite the file when it differs.

        Returns:
            True when the file was rewritten.
        """
        columns = [str(c) for c in record["columns"]]
        rows = [dict(zip(columns, map(str, cells), strict=True)) for cells in record["rows"]]
        if self.path.exists() and self.load_error is None and self.record() == {"columns": columns,
                                                                                "rows": [[r[k] for k in columns]
                                                                                         for r in rows]}:
            return False
        self.columns, self.rows, self.load_error = columns, rows, None
        self._write()
        return True

    def truncate_after(self, env_steps: int) -> None:
        """Drop rows logged after ``env_steps`` (used when resuming from an earlier checkpoint); rewrites the file."""
        kept = [r for r in self.rows if int(float(r["env_steps"])) <= env_steps]
        if len(kept) != len(self.rows):
            self.rows = kept
            self._write()


def compare_with_record(path: Path, record: Mapping[str, Any]) -> str | None:
    """How ``metrics.csv`` departs from a checkpoint's record of its rows, or None when it holds them all.

    Rows after the record's (logged after the checkpoint) are not a departure: a resume logs them again.
    """
    if not Path(path).exists():
        return "missing"
    m = CSVMetrics(path)
    if m.load_error is not None:
        return f"cannot be read ({m.load_error})"
    columns, rows = list(record["columns"]), list(record["rows"])
    if len(m.rows) < len(rows):
        return f"holds {len(m.rows)} of the {len(rows)} rows up to the checkpoint"
    for i, cells in enumerate(rows):
        got = [m.rows[i].get(k) or "" for k in columns]
        if got != [str(c) for c in cells]:
            bad = next(k for k, a, b in zip(columns, got, cells, strict=True) if a != str(b))
            return f"row {i + 1} (env_steps {cells[columns.index('env_steps')]}) differs from the checkpoint's copy " \
                   f"({bad}: {got[columns.index(bad)]!r} instead of {str(cells[columns.index(bad)])!r})"
    return None


def check_rows(path: Path) -> str | None:
    """What makes ``metrics.csv`` unusable for a resume without a checkpoint record of it, or None.

    Every row must have every cell of its header, an integer ``env_steps`` (increasing) and numbers (or
    nothing) in the other cells; a row cut mid-line (a killed copy, a full disk) fails this.
    """
    if not Path(path).exists():
        return "missing"
    m = CSVMetrics(path)
    if m.load_error is not None:
        return f"cannot be read ({m.load_error})"
    if "env_steps" not in m.columns:
        return "has no env_steps column"
    last = -1
    for i, r in enumerate(m.rows):
        where = f"row {i + 1}"
        if any(r.get(k) is None for k in m.columns):
            return f"{where} is cut short ({sum(r.get(k) is None for k in m.columns)} cells missing)"
        try:
            steps = int(r["env_steps"])
        except ValueError:
            return f"{where}: env_steps {r['env_steps']!r} is not an integer"
        if steps <= last:
            return f"{where}: env_steps {steps} does not increase"
        last = steps
        for k in m.columns:
            try:
                float(r[k]) if r[k] != "" else None
            except ValueError:
                return f"{where}: {k} {r[k]!r} is not a number"
    return None


def _cell(v: Any) -> str:
    """A metrics value as the string the CSV file holds."""
    if v is None:
        return ""
    return str(_fmt(v))


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
    """metrics.csv columns -> namespaced W&B keys (``suPER.metrics.wandb_key``; env_steps is W&B's step), plus
    each loop phase's seconds as ``perf/time_<phase>_s``."""
    out = {wandb_key(k): v for k, v in row.items() if k != "env_steps"}
    out.update({f"perf/time_{k}_s": v for k, v in timings.items()})
    return out
