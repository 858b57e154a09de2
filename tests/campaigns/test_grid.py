"""Grid files: expansion of the paper grid, the sweep and the smoke grid; validation errors with file:line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suPER import campaigns as G
from suPER import config as C

EXP = C.EXPERIMENTS_DIR


def test_paper_grid_expands_to_the_papers_runs() -> None:
    grid = G.load_grid(EXP / "paper_grid.yaml")
    runnable = [r for r in grid.runs if not r.pending]
    assert len(runnable) == 3 * 2 * 6 * 5 + 3 * 3 * 5 and not any(r.pending for r in grid.runs)  # DQN family + baselines
    assert {r.seed for r in grid.runs} == {1, 2, 3, 4, 5}
    assert {(r.env, r.algo) for r in grid.runs if r.algo in ("qmix", "maddpg", "seac")} == {
        (e, a) for e in C.PAPER_ENVS for a in ("qmix", "maddpg", "seac")}
    assert len({r.run_name for r in runnable}) == len(runnable)  # every run its own folder
    by_env: dict[str, set[tuple[Any, ...]]] = {}
    for r in runnable:
        cfg = r.config()
        by_env.setdefault(r.env, set()).add((r.algo, cfg.relay.enabled, cfg.relay.mode if cfg.relay.enabled else None,
                                            cfg.relay.bandwidth if cfg.relay.enabled else None,
                                            cfg.dqn.parameter_sharing))
        assert cfg.run.seed == r.seed and cfg.env.name == r.env
    expected = {(algo, False, None, None, False) for algo in ("ddqn", "dqn")}
    expected |= {(algo, True, m, 0.1, False) for algo in ("ddqn", "dqn") for m in ("quantile", "gaussian", "stochastic")}
    expected |= {(algo, True, "gaussian", 1.0, False) for algo in ("ddqn", "dqn")}
    expected |= {(algo, False, None, None, True) for algo in ("ddqn", "dqn")}
    expected |= {(algo, False, None, None, False) for algo in ("seac", "maddpg", "qmix")}
    assert by_env == {env: expected for env in C.PAPER_ENVS}
    # DDQN = dueling double; DQN = neither, as the paper's *_plaindqn
    ddqn = next(r for r in runnable if r.algo == "ddqn").config()
    dqn = next(r for r in runnable if r.algo == "dqn").config()
    assert (ddqn.dqn.double_q, ddqn.dqn.dueling, dqn.dqn.double_q, dqn.dqn.dueling) == (True, True, False, False)
    assert {r.config().relay.team for r in runnable if r.env == "battle"} == {"blue"}


def test_seeds_override_and_filters() -> None:
    grid = G.load_grid(EXP / "paper_grid.yaml", seeds=3)
    assert {r.seed for r in grid.runs} == {1, 2, 3}
    assert {r.seed for r in G.load_grid(EXP / "paper_grid.yaml", seeds="4,7").runs} == {4, 7}
    sel = grid.select(["env=pursuit", "algo=dqn", "*quantile*"])
    assert [r.run_name for r in sel] == [f"pursuit__dqn_super_quantile__s{s}" for s in (1, 2, 3)]
    assert {r.env for r in grid.select(["env=battle,adversarial_pursuit"])} == {"battle", "adversarial_pursuit"}
    assert all(r.pending for r in grid.select(["status=pending"]))
    with pytest.raises(G.GridError, match="--filter"):
        grid.select(["colour=red"])


def test_smoke_grid_is_the_paper_grid_at_a_tiny_budget() -> None:
    paper = G.load_grid(EXP / "paper_grid.yaml")
    smoke = G.load_grid(EXP / "smoke.yaml")
    assert smoke.name == "smoke" and {r.seed for r in smoke.runs} == {1}
    assert [r.entry for r in smoke.runs] == [r.entry for r in paper.runs if r.seed == 1]
    for r in smoke.runs:
        if not r.pending:
            cfg = r.config()
            assert cfg.run.num_timesteps <= 300 and cfg.run.eval_episodes == 1
            model = {"seac": cfg.seac.model, "maddpg": "mlp", "qmix": "mlp"}.get(cfg.run.algo, cfg.dqn.model)
            assert model == "mlp", r.entry


def test_bandwidth_sweep() -> None:
    grid = G.load_grid(EXP / "bandwidth_sweep.yaml")
    cfgs = [r.config() for r in grid.runs]
    assert {c.env.name for c in cfgs} == {"pursuit"} and all(c.relay.enabled for c in cfgs)
    bws = sorted({c.relay.bandwidth for c in cfgs})
    assert bws[0] == 0.001 and bws[-1] == 1.0 and len(bws) >= 5
    assert {c.relay.mode for c in cfgs} == {"quantile", "gaussian", "stochastic"}
    assert len({c.run_name for c in cfgs}) == len(cfgs) == len(bws) * 3 * 5
    assert grid.runs[0].entry == "pursuit-ddqn-super-quantile[bandwidth=0.001]"
    assert grid.runs[0].run_name == "pursuit__ddqn_super_quantile__s1__bandwidth0.001"


def test_every_run_is_the_same_config_as_its_train_command_line(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """A grid entry = a CLI invocation: `super-marl train <cli_args>` resolves to the identical config."""
    from suPER import cli
    from suPER.cli import train as cli_train

    seen: list[C.ExperimentConfig] = []
    monkeypatch.setattr(cli_train, "_train_one", lambda cfg, *a, **k: seen.append(cfg))
    for file in ("smoke.yaml", "bandwidth_sweep.yaml"):
        for run in G.load_grid(EXP / file, seeds=1).runs:
            if run.pending:
                continue
            seen.clear()
            assert cli.main(["train", *run.cli_args(), "--out", str(tmp_path)]) == 0
            assert len(seen) == 1
            expected = run.config(out=tmp_path).to_dict()
            got = seen[0].to_dict()
            for key in ("progress",):  # interactive-only
                expected["run"].pop(key), got["run"].pop(key)
            assert got == expected, run.entry


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "grid.yaml"
    p.write_text(text)
    return p


GOOD = "runs:\n  - {name: a, env: pursuit, algo: ddqn}\n"


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn}\ncolour: red\n", 3, "unknown top-level key 'colour'"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn}\n  - name: b\n    env: pursuit\n    algo: ddqn\n    bandwdith: 0.1\n",
     6, "entry 'b': unknown key 'bandwdith' (did you mean 'bandwidth'?)"),
    ("runs:\n  - {name: a, env: chess, algo: ddqn}\n", 2, "env: expected one of pursuit, battle, adversarial_pursuit"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn}\n  - {name: a, env: battle, algo: ddqn}\n", 3,
     "entry 'a': duplicate entry name (first at"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn, bandwidth: high}\n", 2, "bandwidth: expected a number, got 'high'"),
    ("runs:\n  - name: a\n    env: pursuit\n    algo: ddqn\n    num_timesteps: 1.5\n", 5,
     "num_timesteps: expected an integer, got 1.5"),
    ("runs:\n  - name: a\n    env: pursuit\n    algo: ddqn\n    set: {dqn.lrr: 0.1}\n", 5, "unknown key 'dqn.lrr'"),
    ("runs:\n  - {name: a, env: pursuit, algo: ppo}\n", 2, "unknown algo 'ppo'"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn, super: true, bandwidth: 2}\n", 2,
     "entry 'a': bandwidth: expected a number in [0, 1]"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn}\n  - {name: b, env: pursuit, algo: ddqn}\n", 3,
     "writes the same run folder 'pursuit__ddqn__s1' as entry 'a'"),
    ("seeds: -1\n" + GOOD, 1, "seeds: expected a count >= 1"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn}\n  - {name: a, env: pursuit, name: b}\n", 3, "duplicate key 'name'"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn\n", 3, "expected ',' or '}'"),  # YAML syntax error
    ("runs:\n  - just-a-string\n", 1, "runs[0]: expected a mapping"),
    ("runs:\n  - {env: pursuit, algo: ddqn}\n", 2, "runs[0]: every entry needs a name"),
    ("defaults: {eval_episodes: many}\n" + GOOD, 1, "defaults: eval_episodes: expected an integer"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn, super: true, sweep: {bandwidth: [0.1, x]}}\n", 2,
     "sweep: bandwidth"),
    ("runs:\n  - {name: a, env: pursuit, algo: ddqn, super: true, super_mode: median}\n", 2,
     "super_mode: expected one of quantile, gaussian"),
])
def test_malformed_grid_names_file_line_and_problem(tmp_path: Path, text: str, line: int, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(G.GridError) as err:
        G.load_grid(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}:"), msg
    assert needle in msg, msg


def test_pending_entries_are_listed_but_not_resolved(tmp_path: Path) -> None:
    grid = G.load_grid(write(tmp_path, GOOD + "  - {name: q, env: battle, algo: qmix, pending: soon}\n"))
    q = grid.runs[-1]
    assert q.pending == "soon" and q.run_name == "battle__qmix__s5"
    with pytest.raises(G.GridError, match="pending"):
        q.config()


def test_base_inheritance_and_env_defaults(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("seeds: [3]\ndefaults: {eval_episodes: 4, set: {dqn.gamma: 0.9}}\n" + GOOD)
    child = tmp_path / "child.yaml"
    child.write_text("base: base.yaml\ndefaults: {set: {dqn.lr: 0.01}}\n"
                     "env_defaults: {pursuit: {eval_episodes: 2}}\n")
    (run,) = G.load_grid(child).runs
    cfg = run.config()
    assert (run.seed, cfg.run.eval_episodes, cfg.dqn.gamma, cfg.dqn.lr) == (3, 2, 0.9, 0.01)
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n" + GOOD)
    with pytest.raises(G.GridError, match="includes itself"):
        G.load_grid(tmp_path / "loop.yaml")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_grid_list_command(tmp_path: Path) -> None:
    r = run_cli("grid", "list", str(EXP / "paper_grid.yaml"), "--filter", "env=pursuit", "--filter", "algo=ddqn",
                "--seeds", "2")
    assert r.returncode == 0, r.stderr
    assert "pursuit__ddqn_super_quantile__s2" in r.stdout and "battle" not in r.stdout
    assert "12 runs of 90" in " ".join(r.stdout.split())
    r = run_cli("grid", "list", str(EXP / "smoke.yaml"), "--filter", "run=pursuit__ddqn__s1", "--format", "cli")
    assert r.returncode == 0 and r.stdout.startswith("--env pursuit --algo ddqn --seed 1 --num-timesteps 300")
    bad = write(tmp_path, "runs:\n  - {name: a, env: chess, algo: ddqn}\n")
    r = run_cli("grid", "list", str(bad))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {bad}:2:"), r.stderr
    r = run_cli("grid", "list", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "cannot read grid file" in r.stderr


def test_fig1_grid_keeps_its_entries_seed_by_seed_at_reduced_budgets() -> None:
    grid = G.load_grid(EXP / "fig1.yaml")
    runs = [r for r in grid.runs if not r.pending]
    per_env = {e: {r.entry for r in runs if r.env == e} for e in C.PAPER_ENVS}
    # every env: no sharing, SUPER quantile / gaussian / stochastic, share-all, parameter sharing
    assert {e: len(entries) for e, entries in per_env.items()} == {e: 6 for e in C.PAPER_ENVS}
    assert {r.algo for r in runs} == {"ddqn"} and {r.seed for r in runs} == {1, 2, 3}
    assert [r.seed for r in runs] == sorted(r.seed for r in runs)  # order: seed
    budget = {"pursuit": 200_000, "battle": 100_000, "adversarial_pursuit": 100_000}
    for r in runs:
        cfg = r.config()
        assert cfg.run.num_timesteps == budget[r.env]
        assert (cfg.run.eval_points, cfg.run.eval_episodes) == (40, 10)
    # the same runs as the paper grid's entries of those names (only the budget and evaluation differ)
    paper = {r.run_name: r for r in G.load_grid(EXP / "paper_grid.yaml", seeds=3).runs}
    assert all(paper[r.run_name].entry == r.entry for r in runs)


def test_only_and_order_keys(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("name: b\nseeds: 2\nruns:\n"
                    "  - {name: a-one, env: pursuit, algo: ddqn}\n"
                    "  - {name: a-two, env: pursuit, algo: dqn}\n"
                    "  - {name: b-one, env: battle, algo: ddqn}\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: base.yaml\norder: seed\nonly: ['a-*']\n")
    grid = G.load_grid(child)
    assert [(r.entry, r.seed) for r in grid.runs] == [("a-one", 1), ("a-two", 1), ("a-one", 2), ("a-two", 2)]
    # a grandchild inheriting the child keeps the child's selection and adds its own entries
    grand = tmp_path / "grand.yaml"
    grand.write_text("base: child.yaml\norder: entry\nruns:\n  - {name: c-one, env: battle, algo: dqn}\n")
    assert [(r.entry, r.seed) for r in G.load_grid(grand).runs] == [
        ("a-one", 1), ("a-one", 2), ("a-two", 1), ("a-two", 2), ("c-one", 1), ("c-one", 2)]
    for text, message in (("only: ['zzz*']\n", r"child.yaml:\d+: only: 'zzz\*' matches no entry"),
                          ("only: 3\n", "only: expected a list of entry-name globs"),
                          ("order: random\n", "order: expected one of entry, seed")):
        child.write_text("base: base.yaml\n" + text)
        with pytest.raises(G.GridError, match=message):
            G.load_grid(child)


def test_grid_list_shows_how_far_unfinished_runs_are(tmp_path: Path) -> None:
    """An unfinished run's status gains the env steps of its last evaluation row, its budget and the time left at
    its recent pace (a campaign that spans sessions is checked with ``grid list``); a finished one and a fresh
    one show their status alone."""
    import json

    names = ["pursuit__ddqn__s1", "pursuit__ddqn_super_quantile__s1"]
    made = {r.run_name: r.config().to_dict() for r in G.load_grid(EXP / "smoke.yaml").runs if r.run_name in names}
    for name, status in zip(names, ("running", "finished")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({"status": status}))
        config = made[name] if status == "finished" else {"run": {"num_timesteps": 300}}  # finished: as the grid asks
        (folder / "config.json").write_text(json.dumps(config))
        # 150 steps took 300 s (evaluations included): 150 steps left take ~300 s more
        (folder / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n0,-3.5,10\n150,2.0,310\n")
    r = run_cli("grid", "list", str(EXP / "smoke.yaml"), "--filter", "env=pursuit", "--filter", "algo=ddqn",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "running 150/300, ~5 min left" in text and "finished 150/300" not in text
    assert "(4 -, 1 finished, 1 running)" in text and "- 150/300" not in text  # 4 fresh folders: their status alone
    # what the 5 runs not finished still need (150 + 4 x 300 env steps): no finished run here has its times, so the
    # committed Figure 1 records price them (suPER.costs)
    assert "to go: 5 runs (1 running), 1,350 env steps, ~" in text
    assert "rates: pursuit (ours): median of" in text and "finished runs in results/fig1" in text
    r = run_cli("grid", "list", str(EXP / "smoke.yaml"), "--filter", "env=pursuit", "--filter", "algo=ddqn",
                "--out", str(tmp_path), "--cpus-per-trial", "4096")  # as grid run would place them: one at a time
    assert r.returncode == 0 and " 1 at a time " in " ".join(r.stdout.split()), r.stdout + r.stderr
    r = run_cli("grid", "list", str(EXP / "smoke.yaml"), "--filter", "env=pursuit", "--filter", "algo=ddqn",
                "--out", str(tmp_path), "--format", "json")
    assert r.returncode == 0, r.stderr
    by_name = {row["run_name"]: row for row in json.loads(r.stdout)}
    assert by_name[names[0]]["status"] == "running"
    assert by_name[names[0]]["progress"] == {"env_steps": 150, "budget": 300, "seconds_left": pytest.approx(300.0),
                                             "wall_time_s": 310.0}
    assert by_name[names[1]]["status"] == "finished" and by_name[names[1]]["progress"] is None
    fresh = [row for name, row in by_name.items() if name not in names]
    assert len(fresh) == 4 and all(row["status"] == "-" and row["progress"] is None for row in fresh)


def test_run_progress_time_left_follows_the_recent_pace(tmp_path: Path) -> None:
    """The time left uses the last ``rate_rows`` intervals only (a run that slowed down, e.g. when a second run
    started next to it, shows its current pace), their median pace (one slow interval, another job's burst or a resume's
    start-up, does not set it), and is unknown with one row or without ``wall_time_s``."""
    import json

    from suPER.runs import RunFolder

    folder = RunFolder(tmp_path / "r")
    folder.path.mkdir()
    (folder.path / "config.json").write_text(json.dumps({"run": {"num_timesteps": 10_000}}))
    # 1 s per step for the first 1,000 steps, then 4 s per step
    rows = [(s, s if s <= 1000 else 1000 + 4 * (s - 1000)) for s in range(0, 3001, 250)]
    (folder.path / "metrics.csv").write_text("env_steps,wall_time_s\n" + "".join(f"{s},{w}\n" for s, w in rows))
    p = folder.progress(rate_rows=5)
    assert (p.env_steps, p.budget) == (3000, 10_000)
    assert p.seconds_left == pytest.approx(7000 * 4.0)
    assert p.describe() == "3,000/10,000, ~7.8 h left"
    assert folder.progress(rate_rows=12).seconds_left == pytest.approx(7000 * 4.0)  # 8 of 12 intervals at 4 s
    # 1 s per step, but one interval took 500 s more (a test suite beside the run: the campaign's 500 s intervals)
    rows = [(s, s + (500 if s >= 2750 else 0)) for s in range(0, 3001, 250)]
    (folder.path / "metrics.csv").write_text("env_steps,wall_time_s\n" + "".join(f"{s},{w}\n" for s, w in rows))
    assert folder.progress(rate_rows=5).seconds_left == pytest.approx(7000 * 1.0)
    (folder.path / "metrics.csv").write_text("env_steps,wall_time_s\n0,5\n")
    assert folder.progress().seconds_left is None and folder.progress().describe() == "0/10,000"
    (folder.path / "metrics.csv").write_text("env_steps\n0\n500\n")
    assert folder.progress().seconds_left is None and folder.progress().env_steps == 500


def test_grid_list_tells_a_killed_writer_from_a_live_one(tmp_path: Path) -> None:
    """A run whose writer was SIGKILLed keeps ``status: running`` in its manifest; ``grid list`` shows it as
    ``stopped`` (its lock file names a dead pid on this host) and a run whose writer lives as ``running``."""
    import json
    import signal
    import subprocess
    import sys

    name = "pursuit__ddqn__s1"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"status": "running"}))
    holder = subprocess.Popen([sys.executable, "-c", "import pathlib, time; from suPER.runs import RunFolder; "
                               f"RunFolder(pathlib.Path({str(folder)!r})).lock().acquire(); print('held', flush=True); "
                               "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ("grid", "list", str(EXP / "smoke.yaml"), "--filter", "env=pursuit", "--filter", "algo=ddqn",
                "--out", str(tmp_path))
        live = " ".join(run_cli(*args).stdout.split())
        assert f"{name} running" in live and "stopped" not in live
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (folder / ".writer.lock").exists()  # a killed writer cannot remove it
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert f"{name} stopped" in text and "1 stopped" in text and "grid run resumes it" in text
