"""The selection-rule registry: the topk rule's known answers, and every registered rule through Relay and the config."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from suPER import config as C
from suPER.core.relay import MODES, Relay
from suPER.core.selection import SELECTION_RULES, RuleParam, SelectionRule, register, rule_params
from suPER.resolve import resolve

RULES = sorted(SELECTION_RULES)


def topk(td: list[float], k: int) -> tuple[list[int], float]:
    rule = SELECTION_RULES["topk"]
    td_arr = np.array(td, dtype=np.float64)
    chosen, c = rule.select(td_arr, td_arr, 0.5, None, {"k": k})
    return np.flatnonzero(chosen).tolist(), c


def test_topk_picks_the_k_largest_with_earlier_rows_winning_ties() -> None:
    td = [0.3, 0.9, 0.1, 0.9, 0.5]
    assert topk(td, 1) == ([1], 0.9)  # tie between rows 1 and 3: the earlier row
    assert topk(td, 2) == ([1, 3], 0.9)
    assert topk(td, 3) == ([1, 3, 4], 0.5)
    assert topk(td, 9) == ([0, 1, 2, 3, 4], 0.1)  # k beyond the fragment: every row


def test_topk_through_relay_relays_k_rows_per_sender_and_keeps_no_window() -> None:
    td_NT = np.array([[0.1, 0.4, 0.2, 0.3], [5.0, 1.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    valid_NT = np.ones_like(td_NT, dtype=bool)
    valid_NT[2, 1:] = False  # one fresh row only: k = 2 relays it alone
    relay = Relay(["a", "b", "c"], mode="topk", bandwidth=0.5, params={"k": 2})
    plan = relay.plan(td_NT, valid_NT)
    assert [np.flatnonzero(row).tolist() for row in plan.selected_NT] == [[1, 3], [0, 2], [0]]
    np.testing.assert_allclose(plan.threshold_N, [0.3, 3.0, 0.0])
    assert plan.received_N.tolist() == [3, 3, 4]  # each receives the others' picks
    assert relay.windows.count_N.tolist() == [0, 0, 0]


def test_topk_k_comes_from_the_relay_config_and_is_range_checked() -> None:
    for key in ("relay.params.k", "relay.k"):  # relay.k: the spelling from before parameters were nested
        cfg = resolve("pursuit", overrides={"relay.enabled": True, "relay.mode": "topk", key: 3})
        assert cfg.relay.params == {"k": 3}
        relay = Relay.from_config(cfg.relay, ["a", "b"], seed=0, per_eps=cfg.dqn.per_eps)
        assert relay.params == {"k": 3}
        with pytest.raises(C.ConfigError, match=rf"--set {key}: expected an integer >= 1, got 0"):
            resolve("pursuit", overrides={"relay.mode": "topk", key: 0}, labels={key: f"--set {key}"})


@pytest.mark.parametrize("mode", RULES)
def test_every_registered_rule_selects_a_subset_and_honours_the_bandwidth_edges(mode: str) -> None:
    rng = np.random.default_rng(7)
    td_NT = rng.exponential(size=(3, 40))
    valid_NT = rng.random((3, 40)) < 0.8
    for b, expect_all in ((0.0, False), (1.0, True)):
        plan = Relay(["a", "b", "c"], mode=mode, bandwidth=b, window=50).plan(td_NT, valid_NT)
        np.testing.assert_array_equal(plan.selected_NT, valid_NT if expect_all else np.zeros_like(valid_NT))
    relay = Relay(["a", "b", "c"], mode=mode, bandwidth=0.3, window=50, rng=np.random.default_rng(1))
    for _ in range(3):  # several fragments, so windowed rules see a filled window
        plan = relay.plan(td_NT, valid_NT)
        assert not (plan.selected_NT & ~valid_NT).any()  # only fresh rows
        assert plan.selected_NT.any() and not plan.selected_NT[valid_NT].all()
        assert ((plan.fraction_N >= 0) & (plan.fraction_N <= 1)).all()
    # a relay restored from its state continues identically (windows + generator)
    again = Relay(["a", "b", "c"], mode=mode, bandwidth=0.3, window=50)
    again.load_state_dict(relay.state_dict())
    np.testing.assert_array_equal(again.plan(td_NT, valid_NT).selected_NT, relay.plan(td_NT, valid_NT).selected_NT)


@pytest.mark.parametrize("mode", RULES)
def test_every_registered_rule_is_a_valid_config_value_with_only_its_params_recorded(mode: str) -> None:
    """config.json's relay section holds the active rule's parameters at their defaults, under relay.params, and no
    other rule's; each numeric parameter's range is in the config's range vocabulary."""
    cfg = resolve("pursuit", overrides={"relay.enabled": True, "relay.mode": mode})
    rule = SELECTION_RULES[mode]
    assert cfg.to_dict()["relay"]["params"] == {p.name: p.default for p in rule.params}
    assert set(cfg.to_dict()["relay"]) == {f.name for f in dataclasses.fields(C.RelayConfig)}
    for p in rule.params:
        assert p.type not in (int, float) or C.in_range(p.range, p.default)[1]
    assert mode in MODES


def test_unknown_mode_message_lists_the_registry() -> None:
    with pytest.raises(C.ConfigError, match="--super-mode: expected one of " + ", ".join(SELECTION_RULES)):
        resolve("pursuit", named={"relay.mode": "median"}, labels={"relay.mode": "--super-mode"})


def test_register_refuses_duplicate_names_and_params() -> None:
    def never(*args: object) -> tuple[np.ndarray, float]:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="already registered"):
        register(SelectionRule(RULES[0], never, "dup"))
    for taken in ("bandwidth", "params"):  # relay.<name> must stay readable as relay.params.<name>
        with pytest.raises(ValueError, match="already a relay config field"):
            register(SelectionRule("_test_rule", never, "x", params=(RuleParam(taken, int, 1, "int >= 1", "x"),)))
    twice = (RuleParam("m", int, 1, "int >= 1", "x"), RuleParam("m", int, 2, "int >= 1", "x"))
    with pytest.raises(ValueError, match="another of its parameters"):
        register(SelectionRule("_test_rule", never, "x", params=twice))
    with pytest.raises(ValueError, match="a default outside its range"):
        register(SelectionRule("_test_rule", never, "x", params=(RuleParam("m", int, 0, "int >= 1", "x"),)))
    assert "_test_rule" not in SELECTION_RULES


def test_a_rule_checks_its_own_parameters_and_fills_their_defaults() -> None:
    topk_rule = SELECTION_RULES["topk"]
    assert topk_rule.check_params({}) == {"k": 1}
    assert topk_rule.check_params({"k": 4.0}) == {"k": 4}  # coerced to the declared type
    with pytest.raises(C.ConfigError, match=r"^relay.params.k: expected an integer, got 'x'$"):
        topk_rule.check_params({"k": "x"})
    with pytest.raises(C.ConfigError, match=r"^--set relay.params.j: not a parameter of selection rule 'topk' "
                                            r"\(its parameters: k\)$"):
        topk_rule.check_params({"j": 1}, {"relay.params.j": "--set relay.params.j"})
    with pytest.raises(C.ConfigError, match=r"^--set relay.params.k: not a parameter of selection rule 'quantile' "
                                            r"\(it has none\)$"):
        resolve("pursuit", overrides={"relay.params.k": 2}, labels={"relay.params.k": "--set relay.params.k"})


def test_cli_help_lists_every_rule_and_its_params() -> None:
    env = {**os.environ, "COLUMNS": "400"}
    out = subprocess.run([sys.executable, "-m", "suPER.cli", "train", "--help"], capture_output=True, text=True,
                         timeout=120, env=env).stdout
    flat = " ".join(out.replace("│", " ").split())
    for name in SELECTION_RULES:
        assert name in flat
    for p in rule_params():
        assert f"relay.params.{p.name}" in flat
