"""LockstepBatch and batched evaluation: a batch of E games plays exactly the episodes its adapter plays alone.

Policies here are real networks in float64: a float32 forward over E games rounds differently from one
over one game (oneDNN/BLAS pick other kernels by batch size, ~1e-5), which can flip a greedy argmax at a
near-tie; in float64 the episodes must agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from suPER import config as C
from suPER.envs import opponent_env_names
from suPER.envs.batched import LockstepBatch
from suPER.evaluation import episode_seeds, evaluate_episodes, play_episodes
from suPER.models import BatchedQNet
from suPER.opponents import make_batch, make_env
from suPER.resolve import resolve


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the shared 2-core machine spin-waits with more (docs/design.md)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def greedy_team(spec, seed: int = 0):
    """A DQN-like batched greedy act over E games with one float64 net per learner."""
    torch.manual_seed(seed)
    net = BatchedQNet(spec.n_agents, spec.obs_shape, spec.n_actions).double().eval()
    calls = []

    @torch.no_grad()
    def act(obs_ENO, alive_EN):
        calls.append(obs_ENO.shape[0])
        q = net(torch.as_tensor(obs_ENO).transpose(0, 1))
        return q.argmax(-1).T.numpy()

    return act, calls


def env_cfg(name: str, opponent: str, horizon: int) -> C.EnvConfig:
    return resolve(name, "ddqn", named={"env.opponent": opponent, "env.horizon": horizon}).env


def assert_same(a, b):
    for field in ("agent_return_KN", "all_agent_return_K", "opponent_return_K", "length_K", "team_alive_K",
                  "opponent_alive_K"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


@pytest.mark.parametrize("name,opponent", [*((n, "pretrained") for n in opponent_env_names()), ("battle", "random")])
def test_magent_batched_equals_sequential(name, opponent):
    cfg = env_cfg(name, opponent, horizon=30)
    seeds = episode_seeds(11, 3, 5)
    single = make_env(cfg, seed=7)
    batch = make_batch(cfg, 3, seed=7)  # 5 episodes in waves of 3 (the second wave leaves a game idle)
    try:
        if opponent == "pretrained":
            single.opponent.net.double()
            batch.games[0].opponent.net.double()  # shared by every game of the batch
            assert batch.batches_opponents
            assert all(g.opponent.net is batch.games[0].opponent.net for g in batch.games)
        act, calls = greedy_team(single.spec)
        seq = play_episodes(single, act, seeds)
        n_seq = len(calls)
        bat = play_episodes(batch, act, seeds)
    finally:
        single.close()
        batch.close()
    assert_same(seq, bat)
    assert set(calls[:n_seq]) == {1} and set(calls[n_seq:]) == {3}
    assert len(calls) - n_seq == seq.length_K[:3].max() + seq.length_K[3:].max()  # one act call per wave step
    if opponent == "random":  # reseeded by each episode's seed (battle's start is fixed: greedy play is not)
        assert len(set(seq.agent_return_KN.sum(1).tolist())) > 1


def test_pursuit_batched_equals_sequential_and_seeds_decide():
    cfg = resolve("pursuit", "ddqn", named={"env.horizon": 60}).env
    seeds = episode_seeds(5, 0, 4)
    single = make_env(cfg)
    batch = LockstepBatch(lambda g: make_env(cfg), 4)
    try:
        act, _ = greedy_team(single.spec, seed=1)
        seq = play_episodes(single, act, seeds)
        bat = play_episodes(batch, act, seeds)
        again = play_episodes(batch, act, seeds[::-1])  # each game's episode depends only on its seed
    finally:
        single.close()
        batch.close()
    assert_same(seq, bat)
    np.testing.assert_array_equal(again.agent_return_KN, seq.agent_return_KN[::-1])
    assert evaluate_episodes(single, act, []).episodes == 0


def test_finished_games_stay_over():
    cfg = env_cfg("battle", "random", horizon=5)
    batch = make_batch(cfg, 2, seed=0)
    try:
        batch.reset([1], games=[0])  # game 1 never started
        n = batch.spec.n_agents
        for t in range(5):
            res = batch.step(np.zeros((2, n), dtype=np.int64))
            assert not res.episode_over_E[0] or t == 4
            assert res.episode_over_E[1] and not res.alive_EN[1].any() and not res.obs_ENO[1].any()
            assert res.reward_EN[1].sum() == 0 and res.info["all_agent_reward_E"][1] == 0
        res = batch.step(np.zeros((2, n), dtype=np.int64))
        assert res.episode_over_E.all() and not res.obs_ENO.any() and not res.alive_EN.any()
    finally:
        batch.close()


def test_episode_seeds_rule():
    s = episode_seeds(1234, 7, 20)
    assert s == episode_seeds(1234, 7, 20) and len(set(s)) == 20
    assert s[:5] == episode_seeds(1234, 7, 5)  # K does not change the first seeds
    assert not set(s) & set(episode_seeds(1234, 8, 20)) and not set(s) & set(episode_seeds(1235, 7, 20))
    assert s == [int(x) for x in np.random.SeedSequence([1234, 7]).generate_state(20)]
