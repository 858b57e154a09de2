"""Campaigns: many runs from one grid file, and the one-run executor they all share.

* ``grid``: grid files (``experiments/paper_grid.yaml``, ...) loaded, validated and expanded into runs;
* ``execute``: one run into its run folder (fresh, resumed from its checkpoint, or refused), with the
  trainer that ``suPER.algorithms`` registers for the algorithm and backend; used by ``super-marl train``, Tune trials and cluster jobs alike;
* ``local``: ``grid run`` on this machine (or a running cluster) through Ray Tune, one trial per run;
* ``cluster``: ``grid submit`` / ``run_all.sh``: one Ray job per run (or per grid) via the Job Submission API.

The names below are re-exported so callers write ``campaigns.execute(...)``, ``campaigns.load_grid(...)``.
"""

from suPER.campaigns.cluster import (
    CLUSTER_NETRC,
    RUNTIME_ENV_FILE,
    SECRET_ENV_VARS,
    ClusterError,
    Job,
    check_cluster,
    dashboard_url,
    plan_jobs,
    runtime_env,
    submit_jobs,
    wait_for_jobs,
)
from suPER.campaigns.execute import execute, first_difference, trainer_for
from suPER.campaigns.grid import Grid, GridError, GridRun, load_grid, matches, parse_filter
from suPER.campaigns.local import Plan, plan_runs, ray_session, run_grid

__all__ = [
    "CLUSTER_NETRC", "RUNTIME_ENV_FILE", "SECRET_ENV_VARS", "ClusterError", "Grid", "GridError", "GridRun",
    "Job", "Plan", "check_cluster", "dashboard_url", "execute", "first_difference", "load_grid",
    "matches", "parse_filter", "plan_jobs", "plan_runs", "ray_session", "run_grid", "runtime_env",
    "submit_jobs", "trainer_for", "wait_for_jobs",
]
