"""Many runs on one machine (or an existing Ray cluster) through Ray Tune: one function trial per grid run,
each calling ``execute`` into its normal run folder, with a live progress table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suPER.campaigns.execute import execute, first_difference
from suPER.campaigns.grid import Grid, GridRun
from suPER.campaigns.resources import run_resources
from suPER.resolve import without_volatile

# --------------------------------------------------------------------------------------------------
# many runs: Ray Tune, one trial per run


@dataclass
class Plan:
    """What ``grid run`` will do with the selected runs of a grid."""

    todo: list[GridRun]
    """runs to start fresh or resume"""
    finished: list[GridRun]
    """runs whose folder already holds a finished run (skipped)"""
    pending: list[GridRun]
    """entries whose trainer has not landed (skipped)"""
    resumable: list[str] = field(default_factory=list)
    """run folders of ``todo`` that will resume from a checkpoint"""


def stale(folder: Any, run: GridRun, out: Path) -> str:
    """Where the configuration recorded in ``folder`` differs from what ``run`` asks now (``"key: a in the folder vs b
    now"`` of the first differing key, volatile keys aside; an unreadable config.json counts as different), or ""
    when they agree: a finished run of another budget or setting must not count as this one, nor an unfinished one
    be resumed as it."""
    import json

    try:
        old = json.loads(folder.config.read_text())
    except (OSError, ValueError):
        return "its config.json cannot be read"
    new = without_volatile(run.config(out=out).to_dict())
    old = without_volatile(old)
    return "" if old == new else first_difference(old, new)


def plan_runs(runs_: Sequence[GridRun], out: Path) -> Plan:
    """Sort runs into to-do / finished / pending, and refuse unfinished folders of another configuration.

    Raises:
        RunFolderError: an unfinished run folder holds a different configuration (nothing has run yet).
    """
    from suPER import runs

    plan = Plan([], [], [])
    for run in runs_:
        if run.pending:
            plan.pending.append(run)
            continue
        folder = runs.RunFolder(out / run.run_name)
        status = (folder.checked_manifest() or {}).get("status")  # an unreadable manifest is refused up front
        if status == runs.FINISHED:
            diff = stale(folder, run, out)
            if diff:
                raise runs.RunFolderError(
                    f"--out: {folder.path} holds a finished run of a different configuration ({diff}); it was not "
                    f"made with what is asked now", "remove that folder to train it again, or choose another --out")
            plan.finished.append(run)
            continue
        if status is not None and (folder.checkpoints / "latest.pt").exists():
            diff = stale(folder, run, out)
            if diff:
                raise runs.RunFolderError(f"--out: {folder.path} holds an unfinished run of a different configuration "
                                          f"({diff}); remove it or choose another --out")
            plan.resumable.append(run.run_name)
        plan.todo.append(run)
    return plan


def _trainable(config: dict[str, Any]) -> None:
    """Ray Tune function trainable: build the run's config and train it into its run folder."""
    import time

    from ray import tune

    run = GridRun.from_dict(config["run"])
    cfg = run.config(out=config["out"], progress=False, threads=config["threads"], device=config["device"],
                     **config.get("run_fields", {}))
    budget = cfg.run.num_timesteps
    last = [0.0]

    def progress(env_steps: int, stats: dict[str, float]) -> None:
        now = time.monotonic()
        if now - last[0] >= config["report_every_s"]:
            last[0] = now
            tune.report({"env_steps": env_steps, "budget": budget, "team_return": stats.get("team_return"),
                         "done": False})

    summary = execute(cfg, progress=progress, extra_manifest={"grid": config["grid"], "grid_entry": run.entry})
    tune.report({"env_steps": summary.env_steps, "budget": budget, "team_return": summary.final_team_return,
                 "env_steps_per_sec": summary.env_steps_per_sec, "done": True})


def _pack_trainable(config: dict[str, Any]) -> None:
    """Ray Tune function trainable of ``grid run --pack``: one pack, its runs trained by one ``train_pack``.

    Runs whose folder finished (a retry after another run of the pack failed) are left out; the trial fails
    when a run of the pack did not finish, so Tune retries it (each retry resumes the unfinished runs).
    Progress: every result carries ``runs``, one row per run of the pack (env steps, budget, last
    evaluation's team return, status, and at the end its training env steps/s), which the live table
    shows as that run's row, as an unpacked trial's result is.
    """
    import time

    from ray import tune

    from suPER import runs as runs_mod
    from suPER.campaigns.packed import execute_pack

    grid_runs = [GridRun.from_dict(d) for d in config["pack"]["runs"]]
    cfgs = [r.config(out=config["out"], progress=False, threads=config["threads"], device=config["device"],
                     **config.get("run_fields", {})) for r in grid_runs]
    todo = [i for i, cfg in enumerate(cfgs)
            if runs_mod.RunFolder(Path(config["out"]) / cfg.run_name).status() != runs_mod.FINISHED]
    if not config["pack"]["packed"]:  # an algorithm the packed trainer does not train: the single-run trial
        _trainable({**config, "run": config["pack"]["runs"][0]})
        return
    rows: dict[str, dict[str, Any]] = {cfg.run_name: {"budget": cfg.run.num_timesteps, "status": "FINISHED"
                                                      if i not in todo else "RUNNING"} for i, cfg in enumerate(cfgs)}
    last = [0.0]

    def report(done: bool) -> None:
        steps = [r.get("env_steps", 0) for r in rows.values()]
        tune.report({"env_steps": sum(steps), "budget": sum(c.run.num_timesteps for c in cfgs),
                     "team_return": float("nan"), "runs": {k: dict(v) for k, v in rows.items()}, "done": done})

    def run_progress(name: str) -> Any:
        def progress(env_steps: int, stats: dict[str, float]) -> None:
            rows[name].update(env_steps=env_steps, team_return=stats.get("team_return", rows[name].get("team_return")))
            if stats.get("failed"):
                rows[name]["status"] = "ERROR"
            now = time.monotonic()
            if now - last[0] >= config["report_every_s"]:
                last[0] = now
                report(False)
        return progress

    outcomes = execute_pack([cfgs[i] for i in todo], extra_manifests=[
        {"grid": config["grid"], "grid_entry": grid_runs[i].entry} for i in todo],
        progress=[run_progress(cfgs[i].run_name) for i in todo]) if todo else []
    failed = [(cfgs[i].run_name, out) for i, out in zip(todo, outcomes) if isinstance(out, BaseException)]
    for i, out in zip(todo, outcomes):
        row = rows[cfgs[i].run_name]
        if isinstance(out, BaseException):
            row["status"] = "ERROR"
        else:
            row.update(status="FINISHED", env_steps=out.env_steps, team_return=out.final_team_return,
                       env_steps_per_sec=out.env_steps_per_sec)
    report(not failed)
    if failed:
        name, exc = failed[0]
        raise RuntimeError(f"{len(failed)} run(s) of the pack did not finish, first {name}: "
                           f"{type(exc).__name__}: {exc}") from exc


def reachable(address: str, label: str, timeout_s: float = 5.0) -> None:
    """Check within ``timeout_s`` that a Ray cluster's GCS answers at ``address`` (``HOST:PORT``; ``auto`` and
    ``local`` are Ray's own words for a cluster on this machine and pass).

    Raises:
        ClusterError: one line naming ``label`` (the flag, or the environment variable it came from).
    """
    import socket

    from suPER.campaigns.cluster import ClusterError

    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterError(f"{label}: expected HOST:PORT of a Ray cluster's GCS, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        hint = "; unset it to run on this machine" if label.startswith("RAY_ADDRESS") else ""
        raise ClusterError(f"{label}: no Ray cluster answers at {address} within {timeout_s:g} s "
                           f"({exc.strerror or type(exc).__name__}){hint}") from None


@contextmanager
def ray_session(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> Iterator[str]:
    """Connect to ``address`` (or ``RAY_ADDRESS``), or start Ray embedded on this machine, for the block.

    The embedded instance (``embedded_ray``) keeps Ray's token authentication on with a token made for
    it, because Ray binds its servers to all interfaces; and a watchdog stops every process it started
    when the block ends or the driver dies, SIGKILL included.

    Yields:
        ``"cluster <address>"`` or ``"local"``.
    """
    import os

    import ray

    from suPER import embedded_ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:  # run_grid checked it is reachable (``reachable``) before printing its plan
        ray.init(address=address, log_to_driver=False)
        try:
            yield f"cluster {address}"
        finally:
            ray.shutdown()
        return
    handle = embedded_ray.start(num_cpus=num_cpus, num_gpus=num_gpus)
    try:
        yield "local"
    finally:
        embedded_ray.stop(handle)


def run_grid(grid: Grid, runs_: Sequence[GridRun], out: Path, cpus_per_trial: float = 1.0,
             gpus_per_trial: float = 0.0, address: str | None = None, max_failures: int = 1,
             console: Any = None, run_fields: dict[str, Any] | None = None, pack: bool = False,
             pack_size: int | None = None, pack_memory_gb: float | None = None,
             dry_run: bool = False) -> dict[str, list[str]]:
    """Run the selected runs of ``grid`` through Ray Tune, one trial per run, each into ``out/<run name>``.

    Finished runs are skipped, unfinished ones resume from their latest checkpoint (in the trial, via
    :func:`execute`), pending entries are skipped. A trial that fails is retried ``max_failures`` times
    (each retry resumes from the run's checkpoint).

    Args:
        grid: the expanded grid.
        runs_: the runs to consider (e.g. ``grid.select(filters)``).
        out: campaign folder holding the run folders.
        cpus_per_trial: CPUs reserved per run (also its torch thread count, rounded, at least 1).
        gpus_per_trial: GPUs reserved per run (> 0 puts the networks on CUDA).
        address: Ray cluster to use; None = ``RAY_ADDRESS`` or an embedded local instance.
        max_failures: retries per failing trial.
        console: rich console for the live table (None: a new one on stderr).
        run_fields: ``run.*`` settings for every run that do not change results (W&B logging).
        pack: group the runs by ``pack_key`` into packs (``campaigns.packs``), one trial per pack, each
            trained by the packed trainer (runs it does not train stay single trials); a pack reserves
            ``cpus_per_trial`` / ``gpus_per_trial`` once.
        pack_size: most runs per pack (None: packs sized to fit the memory limit, ``campaigns.packs``).
        pack_memory_gb: the memory limit per pack, decimal GB; None = ``packs.memory_limit``: a headroom
            fraction of the free memory of the trials' device, per trial, measured on this machine when
            Ray runs here, or by a Ray task with a trial's resources on a cluster worker. A pack over it
            is refused (with ``pack_size``, or a single run too large) before any trial starts.
        dry_run: print the plan (and the packs) and return before Ray starts.

    Returns:
        Run names by outcome: ``finished`` (now), ``skipped`` (finished before), ``failed``, ``pending``,
        ``interrupted`` (Ctrl-C stopped Tune before the run finished: it resumes when run again).

    Raises:
        ConfigError: with ``pack``, a pack's memory estimate exceeds the limit (no trial has run).
    """
    import sys
    import time

    from rich.console import Console

    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    out = Path(out).resolve()
    if not dry_run:  # Tune's storage (out/.tune) and every run folder go there: refused before anything starts
        import os

        from suPER.runs import writable_folder

        if address or os.environ.get("RAY_ADDRESS"):  # an unreachable cluster: one line before any plan is printed
            reachable(address or os.environ["RAY_ADDRESS"], "--address" if address else "RAY_ADDRESS (in the environment)")
        writable_folder(out)
    plan = plan_runs(runs_, out)
    outcome: dict[str, list[str]] = {"finished": [], "skipped": [r.run_name for r in plan.finished], "failed": [],
                                     "pending": [r.entry for r in plan.pending], "interrupted": [], "not_started": []}
    if plan.finished:
        console.print(f"skipping {len(plan.finished)} finished run(s)")
    if plan.pending:
        console.print(f"skipping {len(plan.pending)} pending run(s) (trainer not available yet)")
    if not plan.todo:
        console.print("nothing to run")
        return outcome
    console.print(f"{len(plan.todo)} run(s) to train ({len(plan.resumable)} resuming from a checkpoint) -> {out}")
    threads, device = run_resources(cpus_per_trial, gpus_per_trial)
    import os

    cluster = bool(address or os.environ.get("RAY_ADDRESS"))
    fields = dict(threads=threads, device=device, **(run_fields or {}))
    packs = None
    if pack and (pack_memory_gb is not None or not cluster or dry_run):  # sized here, before Ray starts
        from suPER.campaigns.packs import memory_limit

        limit = (int(pack_memory_gb * 1e9) if pack_memory_gb is not None else
                 memory_limit(device, cpus_per_trial, gpus_per_trial))
        packs = _plan_packs(console, plan.todo, out, pack_size, limit, pack_memory_gb is not None,
                            f"{device} of this machine" + (" (dry run: not the cluster's workers)" if cluster else ""),
                            fields)
    if dry_run:
        return outcome

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our live table replaces Tune's console output
    from ray import tune

    _quiet_tune_interrupt_advice()

    with ray_session(address) as where:
        if pack and packs is None:  # a cluster: the limit is measured on a worker, by a task with a trial's resources
            from suPER.campaigns.packs import worker_memory_limit

            limit = worker_memory_limit(device, cpus_per_trial, gpus_per_trial)
            packs = _plan_packs(console, plan.todo, out, pack_size, limit, False, f"{device} of a cluster worker",
                                fields)
        param: dict[str, Any] = {"out": str(out), "threads": threads, "device": device, "grid": grid.name,
                                 "report_every_s": 2.0, "run_fields": dict(run_fields or {})}
        if packs is None:
            param["run"] = tune.grid_search([r.as_dict() for r in plan.todo])
        else:
            param["pack"] = tune.grid_search([{"name": p.name, "packed": p.packed, "runs": [r.as_dict() for r in p.runs]}
                                              for p in packs])
        trainable: Any = _trainable if packs is None else _pack_trainable
        table = _live_table(console, [r.run_name for r in plan.todo], where)

        def trial_name(trial: Any) -> str:
            return _trial_run_name(trial.config)

        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": cpus_per_trial, "gpu": gpus_per_trial}),
            param_space=param,
            tune_config=tune.TuneConfig(trial_name_creator=trial_name, trial_dirname_creator=trial_name),
            run_config=tune.RunConfig(name=f"{grid.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                      storage_path=str(out / ".tune"), verbose=0, log_to_file=True,
                                      failure_config=tune.FailureConfig(max_failures=max_failures),
                                      callbacks=[table]),
        )
        with table:
            results = tuner.fit()
        from suPER.runs import FINISHED, RunFolder

        for res in results:
            # a trial Ctrl-C stopped before it started has no config; its folder is named after the run
            name = _trial_run_name(res.config) if res.config else Path(res.path).name
            names = [r["_run_name"] for r in res.config["pack"]["runs"]] if packs is not None and res.config else [name]
            for run_name in names:
                status = RunFolder(out / run_name).status()
                finished = status == FINISHED
                key = ("finished" if finished else "failed" if res.error else "interrupted") if packs is not None else (
                    "failed" if res.error else "finished" if finished else "interrupted")
                if key == "interrupted" and status is None:  # Ctrl-C came before this run wrote anything
                    key = "not_started"
                outcome[key].append(run_name)
            if res.error:
                console.print(f"[red]failed[/] {name}: {str(res.error).strip().splitlines()[-1]} "
                              f"(log: {res.path})")
    return outcome


class _TuneAdvice:
    """Drops Ray Tune's own Ctrl-C messages ("Stop signal received", "Resume experiment with: Tuner.restore(...)", a
    FileNotFoundError for every trial the Ctrl-C stopped before it started): its restore advice does not resume run
    folders, and grid run counts the runs not started and says what resumes them (the same command)."""

    def filter(self, record: Any) -> bool:
        text = record.getMessage()
        return not any(s in text for s in ("Stop signal received", "Tuner.restore", "has been interrupted",
                                           "Failed to fetch metrics"))


def _quiet_tune_interrupt_advice() -> None:
    """Attach ``_TuneAdvice`` to Tune's loggers (once)."""
    import logging

    for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _TuneAdvice) for f in log.filters):
            log.addFilter(_TuneAdvice())


def _plan_packs(console: Any, todo: Sequence[GridRun], out: Path, pack_size: int | None, limit: int, given: bool,
                measured: str, fields: dict[str, Any]) -> list[Any]:
    """Plan the packs (sized by ``limit`` unless ``pack_size``), print them, refuse one over ``limit``.

    Raises:
        ConfigError: a pack (with no ``pack_size``: a single run) needs more than ``limit`` bytes.
    """
    from suPER.campaigns.packs import HEADROOM, check_memory, plan_packs

    packs = plan_packs(todo, out, pack_size, limit, **fields)
    how = "--pack-memory-gb" if given else f"{HEADROOM:.0%} of the free memory of the {measured}, per trial"
    sizes = ", ".join(str(len(p.runs)) for p in packs if p.packed)
    console.print(f"pack memory limit {limit / 1e9:.3g} GB ({how})")
    console.print(f"pack sizes ({'--pack-size' if pack_size is not None else 'chosen to fit'}): {sizes or '-'}")
    for p in packs:
        console.print(f"pack {p.name}: {len(p.runs)} run(s), " + (
            f"about {p.bytes / 1e9:.3f} GB at full replay" if p.packed else "not packable, runs alone"))
    check_memory(packs, limit, "--pack-memory-gb" if given else f"--pack-memory-gb (default: {how})")
    return packs


def _live_table(console: Any, run_names: Sequence[str], where: str) -> Any:
    """A Tune callback that keeps a rich live table of every trial's progress (use it as a context manager)."""
    import time

    from ray.tune import Callback
    from rich.live import Live
    from rich.table import Table

    class LiveTable(Callback):
        def __init__(self, console: Any, run_names: Sequence[str], where: str) -> None:
            # no closure over these: Tune pickles its callbacks (the class goes by value)
            self.rows: dict[str, dict[str, Any]] = {n: {"status": "PENDING"} for n in run_names}
            self.title = f"Ray Tune ({where})"
            self.console: Any = console
            self.live: Any = None
            self.t0 = time.monotonic()

        def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks; the live display stays here
            return {"rows": self.rows, "title": self.title, "console": None, "live": None, "t0": self.t0}

        def __enter__(self) -> LiveTable:
            self.live = Live(self.render(), console=self.console, refresh_per_second=1, transient=False)
            self.live.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            if self.live is not None:
                self.live.update(self.render())
                self.live.__exit__(None, None, None)
                self.console.line()

        def render(self) -> Table:
            done = sum(r["status"] == "FINISHED" for r in self.rows.values())
            table = Table(title=f"{self.title}: {done}/{len(self.rows)} runs finished, "
                                f"{time.monotonic() - self.t0:.0f} s", title_justify="left")
            for col in ("run", "status", "env steps", "eval team return", "steps/s"):
                table.add_column(col, overflow="fold")
            for name, r in self.rows.items():
                steps = f"{r['env_steps']}/{r['budget']}" if "env_steps" in r else "-"
                ret, sps = r.get("team_return"), r.get("env_steps_per_sec")
                table.add_row(name, r["status"], steps, "-" if ret is None or ret != ret else f"{ret:.2f}",
                              "-" if sps is None else f"{sps:.0f}")
            return table

        def _set(self, trial: Any, **values: Any) -> None:
            """Update the trial's row, or every row of a pack trial (a finished run keeps FINISHED)."""
            for name in _trial_runs(trial.config):
                row = self.rows.setdefault(name, {})
                if not (row.get("status") == "FINISHED" and values.get("status") in ("RUNNING", "RETRYING", "ERROR")):
                    row.update(values)
            if self.live is not None:
                self.live.update(self.render())

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="RUNNING")

        def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="RETRYING")

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            keys = ("env_steps", "budget", "team_return", "env_steps_per_sec", "status")
            if "runs" in result:  # a pack: one row per run, as its own trial would report it
                for name, values in result["runs"].items():
                    self.rows.setdefault(name, {}).update({k: values[k] for k in keys if k in values})
                if self.live is not None:
                    self.live.update(self.render())
                return
            self._set(trial, **{k: result[k] for k in keys if k in result and k != "status"})

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="FINISHED")

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="ERROR")

    return LiveTable(console, run_names, where)


def _trial_runs(config: dict[str, Any]) -> list[str]:
    """The run folder names a trial trains: its run, or every run of its pack."""
    if "pack" in config:
        return [str(r["_run_name"]) for r in config["pack"]["runs"]]
    return [_trial_run_name(config)]


def _trial_run_name(config: dict[str, Any]) -> str:
    """The run folder name of a trial, from its config (``{"run": GridRun.as_dict(), ...}``); a pack's name."""
    return str(config["pack"]["name"] if "pack" in config else config["run"]["_run_name"])
