"""BattleEnv / AdversarialPursuitEnv: spec, death handling, truncation, padding, seeding."""

from __future__ import annotations

import numpy as np
import pytest
import supersuit as ss
from magent2.environments import adversarial_pursuit_v4, battle_v4

from suPER.config import EnvConfig, load_env_defaults
from suPER.envs import build_adapter, env_info
from suPER.envs.base import RandomOpponent
from suPER.envs.magent import AdversarialPursuitEnv, BattleEnv, MAgentEnv
from suPER.opponents import make_env

BATTLE = load_env_defaults("battle")["env"]["kwargs"]
ADV = load_env_defaults("adversarial_pursuit")["env"]["kwargs"]

# battle action table (measured on magent2 0.3.4): 13 moves with these (dx, dy), then 8 attacks
MOVES = np.array([(0, -2), (-1, -1), (0, -1), (1, -1), (-2, 0), (-1, 0), (0, 0), (1, 0), (2, 0),
                  (-1, 1), (0, 1), (1, 1), (0, 2)])
ATTACKS = np.array([(-1, -1), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1)])
STAY = 6


class Chaser:
    """Scripted battle policy: attack an adjacent enemy, else step towards the nearest one seen.

    Observation rows are dy and columns dx around the centre cell; channel 3 is enemy presence.
    ``default`` is the move used while no enemy is in view (towards the other team's side).
    """

    def __init__(self, default: int) -> None:
        self.default = default

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        out = np.full(len(obs_MO), STAY, dtype=np.int64)
        c = obs_MO.shape[1] // 2
        for i in np.flatnonzero(alive_M):
            dyx = np.argwhere(obs_MO[i, :, :, 3] > 0) - c
            dyx = dyx[np.abs(dyx).max(axis=1) > 0]  # a dying agent's cell may already hold its killer
            if len(dyx) == 0:
                out[i] = self.default
                continue
            dxy = dyx[:, ::-1]
            t = dxy[np.abs(dxy).max(axis=1).argmin()]
            if np.abs(t).max() <= 1:
                out[i] = len(MOVES) + int(np.flatnonzero((ATTACKS == t).all(axis=1))[0])
            else:
                out[i] = int(((t - MOVES) ** 2).sum(axis=1).argmin())
        return out


class Passive:
    """Scripted policy that never moves or attacks."""

    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        return np.full(len(obs_MO), STAY, dtype=np.int64)


RED_CHASER, BLUE_CHASER = 8, 4  # default moves: red starts left (+x), blue right (-x)


def _stack(d: dict, ids: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    return np.stack([np.asarray(d[k]) if k in d else np.zeros(shape, np.float32) for k in ids])


# ------------------------------------------------------------------------------------------------
# spec


@pytest.mark.parametrize(
    ("cls", "kwargs", "pad", "learners", "opponents", "obs_shape", "n_actions", "team", "opp_shape", "opp_n"),
    [
        (BattleEnv, BATTLE, True, 6, 6, (13, 13, 5), 21, "blue", (13, 13, 5), 21),
        (BattleEnv, BATTLE, False, 6, 6, (13, 13, 5), 21, "blue", (13, 13, 5), 21),
        (AdversarialPursuitEnv, ADV, True, 8, 4, (10, 10, 5), 13, "prey", (10, 10, 5), 13),
        (AdversarialPursuitEnv, ADV, False, 8, 4, (9, 9, 5), 9, "prey", (10, 10, 5), 13),
    ],
)
def test_spec(cls: type[MAgentEnv], kwargs: dict, pad: bool, learners: int, opponents: int,
              obs_shape: tuple, n_actions: int, team: str, opp_shape: tuple, opp_n: int) -> None:
    env = cls(kwargs, pad_like_original=pad)
    s = env.spec
    opp_team = "red" if team == "blue" else "predator"
    assert s.learner_ids == tuple(f"{team}_{i}" for i in range(learners))
    assert s.opponent_ids == tuple(f"{opp_team}_{i}" for i in range(opponents))
    assert (s.obs_shape, s.n_actions, s.team, s.obs_dtype) == (obs_shape, n_actions, team, np.float16)
    assert (env.opponent_obs_shape, env.opponent_n_actions) == (opp_shape, opp_n)
    obs = env.reset(0)
    assert obs.shape == (learners, *obs_shape) and obs.dtype == np.float32
    res = env.step(np.zeros(learners, dtype=np.int64))
    assert res.obs_NO.shape == obs.shape and res.reward_N.dtype == np.float32
    assert res.alive_N.all() and not res.episode_over
    env.close()


def test_obs_fit_float16_within_1e3() -> None:
    """Battle obs carry HP fractions (not lossless in float16): check the storage error bound."""
    env = BattleEnv(BATTLE, opponent=Chaser(RED_CHASER))
    obs, alive, me = env.reset(0), np.ones(6, dtype=bool), Chaser(BLUE_CHASER)
    worst, fractional = 0.0, False
    for _ in range(60):
        res = env.step(me.act(obs, alive))
        obs, alive = res.obs_NO, res.alive_N
        worst = max(worst, float(np.abs(obs.astype(np.float16).astype(np.float32) - obs).max()))
        fractional |= bool(((obs > 0) & (obs < 1)).any())
        assert obs.min() >= 0 and obs.max() <= 2
        if res.episode_over:
            break
    assert fractional, "no HP fraction seen: the bound was not exercised"
    assert worst < 1e-3


# ------------------------------------------------------------------------------------------------
# equivalence with the library env (and SuperSuit's padding wrappers)


def _reference_env(module, kwargs: dict, pad: bool):
    env = module.parallel_env(**kwargs)
    if pad:
        env = ss.pad_action_space_v0(ss.pad_observations_v0(env))
    return env


@pytest.mark.parametrize("pad", [True, False])
def test_adversarial_pursuit_matches_supersuit_padding(pad: bool) -> None:
    """Same seed, same learner actions (incl. padded 9..12), same predator draws -> same everything."""
    env = AdversarialPursuitEnv(ADV, horizon=10**6, opponent=RandomOpponent(13, seed=7), pad_like_original=pad)
    ref = _reference_env(adversarial_pursuit_v4, ADV, pad)
    ref_opp = RandomOpponent(13, seed=7)
    ids, opp_ids, shape = env.spec.learner_ids, env.spec.opponent_ids, env.spec.obs_shape
    rng = np.random.default_rng(0)
    for seed, steps in ((3, 120), (None, 60)):
        obs = env.reset(seed)
        ref_obs, _ = ref.reset(seed=seed)
        np.testing.assert_array_equal(obs, _stack(ref_obs, ids, shape))
        for _ in range(steps):
            act = rng.integers(0, env.spec.n_actions, len(ids))
            res = env.step(act)
            opp = ref_opp.act(np.zeros((len(opp_ids), 1)), np.ones(len(opp_ids), dtype=bool))
            actions = {**{k: int(act[i]) for i, k in enumerate(ids)}, **{k: int(opp[i]) for i, k in enumerate(opp_ids)}}
            o2, r2, te2, tr2, _ = ref.step(actions)
            ref_learner_obs = _stack(o2, ids, shape)
            assert ref_learner_obs.shape[1:] == shape
            np.testing.assert_array_equal(res.obs_NO, ref_learner_obs)
            np.testing.assert_array_equal(res.reward_N, np.array([r2[k] for k in ids], dtype=np.float32))
            np.testing.assert_array_equal(res.terminated_N, [te2[k] for k in ids])
            assert res.info["all_agent_reward"] == pytest.approx(sum(r2.values()), abs=1e-6)
            assert res.info["opponent_reward"] == pytest.approx(sum(r2[k] for k in opp_ids), abs=1e-6)
    if pad:  # padding really happened: last row/column of every prey obs is zero
        assert not res.obs_NO[:, 9, :, :].any() and not res.obs_NO[:, :, 9, :].any()


def test_battle_with_deaths_matches_library() -> None:
    """Chasers on both sides: deaths happen; obs/rewards/terminations equal the raw env's."""
    env = BattleEnv(BATTLE, horizon=10**6, opponent=Chaser(RED_CHASER))
    ref = battle_v4.parallel_env(**BATTLE)
    ids, opp_ids, shape = env.spec.learner_ids, env.spec.opponent_ids, env.spec.obs_shape
    me, ref_opp = Chaser(BLUE_CHASER), Chaser(RED_CHASER)
    obs = env.reset(2)
    ref_obs, _ = ref.reset(seed=2)
    alive, deaths = np.ones(6, dtype=bool), 0
    for _ in range(300):
        act = me.act(obs, alive)
        res = env.step(act)
        ref_opp_obs = _stack(ref_obs, opp_ids, shape)
        opp = ref_opp.act(ref_opp_obs, np.array([k in ref.agents for k in opp_ids]))
        actions = {k: int(act[i]) for i, k in enumerate(ids) if k in ref.agents}
        actions |= {k: int(opp[i]) for i, k in enumerate(opp_ids) if k in ref.agents}
        ref_obs, r2, te2, tr2, _ = ref.step(actions)
        np.testing.assert_array_equal(res.obs_NO, _stack(ref_obs, ids, shape))
        np.testing.assert_array_equal(res.reward_N, np.array([r2.get(k, 0.0) for k in ids], dtype=np.float32))
        np.testing.assert_array_equal(res.terminated_N, [te2.get(k, False) for k in ids])
        deaths += int(res.terminated_N.sum())
        obs, alive = res.obs_NO, res.alive_N
        if res.episode_over:
            break
    assert deaths >= 2


# ------------------------------------------------------------------------------------------------
# deaths, team wipe-out, horizon


def _run(env: MAgentEnv, me, seed: int, steps: int) -> list:
    obs = env.reset(seed)
    alive = np.ones(env.spec.n_agents, dtype=bool)
    out = []
    for _ in range(steps):
        res = env.step(me.act(obs, alive))
        out.append(res)
        obs, alive = res.obs_NO, res.alive_N
        if res.episode_over:
            break
    return out


def test_dead_learner_terminates_once_then_is_dead_with_zero_obs() -> None:
    """Passive blue vs chasing red: blue dies one by one, then the episode ends (team wiped out)."""
    env = BattleEnv(BATTLE, horizon=500, opponent=Chaser(RED_CHASER))
    results = _run(env, Passive(), seed=0, steps=500)
    assert results[-1].episode_over and len(results) < 500, "blue was not wiped out before the horizon"
    dead = np.zeros(6, dtype=bool)
    for res in results:
        newly = res.terminated_N
        assert not (newly & dead).any(), "a dead learner terminated twice"
        # the dying step still carries the last (non-zero) obs and the dead penalty
        assert (np.abs(res.obs_NO[newly]).sum(axis=(1, 2, 3)) > 0).all()
        assert (res.reward_N[newly] < 0).all()
        # long-dead learners: zero obs, zero reward, no flags
        assert not res.obs_NO[dead].any() and not res.reward_N[dead].any()
        assert not res.truncated_N[dead].any()
        dead |= newly
        np.testing.assert_array_equal(res.alive_N, ~dead)
    assert dead.all() and not results[-1].alive_N.any()
    assert not results[-1].truncated_N.any()


def test_opponent_wiped_out_terminates_all_learners() -> None:
    """Chasing blue vs passive red: when red is gone magent2 terminates every agent."""
    env = BattleEnv(BATTLE, horizon=500, opponent=Passive())
    results = _run(env, Chaser(BLUE_CHASER), seed=0, steps=500)
    last = results[-1]
    assert last.episode_over and len(results) < 500
    assert last.terminated_N.all() and not last.alive_N.any()
    assert last.info["opponent_reward"] < 0  # the last red died this step (dead penalty)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(6, dtype=np.int64))


def test_horizon_truncates_alive_learners_only() -> None:
    env = BattleEnv(BATTLE, horizon=30, opponent=Chaser(RED_CHASER))
    results = _run(env, Passive(), seed=0, steps=1000)
    assert len(results) == 30
    last = results[-1]
    assert last.episode_over
    dead_before = ~results[-2].alive_N
    assert dead_before.any(), "nobody died before the horizon: case not exercised"
    np.testing.assert_array_equal(last.truncated_N, ~dead_before & ~last.terminated_N)
    assert not any(r.truncated_N.any() or r.episode_over for r in results[:-1])


def test_max_cycles_truncates_adversarial_pursuit() -> None:
    env = AdversarialPursuitEnv({**ADV, "max_cycles": 15}, horizon=500)
    results = _run(env, Passive(), seed=0, steps=100)
    assert len(results) == 15
    assert results[-1].truncated_N.all() and results[-1].alive_N.all() and results[-1].episode_over


# ------------------------------------------------------------------------------------------------
# seeding


@pytest.mark.parametrize("cls,kwargs", [(AdversarialPursuitEnv, ADV), (BattleEnv, BATTLE)])
def test_same_seed_same_trajectory(cls: type[MAgentEnv], kwargs: dict) -> None:
    def trajectory(seed: int) -> list[np.ndarray]:
        env = cls(kwargs, horizon=30)
        rng = np.random.default_rng(0)
        out = [env.reset(seed)]
        for _ in range(2):  # a seeded episode, then one continuing the stream
            while True:
                res = env.step(rng.integers(0, env.spec.n_actions, env.spec.n_agents))
                out += [res.obs_NO, res.reward_N]
                if res.episode_over:
                    break
            out.append(env.reset())
        return out

    a, b = trajectory(4), trajectory(4)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    if cls is AdversarialPursuitEnv:  # random placement: another seed gives another map
        assert not np.array_equal(a[0], trajectory(5)[0])


def test_env_info_describes_the_learning_and_the_opponent_team() -> None:
    info = env_info("adversarial_pursuit")
    assert (info["team"], info["opponent_n_actions"], info["obs_dtype"]) == ("prey", 13, "float16")
    assert len(info["opponent_ids"]) == 4 and info["opponent_obs_shape"] == [10, 10, 5]


def test_make_env_seeds_random_opponent_and_rejects_unknown() -> None:
    cfg = EnvConfig(name="adversarial_pursuit", kwargs=dict(ADV))
    a, b = make_env(cfg, seed=9), make_env(cfg, seed=9)
    obs_m = np.zeros((4, 10, 10, 5), dtype=np.float32)
    np.testing.assert_array_equal(a.opponent.act(obs_m, np.ones(4, bool)), b.opponent.act(obs_m, np.ones(4, bool)))
    with pytest.raises(ValueError, match="env.opponent: 'pretrained' needs a network opponent"):
        build_adapter(EnvConfig(name="battle", kwargs=dict(BATTLE), opponent="pretrained"))


def test_self_play_makes_both_teams_learners() -> None:
    for name, first, n in (("battle", "red_0", 12), ("adversarial_pursuit", "predator_0", 12)):
        cfg = EnvConfig(name=name, kwargs=dict(load_env_defaults(name)["env"]["kwargs"]), opponent="learning",
                        horizon=5)
        env = make_env(cfg)
        try:
            spec = env.spec
            assert spec.n_agents == n and spec.learner_ids[0] == first and spec.opponent_ids == ()
            obs = env.reset(seed=1)
            assert obs.shape == (n, *spec.obs_shape)
            for _ in range(5):
                res = env.step(np.zeros(n, dtype=np.int64))
            assert res.episode_over and res.truncated_N.all()
        finally:
            env.close()
    with pytest.raises(ValueError, match="pad_like_original"):
        AdversarialPursuitEnv(ADV, self_play=True, pad_like_original=False)
