"""``super-marl population ... --address URL``: the whole population run as one Ray job on a cluster.

The job is submitted through ``grid submit``'s path (``suPER.campaigns.cluster``: ``runtime_env`` ships the
repository as working_dir and refuses secrets, ``submit_jobs`` checks the dashboard first and submits with
``JobSubmissionClient``). Its entrypoint is the same population command, rebuilt from the parsed settings
(never from this process's environment, so no token or key travels: Ray logs and serves entrypoints and runtime
envs), with ``--on-cluster`` (matches and best responses become tasks of that cluster, ``parallel``) and
``--out`` on the cluster's storage. Resubmitting the same command resumes the run there (``loop`` resume).
The job reserves no CPU itself: its tasks do (one per match, ``--threads`` per best response).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from suPER import config as C
from suPER.campaigns.cluster import Job, _out_arg

CLUSTER_OUT = "~/super-marl-runs/population"
"""``--out`` of a submitted run when none is given (expanded on the cluster node)."""


def cluster_path(flag: str, path: Path | str) -> str:
    """A path on the cluster: absolute or ``~/...`` (a relative one would land in the job's temporary
    working_dir copy and be lost). Raises ConfigError naming ``flag``."""
    text = str(path)
    if not (text.startswith("~/") or Path(text).is_absolute()):
        raise C.ConfigError(f"{flag}: with --address expected an absolute or ~/ path on the cluster's storage "
                            f"(a relative one is inside the job's temporary working_dir), got {text!r}")
    return text


def plan_job(method: str, settings: dict[str, Any], out: str, folder_name: str) -> Job:
    """The job running the population command ``method`` with ``settings`` on the cluster.

    Args:
        method: psro | fsp | selfplay.
        settings: the command's parsed options (``cli._run``'s arguments by name).
        out: parent of the run folder on the cluster (absolute or ``~/...``).
        folder_name: the run folder's name (the job's metadata).
    """
    s = settings
    args = ["python", "-m", "suPER.cli", "population", method, "--env", s["env"], "--iterations", str(s["iterations"]),
            "--br-steps", str(s["br_steps"]), "--eval-episodes", str(s["eval_episodes"]), "--seed", str(s["seed"]),
            "--sides", s["sides"], "--warm-start", s["warm_start"], "--relay" if s["relay"] else "--no-relay",
            "--threads", str(s["threads"]), "--match-workers", str(s["match_workers"]),
            "--br-workers", str(s["br_workers"]), "--figures" if s["figures"] else "--no-figures"]
    if s["meta_solver"]:
        args += ["--meta-solver", s["meta_solver"]]
    if s["vs_shipped"]:
        args.append("--vs-shipped")
    if s["overwrite"]:
        args.append("--overwrite")
    for pair in s["set_"] or []:
        args += ["--set", pair]
    args.append("--on-cluster")
    entrypoint = f"{shlex.join(args)} --out {_out_arg(out)}"  # a leading ~/ stays unquoted: it expands there
    if s["install"]:
        entrypoint += f" --install --install-dir {_out_arg(s['install_dir'])}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Job(f"population-{folder_name.replace('__', '-')}-{stamp}", entrypoint, 0.0, 0.0, [folder_name])
