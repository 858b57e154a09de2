"""SUPER inside the native trainer: what a fragment puts into whose buffer, with which priority."""

from __future__ import annotations

import numpy as np
import pytest

from suPER.core.relay import InsertionPolicy, Relay
from suPER.native.fragment import Fragment, relay_fragment, store_fragment
from suPER.replay import MultiAgentPER
from suPER.resolve import resolve

N, T, OBS = 3, 2, (2, 2, 1)
ALPHA, EPS = 0.6, 1e-6
PLAIN = InsertionPolicy("max", EPS, sender_side=False)


def make_fragment(valid: np.ndarray | None = None) -> Fragment:
    """Rows whose reward encodes (t, n) uniquely: reward = 10 * n + t."""
    frag = Fragment.empty(T, N, OBS)
    t, n = np.meshgrid(np.arange(T), np.arange(N), indexing="ij")
    frag.reward_TN[:] = 10 * n + t
    frag.obs_TNO[:] = (10 * n + t)[..., None, None, None]
    frag.next_obs_TNO[:] = frag.obs_TNO + 1
    frag.action_TN[:] = n
    frag.valid_TN[:] = True if valid is None else valid
    return frag


def buffer_rows(buf: MultiAgentPER, p: int) -> tuple[list[float], np.ndarray]:
    """(rewards, stored leaf priorities p^alpha) of policy p's filled slots."""
    size = int(buf.sizes[p])
    state = buf.state_dict()
    return state["rewards"][p, :size].tolist(), buf.leaf_priorities()[p, :size]


@pytest.mark.parametrize("rule", ["max", "sender", "legacy"])
def test_bandwidth_one_fills_each_buffer_with_the_others_rows(rule: str) -> None:
    frag = make_fragment()
    td_NT = np.arange(1, N * T + 1, dtype=np.float64).reshape(N, T) / 10  # |td| of (n, t) = (n*T + t + 1) / 10
    buf = MultiAgentPER(N, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    store_fragment(buf, frag, np.arange(N), None, PLAIN)
    relay = Relay(["a_0", "a_1", "a_2"], mode="quantile", bandwidth=1.0,
                  insertion=InsertionPolicy(rule, EPS, sender_side=False))
    plan = relay_fragment(buf, frag, relay, td_NT)
    assert plan.n_relayed == N * T * (N - 1)
    for r in range(N):
        rewards, prio = buffer_rows(buf, r)
        own = [10 * r + t for t in range(T)]
        others = sorted(10 * n + t for n in range(N) if n != r for t in range(T))
        assert rewards[:T] == own  # own rows first, untouched
        assert sorted(rewards[T:]) == others  # exactly the teammates' fresh rows, each once
        relayed = np.array(rewards[T:])
        n_src, t_src = (relayed // 10).astype(int), (relayed % 10).astype(int)
        if rule == "max":
            expected = np.ones(len(relayed))  # running max priority, 1.0 at start
        elif rule == "sender":
            expected = (td_NT[n_src, t_src] + EPS) ** ALPHA
        else:  # legacy without sender-side prioritization: constant 1.0
            expected = np.ones(len(relayed))
        np.testing.assert_allclose(prio[T:], expected)
    # relayed copies carry the sender's obs / next obs / action
    state = buf.state_dict()
    for r in range(N):
        size = int(buf.sizes[r])
        np.testing.assert_array_equal(state["obs"][r, :size, 0, 0, 0], state["rewards"][r, :size])
        np.testing.assert_array_equal(state["actions"][r, :size], state["rewards"][r, :size] // 10)


def test_legacy_sender_side_priority_is_first_row_of_each_receivers_chunk() -> None:
    frag = make_fragment()
    td_NT = np.array([[0.5, 0.1], [0.7, 0.2], [0.9, 0.3]])
    buf = MultiAgentPER(N, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    legacy = InsertionPolicy("legacy", EPS, sender_side=True)
    store_fragment(buf, frag, np.arange(N), td_NT, legacy)
    for r in range(N):  # own rows: the agent's first-row |td| + eps for the whole fragment
        np.testing.assert_allclose(buffer_rows(buf, r)[1], (td_NT[r, 0] + EPS) ** ALPHA)
    relay_fragment(buf, frag, Relay(["a", "b", "c"], bandwidth=1.0, insertion=legacy), td_NT)
    for r in range(N):
        rewards, prio = buffer_rows(buf, r)
        first_sender = min(n for n in range(N) if n != r)  # chunk order: senders ascending, rows ascending
        np.testing.assert_allclose(prio[T:], (td_NT[first_sender, 0] + EPS) ** ALPHA)


def test_bandwidth_zero_buffers_equal_plain_dqn() -> None:
    frag = make_fragment()
    td_NT = np.random.default_rng(1).random((N, T))
    plain = MultiAgentPER(N, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    shared = MultiAgentPER(N, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    store_fragment(plain, frag, np.arange(N), None, PLAIN)
    store_fragment(shared, frag, np.arange(N), None, PLAIN)
    plan = relay_fragment(shared, frag, Relay(["a", "b", "c"], bandwidth=0.0), td_NT)
    assert plan.n_relayed == 0
    for key, value in plain.state_dict().items():
        np.testing.assert_array_equal(value, shared.state_dict()[key], err_msg=key)


def test_dead_agent_neither_sends_nor_receives() -> None:
    valid = np.ones((T, N), dtype=bool)
    valid[:, 2] = False  # agent 2 dead for the whole fragment
    frag = make_fragment(valid)
    buf = MultiAgentPER(N, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    store_fragment(buf, frag, np.arange(N), None, PLAIN)
    relay_fragment(buf, frag, Relay(["a", "b", "c"], bandwidth=1.0), np.ones((N, T)))
    assert buf.sizes.tolist() == [2 * T, 2 * T, 0]


def test_parameter_sharing_stores_all_agents_in_one_buffer() -> None:
    frag = make_fragment()
    buf = MultiAgentPER(1, 100, OBS, np.float32, alpha=ALPHA, eps=EPS, rng=np.random.default_rng(0))
    store_fragment(buf, frag, np.zeros(N, dtype=np.int64), None, PLAIN)
    assert sorted(buffer_rows(buf, 0)[0]) == sorted(10 * n + t for n in range(N) for t in range(T))


def test_same_seed_same_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two runs with the same seed write identical metrics (timing columns aside)."""
    from suPER.native.dqn import train
    from suPER.runs import RunFolder, read_metrics

    overrides = {"env.kwargs.n_pursuers": 3, "env.kwargs.n_evaders": 3, "env.kwargs.x_size": 8,
                 "env.kwargs.y_size": 8, "env.horizon": 50, "dqn.model": "mlp", "dqn.learning_starts": 50,
                 "run.num_timesteps": 300, "run.eval_interval": 100, "run.eval_episodes": 2, "relay.enabled": True,
                 "relay.mode": "stochastic", "relay.bandwidth": 0.3, "run.seed": 4}
    for name in ("a", "b"):
        train(resolve("pursuit", overrides=overrides), RunFolder(tmp_path / name))
    a, b = (read_metrics(tmp_path / n / "metrics.csv") for n in ("a", "b"))
    for col in a:
        if col not in ("env_steps_per_sec", "wall_time_s"):
            np.testing.assert_array_equal(a[col], b[col], err_msg=col)
    assert a["relayed_rows_total"][-1] > 0


def test_topk_run_relays_exactly_k_rows_per_sender_per_fragment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--super-mode topk --set relay.params.k=3`` on the native trainer: every (always alive) pursuer sends 3 rows
    a fragment."""
    from suPER.native.dqn import train
    from suPER.runs import RunFolder, read_metrics

    k = 3
    overrides = {"env.kwargs.n_pursuers": 3, "env.kwargs.n_evaders": 3, "env.kwargs.x_size": 8,
                 "env.kwargs.y_size": 8, "env.horizon": 50, "dqn.model": "mlp", "dqn.learning_starts": 50,
                 "run.num_timesteps": 200, "run.eval_interval": 100, "run.eval_episodes": 1, "relay.enabled": True,
                 "relay.mode": "topk", "relay.params.k": k, "relay.bandwidth": 0.5, "run.seed": 2}
    cfg = resolve("pursuit", overrides=overrides)
    train(cfg, RunFolder(tmp_path / "run"))
    m = read_metrics(tmp_path / "run" / "metrics.csv")
    T, n = cfg.dqn.rollout_fragment_length, 3
    # an evaluation runs at the fragment's last env step, before that fragment's relay phase
    fragments = np.asarray(m["env_steps"][1:]) // T - 1
    np.testing.assert_array_equal(m["relayed_rows_total"][1:], fragments * n * k * (n - 1))
    np.testing.assert_allclose(m["fraction_shared_mean"][1:], k / T, rtol=1e-12)
