"""``super-marl population ... --address``: the whole run as one job on a real local Ray cluster (`ray start --head`
on 127.0.0.1, the fixture of tests/campaigns/test_cluster.py), its matches and best responses tasks there."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from suPER import config as C
from tests.campaigns.test_cluster import FAKE_KEY, Cluster, cluster_env, local_cluster  # noqa: F401 - the fixture

FAKE_TOKEN = "faketoken" + "fedcba9876543210" * 4
TINY = ["--set", "env.kwargs.map_size=12", "--set", "dqn.batch_size=2", "--set", "dqn.hiddens=8", "--set",
        "dqn.buffer_size=500", "--set", "env.horizon=10", "--set", "dqn.learning_starts=10"]


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_population_runs_as_one_job_with_tasks_on_the_cluster(local_cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "pop"
    # set in the submitter's shell: they must go nowhere (the cluster runs without auth, so the token is unused)
    env = {**cluster_env(), "WANDB_API_KEY": FAKE_KEY, "RAY_AUTH_TOKEN": FAKE_TOKEN}
    cmd = [sys.executable, "-m", "suPER.cli", "population", "psro", "--env", "battle", "--iterations", "1",
           "--br-steps", "20", "--eval-episodes", "1", "--br-workers", "2", "--match-workers", "2", "--no-figures",
           "--address", local_cluster.url, "--out", str(out), "--wait", *TINY]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=C.ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert ": SUCCEEDED" in r.stdout and f"run folder {out}/battle__psro__s1 on the cluster" in r.stdout
    folder = out / "battle__psro__s1"
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 1}
    assert [r["policy"] for r in rows(folder / "policies.csv")] == ["blue/001", "red/001"]
    assert len(rows(folder / "payoff.csv")) == 4
    jobs = json.loads(urllib.request.urlopen(f"{local_cluster.url}/api/jobs/", timeout=10).read())
    [job] = [j for j in jobs if j["submission_id"].startswith("population-battle-psro-s1-")]
    assert "--on-cluster" in job["entrypoint"] and job["status"] == "SUCCEEDED"
    tasks = urllib.request.urlopen(f"{local_cluster.url}/api/v0/tasks?limit=1000", timeout=30).read()
    assert b"_best_response_task" in tasks and b"_match_task" in tasks  # they ran as tasks of the cluster

    # the key and token set at submit time are in no file Ray or the run wrote and in nothing the dashboard serves
    secrets = (FAKE_KEY.encode(), FAKE_TOKEN.encode())
    leaked = [str(f) for root in (local_cluster.temp_dir, out) for f in root.rglob("*")
              if f.is_file() and not f.is_socket() and any(s in f.read_bytes() for s in secrets)]
    for path in ("/api/jobs/", f"/api/jobs/{job['submission_id']}", f"/api/jobs/{job['submission_id']}/logs",
                 "/api/v0/tasks", "/api/v0/runtime_envs"):
        try:
            body = urllib.request.urlopen(f"{local_cluster.url}{path}", timeout=30).read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
        if any(s in body for s in secrets):
            leaked.append(path)
    assert not leaked
