"""UniformReplay (MADDPG's joint transitions, QMIX's episodes): ring order, uniform sampling, state round trip."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from suPER.replay.uniform import UniformReplay


def buffer(capacity: int, seed: int = 0) -> UniformReplay:
    return UniformReplay(capacity, {"x": ((2,), np.float32), "a": ((), np.int64)}, np.random.default_rng(seed))


def test_the_ring_keeps_the_newest_rows_in_place_of_the_oldest() -> None:
    buf = buffer(5)
    for start in (0, 3, 6):  # 9 rows into 5 slots, in batches of 3 that wrap around the end
        rows = np.arange(start, start + 3)
        buf.add(x=np.stack([rows, -rows], axis=1), a=rows)
    assert len(buf) == 5 and buf.pos == 9 % 5
    assert sorted(buf.data["a"].tolist()) == [4, 5, 6, 7, 8]  # rows 0-3 overwritten, oldest first
    np.testing.assert_array_equal(buf.data["x"][:, 1], -buf.data["a"].astype(np.float32))  # fields stay aligned
    assert buf.data["x"].dtype == np.float32 and buf.data["a"].dtype == np.int64  # cast to the field's dtype


def test_sampling_is_uniform_over_the_rows_held() -> None:
    """40,000 draws over 8 held rows: a chi-square test does not reject uniformity (fixed seed), and only held rows
    come out."""
    buf = buffer(16, seed=3)
    buf.add(x=np.zeros((8, 2)), a=np.arange(8))
    drawn = buf.sample(40_000)["a"]
    assert set(drawn.tolist()) == set(range(8))
    assert stats.chisquare(np.bincount(drawn, minlength=8)).pvalue > 0.001


def test_state_round_trip_continues_the_same_draws() -> None:
    buf = buffer(6, seed=1)
    buf.add(x=np.ones((4, 2)), a=np.arange(4))
    state = buf.state_dict()
    expected = buf.sample(10)["a"]
    other = buffer(6, seed=99)
    other.load_state_dict(state)
    assert len(other) == 4 and other.pos == 4
    np.testing.assert_array_equal(other.sample(10)["a"], expected)


def test_bad_use_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        buffer(0)
    buf = buffer(3)
    with pytest.raises(ValueError, match="empty buffer"):
        buf.sample(1)
    with pytest.raises(KeyError, match="expected fields"):
        buf.add(x=np.zeros((1, 2)))
