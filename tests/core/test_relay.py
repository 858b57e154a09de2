"""SUPER selection and routing semantics (suPER/core/relay.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from suPER.core.relay import Relay, RelayTally, TDWindow, insertion_priorities, team_mask, threshold
from suPER.core.selection import SELECTION_RULES

td_arrays = st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=40).map(np.array)
bandwidths = st.floats(0.01, 0.99)


def one_sender(mode: str, b: float, window: int = 1500, seed: int = 0) -> Relay:
    return Relay(["a_0", "a_1"], mode=mode, bandwidth=b, window=window, rng=np.random.default_rng(seed))


def select_rows(relay: Relay, td: np.ndarray) -> np.ndarray:
    td_NT = np.stack([td, np.zeros_like(td)])
    valid = np.ones_like(td_NT, dtype=bool)
    selected, _ = relay.select(td_NT, valid)
    return selected[0]


def assert_split_at(chosen: np.ndarray, td: np.ndarray, c: float) -> None:
    """``chosen == td > c`` for every row not within rounding of the threshold ``c``.

    The test recomputes ``c`` (a mean / variance / quantile over the window, and ``norm.ppf``) from the
    values in its own order, the relay from its ring window: reductions in another order may differ in
    the last bits, so a row within ``1e-9`` of the data's scale of ``c`` may fall either way. Every other
    row must be split exactly as the formula says.
    """
    tol = 1e-9 * max(float(np.abs(td).max(initial=0.0)), abs(float(c)), 1e-300)
    clear = np.abs(td - c) > tol
    np.testing.assert_array_equal(chosen[clear], (td > c)[clear])


@given(td=td_arrays, b=bandwidths)
@settings(max_examples=60, deadline=None)
def test_quantile_relays_exactly_rows_above_window_quantile(td: np.ndarray, b: float) -> None:
    relay = one_sender("quantile", b)
    chosen = select_rows(relay, td)
    c = np.quantile(td, 1 - b)  # first fragment: window == this batch
    assert_split_at(chosen, td, c)


@given(history=td_arrays, td=td_arrays, b=bandwidths)
@settings(max_examples=60, deadline=None)
def test_window_includes_history_and_current_batch(history: np.ndarray, td: np.ndarray, b: float) -> None:
    relay = one_sender("quantile", b)
    select_rows(relay, history)
    chosen = select_rows(relay, td)
    c = np.quantile(np.concatenate([history, td]), 1 - b)
    assert_split_at(chosen, td, c)


@given(td=td_arrays, b=bandwidths)
@settings(max_examples=60, deadline=None)
def test_gaussian_matches_formula(td: np.ndarray, b: float) -> None:
    for mode, scale in (("gaussian", np.std(td)), ("gaussian_variance", np.var(td))):
        chosen = select_rows(one_sender(mode, b), td)
        if scale <= 0:
            assert not chosen.any()  # zero spread: scipy gives NaN, nothing relayed (as the original)
            continue
        c = np.mean(td) + scale * norm.ppf(1 - b)
        assert_split_at(chosen, td, c)


def test_gaussian_threshold_value() -> None:
    h = np.array([1.0, 2.0, 3.0, 4.0])
    assert threshold("gaussian", h, 0.1) == pytest.approx(2.5 + np.std(h) * 1.2815515655446004)
    assert threshold("gaussian_variance", h, 0.1) == pytest.approx(2.5 + np.var(h) * 1.2815515655446004)


@pytest.mark.parametrize("mode", ["quantile", "gaussian", "gaussian_variance", "stochastic"])
@given(td=td_arrays)
@settings(max_examples=25, deadline=None)
def test_bandwidth_edges_share_all_or_nothing(mode: str, td: np.ndarray) -> None:
    assert select_rows(one_sender(mode, 1.0), td).all()
    assert not select_rows(one_sender(mode, 0.0), td).any()


def test_stochastic_expected_count_and_bounds() -> None:
    """Mean relayed count matches sum_i p_i (= b*n when nothing is clipped) within binomial error."""
    rng = np.random.default_rng(123)
    n, b, trials = 50, 0.1, 4000
    td = rng.uniform(0.5, 1.5, size=n)  # no p_i reaches 1: expected count is exactly b*n = 5
    p = np.minimum(1, b * n * td / td.sum())
    assert p.max() < 1
    relay = one_sender("stochastic", b, seed=7)
    counts = np.array([select_rows(relay, td).sum() for _ in range(trials)])
    assert counts.max() <= n
    expected, var = p.sum(), (p * (1 - p)).sum()
    tolerance = 4 * np.sqrt(var / trials)  # 4 standard errors of the mean
    assert abs(counts.mean() - expected) < tolerance
    assert expected == pytest.approx(b * n)


def test_stochastic_is_reproducible_with_seed() -> None:
    td = np.linspace(0, 3, 30)
    a = [select_rows(one_sender("stochastic", 0.2, seed=5), td) for _ in range(2)]
    np.testing.assert_array_equal(a[0], a[1])


def test_window_eviction_keeps_last_values() -> None:
    w = TDWindow(1, window=4)
    w.push(0, np.array([1.0, 2.0, 3.0]))
    contents = w.push(0, np.array([4.0, 5.0, 6.0]))
    assert sorted(contents) == [3.0, 4.0, 5.0, 6.0]
    contents = w.push(0, np.arange(10.0))  # longer than the window: only the last 4 stay
    assert sorted(contents) == [6.0, 7.0, 8.0, 9.0]


def test_quantile_uses_evicted_window() -> None:
    relay = one_sender("quantile", 0.5, window=3)
    select_rows(relay, np.array([100.0, 100.0, 100.0]))
    chosen = select_rows(relay, np.array([1.0, 2.0, 3.0]))  # window now only [1, 2, 3]
    np.testing.assert_array_equal(chosen, [False, False, True])


# ---- routing


def test_routing_no_self_receipt_and_all_teammates() -> None:
    relay = Relay([f"p_{i}" for i in range(4)], mode="quantile", bandwidth=1.0)
    valid = np.ones((4, 3), dtype=bool)
    plan = relay.plan(np.ones((4, 3)), valid)
    assert not np.any(plan.sender_K == plan.receiver_K)
    assert plan.n_relayed == 4 * 3 * 3  # every row of every sender to the 3 others
    for s in range(4):
        got = sorted(plan.receiver_K[plan.sender_K == s].tolist())
        assert got == sorted([r for r in range(4) if r != s] * 3)
    np.testing.assert_array_equal(plan.received_N, [9, 9, 9, 9])
    np.testing.assert_array_equal(plan.fraction_N, [1.0, 1.0, 1.0, 1.0])


def test_tally_pools_rows_so_a_dead_senders_empty_fragment_does_not_count() -> None:
    """``RelayTally``: relayed / fresh rows per sender summed over fragments. Share-all reads 1 for a sender dead
    for a whole fragment (battle), where averaging each fragment's fraction read 0.5; a quantile relay reads its
    rows sent over rows had."""
    everyone, c_dead = np.ones((3, 4), dtype=bool), np.ones((3, 4), dtype=bool)
    c_dead[2], c_dead[1, 2:] = False, False  # c dead throughout the second fragment, b for its last 2 steps
    share_all = Relay(["a", "b", "c"], bandwidth=1.0)
    tally = RelayTally.zeros(3)
    for valid in (everyone, c_dead):
        tally.add(share_all.plan(np.ones((3, 4)), valid))
    np.testing.assert_array_equal(tally.fresh_N, [8, 6, 4])
    np.testing.assert_array_equal(tally.fraction_N(), [1.0, 1.0, 1.0])
    assert tally.mean_fraction(share_all.participants_N) == 1.0
    quantile = Relay(["a", "b", "c"], mode="quantile", bandwidth=0.5, window=1000)
    tally.clear()
    td = np.arange(12, dtype=np.float64).reshape(3, 4)
    plans = [quantile.plan(td, valid) for valid in (everyone, c_dead)]
    for plan in plans:
        tally.add(plan)
    selected_N = sum(plan.selected_NT.sum(axis=1) for plan in plans)
    np.testing.assert_allclose(tally.fraction_N(), selected_N / np.array([8, 6, 4]), rtol=1e-12)
    assert tally.fresh_N[2] == 4 and plans[1].fraction_N[2] == 0.0  # c's empty fragment: no rows, not a fraction
    silent = RelayTally.zeros(3)
    silent.add(share_all.plan(np.ones((3, 4)), np.zeros((3, 4), dtype=bool)))
    assert silent.mean_fraction(share_all.participants_N) == 0.0 and not silent.fraction_N().any()


def test_team_filter_substring_and_list() -> None:
    ids = ["blue_0", "blue_1", "red_0", "red_1"]
    np.testing.assert_array_equal(team_mask(ids, "blue"), [True, True, False, False])
    np.testing.assert_array_equal(team_mask(ids, "blue_0,red_1"), [True, False, False, True])
    np.testing.assert_array_equal(team_mask(ids, ["red_0"]), [False, False, True, False])
    np.testing.assert_array_equal(team_mask(ids, ""), [True] * 4)
    np.testing.assert_array_equal(team_mask(ids, None, exclude=["red_0", "red_1"]), [True, True, False, False])


def test_non_team_and_opponents_neither_send_nor_receive() -> None:
    ids = ["blue_0", "blue_1", "blue_2", "red_0"]
    relay = Relay(ids, bandwidth=1.0, team="blue")
    plan = relay.plan(np.ones((4, 2)), np.ones((4, 2), dtype=bool))
    assert 3 not in plan.sender_K and 3 not in plan.receiver_K
    assert plan.fraction_N[3] == 0.0 and plan.received_N[3] == 0
    relay = Relay(ids, bandwidth=1.0, exclude=["red_0"])
    plan = relay.plan(np.ones((4, 2)), np.ones((4, 2), dtype=bool))
    assert 3 not in plan.sender_K and 3 not in plan.receiver_K


def test_absent_agents_do_not_receive() -> None:
    relay = Relay(["a", "b", "c"], bandwidth=1.0)
    valid = np.array([[True, True], [True, False], [False, False]])  # c is dead this fragment
    plan = relay.plan(np.ones((3, 2)), valid)
    assert 2 not in plan.receiver_K and 2 not in plan.sender_K
    assert plan.n_relayed == 3  # a's 2 rows -> b, b's 1 row -> a


def test_single_policy_is_noop() -> None:
    relay = Relay(["pursuer"], bandwidth=1.0)
    assert not relay.active
    plan = relay.plan(np.ones((1, 4)), np.ones((1, 4), dtype=bool))
    assert plan.n_relayed == 0


@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_route_indices_in_range(n: int, t: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    relay = Relay([f"x_{i}" for i in range(n)], mode="stochastic", bandwidth=0.5, rng=rng)
    valid = rng.random((n, t)) < 0.8
    plan = relay.plan(rng.random((n, t)), valid)
    assert np.all((plan.sender_K >= 0) & (plan.sender_K < n))
    assert np.all((plan.receiver_K >= 0) & (plan.receiver_K < n))
    assert np.all((plan.row_K >= 0) & (plan.row_K < t))
    assert np.all(valid[plan.sender_K, plan.row_K])  # only existing rows are relayed
    assert not np.any(plan.sender_K == plan.receiver_K)


def test_invalid_settings_raise_naming_flag() -> None:
    with pytest.raises(ValueError, match="--suPER_mode"):
        Relay(["a", "b"], mode="median")
    with pytest.raises(ValueError, match="--suPER_bandwidth"):
        Relay(["a", "b"], bandwidth=1.5)
    with pytest.raises(ValueError, match="--suPER_window"):
        Relay(["a", "b"], window=0)


# ---- insertion priorities


def test_insertion_priorities() -> None:
    td = np.array([0.5, 0.2, 0.9, 0.4])
    recv = np.array([1, 1, 2, 2])
    assert insertion_priorities("max", td, recv, 1e-6, False) is None
    np.testing.assert_allclose(insertion_priorities("sender", td, recv, 1e-6, False), td + 1e-6)
    np.testing.assert_array_equal(insertion_priorities("legacy", td, recv, 1e-6, False), np.ones(4))
    # with sender-side priorities every row of one receiver's insertion gets that chunk's first row's value
    np.testing.assert_allclose(insertion_priorities("legacy", td, recv, 1e-5, True), [0.5, 0.5, 0.9, 0.9] + np.float64(1e-5))


def test_relay_state_round_trip() -> None:
    a = Relay(["a", "b"], mode="stochastic", bandwidth=0.3, rng=np.random.default_rng(1))
    a.plan(np.random.default_rng(0).random((2, 4)), np.ones((2, 4), dtype=bool))
    b = Relay(["a", "b"], mode="stochastic", bandwidth=0.3, rng=np.random.default_rng(99))
    b.load_state_dict(a.state_dict())
    td = np.random.default_rng(5).random((2, 4))
    np.testing.assert_array_equal(a.plan(td, np.ones((2, 4), dtype=bool)).selected_NT,
                                  b.plan(td, np.ones((2, 4), dtype=bool)).selected_NT)


RELAY_DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", RELAY_DEVICES)
@pytest.mark.parametrize("mode", sorted(SELECTION_RULES))
def test_selection_on_torch_tensors_equals_the_numpy_relay(mode: str, device: str) -> None:
    """Every registered rule (quantile, gaussian and stochastic among them) on |TD| tensors with the windows kept as a tensor on ``device``: the same rows selected,
    the same thresholds (to float64 rounding of the mean) and windows, over 8 fragments of a 20-value window
    (it wraps around every ~2 fragments); stochastic draws from the same numpy generator."""
    import torch

    ids = ["a_0", "a_1", "a_2", "b_0"]
    host = Relay(ids, mode=mode, bandwidth=0.3, window=20, team="a", rng=np.random.default_rng(4))
    dev = Relay(ids, mode=mode, bandwidth=0.3, window=20, team="a", rng=np.random.default_rng(4), device=device)
    rng = np.random.default_rng(0)
    for _ in range(8):
        td_NT = rng.exponential(size=(4, 12))
        valid_NT = rng.random((4, 12)) < 0.8
        valid_NT[1, :] = rng.random() < 0.5  # a sender that is sometimes absent
        a = host.plan(td_NT, valid_NT)
        b = dev.plan(torch.as_tensor(td_NT, device=device), valid_NT)
        np.testing.assert_array_equal(a.selected_NT, b.selected_NT)
        for f in ("sender_K", "row_K", "receiver_K", "received_N"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        np.testing.assert_allclose(a.threshold_N, b.threshold_N, rtol=1e-12, equal_nan=True)
    assert isinstance(dev.windows.values_NW, torch.Tensor) and dev.windows.values_NW.device.type == device
    windowed = SELECTION_RULES[mode].uses_window
    assert host.windows.count_N.max() > 3 * 20 if windowed else host.windows.count_N.max() == 0
    state = dev.state_dict()
    np.testing.assert_array_equal(state["windows"]["values_NW"], host.state_dict()["windows"]["values_NW"])
    again = Relay(ids, mode=mode, bandwidth=0.3, window=20, team="a")  # a device relay's checkpoint on the host
    again.load_state_dict(state)
    td_NT = rng.exponential(size=(4, 12))
    np.testing.assert_array_equal(again.plan(td_NT, np.ones((4, 12), bool)).selected_NT,
                                  host.plan(td_NT, np.ones((4, 12), bool)).selected_NT)


@pytest.mark.parametrize("kind", ["numpy", "torch", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])])
@pytest.mark.parametrize("mode", list(SELECTION_RULES))
@pytest.mark.parametrize("bandwidth", [0.3, 1.0])
def test_select_many_equals_each_relay_alone(mode: str, kind: str, bandwidth: float,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A pack's relays selected at once (``select_many``) give each relay's own ``select``: selections, thresholds,
    windows (wrapping several times), window counts and generator states, to the bit; no rule falls back to
    sender-by-sender while every participant has all its rows and windows equally full; a fragment
    with a missing row (a dead agent), and for windowed rules every fragment after it, is selected relay by relay
    with the same result."""
    from suPER.core import relay as relay_mod

    R, N, T, W = 3, 4, 5, 12
    ids = ["a_0", "a_1", "a_2", "b_0"]  # team "a": b_0 neither sends nor receives
    dev = None if kind == "numpy" else "cpu" if kind == "torch" else "cuda"

    def relays() -> list[Relay]:
        return [Relay(ids, mode=mode, bandwidth=bandwidth, window=W, team="a", rng=np.random.default_rng(10 + r),
                      device=dev, params={"k": 2}) for r in range(R)]

    alone, packed = relays(), relays()
    windows = np.zeros((R, N, W)) if kind == "numpy" else torch.zeros((R, N, W), dtype=torch.float64, device=dev)
    for r, rel in enumerate(packed):
        rel.windows.values_NW = windows[r]
    rng = np.random.default_rng(0)
    real_select = Relay.select
    per_relay_calls = [0]

    def counted(self: Relay, *args: object) -> object:
        per_relay_calls[0] += 1
        return real_select(self, *args)

    monkeypatch.setattr(relay_mod.Relay, "select", counted)
    for step in range(8):
        td = rng.exponential(size=(R, N, T))
        valid = np.ones((R, N, T), dtype=bool)
        if step == 5:
            valid[1, 2, 3:] = False  # a_2 of run 1 died in this fragment
        td_x = td if kind == "numpy" else torch.as_tensor(td, device=dev)
        calls = per_relay_calls[0]
        expected = [real_select(rel, td_x[i], valid[i]) for i, rel in enumerate(alone)]
        per_relay_calls[0] = calls
        got = relay_mod.select_many(packed, td_x, valid, windows)
        rule = SELECTION_RULES[mode]  # after the death, run 1's a_2 window is behind: windowed rules go relay by relay
        batched = step < 5 or (step > 5 and not rule.uses_window)
        assert (per_relay_calls[0] == calls) == batched, step
        for (sel_a, thr_a), (sel_b, thr_b) in zip(expected, got):
            assert np.array_equal(host(sel_a), host(sel_b))
            np.testing.assert_array_equal(host(thr_a).astype(np.float64), host(thr_b).astype(np.float64))
    for a, b in zip(alone, packed):
        assert np.array_equal(host(a.windows.values_NW), host(b.windows.values_NW))
        assert np.array_equal(a.windows.count_N, b.windows.count_N)
        assert a.rng.bit_generator.state == b.rng.bit_generator.state


def host(x: object) -> np.ndarray:
    """A numpy copy of an array or a tensor on any device."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
