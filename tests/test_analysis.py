"""Claim table, env-aggregated metrics and the marl-eval export, on synthetic runs with known answers."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from suPER import analysis as A
from suPER import config as C
from suPER import export as X
from suPER import plotting as P
from suPER.resolve import resolve

SMALL_PURSUIT = {"env.horizon": 60, "env.kwargs.x_size": 10, "env.kwargs.y_size": 10, "env.kwargs.n_evaders": 10,
                 "env.kwargs.max_cycles": 60}
"""The smoke grid's pursuit: a random-policy episode takes milliseconds."""

CONFIGS = {  # label -> named overrides
    "ddqn": {},
    "ddqn_super_quantile": {"relay.enabled": True, "relay.mode": "quantile"},
    "ddqn_super_gaussian [shareall]": {"relay.enabled": True, "relay.mode": "gaussian", "relay.bandwidth": 1.0,
                                       "run.tag": "shareall"},
    "ddqn_ps": {"dqn.parameter_sharing": True},
}


def fake_run(root: Path, label: str, seed: int, values: list[float], interval: int = 100) -> Path:
    """A finished run folder of configuration ``label`` on small pursuit (config, manifest, metrics; no training)."""
    cfg = resolve("pursuit", "ddqn", named={**SMALL_PURSUIT, **CONFIGS[label], "run.seed": seed})
    folder = root / cfg.run_name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    with (folder / "metrics.csv").open("w") as f:
        f.write("env_steps,team_return_mean,wall_time_s\n")
        for i, v in enumerate(values):
            f.write(f"{i * interval},{v!r},{1.5 * i + 0.25 * seed!r}\n")
    (folder / "manifest.json").write_text(json.dumps({"status": "finished", "seed": seed}))
    return folder


def curve(env: str, label: str, seed: int, values: np.ndarray) -> P.RunCurve:
    return P.RunCurve(env, label, seed, np.arange(len(values)) * 100.0, np.asarray(values, float), f"{env}/{label}/{seed}")


# --------------------------------------------------------------------------------------------------
# statistics with known answers


def test_a_configuration_better_by_a_fixed_margin_in_every_run_holds() -> None:
    base = 10.0 + 0.1 * np.arange(5)  # spread 0.4 < margin
    scores = {"pursuit": {"ddqn": base, "ddqn_super_quantile": base + 5.0}}
    (row,) = A.claim_table(scores, n_resamples=500)
    assert row["claim"] == "SUPER-quantile - no sharing" and row["super_runs"] == row["baseline_runs"] == 5
    assert row["iqm_difference"] == pytest.approx(5.0, abs=1e-12)  # IQM is translation-equivariant
    # a resample of each side moves each IQM by at most the spread (0.4)
    assert 5.0 - 0.4 - 1e-9 <= row["ci_low"] <= 5.0 <= row["ci_high"] <= 5.0 + 0.4 + 1e-9
    assert row["probability_of_improvement"] == row["poi_ci_low"] == row["poi_ci_high"] == 1.0
    assert row["verdict"] == A.HOLDS
    (rev,) = A.claim_table({"pursuit": {"ddqn": base + 5.0, "ddqn_super_quantile": base}}, n_resamples=500)
    assert rev["iqm_difference"] == pytest.approx(-5.0, abs=1e-12) and rev["ci_high"] < 0
    assert rev["probability_of_improvement"] == 0.0 and rev["verdict"] == A.FAILS


def test_identical_configurations_give_a_ci_containing_zero_and_poi_near_half() -> None:
    rng = np.random.default_rng(7)
    same = rng.normal(3.0, 1.0, 12)
    (row,) = A.claim_table({"battle": {"ddqn": same, "ddqn_super_quantile": same.copy()}}, n_resamples=1000)
    assert row["iqm_difference"] == 0.0 and row["ci_low"] < 0 < row["ci_high"]
    assert row["probability_of_improvement"] == 0.5  # every pair (i, j) has its mirror (j, i); ties count half
    assert row["poi_ci_low"] < 0.5 < row["poi_ci_high"] and row["verdict"] == A.INCONCLUSIVE
    # two independent draws of one distribution: P(X > Y) within ~2 standard errors of 0.5
    x, y = rng.normal(0, 1, 20), rng.normal(0, 1, 20)
    se = np.sqrt((20 + 20 + 1) / (12 * 20 * 20))  # Mann-Whitney AUC standard error under H0
    assert abs(float(A.probability_of_improvement(x, y)) - 0.5) < 2.5 * se


def test_probability_of_improvement_counts_pairs_and_ties() -> None:
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0])
    # pairs: (1,2)x2 lose, (2,2)x2 tie, (3,2)x2 win -> (2 + 0.5 * 2) / 6
    assert float(A.probability_of_improvement(x, y)) == pytest.approx(0.5)
    assert float(A.probability_of_improvement(np.array([3.0]), y)) == 1.0


def test_every_selection_rule_with_runs_is_claimed_against_every_baseline_quantile_first() -> None:
    """SUPER gaussian and stochastic runs get the claims SUPER quantile gets, rules in registry order; share-all
    (a gaussian run tagged ``[shareall]``) is a baseline, never a SUPER configuration; another algorithm's runs
    are claimed against its own baselines only."""
    r = np.arange(3.0)
    scores = {"pursuit": {"ddqn": r, "ddqn_super_stochastic": r + 30.0, "ddqn_super_gaussian": r + 20.0,
                          "ddqn_super_quantile": r + 10.0, "ddqn_super_gaussian [shareall]": r + 5.0,
                          "ddqn_ps": r - 5.0, "dqn": r + 1.0, "dqn_super_gaussian": r + 3.0}}
    rows = A.claim_table(scores, n_resamples=200)
    got = [(row["claim"], row["super"], row["baseline"]) for row in rows]
    assert got == [
        *[(f"SUPER-{rule} - {name}", f"ddqn_super_{rule}", base)
          for rule in ("quantile", "gaussian", "stochastic")
          for name, base in (("no sharing", "ddqn"), ("share-all", "ddqn_super_gaussian [shareall]"),
                             ("parameter sharing", "ddqn_ps"))],
        ("SUPER-gaussian - no sharing", "dqn_super_gaussian", "dqn")]
    diff = {(row["claim"], row["super"]): row["iqm_difference"] for row in rows}
    assert diff[("SUPER-stochastic - parameter sharing", "ddqn_super_stochastic")] == pytest.approx(35.0)
    assert diff[("SUPER-gaussian - no sharing", "dqn_super_gaussian")] == pytest.approx(2.0)


def test_single_runs_give_no_ci_and_an_inconclusive_verdict() -> None:
    (row,) = A.claim_table({"pursuit": {"ddqn": np.array([1.0]), "ddqn_super_quantile": np.array([9.0])}})
    assert row["iqm_difference"] == 8.0 and np.isnan(row["ci_low"]) and row["verdict"] == A.INCONCLUSIVE
    assert np.isnan(row["welch_p"])


def test_three_overlapping_runs_a_side_are_inconclusive_though_the_bootstrap_ci_excludes_zero() -> None:
    """Known answer: x = (10, 20, 30), y = (0, 5, 15): means 20 and 6.67, sample variances 100 and 58.3, so
    Welch's t = 13.33 / sqrt(100/3 + 58.3/3) = 1.84 on 3.74 degrees of freedom, p = 0.146 (two-sided). The
    percentile bootstrap's CI of the difference lies above 0 (3 runs a side make it too narrow), yet the runs
    overlap: the verdict waits for Welch's test. Clearly separated runs still hold."""
    x, y = np.array([10.0, 20.0, 30.0]), np.array([0.0, 5.0, 15.0])
    (row,) = A.claim_table({"e": {"ddqn_super_quantile": x, "ddqn": y}}, n_resamples=2000)
    assert row["ci_low"] > 0 and row["welch_p"] == pytest.approx(0.146, abs=0.002)
    assert row["verdict"] == A.INCONCLUSIVE
    (sep,) = A.claim_table({"e": {"ddqn_super_quantile": x + 40.0, "ddqn": y}}, n_resamples=2000)
    assert sep["welch_p"] < A.ALPHA and sep["verdict"] == A.HOLDS
    # no spread on either side: a sure difference (scipy alone would give NaN), or none
    assert A.welch_p(np.full(3, 2.0), np.full(3, 1.0)) == 0.0 and A.welch_p(np.ones(3), np.ones(3)) == 1.0


def test_normalization_aggregates_and_profiles() -> None:
    rng = np.random.default_rng(3)
    spread = {e: rng.uniform(-0.05, 0.05, 6) for e in ("pursuit", "battle")}
    scale = {"pursuit": (-100.0, 300.0), "battle": (2.0, 12.0)}  # (random return, best - random)
    scores = {}
    for e, (r, span) in scale.items():  # normalized: no sharing 0.5, SUPER 1.0 (the best), share-all 0.2
        scores[e] = {lab: r + span * (lvl + spread[e]) for lab, lvl in
                     (("ddqn", 0.5), ("ddqn_super_quantile", 1.0), ("ddqn_super_gaussian [shareall]", 0.2))}
        scores[e]["ddqn_ps"] = r + span * (0.7 + spread[e][:3])  # fewer runs: strata of unequal size
    random = {e: r for e, (r, _) in scale.items()}
    norm, info = A.normalize(scores, random)
    assert info["pursuit"]["best_configuration"] == "ddqn_super_quantile" and info["battle"]["used"]
    for e in scale:
        np.testing.assert_allclose(norm[e]["ddqn_super_quantile"].mean(), 1.0, atol=1e-12)
        # best = r + span * (1 + mean spread): ddqn's (0.5 + spread) span over it
        np.testing.assert_allclose(norm[e]["ddqn"], (0.5 + spread[e]) / (1 + spread[e].mean()), atol=1e-12)
    agg = A.aggregate_metrics(norm, n_resamples=500)
    assert agg["configurations"] == sorted(CONFIGS)
    for lab, lvl in (("ddqn", 0.5), ("ddqn_super_quantile", 1.0), ("ddqn_super_gaussian [shareall]", 0.2)):
        v, lo, hi = agg["iqm"][lab]
        assert lo <= v <= hi and abs(v - lvl) < 0.06 and hi - lo < 0.11  # within the +-0.05 spread (+ shift)
    frac, lo, hi = agg["profiles"]["ddqn"]
    assert frac[A.TAUS < 0.4].min() == 1.0 and frac[A.TAUS > 0.6].max() == 0.0
    assert (np.diff(frac) <= 0).all() and (lo <= frac + 1e-12).all() and (frac <= hi + 1e-12).all()
    poi = {p["baseline"]: p for p in agg["poi"]}
    assert set(poi) == {"ddqn", "ddqn_super_gaussian [shareall]", "ddqn_ps"}
    assert all(p["value"] == p["low"] == p["high"] == 1.0 for p in poi.values())
    # an env whose best configuration does not beat random is left out, and said so
    norm2, info2 = A.normalize({"pursuit": {"ddqn": np.array([1.0, 2.0])}}, {"pursuit": 5.0})
    assert norm2 == {} and not info2["pursuit"]["used"] and "beats" in info2["pursuit"]["why"]


def test_error_bar_half_widths() -> None:
    """The figure's bars are the interval's half-widths; an interval a single run cannot give (NaN) draws none."""
    np.testing.assert_allclose(A._error_bar(0.6, 0.5, 0.9), [[0.1], [0.3]], atol=1e-12)
    assert A._error_bar(0.6, float("nan"), float("nan")) == [[0.0], [0.0]]


# --------------------------------------------------------------------------------------------------
# run folders: plot --analysis (random returns measured once, cached) and the marl-eval export


def small_campaign(root: Path) -> dict[str, list[float]]:
    """4 configurations x 3 seeds of 10 evaluations; SUPER ends 50 above everything else."""
    values: dict[str, list[float]] = {}
    for label, final in (("ddqn", 0.0), ("ddqn_super_quantile", 50.0), ("ddqn_super_gaussian [shareall]", -5.0),
                         ("ddqn_ps", 3.0)):
        for seed in (1, 2, 3):
            vals = [-20.0 + t + 0.5 * seed for t in range(9)] + [final + seed]
            fake_run(root, label, seed, vals)
            values[f"{label}/{seed}"] = vals
    return values


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(C.ROOT))
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_plot_analysis_and_marl_eval_export_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "campaign"
    small_campaign(root)
    out = tmp_path / "figs"
    res = run_cli("plot", str(root), "--out", str(out), "--analysis", "--marl-eval", str(tmp_path / "me.json"),
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with (out / "claims.csv").open() as f:
        claims = {r["claim"]: r for r in csv.DictReader(f)}
    assert set(claims) == {f"SUPER-quantile - {name}" for name, _ in A.BASELINES}
    assert all(r["verdict"] == A.HOLDS for r in claims.values())
    # final score = the last 10% = the last of 10 evaluations: SUPER 50 + seed, no sharing 0 + seed
    assert float(claims["SUPER-quantile - no sharing"]["iqm_difference"]) == pytest.approx(50.0, rel=1e-6)
    assert float(claims["SUPER-quantile - parameter sharing"]["iqm_difference"]) == pytest.approx(47.0, rel=1e-6)
    cache = json.loads((out / "random_returns.json").read_text())
    (entry,) = cache.values()
    assert entry["env"] == "pursuit" and entry["env_config"]["kwargs"]["x_size"] == 10
    for f in ("aggregate.png", "aggregate.svg", "aggregate.md", "claims.md", "final_performance.md"):
        assert (out / f).stat().st_size > 0
    assert "ddqn_super_quantile" in (out / "aggregate.md").read_text()
    svg = (out / "aggregate.svg").read_text()  # a title that names the envs and the normalization, the runs' caption
    assert ">Aggregate over pursuit: final scores normalized per env (random policy 0, best configuration's mean 1)<" \
        in svg.replace("&#39;", "'")
    assert ">Protocol: ours. Budget: pursuit " in svg
    # the cached random return is reused: a cache entry with a marked value shows up in the aggregate table
    entry["random_team_return"] = -123.25
    (out / "random_returns.json").write_text(json.dumps(cache))
    res = run_cli("plot", str(root), "--out", str(out), "--analysis", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "| pursuit | -123.25 |" in (out / "aggregate.md").read_text()

    # marl-eval layout: env -> task -> algorithm -> seed_k -> step_i / absolute_metrics, numbers of metrics.csv
    data = json.loads((tmp_path / "me.json").read_text())
    assert list(data) == [X.ENV_NAME] and list(data[X.ENV_NAME]) == ["pursuit"]
    algos = data[X.ENV_NAME]["pursuit"]
    assert set(algos) == set(CONFIGS)
    for folder in P.find_run_folders([root]):
        cfg = json.loads((folder / "config.json").read_text())
        run = algos[P.configuration_label(cfg)][f"seed_{cfg['run']['seed']}"]
        with (folder / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert sorted(run) == sorted([f"step_{i}" for i in range(len(rows))] + ["absolute_metrics"])
        for i, row in enumerate(rows):
            step = run[f"step_{i}"]
            assert step["step_count"] == int(row["env_steps"])
            assert step[X.METRIC] == [float(row["team_return_mean"])]  # exact: repr-written floats round-trip
            assert step["elapsed_time"] == float(row["wall_time_s"])
        assert run["absolute_metrics"][X.METRIC] == [float(rows[-1]["team_return_mean"])]


def test_claims_on_final_games_use_each_runs_varied_games_not_its_curve(tmp_path: Path) -> None:
    """Runs that end with final games (``final_games.json``, battle's 100 varied games) are also judged on them: each
    run's mean team return there is its score, in seed order; a configuration without the file has none. Here the
    curves say SUPER beats no sharing by 50 and the games say it loses by 20 in every seed, so the two tables must
    disagree."""
    root = tmp_path / "campaign"
    small_campaign(root)
    games = {"ddqn": 30.0, "ddqn_super_quantile": 10.0}  # + seed
    for folder in P.find_run_folders([root]):
        cfg = json.loads((folder / "config.json").read_text())
        label = P.configuration_label(cfg)
        if label in games:
            (folder / "final_games.json").write_text(json.dumps({"team_return": games[label] + cfg["run"]["seed"],
                                                                 "win_rate": 0.5}))
    curves = P.load_run_curves(P.find_run_folders([root]))
    scores = A.final_game_scores(curves)
    assert {label: list(v) for label, v in scores["pursuit"].items()} == {"ddqn": [31.0, 32.0, 33.0],
                                                                         "ddqn_super_quantile": [11.0, 12.0, 13.0]}
    paths = A.report(curves, tmp_path / "out", random={"pursuit": -100.0}, n_resamples=200)
    with paths["games_claims_csv"].open() as f:
        (row,) = list(csv.DictReader(f))  # the only pair with games on both sides
    assert row["claim"] == "SUPER-quantile - no sharing" and row["verdict"] == A.FAILS
    assert float(row["iqm_difference"]) == pytest.approx(-20.0)
    with paths["claims_csv"].open() as f:
        on_curves = {r["claim"]: r["verdict"] for r in csv.DictReader(f)}
    assert on_curves["SUPER-quantile - no sharing"] == A.HOLDS
    games_md, curves_md = paths["games_claims_md"].read_text(), paths["claims_md"].read_text()
    assert "mean team return over its final policy's varied games" in games_md
    # one score per run and no margin: the header leaves out what the table cannot say; the curves' table has both
    assert "Fragile:" not in games_md and "TOST" not in games_md.split("\n\n")[0]
    assert "Fragile:" in curves_md and "TOST p < 0.05 at a margin" in curves_md


def test_marl_eval_rejects_commas_and_unwritable_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="comma"):
        X.marl_eval_data([curve("pursuit", "a,b", 1, np.zeros(3))])
    root = tmp_path / "c"
    fake_run(root, "ddqn", 1, [0.0, 1.0])
    (tmp_path / "file").write_text("")
    res = run_cli("plot", str(root), "--marl-eval", str(tmp_path / "file" / "x.json"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: --marl-eval: ")


def test_campaign_notes_flag_rising_curves_and_diverging_seeds() -> None:
    """Known answers: curves climbing to the end in every seed are 'still rising', flat ones are not, one far
    seed makes 'seeds diverge' (range > 0.5 of best - random), and one run alone is never 'still rising'."""
    k = np.arange(40.0)
    curves = ([curve("e", "rising", s, k + s) for s in (1, 2, 3)]
              + [curve("e", "flat", s, np.full(40, 30.0 + s)) for s in (1, 2, 3)]
              + [curve("e", "split", s, np.full(40, v)) for s, v in ((1, 0.0), (2, 1.0), (3, 35.0))]
              + [curve("e", "alone", 1, k)])
    scores = A.scores_by_configuration(curves)
    _, info = A.normalize(scores, {"e": 0.0})  # best = rising's mean final score (~39.5), random 0
    notes = {r["configuration"]: r for r in A.campaign_notes(curves, info)}
    assert notes["rising"]["still_rising"] and not notes["rising"]["seeds_diverge"]
    assert notes["rising"]["rise_min"] == pytest.approx(4.0)  # last 4 evaluations minus the 4 before
    assert not notes["flat"]["still_rising"] and notes["flat"]["rise_mean"] == pytest.approx(0.0)
    assert notes["split"]["seeds_diverge"] and notes["split"]["final_range"] == pytest.approx(35.0)
    assert not notes["alone"]["still_rising"] and notes["alone"]["runs"] == 1
    assert np.isnan(A.rise(curve("e", "short", 1, np.array([1.0]))))


def test_campaign_notes_flag_evaluations_that_play_one_game() -> None:
    """Known answers: a configuration whose evaluations had identical episodes (between-episode std 0, or the
    rounding of a logged 0) in 3 of 4 runs' rows is 'one game per evaluation'; one with std > 0 everywhere is
    not; exactly half is (>= 0.5); curves without a logged std give NaN and no flag."""
    k = np.arange(40.0)

    def with_std(label: str, seed: int, std: np.ndarray) -> P.RunCurve:
        c = curve("e", label, seed, 100.0 + k)
        c.episode_std = std
        return c

    zeros, noisy = np.zeros(40), np.full(40, 3.0)
    rounding = np.full(40, 1e-12)  # a float-rounding std of identical returns, as written to metrics.csv
    half = np.where(k < 20, 0.0, 5.0)
    curves = ([with_std("det", 1, zeros), with_std("det", 2, rounding), with_std("det", 3, zeros),
               with_std("det", 4, noisy)]
              + [with_std("noisy", s, noisy) for s in (1, 2)]
              + [with_std("half", s, half) for s in (1, 2)]
              + [with_std("nan", 1, np.full(40, np.nan))]
              + [curve("e", "unlogged", s, k) for s in (1, 2)])
    _, info = A.normalize(A.scores_by_configuration(curves), {"e": 0.0})
    notes = {r["configuration"]: r for r in A.campaign_notes(curves, info)}
    assert notes["det"]["identical_episodes"] == pytest.approx(0.75) and notes["det"]["one_game_per_eval"]
    assert notes["noisy"]["identical_episodes"] == 0.0 and not notes["noisy"]["one_game_per_eval"]
    assert notes["half"]["identical_episodes"] == pytest.approx(0.5) and notes["half"]["one_game_per_eval"]
    for label in ("nan", "unlogged"):
        assert np.isnan(notes[label]["identical_episodes"]) and not notes[label]["one_game_per_eval"]


def test_claims_pair_configurations_within_one_protocol() -> None:
    """Both protocols' runs in one results tree: each SUPER configuration is compared with the baselines of its own
    protocol, never across, and the paper protocol's claims say so."""
    labels = ["ddqn", "ddqn_super_quantile", "ddqn_ps", "ddqn (paper)", "ddqn_super_quantile (paper)",
              "ddqn_super_gaussian_variance (paper) [shareall]", "ddqn_super_gaussian_variance (paper)"]
    got = A.claims(labels)
    assert ("SUPER-quantile - no sharing", "ddqn_super_quantile", "ddqn") in got
    assert ("SUPER-quantile - parameter sharing", "ddqn_super_quantile", "ddqn_ps") in got
    assert ("SUPER-quantile - no sharing (paper)", "ddqn_super_quantile (paper)", "ddqn (paper)") in got
    assert ("SUPER-quantile - share-all (paper)", "ddqn_super_quantile (paper)",
            "ddqn_super_gaussian_variance (paper) [shareall]") in got
    assert ("SUPER-gaussian_variance - no sharing (paper)", "ddqn_super_gaussian_variance (paper)",
            "ddqn (paper)") in got
    assert not any(c.endswith("(paper)") != s.endswith("(paper)") or s.endswith("(paper)") != b.split(" [")[0]
                   .endswith("(paper)") for c, s, b in got)
    assert not any(b == "ddqn_ps" and s.endswith("(paper)") for _, s, b in got)  # no paper baseline: no claim


def test_holm_adjusts_one_family_as_the_textbook_example() -> None:
    """Holm (1979) on p = (.01, .04, .03, .005): sorted .005 x 4, .01 x 3, .03 x 2, .04 x 1, made monotone ->
    (.03, .06, .06, .02); a NaN test does not count in the family."""
    from suPER.stats import holm

    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    got = holm([0.01, np.nan, 0.04, 0.03, 0.005])
    assert np.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2, 3, 4]], [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])  # 2 x .5 caps at 1; monotone: .9 cannot undercut it


def test_tost_shows_equivalence_only_within_the_margin() -> None:
    """Two samples of one distribution are shown equivalent at a margin of 1 sd with many runs, not at 0.05 sd; a
    shift of 2 sd is never equivalent at 1 sd. The p-value is the larger one-sided p (checked against scipy)."""
    from scipy import stats

    from suPER.stats import welch_tost_p

    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 200), rng.normal(0, 1, 200)
    assert welch_tost_p(x, y, 1.0) < 1e-6 and welch_tost_p(x, y, 0.05) > 0.05
    assert welch_tost_p(x + 2, y, 1.0) > 0.99
    lower = stats.ttest_ind(x + 0.3, y, equal_var=False, alternative="greater").pvalue  # H0 d <= -margin, margin .3
    upper = stats.ttest_ind(x - 0.3, y, equal_var=False, alternative="less").pvalue
    assert welch_tost_p(x, y, 0.3) == pytest.approx(max(lower, upper), rel=1e-9)
    assert np.isnan(welch_tost_p(x[:1], y, 1.0)) and np.isnan(welch_tost_p(x, y, 0.0))


def test_seeds_for_power_matches_cohens_table() -> None:
    """A standardized effect of d = 1 (two-sided alpha .05, power .8) needs 17 runs a side, d = 0.5 needs 64
    (Cohen 1988, table 2.4.1); no difference needs infinitely many."""
    from suPER.stats import seeds_for_power

    base = np.array([-1.0, 1.0] * 10)
    unit = base / base.std(ddof=1)  # sample sd exactly 1
    assert seeds_for_power(unit + 1.0, unit) == 17
    assert seeds_for_power(unit + 0.5, unit) == 64
    assert seeds_for_power(unit, unit) == float("inf") and np.isnan(seeds_for_power(unit[:1], unit))
    assert seeds_for_power(unit + 1.0, unit, alpha=0.05 / 6) > 17  # a family's stricter bar needs more


def test_seeds_for_power_at_large_effects_is_the_smallest_n_a_simulated_t_test_confirms() -> None:
    """At a large effect the power passes 0.8 at 2-3 runs a side, where scipy's ``nct.cdf`` gives NaN for the lower
    tail (an earlier version then skipped those n and answered 13 here); simulated t-tests at a Holm bar of 0.05 / 3
    reject less than 80% of the time with 2 runs a side and more with 3."""
    from scipy import stats

    from suPER.stats import seeds_for_power

    base = np.array([-1.0, 1.0] * 10)
    unit = base / base.std(ddof=1)
    assert seeds_for_power(unit + 8.5, unit, alpha=0.05 / 3) == 3
    rng = np.random.default_rng(0)
    rejected = {}
    for runs in (2, 3):
        x, y = rng.normal(8.5, 1.0, (20_000, runs)), rng.normal(0.0, 1.0, (20_000, runs))
        rejected[runs] = float((stats.ttest_ind(x, y, axis=1).pvalue < 0.05 / 3).mean())
    assert rejected[2] < 0.8 < rejected[3], rejected


def test_seeds_for_power_with_unequal_spreads_is_the_smallest_n_a_simulated_welch_test_confirms() -> None:
    """The verdicts use Welch's test, so the power does too: runs spread 3.0 on one side and 0.3 on the other, 4.0
    apart, need 7 a side (a pooled-sd Student t, blind to the unequal spreads, would say 6); simulated Welch tests at
    alpha 0.05 reject less than 80% of the time with 6 runs a side and more with 7."""
    from scipy import stats

    from suPER.stats import seeds_for_power

    base = np.array([-1.0, 1.0] * 10)
    unit = base / base.std(ddof=1)
    assert seeds_for_power(unit * 3.0 + 4.0, unit * 0.3) == 7
    rng = np.random.default_rng(0)
    rejected = {}
    for runs in (6, 7):
        x, y = rng.normal(4.0, 3.0, (40_000, runs)), rng.normal(0.0, 0.3, (40_000, runs))
        rejected[runs] = float((stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05).mean())
    assert rejected[6] < 0.8 < rejected[7], rejected


def _curve(env: str, label: str, seed: int, values: list[float]) -> P.RunCurve:
    steps = np.arange(len(values)) * 1000
    return P.RunCurve(env=env, label=label, seed=seed, steps=steps, values=np.asarray(values, float),
                             source=f"{env}/{label}/{seed}", status="finished")


def test_claim_verdicts_are_holm_adjusted_equivalent_or_fragile_on_runs_with_known_answers() -> None:
    from suPER.stats import holm

    """Synthetic runs whose answers are known: SUPER far above no sharing (holds under every window), equal to
    parameter sharing within a tight spread (equivalent within a margin of 10% of best - random), and above share-all
    only in the last evaluations, below it before, equal on the whole curve (holds on the last 10%, equivalent on the
    AUC: fragile). The Holm-adjusted p is the
    family's, and an inconclusive row gets the seeds it would need."""
    flat = [0.0] * 20
    curves = []
    for s, noise in enumerate((-1.0, 0.0, 1.0, 0.5, -0.5), 1):
        curves.append(_curve("e", "ddqn_super_quantile", s, [100 + noise] * 20))
        curves.append(_curve("e", "ddqn", s, [v + noise for v in flat]))
        curves.append(_curve("e", "ddqn_ps", s, [100 - noise * 0.9] * 20))
        # share-all 20/3 above SUPER for 18 of 20 evaluations, 60 below for the last 2: the same mean over all 20
        curves.append(_curve("e", "ddqn_super_gaussian [shareall]", s, [100 + noise + 20 / 3] * 18 + [40 + noise] * 2))
    scores = A.scores_by_configuration(curves)
    margins = A.protocol_margins(scores, {"e": 0.0})
    assert margins == {("e", "ours"): pytest.approx(0.1 * 100.0)}  # best ~100, random 0
    rows = {r["claim"]: r for r in A.claim_table(scores, 500, margins, A.window_scores(curves))}
    none, ps, share = rows["SUPER-quantile - no sharing"], rows["SUPER-quantile - parameter sharing"], \
        rows["SUPER-quantile - share-all"]
    assert none["verdict"] == A.HOLDS and not none["fragile"]
    assert ps["verdict"] == A.EQUIVALENT and ps["tost_p_holm"] < 0.05
    assert share["verdict"] == A.HOLDS and share["fragile"] and "AUC: equivalent" in share["verdicts_by_window"]
    raw = [rows[c]["welch_p"] for c in rows]
    np.testing.assert_allclose([rows[c]["welch_p_holm"] for c in rows], holm(raw))
    assert all(r["family"] == "e (ours): 3 claims" and r["protocol"] == "ours" for r in rows.values())
    assert all(np.isnan(r["seeds_for_power"]) for r in rows.values())  # decided rows need no more seeds
    few = [_curve("f", lab, s, [v] * 10) for s, (a, b) in enumerate(((1.0, 0.0), (0.0, 0.4), (2.0, 0.5)), 1)
           for lab, v in (("ddqn_super_quantile", a), ("ddqn", b))]
    (row,) = A.claim_table(A.scores_by_configuration(few), 500)
    assert row["verdict"] == A.INCONCLUSIVE and 3 < row["seeds_for_power"] < 1000


def test_a_claim_without_a_p_stays_out_of_its_holm_family_and_power() -> None:
    """A configuration with one run gives its claims no p: the family Holm adjusts over, its size and the alpha of
    the seeds for power are the claims with a p (here 2 of 4), as ``stats.holm`` counts them; the protocol comparison
    does not call a verdict without a p the same as one with."""
    from suPER.stats import holm, seeds_for_power

    curves = []
    for s, noise in enumerate((-3.0, 0.0, 3.0, 1.5, -1.5), 1):
        curves.append(_curve("e", "ddqn_super_quantile", s, [10 + noise] * 10))
        curves.append(_curve("e", "ddqn", s, [noise * 2] * 10))
        curves.append(_curve("e", "ddqn_ps", s, [9 - noise] * 10))
    curves.append(_curve("e", "ddqn_super_stochastic", 1, [5.0] * 10))  # one run: no p for its claims
    rows = A.claim_table(A.scores_by_configuration(curves), 300)
    tested = [r for r in rows if not np.isnan(r["welch_p"])]
    assert len(rows) == 4 and len(tested) == 2
    assert all(r["family_size"] == 2 and r["family"] == "e (ours): 2 claims (2 more without a p yet)" for r in rows)
    np.testing.assert_allclose([r["welch_p_holm"] for r in tested], holm([r["welch_p"] for r in tested]))
    (ps,) = [r for r in tested if r["claim"].endswith("parameter sharing")]
    assert ps["verdict"] == A.INCONCLUSIVE
    by_cfg = A.scores_by_configuration(curves)["e"]
    assert ps["seeds_for_power"] == seeds_for_power(by_cfg["ddqn_super_quantile"], by_cfg["ddqn_ps"], alpha=0.05 / 2)
    # under the paper protocol no sharing has one run: the claim has no p there, so the protocols are not compared
    paper = [_curve("e", "ddqn_super_quantile (paper)", s, [10.0 + s] * 10) for s in (1, 2, 3)]
    paper.append(_curve("e", "ddqn (paper)", 1, [0.0] * 10))
    both = {t["claim"]: t for t in A.protocol_comparison(A.claim_table(A.scores_by_configuration(curves + paper), 300))}
    row = both["SUPER-quantile - no sharing"]
    assert (row["paper_runs"], row["paper_verdict"], row["same_verdict"]) == ("3 vs 1", A.INCONCLUSIVE, "-")
    assert both["SUPER-quantile - parameter sharing"]["same_verdict"] == "-"  # no paper-protocol claim at all


def test_each_protocol_is_its_own_holm_family_and_the_comparison_pairs_their_verdicts(tmp_path: Path) -> None:
    """Both protocols in one results tree: the paper protocol's claims are adjusted among themselves and its TOST
    margin comes from its own best configuration, so adding them leaves our protocol's adjusted p, margins and
    verdicts exactly as without them; the comparison table puts each claim's
    two verdicts side by side (paper: SUPER far ahead, holds; ours: SUPER level, inconclusive -> 'no'), and a claim
    one protocol lacks shows '-'."""
    rng = np.random.default_rng(0)
    ours, paper = [], []
    for s in range(1, 6):
        ours += [_curve("e", "ddqn_super_quantile", s, [50 + rng.normal(0, 5)] * 10),
                 _curve("e", "ddqn", s, [48 + rng.normal(0, 5)] * 10),
                 _curve("e", "ddqn_ps", s, [49 + rng.normal(0, 5)] * 10)]
        paper += [_curve("e", "ddqn_super_quantile (paper)", s, [100 + s] * 10),
                  _curve("e", "ddqn (paper)", s, [s] * 10)]
    random = {"e": 0.0}
    alone_scores, both_scores = A.scores_by_configuration(ours), A.scores_by_configuration(ours + paper)
    margins = A.protocol_margins(both_scores, random)  # each protocol's own best: ours ~50, the paper's 103
    assert margins[("e", "ours")] == pytest.approx(A.protocol_margins(alone_scores, random)[("e", "ours")])
    assert margins[("e", "paper")] == pytest.approx(0.1 * 103.0) and margins[("e", "ours")] < 0.1 * 60.0
    alone = {r["claim"]: r for r in A.claim_table(alone_scores, 300, A.protocol_margins(alone_scores, random))}
    both_rows = A.claim_table(both_scores, 300, margins)
    both = {r["claim"]: r for r in both_rows}
    assert [r["protocol"] for r in both_rows] == ["paper", "ours", "ours"]  # the paper protocol's first
    for claim, r in alone.items():
        for key in ("welch_p_holm", "tost_margin", "tost_p_holm"):
            assert both[claim][key] == pytest.approx(r[key], rel=1e-12), key
        assert both[claim]["verdict"] == r["verdict"] and both[claim]["family"] == "e (ours): 2 claims"
    mine = both["SUPER-quantile - no sharing (paper)"]
    assert mine["family"] == "e (paper): 1 claims" and mine["welch_p_holm"] == pytest.approx(mine["welch_p"])
    assert mine["verdict"] == A.HOLDS
    table = {t["claim"]: t for t in A.protocol_comparison(both_rows)}
    assert list(table) == ["SUPER-quantile - no sharing", "SUPER-quantile - parameter sharing"]
    row = table["SUPER-quantile - no sharing"]
    assert (row["paper_verdict"], row["ours_verdict"], row["paper_runs"]) == (A.HOLDS, A.INCONCLUSIVE, "5 vs 5")
    assert row["same_verdict"] == "no" and row["paper_difference"] == pytest.approx(100.0)
    # each side's p as its family adjusted it: the paper protocol's 1 claim, our protocol's 2
    assert (row["paper_family_size"], row["ours_family_size"]) == (1, 2)
    assert row["paper_welch_p_holm"] == pytest.approx(mine["welch_p"])
    assert row["ours_welch_p_holm"] == pytest.approx(both["SUPER-quantile - no sharing"]["welch_p_holm"])
    assert A.comparison_p(row, "ours") == (f"{A._fmt_p(both['SUPER-quantile - no sharing']['welch_p'])} "
                                           f"({A._fmt_p(row['ours_welch_p_holm'])}, 2)")
    lacking = table["SUPER-quantile - parameter sharing"]
    assert (lacking["paper_verdict"], lacking["same_verdict"]) == ("-", "-") and np.isnan(lacking["paper_difference"])
    assert A.comparison_p(lacking, "paper") == "-"
    paper_gaussian = dict(both_rows[0], claim="SUPER-gaussian_variance - no sharing (paper)")  # the original's
    ours_gaussian = dict(both_rows[1], claim="SUPER-gaussian - no sharing")
    (met,) = A.protocol_comparison([paper_gaussian, ours_gaussian])  # the paper's gaussian meets ours
    assert met["claim"] == "SUPER-gaussian - no sharing" and "-" not in (met["paper_runs"], met["ours_runs"])
    fragile = [dict(paper_gaussian, verdict=A.INCONCLUSIVE, fragile=False),
               dict(ours_gaussian, verdict=A.INCONCLUSIVE, fragile=True)]
    (met,) = A.protocol_comparison(fragile)  # fragility is shown, but both verdicts are inconclusive: the same
    assert met["ours_verdict"] == f"{A.INCONCLUSIVE} (fragile)" and met["same_verdict"] == "yes"
    _, md = A.write_protocol_comparison(both_rows, tmp_path)
    # 100 apart at a spread of ~1.6: the raw p is below 0.001, and one claim leaves it unadjusted
    assert "| e | SUPER-quantile - no sharing | 5 vs 5 | 100.00 | <0.001 (<0.001, 1) | holds | 5 vs 5 |" in md.read_text()


def test_marl_eval_export_keeps_steps_in_order_and_warns_of_uneven_seeds(tmp_path: Path) -> None:
    """marl-eval's time-series functions take a run's ``step_<i>`` entries in file order, so the export writes
    step_0, step_1, ..., step_11 in that order (not the sorted step_0, step_1, step_10, ...); and as marl-eval keeps
    only the seeds every task and algorithm has, an uneven export says which runs it would drop."""
    curves = [curve("pursuit", "ddqn", s, np.arange(12.0)) for s in (1, 2, 3)]
    curves += [curve("pursuit", "ddqn_super_quantile", s, np.arange(12.0)) for s in (1, 2)]
    warned: list[str] = []
    path = X.write_marl_eval(curves, tmp_path / "me.json", warn=warned.append)
    run = json.loads(path.read_text())[X.ENV_NAME]["pursuit"]["ddqn"]["seed_1"]
    steps = [k for k in run if k.startswith("step_")]
    assert steps == [f"step_{i}" for i in range(12)]  # json.loads keeps the file's order
    assert [run[k]["step_count"] for k in steps] == sorted(run[k]["step_count"] for k in steps)
    assert len(warned) == 1 and "seeds: pursuit/ddqn 3, pursuit/ddqn_super_quantile 2" in warned[0]
    warned.clear()
    X.write_marl_eval(curves[:3], tmp_path / "even.json", warn=warned.append)
    assert warned == []


def test_a_deviation_pair_gives_the_per_seed_effect_of_one_setting_and_the_claim_against_it(tmp_path: Path) -> None:
    """Share-all runs with one setting switched (the insertion priority), seed by seed beside the runs they pair
    with: differences 5, 7, 9 give a mean of 7 with the t interval 7 +- t(0.975, 2) * 2 / sqrt(3) and the paired
    t-test's p (t = 7 / (2 / sqrt(3)), 2 degrees of freedom); the claim against share-all is recomputed against the
    variant. With SUPER quantile paired too (its variants 50 below), that claim is also recomputed with both sides set
    back. A variant seed without a run to pair with is left out; seeds pairing across other settings are refused."""
    from scipy import stats

    CONFIGS["ddqn_super_gaussian [shareall_legacy]"] = {**CONFIGS["ddqn_super_gaussian [shareall]"],
                                                       "relay.insertion_priority": "legacy", "run.tag": "shareall_legacy"}
    CONFIGS["ddqn_super_quantile [legacy]"] = {**CONFIGS["ddqn_super_quantile"], "relay.insertion_priority": "legacy",
                                               "run.tag": "legacy"}
    try:
        base, variant = tmp_path / "base", tmp_path / "variant"
        for seed, (score, shift) in enumerate(((10.0, 5.0), (20.0, 7.0), (30.0, 9.0)), 1):
            fake_run(base, "ddqn_super_gaussian [shareall]", seed, [0.0] * 9 + [score])
            fake_run(base, "ddqn_super_quantile", seed, [0.0] * 9 + [100.0 + seed])
            fake_run(base, "ddqn", seed, [0.0] * 10)
            fake_run(variant, "ddqn_super_gaussian [shareall_legacy]", seed, [0.0] * 9 + [score + shift])
        fake_run(variant, "ddqn_super_gaussian [shareall_legacy]", 4, [0.0] * 10)  # no seed-4 run to pair with
        curves = P.load_run_curves(P.find_run_folders([base]))
        variants = P.load_run_curves(P.find_run_folders([variant]))
        (row,) = A.deviation_pairs(curves, variants)
        for seed in (1, 2, 3):
            fake_run(variant, "ddqn_super_quantile [legacy]", seed, [0.0] * 9 + [50.0 + seed])
        both_paired = A.deviation_pairs(curves, P.load_run_curves(P.find_run_folders([variant])))
        assert [r["configuration"] for r in both_paired] == ["ddqn_super_gaussian [shareall]", "ddqn_super_quantile"]
        assert tuple(row) == A.PAIR_COLUMNS
        assert (row["configuration"], row["variant"]) == ("ddqn_super_gaussian [shareall]",
                                                          "ddqn_super_gaussian [shareall_legacy]")
        assert row["deviation"] == "relay.insertion_priority: max -> legacy"
        assert row["seeds"] == [1, 2, 3] and row["pairs"] == 3
        np.testing.assert_allclose(row["differences"], [5.0, 7.0, 9.0], rtol=1e-12)
        half = stats.t.ppf(0.975, 2) * 2.0 / np.sqrt(3.0)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((7.0 - half, 7.0 + half), rel=1e-9)
        assert row["paired_p"] == pytest.approx(2 * stats.t.sf(7.0 / (2.0 / np.sqrt(3.0)), 2), rel=1e-9)
        (claim,) = A.claims_against_variants(A.scores_by_configuration(curves), [row], 200)
        assert tuple(claim) == A.PAIR_CLAIM_COLUMNS
        assert claim["claim"] == "SUPER-quantile - share-all" and claim["runs"] == "3 vs 3"
        # one evaluation in the last 10%: the scores are the last values; IQM of 3 runs is their middle one
        assert claim["difference"] == pytest.approx(102.0 - 27.0, rel=1e-12) and claim["set_back"] == "baseline"
        baseline_only, both = A.claims_against_variants(A.scores_by_configuration(curves), both_paired, 200)
        assert baseline_only == {**claim, "ci_low": baseline_only["ci_low"], "ci_high": baseline_only["ci_high"]}
        assert (both["claim"], both["set_back"], both["runs"]) == ("SUPER-quantile - share-all", "both", "3 vs 3")
        assert both["difference"] == pytest.approx(52.0 - 27.0, rel=1e-12)
        assert both["welch_p"] == pytest.approx(stats.ttest_ind([51.0, 52.0, 53.0], [15.0, 27.0, 39.0],
                                                                equal_var=False).pvalue, rel=1e-9)
        odd = tmp_path / "odd"
        fake_run(odd, "ddqn_super_gaussian [shareall_legacy]", 1, [1.0] * 10)
        CONFIGS["ddqn_super_gaussian [shareall_legacy]"]["dqn.lr"] = 1e-3
        fake_run(odd, "ddqn_super_gaussian [shareall_legacy]", 2, [1.0] * 10)
        with pytest.raises(ValueError, match=r"expected its pair to differ from .* in 'relay.insertion_priority"):
            A.deviation_pairs(curves, P.load_run_curves(P.find_run_folders([odd])))
    finally:
        CONFIGS.pop("ddqn_super_gaussian [shareall_legacy]")
        CONFIGS.pop("ddqn_super_quantile [legacy]")
