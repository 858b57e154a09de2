"""The Ray instance `grid run` embeds (suPER/embedded_ray.py), started for real in a child process:
every listener it opens beyond loopback requires its token, the token is in no file, and SIGKILL of the
driver leaves no process of it alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from suPER import config as C
from suPER import embedded_ray

DRIVER = """
import os, sys, time
from suPER.campaigns.local import ray_session
with ray_session(None, num_cpus=1):
    import ray
    ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker process too, not only the daemons
    print(os.environ["SUPER_MARL_RAY_INSTANCE"], os.environ["RAY_AUTH_TOKEN"], flush=True)
    time.sleep(600)
"""

# one cheap, read-only RPC per gRPC service Ray 2.60 serves (gcs, raylet, object manager, workers, agent)
GRPC_PROBES = ("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo", "/ray.rpc.NodeManagerService/GetNodeStats",
               "/ray.rpc.ObjectManagerService/Pull", "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",
               "/ray.rpc.ReporterService/HealthCheck", "/ray.rpc.LogService/ListLogs")


def listeners(pids: list[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every listening TCP socket the processes hold (/proc/net/tcp{,6} by inode)."""
    by_inode: dict[str, tuple[str, int]] = {}
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            hex_ip, hex_port = f[1].split(":")
            raw = bytes.fromhex(hex_ip)
            if v6:
                words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                ip = ":".join(b"".join(words).hex()[i:i + 4] for i in range(0, 32, 4))
            else:
                ip = ".".join(str(b) for b in raw[::-1])
            by_inode[f[9]] = (ip, int(hex_port, 16))
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in by_inode:
                out.append((pid, *by_inode[target[8:-1]]))
    return sorted(set(out))


def is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("0000:0000:0000:0000:0000:0000:0000:0001",) or \
        ip.startswith("0000:0000:0000:0000:0000:ffff:7f")


def requires_token(ip: str, port: int, token: str) -> str | None:
    """None when the listener on ``port`` refuses requests without ``token`` and serves them with it;
    else what it did. HTTP servers must answer 401; gRPC servers UNAUTHENTICATED to a real method."""
    import http.client

    import grpc

    host = "127.0.0.1" if ip in ("0.0.0.0", "0000:0000:0000:0000:0000:0000:0000:0000") else \
        (f"[{ip}]" if ":" in ip else ip)
    try:
        urllib.request.urlopen(f"http://{host}:{port}/api/v0/", timeout=5)
        return "HTTP served without the token"
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            return f"HTTP {exc.code} without the token"
        return None
    except (OSError, ValueError, http.client.HTTPException):
        pass  # not HTTP/1 (gRPC speaks HTTP/2 only)
    answers = []
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        for method in GRPC_PROBES:
            call = channel.unary_unary(method)
            try:
                call(b"", timeout=5)
                answers.append("OK")
            except grpc.RpcError as exc:
                answers.append(exc.code().name)
            if answers[-1] == "UNAUTHENTICATED":
                try:
                    call(b"", timeout=5, metadata=[("authorization", f"Bearer {token}")])
                    return None
                except grpc.RpcError as exc:
                    return None if exc.code() != grpc.StatusCode.UNAUTHENTICATED else "refused the token too"
            if answers[-1] not in ("UNIMPLEMENTED",):
                return f"gRPC {method} answered {answers[-1]} without the token"
    return f"no probe reached an authenticated method ({answers})"


def test_embedded_ray_requires_its_token_off_loopback_and_dies_with_a_sigkilled_driver(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    env.update(PYTHONPATH=str(C.ROOT), HOME=str(tmp_path))  # a clean home: Ray must write no token there
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=tmp_path, start_new_session=True)
    instance = ""
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        assert line, driver.stderr.read() if driver.stderr else "driver printed nothing"
        instance, token = line.split()
        pids = embedded_ray.instance_pids(instance)
        assert len(pids) >= 4  # gcs, raylet, agents, worker
        gcs = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "gcs_server"]
        threshold = f"RAY_health_check_failure_threshold={embedded_ray.HEALTH_CHECK_FAILURES}".encode()
        assert len(gcs) == 1 and threshold in Path(f"/proc/{gcs[0]}/environ").read_bytes().split(b"\0")  # patient
        socks = listeners([driver.pid, *pids])
        assert any(not is_loopback(ip) for _, ip, _ in socks)  # Ray 2.60 does bind beyond loopback ...
        for pid, ip, port in socks:  # ... so every such listener must demand the token
            if not is_loopback(ip):
                problem = requires_token(ip, port, token)
                assert problem is None, f"{ip}:{port} of pid {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()}): " \
                                        f"{problem}"
        assert not (tmp_path / ".ray").exists()
        temp_dirs = {Path(p) for pid in pids for p in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
                     if p.startswith("--temp-dir=") for p in [p.split("=", 1)[1]]}
        (temp_dir,) = temp_dirs
        for f in temp_dir.rglob("*"):
            if f.is_file() and not f.is_socket():
                assert token.encode() not in f.read_bytes(), f

        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        deadline = time.monotonic() + 30
        while (embedded_ray.instance_pids(instance) or temp_dir.exists()) and time.monotonic() < deadline:
            time.sleep(0.5)  # the watchdog removes the temp dir after the last process is gone
        assert embedded_ray.instance_pids(instance) == []
        assert not temp_dir.exists()  # the watchdog removes the instance's temp dir
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if instance:
            embedded_ray.stop_instance(instance, grace_s=2)  # only ever our own instance's processes
