"""A run's configuration, resolved and checked: the config sections together with the selection rule's own
parameters.

``suPER.config`` types and validates the sections without importing any selection rule; a rule's parameters
(``relay.params``) are declared by its record (``suPER.core.selection``). This module is where the two meet,
one layer above both, and every run's config passes through it::

    ExperimentConfig defaults  <-  experiments/envs/<env>.yaml  <-  algo preset  <-  named flags  <-  --set a.b=value

then ``ExperimentConfig.validate`` (every section) and ``check_rule``: ``relay.mode`` must be a registered rule,
and ``relay.params`` holds exactly that rule's parameters, each checked against its declaration and, when not
set, at its default, so ``config.json`` records the values the run used (``{}`` for a rule without any).

Spellings: ``--set relay.params.k=3`` (and ``relay: {params: {k: 3}}`` in YAML); ``--set relay.k=3``, the
spelling from before parameters were nested under their rule, still works (``nest_rule_params``).

Reading back (``from_dict``, ``load_json``, ``without_volatile``): a ``config.json`` or checkpoint of the earlier
layout, where every registered rule's parameters were fields of ``relay`` (a quantile run recorded ``"k": 1``),
is migrated on read (``migrate``): the active rule's values move under ``relay.params``, the other rules' are
dropped (they did not act on the run), so an unfinished run of that layout still resumes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suPER import config as C
from suPER.core.selection import RELAY_FIELDS, SELECTION_RULES, check_mode


def resolve(env_name: str, algo: str = "ddqn", overrides: dict[str, Any] | None = None,
            named: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> C.ExperimentConfig:
    """Build a validated config: defaults <- env YAML <- algo preset <- named flags <- dotted overrides.

    Args:
        env_name: environment registry key (``experiments/envs/<env_name>.yaml``).
        algo: algorithm registry key (``suPER.config.ALGORITHMS``).
        overrides: dotted key -> value (``--set``; ``relay.<param>`` is read as ``relay.params.<param>``).
        named: dotted key -> value of the named flags (``suPER.config.named_settings``).
        labels: dotted key -> the flag as the user typed it (``--bandwidth`` or ``--suPER_bandwidth``,
            ``--set dqn.lr``), so every error names what the user wrote; keys without one are named as
            the dotted key.

    Raises:
        ConfigError: an unknown key, a value of the wrong type or outside its range, an unknown selection rule
            or a parameter it does not declare, named as the user typed it.
    """
    labels = dict(labels or {})
    named, labels = nest_rule_params(named or {}, labels)
    overrides, labels = nest_rule_params(overrides or {}, labels)
    cfg = C.ExperimentConfig()
    C.apply_overrides(cfg, C.flatten(C.load_env_defaults(env_name)), source=str(C.env_yaml_path(env_name)))
    cfg.env.name = C.canonical_env_name(env_name)  # after the YAML: a generic adapter's file names no env
    spec = C.algorithm(algo, labels.get("run.algo", "--algo"))
    cfg.run.algo = algo
    C.apply_overrides(cfg, dict(spec.presets), source="--algo")
    for key, targets in spec.flag_routes.items():  # --lr given to SEAC is still --lr
        for target in targets:
            if key in labels:
                labels.setdefault(target, labels[key])
    C.apply_overrides(cfg, C.route_flags(algo, named, labels), source="flags", labels=labels)
    C.apply_overrides(cfg, overrides, source="--set", labels=labels)
    return check_rule(cfg.validate(labels), labels)


def check_rule(cfg: C.ExperimentConfig, labels: dict[str, str] | None = None) -> C.ExperimentConfig:
    """Check ``relay.mode`` and complete ``relay.params`` from the rule's record, in place.

    Returns:
        ``cfg``, its ``relay.params`` holding every parameter of the rule (given or default), nothing else.

    Raises:
        ConfigError: an unknown rule, an undeclared parameter, or a value of the wrong type or out of range.
    """
    labels = labels or {}
    rule = check_mode(cfg.relay.mode, labels.get("relay.mode"))
    cfg.relay.params = rule.check_params(cfg.relay.params, labels)
    return cfg


def nest_rule_params(settings: dict[str, Any], labels: dict[str, str] | None = None
                     ) -> tuple[dict[str, Any], dict[str, str]]:
    """``relay.<param>`` -> ``relay.params.<param>`` for every name a registered rule declares as a parameter
    (the spelling of ``--set relay.k=3`` from before parameters were nested under their rule).

    Args:
        settings: dotted key -> value.
        labels: dotted key -> the flag as typed; a moved key's label moves with it (default: the key as written).

    Returns:
        (settings with the keys moved, labels with theirs), new dicts in the same order.
    """
    labels = dict(labels or {})
    params = {p.name for r in SELECTION_RULES.values() for p in r.params}
    out: dict[str, Any] = {}
    for key, value in settings.items():
        section, _, name = key.partition(".")
        if section == "relay" and name in params:
            nested = f"relay.params.{name}"
            labels.setdefault(nested, labels.get(key, key))
            key = nested
        out[key] = value
    return out, labels


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict (``config.json``, a checkpoint's ``config``) in this version's layout.

    Before ``relay.params`` existed, every registered rule's parameters were fields of ``relay``; the active rule's
    values move under ``relay.params`` and the other rules' are dropped. Anything else is left as written, so a
    config that no longer fits is still refused by name. A dict already in this layout is returned unchanged.
    """
    relay = data.get("relay")
    if not isinstance(relay, dict) or "params" in relay:
        return data
    rule = SELECTION_RULES.get(relay.get("mode", C.RelayConfig().mode))
    declared = {p.name for r in SELECTION_RULES.values() for p in r.params} - set(RELAY_FIELDS)
    own = [p.name for p in rule.params] if rule is not None else []
    moved = {k: v for k, v in relay.items() if k not in declared}
    moved["params"] = {name: relay[name] for name in own if name in relay}
    return {**data, "relay": moved}


def from_dict(data: dict[str, Any]) -> C.ExperimentConfig:
    """Rebuild a config from ``to_dict()`` output (e.g. a run's config.json; an earlier layout is migrated)."""
    cfg = C.ExperimentConfig()
    C.apply_overrides(cfg, C.flatten(migrate(data)), source="config.json")
    return check_rule(cfg.validate())


def load_json(path: Path) -> C.ExperimentConfig:
    """Load a run's ``config.json``."""
    return from_dict(json.loads(Path(path).read_text()))


def without_volatile(config: dict[str, Any]) -> dict[str, Any]:
    """A ``to_dict()`` config without ``suPER.config.VOLATILE_RUN_KEYS``: what must match for a run to be resumed.

    Fields added to the dataclasses after ``config`` was written (e.g. ``env.swap_teams``) are filled in at
    their defaults first (``from_dict``), and an earlier layout is migrated (``migrate``), so a run started
    before them still resumes; a config that no longer loads (a removed or renamed key) is compared as written,
    i.e. refused.
    """
    try:
        config = from_dict(config).to_dict()
    except (C.ConfigError, TypeError, ValueError, AttributeError):
        pass
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for k in C.VOLATILE_RUN_KEYS:
        out.get("run", {}).pop(k, None)
    return out
