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
from suPER import costs
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


def expected_seconds(cfg: C.ExperimentConfig, done: int, rates: dict[tuple[str, str], costs.Rates]) -> float:
    """A run's seconds left at a table of rates, spelled out: the training steps left at the training rate, the
    evaluation episodes left (41 points of the paper's n / eval_points, never under one episode, plus step 0's)
    and the final games at the evaluation rate; an (env, protocol) without rates takes its env's other protocol."""
    r = rates.get((cfg.env.name, cfg.run.protocol)) or next(v for (e, _), v in rates.items() if e == cfg.env.name)
    n = cfg.run.num_timesteps
    interval = cfg.run.eval_interval or max(cfg.env.horizon, n // cfg.run.eval_points)
    episodes = (n // interval + 1) * cfg.run.eval_episodes
    return (n - done) * r.train_s_per_step + ((n - done) / n * episodes + cfg.run.final_games) * r.eval_s_per_episode


@pytest.mark.parametrize("figure,fraction", [("fig1", None), ("fig1", 0.05), ("bandwidth", 0.5)])
def test_dry_run_plans_runs_steps_and_estimate(tmp_path: Path, figure: str, fraction: float | None) -> None:
    """With nothing under OUT, every run is priced at the committed Figure 1 records' median rates. Runs and budgets
    are counted from the grid file itself (the paper's budget x F where --fraction is given), not from reproduce's
    own expansion."""
    runnable = [r for r in load_grid(C.ROOT / R.FIGURES[figure].grid).runs if not r.pending]
    budgets = [round(fraction * R.paper_budget(r.env)) if fraction else r.config().run.num_timesteps
               for r in runnable]
    grid, runs = R.figure_runs(figure, fraction)  # the paper protocol's configurations: their rates
    committed = costs.measured_rates(costs.RECORDS)
    seconds = sum(expected_seconds(r.config(), 0, committed) for r in runs)
    args = ["reproduce", figure, "--dry-run", "--out", str(tmp_path / "c")] + (["--fraction", str(fraction)]
                                                                               if fraction else [])
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    n_runs, finished, steps, wall_h = plan_numbers(res.stdout)
    assert (n_runs, finished, steps) == (len(runnable), 0, sum(budgets))
    parallel = costs.local_parallel(1.0)
    assert wall_h == pytest.approx(seconds / parallel / 3600, rel=0.05)  # printed as 1.2 h or 35 min
    assert "finished runs in results/fig1" in res.stdout
    assert not (tmp_path / "c").exists()  # dry run: nothing written


def _run_folder(out: Path, run: Any, status: str, rows: list[tuple[int, float]], wall_s: float = 0.0,
                eval_s: float = 0.0) -> None:
    """A run folder with its config, a manifest (with its times when finished) and metrics rows (env steps,
    wall_time_s)."""
    folder = out / run.run_name
    folder.mkdir(parents=True)
    cfg = run.config(out=out)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    manifest = {"status": status}
    if status == "finished":
        manifest.update(env_steps=cfg.run.num_timesteps, wall_time_s=wall_s, timings_s={"eval": eval_s},
                        cpu="Test CPU")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n"
                                        + "".join(f"{n},0.0,{w}\n" for n, w in rows))


def test_estimate_prices_runs_at_the_finished_runs_there_first(tmp_path: Path) -> None:
    """A finished run under OUT gives its env's rates; an unfinished run counts only the env steps it has left;
    an env with no finished run there is priced by the committed records."""
    grid, runs = R.figure_runs("fig1", fraction=0.01, seeds=1, envs=["pursuit", "battle"])
    pursuit = [r for r in runs if r.env == "pursuit"]
    battle = [r for r in runs if r.env == "battle"]
    out = tmp_path / "c"
    p_cfg = pursuit[0].config()
    n_p = p_cfg.run.num_timesteps  # 8000
    episodes = (n_p // p_cfg.eval_interval + 1) * p_cfg.run.eval_episodes
    _run_folder(out, pursuit[0], "finished", [(0, 10.0), (n_p, 400.0)], wall_s=400.0, eval_s=episodes * 0.5)
    _run_folder(out, pursuit[1], "running", [(0, 10.0), (4000, 360.0)])  # half done: 4000 steps left
    est = R.estimate(runs, out, parallel=2)
    assert est.finished == 1 and len(est.todo) == len(runs) - 1
    own = {("pursuit", "paper"): costs.Rates((400.0 - episodes * 0.5) / n_p, 0.5, "")}
    committed = costs.measured_rates(costs.RECORDS)
    expected = sum(expected_seconds(r.config(), 4000 if r is pursuit[1] else 0, own) for r in pursuit[1:]) + \
        sum(expected_seconds(r.config(), 0, committed) for r in battle)
    assert est.to_go.env_steps == n_p * (len(pursuit) - 1) - 4000 + sum(r.config().run.num_timesteps for r in battle)
    assert est.wall_seconds == pytest.approx(expected / 2, rel=1e-9)
    text = R.describe("fig1", est, out, "on this machine")
    assert f"{est.to_go.env_steps:,} env steps to train -> {out}" in text
    assert f"pursuit (paper): median of 1 finished run in {out} (Test CPU (kernels not recorded))" in text
    assert "battle (paper): median of" in text and "in results/fig1" in text


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
