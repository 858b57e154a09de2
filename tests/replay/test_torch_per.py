"""TorchPER (replay on a torch device) against MultiAgentPER: the same rows, weights and indices from the same draws.

Every test runs on the CPU; the ``gpu``-marked variants repeat the equality on CUDA when there is one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from suPER.arrays import to_numpy
from suPER.core.relay import InsertionPolicy, Relay
from suPER.native.fragment import Fragment, relay_fragment, store_fragment
from suPER.replay import CompactPER, MultiAgentPER, load_replay_state
from suPER.replay.torch_per import TorchPER

OBS_SHAPE = (3, 3, 2)
P, CAPACITY, T, B = 3, 40, 6, 16

TREE_RTOL = 1e-13
"""Tree values are ``p ** alpha``: numpy's and torch's float64 ``pow`` may differ in the last bits (see
tests/replay/test_per.py POW_RTOL); sums, minima, copies and indices are exact."""

WEIGHT_RTOL = 1e-6
"""float32 weights from those float64 ratios: equal but for a last-bit rounding flip."""

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


def fragment(rng: np.random.Generator) -> Fragment:
    """A fragment of T steps for P agents: random uint8-valued frames, dones (episode ends) and dead agents."""
    frag = Fragment.empty(T, P, OBS_SHAPE)
    frag.obs_TNO[...] = rng.integers(0, 256, frag.obs_TNO.shape)
    frag.next_obs_TNO[...] = rng.integers(0, 256, frag.obs_TNO.shape)
    frag.action_TN[...] = rng.integers(0, 5, (T, P))
    frag.reward_TN[...] = rng.normal(size=(T, P))
    frag.done_TN[...] = rng.random((T, P)) < 0.2
    frag.valid_TN[...] = rng.random((T, P)) < 0.8
    return frag


def assert_same_batch(a: Any, b: Any) -> None:
    for f in ("obs", "actions", "rewards", "next_obs", "dones", "indices"):
        np.testing.assert_array_equal(to_numpy(getattr(a, f)), to_numpy(getattr(b, f)), err_msg=f)
    np.testing.assert_allclose(to_numpy(a.weights), to_numpy(b.weights), rtol=WEIGHT_RTOL)


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        if k in ("sum_tree", "min_tree"):
            np.testing.assert_allclose(a[k], b[k], rtol=TREE_RTOL, err_msg=k)
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["max", "sender", "legacy"])
def test_same_rows_weights_and_indices_as_the_numpy_buffer(device: str, rule: str) -> None:
    """Fragments stored and relayed (SUPER quantile, selected on the device), sampled and re-prioritised by both
    buffers from equally seeded generators: row for row the same, through ring wrap-around."""
    host = MultiAgentPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(5))
    dev = TorchPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(5), device=device)
    insertion = InsertionPolicy(rule, 1e-6, sender_side=True)  # legacy: own rows at the first row's |td| + eps
    relays = [Relay(["a", "b", "c"], "quantile", 0.3, window=10, insertion=insertion, device=d) for d in (None, device)]
    policy_of_agent = np.arange(P)
    rng = np.random.default_rng(0)
    for _ in range(12):  # 12 x ~14 own rows + relayed copies > capacity 40: every ring wraps
        frag = fragment(rng)
        td_NT = rng.exponential(size=(P, T))
        legacy = rule == "legacy"
        store_fragment(host, frag, policy_of_agent, td_NT if legacy else None, insertion)
        store_fragment(dev, _on(frag, device), policy_of_agent,
                       torch.as_tensor(td_NT, device=device) if legacy else None, insertion)
        plan_h = relay_fragment(host, frag, relays[0], td_NT)
        plan_d = relay_fragment(dev, _on(frag, device), relays[1], torch.as_tensor(td_NT, device=device))
        np.testing.assert_array_equal(plan_h.selected_NT, plan_d.selected_NT)
        np.testing.assert_array_equal(host.sizes, dev.sizes)
        a, b = host.sample(B), dev.sample(B)
        assert_same_batch(a, b)
        td = rng.normal(size=(P, B))
        td[:, 1] = td[:, 0] * 3  # a slot drawn twice gets two priorities: the last one wins in both
        idx = a.indices.copy()
        idx[:, 1] = idx[:, 0]
        host.update_priorities(idx, td)
        dev.update_priorities(torch.as_tensor(idx, device=device), torch.as_tensor(td, device=device))
    assert plan_h.n_relayed > 0 and host.sizes.tolist() == [CAPACITY] * P
    assert_same_state(host.state_dict(), dev.state_dict())
    np.testing.assert_allclose(host.max_priority(), dev.max_priority(), rtol=0)
    sd = dev.state_dict()  # the device trees' own invariant, exactly: each internal node is its children's sum / min
    s, m = to_numpy(sd["sum_tree"]), to_numpy(sd["min_tree"])
    internal = np.arange(1, s.shape[1] // 2)
    np.testing.assert_array_equal(s[:, internal], s[:, 2 * internal] + s[:, 2 * internal + 1])
    np.testing.assert_array_equal(m[:, internal], np.minimum(m[:, 2 * internal], m[:, 2 * internal + 1]))


def _on(frag: Fragment, device: str) -> Fragment:
    """The same fragment with its observations as tensors on ``device`` (pursuit's vectorized env there)."""
    out = Fragment.empty(T, P, OBS_SHAPE, device=device)
    out.obs_TNO[...] = torch.as_tensor(frag.obs_TNO)
    out.next_obs_TNO[...] = torch.as_tensor(frag.next_obs_TNO)
    out.action_TN, out.reward_TN, out.done_TN, out.valid_TN = frag.action_TN, frag.reward_TN, frag.done_TN, frag.valid_TN
    return out


def filled(buf: Any, seed: int = 1, rows: int = 50, priority: bool = False) -> Any:
    rng = np.random.default_rng(seed)
    pol = np.r_[np.arange(P), rng.integers(0, P, rows - P)]
    obs = rng.integers(0, 256, (rows, *OBS_SHAPE)).astype(np.uint8)
    prio = rng.random(rows) + 0.1 if priority else None
    buf.add(pol, obs, rng.integers(0, 5, rows), rng.normal(size=rows), obs[::-1].copy(), rng.random(rows) < 0.3,
            priority_K=prio, stream_K=pol)
    return buf


def test_injected_uniforms_and_a_device_generator() -> None:
    """``uniform_PB`` replaces the generator's draws (the numpy buffer's numbers from its generator state);
    a ``torch.Generator`` draws on the device, reproducibly from its state."""
    host = filled(MultiAgentPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(9)), priority=True)
    dev = filled(TorchPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=torch.Generator().manual_seed(3)), priority=True)
    u = np.random.default_rng(9).random((P, B))
    assert_same_batch(host.sample(B), dev.sample(B, uniform_PB=u))
    state = dev.rng.get_state()
    first = dev.sample(B)
    dev.rng.set_state(state)
    again = dev.sample(B, uniform_PB=torch.rand((P, B), generator=dev.rng, dtype=torch.float64))
    assert torch.equal(first.indices, again.indices)


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoints_load_across_the_two_buffers_and_the_compact_layout(device: str) -> None:
    """numpy -> torch, torch -> numpy and compact -> torch states give the same buffer (the same next batch)."""
    host = filled(MultiAgentPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(2)))
    compact = filled(CompactPER(P, CAPACITY, OBS_SHAPE, np.uint8, n_streams=P, rng=np.random.default_rng(2)))
    host.update_priorities(host.sample(B).indices, np.arange(P * B, dtype=np.float64).reshape(P, B))
    from_host = TorchPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(4), device=device)
    load_replay_state(from_host, host.state_dict())
    assert_same_state(host.state_dict(), from_host.state_dict())
    back = MultiAgentPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(4))
    load_replay_state(back, {k: torch.as_tensor(v) for k, v in from_host.state_dict().items()})  # as torch.load gives
    host.rng = np.random.default_rng(4)
    batch = host.sample(B)
    assert_same_batch(batch, from_host.sample(B))
    assert_same_batch(batch, back.sample(B))
    from_compact = TorchPER(P, CAPACITY, OBS_SHAPE, np.uint8, device=device)
    load_replay_state(from_compact, compact.state_dict())
    assert_same_state(compact.plain_state_dict(), from_compact.state_dict())
    with pytest.raises(ValueError, match="state 'obs' has"):
        TorchPER(P, CAPACITY, (4,), np.uint8, device=device).load_state_dict(host.state_dict())


def test_input_validation_and_superseded_rows() -> None:
    """The numpy buffer's checks, and a call that gives one policy more than its capacity keeps the newest rows."""
    dev = TorchPER(2, 4, (2,), np.float32)
    with pytest.raises(ValueError, match="hold no rows"):
        dev.sample(2)
    with pytest.raises(ValueError, match="policy_K must lie"):
        dev.add(np.array([2]), np.zeros((1, 2)), np.zeros(1), np.zeros(1), np.zeros((1, 2)), np.zeros(1))
    host = MultiAgentPER(2, 4, (2,), np.float32, rng=np.random.default_rng(0))
    dev.rng = np.random.default_rng(0)
    pol = np.array([0] * 6 + [1])
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    args = (pol, obs, np.arange(7), np.arange(7, dtype=np.float32), obs + 100, np.zeros(7))
    np.testing.assert_array_equal(host.add(*args), dev.add(*args))  # the first two rows of policy 0: -1
    assert_same_batch(host.sample(8), dev.sample(8))
    with pytest.raises(ValueError, match="out of range"):
        dev.update_priorities(torch.tensor([[0], [1]]), torch.ones(2, 1))
    with pytest.raises(ValueError, match="finite"):
        dev.update_priorities(torch.tensor([[0], [0]]), torch.tensor([[np.nan], [1.0]]))


def test_split_views_sample_and_update_as_one_buffer() -> None:
    """A pack's runs as views of one buffer: each view is an independent buffer (its own rows, generator and
    checkpoint), and one sample / update of the whole buffer with the views' draws concatenated is theirs."""
    whole = TorchPER(2 * P, CAPACITY, OBS_SHAPE, np.uint8)
    parts = whole.split(2, [np.random.default_rng(1), np.random.default_rng(2)])
    alone = [TorchPER(P, CAPACITY, OBS_SHAPE, np.uint8, rng=np.random.default_rng(s)) for s in (1, 2)]
    for seed, (part, ref) in enumerate(zip(parts, alone)):
        filled(part, seed=10 + seed, priority=True)
        filled(ref, seed=10 + seed, priority=True)
    assert whole.sizes.tolist() == [*parts[0].sizes, *parts[1].sizes]
    u = [np.random.default_rng(7 + i).random((P, B)) for i in range(2)]
    batch = whole.sample(B, uniform_PB=np.concatenate(u))
    for i, ref in enumerate(alone):
        one = ref.sample(B, uniform_PB=u[i])
        for f in ("obs", "actions", "rewards", "indices", "weights"):
            assert torch.equal(getattr(batch, f)[i * P:(i + 1) * P], getattr(one, f)), f
    td = torch.rand((2 * P, B), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    whole.update_priorities(batch.indices, td)
    for i, ref in enumerate(alone):
        ref.update_priorities(batch.indices[i * P:(i + 1) * P], td[i * P:(i + 1) * P])
        assert_same_state(ref.state_dict(), parts[i].state_dict())
    assert_same_batch(alone[1].sample(B), parts[1].sample(B))
