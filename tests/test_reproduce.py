"""``super-marl reproduce``: the plan (runs, env steps, estimate) per figure and fraction, and a tiny real run
that ends with the figure and tables and skips its finished runs when run again."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suPER import config as C
from suPER import reproduce as R
from suPER.campaigns import load_grid

SMOKE = C.ROOT / "experiments" / "smoke.yaml"


def cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(C.ROOT), "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline",
           "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def plan_numbers(stdout: str) -> tuple[int, int, int, float]:
    """(runs, finished, env steps to train, wall hours) from the printed plan."""
    m = re.search(r"(\d+) runs \((\d+) finished, \d+ to run\), ([\d,]+) env steps", stdout)
    assert m, stdout
    w = re.search(r"estimated wall time [^:]+: ([\d.]+) (h|min|s) ", stdout)
    wall = float(w.group(1)) * {"h": 1.0, "min": 1 / 60, "s": 1 / 3600}[w.group(2)] if w else 0.0
    return int(m.group(1)), int(m.group(2)), int(m.group(3).replace(",", "")), wall


@pytest.mark.parametrize("figure,fraction", [("fig1", None), ("fig1", 0.05), ("bandwidth", 0.5)])
def test_dry_run_plans_runs_steps_and_estimate(tmp_path: Path, figure: str, fraction: float | None) -> None:
    grid = load_grid(C.ROOT / R.FIGURES[figure].grid)
    runnable = [r for r in grid.runs if not r.pending]
    budgets = {r.run_name: (round(fraction * R.paper_budget(r.env)) if fraction else r.config().run.num_timesteps)
               for r in runnable}
    seconds = 0.0
    for r in runnable:
        cfg = r.config()
        n = budgets[r.run_name]
        # the paper's n / eval_points, never under one episode (a short run would mostly evaluate)
        interval = cfg.run.eval_interval or max(cfg.env.horizon, n // cfg.run.eval_points)
        seconds += n / R.DEFAULT_THROUGHPUT[r.env] + (n // interval + 1) * cfg.run.eval_episodes * cfg.env.horizon \
            * R.DEFAULT_EVAL_S_PER_STEP[r.env]
    args = ["reproduce", figure, "--dry-run", "--out", str(tmp_path / "c")] + (["--fraction", str(fraction)]
                                                                               if fraction else [])
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    runs, finished, steps, wall_h = plan_numbers(res.stdout)
    assert (runs, finished, steps) == (len(runnable), 0, sum(budgets.values()))
    parallel = R.local_parallel(1.0)
    assert wall_h == pytest.approx(seconds / parallel / 3600, rel=0.006)  # printed with 3 significant digits
    assert "default: measured in the Figure 1 campaign" in res.stdout
    assert not (tmp_path / "c").exists()  # dry run: nothing written


def _run_folder(out: Path, run: Any, status: str, rows: list[tuple[int, float]]) -> None:
    """A run folder with its config, a manifest and metrics rows (env steps, wall_time_s)."""
    folder = out / run.run_name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(run.config(out=out).to_dict()))
    (folder / "manifest.json").write_text(json.dumps({"status": status}))
    (folder / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n"
                                        + "".join(f"{n},0.0,{w}\n" for n, w in rows))


def test_estimate_uses_the_pace_of_the_runs_already_there(tmp_path: Path) -> None:
    """The runs under OUT, finished or not, give each env's pace (median wall seconds per env step, evaluations
    included); an unfinished run counts only the env steps it has left; envs with no run use the defaults."""
    grid, runs = R.figure_runs("fig1", fraction=0.01, seeds=1, envs=["pursuit", "battle"])
    pursuit = [r for r in runs if r.env == "pursuit"]
    battle = [r for r in runs if r.env == "battle"]
    out = tmp_path / "c"
    _run_folder(out, pursuit[0], "finished", [(0, 10.0), (4000, 210.0), (8000, 400.0)])  # 0.05 s per step
    _run_folder(out, pursuit[1], "running", [(0, 10.0), (4000, 360.0)])                  # 0.09 s per step, half done
    _run_folder(out, pursuit[2], "running", [(0, 12.0)])                                  # one row: no pace yet
    est = R.estimate(runs, out, parallel=2)
    assert est.finished == 1 and len(est.todo) == len(runs) - 1
    pace, source = est.pace["pursuit"]
    assert pace == pytest.approx((0.05 + 0.09) / 2) and source == "median of 2 run(s) there"
    b_cfg = battle[0].config()
    evals = b_cfg.run.num_timesteps // b_cfg.eval_interval + 1
    b_pace = 1 / R.DEFAULT_THROUGHPUT["battle"] + evals * b_cfg.run.eval_episodes * b_cfg.env.horizon \
        / b_cfg.run.num_timesteps * R.DEFAULT_EVAL_S_PER_STEP["battle"]
    assert est.pace["battle"] == (pytest.approx(b_pace), "default")
    n_p, n_b = 8000, b_cfg.run.num_timesteps
    left_p = n_p * (len(pursuit) - 1) - 4000  # the finished run none, the half-done one 4000
    assert est.env_steps == left_p + n_b * len(battle)
    assert est.wall_seconds == pytest.approx((left_p * pace + n_b * len(battle) * b_pace) / 2, rel=1e-9)
    text = R.describe("fig1", est, out, "on this machine")
    assert f"{est.env_steps:,} env steps to train -> {out}" in text and "(median of 2 run(s) there)" in text
    assert "battle" in text and "default: measured in the Figure 1 campaign" in text


@pytest.mark.parametrize("args,flag", [
    (["--fraction", "0"], "--fraction"), (["--seeds", "0"], "--seeds"), (["--env", "pong"], "--env"),
    (["--layer", "nope.yaml"], "--layer"), (["--filter", "colour=red"], "--filter"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], flag: str) -> None:
    res = cli("reproduce", "fig1", "--dry-run", *args, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {flag}")


def test_tiny_reproduction_draws_the_figure_and_tables_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "fig1"
    fraction = 200 / R.paper_budget("pursuit")  # 200 env steps per run on the smoke grid's small pursuit
    args = ["reproduce", "fig1", "--env", "pursuit", "--seeds", "2", "--fraction", f"{fraction:.10f}", "--layer",
            str(SMOKE), "--filter", "name=pursuit-ddqn,pursuit-ddqn-super-quantile", "--out", str(out)]
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert plan_numbers(res.stdout)[:3] == (4, 0, 800)
    folders = sorted(p.name for p in out.iterdir() if (p / "manifest.json").is_file())
    assert folders == ["pursuit__ddqn__s1__paper", "pursuit__ddqn__s2__paper",  # reproduce's default protocol
                       "pursuit__ddqn_super_quantile__s1__paper", "pursuit__ddqn_super_quantile__s2__paper"]
    for f in folders:
        cfg = json.loads((out / f / "config.json").read_text())
        assert cfg["run"]["num_timesteps"] == 200 and cfg["env"]["kwargs"]["x_size"] == 10  # fraction + layer
        assert cfg["run"]["protocol"] == "paper"
        assert json.loads((out / f / "manifest.json").read_text())["status"] == "finished"
    figs = out / "figures"
    for name in ("fig1.png", "fig1.svg", "fig1_final.md", "fig1_claims.md", "fig1_claims.csv", "fig1_protocols.md",
                 "fig1_aggregate.md",
                 "fig1_marl_eval.json", "random_returns.json"):
        assert (figs / name).stat().st_size > 0, name
    # 200 steps rarely beat a random team: then the aggregate table says so instead of a normalized figure
    aggregate = (figs / "fig1_aggregate.md").read_text()
    (row,) = [line for line in aggregate.splitlines() if line.startswith("| pursuit |")]
    assert row.endswith("| yes |") == (figs / "fig1_aggregate.png").is_file(), row
    with (figs / "fig1_claims.csv").open() as f:
        (claim,) = list(csv.DictReader(f))
    assert claim["claim"] == "SUPER-quantile - no sharing (paper)" and claim["super_runs"] == "2"
    assert claim["super"] == "ddqn_super_quantile (paper)" and claim["baseline"] == "ddqn (paper)"
    # again: everything is finished, nothing trains, the figures are redrawn
    mtime = (out / folders[0] / "metrics.csv").stat().st_mtime_ns
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert plan_numbers(res.stdout)[:3] == (4, 4, 0)
    assert (out / folders[0] / "metrics.csv").stat().st_mtime_ns == mtime
    assert "figures and tables in" in res.stdout


def test_cluster_jobs_carry_the_scaled_and_layered_runs() -> None:
    grid, runs = R.figure_runs("fig1", fraction=0.001, seeds=1, envs=["battle"], layer=SMOKE)
    jobs = R.cluster_plan(grid, runs, "~/runs/fig1", cpus=1.0)
    assert len(jobs) == len(runs) == len([r for r in grid.runs if r.env == "battle" and r.seed == 1])
    budget = round(0.001 * R.paper_budget("battle"))
    for job, run in zip(jobs, runs):
        argv = shlex.split(job.entrypoint)
        carried = json.loads(argv[argv.index("--config") + 1])  # the resolved config the job trains
        assert job.runs == [run.run_name] and carried["run"]["num_timesteps"] == budget
        assert carried["env"]["kwargs"]["max_cycles"] == 60 and job.entrypoint.endswith("--out ~/runs/fig1")
