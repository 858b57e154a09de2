"""The Ray instance ``grid run`` starts on this machine: token authentication on, and nothing left behind.

Why not just ``ray.init()``: Ray 2.60 binds the GCS, the raylet, every worker and the driver to all
interfaces (``*``) and its dashboard / runtime-env agents to the host's LAN address, whatever
``_node_ip_address`` says; there is no setting to keep them on loopback. So the instance runs with
Ray's token authentication (``RAY_AUTH_MODE=token``) and a fresh random token made for it, held only in
the environment of its own processes (never written to ``~/.ray/auth_token`` or anywhere else).

And when the driver is SIGKILLed, Ray's own fate sharing (``PR_SET_PDEATHSIG``) takes the GCS, raylet
and workers down, but its agents stay alive and listening. So every process of the instance carries a
marker in its environment (``INSTANCE_ENV``), and a small watchdog process, started first, waits for the
driver to go (end of file on a pipe only the driver holds: exit, crash or SIGKILL alike) and then
stops every process carrying that marker (SIGTERM, then SIGKILL), and removes the instance's temp dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

INSTANCE_ENV = "SUPER_MARL_RAY_INSTANCE"
"""Environment variable naming the embedded instance; every process Ray starts for it inherits it."""

HEALTH_CHECK_FAILURES = "200"
"""Missed health checks (3 s apart) before Ray's GCS declares the one node of this instance dead (Ray's default: 5).
On a loaded machine (a campaign niced beside test suites, load 60 on 2 cores) the raylet missed 15 s of checks, Ray
marked the only node dead and Tune waited for resources forever; a real crash of a one-node instance ends the
driver anyway. ``RAY_health_check_failure_threshold`` in the environment wins."""

NO_PORT = "65536"
"""``AUTOSCALER_METRIC_PORT`` and ``DASHBOARD_METRIC_PORT`` for the instance: no valid port, so neither
Prometheus server starts.

Why: Ray's autoscaler monitor and its dashboard head each serve Prometheus metrics over plain HTTP, without
the token, on ``0.0.0.0:44217`` / ``0.0.0.0:44227`` whenever the head's address is not loopback, which Ray 2.60
always makes it, and there is no setting to turn those servers off. With port 65536 ``start_http_server``
raises, and both log the exception and run on without the server (ray/autoscaler/_private/monitor.py,
ray/dashboard/head.py); nothing here reads those metrics."""

STOP_GRACE_S = 5.0
"""How long the watchdog waits after SIGTERM before it SIGKILLs what is left."""


@dataclass
class EmbeddedRay:
    """A running embedded instance (see :func:`start`)."""

    instance: str
    """the marker value in its processes' environment"""
    temp_dir: Path
    """Ray's temp dir (session files, logs, sockets), private to this instance"""
    watchdog: subprocess.Popen[bytes]
    """the process that stops the instance when the driver goes"""
    saved_env: dict[str, str | None] = field(default_factory=dict)
    """the driver's environment variables before :func:`start` changed them"""


def start(num_cpus: int | None = None, num_gpus: int | None = None) -> EmbeddedRay:
    """Start Ray embedded in this process with token auth, its own temp dir and a watchdog.

    Args:
        num_cpus: CPUs to offer (default: all of this machine's).
        num_gpus: GPUs to offer (default: Ray's detection).

    Returns:
        The handle :func:`stop` takes.
    """
    import secrets
    import tempfile

    import ray

    instance = secrets.token_hex(8)
    # short: Ray's unix socket paths under the temp dir must stay below 108 characters
    temp_dir = Path(tempfile.mkdtemp(prefix="super-ray-", dir="/tmp"))
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "suPER.embedded_ray", instance, str(os.getpid()), str(temp_dir)],
        stdin=subprocess.PIPE, start_new_session=True,  # Ctrl-C of the terminal must not stop it first
        env={k: v for k, v in os.environ.items() if k not in (INSTANCE_ENV, "RAY_AUTH_TOKEN")})
    settings = {INSTANCE_ENV: instance, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                "RAY_USAGE_STATS_ENABLED": "0", "RAY_enable_metrics_collection": "0",
                "AUTOSCALER_METRIC_PORT": NO_PORT, "DASHBOARD_METRIC_PORT": NO_PORT,
                "RAY_health_check_failure_threshold": os.environ.get("RAY_health_check_failure_threshold",
                                                                     HEALTH_CHECK_FAILURES)}
    handle = EmbeddedRay(instance, temp_dir, watchdog, {k: os.environ.get(k) for k in settings})
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update(settings)
    _reload_ray_auth()
    try:
        ray.init(num_cpus=num_cpus or os.cpu_count(), num_gpus=num_gpus, include_dashboard=False,
                 _node_ip_address="127.0.0.1", _temp_dir=str(temp_dir), log_to_driver=False,
                 configure_logging=True, logging_level="WARNING")
    except BaseException:
        stop(handle)
        raise
    return handle


def stop(handle: EmbeddedRay, timeout_s: float = 30.0) -> None:
    """Shut the instance down, let the watchdog stop whatever survived, and restore the environment."""
    import ray

    try:
        ray.shutdown()
    finally:
        if handle.watchdog.stdin is not None:
            handle.watchdog.stdin.close()  # end of file: the watchdog stops what is left
        try:
            handle.watchdog.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        for k, v in handle.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reload_ray_auth()


def _reload_ray_auth() -> None:
    """Make this process's Ray see the auth settings now in ``os.environ`` (both are cached at import)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def instance_pids(instance: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """Live processes whose environment names ``instance`` (other users' processes cannot be read and
    are never ours). Args: exclude: pids to leave out (the driver, the caller)."""
    marker = f"{INSTANCE_ENV}={instance}".encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in exclude:
            continue
        try:
            if Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie has exited; only its parent's wait is missing
            if marker in Path(f"/proc/{d}/environ").read_bytes().split(b"\0"):
                pids.append(int(d))
        except (OSError, IndexError):
            continue
    return pids


def stop_instance(instance: str, exclude: tuple[int, ...] = (), grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM every process of ``instance``, SIGKILL those still there after ``grace_s``.

    Returns:
        The pids that were signalled.
    """
    hit: list[int] = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        pids = instance_pids(instance, exclude)
        for pid in pids:
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while instance_pids(instance, exclude) and time.monotonic() < deadline:
            time.sleep(0.2)
    return sorted(set(hit))


def _watchdog(instance: str, driver_pid: int, temp_dir: str) -> None:
    """Block until the driver closes (or loses) the pipe on stdin, then stop the instance."""
    import shutil

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    stop_instance(instance, exclude=(os.getpid(), driver_pid))
    shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    _watchdog(sys.argv[1], int(sys.argv[2]), sys.argv[3])
