"""VecPursuitEnv must step like PettingZoo's pursuit game, game by game, for the same random draws.

Exactness: each batch game has a reference PettingZoo game whose ``np_random`` is a
:class:`ReplayRandom` fed with *our* draws (window starts, spawn cells, evader actions), so the
reference runs the library's own reset / step / remove / reward code on the same randomness. Spawn
cells are fed as the values of ``integers(lo, hi)``: PettingZoo accepts a cell only if it is feasible
by its own rule, otherwise it asks again and the replay (holding one value per agent) fails. Then
positions, observations, rewards and flags must be equal. Rewards are compared exactly: both sides
run the same float64 operations in the same order (module docstring), so any difference is a bug.

Statistics: with a random policy, episode returns and lengths of the batch (its own hash draws) and
of PettingZoo's env (PCG64) are compared with two-sample KS tests.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import pytest
import torch
from pettingzoo.sisl import pursuit_v5
from scipy import stats

from suPER.config import load_env_defaults
from suPER.envs.pursuit import PursuitEnv
from suPER.envs.vec_pursuit import PursuitDraws, VecPursuitEnv, _pairwise_sum

DEFAULT = load_env_defaults("pursuit")["env"]["kwargs"]


class ReplayRandom:
    """Stands in for PettingZoo's ``np_random``: returns queued values and checks how they are asked for."""

    def __init__(self) -> None:
        self.queue: deque[tuple[str, Any]] = deque()

    def uniform(self, low: float, high: float) -> float:
        kind, (lo, hi, v) = self.queue.popleft()
        assert kind == "uniform" and (low, high) == (lo, hi)
        return v

    def integers(self, low: int, high: int | None = None) -> int:
        kind, v = self.queue.popleft()  # IndexError: PettingZoo asked for more draws than we made
        if high is None:  # RandomPolicy.act: integers(n_actions)
            assert kind == "action" and low == 5
        else:  # feasible_position_exp: integers(lo, hi) for x, then for y
            assert kind == "cell" and low <= v < high, (kind, low, v, high)
        return int(v)


class RecordingDraws(PursuitDraws):
    """Our draws, kept so the test can replay them into the reference games."""

    def window_starts(self, games_G: torch.Tensor) -> torch.Tensor:
        self.last_window = super().window_starts(games_G)
        return self.last_window

    def evader_actions(self, t_E: torch.Tensor, n_slots: int, n_actions: int) -> torch.Tensor:
        self.last_actions = super().evader_actions(t_E, n_slots, n_actions)
        return self.last_actions


def _game(ref: Any) -> Any:
    return ref._game if isinstance(ref, PursuitEnv) else ref.unwrapped.env


def _ref_reset(ref: Any, rr: ReplayRandom) -> np.ndarray:
    game = _game(ref)
    game.np_random = rr
    if hasattr(game.evader_controller, "set_rng"):
        game.evader_controller.set_rng(rr)
    if isinstance(ref, PursuitEnv):
        return ref.reset(None)
    obs, _ = ref.reset()
    return np.stack([obs[k] for k in ref.possible_agents])


def _ref_step(ref: Any, act_N: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    if isinstance(ref, PursuitEnv):
        res = ref.step(act_N)
        return res.obs_NO, res.reward_N, bool(res.terminated_N[0]), bool(res.truncated_N[0])
    ids = ref.possible_agents
    o, r, te, tr, _ = ref.step({k: int(act_N[i]) for i, k in enumerate(ids)})
    return (np.stack([o[k] for k in ids]), np.array([r[k] for k in ids], dtype=np.float64).astype(np.float32),
            bool(te[ids[0]]), bool(tr[ids[0]]))


def _assert_same_state(env: VecPursuitEnv, refs: list[Any], games: list[int]) -> None:
    st = env.state()
    for e in games:
        game = _game(refs[e])
        pur = np.array([a.current_pos for a in game.pursuer_layer.allies])
        np.testing.assert_array_equal(st["pursuers_EN2"][e].numpy(), pur)
        alive = st["evader_alive_EM"][e].numpy()
        ev = np.array([a.current_pos for a in game.evader_layer.allies]).reshape(-1, 2)
        np.testing.assert_array_equal(st["evaders_EM2"][e].numpy()[alive], ev)
        assert int(st["t_E"][e]) == game.frames


def run_against_reference(kwargs: dict, num_games: int, steps: int, seed: int, horizon: int = 10**9,
                          reference: str = "vectorized") -> dict[str, int]:
    """Step a batch and one reference game per batch game on the same draws; assert equality every step.

    Finished games are reset (new seeds) on the next step, so resets inside the batch are covered.
    ``reference``: "parallel" = ``pursuit_v5.parallel_env``; "plain" = PettingZoo's ``Pursuit`` under our
    lean driver; "vectorized" = ``PursuitEnv()``, ~10x faster, which lets the test cover thousands of
    steps in seconds and is itself bit-identical to parallel_env (tests/envs/test_pursuit.py).

    Returns:
        counts of game-steps, terminations, truncations, evaders caught and resets seen.
    """
    draws = RecordingDraws(num_games, torch.device("cpu"))
    env = VecPursuitEnv(kwargs, num_games, horizon=horizon, draws=draws)
    refs = [pursuit_v5.parallel_env(**kwargs) if reference == "parallel"
            else PursuitEnv(kwargs, horizon=horizon, vectorized=reference == "vectorized") for _ in range(num_games)]
    rrs = [ReplayRandom() for _ in range(num_games)]
    cw = env.constraint_window
    rng = np.random.default_rng(seed)
    seen = {"steps": 0, "terminated": 0, "truncated": 0, "catches": 0, "resets": 0}

    def reset(games: list[int]) -> None:
        seeds = rng.integers(0, 2**40, len(games)).tolist()
        before = env._obs_ENO.clone()
        obs = env.reset(seeds, games).numpy()
        st = env.state()
        for j, e in enumerate(games):
            rr = rrs[e]
            for v in draws.last_window[j].tolist():
                rr.queue.append(("uniform", (0.0, 1.0 - cw, (1.0 - cw) * v)))
            for xy in [*st["pursuers_EN2"][e].tolist(), *st["evaders_EM2"][e].tolist()]:
                rr.queue.extend([("cell", xy[0]), ("cell", xy[1])])
            np.testing.assert_array_equal(obs[e], _ref_reset(refs[e], rr))
            assert not rr.queue, "PettingZoo's spawn used fewer draws than ours"
        others = sorted(set(range(num_games)) - set(games))
        np.testing.assert_array_equal(obs[others], before[others].numpy())
        _assert_same_state(env, refs, games)
        seen["resets"] += len(games)

    reset(list(range(num_games)))
    over = np.zeros(num_games, dtype=bool)
    for _ in range(steps):
        if over.any():
            reset(np.flatnonzero(over).tolist())
        act_EN = rng.integers(0, 5, (num_games, env.n_pursuers))
        left_before_E = env.state()["evader_alive_EM"].numpy().sum(1)
        res = env.step(torch.as_tensor(act_EN))
        alive_EM = env.state()["evader_alive_EM"].numpy()
        seen["catches"] += int((left_before_E - alive_EM.sum(1)).sum())
        acts_EM = None if env.freeze_evaders else draws.last_actions.numpy()
        obs_ENO, rew_EN = res.obs_ENO.numpy(), res.reward_EN.numpy()
        term_E, cut_E = res.terminated_EN.numpy().all(1), res.truncated_EN.numpy().all(1)
        assert (res.terminated_EN.numpy() == term_E[:, None]).all() and (res.truncated_EN.numpy() == cut_E[:, None]).all()
        np.testing.assert_array_equal(res.episode_over_E.numpy(), term_E | cut_E)
        np.testing.assert_array_equal(res.alive_EN.numpy(), np.repeat(~term_E[:, None], env.n_pursuers, 1))
        all_E = res.info["all_agent_reward_E"].numpy()
        for e in range(num_games):
            if acts_EM is not None:
                rrs[e].queue.extend(("action", a) for a in acts_EM[e][alive_EM[e]].tolist())
            obs, rew, te, tr = _ref_step(refs[e], act_EN[e])
            assert not rrs[e].queue, "PettingZoo moved fewer evaders than ours"
            np.testing.assert_array_equal(obs_ENO[e], obs)
            np.testing.assert_array_equal(rew_EN[e], rew)
            assert all_E[e] == pytest.approx(float(rew.astype(np.float64).sum()), abs=1e-5)
            assert (term_E[e], cut_E[e]) == (te, tr)
            seen["terminated"] += te
            seen["truncated"] += tr
        seen["steps"] += num_games
        _assert_same_state(env, refs, list(range(num_games)))
        over = term_E | cut_E
    return seen


SETTINGS = {
    # the paper's setting, cut short by the horizon
    "default": (dict(DEFAULT), 4, 45, 40),
    # few evaders on a small map: catches, removals and full terminations
    "catchable": (dict(n_pursuers=8, n_evaders=2, x_size=7, y_size=7, max_cycles=60, shared_reward=False), 16, 80,
                  10**9),
    "shared_even_obs": (dict(n_pursuers=5, n_evaders=4, x_size=8, y_size=9, max_cycles=40, shared_reward=True,
                             obs_range=6), 12, 70, 10**9),
    "n_catch_no_surround": (dict(n_pursuers=6, n_evaders=5, x_size=8, y_size=8, max_cycles=40, surround=False,
                                 n_catch=1, obs_range=5), 12, 70, 10**9),
    "n_catch2_frozen": (dict(n_pursuers=8, n_evaders=3, x_size=6, y_size=6, max_cycles=30, surround=False,
                             n_catch=2, freeze_evaders=True), 12, 60, 10**9),
    "rewards_window": (dict(n_pursuers=4, n_evaders=3, x_size=10, y_size=8, max_cycles=35, tag_reward=0.25,
                            catch_reward=2.0, urgency_reward=-0.375, constraint_window=0.6, obs_range=3,
                            shared_reward=True), 12, 70, 10**9),
    "many_pursuers": (dict(n_pursuers=11, n_evaders=6, x_size=12, y_size=12, max_cycles=45, shared_reward=True,
                           obs_range=9), 8, 60, 10**9),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_steps_like_pettingzoo_for_the_same_draws(name: str) -> None:
    kwargs, num_games, steps, horizon = SETTINGS[name]
    seen = run_against_reference(kwargs, num_games, steps, seed=len(name), horizon=horizon)
    assert seen["steps"] == num_games * steps
    assert seen["terminated"] + seen["truncated"] > 0, "no episode ended: in-batch resets not exercised"
    if name in ("catchable", "n_catch_no_surround"):
        assert seen["catches"] > 0 and seen["terminated"] > 0, seen


def test_steps_like_parallel_env_itself() -> None:
    """The same check against ``pursuit_v5.parallel_env`` (the full AEC + parallel wrapper chain)."""
    kwargs = dict(n_pursuers=8, n_evaders=2, x_size=7, y_size=7, max_cycles=40, shared_reward=True)
    seen = run_against_reference(kwargs, num_games=4, steps=50, seed=3, reference="parallel")
    assert seen["catches"] > 0 and seen["terminated"] + seen["truncated"] > 0


def test_steps_like_the_unmodified_pursuit_game() -> None:
    """And against PettingZoo's ``Pursuit`` class itself (no vectorised overrides), without surround."""
    kwargs = dict(n_pursuers=4, n_evaders=3, x_size=6, y_size=6, max_cycles=30, surround=False, n_catch=1)
    seen = run_against_reference(kwargs, num_games=6, steps=50, seed=4, reference="plain")
    assert seen["catches"] > 0 and seen["terminated"] + seen["truncated"] > 0


def test_finished_games_stay_over_until_reset() -> None:
    env = VecPursuitEnv(dict(DEFAULT), num_games=3, horizon=2)
    env.reset([1, 2, 3])
    env.step(torch.zeros(3, 8, dtype=torch.int64))
    env.reset([4], games=[1])
    res = env.step(torch.zeros(3, 8, dtype=torch.int64))
    assert res.episode_over_E.tolist() == [True, False, True]
    assert res.truncated_EN[[0, 2]].all() and not res.truncated_EN[1].any()
    res = env.step(torch.zeros(3, 8, dtype=torch.int64))
    assert res.episode_over_E.tolist() == [True, True, True]
    for e in (0, 2):  # over before this step: no transition
        assert not res.obs_ENO[e].any() and not res.reward_EN[e].any() and not res.alive_EN[e].any()
        assert not res.terminated_EN[e].any() and not res.truncated_EN[e].any()
    assert res.obs_ENO[1].any() and res.truncated_EN[1].all()


def test_reset_leaves_the_last_results_alone() -> None:
    """What a step returned stays as returned when games are reset afterwards (callers read it after resetting)."""
    env = VecPursuitEnv(dict(DEFAULT), num_games=2, horizon=1)
    env.reset([1, 2])
    res = env.step(torch.zeros(2, 8, dtype=torch.int64))
    kept = {k: v.clone() for k, v in vars(res).items() if isinstance(v, torch.Tensor)}
    env.reset([3], games=[0])
    assert kept and all(torch.equal(getattr(res, k), v) for k, v in kept.items())
    assert res.episode_over_E.tolist() == [True, True]


def test_episode_depends_only_on_its_seed() -> None:
    """Game 0 of a 1-game batch replays game 2 of a 4-game batch reset with the same seed."""
    a, b = VecPursuitEnv(dict(DEFAULT), 1), VecPursuitEnv(dict(DEFAULT), 4)
    oa, ob = a.reset([7]), b.reset([1, 2, 7, 3])
    np.testing.assert_array_equal(oa[0].numpy(), ob[2].numpy())
    assert not torch.equal(ob[0], ob[2])
    rng = np.random.default_rng(0)
    for _ in range(30):
        act = rng.integers(0, 5, (4, 8))
        ra, rb = a.step(torch.as_tensor(act[2:3])), b.step(torch.as_tensor(act))
        np.testing.assert_array_equal(ra.obs_ENO[0].numpy(), rb.obs_ENO[2].numpy())
        np.testing.assert_array_equal(ra.reward_EN[0].numpy(), rb.reward_EN[2].numpy())


def test_evader_draws_made_in_blocks_are_the_hash_of_their_cycle() -> None:
    """``PursuitDraws`` hashes evader actions BLOCK cycles ahead; every step's actions must still be the direct
    hash of each game's current cycle, across block boundaries and for games reset in the middle of a block
    (staggered resets: horizons end mid-block, games reset one or several at a time)."""
    e = 5
    draws = RecordingDraws(e, torch.device("cpu"))
    env = VecPursuitEnv(dict(DEFAULT), e, horizon=23, draws=draws)  # 23: ends fall at every block offset
    rng = np.random.default_rng(3)
    env.reset(rng.integers(0, 2**40, e).tolist())
    checked = 0
    for step in range(3 * PursuitDraws.BLOCK + 7):
        t_E, over_E = env.state()["t_E"], env.state()["over_E"]
        env.step(torch.as_tensor(rng.integers(0, 5, (e, 8))))
        games = torch.nonzero(~over_E).squeeze(1)
        want = draws.evader_actions_at(games, t_E[games][:, None], env.n_evaders, env.n_actions)[:, 0]
        torch.testing.assert_close(draws.last_actions[games], want, rtol=0, atol=0)
        checked += games.numel()
        if step % 5 == 4:  # reset one finished game now and the rest later: resets land at many block offsets
            done = torch.nonzero(env.state()["over_E"]).squeeze(1).tolist()
            if done:
                env.reset(rng.integers(0, 2**40, 1).tolist(), games=done[:1])
        if step % 11 == 10:
            done = torch.nonzero(env.state()["over_E"]).squeeze(1).tolist()
            if done:
                env.reset(rng.integers(0, 2**40, len(done)).tolist(), games=done)
    assert checked > 2 * PursuitDraws.BLOCK * e // 2


def test_rejects_bad_input() -> None:
    env = VecPursuitEnv(dict(DEFAULT), 2)
    env.reset([0, 1])
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="actions must lie"):
        env.step(torch.full((2, 8), 5))
    with pytest.raises(ValueError, match="seeds"):
        env.reset([0], games=[0, 1])
    with pytest.raises(ValueError, match="does not know"):
        VecPursuitEnv(dict(DEFAULT, bogus=1), 2)
    with pytest.raises(ValueError, match="free cell"):  # PettingZoo would loop forever here
        VecPursuitEnv(dict(n_pursuers=2, n_evaders=40, x_size=5, y_size=5), 2).reset([0, 1])


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 15, 16, 17, 40, 300])
def test_pairwise_sum_matches_numpy_mean_bitwise(n: int) -> None:
    x = np.random.default_rng(n).normal(size=(64, n)) * 1e3
    np.testing.assert_array_equal((_pairwise_sum(torch.as_tensor(x)) / n).numpy(), x.mean(axis=1))


def _episodes_batched(kwargs: dict, episodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    env = VecPursuitEnv(kwargs, episodes)
    env.reset(list(range(seed, seed + episodes)))
    g = torch.Generator().manual_seed(seed)
    ret_E = torch.zeros(episodes, dtype=torch.float64)
    len_E = torch.zeros(episodes, dtype=torch.int64)
    over_E = torch.zeros(episodes, dtype=torch.bool)
    while not over_E.all():
        res = env.step(torch.randint(0, 5, (episodes, env.n_pursuers), generator=g))
        ret_E += torch.where(over_E, 0.0, res.reward_EN.double().sum(1))
        len_E += (~over_E).long()
        over_E = res.episode_over_E
    return ret_E.numpy(), len_E.numpy()


def _episodes_pettingzoo(kwargs: dict, episodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    env = PursuitEnv(kwargs)  # bit-identical to parallel_env (tests/envs/test_pursuit.py), and faster
    rng = np.random.default_rng(seed)
    rets, lens = [], []
    env.reset(seed)
    for _ in range(episodes):
        ret, n, over = 0.0, 0, False
        while not over:
            res = env.step(rng.integers(0, 5, env.spec.n_agents))
            ret, n, over = ret + float(res.reward_N.astype(np.float64).sum()), n + 1, res.episode_over
        rets.append(ret)
        lens.append(n)
        env.reset()
    return np.array(rets), np.array(lens)


STATS = {
    # surround rule; the perturbed game has one evader fewer
    "surround": (dict(n_pursuers=8, n_evaders=2, x_size=6, y_size=6, max_cycles=40, shared_reward=False),
                 dict(n_evaders=1)),
    # n_catch rule; the perturbed game needs 2 pursuers on the evader's cell instead of 1
    "n_catch": (dict(n_pursuers=5, n_evaders=3, x_size=6, y_size=6, max_cycles=40, shared_reward=False,
                     surround=False, n_catch=1), dict(n_catch=2)),
}


@pytest.mark.parametrize("name", sorted(STATS))
def test_random_policy_return_and_length_distributions_match_pettingzoo(name: str) -> None:
    """KS two-sample tests over 250 episodes each; significance 0.001 per statistic.

    Both samples come from fixed seeds, so the test is deterministic; the level says how unlikely a
    failure would be if the distributions were equal. The same test must reject a perturbed game,
    so it has the power to see a wrong rule.
    """
    kwargs, perturbed = STATS[name]
    ret_b, len_b = _episodes_batched(kwargs, 250, seed=1)
    ret_p, len_p = _episodes_pettingzoo(kwargs, 250, seed=2)
    assert (len_p < kwargs["max_cycles"]).mean() > 0.15, "too few terminations: lengths carry no signal"
    assert stats.ks_2samp(ret_b, ret_p).pvalue > 1e-3
    assert stats.ks_2samp(len_b, len_p).pvalue > 1e-3
    ret_w, len_w = _episodes_batched(dict(kwargs, **perturbed), 250, seed=1)
    assert min(stats.ks_2samp(ret_w, ret_p).pvalue, stats.ks_2samp(len_w, len_p).pvalue) < 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    kwargs = dict(n_pursuers=8, n_evaders=4, x_size=8, y_size=8, max_cycles=50, shared_reward=True)
    cpu, gpu = VecPursuitEnv(kwargs, 64), VecPursuitEnv(kwargs, 64, device="cuda")
    seeds = list(range(64))
    np.testing.assert_array_equal(cpu.reset(seeds).numpy(), gpu.reset(seeds).cpu().numpy())
    rng = np.random.default_rng(0)
    for _ in range(60):
        act = torch.as_tensor(rng.integers(0, 5, (64, 8)))
        rc, rg = cpu.step(act), gpu.step(act.cuda())
        assert rg.obs_ENO.device.type == "cuda"
        for f in ("obs_ENO", "reward_EN", "terminated_EN", "truncated_EN", "alive_EN", "episode_over_E"):
            np.testing.assert_array_equal(getattr(rc, f).numpy(), getattr(rg, f).cpu().numpy())


def test_registered_as_the_batched_pursuit() -> None:
    from suPER.config import EnvConfig
    from suPER.envs import make_batched_env

    env = make_batched_env(EnvConfig(name="pursuit", kwargs=dict(DEFAULT), horizon=9), num_games=2)
    assert isinstance(env, VecPursuitEnv) and env.horizon == 9 and env.num_games == 2
    assert env.spec == PursuitEnv(dict(DEFAULT)).spec
    with pytest.raises(ValueError, match="batched env exists for pursuit"):
        make_batched_env(EnvConfig(name="battle"), num_games=2)
