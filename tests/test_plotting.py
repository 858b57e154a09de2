"""Campaign figures and tables: bootstrap bands over seeds, final mean/IQM with CIs, plot/compare commands."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import plotting as P
from suPER.resolve import resolve


def fake_run(root: Path, env: str, seed: int, values: list[float], *, mode: str | None = None, tag: str = "",
             interval: int = 100, status: str | None = "finished") -> Path:
    """A run folder with config.json, metrics.csv and (unless ``status`` is None) manifest.json; no training."""
    named: dict[str, Any] = {"run.seed": seed, "run.tag": tag}
    if mode:
        named.update({"relay.enabled": True, "relay.mode": mode})
    cfg = resolve(env, "ddqn", named=named)
    folder = root / cfg.run_name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    with (folder / "metrics.csv").open("w") as f:
        f.write("env_steps,team_return_mean,loss\n")
        for i, v in enumerate(values):
            f.write(f"{i * interval},{v},0.1\n")
    if status is not None:
        (folder / "manifest.json").write_text(json.dumps({"status": status, "seed": seed}))
    return folder


def campaign(tmp_path: Path) -> Path:
    """2 envs x 2 configurations x 5 seeds; every curve is seed-shifted, the last two evaluations are flat."""
    root = tmp_path / "campaign"
    for env in ("pursuit", "battle"):
        for mode, base in ((None, 0.0), ("quantile", 10.0)):
            for seed in range(1, 6):
                vals = [base + seed * t / 10 for t in range(18)] + [base + seed * 2.0] * 2  # 20 evaluations
                fake_run(root, env, seed, vals, mode=mode)
    return root


def test_bands_mean_and_bootstrap_ci_over_seeds(tmp_path: Path) -> None:
    curves = P.load_run_curves(P.find_run_folders([campaign(tmp_path)]))
    assert len(curves) == 20 and {c.label for c in curves} == {"ddqn", "ddqn_super_quantile"}
    bands = P.aggregate(curves)
    assert [(b.env, b.label, b.n_runs) for b in bands] == [
        ("battle", "ddqn", 5), ("battle", "ddqn_super_quantile", 5),
        ("pursuit", "ddqn", 5), ("pursuit", "ddqn_super_quantile", 5)]
    b = bands[0]
    np.testing.assert_array_equal(b.steps, np.arange(20) * 100)
    seeds = np.arange(1, 6)
    np.testing.assert_allclose(b.mean[:18], seeds.mean() * np.arange(18) / 10)
    assert (b.low <= b.mean + 1e-12).all() and (b.mean <= b.high + 1e-12).all()
    assert b.low[0] == b.high[0] == 0.0  # all seeds equal at step 0: no spread
    assert (b.high[5:] - b.low[5:] > 0).all()
    # percentile CI of the mean of 1..5 (x t) lies inside [min, max] of the seeds
    assert b.low[10] >= 1.0 and b.high[10] <= 5.0
    smoothed = P.aggregate(curves, smoothing=3)[0]
    assert not np.allclose(smoothed.mean, b.mean) and np.isclose(smoothed.mean[8], b.mean[8])  # linear part kept


def test_final_performance_mean_iqm_over_the_last_10_percent(tmp_path: Path) -> None:
    root = tmp_path / "c"
    scores = [1.0, 2.0, 3.0, 4.0, 100.0]
    for seed, s in enumerate(scores, start=1):
        fake_run(root, "pursuit", seed, [-50.0] * 18 + [s, s])  # last 10% of 20 evaluations = last 2
    (row,) = P.final_performance(P.load_run_curves(P.find_run_folders([root])))
    assert row["runs"] == 5 and row["evaluations"] == 2 and row["final_env_steps"] == 1900
    assert row["mean"] == pytest.approx(22.0) and row["iqm"] == pytest.approx(3.0)  # IQM drops 1 and 100
    assert row["mean_ci_low"] <= 22.0 <= row["mean_ci_high"]
    assert 1.0 <= row["iqm_ci_low"] <= 3.0 <= row["iqm_ci_high"] <= 100.0
    single = P.final_performance(P.load_run_curves([P.find_run_folders([root])[0]]))[0]
    assert single["runs"] == 1 and np.isnan(single["mean_ci_low"])  # no CI from one run


def run_cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True, timeout=180,
                          env=full, cwd=cwd)


def test_plot_command_writes_figure_and_tables(tmp_path: Path) -> None:
    root = campaign(tmp_path)
    r = run_cli("plot", str(root), "--smooth", "2")
    assert r.returncode == 0, r.stderr
    fig = root / "figures"
    assert (fig / "team_return.png").read_bytes()[:4] == b"\x89PNG"
    svg = (fig / "team_return.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "pursuit" in svg and "battle" in svg  # one panel per env
    rows = list(csv.DictReader((fig / "final_performance.csv").open()))
    assert [(r["env"], r["configuration"]) for r in rows] == [
        ("battle", "ddqn"), ("battle", "ddqn_super_quantile"), ("pursuit", "ddqn"), ("pursuit", "ddqn_super_quantile")]
    assert float(rows[1]["mean"]) == pytest.approx(16.0)  # 10 + 2 * mean(seed)
    md = (fig / "final_performance.md").read_text()
    assert "| pursuit | ddqn_super_quantile | 5 | 16.00 |" in md and "IQM" in md
    assert "| pursuit | ddqn_super_quantile | 5 | 16.00 |" in r.stdout
    r = run_cli("plot", str(root), "--config", "*quantile*", "--name", "super_only")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((fig / "super_only_final.csv").open()))
    assert {r["configuration"] for r in rows} == {"ddqn_super_quantile"} and (fig / "super_only.svg").exists()


def test_compare_tweaked_runs_by_glob_and_tag(tmp_path: Path) -> None:
    root = campaign(tmp_path)
    tweak = tmp_path / "tweak"
    for seed in (1, 2):
        fake_run(tweak, "pursuit", seed, [float(seed)] * 20, mode="quantile", tag="bw005")
    out = tmp_path / "cmp"
    r = run_cli("compare", str(root / "pursuit__ddqn_super_quantile__s*"), str(tweak), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((out / "final_performance.csv").open()))
    assert [(r["configuration"], r["runs"]) for r in rows] == [("ddqn_super_quantile", "5"),
                                                               ("ddqn_super_quantile [bw005]", "2")]
    assert ">compare<" in (out / "team_return.svg").read_text()  # the default title
    r = run_cli("compare", "--tag", "bw005", "--root", str(tmp_path), "--out", str(out), "--title", "b = 0.05 alone")
    assert r.returncode == 0, r.stderr
    assert [r["configuration"] for r in csv.DictReader((out / "final_performance.csv").open())] == [
        "ddqn_super_quantile [bw005]"]
    assert ">b = 0.05 alone<" in (out / "team_return.svg").read_text()
    r = run_cli("compare", str(tweak), "--out", str(out), "--title", "two\nlines")
    assert r.returncode == 2 and r.stderr.startswith("error: --title: expected one line of text")
    r = run_cli("compare", str(tmp_path / "nothing*"))
    assert r.returncode == 2 and r.stderr.startswith("error: RUNS:")


class FakeRun:
    def __init__(self, config: dict[str, Any], rows: list[dict[str, Any]], path: list[str],
                 state: str = "finished") -> None:
        self.config, self._rows, self.path, self.state = config, rows, path, state

    def scan_history(self, keys: list[str]) -> list[dict[str, Any]]:
        return [{k: r.get(k) for k in keys} for r in self._rows]


class FakeApi:
    def __init__(self, runs: list[FakeRun]) -> None:
        self._runs = runs
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def runs(self, path: str, filters: dict[str, Any]) -> list[FakeRun]:
        self.asked.append((path, filters))
        return self._runs


def test_wandb_curves_use_the_logged_config_and_env_steps() -> None:
    runs = []
    for seed in (1, 2):
        cfg = resolve("battle", "dqn", named={"run.seed": seed}).to_dict()
        rows = [{"_step": s, "charts/team_return_mean": seed * s / 100} for s in (200, 0, 100)]
        rows.append({"_step": 300, "charts/loss": 1.0})  # a row without the metric
        runs.append(FakeRun(cfg, rows, ["me", "proj", f"id{seed}"]))
    runs.append(FakeRun({"lr": 1}, [], ["me", "proj", "other"]))  # not one of ours
    api = FakeApi(runs)
    curves = P.load_wandb_curves("proj", entity="me", api=api, filters={"group": "g"})
    assert api.asked == [("me/proj", {"group": "g"})]
    assert [(c.env, c.label, c.seed, c.source) for c in curves] == [("battle", "dqn", 1, "wandb:me/proj/id1"),
                                                                    ("battle", "dqn", 2, "wandb:me/proj/id2")]
    np.testing.assert_array_equal(curves[1].steps, [0, 100, 200])
    np.testing.assert_array_equal(curves[1].values, [0, 2, 4])


def test_from_wandb_without_credentials_is_a_one_line_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    r = subprocess.run([sys.executable, "-m", "suPER.cli", "plot", "--from-wandb", "proj"], capture_output=True,
                       text=True, timeout=120, env={**env, "HOME": str(tmp_path), "WANDB_MODE": "offline"},
                       cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --from-wandb proj"), r.stderr


def test_unfinished_runs_stay_out_of_bands_and_tables(tmp_path: Path) -> None:
    """A run killed early would cut the band at its last step and drag the final score to its early values."""
    root = tmp_path / "c"
    for seed in (1, 2):
        fake_run(root, "pursuit", seed, [float(seed)] * 20)
    fake_run(root, "pursuit", 3, [-99.0] * 6, status="interrupted")
    fake_run(root, "pursuit", 4, [-99.0] * 20, status=None)  # no manifest: status unknown
    curves = P.load_run_curves(P.find_run_folders([root]))
    assert sorted((c.seed, c.status, c.finished) for c in curves) == [
        (1, "finished", True), (2, "finished", True), (3, "interrupted", False), (4, "unknown", False)]
    (band,) = P.aggregate(curves)
    assert band.n_runs == 2 and band.steps[-1] == 1900  # not cut at the killed run's 500
    np.testing.assert_allclose(band.mean, 1.5)
    (row,) = P.final_performance(curves)
    assert row["runs"] == 2 and row["mean"] == pytest.approx(1.5)
    notes: list[str] = []
    paths = P.report(curves, tmp_path / "fig", n_resamples=200, warn=notes.append)
    assert len(notes) == 2 and "interrupted (last evaluation at 500 env steps)" in notes[0]
    assert "status unknown" in notes[1] and "Left out (unfinished):" in paths["md"].read_text()


def test_wandb_state_marks_unfinished_runs() -> None:
    cfg = resolve("battle", "dqn", named={"run.seed": 1}).to_dict()
    rows = [{"_step": s, "charts/team_return_mean": 1.0} for s in (0, 100)]
    api = FakeApi([FakeRun(cfg, rows, ["me", "p", "a"], state="crashed"), FakeRun(cfg, rows, ["me", "p", "b"])])
    assert [(c.status, c.finished) for c in P.load_wandb_curves("p", api=api)] == [("crashed", False),
                                                                                  ("finished", True)]


def test_load_run_curves_reports_skipped_folders(tmp_path: Path) -> None:
    root = tmp_path / "c"
    good = fake_run(root, "pursuit", 1, [1.0, 2.0])
    bad = fake_run(root, "pursuit", 2, [1.0, 2.0])
    (bad / "metrics.csv").write_text("env_steps,team_return_mean\n0,1.0\n100")  # half-written last row
    skipped: list[P.Skipped] = []
    curves = P.load_run_curves(P.find_run_folders([root]), skipped=skipped)
    assert [c.source for c in curves] == [str(good)]
    assert [s.path for s in skipped] == [str(bad / "metrics.csv")] and "line 3" in skipped[0].reason
    with pytest.warns(UserWarning, match="half-written"):
        P.load_run_curves([bad])


def test_load_run_curves_reads_the_between_episode_std_next_to_the_metric(tmp_path: Path) -> None:
    """``team_return_std`` rides along with ``team_return_mean`` (rows without the metric dropped from both; a bad
    std cell is NaN, not a lost run); a metric without a ``_std`` column gives None."""
    folder = fake_run(tmp_path, "battle", 1, [0.0])
    (folder / "metrics.csv").write_text("env_steps,team_return_mean,team_return_std,loss\n"
                                        "0,-5,0,0.1\n100,,,0.1\n200,3,2.5,0.1\n300,4,oops,0.1\n")
    (c,) = P.load_run_curves([folder])
    assert c.steps.tolist() == [0.0, 200.0, 300.0] and c.values.tolist() == [-5.0, 3.0, 4.0]
    assert c.episode_std is not None and c.episode_std[:2].tolist() == [0.0, 2.5] and np.isnan(c.episode_std[2])
    (c,) = P.load_run_curves([folder], metric="loss")
    assert c.episode_std is None


def test_method_names_are_the_papers() -> None:
    from suPER.plotting import method_name

    assert method_name("ddqn") == "DDQN (no sharing)"
    assert method_name("ddqn_super_quantile") == "SUPER quantile"
    assert method_name("ddqn_super_gaussian [shareall]") == "Share-all"
    assert method_name("ddqn_ps") == "Parameter sharing"
    assert method_name("ddqn_super_gaussian_variance (paper)") == "SUPER gaussian (paper)"  # the paper's gaussian
    assert method_name("ddqn_super_gaussian_variance") == "SUPER gaussian (variance)"
    assert method_name("ddqn_super_gaussian_variance (paper) [shareall]") == "Share-all (paper)"
    assert method_name("ddqn_super_gaussian_variance (paper) [shareall_insertmax]") == "Share-all (paper) [insertmax]"
    assert method_name("dqn_super_stochastic") == "SUPER stochastic (DQN)"
    assert method_name("ddqn_super_quantile [bw005]") == "SUPER quantile [bw005]"
    assert method_name("qmix") == "QMIX" and method_name("my-run-name") == "my-run-name"


def test_figure_legend_names_methods_as_the_paper_below_the_panels(tmp_path: Path) -> None:
    """The drawn figure (read back from its SVG text): the paper's method names, no internal labels, one colour
    per method in both panels, the legend below the axes (off the data), and a caption with protocol and budget."""
    import re

    rng = np.random.default_rng(0)
    curves = [P.RunCurve(env, label, s, np.arange(5) * 1000.0, rng.normal(size=5), f"/x/{env}/{label}/{s}")
              for env in ("pursuit", "battle") for label in ("ddqn", "ddqn_super_quantile",
                                                             "ddqn_super_gaussian [shareall]", "ddqn_ps")
              for s in (1, 2)]
    png, svg = P.plot_bands(P.aggregate(curves, n_resamples=50), tmp_path, title="Figure 1")
    text = svg.read_text()
    shown = set(re.findall(r">([^<>]+)</text>", text))
    assert {"DDQN (no sharing)", "SUPER quantile", "Share-all", "Parameter sharing"} <= shown
    assert not shown & {"ddqn", "ddqn_ps", "ddqn_super_quantile", "ddqn_super_gaussian [shareall]"}
    assert any(t.startswith("Protocol: ours. Budget: pursuit 4k, battle 4k env steps") for t in shown)
    assert any(t.startswith("Bands from 2-5 runs cover less than 95% (74% at 3 runs in simulation).") for t in shown)
    assert P.method_color("ddqn_ps") == P.method_color("ddqn_ps (paper)") != P.method_color("ddqn")
    legend_y = float(re.search(r'<g id="legend_1">.*?<path d="M ([\d.]+) ([\d.]+)', text, re.S).group(2))
    axes_bottom = max(float(m) for m in re.findall(r'<g id="axes_\d+">\s*<g id="patch_\d+">\s*<path d="M [\d.]+ ([\d.]+)',
                                                     text))
    assert legend_y > axes_bottom  # SVG y grows downwards: the legend starts below every panel


def test_one_protocols_figure_says_it_once_and_counts_runs_in_words(tmp_path: Path) -> None:
    """A paper-protocol figure names its protocol in the caption, not after every method in the legend; with both
    protocols the legend keeps "(paper)" to tell them apart. A panel of single runs says "1 run per method". The
    caption's note on bands from few runs comes with 2-5 runs only."""
    import re

    rng = np.random.default_rng(0)

    def texts(labels: list[str], seeds: tuple[int, ...]) -> set[str]:
        curves = [P.RunCurve("battle", label, s, np.arange(5) * 1000.0, rng.normal(size=5), f"/x/{label}/{s}")
                  for label in labels for s in seeds]
        _, svg = P.plot_bands(P.aggregate(curves, n_resamples=50), tmp_path)
        return set(re.findall(r">([^<>]+)</text>", svg.read_text()))

    paper = texts(["ddqn (paper)", "ddqn_super_quantile (paper)"], (1,))
    assert {"DDQN (no sharing)", "SUPER quantile", "battle (1 run per method)"} <= paper
    assert not any("(paper)" in t for t in paper) and any(t.startswith("Protocol: paper.") for t in paper)
    assert not any("Bands from" in t for t in paper)  # single runs draw no band
    assert not any("Bands from" in t for t in texts(["ddqn"], (1, 2, 3, 4, 5, 6)))  # 6 runs: no longer "few"
    both = texts(["ddqn (paper)", "ddqn"], (1, 2))
    assert {"DDQN (no sharing) (paper)", "DDQN (no sharing)", "battle (2 runs per method)"} <= both


def test_a_variant_beside_its_method_keeps_the_colour_and_is_dash_dotted(tmp_path: Path) -> None:
    """A deviation pair's variant (experiments/fig1_isolate.yaml: share-all with our protocol's insertion priority, tag
    ``shareall_insertmax``) is drawn in its method's colour, dash-dotted, and named as the method with its variant;
    the method itself stays solid (read back from the SVG: a dash pattern only on the variant's line)."""
    import re

    rng = np.random.default_rng(0)
    labels = ["ddqn_super_gaussian_variance (paper) [shareall]",
              "ddqn_super_gaussian_variance (paper) [shareall_insertmax]"]
    curves = [P.RunCurve("adversarial_pursuit", label, s, np.arange(5) * 1000.0, rng.normal(size=5), f"/x/{label}/{s}")
              for label in labels for s in (1, 2)]
    _, svg = P.plot_bands(P.aggregate(curves, n_resamples=50), tmp_path)
    text = svg.read_text()
    assert {"Share-all", "Share-all [insertmax]"} <= set(re.findall(r">([^<>]+)</text>", text))
    assert P.method_color(labels[0]) == P.method_color(labels[1])
    lines = re.findall(r'<g id="line2d_\d+">\s*<path d="[^"]*"[^>]*style="([^"]*)"', text)
    data = [st for st in lines if "stroke-width: 1.4" in st][:2]  # the two mean curves, in drawing order
    assert len(data) == 2 and "stroke-dasharray" not in data[0] and "stroke-dasharray" in data[1]


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_respect_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Figures, tables and run records get the mode of any new file (0666 less the umask), not the temp file's 0600:
    a team's shared results folder stays readable to the team, and a private umask stays private."""
    import subprocess
    import sys

    from suPER.config import ROOT

    code = (f"import os; os.umask({umask}); from suPER import cli; "
            f"raise SystemExit(cli.main(['plot', {str(ROOT / 'results' / 'fig1')!r}, '--out', {str(tmp_path)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    written = [p for p in tmp_path.iterdir() if p.is_file()]
    assert {p.suffix for p in written} >= {".png", ".svg", ".md", ".csv"}
    assert {p.stat().st_mode & 0o777 for p in written} == {mode}


def test_wandb_users_see_what_plot_draws_and_each_runs_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B offline: ``plot --wandb`` logs every figure as an image and every table as a W&B table, and a ``train
    --wandb`` run logs its curve and evaluation rows when it finishes (files under each one's wandb/ folder)."""
    from suPER import cli
    from suPER.config import ROOT

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert cli.main(["plot", str(ROOT / "results" / "fig1"), "--out", str(tmp_path / "figs"), "--wandb"]) == 0
    media = list((tmp_path / "figs" / "wandb").glob("offline-run-*/files/media/**/*"))
    assert any(p.name.startswith("team_return_") and p.suffix == ".png" for p in media)
    assert any(p.name.startswith("final_performance_") and p.name.endswith(".table.json") for p in media)
    args = ["train", "--env", "pursuit", "--num-timesteps", "60", "--eval-interval", "30", "--eval-episodes", "1",
            "--no-progress", "--wandb", "--set", "env.horizon=20", "--set", "env.kwargs.n_evaders=3",
            "--out", str(tmp_path / "runs")]
    assert cli.main(args) == 0
    run_media = list((tmp_path / "runs" / "pursuit__ddqn__s1" / "wandb").glob("offline-run-*/files/media/**/*"))
    assert any(p.name.startswith("curve_") and p.suffix == ".png" for p in run_media)
    assert any(p.name.startswith("metrics_") and p.name.endswith(".table.json") for p in run_media)
