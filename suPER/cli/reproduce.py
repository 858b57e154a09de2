"""``super-marl reproduce FIGURE``: a paper figure's grid run (locally or on a cluster) and drawn."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from suPER.cli.common import FilterOpt, UserError, positive


def reproduce(
    figure: Annotated[str, typer.Argument(help="fig1 (experiments/fig1.yaml) | bandwidth "
                                               "(experiments/bandwidth_sweep.yaml)")],
    fraction: Annotated[float | None, typer.Option(help="budget per run as a fraction of the paper's (pursuit "
                                                        "800k, battle 300k, adversarial pursuit 600k env steps); "
                                                        "default: the grid file's budgets")] = None,
    seeds: Annotated[int | None, typer.Option(help="seeds 1..N (default: the grid file's)")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="only this env (repeatable)")] = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder (default runs/<grid>[-f<F>][-<layer>])")] = None,
    address: Annotated[str | None, typer.Option(help="run on the Ray cluster whose dashboard is here "
                                                     "(http://HOST:8265; as grid submit) instead of locally")] = None,
    layer: Annotated[Path | None, typer.Option(help="a grid file whose defaults / env_defaults go over every run, "
                                                    "e.g. experiments/smoke.yaml for a quick check")] = None,
    filter_: FilterOpt = None,
    protocol: Annotated[str, typer.Option(help="paper (default: the original's behaviour, every documented "
                                               "deviation restored; run folders end in __paper) | ours (this "
                                               "suite's corrected defaults)")] = "paper",
    cpus_per_trial: Annotated[float, typer.Option("--cpus-per-trial", help="CPUs per run")] = 1.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan and the estimate only")] = False,
) -> None:
    """Run a figure's grid (locally through Ray Tune, or on a cluster) and draw it into OUT/figures.

    Prints the runs, env steps and estimated wall time first; running it again skips finished runs and
    resumes unfinished ones.
    """
    from suPER import campaigns, costs, runs
    from suPER import reproduce as R

    positive("--cpus-per-trial", cpus_per_trial)
    grid, runs_ = R.figure_runs(figure, fraction, seeds, env or [], layer, filter_ or [], protocol)
    if not runs_:  # a selection that matches nothing is a typo, not a finished figure (as grid run)
        asked = " ".join([*(f"--env {e}" for e in env or []), *(f"--filter {f}" for f in filter_ or [])])
        raise UserError(f"--filter: no run of {figure} matches {asked!r}")
    out = out or R.default_out(grid, fraction, layer)
    if not address:  # refused before the plan is printed (on a cluster, --out is the cluster's path)
        runs.writable_folder(out, create=not dry_run)
    where = "at this machine's parallelism (a cluster with more worker CPUs takes less)" if address else \
        "on this machine"
    est = R.estimate(runs_, out, costs.local_parallel(cpus_per_trial))
    print(R.describe(figure, est, out, where), flush=True)
    if dry_run:
        return
    if est.todo and address:
        url = campaigns.dashboard_url(address)
        jobs = R.cluster_plan(grid, est.todo, str(out), cpus_per_trial)
        ids = campaigns.submit_jobs(jobs, url, campaigns.runtime_env(), grid.name)
        print(f"submitted {len(ids)} job(s) to {url}; waiting for them", flush=True)
        status = campaigns.wait_for_jobs(url, ids)
        if any(s != "SUCCEEDED" for s in status.values()):
            print("some jobs did not succeed; run the same command again to resume them", file=sys.stderr)
            raise typer.Exit(1)
    elif est.todo:
        outcome = campaigns.run_grid(grid, est.todo, out, cpus_per_trial=cpus_per_trial)
        if outcome["failed"]:
            print(f"{len(outcome['failed'])} run(s) failed; run the same command again to resume them",
                  file=sys.stderr)
            raise typer.Exit(1)
        if outcome["interrupted"] or outcome["not_started"]:
            raise typer.Exit(130)
    if address and not out.is_dir():
        print(f"run folders are on the cluster under {out}; draw them there with: super-marl reproduce {figure} "
              f"--out {out} (all runs finished: nothing is trained)")
        return
    paths = R.draw(figure, out)
    print(f"figures and tables in {out / 'figures'}: " + ", ".join(p.name for p in paths.values()))

