"""What a MARL reviewer asks of a campaign: claim tests and env-aggregated metrics (Agarwal et al. 2021).

Every number starts from each run's *final score*: the mean of its last 10% of evaluations
(``plotting.final_scores``). On top of the per-env final-performance table (``plotting.final_performance``):

* **claim table** (per env): each SUPER selection rule with runs (quantile first, then the other registered
  rules: ``SUPER-gaussian``, ...) against no sharing, share-all and parameter sharing, each as
  ``IQM(SUPER) - IQM(baseline)`` with a 95% stratified percentile-bootstrap CI (the two configurations'
  runs are resampled separately) and the probability of improvement
  ``P(X > Y) = mean_{i,j} [x_i > y_j] + 0.5 [x_i = y_j]`` (X a SUPER run, Y a baseline run) with its CI.
  Verdict: *holds* when the CI of the IQM difference lies above 0 **and** Welch's t-test on the final scores
  gives p < 0.05 (two-sided; Colas et al. 2018), *does not hold* when the CI lies below 0 and p < 0.05,
  *inconclusive at this budget* otherwise (or with fewer than two runs a side). Why both: with 3 runs a side
  the percentile bootstrap's CI is too narrow: on two identical normal configurations it excluded 0 in 19% of
  400 draws (nominal 5%; 7.5% at 5 runs), Welch's test in 2.2% (4.5%); the price is power: a true 1.5-sd
  effect is called in 25% of draws at 3 runs instead of 67% (``scripts/verdict_error_rates.py``).
* **aggregates across envs** (rliable / marl-eval style): scores normalized per env as
  ``(score - random) / (best - random)``, where ``random`` is the env's random-policy team return and
  ``best`` the highest mean final score of any configuration in that env (so the best configuration has
  mean 1 and a random team 0); the IQM of the normalized scores of all runs of a configuration across envs,
  performance profiles ``P(normalized score > tau)``, and the probability of improvement of SUPER over each
  baseline averaged over envs. CIs are stratified bootstraps: runs are resampled within each env (and
  configuration), as rliable resamples runs within each task. Only configurations present in every env
  are aggregated.

* **campaign notes** (per env and configuration, what a reviewer checks before trusting a final score):
  *still rising at the budget's end* when every finished run's mean over its last 10% of evaluations is
  above its mean over the 10% before them (``rise``, at least two runs); *seeds diverge* when the range of
  the runs' final scores exceeds half the env's normalized scale (``best - random``, as above); *one game per
  evaluation* when at least half of the evaluations played every episode identically (between-episode std 0:
  greedy policies on a map without random placement, as battle's), so "10 episodes" measure one game and the
  noise of a curve lies between evaluations, not within them.

Random-policy returns are measured once per env configuration with ``opponents.random_team_return``
(20 episodes, seeded) and cached in ``<figures>/random_returns.json`` keyed by the env config.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from suPER import config as C
from suPER import plotting
from suPER.core.selection import mode_names
from suPER.plotting import RunCurve, iqm
from suPER.resolve import from_dict, without_volatile
from suPER.runs import RunFolder, atomic_write_json, atomic_write_text
from suPER.stats import bootstrap_ci, holm, seeds_for_power, welch_tost_p

BASELINES = (
    ("no sharing", "{algo}"),
    ("share-all", "{algo}_super_* [[]shareall]"),
    ("parameter sharing", "{algo}_ps"),
)
"""(name, configuration glob: ``[[]`` is a literal ``[``) of each baseline SUPER is claimed to beat; ``{algo}`` is
ddqn or dqn."""

HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE = "holds", "does not hold", "equivalent", "inconclusive at this budget"

WINDOWS = (("last 5%", 0.05), ("last 10%", 0.10), ("last 20%", 0.20), ("AUC", 1.0))
"""Final-score definitions a verdict is checked against: the mean of a run's last 5 / 10 / 20% of evaluations, and
the mean over all of them (the normalized area under its curve). The claim table's verdict is the last 10%'s."""

MAIN_WINDOW = 0.10
"""The final score of the verdict: the mean of a run's last 10% of evaluations."""

EQUIVALENCE_MARGIN = 0.1
"""TOST margin as a share of the env's normalized range (best configuration's mean final score minus the random
policy's return): a difference within 10% of the way from random to the best counts as equivalent (docs/decisions.md)."""

RANDOM_EPISODES = 20
"""Episodes of the random policy per env (``random_team_return``)."""


# --------------------------------------------------------------------------------------------------
# statistics


def probability_of_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """``P(X > Y)`` over all pairs of a run of X and a run of Y, ties counting half (Agarwal et al. 2021).

    Args:
        x: scores of X, runs along ``axis``.
        y: scores of Y, runs along ``axis`` (other axes broadcast with x's; bootstrap resamples).

    Returns:
        float array without ``axis``.
    """
    x, y = np.moveaxis(np.asarray(x, float), axis, -1), np.moveaxis(np.asarray(y, float), axis, -1)
    gt = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return np.asarray(gt + 0.5 * eq)


def iqm_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """``IQM(x) - IQM(y)`` along ``axis``."""
    return iqm(x, axis=axis) - iqm(y, axis=axis)


ALPHA = 0.05
"""Significance level of the claim verdicts (95% CIs, Welch's test at 5%)."""


def welch_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of Welch's unequal-variance t-test of mean(x) = mean(y); NaN with < 2 runs a side.

    Both sides without spread: 0 when their means differ (a sure difference), 1 when equal (scipy gives NaN).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or len(y) < 2:
        return float("nan")
    if x.var() == 0 and y.var() == 0:
        return 0.0 if x.mean() != y.mean() else 1.0
    from scipy import stats

    return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def verdict(low: float, high: float, p: float, tost: float = float("nan")) -> str:
    """holds / does not hold / equivalent / inconclusive from the 95% CI of a difference (SUPER minus baseline),
    the (family-adjusted) p-value of Welch's test and of the TOST equivalence test: a direction needs the CI and p
    (the CI alone is too narrow with few runs); a CI that contains 0 with TOST p < alpha is equivalent within the
    margin."""
    if not (np.isnan(low) or np.isnan(high)) and p < ALPHA and (low > 0 or high < 0):
        return HOLDS if low > 0 else FAILS
    if not (np.isnan(low) or np.isnan(high)) and low <= 0 <= high and tost < ALPHA:
        return EQUIVALENT
    return INCONCLUSIVE


def scores_by_configuration(curves: Sequence[RunCurve], last_fraction: float = 0.1) -> dict[str, dict[str, np.ndarray]]:
    """env -> configuration -> final scores of its finished runs (float [R], in seed order; unfinished runs have no
    final score)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for (env, label), group in plotting.groups([c for c in curves if c.finished]).items():
        out.setdefault(env, {})[label] = plotting.final_scores(group, last_fraction)
    return out


FINAL_GAMES_SCORE = "each run's mean team return over its final policy's varied games (final_games.json)"
"""what ``final_game_scores`` scores, as the claim table's header says it"""


def final_games_record(curve: RunCurve) -> dict[str, Any] | None:
    """The run's final policy in varied games (its ``final_games.json``: win / loss / tie rates with Wilson
    intervals, mean episode length and team return), or None for a run that played none."""
    path = RunFolder(Path(curve.source)).final_games
    return json.loads(path.read_text()) if path.is_file() else None


def final_game_scores(curves: Sequence[RunCurve]) -> dict[str, dict[str, np.ndarray]]:
    """env -> configuration -> each finished run's mean team return over the games its final policy played when
    training ended (``final_games.json`` in the run folder: battle's 100 games against the exploring opponent), in
    seed order; runs without the file are left out, and configurations with none.

    What a battle claim can also be judged on: battle's greedy evaluation replays one game, so a final score there is
    a handful of games, while these are 100 games that differ.
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for (env, label), group in plotting.groups([c for c in curves if c.finished]).items():
        values = [float(games["team_return"]) for games in map(final_games_record, group) if games is not None]
        if values:
            out.setdefault(env, {})[label] = np.asarray(values)
    return out


def claims(labels: Sequence[str]) -> list[tuple[str, str, str]]:
    """(claim, SUPER configuration, baseline configuration) for every pair among ``labels`` that the paper's claim
    covers: each ``<algo>_super_<rule>`` (b = 0.1 as run; a tagged label such as share-all's ``[shareall]`` is not
    one), rules in ``SELECTION_RULES`` order (quantile first), against each of ``BASELINES`` present (the first
    label its glob matches), within one protocol: the paper protocol's pairs first (``plotting.PAPER_SUFFIX``
    labels), then ours. Claim names read ``SUPER-<rule> - <baseline>`` and end in ``(paper)`` for the paper
    protocol's."""
    out = []
    for paper in (True, False):
        suffix = plotting.PAPER_SUFFIX if paper else ""
        plain = {lab.replace(suffix, "", 1): lab for lab in labels if plotting.is_paper(lab) == paper}
        out += [(claim + suffix, plain[sup], plain[base]) for claim, sup, base in _claims(list(plain))]
    return out


def _claims(labels: Sequence[str]) -> list[tuple[str, str, str]]:
    """``claims`` among the labels of one protocol, written without its suffix."""
    out = []
    for algo in sorted({lab.split("_super_")[0] for lab in labels if "_super_" in lab and "[" not in lab}):
        for rule in mode_names():
            sup = f"{algo}_super_{rule}"
            if sup not in labels:
                continue
            for name, glob in BASELINES:
                bases = [lab for lab in labels if fnmatch.fnmatchcase(lab, glob.format(algo=algo))]
                if bases:
                    out.append((f"SUPER-{rule} - {name}", sup, bases[0]))
    return out


def protocol_of(claim: str) -> str:
    """``paper`` for a paper-protocol claim (its name ends in ``plotting.PAPER_SUFFIX``), else ``ours``."""
    return "paper" if claim.endswith(plotting.PAPER_SUFFIX) else "ours"


CLAIM_COLUMNS = ("env", "protocol", "claim", "super", "baseline", "super_runs", "baseline_runs", "iqm_difference",
                 "ci_low", "ci_high", "probability_of_improvement", "poi_ci_low", "poi_ci_high", "welch_p",
                 "welch_p_holm", "family", "tost_margin", "tost_p_holm", "verdict", "fragile", "verdicts_by_window",
                 "seeds_for_power")


def claim_table(scores: dict[str, dict[str, np.ndarray]], n_resamples: int = 2000,
                margins: dict[tuple[str, str], float] | None = None,
                windows: dict[str, dict[str, dict[str, np.ndarray]]] | None = None) -> list[dict[str, Any]]:
    """One row per (env, algorithm, claim) whose two configurations both have runs (``CLAIM_COLUMNS``).

    The family of a test is its env under one protocol: Welch's p and the TOST p are Holm-adjusted over that env's
    claim rows of that protocol that have a p (``stats.holm``; a configuration with one run has none, and its claims
    join the family with its second run), and the verdict uses the adjusted values. The two protocols are
    two experiments, each asking the paper's questions once, so runs of one never change the other's verdicts.
    ``tost_margin`` (from ``margins``, per env and protocol: ``protocol_margins``) makes equivalence decidable;
    without one no row is equivalent.
    ``windows`` (window name -> the scores under that final-score definition, ``WINDOWS``) adds each row's verdict
    under each, and ``fragile`` when any differs from this table's. ``seeds_for_power``: runs per side for 80% power
    at the observed effect with alpha = 0.05 / (family size: the claims with a p), the bar the row's smallest p must
    pass under Holm; given for rows without a verdict either way (inconclusive), NaN otherwise.

    Args:
        scores: env -> configuration -> final scores (``scores_by_configuration``).
        n_resamples: bootstrap resamples of the CIs.
        margins: (env, protocol) -> TOST margin in the score's units (``protocol_margins``).
        windows: window name -> scores as ``scores``, for the robustness of each verdict.
    """
    margins = margins or {}
    rows = _family_rows(scores, n_resamples, margins)
    for name, other in (windows or {}).items():
        theirs = {(r["env"], r["claim"]): r["verdict"] for r in _family_rows(other, n_resamples, margins)}
        for r in rows:
            r.setdefault("verdicts", {})[name] = theirs.get((r["env"], r["claim"]), INCONCLUSIVE)
    for r in rows:
        by_window = r.pop("verdicts", {})
        r["fragile"] = any(v != r["verdict"] for v in by_window.values())
        r["verdicts_by_window"] = "; ".join(f"{k}: {v.removesuffix(' at this budget')}" for k, v in by_window.items())
    return rows


def _family_rows(scores: dict[str, dict[str, np.ndarray]], n_resamples: int,
                 margins: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    """The claim rows of every env with Holm-adjusted p-values and verdicts (``claim_table`` without windows), one
    Holm family per (env, protocol)."""
    families: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for env, by_cfg in scores.items():
        for claim, sup, base in claims(list(by_cfg)):
            x, y = by_cfg[sup], by_cfg[base]
            protocol = protocol_of(claim)
            margin = margins.get((env, protocol), float("nan"))
            lo, hi = bootstrap_ci((x, y), iqm_difference, n_resamples=n_resamples)
            plo, phi = bootstrap_ci((x, y), probability_of_improvement, n_resamples=n_resamples)
            families.setdefault((env, protocol), []).append({
                           "env": env, "protocol": protocol, "claim": claim, "super": sup, "baseline": base,
                           "super_runs": len(x), "baseline_runs": len(y),
                           "iqm_difference": float(iqm_difference(x, y)), "ci_low": float(lo), "ci_high": float(hi),
                           "probability_of_improvement": float(probability_of_improvement(x, y)),
                           "poi_ci_low": float(plo), "poi_ci_high": float(phi), "welch_p": welch_p(x, y),
                           "tost_margin": margin, "tost_p": welch_tost_p(x, y, margin), "x": x, "y": y})
    rows: list[dict[str, Any]] = []
    for (env, protocol), family in sorted(families.items(), key=lambda kv: kv[0][1] != "paper"):
        p_holm = holm([r["welch_p"] for r in family])
        tost_holm = holm([r.pop("tost_p") for r in family])
        # the family Holm adjusts over: the claims with a p (a configuration with one run has none yet)
        tested = sum(not np.isnan(r["welch_p"]) for r in family)
        untested = f" ({len(family) - tested} more without a p yet)" if tested < len(family) else ""
        for r, p, t in zip(family, p_holm, tost_holm):
            x, y = r.pop("x"), r.pop("y")
            r.update(welch_p_holm=float(p), tost_p_holm=float(t),
                     family=f"{env} ({protocol}): {tested} claims{untested}", family_size=tested,
                     verdict=verdict(r["ci_low"], r["ci_high"], float(p), float(t)))
            r["seeds_for_power"] = (seeds_for_power(x, y, alpha=ALPHA / max(tested, 1))
                                    if r["verdict"] == INCONCLUSIVE else float("nan"))
        rows += family
    return rows


NOTE_COLUMNS = ("env", "configuration", "runs", "final_mean", "final_range", "final_range_normalized",
                "rise_min", "rise_mean", "still_rising", "seeds_diverge", "identical_episodes", "one_game_per_eval")
DIVERGE_RANGE = 0.5
"""``seeds diverge``: the range of a configuration's final scores exceeds this share of ``best - random``."""
ONE_GAME_SHARE = 0.5
"""``one game per evaluation``: at least this share of the evaluations had identical episodes."""


def identical_episodes(curves: Sequence[RunCurve]) -> float:
    """Share of the evaluations of ``curves`` whose episodes all had the same return (between-episode std
    ``<= 1e-6 * max(1, |mean|)``: the std is logged rounded); NaN when no curve logged the std."""
    logged = [c for c in curves if c.episode_std is not None]
    if not logged:
        return float("nan")
    std_K = np.concatenate([c.episode_std for c in logged])
    mean_K = np.concatenate([c.values for c in logged])
    known = np.isfinite(std_K)
    if not known.any():
        return float("nan")
    return float((std_K[known] <= 1e-6 * np.maximum(1.0, np.abs(mean_K[known]))).mean())


def rise(curve: RunCurve, last_fraction: float = 0.1) -> float:
    """Mean of the last ``k = ceil(last_fraction * K)`` evaluations minus the mean of the ``k`` before them.

    Positive when the curve still climbs at the budget's end; NaN with fewer than ``2 k`` evaluations.
    """
    k = max(1, int(np.ceil(last_fraction * len(curve.values))))
    if len(curve.values) < 2 * k:
        return float("nan")
    return float(curve.values[-k:].mean() - curve.values[-2 * k:-k].mean())


def campaign_notes(curves: Sequence[RunCurve], info: dict[str, dict[str, Any]],
                   last_fraction: float = 0.1) -> list[dict[str, Any]]:
    """One row per (env, configuration) of finished runs (``NOTE_COLUMNS``): the final scores' mean and range
    (raw and over ``best - random`` from ``normalize``'s ``info``), each run's ``rise``, and the two flags.

    ``still_rising``: every run rises (at least two runs). ``seeds_diverge``: normalized range > ``DIVERGE_RANGE``
    (NaN scale, e.g. no random return, leaves it False). ``one_game_per_eval``: ``identical_episodes`` >=
    ``ONE_GAME_SHARE``.
    """
    rows: list[dict[str, Any]] = []
    for (env, label), group in plotting.groups([c for c in curves if c.finished]).items():
        scores = plotting.final_scores(group, last_fraction)
        rises = np.array([rise(c, last_fraction) for c in group])
        env_info = info.get(env, {})
        spread = float(scores.max() - scores.min())
        # normalize's info says whether the env has a scale (a random return the best configuration beats)
        spread_norm = spread / (env_info["best"] - env_info["random"]) if env_info.get("used") else float("nan")
        finite = rises[np.isfinite(rises)]
        same = identical_episodes(group)
        rows.append({"env": env, "configuration": label, "runs": len(group), "final_mean": float(scores.mean()),
                     "final_range": spread, "final_range_normalized": spread_norm,
                     "rise_min": float(finite.min()) if finite.size else float("nan"),
                     "rise_mean": float(finite.mean()) if finite.size else float("nan"),
                     "still_rising": bool(len(group) >= 2 and finite.size == len(group) and (finite > 0).all()),
                     "seeds_diverge": bool(np.isfinite(spread_norm) and spread_norm > DIVERGE_RANGE),
                     "identical_episodes": same, "one_game_per_eval": bool(same >= ONE_GAME_SHARE)})
    return rows


def write_notes(rows: Sequence[dict[str, Any]], out_dir: Path, stem: str = "notes",
                last_fraction: float = 0.1) -> tuple[Path, Path]:
    """``<stem>.csv`` and ``<stem>.md``: the campaign notes, flagged rows first in each env."""
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    _write_csv(csv_path, rows, NOTE_COLUMNS)
    lines = ["| env | configuration | runs | final mean | final range (of best - random) | rise min / mean | "
             "still rising | seeds diverge | identical episodes |", "|---|---|---|---|---|---|---|---|---|"]

    def flagged(r: dict[str, Any]) -> bool:
        return r["still_rising"] or r["seeds_diverge"] or r["one_game_per_eval"]

    for r in sorted(rows, key=lambda r: (r["env"], not flagged(r), r["configuration"])):
        same = "-" if np.isnan(r["identical_episodes"]) else f"{100 * r['identical_episodes']:.0f}%"
        lines.append(f"| {r['env']} | {r['configuration']} | {r['runs']} | {_fmt(r['final_mean'])} | "
                     f"{_fmt(r['final_range'])} ({_fmt(r['final_range_normalized'])}) | {_fmt(r['rise_min'])} / "
                     f"{_fmt(r['rise_mean'])} | {'yes' if r['still_rising'] else 'no'} | "
                     f"{'yes' if r['seeds_diverge'] else 'no'} | {same}{' (one game)' if r['one_game_per_eval'] else ''} |")
    pct = f"{100 * last_fraction:g}%"
    lines += ["", f"rise: mean of a run's last {pct} of evaluations minus the {pct} before; still rising = every run "
              f"rises; seeds diverge = range of final scores > {DIVERGE_RANGE} x (best - random) of the env; "
              "identical episodes = share of evaluations in which every episode had the same return (one game: at "
              f"least {100 * ONE_GAME_SHARE:.0f}%, so an evaluation's episodes measure one game, not a sample)."]
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


# --------------------------------------------------------------------------------------------------
# normalization and aggregates across envs


def normalize(scores: dict[str, dict[str, np.ndarray]], random: dict[str, float]) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, Any]]]:
    """``(score - random) / (best - random)`` per env, ``best`` = the highest mean final score of a configuration.

    Envs without a random return, or whose best configuration does not beat random, are left out
    (the scale would be undefined or inverted) and reported in the second value.

    Returns:
        (env -> configuration -> normalized scores, env -> {random, best, best_configuration, used, why}).
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    info: dict[str, dict[str, Any]] = {}
    for env, by_cfg in scores.items():
        best_cfg = max(by_cfg, key=lambda lab: float(by_cfg[lab].mean()))
        best = float(by_cfg[best_cfg].mean())
        r = random.get(env)
        row = {"random": r, "best": best, "best_configuration": best_cfg, "used": False, "why": ""}
        if r is None:
            row["why"] = "no random-policy return"
        elif best <= r:
            row["why"] = "no configuration beats the random policy"
        else:
            out[env] = {lab: (s - r) / (best - r) for lab, s in by_cfg.items()}
            row["used"] = True
        info[env] = row
    return out, info


def common_configurations(norm: dict[str, dict[str, np.ndarray]]) -> list[str]:
    """Configurations with runs in every env of ``norm`` (sorted)."""
    sets = [set(by_cfg) for by_cfg in norm.values()]
    return sorted(set.intersection(*sets)) if sets else []


def _pooled_iqm(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
    return iqm(np.concatenate(strata, axis=axis), axis=axis)


TAUS = np.linspace(-0.5, 1.5, 41)
"""Normalized-score thresholds of the performance profiles."""


def aggregate_metrics(norm: dict[str, dict[str, np.ndarray]], n_resamples: int = 2000,
                      taus: np.ndarray = TAUS) -> dict[str, Any]:
    """Normalized IQM, performance profiles and SUPER's probability of improvement across envs.

    Returns:
        ``{"configurations": [...], "iqm": {cfg: (value, low, high)}, "profiles": {cfg: (frac_T, low_T, high_T)},
        "taus": taus, "poi": [{"super", "baseline", "value", "low", "high", "envs"}]}``; POI is the mean over
        envs of the per-env probability of improvement (rliable's ``probability_of_improvement``).
    """
    cfgs = common_configurations(norm)
    envs = list(norm)
    res: dict[str, Any] = {"configurations": cfgs, "envs": envs, "taus": taus, "iqm": {}, "profiles": {}, "poi": []}
    for cfg in cfgs:
        strata = tuple(norm[e][cfg] for e in envs)
        lo, hi = bootstrap_ci(strata, _pooled_iqm, n_resamples=n_resamples)
        res["iqm"][cfg] = (float(_pooled_iqm(*strata)), float(lo), float(hi))

        def profile(*s: np.ndarray, axis: int = -1) -> np.ndarray:
            pooled = np.moveaxis(np.concatenate(s, axis=axis), axis, -1)
            return np.moveaxis((pooled[..., None, :] > taus[:, None]).mean(axis=-1), -1, 0)

        plo, phi = bootstrap_ci(strata, profile, n_resamples=n_resamples)
        res["profiles"][cfg] = (profile(*strata, axis=0), plo, phi)
    def mean_poi(*s: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([probability_of_improvement(s[i], s[i + 1], axis=axis) for i in range(0, len(s), 2)], axis=0)

    for _, sup, base in claims(cfgs):
        strata = tuple(a for e in envs for a in (norm[e][sup], norm[e][base]))
        lo, hi = bootstrap_ci(strata, mean_poi, n_resamples=n_resamples)
        res["poi"].append({"super": sup, "baseline": base, "value": float(mean_poi(*strata)),
                           "low": float(lo), "high": float(hi), "envs": len(envs)})
    return res


# --------------------------------------------------------------------------------------------------
# random-policy returns (cached)


TRAINING_ONLY_ENV_FIELDS = ("truncation_is_terminal", "seed_offset", "eval_seed_offset", "opponent_epsilon",
                            "opponent_epsilon_final", "opponent_epsilon_timesteps", "opponent_allow_pickle")
"""Env settings that only training games see: a random-policy return does not depend on them."""

RANDOM_RETURNS_DATA = Path(__file__).resolve().parent.parent / "experiments" / "random_returns.json"
"""The random-policy returns measured for the shipped env configurations (``random_returns`` reads them before
measuring; each entry says how it was measured). ``python scripts/random_returns.py RUNS...`` adds missing ones."""


def random_env_config(env_cfg: dict[str, Any]) -> dict[str, Any]:
    """The env as a random team's evaluation games see it: ``env_cfg`` completed with the defaults of fields added
    since it was written, the opponent exploring at ``eval_opponent_epsilon``, training-only settings dropped
    (``TRAINING_ONLY_ENV_FIELDS``), so both protocols and old run records share one key."""
    import dataclasses

    from suPER import config as C

    try:
        full = dataclasses.asdict(from_dict({"env": env_cfg}).env)
    except (C.ConfigError, TypeError, ValueError):
        full = dict(env_cfg)
    return {k: v for k, v in full.items() if k not in TRAINING_ONLY_ENV_FIELDS}


def env_key(env_cfg: dict[str, Any]) -> str:
    """``<env>-<sha1 of random_env_config>[:10]``: a random return belongs to exactly one env configuration."""
    text = json.dumps(random_env_config(env_cfg), sort_keys=True, default=str)
    return f"{env_cfg.get('name', '?')}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def random_returns(curves: Sequence[RunCurve], cache: Path, episodes: int = RANDOM_EPISODES,
                   data: Path | None = RANDOM_RETURNS_DATA, log: Any = None) -> dict[str, float]:
    """Random-policy team return per env, for the env config of the env's first run folder: read from ``data``
    (the shipped measurements) or ``cache``, else measured with ``opponents.random_team_return`` (``episodes``
    episodes, seeded; tens of seconds per env) and stored in ``cache`` with how it was measured.

    Envs whose runs disagree on the env config (e.g. smoke and paper maps in one folder) use the first;
    curves that do not come from a run folder (W&B) get no random return.

    Args:
        log: called with a line before each measurement (what is measured, for how long roughly).
    """

    cache = Path(cache)
    stored: dict[str, Any] = json.loads(cache.read_text()) if cache.is_file() else {}
    shipped = json.loads(Path(data).read_text()) if data is not None and Path(data).is_file() else {}
    known = {**shipped, **stored}
    out: dict[str, float] = {}
    changed = False
    for c in curves:
        if c.env in out or not (Path(c.source) / "config.json").is_file():
            continue
        env_cfg = json.loads((Path(c.source) / "config.json").read_text())["env"]
        key = env_key(env_cfg)
        if key not in known:
            import dataclasses

            from suPER.opponents import random_team_return

            if log is not None:
                log(f"random-policy return of {c.env} ({key}): measuring {episodes} episodes")
            env = from_dict({"env": env_cfg}).env
            env = dataclasses.replace(env, opponent_epsilon=env.eval_opponent_epsilon, opponent_epsilon_timesteps=0)
            value = random_team_return(env, episodes=episodes)
            known[key] = stored[key] = {
                "env": c.env, "random_team_return": value, "episodes": episodes,
                "measured_with": f"suPER.opponents.random_team_return(env, episodes={episodes}): uniformly random "
                                 "learners (actions from default_rng(0)) on a game reset once with seed 12345",
                "env_config": random_env_config(env_cfg)}
            changed = True
        out[c.env] = float(known[key]["random_team_return"])
    if changed:
        atomic_write_json(cache, stored)
    return out


# --------------------------------------------------------------------------------------------------
# tables and figures


def _fmt(v: float, digits: int = 2) -> str:
    return "-" if v != v else f"{v:.{digits}f}"


def _fmt_p(p: float) -> str:
    return "-" if p != p else "<0.001" if p < 0.001 else f"{p:.3f}"


def _write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


FRAGILE = " (fragile)"
"""what a verdict shown with its fragility ends in"""


def write_claims(rows: Sequence[dict[str, Any]], out_dir: Path, stem: str = "claims",
                 score: str = "final scores (mean of each run's last 10% of evaluations)") -> tuple[Path, Path]:
    """Claim table as CSV and markdown (``score``: what the scores are, for the header). The header describes the
    equivalence test and the windows only where the rows have them (a TOST margin, verdicts by window).
    Returns (csv, md)."""
    out_dir = Path(out_dir)
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    _write_csv(csv_path, rows, CLAIM_COLUMNS)
    families = ", ".join(dict.fromkeys(r["family"] for r in rows))
    tost = not all(np.isnan(r["tost_margin"]) for r in rows)  # NaN: no margin
    windows = any(r["verdicts_by_window"] for r in rows)
    lines = [f"Claims: difference of IQM of {score}, SUPER minus "
             "baseline, with a 95% stratified percentile-bootstrap CI; probability of improvement P(SUPER run > "
             "baseline run) with its CI (Agarwal et al. 2021); p of Welch's t-test on those scores (two-sided), "
             f"raw and Holm-adjusted over each env's claims under one protocol (families: {families or '-'}). "
             "Verdict on the adjusted "
             "p: holds (CI > 0 and p < 0.05), does not hold (CI < 0 and p < 0.05), "
             + (f"equivalent (CI contains 0 and the Holm-adjusted TOST p < 0.05 at a margin of {EQUIVALENCE_MARGIN:g} "
                "x (best - random) of the env under the claim's protocol), " if tost else "")
             + "inconclusive otherwise (or fewer than 2 runs a side). "
             + ("Fragile: the verdict differs under another final-score window (last 5%, 10%, 20% of evaluations, "
                "AUC = all of them). " if windows else "")
             + "Seeds: runs per side for 80% power at the observed effect (alpha 0.05 / family size), for "
             "inconclusive rows.", "",
             "| env | protocol | claim | runs | IQM difference | 95% CI | P(improvement) | Welch p (Holm) | "
             "TOST p (Holm) | verdict | by window | seeds for 80% power |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        seeds = r["seeds_for_power"]
        claim = r["claim"].removesuffix(plotting.PAPER_SUFFIX)
        lines.append(f"| {r['env']} | {r['protocol']} | {claim} ({r['baseline']}) | "
                     f"{r['super_runs']} vs {r['baseline_runs']} | "
                     f"{_fmt(r['iqm_difference'])} | [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] | "
                     f"{_fmt(r['probability_of_improvement'])} [{_fmt(r['poi_ci_low'])}, {_fmt(r['poi_ci_high'])}] | "
                     f"{_fmt_p(r['welch_p'])} ({_fmt_p(r['welch_p_holm'])}) | {_fmt_p(r['tost_p_holm'])} | "
                     f"{r['verdict']}{FRAGILE if r['fragile'] else ''} | {r['verdicts_by_window'] or '-'} | "
                     f"{'-' if seeds != seeds else '>10000' if seeds == float('inf') else f'{seeds:.0f}'} |")
    if not rows:
        lines.append("| - | - | no SUPER configuration with a baseline in these runs | | | | | | | | | |")
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


PROTOCOL_COLUMNS = ("env", "claim", "paper_runs", "paper_difference", "paper_welch_p", "paper_welch_p_holm",
                    "paper_family_size", "paper_verdict", "ours_runs", "ours_difference", "ours_welch_p",
                    "ours_welch_p_holm", "ours_family_size", "ours_verdict", "same_verdict")


PROTOCOL_HEADER = ("| env | claim | paper: runs | difference | p (Holm, claims) | verdict | ours: runs | difference | "
                   "p (Holm, claims) | verdict | same |\n|---|---|---:|---:|---:|---|---:|---:|---:|---|---|")
"""The markdown header of ``protocol_comparison``'s table (protocols.md here, results.md by scripts/fig1_tables.py)."""


PAPER_RULE_NAMES = {"SUPER-gaussian_variance": "SUPER-gaussian"}
"""The paper protocol's rules under the paper's names: its gaussian is the original's, on the variance
(``relay.mode: gaussian_variance``), which is what the paper calls SUPER gaussian."""


def protocol_comparison(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (env, claim) of ``claim_table``'s rows: its runs, IQM difference, Welch p raw and Holm-adjusted
    with the size of the family it was adjusted over, and verdict under the paper protocol and under ours (``-`` /
    NaN where a protocol has no such claim yet), and whether the verdicts agree (holds, does not hold, equivalent or
    inconclusive; a fragile verdict is shown as such but is still its verdict; ``-`` while a side has no p, its
    inconclusive verdict then being one of a single run, not of a test). The family sizes say when verdicts
    differ because one protocol's env has more claims so far (Holm asks more of each p), not because of the runs.
    A claim is named as the paper names it (``PAPER_RULE_NAMES``), so each protocol's SUPER gaussian meets the
    other's. Claims of either protocol appear; which deviation moves a verdict that differs is a question for a pair
    of runs that isolates it, not for this table."""
    by_claim: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["protocol"] != "paper"):
        rule, _, baseline = r["claim"].removesuffix(plotting.PAPER_SUFFIX).partition(" - ")
        if r["protocol"] == "paper":
            rule = PAPER_RULE_NAMES.get(rule, rule)
        key = (r["env"], f"{rule} - {baseline}")
        out = by_claim.setdefault(key, {"env": key[0], "claim": key[1], **{
            f"{p}_{k}": v for p in ("paper", "ours") for k, v in (
                ("runs", "-"), ("difference", float("nan")), ("welch_p", float("nan")),
                ("welch_p_holm", float("nan")), ("family_size", "-"), ("verdict", "-"))}})
        verdict_text = r["verdict"] + (FRAGILE if r.get("fragile") else "")
        p = r["protocol"]
        out.update({f"{p}_runs": f"{r['super_runs']} vs {r['baseline_runs']}", f"{p}_difference": r["iqm_difference"],
                    f"{p}_welch_p": r["welch_p"], f"{p}_welch_p_holm": r["welch_p_holm"],
                    f"{p}_family_size": r["family_size"], f"{p}_verdict": verdict_text})
    for out in by_claim.values():
        paper, ours = (out[f"{p}_verdict"].removesuffix(FRAGILE) for p in ("paper", "ours"))
        # no p on a side (no such claim there, or a configuration with one run): nothing to compare
        untested = any(np.isnan(out[f"{p}_welch_p"]) for p in ("paper", "ours"))
        out["same_verdict"] = "-" if untested else "yes" if paper == ours else "no"
    env_order = list(dict.fromkeys(r["env"] for r in rows))
    return [by_claim[k] for k in sorted(by_claim, key=lambda k: env_order.index(k[0]))]


def comparison_p(row: dict[str, Any], protocol: str) -> str:
    """A ``protocol_comparison`` row's Welch p for one protocol as ``raw (Holm, family size)``, ``-`` without one."""
    p = row[f"{protocol}_welch_p"]
    return "-" if p != p else f"{_fmt_p(p)} ({_fmt_p(row[f'{protocol}_welch_p_holm'])}, {row[f'{protocol}_family_size']})"


NAMING_KEYS = ("run.tag", "run.name")
"""Settings that name a run without changing what it does; with ``config.VOLATILE_RUN_KEYS`` (where it runs, how
it logs), what the two runs of a deviation pair may differ in besides the deviation."""


def settings_difference(a: RunCurve, b: RunCurve) -> dict[str, tuple[Any, Any]]:
    """The settings in which run ``b``'s config.json differs from run ``a``'s, as ``{key: (a's, b's)}``, leaving out
    ``NAMING_KEYS`` and the volatile run keys (``resolve.without_volatile``)."""
    a_cfg, b_cfg = (C.flatten(without_volatile(json.loads((Path(c.source) / "config.json").read_text())))
                    for c in (a, b))
    return {k: (a_cfg.get(k), b_cfg.get(k)) for k in sorted(a_cfg.keys() | b_cfg.keys())
            if k not in NAMING_KEYS and a_cfg.get(k) != b_cfg.get(k)}


PAIR_COLUMNS = ("env", "configuration", "variant", "deviation", "pairs", "seeds", "base_scores", "variant_scores",
                "differences", "mean_difference", "ci_low", "ci_high", "paired_p")


def deviation_pairs(curves: Sequence[RunCurve], variants: Sequence[RunCurve],
                    last_fraction: float = MAIN_WINDOW) -> list[dict[str, Any]]:
    """What switching one setting does to a configuration, from pairs of runs that differ in it alone.

    Each finished run of ``variants`` (experiments/fig1_isolate.yaml's: the paper protocol with one restored
    behaviour set back to ours) is paired with the finished run of ``curves`` on its env and seed whose resolved
    config differs from its own in the fewest settings (``settings_difference``: naming and volatile keys aside;
    those settings are the row's ``deviation``); a variant without a run of its env and seed is left out. One row
    per (env, configuration, variant configuration) (``PAIR_COLUMNS``): the seeds, each run's final score (the mean
    of its last ``last_fraction`` of evaluations) and the per-seed difference ``d_s = variant_s - base_s``; their
    mean with the 95% t interval ``mean(d) +- t_{0.975, n-1} sd(d) / sqrt(n)`` and the paired t-test's two-sided p
    (NaN below two pairs; 0 or 1 when every pair differs alike). Pairing by seed removes what the seed fixes (start
    weights, env draws, exploration until the runs part) from the difference; 3 pairs still detect only large
    effects.

    Raises:
        ValueError: two seeds of one configuration and variant pair up across different settings (the records
            are not one deviation's pairs).
    """
    from scipy import stats

    finished = [c for c in curves if c.finished]
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for v in sorted((c for c in variants if c.finished), key=lambda c: (c.env, c.label, c.seed)):
        candidates = [(settings_difference(c, v), c) for c in finished if c.env == v.env and c.seed == v.seed]
        if not candidates:
            continue
        changed, base = min(candidates, key=lambda dc: len(dc[0]))
        deviation = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
        group = groups.setdefault((v.env, base.label, v.label), {"deviation": deviation, "runs": []})
        if group["deviation"] != deviation:
            raise ValueError(f"{v.source}: expected its pair to differ from {base.source} in "
                             f"{group['deviation']!r} as its other seeds' do, got {deviation!r}")
        group["runs"].append((v.seed, base, v))
    rows = []
    for (env, label, variant), group in groups.items():
        seeds = [s for s, _, _ in group["runs"]]
        base_scores = plotting.final_scores([b for _, b, _ in group["runs"]], last_fraction)
        variant_scores = plotting.final_scores([v for _, _, v in group["runs"]], last_fraction)
        d = variant_scores - base_scores
        low = high = p = float("nan")
        if len(d) >= 2:
            half = float(stats.t.ppf(1 - ALPHA / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))
            low, high = float(d.mean()) - half, float(d.mean()) + half
            p = (float(stats.ttest_rel(variant_scores, base_scores).pvalue) if d.std() > 0
                 else 0.0 if d.mean() != 0 else 1.0)
        rows.append({"env": env, "configuration": label, "variant": variant, "deviation": group["deviation"],
                     "pairs": len(d), "seeds": seeds, "base_scores": base_scores, "variant_scores": variant_scores,
                     "differences": d, "mean_difference": float(d.mean()), "ci_low": low, "ci_high": high,
                     "paired_p": p})
    return rows


PAIR_CLAIM_COLUMNS = ("env", "claim", "variant", "deviation", "set_back", "runs", "difference", "ci_low", "ci_high",
                      "welch_p")


def claims_against_variants(scores: dict[str, dict[str, np.ndarray]], pairs: Sequence[dict[str, Any]],
                            n_resamples: int = 2000) -> list[dict[str, Any]]:
    """Each claim whose baseline is a deviation pair's configuration, recomputed with the pair's variant runs in its
    place: what the claim would read had that one setting been ours (``PAIR_CLAIM_COLUMNS``: the IQM difference
    SUPER minus variant with its 95% stratified bootstrap CI, and Welch's p, unadjusted: the variant is one question
    asked after the claim table's, in no Holm family). ``set_back`` says which side: ``baseline``, and, where the
    claim's SUPER configuration has a pair of the same deviation too, a second row with ``both`` sides' variant runs
    (the claim had the whole comparison run with that setting ours; the baseline-only row mixes the two settings).
    Claims are named as in ``claims``; ``scores`` holds the claim's configurations (``scores_by_configuration``)."""
    variant_scores = {(p["env"], p["configuration"], p["deviation"]): p["variant_scores"] for p in pairs}
    rows = []
    for pair in pairs:
        by_cfg = scores.get(pair["env"], {})
        for claim, sup, base in claims(list(by_cfg)):
            if base != pair["configuration"]:
                continue
            y = pair["variant_scores"]
            sup_variant = variant_scores.get((pair["env"], sup, pair["deviation"]))
            sides = [("baseline", by_cfg[sup])] + ([("both", sup_variant)] if sup_variant is not None else [])
            for set_back, x in sides:
                lo, hi = bootstrap_ci((x, y), iqm_difference, n_resamples=n_resamples)
                rows.append({"env": pair["env"], "claim": claim, "variant": pair["variant"],
                             "deviation": pair["deviation"], "set_back": set_back, "runs": f"{len(x)} vs {len(y)}",
                             "difference": float(iqm_difference(x, y)), "ci_low": float(lo), "ci_high": float(hi),
                             "welch_p": welch_p(x, y)})
    return rows


def write_protocol_comparison(rows: Sequence[dict[str, Any]], out_dir: Path,
                              stem: str = "protocols") -> tuple[Path, Path]:
    """``protocol_comparison`` of the claim rows as CSV and markdown. Returns (csv, md)."""
    table = protocol_comparison(rows)
    csv_path, md_path = Path(out_dir) / f"{stem}.csv", Path(out_dir) / f"{stem}.md"
    _write_csv(csv_path, table, PROTOCOL_COLUMNS)
    lines = ["Each claim under the paper protocol (the original's behaviour) and ours (this suite's corrected "
             "defaults): runs a side, IQM difference of final scores (SUPER minus baseline), Welch's p (Holm-adjusted, "
             "over that many claims: the env's under that protocol) and the verdict of the claim table.", "",
             PROTOCOL_HEADER]
    lines += [f"| {t['env']} | {t['claim']} | {t['paper_runs']} | {_fmt(t['paper_difference'])} | "
              f"{comparison_p(t, 'paper')} | {t['paper_verdict']} | {t['ours_runs']} | {_fmt(t['ours_difference'])} | "
              f"{comparison_p(t, 'ours')} | {t['ours_verdict']} | {t['same_verdict']} |" for t in table]
    if not table:
        lines.append("| - | no claim in these runs | | | | | | | | | |")
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def write_aggregates(agg: dict[str, Any], info: dict[str, dict[str, Any]], out_dir: Path,
                     stem: str = "aggregate") -> tuple[Path, Path]:
    """Normalized IQM and probability-of-improvement tables (CSV + markdown). Returns (csv, md)."""
    out_dir = Path(out_dir)
    rows = [{"kind": "iqm", "configuration": c, "value": v, "low": lo, "high": hi}
            for c, (v, lo, hi) in agg["iqm"].items()]
    rows += [{"kind": "probability_of_improvement", "configuration": f"{p['super']} > {p['baseline']}",
              "value": p["value"], "low": p["low"], "high": p["high"]} for p in agg["poi"]]
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    _write_csv(csv_path, rows, ("kind", "configuration", "value", "low", "high"))
    lines = ["Aggregate over envs " + (", ".join(agg["envs"]) or "(none could be normalized)") + ": final scores normalized per env as "
             "(score - random) / (best - random), random = the random-policy team return "
             "(opponents.random_team_return), best = the best configuration's mean final score; "
             "95% CIs from a bootstrap stratified by env (and configuration).", "",
             "| env | random-policy return | best configuration | its mean | used |", "|---|---:|---|---:|---|"]
    for env, r in info.items():
        lines.append(f"| {env} | {_fmt(r['random'] if r['random'] is not None else float('nan'))} | "
                     f"{r['best_configuration']} | {_fmt(r['best'])} | {'yes' if r['used'] else 'no: ' + r['why']} |")
    lines += ["", "| configuration | normalized IQM | 95% CI |", "|---|---:|---|"]
    lines += [f"| {r['configuration']} | {_fmt(r['value'])} | [{_fmt(r['low'])}, {_fmt(r['high'])}] |"
              for r in rows if r["kind"] == "iqm"]
    lines += ["", "| probability of improvement (mean over envs) | value | 95% CI |", "|---|---:|---|"]
    lines += [f"| {r['configuration']} | {_fmt(r['value'])} | [{_fmt(r['low'])}, {_fmt(r['high'])}] |"
              for r in rows if r["kind"] != "iqm"]
    atomic_write_text(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def _error_bar(value: float, low: float, high: float) -> list[list[float]]:
    """Matplotlib's ``xerr`` for a point estimate and its interval; no bar where the interval is NaN
    (a bootstrap over a single run has none)."""
    return [[0.0 if np.isnan(low) else value - low], [0.0 if np.isnan(high) else high - value]]


def plot_aggregates(agg: dict[str, Any], out_dir: Path, stem: str = "aggregate",
                    caption: str = "") -> tuple[Path, Path]:
    """Three panels: normalized IQM with CIs per configuration, performance profiles, probability of
    improvement of SUPER over each baseline (rliable's figures), titled with the envs and the normalization;
    ``caption`` (the runs' protocol and budgets, ``plotting.caption``) below them. Returns (png, svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2), dpi=120)
    cfgs = agg["configurations"]
    name, color = plotting.method_name, plotting.method_color
    for i, c in enumerate(cfgs):
        v, lo, hi = agg["iqm"][c]
        axes[0].errorbar([v], [i], xerr=_error_bar(v, lo, hi), fmt="o", color=color(c), capsize=4)
        frac, plo, phi = agg["profiles"][c]
        axes[1].plot(agg["taus"], frac, color=color(c), label=name(c))
        if not np.isnan(plo).all():
            axes[1].fill_between(agg["taus"], plo, phi, color=color(c), alpha=0.15, linewidth=0)
    axes[0].set_yticks(range(len(cfgs)), [name(c) for c in cfgs], fontsize=7)
    axes[0].set_xlabel("normalized IQM (95% stratified bootstrap CI)")
    axes[1].set_xlabel(r"normalized score $\tau$")
    axes[1].set_ylabel(r"fraction of runs with score > $\tau$")
    axes[1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2, frameon=False)
    for j, p in enumerate(agg["poi"]):
        v, lo, hi = p["value"], p["low"], p["high"]
        axes[2].errorbar([v], [j], xerr=_error_bar(v, lo, hi), fmt="s", color="C0", capsize=4)
    axes[2].set_yticks(range(len(agg["poi"])),
                       [f"P({name(p['super'])} > {name(p['baseline'])})" for p in agg["poi"]], fontsize=7)
    axes[2].axvline(0.5, color="grey", ls="--", lw=0.8)
    axes[2].set_xlabel("probability of improvement (mean over envs)")
    for ax in axes:
        ax.grid(alpha=0.3)
    envs = sorted(agg["envs"], key=plotting.env_order)
    fig.suptitle(f"Aggregate over {', '.join(e.replace('_', ' ') for e in envs)}: final scores normalized per env "
                 "(random policy 0, best configuration's mean 1)")
    if caption:
        fig.text(0.5, 0.0, caption, ha="center", va="bottom", fontsize=7.5, color="0.3")
    fig.tight_layout(rect=(0, 0.05 if caption else 0, 1, 1))
    return plotting.save_figure(fig, out_dir, stem)


def protocol_margins(scores: dict[str, dict[str, np.ndarray]], random: dict[str, float]) -> dict[tuple[str, str], float]:
    """(env, protocol) -> TOST margin: ``EQUIVALENCE_MARGIN x (best - random)``, ``best`` the best configuration of
    that protocol in that env (``normalize`` of the protocol's scores), for each pair that could be normalized. Per
    protocol, as the Holm family: one protocol's runs never move the other's equivalence verdicts."""
    out: dict[tuple[str, str], float] = {}
    for protocol in ("paper", "ours"):
        mine = {env: {lab: s for lab, s in by_cfg.items() if plotting.is_paper(lab) == (protocol == "paper")}
                for env, by_cfg in scores.items()}
        _, info = normalize({env: by_cfg for env, by_cfg in mine.items() if by_cfg}, random)
        out.update({(env, protocol): EQUIVALENCE_MARGIN * (r["best"] - r["random"]) for env, r in info.items()
                    if r["used"]})
    return out


def window_scores(curves: Sequence[RunCurve], but: float = MAIN_WINDOW) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Window name -> the final scores under that definition (``WINDOWS``), for the robustness of each verdict; the
    verdict's own window (``but``) is left out, its verdict is the table's."""
    return {name: scores_by_configuration(curves, fraction) for name, fraction in WINDOWS if fraction != but}


def report(curves: Sequence[RunCurve], out_dir: Path, last_fraction: float = MAIN_WINDOW, n_resamples: int = 2000,
           random: dict[str, float] | None = None, name: str | None = None, log: Any = None) -> dict[str, Path]:
    """Claim table and aggregate tables / figure for a set of runs, next to ``plotting.report``'s outputs.

    Args:
        random: random-policy return per env; None reads or measures them (``random_returns``; measurements are
            cached in ``out_dir/random_returns.json``).
        name: file stem prefix (``<name>_claims.md``, ``<name>_aggregate.png``, ...).
        log: called with one line per phase (the CLI prints them), so a long analysis says what it does.

    Returns:
        Paths by kind: claims_csv, claims_md, protocols_csv, protocols_md, aggregate_csv, aggregate_md, notes_csv,
        notes_md; games_claims_csv and games_claims_md (when runs have final games: ``final_game_scores``, no TOST
        margin and no other windows); and (when an env could be normalized) aggregate_png, aggregate_svg.
    """
    say = log or (lambda line: None)
    out_dir = Path(out_dir)
    prefix = f"{name}_" if name else ""
    finished = [c for c in curves if c.finished]
    say(f"analysis: final scores of {len(finished)} finished run(s) (of {len(curves)})")
    scores = scores_by_configuration(curves, last_fraction)
    paths: dict[str, Path] = {}
    if random is None:
        random = random_returns(curves, out_dir / "random_returns.json", log=say)
    norm, info = normalize(scores, random)
    say(f"analysis: claim table (Holm per env and protocol, TOST, {len(WINDOWS)} final-score windows, {n_resamples} bootstrap "
        f"resamples)")
    rows = claim_table(scores, n_resamples, protocol_margins(scores, random), window_scores(curves, last_fraction))
    paths["claims_csv"], paths["claims_md"] = write_claims(rows, out_dir, f"{prefix}claims")
    paths["protocols_csv"], paths["protocols_md"] = write_protocol_comparison(rows, out_dir, f"{prefix}protocols")
    games = final_game_scores(curves)
    if games:  # battle's runs: the same claims judged on their final policies' 100 varied games
        say("analysis: the same claims on the final policies' varied games")
        paths["games_claims_csv"], paths["games_claims_md"] = write_claims(
            claim_table(games, n_resamples), out_dir, f"{prefix}claims_final_games", FINAL_GAMES_SCORE)
    say("analysis: aggregates across envs")
    agg = aggregate_metrics(norm, n_resamples=n_resamples)
    paths["aggregate_csv"], paths["aggregate_md"] = write_aggregates(agg, info, out_dir, f"{prefix}aggregate")
    paths["notes_csv"], paths["notes_md"] = write_notes(campaign_notes(curves, info, last_fraction), out_dir,
                                                        f"{prefix}notes", last_fraction)
    if agg["configurations"]:  # else the markdown says why no env could be normalized
        paths["aggregate_png"], paths["aggregate_svg"] = plot_aggregates(agg, out_dir, f"{prefix}aggregate",
                                                                         plotting.caption(finished))
    return paths
