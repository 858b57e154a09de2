"""SUPER's selection rules: one registered record per rule (``SELECTION_RULES``).

A rule decides which of one sender's fresh rows to relay, given their |TD| and (for windowed rules)
the sender's sliding |TD| window. Every other table derives from this registry: the mode names of
``RelayConfig.mode`` and its validation (``check_mode``), the CLI's ``--super-mode`` help, ``suPERDQNConfig``'s
``suPER_mode`` check, the grid checks, and the rule's own parameters, which a run holds under ``relay.params``
(``--set relay.params.k=3``; only the active rule's) and the rule's record checks and completes with its
defaults (``SelectionRule.check_params``, called when a run's config is resolved: ``suPER.resolve``). Adding a
rule = one ``register(SelectionRule(...))`` call here plus its test (docs/extending.md has the checklist).

``Relay`` (suPER.core.relay) handles what every rule shares before dispatching here: the bandwidth
edges (``b = 0`` relays nothing, ``b = 1`` everything, whatever the rule), the window push (only for
rules with ``uses_window``), and routing.

Each rule is one function over the last axis: one sender's fresh rows ``[T]`` or G senders' ``[G, T]``, numpy
arrays or torch tensors (``suPER.arrays``: torch is imported only when a tensor comes in, scipy lazily by the
gaussian rules), so a packed run selects all its senders at once, on its device, with the formula a single run
uses. Shapes: ``T`` fresh rows per sender, ``W`` window length, ``G`` senders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from suPER.arrays import argsort_last, namespace, nan_rows, put_last, quantile_last, take_last
from suPER.config import ConfigError, RelayConfig, coerce, in_range


@dataclass(frozen=True)
class RuleParam:
    """A parameter of one selection rule: a key of ``relay.params`` in the runs of that rule."""

    name: str
    """key in ``relay.params`` (``--set relay.params.<name>=...``); not the name of a ``RelayConfig`` field, so the
    spelling ``--set relay.<name>=...`` stays unambiguous"""
    type: type
    """int | float | str | bool (``check_params`` coerces ``--set`` values to it)"""
    default: Any
    """value when not set"""
    range: str
    """allowed range of an int or float in ``suPER.config.RANGES`` vocabulary (``"int >= 1"``, ``"[0, 1]"``,
    ``"> 0"``, ...)"""
    help: str
    """one line for the config docs and ``--help``"""


SelectFn = Callable[[Any, Any, float, Any, Mapping[str, Any]], tuple[Any, Any]]
"""(td_abs [..., T] float64, window [..., W] float64, bandwidth in (0, 1), uniforms [..., T] float64 or None,
params) -> (chosen bool [..., T], threshold [...]).

One sender's fresh rows are ``[T]``; G senders' rows at once (a pack's runs, ``suPER.core.relay.select_many``) are
``[G, T]`` with windows ``[G, W]`` equally full: every reduction runs along the last axis, so each row's result is
the one sender's, to the bit. ``td_abs``, ``window`` and ``uniforms`` are all numpy arrays or all torch tensors (one
device); the results are of the same kind. ``window`` is the sender's |TD| window with the current fragment pushed
(rules without ``uses_window``: the fragment itself). ``uniforms`` are ``Uniform[0, 1)`` draws, one per fresh row,
from the relay's generator (``draws_per_row`` rules; else None). ``threshold`` is the |TD| cut used per sender
(NaN when the rule has none); it is logged, not used for selection."""


@dataclass(frozen=True)
class SelectionRule:
    """One SUPER selection rule: its name, selector, window use and parameters."""

    name: str
    """registry key = ``--super-mode`` / ``relay.mode`` / ``suPER_mode`` value"""
    select: SelectFn
    """the selector, one function for one sender or G senders, numpy or torch (see ``SelectFn``)"""
    summary: str
    """one line for ``--help`` and the docs"""
    uses_window: bool = True
    """push each fragment's |TD| into the sender's sliding window (checkpointed) before selecting"""
    params: tuple[RuleParam, ...] = field(default_factory=tuple)
    """the rule's own parameters (``relay.params.<name>``)"""
    draws_per_row: bool = False
    """the rule takes one ``Uniform[0, 1)`` per fresh row, drawn by the relay from its generator (sender by sender
    in each run's order) and passed as ``uniforms``"""

    def check_params(self, params: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """This rule's parameters from ``params`` (a run's ``relay.params``), checked against their declarations.

        Args:
            params: parameter name -> value; names this rule does not declare are refused.
            labels: dotted key (``relay.params.<name>``) -> the flag as the user typed it (``--set relay.k``);
                default the dotted key.

        Returns:
            Every declared parameter in declaration order: the value given (coerced to its type) or its default.

        Raises:
            ConfigError: an undeclared name, or a value of the wrong type or outside its range.
        """
        labels = labels or {}
        declared = {p.name: p for p in self.params}
        for name in params:
            if name not in declared:
                key = f"relay.params.{name}"
                has = f"its parameters: {', '.join(declared)}" if declared else "it has none"
                raise ConfigError(f"{labels.get(key, key)}: not a parameter of selection rule {self.name!r} ({has})")
        out: dict[str, Any] = {}
        for p in self.params:
            key = f"relay.params.{p.name}"
            where = labels.get(key, key)
            value = coerce(p.type, params.get(p.name, p.default), where)
            if p.type in (int, float):
                expected, ok = in_range(p.range, value)
                if not ok:
                    raise ConfigError(f"{where}: expected {expected}, got {value!r}")
            out[p.name] = value
        return out


SELECTION_RULES: dict[str, SelectionRule] = {}
"""name -> rule, in registration order (the order of ``--help`` and error messages)."""


def register(rule: SelectionRule) -> SelectionRule:
    """Add ``rule`` to ``SELECTION_RULES``: a new name, parameters named apart from each other and from the relay
    config's fields (``relay.<name>`` is also read as ``relay.params.<name>``), defaults inside their ranges.

    Raises:
        ValueError: a duplicate rule name, a parameter name taken, or a default its own declaration refuses.
    """
    if rule.name in SELECTION_RULES:
        raise ValueError(f"selection rule {rule.name!r} is already registered")
    taken = set(RELAY_FIELDS)
    for p in rule.params:
        if p.name in taken:
            raise ValueError(f"selection rule {rule.name!r}: parameter name {p.name!r} is already a relay config field "
                             f"or another of its parameters")
        taken.add(p.name)
    try:
        rule.check_params({})
    except ConfigError as exc:
        raise ValueError(f"selection rule {rule.name!r}: a default outside its range ({exc})") from None
    SELECTION_RULES[rule.name] = rule
    return rule


RELAY_FIELDS = tuple(f.name for f in fields(RelayConfig))
"""The relay config's own fields (``enabled``, ``mode``, ``bandwidth``, ..., ``params``): no parameter is named so."""


def check_mode(mode: Any, label: str | None = None) -> SelectionRule:
    """The record of the rule named ``mode``.

    Raises:
        ConfigError: ``"<label>: expected one of quantile, gaussian, ..., got <mode>"`` (label default ``relay.mode``).
    """
    if not isinstance(mode, str) or mode not in SELECTION_RULES:
        raise ConfigError(f"{label or 'relay.mode'}: expected one of {', '.join(SELECTION_RULES)}, got {mode!r}")
    return SELECTION_RULES[mode]


def mode_names() -> tuple[str, ...]:
    """Registered rule names, in registration order."""
    return tuple(SELECTION_RULES)


def rule_params() -> tuple[RuleParam, ...]:
    """Every registered rule's parameters, rule by rule (names may repeat across rules)."""
    return tuple(p for r in SELECTION_RULES.values() for p in r.params)


def modes_help() -> str:
    """``quantile | gaussian | ...`` for CLI help."""
    return " | ".join(SELECTION_RULES)


# ---- the rules: one definition each, over the last axis: one sender's fresh rows [T] (its window [W]) or G senders'
# rows [G, T] (windows [G, W], equally full), numpy arrays (host) or torch tensors (a packed run's device).
# Reductions run along the last axis, which numpy and torch compute row by row exactly as on one row, so a pack
# selecting G senders at once gets each sender's own result to the bit (suPER.arrays picks the module; a tensor's
# threshold stays a tensor, so no device sync).


def _quantile(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = quantile_last(hist, 1.0 - b)  # linear interpolation in both
    return td > c[..., None], c


def _gaussian_threshold(hist: Any, b: float, variance_as_scale: bool) -> Any:
    """``mu + scale * z_{1-b}`` of each window [..., W] -> [...]; NaN where the spread is 0 (scipy's convention;
    nothing is relayed then).

    ``z_{1-b} = Phi^{-1}(1 - b)`` is scipy's ``norm.isf(b)`` (a host float of the config); ``z * scale + mu`` is
    how ``norm.isf(b, loc=mu, scale=scale)`` evaluates it, so the numpy threshold is scipy's to the bit.
    """
    from scipy.stats import norm  # lazy: keeps this module's import light

    xp = namespace(hist)
    mu = hist.mean(-1)
    var = ((hist - mu[..., None]) ** 2).mean(-1)  # np.var's formula (ddof 0), also for tensors
    scale = var if variance_as_scale else xp.sqrt(var)
    return xp.where(scale > 0, float(norm.isf(b)) * scale + mu, float("nan"))


def _gaussian(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold(hist, b, variance_as_scale=False)
    return td > c[..., None], c  # NaN threshold (zero spread) -> nothing, as the original


def _gaussian_variance(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    c = _gaussian_threshold(hist, b, variance_as_scale=True)
    return td > c[..., None], c


def stochastic_probabilities(td_abs: Any, bandwidth: float) -> Any:
    """p_i = min(1, b * n * |td_i| / sum_j |td_j|) along the last axis (n = its length); NaN (all-zero TD) or
    negative -> 0 (numpy or torch, [..., n] -> [..., n])."""
    xp = namespace(td_abs)
    total = td_abs.sum(-1)
    ok = (total > 0) & xp.isfinite(total)
    p = bandwidth * td_abs.shape[-1] * td_abs / xp.where(ok, total, 1.0)[..., None]
    return xp.where(ok[..., None], xp.clip(xp.nan_to_num(p, nan=0.0), 0.0, 1.0), 0.0)


def _stochastic(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    return u < stochastic_probabilities(td, b), nan_rows(td)


def _topk(td: Any, hist: Any, b: float, u: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    k = min(int(params["k"]), td.shape[-1])
    chosen = td < td  # all False, of td's kind
    if k == 0:
        return chosen, nan_rows(td)
    order = argsort_last(-td)  # stable: ties go to the earlier row
    return put_last(chosen, order[..., :k], True), take_last(td, order[..., k - 1:k])[..., 0]


register(SelectionRule("quantile", _quantile, "relay |td| above the (1-b) quantile of the sender's |TD| window"))
register(SelectionRule("gaussian", _gaussian, "relay |td| above mu + sigma * z_{1-b} of the window"))
register(SelectionRule("gaussian_variance", _gaussian_variance,
                       "as gaussian with the variance as scale (the original's threshold, REFERENCE 14.2)"))
register(SelectionRule("stochastic", _stochastic, "relay row i with probability min(1, b n |td_i| / sum |td|)",
                       uses_window=False, draws_per_row=True))
register(SelectionRule("topk", _topk, "relay the k highest-|td| rows of each sender's fragment (b only at 0 / 1)",
                       uses_window=False,
                       params=(RuleParam("k", int, 1, "int >= 1", "topk: rows relayed per sender per fragment"),)))
