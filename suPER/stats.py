"""Confidence intervals by the bootstrap: one implementation for the figures, the analysis and match results.

A pure leaf (numpy, scipy): ``suPER.plotting`` and ``suPER.analysis`` use it for curves over seeds and the
rliable-style aggregates, ``suPER.opponents`` for the return CIs of ``opponents eval``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bootstrap_ci"]


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
