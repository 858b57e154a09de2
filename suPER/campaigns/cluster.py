"""Submitting a grid to a Ray cluster through the Job Submission API (one job per run, or one per grid).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from suPER import config as C
from suPER.campaigns.grid import Grid, GridError, GridRun
from suPER.campaigns.resources import run_resources

# --------------------------------------------------------------------------------------------------
# cluster: Ray Job Submission (one job per run, or one job per grid)

RUNTIME_ENV_FILE = C.ROOT / "ray_runtime.yaml"
"""Runtime environment of submitted jobs (ships the repository as the jobs' working_dir)."""

SECRET_ENV_VARS = ("WANDB_API_KEY", "RAY_AUTH_TOKEN")
"""Never sent to the cluster (nor any name ``SECRET_NAME`` matches). Ray writes a job's runtime env into world-readable logs
(``runtime_env_agent.log``) and serves it from the dashboard (``/api/jobs/``), so a secret in it is a
leaked secret. The nodes authenticate W&B with a netrc file that the cluster launcher installs with mode
0600 (``cluster/aws.yaml``; docs/design.md, "Security"); a secret named in ``ray_runtime.yaml`` is refused."""


SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|PRIVATE|SESSION|COOKIE|NETRC", re.IGNORECASE)
"""An env var name that looks like it holds a secret (``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ``DB_PASSWORD``):
refused in a runtime env, whatever its value."""

SECRET_FILES = (".env", ".env.*", "*.env", ".netrc", "*.netrc", "*.key", "*.pem", "*.p12", "*.pfx", "id_rsa*",
                "id_ed25519*", "id_ecdsa*", ".aws", ".ssh", ".git-credentials", "*.token", "credentials*")
"""Excluded from every job's working_dir upload, whatever ``ray_runtime.yaml`` says: the whole checkout is the
jobs' working directory, untracked files included, and Ray unpacks it world-readable on the nodes."""


CLUSTER_NETRC = Path("~/.config/super-marl/wandb.netrc")
"""The W&B credentials that ``cluster/aws.yaml`` installs on every node as ``~/.netrc`` (mode 0600);
write it with ``NETRC=~/.config/super-marl/wandb.netrc wandb login``."""


class ClusterError(C.ConfigError):
    """The Ray cluster cannot be reached or refused a job."""


def dashboard_url(address: str | None) -> str:
    """``host:port`` / ``http://host:port`` / None (``RAY_ADDRESS``, else 127.0.0.1:8265) -> ``http://host:port``."""
    import os

    address = address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"
    if address.startswith("ray://") or address == "auto":
        raise ClusterError(f"--address: job submission needs the dashboard's HTTP address (http://HOST:8265), "
                           f"got {address!r}")
    return address if address.startswith(("http://", "https://")) else f"http://{address}"


def check_cluster(address: str, timeout_s: float = 10.0) -> str:
    """Ask the cluster's dashboard for its version; fail within ``timeout_s`` with a clear message.

    Returns:
        The cluster's Ray version.

    Raises:
        ClusterError: nothing answers at ``address``.
    """
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=timeout_s) as resp:  # noqa: S310 - http(s) only
            return str(json.loads(resp.read().decode()).get("ray_version", "?"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ClusterError(f"--address: no Ray cluster answers at {address} ({reason}); start one (ray up "
                           f"cluster/aws.yaml), forward its dashboard (ray dashboard cluster/aws.yaml) or fix "
                           f"--address / RAY_ADDRESS") from None


def runtime_env(path: str | Path = RUNTIME_ENV_FILE) -> dict[str, Any]:
    """The jobs' runtime environment: ``ray_runtime.yaml`` with the repository as working_dir.

    Nothing is taken from this process's environment: whatever goes in here is logged and served by Ray
    (see ``SECRET_ENV_VARS``).

    Raises:
        ClusterError: the file cannot be read, or it names one of ``SECRET_ENV_VARS``.
    """
    try:
        env = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ClusterError(f"--runtime-env: cannot read {path} ({exc.strerror})") from None
    except yaml.YAMLError as exc:  # the line is not echoed: it may hold a secret
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ClusterError(f"--runtime-env: {path}: expected YAML, got a syntax error{where} (the line is not "
                           f"shown: it may hold a secret)") from None
    if not isinstance(env, dict) or not isinstance(env.get("env_vars") or {}, dict):
        raise ClusterError(f"--runtime-env: {path}: expected a mapping with an env_vars mapping, "
                           f"got {type(env).__name__}")
    env_vars = {str(k): str(v) for k, v in (env.get("env_vars") or {}).items()}
    secret = sorted(k for k in env_vars if k in SECRET_ENV_VARS or SECRET_NAME.search(k))
    if secret:
        raise ClusterError(f"--runtime-env: {path}: expected no secrets in env_vars (Ray logs and serves them), "
                           f"got {', '.join(secret)}; authenticate W&B on the nodes with a netrc file "
                           f"(cluster/aws.yaml)")
    excludes = env.get("excludes") or []
    if not isinstance(excludes, list) or not all(isinstance(x, str) for x in excludes):
        raise ClusterError(f"--runtime-env: {path}: expected excludes to be a list of patterns, got {excludes!r}")
    env["working_dir"] = str(C.ROOT)
    env["env_vars"] = env_vars
    env["excludes"] = [*excludes, *(x for x in SECRET_FILES if x not in excludes)]
    return env


@dataclass
class Job:
    """One job to submit: its id, the shell command it runs on the cluster and its resources."""

    submission_id: str
    entrypoint: str
    num_cpus: float
    num_gpus: float
    runs: list[str]


def _out_arg(out: str) -> str:
    """Shell text for ``--out``: a leading ``~/`` stays unquoted so it expands on the cluster node."""
    import shlex

    return "~/" + shlex.quote(out[2:]) if out.startswith("~/") else shlex.quote(out)


def _one_line(args: Sequence[str], where: str) -> None:
    """Refuse a job argument holding a control character: a quoted newline or tab is still one in the command
    line, and job lists (``--print-jobs``, run_all.sh) are one job per line, fields split at tabs.

    Raises:
        GridError: naming ``where`` and the argument.
    """
    for a in args:
        if any(ord(c) < 32 or ord(c) == 127 for c in a):
            raise GridError(f"{where}: {a!r}: expected a value without control characters (newline, tab, ...); a job "
                            f"command cannot carry them")


def plan_jobs(grid: Grid, runs_: Sequence[GridRun], out: str, per: str = "run", cpus: float = 1.0,
              gpus: float = 0.0, filters: Sequence[str] = (), seeds: str | None = None,
              wandb: bool | None = None, wandb_project: str = "super-marl") -> list[Job]:
    """The jobs that submit ``runs_``: one ``super-marl train --config RESOLVED`` per run (the config ``grid run``
    trains, as JSON text), or one ``super-marl grid run``.

    Args:
        grid: the grid (its file must lie inside the repository, which is shipped as working_dir).
        runs_: selected runs (pending ones are left out).
        out: run folders' parent on the cluster (``~/...`` expands there; use shared storage on
            multi-node clusters).
        per: ``run`` or ``grid``.
        cpus: CPUs per run (the job's entrypoint resources per run; per trial for ``grid``).
        gpus: GPUs per run.
        filters: ``--filter`` values (``grid`` jobs repeat them).
        seeds: ``--seeds`` value (``grid`` jobs repeat it).
        wandb: log online to W&B; None = when ``CLUSTER_NETRC`` (the credentials the cluster launcher
            installs on the nodes) is a non-empty file here.
        wandb_project: W&B project (the group is the grid name).
    """
    import json
    import shlex
    import time

    if per not in ("run", "grid"):
        raise GridError(f"--per: expected run or grid, got {per!r}")
    if wandb is None:
        netrc = CLUSTER_NETRC.expanduser()
        wandb = netrc.is_file() and netrc.stat().st_size > 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    todo = [r for r in runs_ if not r.pending]
    wb = ["--wandb", "--wandb-mode", "online", "--wandb-project", wandb_project, "--wandb-group", grid.name] \
        if wandb else []
    if per == "run":
        threads, device = run_resources(cpus, gpus)
        jobs = []
        for r in todo:  # the run's resolved config itself, as grid run trains it: one config, two places to run
            resolved = json.dumps(r.config(out).to_dict(), separators=(",", ":"))
            args = ["python", "-m", "suPER.cli", "train", "--config", resolved, "--no-progress", "--skip-finished",
                    "--threads", str(threads), "--device", device, *wb]
            _one_line(args, f"{r.where}: entry {r.entry!r}")
            jobs.append(Job(f"{grid.name}-{r.run_name}-{stamp}", f"{shlex.join(args)} --out {_out_arg(out)}",
                            cpus, gpus, [r.run_name]))
        return jobs
    try:
        rel = Path(grid.path).resolve().relative_to(C.ROOT)
    except ValueError:
        raise GridError(f"{grid.path}: a grid submitted as one job must lie inside the repository {C.ROOT} "
                        f"(it is shipped as the job's working_dir)") from None
    args = ["python", "-m", "suPER.cli", "grid", "run", str(rel), "--cpus-per-trial", str(cpus),
            "--gpus-per-trial", str(gpus), *[a for f in filters for a in ("--filter", f)],
            *(["--seeds", seeds] if seeds else []), *wb]
    _one_line(args, "--filter / --seeds")
    return [Job(f"{grid.name}-grid-{stamp}", f"{shlex.join(args)} --out {_out_arg(out)}", 0.0, 0.0,
                [r.run_name for r in todo])]


def submit_jobs(jobs: Sequence[Job], address: str, env: dict[str, Any], grid_name: str) -> list[str]:
    """Submit ``jobs`` through ``ray.job_submission.JobSubmissionClient``.

    Returns:
        The submission ids.

    Raises:
        ClusterError: the cluster is unreachable (checked first, within seconds) or refuses a job.
    """
    check_cluster(address)
    from ray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(address)
        ids = []
        for job in jobs:
            ids.append(client.submit_job(entrypoint=job.entrypoint, submission_id=job.submission_id, runtime_env=env,
                                         entrypoint_num_cpus=job.num_cpus or None,
                                         entrypoint_num_gpus=job.num_gpus or None,
                                         metadata={"grid": grid_name, "runs": ",".join(job.runs)[:1000]}))
        return ids
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"--address {address}: {str(exc).strip().splitlines()[-1]}") from exc


def wait_for_jobs(address: str, ids: Sequence[str], poll_s: float = 2.0, timeout_s: float | None = None,
                  on_change: Any = None) -> dict[str, str]:
    """Poll until every job is terminal (or ``timeout_s`` passed).

    Returns:
        Submission id -> final status (``SUCCEEDED``, ``FAILED``, ``STOPPED``, or the last seen status).
    """
    import time

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    status: dict[str, str] = {}
    t0 = time.monotonic()
    while True:
        for jid in ids:
            if status.get(jid) in ("SUCCEEDED", "FAILED", "STOPPED"):
                continue
            new = str(client.get_job_status(jid).value)
            if new != status.get(jid) and on_change is not None:
                on_change(jid, new)
            status[jid] = new
        if all(s in ("SUCCEEDED", "FAILED", "STOPPED") for s in status.values()):
            return status
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            return status
        time.sleep(poll_s)
