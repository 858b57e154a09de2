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

Each rule is written once for numpy arrays and torch tensors (``suPER.arrays``: torch is imported only when
a tensor comes in, scipy lazily by the gaussian rules) so ``suPER.config`` can import this module and a packed
run on a GPU selects on the device with the same formula. Shapes: ``n`` fresh rows of one sender.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suPER.arrays import is_tensor, namespace, uniform


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


SelectFn = Callable[[Any, Any, float, Any, Mapping[str, Any]], tuple[Any, Any]]
"""(td_abs [n] float64, window_values [w] float64, bandwidth in (0, 1), rng, params) -> (chosen bool [n], threshold).

``td_abs`` and ``window_values`` are both numpy arrays or both torch tensors (one device); ``chosen`` is of
the same kind. ``window_values`` is the sender's |TD| window with the current fragment pushed (rules without
``uses_window``: the fragment itself). ``threshold`` is the |TD| cut used, a scalar or 0-d array/tensor
(NaN when the rule has none); it is logged, not used for selection. ``rng`` is a ``numpy.random.Generator``
or a ``torch.Generator`` (``suPER.arrays.uniform``)."""


RowsSelectFn = Callable[[Any, Any, float, Any, Mapping[str, Any]], tuple[Any, Any]]
"""(td_abs [G, n] float64, window_values [G, w] float64 (the fresh rows for rules without a window), bandwidth in
(0, 1), uniforms [G, n] float64 (``draws_per_row`` rules; else None), params) -> (chosen bool [G, n], threshold [G]):
``SelectFn`` for ``G`` senders whose windows are equally full, numpy or torch."""


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
    select_rows: RowsSelectFn | None = None
    """the same rule for ``G`` senders at once (``suPER.core.relay.select_many``: a pack's runs); None: senders one
    at a time. Must equal ``select`` row by row, to the bit (``tests/core/test_relay.py``)."""
    draws_per_row: bool = False
    """the rule draws one ``Uniform[0, 1)`` per fresh row from the relay's generator (``select_rows`` then gets
    them drawn, sender by sender in each run's order)"""


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


# ---- the rules: one definition each, for numpy arrays (host) and torch tensors (a packed run's device)
# (suPER.arrays.namespace picks the module; a tensor's threshold stays a 0-d tensor, so no device sync)


def _quantile(td: Any, hist: Any, b: float, rng: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = namespace(hist).quantile(hist, 1.0 - b)  # linear interpolation in both
    return td > c, c


def _gaussian_threshold(hist: Any, b: float, variance_as_scale: bool) -> Any:
    """``mu + scale * z_{1-b}``; NaN when the spread is 0 (scipy's convention; nothing is relayed then).

    ``z_{1-b} = Phi^{-1}(1 - b)`` is scipy's ``norm.isf(b)`` (a host float of the config); ``z * scale + mu`` is
    how ``norm.isf(b, loc=mu, scale=scale)`` evaluates it, so the numpy threshold is scipy's to the bit.
    """
    from scipy.stats import norm  # lazy: keeps suPER.config's import light

    xp = namespace(hist)
    mu = hist.mean()
    var = ((hist - mu) ** 2).mean()  # np.var's formula (ddof 0), also for tensors
    scale = var if variance_as_scale else xp.sqrt(var)
    return xp.where(scale > 0, float(norm.isf(b)) * scale + mu, float("nan"))


def _gaussian(td: Any, hist: Any, b: float, rng: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold(hist, b, variance_as_scale=False)
    return td > c, c  # NaN threshold (zero spread) -> nothing, as the original


def _gaussian_variance(td: Any, hist: Any, b: float, rng: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold(hist, b, variance_as_scale=True)
    return td > c, c


def stochastic_probabilities(td_abs: Any, bandwidth: float) -> Any:
    """p_i = min(1, b * n * |td_i| / sum_j |td_j|); NaN (all-zero TD) or negative -> 0 (numpy or torch)."""
    xp = namespace(td_abs)
    total = td_abs.sum()
    ok = (total > 0) & xp.isfinite(total)
    p = bandwidth * td_abs.shape[0] * td_abs / xp.where(ok, total, 1.0)
    return xp.where(ok, xp.clip(xp.nan_to_num(p, nan=0.0), 0.0, 1.0), 0.0)


def _stochastic(td: Any, hist: Any, b: float, rng: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    return uniform(rng, (td.shape[0],), td) < stochastic_probabilities(td, b), float("nan")


def _topk(td: Any, hist: Any, b: float, rng: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    n = td.shape[0]
    k = min(int(params["k"]), n)
    chosen = td < td  # all False, of td's kind
    if k == 0:
        return chosen, float("nan")
    order = _argsort_stable(-td)  # ties: the earlier row wins
    chosen[order[:k]] = True
    return chosen, td[order[k - 1]]


def _argsort_stable(x: Any) -> Any:
    return x.argsort(stable=True) if is_tensor(x) else np.argsort(x, kind="stable")


# ---- the same rules on G senders' rows at once ([G, n] fresh rows, [G, w] windows; reductions along the last
# axis, which numpy and torch compute row by row exactly as on one row)


def _last_axis_quantile(x: Any, q: float) -> Any:
    return x.quantile(q, dim=-1) if is_tensor(x) else np.quantile(x, q, axis=-1)


def _quantile_rows(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _last_axis_quantile(hist, 1.0 - b)
    return td > c[..., None], c


def _gaussian_threshold_rows(hist: Any, b: float, variance_as_scale: bool) -> Any:
    """``_gaussian_threshold`` of each row of ``hist`` [G, w] -> [G]."""
    from scipy.stats import norm

    xp = namespace(hist)
    mu = hist.mean(-1)
    var = ((hist - mu[..., None]) ** 2).mean(-1)
    scale = var if variance_as_scale else xp.sqrt(var)
    return xp.where(scale > 0, float(norm.isf(b)) * scale + mu, float("nan"))


def _gaussian_rows(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold_rows(hist, b, variance_as_scale=False)
    return td > c[..., None], c


def _gaussian_variance_rows(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold_rows(hist, b, variance_as_scale=True)
    return td > c[..., None], c


def _stochastic_rows(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    xp = namespace(td)
    total = td.sum(-1)
    ok = (total > 0) & xp.isfinite(total)
    p = b * td.shape[-1] * td / xp.where(ok, total, 1.0)[..., None]
    p = xp.where(ok[..., None], xp.clip(xp.nan_to_num(p, nan=0.0), 0.0, 1.0), 0.0)
    return u < p, xp.full_like(total, float("nan"))


register(SelectionRule("quantile", _quantile, "relay |td| above the (1-b) quantile of the sender's |TD| window",
                       select_rows=_quantile_rows))
register(SelectionRule("gaussian", _gaussian, "relay |td| above mu + sigma * z_{1-b} of the window",
                       select_rows=_gaussian_rows))
register(SelectionRule("gaussian_variance", _gaussian_variance,
                       "as gaussian with the variance as scale (the original's threshold, REFERENCE 14.2)",
                       select_rows=_gaussian_variance_rows))
register(SelectionRule("stochastic", _stochastic, "relay row i with probability min(1, b n |td_i| / sum |td|)",
                       uses_window=False, select_rows=_stochastic_rows, draws_per_row=True))
register(SelectionRule("topk", _topk, "relay the k highest-|td| rows of each sender's fragment (b only at 0 / 1)",
                       uses_window=False,
                       params=(RuleParam("k", int, 1, "int >= 1", "topk: rows relayed per sender per fragment"),)))
