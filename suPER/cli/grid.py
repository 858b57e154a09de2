"""``super-marl grid list | run | submit``: the runs of a grid file, run locally through Ray Tune or on a cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from suPER import config as C
from suPER import costs
from suPER.cli.common import FilterOpt, SeedsOpt, UserError, check_with_env, positive, print_table

grid_app = typer.Typer(no_args_is_help=True, help="Campaigns: list, run and submit the runs of a grid file "
                       "(experiments/paper_grid.yaml, bandwidth_sweep.yaml, smoke.yaml).")

def _load_grid(file: Path, seeds: str | None, filters: list[str] | None) -> tuple[Any, list[Any]]:
    from suPER import campaigns

    grid = campaigns.load_grid(file, seeds=seeds)
    for f in filters or []:
        campaigns.parse_filter(f)  # reject unknown filter keys before selecting
    return grid, grid.select(filters or [])


def _check_grid_with_env(selected: list[Any], out: Path) -> None:
    """``check_with_env`` for every distinct env setting of a grid's runs, errors prefixed FILE:LINE."""
    seen: set[str] = set()
    for r in selected:
        if r.pending:
            continue
        cfg = r.config(out)
        key = repr((cfg.env.name, sorted(cfg.env.kwargs.items()), cfg.relay.enabled, cfg.relay.team,
                    cfg.dqn.parameter_sharing))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_with_env(cfg)
        except C.ConfigError as exc:
            raise UserError(f"{r.where}: entry {r.entry!r}: {exc}") from None


@grid_app.command("list")
def grid_list(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder to read run statuses from "
                                                  "(default runs/<grid name>)")] = None,
    format_: Annotated[str, typer.Option("--format", help="table | cli (train arguments, one run per line) | "
                                                          "names (run folders) | json")] = "table",
    cpus_per_trial: Annotated[float, typer.Option("--cpus-per-trial", help="CPUs per run, as grid run gets it: the "
                                                                          "time to go's runs at a time here")] = 1.0,
) -> None:
    """Show the runs a grid file expands to (entries x sweep points x seeds), their status and the time to go."""
    import dataclasses
    import json

    from suPER import runs
    from suPER.campaigns.local import stale as campaigns_stale

    positive("--cpus-per-trial", cpus_per_trial)
    grid, selected = _load_grid(file, seeds, filter_)
    out = out or grid.default_out
    if format_ == "cli":
        import shlex

        for r in selected:
            if not r.pending:
                print(shlex.join(r.cli_args()))
        return
    if format_ == "names":
        print("\n".join(r.run_name for r in selected if not r.pending))
        return
    if format_ not in ("table", "json"):
        raise UserError(f"--format: expected table, cli, names or json, got {format_!r}")

    def state(r: Any) -> tuple[str, Any]:
        """(status, RunProgress or None) of a run's folder; "stopped" for a running one whose writer was killed."""
        if r.pending:
            return "pending", None
        folder = runs.RunFolder(out / r.run_name)
        status = folder.status() or "-"
        if status == runs.RUNNING and folder.writer_exited():
            status = "stopped"  # the manifest says running, but the process writing it was killed
        if status == runs.FINISHED and campaigns_stale(folder, r, out):
            return "stale", None  # finished with another configuration than the grid asks now
        return status, (folder.progress() if status not in ("-", runs.FINISHED) else None)

    states = {id(r): state(r) for r in selected}
    if format_ == "json":
        rows_json = []
        for r in selected:
            status, progress = states[id(r)]
            rows_json.append({**r.as_dict(), "run_name": r.run_name, "cli": None if r.pending else r.cli_args(),
                              "status": status, "progress": None if progress is None else dataclasses.asdict(progress)})
        print(json.dumps(rows_json, indent=1))
        return
    pairs = {id(r): _flag_pairs(r.cli_args()[6:]) for r in selected}
    common = set.intersection(*(set(p) for p in pairs.values())) if pairs else set()
    counts: dict[str, int] = {}
    rows = []
    for r in selected:
        status, progress = states[id(r)]
        counts[status] = counts.get(status, 0) + 1
        shown = status if progress is None else f"{status} {progress.describe()}"  # env steps / budget, time left
        flags = r.pending if r.pending else " ".join(p for p in pairs[id(r)] if p not in common)
        rows.append([r.entry, r.env, r.algo, str(r.seed), "-" if r.pending else r.run_name, shown, flags])
    notes = []
    if "stale" in counts:
        notes.append("stale: a finished run whose recorded configuration differs from what the grid asks now; grid run "
                     "refuses it (remove its folder to train it again)")
    if "stopped" in counts:
        notes.append("stopped: the manifest says running but the process that wrote it has exited (killed); "
                     "grid run resumes it from its last checkpoint")
    if common:
        notes.append("every run above also gets: " + " ".join(p for p in pairs[id(selected[0])] if p in common))
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    notes.append(f"{len(selected)} runs of {len(grid.runs)} ({summary}); run folders under {out}")
    notes += _to_go(selected, states, out).describe(costs.local_parallel(cpus_per_trial))
    print_table(f"{grid.name}: {file}", ["entry", "env", "algo", "seed", "run folder", "status", "flags"], rows, notes)


def _to_go(selected: list[Any], states: dict[int, tuple[str, Any]], out: Path) -> costs.ToGo:
    """What the runs neither finished nor pending still need (``costs.ToGo``; a stale run is refused by grid run,
    so it is left out): priced by the finished runs under ``out``, then the committed Figure 1 records."""
    from suPER import runs

    left = [(r, *states[id(r)]) for r in selected if states[id(r)][0] not in ("pending", "stale", runs.FINISHED)]
    return costs.to_go([(r.config(), p.env_steps if p is not None else 0) for r, _, p in left], costs.Pricing.of(out),
                       running=sum(status == runs.RUNNING for _, status, _ in left))


@grid_app.command("run")
def grid_run(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[Path | None, typer.Option(help="campaign folder for the run folders (default runs/<grid name>)")] = None,
    cpus_per_trial: Annotated[float, typer.Option("--cpus-per-trial", help="CPUs per run (= its torch threads)")] = 1.0,
    gpus_per_trial: Annotated[float, typer.Option("--gpus-per-trial", help="GPUs per run (> 0: networks on CUDA)")] = 0.0,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS, else Ray "
                                                     "starts embedded on this machine, loopback only)")] = None,
    max_failures: Annotated[int, typer.Option("--max-failures", help="retries of a failing run (each resumes "
                                                                     "from its checkpoint)")] = 1,
    wandb: Annotated[bool | None, typer.Option("--wandb/--no-wandb", help="log every run to W&B (default: as "
                                                                          "the grid file says)")] = None,
    wandb_project: Annotated[str | None, typer.Option("--wandb-project")] = None,
    wandb_group: Annotated[str | None, typer.Option("--wandb-group", help="default: the grid name")] = None,
    wandb_mode: Annotated[str | None, typer.Option("--wandb-mode", help="offline | online")] = None,
    pack: Annotated[bool, typer.Option("--pack", help="train runs that share the network and update schedule "
                                                      "as packs, one trial per pack (DQN / DDQN; others run alone)")] = False,
    pack_size: Annotated[int | None, typer.Option("--pack-size", help="most runs per pack (default: all runs "
                                                                      "that can share one)")] = None,
    pack_memory_gb: Annotated[float | None, typer.Option("--pack-memory-gb", help="memory per pack in GB: packs "
                                                         "are sized to fit it, a pack over it is refused (default: "
                                                         "80% of the trial device's free memory, per trial)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the runs (and packs) to train; start nothing")] = False,
) -> None:
    """Run a grid through Ray Tune: one trial per run (or, with --pack, per pack), a live progress table.

    Re-running the same command skips finished runs and resumes unfinished ones from their latest
    checkpoint (after a crash, Ctrl-C or SIGKILL).
    """
    from suPER import campaigns

    positive("--cpus-per-trial", cpus_per_trial)
    if pack_size is not None and pack_size < 1:
        raise UserError(f"--pack-size: expected an integer >= 1, got {pack_size}")
    if pack_memory_gb is not None:
        positive("--pack-memory-gb", pack_memory_gb)
    if not pack and (pack_size is not None or pack_memory_gb is not None):
        raise UserError("--pack-size / --pack-memory-gb: only with --pack")
    grid, selected = _load_grid(file, seeds, filter_)
    if not selected:
        raise UserError(f"--filter: no run of {file} matches {' '.join(filter_ or [])!r}")
    out = out or grid.default_out
    _check_grid_with_env(selected, out)
    run_fields: dict[str, Any] = {}
    if wandb is not None:
        run_fields["wandb"] = wandb
        if wandb:
            run_fields["wandb_group"] = wandb_group or grid.name
    run_fields.update({k: v for k, v in (("wandb_project", wandb_project), ("wandb_mode", wandb_mode))
                       if v is not None})
    if wandb_group is not None:
        run_fields["wandb_group"] = wandb_group
    outcome = campaigns.run_grid(grid, selected, out, cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
                                 address=address, max_failures=max_failures, run_fields=run_fields, pack=pack,
                                 pack_size=pack_size, pack_memory_gb=pack_memory_gb, dry_run=dry_run)
    if dry_run:
        return
    stopped = (f", {len(outcome['interrupted'])} interrupted (they resume from their checkpoints), "
               f"{len(outcome['not_started'])} not started" if outcome["interrupted"] or outcome["not_started"] else "")
    print(f"{len(outcome['finished'])} finished now, {len(outcome['skipped'])} finished before, "
          f"{len(outcome['failed'])} failed{stopped}, {len(outcome['pending'])} pending; run folders in {out}")
    if outcome["failed"]:
        print("re-run the same command to resume the failed runs from their checkpoints", file=sys.stderr)
        raise typer.Exit(1)
    if outcome["interrupted"] or outcome["not_started"]:  # Ray Tune took the Ctrl-C and returned: exit as an
        raise typer.Exit(130)  # interrupt (main says how to go on)


@grid_app.command("submit")
def grid_submit(
    file: Annotated[Path, typer.Argument(help="grid file (YAML)")],
    address: Annotated[str | None, typer.Option(help="Ray dashboard address, http://HOST:8265 (default: "
                                                     "RAY_ADDRESS, else http://127.0.0.1:8265 as forwarded by "
                                                     "`ray dashboard cluster/aws.yaml`)")] = None,
    filter_: FilterOpt = None,
    seeds: SeedsOpt = None,
    out: Annotated[str | None, typer.Option(help="run folders on the cluster (default ~/super-marl-runs/<grid "
                                                 "name>, expanded there; use shared storage on multi-node "
                                                 "clusters)")] = None,
    per: Annotated[str, typer.Option(help="run: one job per run (super-marl train) | grid: one job running "
                                          "super-marl grid run on the cluster")] = "run",
    cpus: Annotated[float, typer.Option(help="CPUs per run")] = 1.0,
    gpus: Annotated[float, typer.Option(help="GPUs per run")] = 0.0,
    runtime_env_file: Annotated[Path, typer.Option("--runtime-env", help="runtime env YAML")] = Path(
        "ray_runtime.yaml"),
    wandb: Annotated[bool | None, typer.Option("--wandb/--no-wandb", help="log online to W&B (default: when "
                                                                          "~/.config/super-marl/wandb.netrc, the "
                                                                          "nodes' W&B login, exists here)")] = None,
    wandb_project: Annotated[str, typer.Option("--wandb-project")] = "super-marl",
    wait: Annotated[bool, typer.Option(help="wait for the jobs; exit 1 if one fails")] = False,
    print_jobs: Annotated[bool, typer.Option("--print-jobs", help="print the jobs (id, CPUs, GPUs, command; "
                                                                  "tab-separated) and submit nothing")] = False,
) -> None:
    """Submit the runs of a grid to a Ray cluster with the Job Submission API (JobSubmissionClient).

    The repository is shipped as each job's working_dir (ray_runtime.yaml). No secret travels with the jobs
    (Ray logs and serves runtime envs): the nodes log in to W&B with the netrc file cluster/aws.yaml installs.
    Resubmitting skips finished runs and resumes unfinished ones.
    """
    from suPER import campaigns

    positive("--cpus", cpus)
    grid, selected = _load_grid(file, seeds, filter_)
    if not [r for r in selected if not r.pending]:
        raise UserError(f"--filter: no runnable run of {file} matches {' '.join(filter_ or [])!r}")
    out = out or f"~/super-marl-runs/{grid.name}"
    _check_grid_with_env(selected, Path(out))
    jobs = campaigns.plan_jobs(grid, selected, out, per=per, cpus=cpus, gpus=gpus, filters=filter_ or (),
                               seeds=seeds, wandb=wandb, wandb_project=wandb_project)
    if print_jobs:
        for job in jobs:
            print(f"{job.submission_id}\t{job.num_cpus:g}\t{job.num_gpus:g}\t{job.entrypoint}")
        return
    url = campaigns.dashboard_url(address)
    runtime_path = runtime_env_file if runtime_env_file.is_absolute() else C.ROOT / runtime_env_file
    ids = campaigns.submit_jobs(jobs, url, campaigns.runtime_env(runtime_path), grid.name)
    print(f"submitted {len(ids)} job(s) for {sum(len(j.runs) for j in jobs)} run(s) of {grid.name} to {url}; "
          f"run folders in {out} on the cluster")
    for jid in ids:
        print(f"  {jid}    (ray job logs --address {url} {jid})")
    if wait:
        status = campaigns.wait_for_jobs(url, ids, on_change=lambda j, s: print(f"{j}: {s}", file=sys.stderr))
        failed = [j for j, s in status.items() if s != "SUCCEEDED"]
        print(f"{len(ids) - len(failed)} job(s) succeeded, {len(failed)} did not")
        if failed:
            raise typer.Exit(1)


def _flag_pairs(args: list[str]) -> list[str]:
    """``["--set", "a=1", "--super"]`` -> ``["--set a=1", "--super"]`` (one item per flag)."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append(a)
        else:
            out[-1] += f" {a}"
    return out

