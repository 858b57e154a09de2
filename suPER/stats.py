"""Confidence intervals by the bootstrap: one implementation for the figures, the analysis and match results.

A pure leaf (numpy, scipy): ``suPER.plotting`` and ``suPER.analysis`` use it for curves over seeds and the
rliable-style aggregates, ``suPER.opponents`` for the return CIs of ``opponents eval``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bootstrap_ci", "holm", "seeds_for_power", "welch_tost_p"]


def bootstrap_ci(samples: np.ndarray | tuple[np.ndarray, ...], statistic: Any, n_resamples: int = 2000,
                 seed: int = 0, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of ``statistic`` over axis 0 (runs) with ``scipy.stats.bootstrap``.

    A tuple of samples is a stratified bootstrap: each stratum (a configuration, an env) is resampled
    on its own, with its own size, and ``statistic(*strata, axis)`` sees one resample of each, as
    rliable resamples runs within each task.

    Args:
        samples: [R, ...] one row per run, or a tuple of such arrays (strata).
        statistic: ``f(x, axis)`` (e.g. ``np.mean`` or the IQM), or ``f(*strata, axis)``.
        n_resamples: bootstrap resamples.
        seed: generator seed (figures are reproducible).
        confidence: confidence level.

    Returns:
        (low, high), NaN where a stratum has fewer than two runs.
    """
    from scipy.stats import bootstrap

    strata = samples if isinstance(samples, tuple) else (samples,)
    if min(s.shape[0] for s in strata) < 2:
        shape = np.shape(statistic(*strata, axis=0))
        nan = np.full(shape, np.nan)
        return nan, nan.copy()
    res = bootstrap(strata, statistic, axis=0, vectorized=True, n_resamples=n_resamples,
                    confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)


def holm(p_values: Any) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values of one family of tests (Holm 1979), in the input order.

    With the m finite p-values sorted ascending, ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` (1-based i, j);
    rejecting ``adj < alpha`` controls the family-wise error rate at alpha. NaN entries (tests that could not run)
    stay NaN and do not count in m.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def _welch_df(se2_x: float, n_x: int, se2_y: float, n_y: int) -> float:
    """Welch-Satterthwaite degrees of freedom from each side's squared standard error ``var / n`` and run count:
    ``(se2_x + se2_y)^2 / (se2_x^2 / (n_x - 1) + se2_y^2 / (n_y - 1))``; a side without spread adds nothing below."""
    return (se2_x + se2_y) ** 2 / ((se2_x**2 / (n_x - 1) if se2_x else 0.0) + (se2_y**2 / (n_y - 1) if se2_y else 0.0))


def welch_tost_p(x: Any, y: Any, margin: float) -> float:
    """p-value of Welch's two one-sided tests (TOST; Schuirmann 1987) that ``|mean(x) - mean(y)| < margin``.

    ``d = mean(x) - mean(y)``, ``se = sqrt(var(x)/n_x + var(y)/n_y)`` (sample variances), Welch-Satterthwaite df;
    ``p = max(P(T > (d + margin) / se), P(T < (d - margin) / se))``. Equivalence within the margin is shown at level
    alpha when ``p < alpha``. NaN with fewer than 2 runs a side or a margin <= 0; both sides without spread give 0
    when ``|d| < margin`` (a sure equivalence), else 1.
    """
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or len(y) < 2 or not margin > 0:
        return float("nan")
    d = x.mean() - y.mean()
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = np.sqrt(vx + vy)
    if se == 0:
        return 0.0 if abs(d) < margin else 1.0
    df = _welch_df(vx, len(x), vy, len(y))
    lower = stats.t.sf((d + margin) / se, df)  # H0: d <= -margin
    upper = stats.t.cdf((d - margin) / se, df)  # H0: d >= +margin
    return float(max(lower, upper))


def seeds_for_power(x: Any, y: Any, alpha: float = 0.05, power: float = 0.8, limit: int = 10_000) -> float:
    """Runs per side Welch's two-sided test needs for ``power`` at the observed effect: the test the verdicts use.

    With n runs a side and the runs' sample variances ``vx``, ``vy`` taken as the true ones, the statistic is
    noncentral t with noncentrality ``|mean(x) - mean(y)| / sqrt((vx + vy) / n)`` and Welch-Satterthwaite
    ``df = (n - 1) (vx + vy)^2 / (vx^2 + vy^2)``; power is ``P(|T| > t_{1 - alpha/2, df})``. At equal variances this
    is Cohen's (1988) pooled two-sample t (``df = 2n - 2``); unequal ones lower the df and ask for more runs. Returns
    the smallest n >= 2 reaching ``power``, inf when none up to ``limit`` does (no observed effect), NaN with fewer
    than 2 runs a side. An estimate: the observed effect of a few runs is itself uncertain.
    """
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or len(y) < 2:
        return float("nan")
    vx, vy = x.var(ddof=1), y.var(ddof=1)
    diff = abs(x.mean() - y.mean())
    if diff == 0:
        return float("inf")
    if vx + vy == 0:
        return 2.0

    def reaches(n: int) -> bool:
        df = _welch_df(vx / n, n, vy / n, n)  # (n - 1)(vx + vy)^2 / (vx^2 + vy^2): between n - 1 and 2n - 2
        crit = stats.t.ppf(1 - alpha / 2, df)
        nc = diff / np.sqrt((vx + vy) / n)
        # P(T > crit) + P(T < -crit); the second as P(T' > crit) at -nc, which is the same number: scipy 1.17's
        # nct.cdf returns NaN there once nc passes ~5, its sf does not
        return bool(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc) >= power)

    # power grows with n (the noncentrality grows, the critical value falls): bisect for the first n that reaches it
    if not reaches(limit):
        return float("inf")
    lo, hi = 1, limit  # reaches(hi); lo below the smallest n (2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return float(hi)
