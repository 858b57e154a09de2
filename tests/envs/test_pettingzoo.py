"""The generic PettingZoo adapter (``--env pettingzoo:<module>:<function>``, ``suPER/envs/pettingzoo.py``).

Always: the tiny vector env of ``tests/envs/tiny_pz.py`` (walkers that leave the game, two observation shapes,
two action counts) and PettingZoo's own sisl envs for the refusals. With the ``pettingzoo-extra`` extra (CI installs
it; skipped only where it is absent): simple_spread (mpe2, vector observations) and knights_archers_zombies
(butterfly, (27, 5) observations, agents that die), trained with SUPER, packed, through the real CLI.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import cli
from suPER import config as C
from suPER.algorithms import ALGORITHMS
from suPER.envs import PettingzooEnv, env_record
from suPER.envs.check import accepted_kwargs
from suPER.metrics import metric
from suPER.opponents import make_env
from suPER.resolve import from_dict, resolve

ROOT = Path(__file__).resolve().parents[2]
TINY = "pettingzoo:tests.envs.tiny_pz:parallel_env"
LATE = "pettingzoo:tests.envs.tiny_pz:late_joiner_env"
IMAGE = "pettingzoo:tests.envs.tiny_pz:image_env"
SPREAD = "pettingzoo:mpe2.simple_spread_v3:parallel_env"
KAZ = "pettingzoo:pettingzoo.butterfly.knights_archers_zombies_v11:parallel_env"
SMALL_DQN = ["--set", "dqn.hiddens=16", "--set", "dqn.batch_size=8", "--set", "dqn.buffer_size=500",
             "--set", "dqn.learning_starts=40", "--set", "relay.window=50"]


def adapter(typed: str, horizon: int = 500, **kwargs: Any) -> PettingzooEnv:
    return PettingzooEnv(kwargs, horizon=horizon, name=C.pettingzoo_env_name(typed))


def rows_of(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------------------------------
# names


def test_the_recorded_name_is_derived_and_reads_back() -> None:
    assert C.pettingzoo_env_name(SPREAD) == "pz-mpe2.simple_spread_v3"  # parallel_env, the default, is left out
    assert C.pettingzoo_env_name("pettingzoo:mpe2.simple_spread_v3") == "pz-mpe2.simple_spread_v3"
    assert C.pettingzoo_env_name("pettingzoo:my_envs.grid:make_env") == "pz-my_envs.grid-make_env"
    assert C.pettingzoo_entry_point("pz-my_envs.grid-make_env") == ("my_envs.grid", "make_env")
    assert C.pettingzoo_entry_point("pz-mpe2.simple_spread_v3") == ("mpe2.simple_spread_v3", "parallel_env")
    cfg = resolve(SPREAD, "ddqn", named={"relay.enabled": True})
    assert cfg.env.name == "pz-mpe2.simple_spread_v3" and cfg.dqn.model == "auto"  # the generic adapter's YAML
    assert cfg.run_name == "pz-mpe2.simple_spread_v3__ddqn_super_quantile__s1" and C.is_folder_name(cfg.run_name)
    assert from_dict(cfg.to_dict()).env.name == cfg.env.name  # config.json reads back (resume, plots)
    assert env_record(cfg.env.name) is PettingzooEnv.record and C.env_key(SPREAD) == C.PETTINGZOO
    for bad in ("pettingzoo:", "pettingzoo:my-envs:parallel_env", "pettingzoo:a..b:f", "pettingzoo:a/b:f",
                "pettingzoo:a:f-g"):
        assert not C.is_env_name(bad), bad
        with pytest.raises(C.ConfigError, match=r"^--env: expected pettingzoo:<module>:<function>"):
            resolve(bad)


# --------------------------------------------------------------------------------------------------
# the adapter against the library env


def test_the_adapter_follows_the_library_env_step_by_step() -> None:
    """Same seed and actions: the adapter's arrays are the library's dicts, padded, with leavers masked."""
    from tests.envs.tiny_pz import parallel_env

    env = adapter(TINY, horizon=1000)
    lib = parallel_env()
    spec = env.spec
    assert spec.name == "pz-tests.envs.tiny_pz" and spec.learner_ids == tuple(lib.possible_agents)
    assert (spec.obs_shape, spec.n_actions, spec.obs_dtype, spec.cell_codes) == ((4,), 3, np.float32, False)
    assert spec.opponent_ids == () and env_record(spec.name).generic
    rng = np.random.default_rng(0)
    left = 0
    for episode in range(6):
        obs_NO = env.reset(seed=episode)
        obs, _ = lib.reset(seed=episode)
        alive_N = np.ones(3, dtype=bool)
        while True:
            for i, a in enumerate(spec.learner_ids):
                expected = obs[a] if a in obs else np.zeros(0)
                np.testing.assert_array_equal(obs_NO[i, :len(expected)], expected)
                assert not obs_NO[i, len(expected):].any()  # padded at the high end
                assert alive_N[i] == (a in lib.agents)
            acts_N = rng.integers(0, 3, size=3)
            # walker_2 has 2 actions: the padded action 2 is sent as its first action (SuperSuit's rule)
            sent = {a: int(acts_N[i]) if acts_N[i] < lib.action_space(a).n else 0
                    for i, a in enumerate(spec.learner_ids) if a in lib.agents}
            res = env.step(acts_N)
            obs, rew, term, trunc, _ = lib.step(sent)
            for i, a in enumerate(spec.learner_ids):
                assert res.reward_N[i] == np.float32(rew.get(a, 0.0))
                assert res.terminated_N[i] == term.get(a, False)
                assert res.truncated_N[i] == (trunc.get(a, False) and not term.get(a, False))
                if not alive_N[i]:  # left in an earlier step: zero rows, no reward, no flags
                    assert not res.obs_NO[i].any() and res.reward_N[i] == 0 and not res.terminated_N[i]
            left += int((alive_N & ~res.alive_N).sum())
            assert not (res.alive_N & ~alive_N).any()  # tiny_pz's walkers never rejoin
            assert res.info["all_agent_reward"] == pytest.approx(sum(rew.values()))
            alive_N, obs_NO = res.alive_N, res.obs_NO
            if res.episode_over:
                assert not lib.agents
                break
    assert left > 3  # walkers did leave mid-episode


def test_the_horizon_truncates_every_learner_still_in_the_game() -> None:
    env = adapter(TINY, horizon=3)
    env.reset(seed=0)
    results = [env.step(np.ones(3, dtype=np.int64)) for _ in range(3)]  # action 1: stay
    assert [r.episode_over for r in results] == [False, False, True]
    last = results[-1]
    assert (last.truncated_N == ~last.terminated_N).all() and last.truncated_N.any()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.ones(3, dtype=np.int64))


@pytest.mark.parametrize("typed,extra", [(TINY, None), (LATE, None), (IMAGE, None), (SPREAD, "mpe2"),
                                         (KAZ, "pymunk")])
def test_pettingzoos_api_test_passes_on_the_env_we_wrap(typed: str, extra: str | None) -> None:
    """``pettingzoo.test.parallel_api_test`` on the very object the adapter steps."""
    if extra:
        pytest.importorskip(extra)
    from pettingzoo.test import parallel_api_test

    env = adapter(typed)
    try:
        parallel_api_test(env.library_env, num_cycles=200)
    finally:
        env.close()


# --------------------------------------------------------------------------------------------------
# a learner that joins after the reset (tiny_pz's late_joiner_env: walker_0 joins in the first step)


STAY = 1
"""every tiny_pz walker's 'stay' action"""


def test_a_learner_absent_at_reset_is_not_alive_until_it_joins() -> None:
    from tests.envs.tiny_pz import late_joiner_env

    env = adapter(LATE)
    lib = late_joiner_env()
    try:
        obs_NO = env.reset(seed=3)
        lib_obs, _ = lib.reset(seed=3)
        assert env.alive_N.tolist() == [False, True, True] and "walker_0" not in lib_obs
        assert not obs_NO[0].any()  # no observation yet
        alive_N = env.alive_N
        alive_N[:] = True  # a copy: the caller cannot change the adapter's mask
        assert env.alive_N.tolist() == [False, True, True]
        res = env.step(np.full(3, STAY))
        lib_obs, lib_rew, *_ = lib.step({a: STAY for a in lib.agents})
        # it joins with its first observation and the env's reward for it, which no action of it earned
        assert res.alive_N.tolist() == [True, True, True] and env.alive_N.tolist() == [True, True, True]
        np.testing.assert_array_equal(res.obs_NO[0], lib_obs["walker_0"])
        assert res.reward_N[0] == np.float32(lib_rew["walker_0"]) < 0
    finally:
        env.close()


@pytest.mark.parametrize("pack", [False, True])
def test_training_stores_nothing_for_a_learner_before_it_joins(pack: bool, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """No transition from the zero observation a learner has before it joins: every row stored for walker_0
    starts from an observation it was given (time feature >= 1 / max_cycles), while the walkers in the game
    from the reset store rows from their reset observation (time 0). Alone and packed (each run's own env)."""
    from suPER.native import dqn_run

    stored: list[tuple[np.ndarray, np.ndarray]] = []  # per stored fragment: (obs [T, N, O], valid [T, N])
    store = dqn_run.store_fragment

    def spy(buffer: Any, frag: Any, *args: Any) -> None:
        stored.append((np.array(frag.obs_TNO), np.array(frag.valid_TN)))
        store(buffer, frag, *args)

    monkeypatch.setattr(dqn_run, "store_fragment", spy)
    seeds = ["--num-seeds", "2", "--pack"] if pack else []
    code = cli.main(["train", "--env", LATE, *seeds, "--num-timesteps", "120", "--eval-interval", "60",
                     "--eval-episodes", "1", "--device", "cpu", "--no-progress", "--out", str(tmp_path),
                     "--set", "env.kwargs.max_cycles=8", *SMALL_DQN])
    assert code == 0, capsys.readouterr().err
    obs_TNO = np.concatenate([obs for obs, _ in stored])
    valid_TN = np.concatenate([valid for _, valid in stored])
    assert len(valid_TN) == (240 if pack else 120)  # every env step of every run
    joiner_MO, others_MO = obs_TNO[valid_TN[:, 0], 0], obs_TNO[:, 1:][valid_TN[:, 1:]]
    assert len(joiner_MO) > 50 and joiner_MO.any(axis=1).all()
    assert (joiner_MO[:, 2] >= 1 / 8 - 1e-6).all()  # [position, target, time, index]: from its first obs on
    assert (others_MO[:, 2] == 0).sum() >= 2 * 120 // 8  # the walkers there at reset: every episode's first step


def test_evaluation_counts_a_learner_from_the_step_after_it_joins() -> None:
    """Everybody stays for max_cycles = 5 steps: each walker gets -distance / size per step it is listed, and
    walker_0, listed from step 1 but acting from step 2, counts 4 of its 5 rewards (sequentially and batched)."""
    from suPER.envs.batched import LockstepBatch
    from suPER.evaluation import episode_seeds, play_episodes
    from tests.envs.tiny_pz import late_joiner_env

    seeds = episode_seeds(7, 0, 3)

    def stay(obs_ENO: Any, alive_EN: Any) -> np.ndarray:
        return np.full(np.shape(alive_EN), STAY)

    lib = late_joiner_env(max_cycles=5)
    expected_KN = np.zeros((len(seeds), 3))
    for k, seed in enumerate(seeds):
        lib.reset(seed=seed)
        per_step_N = np.array([-abs(lib._pos[a] - lib._target[a]) / lib.size for a in lib.possible_agents])
        expected_KN[k] = per_step_N.astype(np.float32) * np.array([4, 5, 5])
    single = adapter(LATE, max_cycles=5)
    batch = LockstepBatch(lambda g: adapter(LATE, max_cycles=5), 2)
    try:
        for env in (single, batch):
            ep = play_episodes(env, stay, seeds)
            assert ep.length_K.tolist() == [5, 5, 5]
            np.testing.assert_allclose(ep.agent_return_KN, expected_KN, rtol=1e-6)
    finally:
        single.close()
        batch.close()


# --------------------------------------------------------------------------------------------------
# image observations: stored as the env gives them, scaled by the network


def test_the_obs_scale_is_one_over_an_integer_range_and_one_otherwise() -> None:
    from gymnasium import spaces

    from suPER.envs.pettingzoo import obs_scale

    image = spaces.Box(0, 255, (6, 6, 3), np.uint8)
    assert obs_scale([image, image]) == 1 / 255
    assert obs_scale([spaces.Box(0, 15, (4,), np.uint8), spaces.Box(0, 15, (3,), np.int16)]) == 1 / 15
    for unscaled in ([spaces.Box(0.0, 255.0, (4,), np.float32)],  # floats: the env's own scale
                     [spaces.Box(-np.inf, np.inf, (4,), np.float32)],
                     [spaces.Box(0, 1, (4,), np.bool_)],
                     [spaces.Box(-128, 127, (4,), np.int8)],  # not [0, high]
                     [image, spaces.Box(0, 15, (6, 6, 3), np.uint8)],  # agents of different ranges
                     [spaces.Box(np.zeros(2), np.array([255, 15]), dtype=np.uint8)]):  # per-element ranges
        assert obs_scale(unscaled) == 1.0, unscaled
    env = adapter(TINY)
    try:
        assert env.spec.obs_scale == 1.0
    finally:
        env.close()


def test_uint8_images_are_stored_as_given_and_the_q_network_reads_them_over_255(tmp_path: Path) -> None:
    """The run's initial network (``DQNRun.build``, as ``train`` builds it) on an image x equals the same weights
    unscaled on x / 255; the adapter and the replay keep 0..255 (uint8, lossless)."""
    import torch

    from suPER.models import BatchedQNet
    from suPER.native.dqn_run import DQNRun
    from suPER.runs import RunFolder

    env = adapter(IMAGE)
    try:
        spec = env.spec
        assert (spec.obs_shape, spec.obs_dtype, spec.obs_scale) == ((6, 6, 3), np.uint8, 1 / 255)
        obs_NO = env.reset(seed=0)
    finally:
        env.close()
    assert obs_NO.max() > 200 and (obs_NO == np.round(obs_NO)).all()  # the env's own values
    cfg = resolve(IMAGE, overrides={"dqn.hiddens": 16, "run.progress": False})
    run = DQNRun.build(cfg, RunFolder(tmp_path))
    for opened in (*run.loop.envs, run.loop.eval_env):
        opened.close()
    net = run.init_net
    assert (net.body, net.obs_scale, run.buffer.obs_dtype) == ("conv", 1 / 255, np.uint8)
    plain = BatchedQNet(net.n_policies, spec.obs_shape, spec.n_actions, body="conv", dueling=net.dueling, hiddens=16)
    plain.load_state_dict(net.state_dict())
    x_PBO = torch.as_tensor(obs_NO)[:, None]  # learner p's observation in policy p's batch
    torch.testing.assert_close(net(x_PBO), plain(x_PBO / 255))
    assert not torch.allclose(net(x_PBO), plain(x_PBO), rtol=1e-3, atol=1e-3)


def test_a_pack_on_uint8_images_scales_its_networks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from suPER.models.packed import PackedQNet
    from suPER.native import packed

    scales: list[float] = []

    class Recorded(PackedQNet):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            scales.append(self.obs_scale)

    monkeypatch.setattr(packed, "PackedQNet", Recorded)
    code = cli.main(["train", "--env", IMAGE, "--num-seeds", "2", "--pack", "--num-timesteps", "60",
                     "--eval-interval", "60", "--eval-episodes", "1", "--device", "cpu", "--no-progress",
                     "--out", str(tmp_path), *SMALL_DQN])
    assert code == 0, capsys.readouterr().err
    assert scales == [1 / 255]
    rows = rows_of(tmp_path / "pz-tests.envs.tiny_pz-image_env__ddqn__s1")
    assert [int(r["env_steps"]) for r in rows] == [0, 60] and float(rows[-1]["updates"]) > 0


def test_the_env_functions_arguments_are_the_kwargs() -> None:
    assert accepted_kwargs("pz-tests.envs.tiny_pz") == ["max_cycles", "n_walkers", "size"]  # render_mode: ours
    env = make_env(resolve(TINY, overrides={"env.kwargs.n_walkers": 5, "env.horizon": 7}).env)
    try:
        assert env.spec.n_agents == 5 and env.horizon == 7
    finally:
        env.close()


# --------------------------------------------------------------------------------------------------
# refusals: one line naming --env, nothing written


@pytest.mark.parametrize("typed,says", [
    ("pettingzoo:no_such_module_xyz:parallel_env", "with a module that imports"),
    ("pettingzoo:tests.envs.tiny_pz:no_such_fn", "expected a function of tests.envs.tiny_pz (it has parallel_env)"),
    ("pettingzoo:pettingzoo.sisl.pursuit_v5:env", "which returns OrderEnforcingWrapper (for an AEC env"),
    ("pettingzoo:pettingzoo.sisl.multiwalker_v9:parallel_env", "Discrete actions and Box observations"),
    ("pettingzoo:pettingzoo.butterfly.knights_archers_zombies_v10:parallel_env", "PettingZoo still provides"),
    ("pettingzoo:my-env:parallel_env", "(a module's dotted name and a function in it"),
])
def test_an_env_we_cannot_adapt_is_one_line_naming_env(typed: str, says: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    if "butterfly" in typed:
        pytest.importorskip("pymunk")
    code = cli.main(["train", "--env", typed, "--num-timesteps", "50", "--no-progress", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("error: --env: expected ") and says in err, err
    assert not any(tmp_path.iterdir())


def test_a_misspelt_env_argument_names_the_functions_arguments(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--env", TINY, "--set", "env.kwargs.n_walker=2", "--no-progress", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("error: --set env.kwargs.n_walker: unknown pz-tests.envs.tiny_pz setting "
                                 "'n_walker' (did you mean 'n_walkers'? pz-tests.envs.tiny_pz takes: max_cycles, "
                                 "n_walkers, size)")
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------------
# training through the generic path


def test_the_tiny_env_trains_with_super_in_a_pack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole generic path without the extra: vector observations, walkers leaving, SUPER, a pack of 2."""
    code = cli.main(["train", "--env", TINY, "--super", "--num-seeds", "2", "--pack", "--num-timesteps", "240",
                     "--eval-interval", "120", "--eval-episodes", "2", "--device", "cpu", "--no-progress",
                     "--out", str(tmp_path), *SMALL_DQN])
    assert code == 0, capsys.readouterr().err
    for seed in (1, 2):
        run_dir = tmp_path / f"pz-tests.envs.tiny_pz__ddqn_super_quantile__s{seed}"
        config = json.loads((run_dir / "config.json").read_text())
        assert config["env"]["name"] == "pz-tests.envs.tiny_pz" and config["dqn"]["model"] == "auto"
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
        rows = rows_of(run_dir)
        assert [int(r["env_steps"]) for r in rows] == [0, 120, 240]
        assert int(rows[-1]["updates"]) > 0 and int(rows[-1]["relayed_rows_total"]) > 0  # learned and relayed
        assert [c for c in rows[0] if metric(c) is None] == []


@pytest.mark.parametrize("algo", [a for a in ALGORITHMS if ALGORITHMS[a].section != "dqn"])
def test_every_baseline_trains_on_vector_observations(algo: str, tmp_path: Path) -> None:
    """The baselines build their nets from the observation shape: a vector env trains with each of them."""
    spec = ALGORITHMS[algo]
    names = {f.name for f in dataclasses.fields(spec.config)}
    small = [a for k, v in {"learning_starts": 40, "buffer_size": 500, "buffer_episodes": 20}.items() if k in names
             for a in ("--set", f"{spec.section}.{k}={v}")]
    code = cli.main(["train", "--env", TINY, "--algo", algo, "--num-timesteps", "80", "--eval-interval", "40",
                     "--eval-episodes", "1", "--device", "cpu", "--no-progress", "--out", str(tmp_path), *small])
    assert code == 0
    rows = rows_of(tmp_path / f"pz-tests.envs.tiny_pz__{algo}__s1")
    assert [int(r["env_steps"]) for r in rows] == [0, 40, 80]
    assert all(r["team_return_mean"] not in ("", "nan") for r in rows)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT)}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "suPER.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def test_simple_spread_trains_with_super_packed_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("mpe2")
    # its parallel_env only forwards **kwargs (PettingZoo's parallel_wrapper_fn): the names are its raw_env's
    assert {"N", "local_ratio", "max_cycles", "continuous_actions"} <= set(accepted_kwargs("pz-mpe2.simple_spread_v3"))
    r = _cli("train", "--env", SPREAD, "--set", "env.kwargs.max_cycle=4", "--no-progress", "--out", str(tmp_path))
    assert r.returncode == 2 and "did you mean 'max_cycles'?" in r.stderr and not any(tmp_path.iterdir()), r.stderr
    r = _cli("train", "--env", SPREAD, "--set", "env.kwargs.continuous_actions=true", "--no-progress",
             "--out", str(tmp_path))  # MPE's continuous actions: not a Discrete space
    assert r.returncode == 2 and r.stderr.startswith("error: --env: expected a parallel env with agents, Discrete")
    r = _cli("train", "--env", SPREAD, "--super", "--num-seeds", "2", "--pack", "--num-timesteps", "300",
             "--eval-interval", "150", "--eval-episodes", "2", "--device", "cpu", "--no-progress",
             "--out", str(tmp_path), *SMALL_DQN)
    assert r.returncode == 0, r.stderr[-2000:]
    for seed in (1, 2):
        run_dir = tmp_path / f"pz-mpe2.simple_spread_v3__ddqn_super_quantile__s{seed}"
        rows = rows_of(run_dir)
        assert [int(x["env_steps"]) for x in rows] == [0, 150, 300]
        assert {c for c in rows[0] if c.startswith("return_")} == {"return_agent_0", "return_agent_1",
                                                                   "return_agent_2"}
        assert float(rows[0]["episode_len_mean"]) == 25  # simple_spread's max_cycles
        assert int(rows[-1]["relayed_rows_total"]) > 0
        assert json.loads((run_dir / "manifest.json").read_text())["pack"]["size"] == 2


def test_knights_archers_zombies_trains_with_super_as_agents_die(tmp_path: Path) -> None:
    """(27, 5) observations (the MLP body under auto) and agents that die mid-episode."""
    pytest.importorskip("pymunk")
    env = adapter(KAZ, horizon=2000)
    rng = np.random.default_rng(0)
    deaths = 0
    try:
        assert env.spec.obs_shape == (27, 5) and env.spec.n_agents == 4
        for episode in range(2):
            env.reset(seed=episode)
            alive_N = np.ones(4, dtype=bool)
            while True:  # mostly forward: agents meet zombies
                res = env.step(np.where(rng.random(4) < 0.7, 0, rng.integers(0, 6, 4)))
                assert not (res.alive_N & ~alive_N).any()
                died = alive_N & ~res.alive_N & ~np.full(4, res.episode_over)
                deaths += int(died.sum())
                assert res.terminated_N[died].all() and not res.obs_NO[~alive_N].any()
                alive_N = res.alive_N
                if res.episode_over:
                    break
    finally:
        env.close()
    assert deaths >= 2
    code = cli.main(["train", "--env", KAZ, "--super", "--num-seeds", "2", "--pack", "--num-timesteps", "300",
                     "--eval-interval", "300", "--eval-episodes", "1", "--device", "cpu", "--no-progress",
                     "--out", str(tmp_path), "--set", "env.horizon=100", *SMALL_DQN])
    assert code == 0
    for seed in (1, 2):
        rows = rows_of(tmp_path / f"pz-pettingzoo.butterfly.knights_archers_zombies_v11__ddqn_super_quantile__s{seed}")
        assert [int(x["env_steps"]) for x in rows] == [0, 300] and int(rows[-1]["relayed_rows_total"]) > 0


def test_the_comparison_grid_lists_its_runs() -> None:
    r = _cli("grid", "list", str(ROOT / "experiments" / "pettingzoo_extra.yaml"))
    assert r.returncode == 0, r.stderr
    names = {line.split("\t")[4] for line in r.stdout.splitlines() if line.count("\t") >= 5}
    envs = ("pz-mpe2.simple_spread_v3", "pz-pettingzoo.butterfly.knights_archers_zombies_v11")
    assert names - {"run folder"} == {f"{e}__ddqn{s}__s{seed}" for e in envs for s in ("", "_super_quantile")
                                      for seed in (1, 2, 3)}
    assert "12 runs of 12" in " ".join(r.stdout.split())


def test_the_conv_body_on_vector_observations_is_refused_before_a_folder(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--env", TINY, "--model", "conv", "--no-progress", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("error: --model: expected mlp or auto for pz-tests.envs.tiny_pz's observations of "
                                 "shape (4,), got conv (it needs (H, W, C) images with H, W > 3)")
    assert not any(tmp_path.iterdir())


def test_the_committed_comparison_records_back_the_guide_table() -> None:
    """results/pettingzoo: 12 finished records (no checkpoints), and the guide's means and t intervals are theirs."""
    from scipy import stats

    runs = sorted(p for p in (ROOT / "results" / "pettingzoo").iterdir() if p.is_dir())
    assert len(runs) == 12
    finals: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        assert {p.name for p in run.iterdir()} == {"config.json", "manifest.json", "metrics.csv"}
        assert json.loads((run / "manifest.json").read_text())["status"] == "finished"
        rows = rows_of(run)
        assert [int(r["env_steps"]) for r in rows] == list(range(0, 40_001, 4000))
        env, config, _ = run.name.split("__")
        finals.setdefault((env, config), []).append(float(rows[-1]["team_return_mean"]))
    guide = (ROOT / "docs" / "guide.md").read_text()
    for (env, config), values in finals.items():
        x = np.array(values)
        half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        digits = 1 if "spread" in env else 2
        cell = f"{x.mean():.{digits}f} [{x.mean() - half:.{digits}f}, {x.mean() + half:.{digits}f}]"
        assert cell in guide, (env, config, cell)
