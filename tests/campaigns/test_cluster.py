"""Cluster submission: cluster/aws.yaml passes Ray's autoscaler validation; run_all.sh and `grid submit`
send the smoke grid to a real local Ray cluster (`ray start --head` on 127.0.0.1, stopped by process id)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from suPER import campaigns
from suPER import config as C
from suPER.resolve import without_volatile

ROOT = C.ROOT
SMOKE = ROOT / "experiments" / "smoke.yaml"


def test_aws_cluster_config_passes_the_autoscaler_validation() -> None:
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((ROOT / "cluster" / "aws.yaml").read_text())
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(raw, schema)  # the file as written: no unknown or mistyped fields
    prepared = prepare_config(raw)  # what `ray up` does: merge the AWS defaults, then validate
    validate_config(prepared)
    types = prepared["available_node_types"]
    assert prepared["head_node_type"] == "ray.head.default" and types["ray.head.default"]["resources"] == {"CPU": 1}
    assert any(t.get("resources", {}).get("GPU") for t in types.values())
    assert sum(1 for n, t in types.items() if n != "ray.head.default" and not t["resources"].get("GPU")) >= 1
    assert all(t["max_workers"] > t.get("min_workers", 0) for n, t in types.items() if n != "ray.head.default")
    assert any("pip install -e ~/super-marl" in c for c in raw["setup_commands"])
    assert "--dashboard-host=127.0.0.1" in " ".join(raw["head_start_ray_commands"])
    # W&B logs in on the nodes from a netrc file the launcher installs owner-only; no key in the file
    netrc = str(campaigns.CLUSTER_NETRC)
    assert raw["file_mounts"][netrc] == netrc
    (install,) = [c for c in raw["setup_commands"] if "netrc" in c]
    assert f"chmod 600 {netrc}" in install and f"install -m 600 {netrc} ~/.netrc" in install
    assert "WANDB_API_KEY" not in yaml.safe_dump(raw)


def test_runtime_env_ships_the_repository_and_never_a_secret(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    text = (ROOT / "ray_runtime.yaml").read_text()
    assert "WANDB_API_KEY:" not in text.replace("# ", "")  # never committed
    monkeypatch.setenv("WANDB_API_KEY", "secret-from-env")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "token-from-env")
    env = campaigns.runtime_env()
    assert env["working_dir"] == str(ROOT) and "runs" in env["excludes"] and ".venv" in env["excludes"]
    assert "secret-from-env" not in json.dumps(env) and "token-from-env" not in json.dumps(env)
    bad = tmp_path / "runtime.yaml"
    bad.write_text("env_vars:\n  WANDB_API_KEY: abc\n")
    with pytest.raises(campaigns.ClusterError, match="expected no secrets in env_vars.*got WANDB_API_KEY"):
        campaigns.runtime_env(bad)


def test_jobs_per_run_and_per_grid() -> None:
    grid = campaigns.load_grid(SMOKE)
    runs = grid.select(["env=pursuit", "name=pursuit-ddqn,pursuit-qmix"])
    jobs = campaigns.plan_jobs(grid, runs, "~/out dir", per="run", cpus=2, wandb=True)
    assert [j.runs for j in jobs] == [["pursuit__ddqn__s1"], ["pursuit__qmix__s1"]] and jobs[0].num_cpus == 2
    entry = jobs[0].entrypoint
    assert entry.startswith("python -m suPER.cli train --config '{")  # the resolved config itself
    assert "--skip-finished" in entry and "--wandb --wandb-mode online" in entry
    assert "--threads 2 --device cpu" in entry  # no GPU reserved: none used (campaigns.resources, as grid run)
    gpu_jobs = campaigns.plan_jobs(grid, runs, "out", per="run", cpus=2.7, gpus=0.5, wandb=False)
    assert "--threads 2 --device cuda" in gpu_jobs[0].entrypoint and gpu_jobs[0].num_gpus == 0.5
    assert entry.endswith("--out ~/'out dir'")  # ~ expands on the cluster node
    (job,) = campaigns.plan_jobs(grid, runs, "/shared/runs", per="grid", filters=["env=pursuit"], seeds="2",
                                 wandb=False)
    assert job.entrypoint == ("python -m suPER.cli grid run experiments/smoke.yaml --cpus-per-trial 1.0 "
                              "--gpus-per-trial 0.0 --filter env=pursuit --seeds 2 --out /shared/runs")


def test_a_cluster_job_trains_the_config_grid_run_trains(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One resolved config, two places to run it: every per-run job's command line, parsed by the real CLI, builds
    exactly the config ``grid run`` trains (volatile keys aside: where and how it runs)."""
    import shlex

    from suPER import cli
    from suPER.cli import train as cli_train

    seen: list[C.ExperimentConfig] = []
    monkeypatch.setattr(cli_train, "_train_one", lambda cfg, *a, **k: seen.append(cfg))
    for file in (SMOKE, ROOT / "experiments" / "fig1_paper.yaml"):
        grid = campaigns.load_grid(file, seeds=1)
        runs = [r for r in grid.runs if not r.pending]
        runs = runs if file == SMOKE else runs[::4]  # the paper protocol's settings on every env, not every entry
        for r, job in zip(runs, campaigns.plan_jobs(grid, runs, str(tmp_path), per="run", wandb=False)):
            argv = shlex.split(job.entrypoint)
            assert argv[:4] == ["python", "-m", "suPER.cli", "train"]
            seen.clear()
            assert cli.main(argv[3:]) == 0 and len(seen) == 1, job.entrypoint[:200]
            assert without_volatile(seen[0].to_dict()) == without_volatile(r.config(tmp_path).to_dict())
            assert seen[0].run_name == r.run_name and seen[0].run.out == str(tmp_path)


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ), cwd=ROOT)


def test_unreachable_cluster_fails_in_seconds(tmp_path: Path) -> None:
    for cmd in (["bash", str(ROOT / "run_all.sh"), "--address", "http://127.0.0.1:9", str(SMOKE)],
                [sys.executable, "-m", "suPER.cli", "grid", "submit", str(SMOKE), "--address", "127.0.0.1:9"]):
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("error: --address: no Ray cluster answers at http://127.0.0.1:9"), r.stderr
        assert time.monotonic() - t0 < 60  # python start-up included; the check itself times out in 10 s


# --------------------------------------------------------------------------------------------------
# a real local cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """Processes of the session ``sid`` (the `ray start` we launched and everything it started)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # zombies are gone already (only unreaped)
                pids.append(int(d))
    return pids


def stop_session(sid: int) -> None:
    """Stop only our cluster: SIGTERM, then SIGKILL, to every process of its session, by process id (5 s to go on
    SIGTERM: some of Ray's processes outlast it by far, and nothing of a test cluster needs keeping)."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
        for pid in session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.3)


def cluster_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "WANDB_API_KEY")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", WANDB_MODE="offline",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


class Cluster(NamedTuple):
    url: str
    """the dashboard (Job Submission API)"""
    temp_dir: Path
    """Ray's --temp-dir: every file the cluster writes (session logs, runtime envs, job logs)"""


FAKE_KEY = "fakewandbkey" + "0123456789abcdef" * 3  # 60 characters, as long as a real W&B key


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Cluster]:
    """`ray start --head` on 127.0.0.1 with its own ports and temp dir."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    for _ in range(2):  # a heavily loaded machine can miss Ray's fixed 30 s raylet start-up window
        tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must stay < 108 chars
        ports = {k: free_port() for k in ("port", "dashboard-port", "ray-client-server-port",
                                          "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                          "runtime-env-agent-port", "metrics-export-port", "node-manager-port",
                                          "object-manager-port")}
        cmd = [ray_bin, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--dashboard-host",
               "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "2", "--num-gpus", "0", "--temp-dir", tmp,
               "--disable-usage-stats", *[a for k, v in ports.items() for a in (f"--{k}", str(v))]]
        log = open(Path(tmp) / "ray_start.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, start_new_session=True, env=cluster_env(), stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{ports['dashboard-port']}"
        deadline = time.monotonic() + 240
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=2).read()
                # the dashboard answers before the raylet registers: wait for a node to be alive
                nodes = json.loads(urllib.request.urlopen(f"{url}/nodes?view=summary", timeout=5).read())
                if nodes.get("data", {}).get("summary"):
                    up = True
                    break
            except (OSError, ValueError):
                pass
            time.sleep(1)
        if up:
            try:
                yield Cluster(url, Path(tmp))
            finally:
                stop_session(proc.pid)
                log.close()
                assert not session_pids(proc.pid)
                shutil.rmtree(tmp, ignore_errors=True)
            return
        stop_session(proc.pid)
        log.close()
        failed_log = (Path(tmp) / "ray_start.log").read_text()[-3000:]
        shutil.rmtree(tmp, ignore_errors=True)
    pytest.fail(f"the local Ray cluster did not start: {failed_log}")


def rows(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(float(r["env_steps"])) for r in csv.DictReader(f)]


def test_run_all_sh_and_grid_submit_on_a_local_cluster(local_cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    env = {**cluster_env(), "WANDB_API_KEY": FAKE_KEY}  # set in the submitter's shell: it must go nowhere
    r = subprocess.run(["bash", str(ROOT / "run_all.sh"), "--address", local_cluster.url, "--out", str(out),
                        "--filter", "env=pursuit", "--filter", "name=pursuit-ddqn,pursuit-dqn-super-stochastic",
                        "--no-wandb", "--wait", str(SMOKE)], capture_output=True, text=True, timeout=900, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count(": SUCCEEDED") == 2
    for name in ("pursuit__ddqn__s1", "pursuit__dqn_super_stochastic__s1"):
        manifest = json.loads((out / name / "manifest.json").read_text())
        assert manifest["status"] == "finished" and manifest["env_steps"] == 300
        assert rows(out / name) == [0, 100, 200, 300]
        # the job ran the shipped working_dir copy of the package, not this checkout
        assert "runtime_resources" in " ".join(manifest["command"]) or manifest["host"]

    # the same grid again through the Python client, plus one more run: finished runs are skipped
    r = cli("grid", "submit", str(SMOKE), "--address", local_cluster.url, "--out", str(out), "--filter",
            "env=pursuit", "--filter", "name=pursuit-ddqn,pursuit-ddqn-paramshare", "--no-wandb", "--wait", env=env,
            timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "submitted 2 job(s) for 2 run(s) of smoke" in r.stdout and "2 job(s) succeeded" in r.stdout
    assert rows(out / "pursuit__ddqn_ps__s1") == [0, 100, 200, 300]
    assert rows(out / "pursuit__ddqn__s1") == [0, 100, 200, 300]  # untouched

    # the key set at submit time is in no file Ray wrote and in nothing its dashboard serves
    key = FAKE_KEY.encode()
    leaked = [str(f) for f in local_cluster.temp_dir.rglob("*") if f.is_file() and not f.is_socket()
              and key in f.read_bytes()]
    leaked += [str(f) for f in out.rglob("*") if f.is_file() and key in f.read_bytes()]
    jobs = json.loads(urllib.request.urlopen(f"{local_cluster.url}/api/jobs/", timeout=10).read())
    assert len(jobs) >= 4 and all(not (j.get("runtime_env") or {}).get("env_vars", {}).get("WANDB_API_KEY")
                                  for j in jobs)
    paths = ["/api/jobs/", "/api/version", "/nodes?view=details", "/nodes?view=summary", "/api/cluster_status",
             "/logical/actors", "/api/v0/tasks", "/api/v0/actors", "/api/v0/jobs", "/api/v0/nodes",
             "/api/v0/workers", "/api/v0/runtime_envs", "/api/v0/logs?node_ip=127.0.0.1",
             *[f"/api/jobs/{j['submission_id']}" for j in jobs], *[f"/api/jobs/{j['submission_id']}/logs" for j in jobs]]
    for path in paths:
        try:
            body = urllib.request.urlopen(f"{local_cluster.url}{path}", timeout=30).read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
        if key in body:
            leaked.append(path)
    assert not leaked
