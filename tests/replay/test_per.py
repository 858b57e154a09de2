"""Tests for suPER.replay.per.MultiAgentPER (exact, deterministic: fixed seeds everywhere)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suPER.replay import Batch, MultiAgentPER

OBS_SHAPE = (2, 3)

POW_RTOL = 1e-13
"""Tolerance for tree values ``p ** alpha`` checked against an independently computed power.

``pow`` is a transcendental: numpy's SIMD kernels (AVX-512 on some CPUs) and libm / Python's scalar pow
may differ in the last bits (2.626528119587091 vs 2.6265281195870913 seen on an AMD EPYC). 1e-13 is a
few hundred ulps, far below any semantic error these tests look for (a missing ``eps = 1e-6`` moves a
value by ~1e-7 relative; a wrong ``alpha`` by far more). Sums, minima, copies and indices stay exact.
"""


def content(policy: npt.ArrayLike, uid: npt.ArrayLike) -> dict[str, np.ndarray]:
    """Row contents as a function of (policy, unique id): every field is recoverable from the reward."""
    pol = np.asarray(policy, dtype=np.int64)
    ids = np.asarray(uid, dtype=np.int64)
    key = (pol * 1000 + ids).astype(np.float32)  # exactly representable
    grid = np.arange(np.prod(OBS_SHAPE), dtype=np.float32).reshape(OBS_SHAPE)
    return {
        "obs_K": key[:, None, None] + grid,
        "action_K": (ids % 5).astype(np.int64),
        "reward_K": key,
        "next_obs_K": -key[:, None, None] - grid,
        "done_K": (ids % 3 == 0).astype(np.float32),
    }


def add_rows(
    buf: MultiAgentPER, policy: npt.ArrayLike, uid: npt.ArrayLike, priority: np.ndarray | None = None
) -> np.ndarray:
    return buf.add(np.asarray(policy), **content(policy, uid), priority_K=priority)


def check_batch_content(batch: Batch, n_policies: int) -> None:
    """Every sampled row carries the content of the row with its reward, and belongs to its policy."""
    key = batch.rewards.astype(np.int64)
    pol, uid = key // 1000, key % 1000
    np.testing.assert_array_equal(pol, np.broadcast_to(np.arange(n_policies)[:, None], pol.shape))
    exp = content(pol.reshape(-1), uid.reshape(-1))
    P, B = batch.rewards.shape
    np.testing.assert_array_equal(batch.obs, exp["obs_K"].reshape(P, B, *OBS_SHAPE))
    np.testing.assert_array_equal(batch.next_obs, exp["next_obs_K"].reshape(P, B, *OBS_SHAPE))
    np.testing.assert_array_equal(batch.actions, exp["action_K"].reshape(P, B))
    np.testing.assert_array_equal(batch.dones, exp["done_K"].reshape(P, B))


def stored_rewards(buf: MultiAgentPER) -> np.ndarray:
    return buf.state_dict(copy=False)["rewards"]


# ---------------------------------------------------------------- add / sample / ring


def test_add_sample_round_trip() -> None:
    buf = MultiAgentPER(3, 16, OBS_SHAPE, np.float32, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    pol = rng.integers(0, 3, size=30)
    pol[:3] = [0, 1, 2]
    add_rows(buf, pol, np.arange(30))
    np.testing.assert_array_equal(buf.sizes, np.bincount(pol, minlength=3))
    batch = buf.sample(64)
    assert batch.obs.shape == (3, 64, *OBS_SHAPE) and batch.obs.dtype == np.float32
    assert batch.actions.dtype == np.int64 and batch.indices.dtype == np.int64
    assert batch.rewards.dtype == batch.dones.dtype == batch.weights.dtype == np.float32
    check_batch_content(batch, 3)
    # indices point at the sampled rows
    np.testing.assert_array_equal(np.take_along_axis(stored_rewards(buf), batch.indices, 1), batch.rewards)


def test_storage_dtype_is_kept() -> None:
    buf = MultiAgentPER(2, 4, (3,), np.uint8, rng=np.random.default_rng(0))
    obs = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8)
    buf.add(np.array([0, 1]), obs, np.array([0, 1]), np.zeros(2), obs + 10, np.array([False, True]))
    b = buf.sample(2)
    assert b.obs.dtype == np.uint8
    np.testing.assert_array_equal(b.obs[:, 0], obs)
    np.testing.assert_array_equal(b.next_obs[:, 0], obs + 10)
    np.testing.assert_array_equal(b.dones[:, 0], [0.0, 1.0])


def test_ring_fifo_per_policy_and_order_within_call() -> None:
    buf = MultiAgentPER(2, 4, OBS_SHAPE, np.float32)
    # interleaved policies, several rows per policy in one call: order kept per policy
    slots = add_rows(buf, [0, 1, 0, 0, 1], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(slots, [0, 0, 1, 2, 1])
    np.testing.assert_array_equal(stored_rewards(buf)[0, :3], [1, 3, 4])
    np.testing.assert_array_equal(stored_rewards(buf)[1, :2], [1002, 1005])
    # policy 0 wraps (ptr 3 -> 3, 0, 1), policy 1 does not (ptr 2 -> 2)
    slots = add_rows(buf, [0, 0, 1, 0], [6, 7, 8, 9])
    np.testing.assert_array_equal(slots, [3, 0, 2, 1])
    np.testing.assert_array_equal(stored_rewards(buf)[0], [7, 9, 4, 6])  # 1 and 3 overwritten first
    np.testing.assert_array_equal(stored_rewards(buf)[1, :3], [1002, 1005, 1008])
    np.testing.assert_array_equal(buf.sizes, [4, 3])
    np.testing.assert_array_equal(buf.state_dict()["ptr"], [2, 3])
    # more rows than capacity for one policy in one call: the last `capacity` rows survive, in order
    slots = add_rows(buf, [1] * 6 + [0], [10, 11, 12, 13, 14, 15, 16])
    # policy 1 (ptr 3) would write slots 3, 0, 1, 2, 3, 0: rows 10 and 11 are superseded in the call
    np.testing.assert_array_equal(slots, [-1, -1, 1, 2, 3, 0, 2])
    np.testing.assert_array_equal(stored_rewards(buf)[1], [1015, 1012, 1013, 1014])
    np.testing.assert_array_equal(stored_rewards(buf)[0], [7, 9, 16, 6])
    np.testing.assert_array_equal(buf.sizes, [4, 4])
    # empty add is a no-op
    assert add_rows(buf, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)
    np.testing.assert_array_equal(buf.sizes, [4, 4])


def test_sample_requires_every_policy() -> None:
    buf = MultiAgentPER(3, 4, OBS_SHAPE, np.float32)
    with pytest.raises(ValueError, match=r"\[0, 1, 2\]"):
        buf.sample(2)
    add_rows(buf, [1], [0])
    with pytest.raises(ValueError, match=r"policies \[0, 2\]"):
        buf.sample(2)


def test_input_validation() -> None:
    buf = MultiAgentPER(2, 4, OBS_SHAPE, np.float32)
    with pytest.raises(ValueError, match="policy_K"):
        add_rows(buf, [2], [0])
    with pytest.raises(ValueError, match="obs_K"):
        buf.add(
            np.array([0]), np.zeros((1, 3)), np.zeros(1), np.zeros(1), np.zeros((1, *OBS_SHAPE)), np.zeros(1)
        )
    with pytest.raises(ValueError, match="priority_K"):
        add_rows(buf, [0], [0], priority=np.array([0.0]))
    add_rows(buf, [0, 1], [0, 1])
    with pytest.raises(ValueError, match="out of range"):
        buf.update_priorities(np.array([[0], [1]]), np.ones((2, 1)))
    with pytest.raises(ValueError, match=r"\[P=2, B\]"):
        buf.update_priorities(np.array([[0, 0]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="finite"):
        buf.update_priorities(np.zeros((2, 1), np.int64), np.full((2, 1), np.nan))


# ---------------------------------------------------------------- priorities


def test_every_priority_update_lands_on_its_row() -> None:
    """Sample, compute td from each row's content, update; each slot then holds f(its content)**alpha."""
    alpha, eps = 0.7, 1e-6
    buf = MultiAgentPER(3, 10, OBS_SHAPE, np.float32, alpha=alpha, eps=eps, rng=np.random.default_rng(3))
    rng = np.random.default_rng(4)

    def f(reward: np.ndarray) -> np.ndarray:  # signed on purpose: |td| is used
        r = reward.astype(np.float64)
        return np.where(r.astype(np.int64) % 2 == 0, 1.0, -1.0) * (0.25 + r / 64.0)

    uid = 0
    add_rows(buf, [0, 1, 2], [0, 1, 2])
    uid = 3
    for _ in range(8):
        # new rows (random policies, overwriting old ones) between rounds
        k = int(rng.integers(1, 12))
        add_rows(buf, rng.integers(0, 3, size=k), np.arange(uid, uid + k))
        uid += k
        before = buf.leaf_priorities()
        batch = buf.sample(16)
        check_batch_content(batch, 3)
        buf.update_priorities(batch.indices, f(batch.rewards))
        after = buf.leaf_priorities()
        rewards = stored_rewards(buf)
        touched = np.zeros(after.shape, dtype=bool)
        np.put_along_axis(touched, batch.indices, True, axis=1)
        p_idx, s_idx = np.nonzero(touched)
        expected = (np.abs(f(rewards[p_idx, s_idx])) + eps) ** alpha
        np.testing.assert_allclose(after[p_idx, s_idx], expected, rtol=POW_RTOL)
        np.testing.assert_array_equal(after[~touched], before[~touched])


def test_duplicate_indices_last_occurrence_wins() -> None:
    alpha, eps = 0.5, 1e-6
    buf = MultiAgentPER(2, 8, OBS_SHAPE, np.float32, alpha=alpha, eps=eps)
    add_rows(buf, [0] * 5 + [1] * 5, np.arange(10))
    idx = np.array([[1, 3, 1, 1], [4, 4, 0, 2]])
    td = np.array([[5.0, 2.0, 7.0, 3.0], [9.0, 0.5, 1.5, 2.5]])
    buf.update_priorities(idx, td)
    leaves = buf.leaf_priorities()
    np.testing.assert_allclose(leaves[0, [1, 3]], np.array([3.0 + eps, 2.0 + eps]) ** alpha, rtol=POW_RTOL)
    np.testing.assert_allclose(leaves[1, [4, 0, 2]], np.array([0.5 + eps, 1.5 + eps, 2.5 + eps]) ** alpha,
                               rtol=POW_RTOL)
    np.testing.assert_array_equal(leaves[0, [0, 2, 4]], 1.0)  # untouched: initial max priority 1
    # max priority counts every given entry (as RLlib's per-item loop does)
    np.testing.assert_array_equal(buf.max_priority(), [7.0 + eps, 9.0 + eps])
    # trees stay consistent after deduplication
    sd = buf.state_dict()
    np.testing.assert_allclose(sd["sum_tree"][:, 1], leaves.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(sd["min_tree"][:, 1], [leaves[0, :5].min(), leaves[1, :5].min()])


def test_max_priority_insertion() -> None:
    alpha, eps = 0.6, 1e-6
    buf = MultiAgentPER(2, 8, OBS_SHAPE, np.float32, alpha=alpha, eps=eps)
    np.testing.assert_array_equal(buf.max_priority(), [1.0, 1.0])
    add_rows(buf, [0, 1], [0, 1])
    np.testing.assert_array_equal(buf.leaf_priorities()[:, 0], [1.0, 1.0])
    buf.update_priorities(np.array([[0], [0]]), np.array([[5.0], [0.5]]))
    np.testing.assert_array_equal(buf.max_priority(), [5.0 + eps, 1.0])  # never decreases
    s = add_rows(buf, [0, 1], [2, 3])
    np.testing.assert_allclose(buf.leaf_priorities()[[0, 1], s], [(5.0 + eps) ** alpha, 1.0], rtol=POW_RTOL)
    # given priorities are used as given (before ** alpha) and raise the max
    s = add_rows(buf, [0, 1, 1], [4, 5, 6], priority=np.array([0.3, 10.0, 2.0]))
    np.testing.assert_allclose(buf.leaf_priorities()[[0, 1, 1], s], np.array([0.3, 10.0, 2.0]) ** alpha,
                               rtol=POW_RTOL)
    np.testing.assert_array_equal(buf.max_priority(), [5.0 + eps, 10.0])
    s = add_rows(buf, [1], [7])
    np.testing.assert_allclose(buf.leaf_priorities()[1, s], [10.0**alpha], rtol=POW_RTOL)


def test_rllib_max_priority_mode() -> None:
    # RLlib 2.1: priorities given at insertion do not raise max_p; updates do.
    buf = MultiAgentPER(1, 8, OBS_SHAPE, np.float32, alpha=1.0, eps=0.0, track_inserted_max=False)
    add_rows(buf, [0], [0], priority=np.array([10.0]))
    np.testing.assert_array_equal(buf.max_priority(), [1.0])
    s = add_rows(buf, [0], [1])
    np.testing.assert_array_equal(buf.leaf_priorities()[0, s], [1.0])
    buf.update_priorities(np.array([[1]]), np.array([[3.0]]))
    np.testing.assert_array_equal(buf.max_priority(), [3.0])


# ---------------------------------------------------------------- sampling distribution and weights


def test_sampling_frequencies_follow_priorities() -> None:
    alpha = 0.6
    buf = MultiAgentPER(2, 6, OBS_SHAPE, np.float32, alpha=alpha, rng=np.random.default_rng(12345))
    prio0 = np.array([1.0, 2.0, 0.5, 4.0, 3.0, 0.1])
    prio1 = np.array([8.0, 1.0, 2.0])  # partially filled policy
    add_rows(buf, [0] * 6 + [1] * 3, np.arange(9), priority=np.concatenate([prio0, prio1]))
    n_calls, B = 1500, 32
    counts = np.zeros((2, 6), dtype=np.int64)
    for _ in range(n_calls):
        idx = buf.sample(B).indices
        counts[0] += np.bincount(idx[0], minlength=6)
        counts[1] += np.bincount(idx[1], minlength=6)
    n = n_calls * B
    for p, prio in enumerate((prio0, prio1)):
        q = prio**alpha / (prio**alpha).sum()
        expected = n * q
        std = np.sqrt(n * q * (1 - q))  # binomial; stratified draws only reduce the variance
        np.testing.assert_array_less(np.abs(counts[p, : len(prio)] - expected), 5 * std)
        assert counts[p, len(prio) :].sum() == 0


def test_is_weights_match_hand_computation() -> None:
    alpha, beta = 0.5, 0.4
    buf = MultiAgentPER(2, 4, OBS_SHAPE, np.float32, alpha=alpha, beta=beta, rng=np.random.default_rng(7))
    # policy 0: p = 1, 4, 9 -> p^a = 1, 2, 3, total 6, n = 3, P = 1/6, 2/6, 3/6, P_min = 1/6
    # policy 1: p = 16 (single row) -> weight 1
    add_rows(buf, [0, 0, 0, 1], [0, 1, 2, 3], priority=np.array([1.0, 4.0, 9.0, 16.0]))
    b = buf.sample(12)
    probs = np.array([1, 2, 3]) / 6
    w_hand = (3 * probs) ** -beta / (3 * (1 / 6)) ** -beta  # = (1, 2, 3) ** -beta
    np.testing.assert_allclose(w_hand, [1.0, 2.0**-0.4, 3.0**-0.4], rtol=POW_RTOL)
    np.testing.assert_allclose(b.weights[0], w_hand[b.indices[0]].astype(np.float32), rtol=1e-6)
    assert set(b.indices[0].tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(b.weights[1], 1.0)
    np.testing.assert_array_equal(b.indices[1], 0)
    # beta override
    b = buf.sample(12, beta=1.0)
    np.testing.assert_allclose(b.weights[0], (1.0 / (b.indices[0] + 1)).astype(np.float32), rtol=1e-6)


class _MaxRng:
    """Stands in for a Generator whose uniforms are the largest float below 1."""

    def random(self, size: tuple[int, int]) -> np.ndarray:
        return np.full(size, np.nextafter(1.0, 0.0))


def test_rounded_up_draws_never_leave_stored_rows() -> None:
    # With U = 1 - 2**-53 the last stratum's draw rounds to exactly total; a plain descent would then
    # walk into the empty leaves 3..7. The sampler must still return stored rows only.
    buf = MultiAgentPER(2, 8, OBS_SHAPE, np.float32, alpha=1.0, rng=_MaxRng())  # type: ignore[arg-type]
    add_rows(buf, [0, 0, 0, 1], [0, 1, 2, 3], priority=np.array([0.1, 0.2, 0.3, 0.7]))
    total = buf.total_priority()
    B = 3
    assert ((B - 1) + np.nextafter(1.0, 0.0)) * (total[0] / B) >= total[0]  # the rounding really happens
    b = buf.sample(B)
    assert (b.indices < buf.sizes[:, None]).all()
    np.testing.assert_array_equal(b.indices[0, -1], 2)  # clamped to the last stored row
    np.testing.assert_array_equal(b.indices[1], 0)
    check_batch_content(b, 2)


# ---------------------------------------------------------------- tree invariants (property test)


def check_trees(buf: MultiAgentPER, model: list[dict[int, float]]) -> None:
    sd = buf.state_dict(copy=False)
    s, m = sd["sum_tree"], sd["min_tree"]
    width = s.shape[1]
    c = width // 2
    internal = np.arange(1, c)
    # every internal node is exactly the sum / min of its children
    np.testing.assert_array_equal(s[:, internal], s[:, 2 * internal] + s[:, 2 * internal + 1])
    np.testing.assert_array_equal(m[:, internal], np.minimum(m[:, 2 * internal], m[:, 2 * internal + 1]))
    leaves = buf.leaf_priorities()
    for p, slots in enumerate(model):
        size = int(buf.sizes[p])
        assert size == len(slots)
        expected = np.array([slots[i] for i in range(size)])
        np.testing.assert_allclose(leaves[p, :size], expected, rtol=POW_RTOL)  # model: python's scalar pow
        assert (leaves[p, size:] == 0).all()
        assert math.isclose(s[p, 1], math.fsum(expected), rel_tol=1e-12, abs_tol=0.0)
        if size:
            assert m[p, 1] == leaves[p, :size].min()  # the min tree selects a stored leaf: exact
            assert math.isclose(m[p, 1], expected.min(), rel_tol=POW_RTOL)
        else:
            assert m[p, 1] == np.inf


@st.composite
def op_sequences(draw: st.DrawFn) -> tuple[int, int, float, list[tuple]]:
    n_pol = draw(st.integers(1, 3))
    cap = draw(st.integers(1, 9))
    alpha = draw(st.sampled_from([0.0, 0.6, 1.0]))
    prio = st.floats(1e-3, 1e3, allow_nan=False)
    ops: list[tuple] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            pols = draw(st.lists(st.integers(0, n_pol - 1), min_size=0, max_size=2 * cap + 2))
            given = draw(st.booleans())
            prios = [draw(prio) for _ in pols] if given else None
            ops.append(("add", pols, prios))
        else:
            B = draw(st.integers(1, 5))
            u = [[draw(st.floats(0, 1, exclude_max=True)) for _ in range(B)] for _ in range(n_pol)]
            td = [[draw(st.floats(-1e3, 1e3, allow_nan=False)) for _ in range(B)] for _ in range(n_pol)]
            ops.append(("update", u, td))
    return n_pol, cap, alpha, ops


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(op_sequences())
def test_trees_match_reference_model(case: tuple[int, int, float, list[tuple]]) -> None:
    n_pol, cap, alpha, ops = case
    eps = 1e-6
    buf = MultiAgentPER(n_pol, cap, OBS_SHAPE, np.float32, alpha=alpha, eps=eps, rng=np.random.default_rng(0))
    model: list[dict[int, float]] = [{} for _ in range(n_pol)]  # slot -> tree value
    ptr = [0] * n_pol
    max_p = [1.0] * n_pol
    uid = 0
    for op in ops:
        if op[0] == "add":
            _, pols, prios = op
            if not pols:
                continue
            slots = add_rows(
                buf,
                np.array(pols),
                np.arange(uid, uid + len(pols)),
                None if prios is None else np.array(prios),
            )
            uid += len(pols)
            counts = np.bincount(pols, minlength=n_pol)
            seen = [0] * n_pol
            before_max = list(max_p)
            for k, p in enumerate(pols):
                slot = (ptr[p] + seen[p]) % cap
                seen[p] += 1
                if seen[p] <= counts[p] - cap:  # superseded within the call
                    assert slots[k] == -1
                    continue
                assert slots[k] == slot
                raw = before_max[p] if prios is None else prios[k]
                model[p][slot] = raw**alpha
                if prios is not None:
                    max_p[p] = max(max_p[p], raw)
            for p in range(n_pol):
                ptr[p] = (ptr[p] + counts[p]) % cap
        else:
            _, u, td = op
            sizes = buf.sizes
            if (sizes == 0).any():
                continue
            idx = np.floor(np.array(u) * sizes[:, None]).astype(np.int64)
            buf.update_priorities(idx, np.array(td))
            for p in range(n_pol):
                for i, t in zip(idx[p], td[p]):  # later entries overwrite earlier ones
                    model[p][int(i)] = (abs(t) + eps) ** alpha
                    max_p[p] = max(max_p[p], abs(t) + eps)
        check_trees(buf, model)
        np.testing.assert_allclose(buf.max_priority(), max_p, rtol=1e-15)
        if (buf.sizes > 0).all():
            b = buf.sample(7)
            assert (b.indices >= 0).all() and (b.indices < buf.sizes[:, None]).all()
            assert (np.take_along_axis(buf.leaf_priorities(), b.indices, 1) > 0).all()
            assert np.isfinite(b.weights).all() and (b.weights > 0).all() and (b.weights <= 1 + 1e-6).all()


# ---------------------------------------------------------------- checkpoints


def _filled_buffer(seed: int) -> MultiAgentPER:
    buf = MultiAgentPER(3, 12, OBS_SHAPE, np.float32, alpha=0.6, beta=0.5, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    pol = rng.integers(0, 3, size=40)
    pol[:3] = [0, 1, 2]
    add_rows(buf, pol, np.arange(40))
    for _ in range(3):
        b = buf.sample(8)
        buf.update_priorities(b.indices, rng.normal(size=b.indices.shape))
    return buf


def _assert_batches_equal(a: Batch, b: Batch) -> None:
    for name in ("obs", "actions", "rewards", "next_obs", "dones", "weights", "indices"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_state_dict_round_trip() -> None:
    src = _filled_buffer(10)
    sd = src.state_dict()
    rng_state = src.rng.bit_generator.state
    dst = MultiAgentPER(3, 12, OBS_SHAPE, np.float32, alpha=0.1, beta=0.9, rng=np.random.default_rng(99))
    dst.load_state_dict(sd)
    dst.rng.bit_generator.state = rng_state
    assert (dst.alpha, dst.beta, dst.eps) == (src.alpha, src.beta, src.eps)
    np.testing.assert_array_equal(dst.sizes, src.sizes)
    np.testing.assert_array_equal(dst.max_priority(), src.max_priority())
    for k, v in dst.state_dict().items():
        np.testing.assert_array_equal(v, sd[k], err_msg=k)
    _assert_batches_equal(src.sample(16), dst.sample(16))
    # pointers restored: the same adds and updates keep both in lockstep
    for buf in (src, dst):
        add_rows(buf, [2, 0, 2, 1], [50, 51, 52, 53])
        buf.update_priorities(np.zeros((3, 2), np.int64), np.ones((3, 2)))
    _assert_batches_equal(src.sample(16), dst.sample(16))


def test_state_dict_copy_is_detached_and_checked() -> None:
    src = _filled_buffer(20)
    sd = src.state_dict()
    saved = {k: v.copy() for k, v in sd.items()}
    add_rows(src, [0, 1, 2], [60, 61, 62])
    for k in sd:
        np.testing.assert_array_equal(sd[k], saved[k], err_msg=k)
    with pytest.raises(ValueError, match="lacks"):
        src.load_state_dict({k: v for k, v in sd.items() if k != "ptr"})
    other = MultiAgentPER(3, 12, (3, 2), np.float32)
    with pytest.raises(ValueError, match="obs"):
        other.load_state_dict(sd)
    # loading into an empty-enough buffer clears slots beyond the saved rows
    empty = MultiAgentPER(3, 12, OBS_SHAPE, np.float32)
    empty_sd = empty.state_dict()
    src.load_state_dict(empty_sd)
    np.testing.assert_array_equal(src.sizes, [0, 0, 0])
    assert src.nbytes == empty.nbytes


def test_nbytes_counts_allocations() -> None:
    buf = MultiAgentPER(4, 100, (5, 5), np.uint8)
    c = 128  # next power of two
    expected_min = 2 * 4 * 100 * 25 + 4 * 100 * (8 + 4 + 4) + 2 * 4 * 2 * c * 8
    assert expected_min <= buf.nbytes <= expected_min + 1024
