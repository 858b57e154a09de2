"""SUPER's selection rules: one registered record per rule (``SELECTION_RULES``).

A rule decides which of one sender's fresh rows to relay, given their |TD| and (for windowed rules)
the sender's sliding |TD| window. Every other table derives from this registry: the mode names of
``RelayConfig.mode`` and its validation, the CLI's ``--super-mode`` help, ``suPERDQNConfig``'s
``suPER_mode`` check, the grid checks, and the rule parameters that surface as ``relay.<param>``
fields (``--set relay.k=3``). Adding a rule = one ``register(SelectionRule(...))`` call here plus
its test (docs/extending.md has the checklist).

``Relay`` (suPER.core.relay) handles what every rule shares before dispatching here: the bandwidth
edges (``b = 0`` relays nothing, ``b = 1`` everything, whatever the rule), the window push (only for
rules with ``uses_window``), and routing.

Pure numpy (scipy is imported lazily by the gaussian rules) so ``suPER.config`` can import it.
Shapes: ``n`` fresh rows of one sender.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RuleParam:
    """A parameter of one selection rule; becomes the field ``relay.<name>`` of the relay config."""

    name: str
    """field name in the relay config (``--set relay.<name>=...``); unique across rules"""
    type: type
    """int | float | str | bool (the config coerces ``--set`` values to it)"""
    default: Any
    """value when not set"""
    range: str
    """allowed range in ``suPER.config.RANGES`` vocabulary (``"int >= 1"``, ``"[0, 1]"``, ``"> 0"``, ...)"""
    help: str
    """one line for the config docs and ``--help``"""


SelectFn = Callable[[np.ndarray, np.ndarray, float, np.random.Generator, Mapping[str, Any]], tuple[np.ndarray, float]]
"""(td_abs [n] float64, window_values [w] float64, bandwidth in (0, 1), rng, params) -> (chosen bool [n], threshold).

``window_values`` is the sender's |TD| window with the current fragment pushed (rules without
``uses_window``: the fragment itself). ``threshold`` is the |TD| cut used (NaN when the rule has none);
it is logged, not used for selection."""


@dataclass(frozen=True)
class SelectionRule:
    """One SUPER selection rule: its name, selector, window use and parameters."""

    name: str
    """registry key = ``--super-mode`` / ``relay.mode`` / ``suPER_mode`` value"""
    select: SelectFn
    """the selector (see ``SelectFn``)"""
    summary: str
    """one line for ``--help`` and the docs"""
    uses_window: bool = True
    """push each fragment's |TD| into the sender's sliding window (checkpointed) before selecting"""
    params: tuple[RuleParam, ...] = field(default_factory=tuple)
    """the rule's own parameters (fields ``relay.<name>``)"""


SELECTION_RULES: dict[str, SelectionRule] = {}
"""name -> rule, in registration order (the order of ``--help`` and error messages)."""


def register(rule: SelectionRule) -> SelectionRule:
    """Add ``rule`` to ``SELECTION_RULES``; names and parameter names must be new.

    Raises:
        ValueError: a duplicate rule name or parameter name (parameters share the relay config's namespace).
    """
    if rule.name in SELECTION_RULES:
        raise ValueError(f"selection rule {rule.name!r} is already registered")
    taken = {p.name for r in SELECTION_RULES.values() for p in r.params} | set(RELAY_CORE_FIELDS)
    for p in rule.params:
        if p.name in taken:
            raise ValueError(f"selection rule {rule.name!r}: parameter name {p.name!r} is already a relay config field")
    SELECTION_RULES[rule.name] = rule
    return rule


RELAY_CORE_FIELDS = ("enabled", "mode", "bandwidth", "window", "team", "insertion_priority")
"""Relay config fields shared by every rule (rule parameters may not reuse these names)."""


def mode_names() -> tuple[str, ...]:
    """Registered rule names, in registration order."""
    return tuple(SELECTION_RULES)


def rule_params() -> tuple[RuleParam, ...]:
    """Every registered rule's parameters (the extra relay config fields)."""
    return tuple(p for r in SELECTION_RULES.values() for p in r.params)


def modes_help() -> str:
    """``quantile | gaussian | ...`` for CLI help."""
    return " | ".join(SELECTION_RULES)


# ---- the rules


def _quantile(td: np.ndarray, hist: np.ndarray, b: float, rng: np.random.Generator,
              params: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    c = float(np.quantile(hist, 1.0 - b))
    return td > c, c


def _gaussian_threshold(hist: np.ndarray, b: float, variance_as_scale: bool) -> float:
    """``mu + scale * z_{1-b}``; NaN when the spread is 0 (scipy's convention; nothing is relayed then)."""
    from scipy.stats import norm  # lazy: keeps suPER.config's import light

    mu = float(np.mean(hist))
    var = float(np.var(hist))
    scale = var if variance_as_scale else np.sqrt(var)
    if scale <= 0:
        return float("nan")
    return float(norm.isf(b, loc=mu, scale=scale))


def _gaussian(td: np.ndarray, hist: np.ndarray, b: float, rng: np.random.Generator,
              params: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    c = _gaussian_threshold(hist, b, variance_as_scale=False)
    return td > c, c  # NaN threshold (zero spread) -> nothing, as the original


def _gaussian_variance(td: np.ndarray, hist: np.ndarray, b: float, rng: np.random.Generator,
                       params: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    c = _gaussian_threshold(hist, b, variance_as_scale=True)
    return td > c, c


def stochastic_probabilities(td_abs: np.ndarray, bandwidth: float) -> np.ndarray:
    """p_i = min(1, b * n * |td_i| / sum_j |td_j|); NaN (all-zero TD) or negative -> 0."""
    total = td_abs.sum()
    if total <= 0 or not np.isfinite(total):
        return np.zeros(td_abs.size)
    p = bandwidth * td_abs.size * td_abs / total
    return np.clip(np.nan_to_num(p, nan=0.0), 0.0, 1.0)


def _stochastic(td: np.ndarray, hist: np.ndarray, b: float, rng: np.random.Generator,
                params: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    return rng.random(td.size) < stochastic_probabilities(td, b), float("nan")


def _topk(td: np.ndarray, hist: np.ndarray, b: float, rng: np.random.Generator,
          params: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    k = min(int(params["k"]), td.size)
    chosen = np.zeros(td.size, dtype=bool)
    if k == 0:
        return chosen, float("nan")
    order = np.argsort(-td, kind="stable")  # ties: the earlier row wins
    chosen[order[:k]] = True
    return chosen, float(td[order[k - 1]])


register(SelectionRule("quantile", _quantile, "relay |td| above the (1-b) quantile of the sender's |TD| window"))
register(SelectionRule("gaussian", _gaussian, "relay |td| above mu + sigma * z_{1-b} of the window"))
register(SelectionRule("gaussian_variance", _gaussian_variance,
                       "as gaussian with the variance as scale (the original's threshold, REFERENCE 14.2)"))
register(SelectionRule("stochastic", _stochastic, "relay row i with probability min(1, b n |td_i| / sum |td|)",
                       uses_window=False))
register(SelectionRule("topk", _topk, "relay the k highest-|td| rows of each sender's fragment (b only at 0 / 1)",
                       uses_window=False,
                       params=(RuleParam("k", int, 1, "int >= 1", "topk: rows relayed per sender per fragment"),)))
