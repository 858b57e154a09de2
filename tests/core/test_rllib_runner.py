"""``train_rllib``: the native experiments on RLlib -- same env builders, run folder and metrics.csv columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import config as C
from suPER.core.rllib_runner import _rllib_env_class, build_config, train_rllib
from suPER.native.dqn import train as native_train
from suPER.resolve import resolve
from suPER.runs import RunFolder, read_metrics

TINY_ENV = {
    "pursuit": {"env.kwargs.n_pursuers": 3, "env.kwargs.n_evaders": 3, "env.kwargs.x_size": 8, "env.kwargs.y_size": 8},
    "battle": {"env.kwargs.map_size": 12, "env.opponent": "random"},  # fewer agents than the shipped opponent file
    "adversarial_pursuit": {"env.kwargs.map_size": 12, "env.opponent": "random"},
}


def tiny_cfg(env: str, **extra: Any) -> C.ExperimentConfig:
    overrides = {**TINY_ENV[env], "env.horizon": 10, "run.num_timesteps": 40, "run.eval_points": 2,
                 "run.eval_episodes": 1, "dqn.learning_starts": 8, "dqn.batch_size": 8, "dqn.hiddens": 16,
                 "dqn.buffer_size": 1000, "run.progress": False, **extra}
    return resolve(env, overrides=overrides)


def header(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


def replay_evaluations(cfg: C.ExperimentConfig, folder: Path) -> list[Any]:
    """Replay every evaluation of an RLlib run with the native protocol: evaluation i plays
    ``episode_seeds(eval_seed, i, K)`` on ``loop.make_eval_env`` (a batch of K games), with the greedy
    actions of the run's final modules (its checkpoint)."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    from suPER.evaluation import episode_seeds, play_episodes
    from suPER.loop import env_seeds, make_eval_env

    modules_dir = folder / "checkpoints" / "rllib_final" / "learner_group" / "learner" / "rl_module"
    ids = [c.removeprefix("return_") for c in header(folder / "metrics.csv") if c.startswith("return_")]
    modules = {a: RLModule.from_checkpoint(modules_dir / a) for a in ids}

    @torch.no_grad()
    def greedy(obs_ENO: Any, alive_EN: Any) -> np.ndarray:
        obs = torch.as_tensor(obs_ENO, dtype=torch.float32)
        return np.stack([modules[a].forward_inference({"obs": obs[:, i]})["actions"].numpy()
                         for i, a in enumerate(ids)], axis=1)

    eval_seed = env_seeds(cfg)[1]
    env = make_eval_env(cfg, eval_seed)
    assert env.num_games == cfg.run.eval_episodes  # one batch of K games, not one env
    try:
        n_rows = len(read_metrics(folder / "metrics.csv")["env_steps"])
        return [play_episodes(env, greedy, episode_seeds(eval_seed, i, cfg.run.eval_episodes)).summary()
                for i in range(n_rows)]
    finally:
        env.close()


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("env", sorted(TINY_ENV))
def test_rllib_backend_writes_the_native_columns(env: str, tmp_path: Path) -> None:
    # lr = 1e-30: the modules keep their initial weights to fp32 resolution, so every evaluation row can be
    # replayed from the final checkpoint (the evaluation is the native protocol, seeded and batched)
    cfg = tiny_cfg(env, **{"relay.enabled": True, "relay.bandwidth": 0.5, "run.eval_episodes": 2,
                           "run.eval_batch": 2, "dqn.lr": 1e-30})
    native_dir, rllib_dir = tmp_path / "native", tmp_path / "rllib"
    native_dir.mkdir()
    rllib_dir.mkdir()
    native_train(cfg, RunFolder(native_dir))
    seen: list[int] = []
    summary = train_rllib(cfg, RunFolder(rllib_dir), progress=lambda steps, stats: seen.append(steps))
    assert header(rllib_dir / "metrics.csv") == header(native_dir / "metrics.csv")
    cols = read_metrics(rllib_dir / "metrics.csv")
    assert cols["env_steps"].tolist() == [0, 20, 40] and seen == [20, 40]
    assert summary.env_steps == 40 and np.isfinite(summary.final_team_return)
    assert np.isfinite(cols["loss"][-1]) and cols["updates"][-1] > 0
    assert cols["relayed_rows_total"][-1] > 0  # the relay ran inside RLlib
    assert (rllib_dir / "checkpoints" / "rllib_final").is_dir()
    replayed = replay_evaluations(cfg, rllib_dir)  # metrics.csv keeps 6 significant digits
    assert cols["team_return_mean"].tolist() == pytest.approx([r.team_return_mean for r in replayed], rel=1e-5)
    assert cols["all_agent_return_mean"].tolist() == pytest.approx([r.all_agent_return_mean for r in replayed], rel=1e-5)


@pytest.mark.usefixtures("ray_local")
def test_parameter_sharing_is_one_module_and_a_no_op_relay(tmp_path: Path) -> None:
    cfg = tiny_cfg("pursuit", **{"relay.enabled": True, "dqn.parameter_sharing": True, "dqn.model": "mlp"})
    config = build_config(cfg)
    assert set(config.policies) == {"pursuer"} and config.train_batch_size_per_learner == 8 * 3
    native_dir, rllib_dir = tmp_path / "native", tmp_path / "rllib"
    native_dir.mkdir()
    rllib_dir.mkdir()
    native_train(cfg, RunFolder(native_dir))
    train_rllib(cfg, RunFolder(rllib_dir))
    assert header(rllib_dir / "metrics.csv") == header(native_dir / "metrics.csv")
    assert read_metrics(rllib_dir / "metrics.csv")["relayed_rows_total"][-1] == 0


@pytest.mark.parametrize("terminal", [False, True])
def test_env_wrapper_speaks_rllib_dicts(terminal: bool) -> None:
    import dataclasses

    cfg = tiny_cfg("pursuit", **{"env.truncation_is_terminal": terminal})
    env = _rllib_env_class()({"env": dataclasses.asdict(cfg.env), "seed": 5})
    ids = [f"pursuer_{i}" for i in range(3)]
    obs, _ = env.reset()
    assert list(obs) == ids == env.agents and obs["pursuer_0"].shape == (7, 7, 3)
    for _ in range(cfg.env.horizon):
        obs, rew, term, trunc, _ = env.step(dict.fromkeys(ids, 0))
        assert set(obs) == set(rew) == set(ids) and env.agents == ids
    assert term["__all__"] is terminal and trunc["__all__"] is (not terminal)
    assert all(term[a] is terminal and trunc[a] is (not terminal) for a in ids)
    obs2, _ = env.reset()
    assert set(obs2) == set(ids)
    env.close()


def test_env_wrapper_gives_rllib_a_late_learner_from_its_first_observation() -> None:
    """tiny_pz's walker_0 joins in the first step: RLlib sees it from its first observation (no reward for the
    step it did not act in), then every step like the others."""
    import dataclasses

    cfg = resolve("pettingzoo:tests.envs.tiny_pz:late_joiner_env", overrides={"env.kwargs.max_cycles": 4})
    env = _rllib_env_class()({"env": dataclasses.asdict(cfg.env), "seed": 5})
    stay = {"walker_0": 1, "walker_1": 1, "walker_2": 1}  # nobody reaches a target
    for _ in range(2):  # and again after a reset
        obs, _ = env.reset()
        assert list(obs) == env.agents == ["walker_1", "walker_2"]
        obs, rew, term, trunc, _ = env.step({a: stay[a] for a in env.agents})
        assert list(obs) == env.agents == ["walker_0", "walker_1", "walker_2"] and obs["walker_0"][2] > 0
        assert set(rew) == set(term) - {"__all__"} == {"walker_1", "walker_2"}
        for _ in range(3):
            obs, rew, term, trunc, _ = env.step({a: stay[a] for a in env.agents})
            assert set(obs) == set(rew) == {"walker_0", "walker_1", "walker_2"}
        assert trunc["__all__"] and all(trunc[a] for a in stay)
    env.close()


@pytest.mark.parametrize("env", ["pursuit", "battle"])
def test_legacy_relay_is_the_same_on_both_backends(env: str) -> None:
    """--legacy: the relay suPERDQN builds from build_config equals the native one (seed, eps, sender-side rule)."""
    from suPER.core.relay import Relay
    from suPER.core.trainers import relay_from_config
    from suPER.envs import env_record

    cfg = resolve(env, named={"relay.enabled": True, **C.legacy_settings(None)},
                  overrides={"dqn.per_eps": 1e-5, "run.seed": 5})
    ids = ["a_0", "a_1", "a_2"]
    native = Relay.from_config(cfg.relay, ids, seed=cfg.run.seed, per_eps=cfg.dqn.per_eps,
                               sender_side=env_record(env).sender_side_priorities)
    config = build_config(cfg)
    config.validate()
    rllib = relay_from_config(config, ids)
    assert native.insertion == rllib.insertion
    assert native.insertion.sender_side == {"pursuit": False, "battle": True}[env]  # the original's configs
    assert (rllib.mode, rllib.bandwidth, rllib.windows.window) == (native.mode, native.bandwidth, native.windows.window)
    td_NT = np.random.default_rng(0).exponential(size=(3, 8))
    valid_NT = np.ones_like(td_NT, dtype=bool)
    plans = [r.plan(td_NT, valid_NT) for r in (native, rllib)]  # same generator seed -> same picks
    np.testing.assert_array_equal(plans[0].selected_NT, plans[1].selected_NT)
    p = plans[0]
    prio = [r.insertion.priorities(td_NT, p) for r in (native, rllib)]
    np.testing.assert_array_equal(prio[0], prio[1])
    if env == "battle":  # the sender's |td| + dqn.per_eps of each receiver's first relayed row
        first = {int(r): int(np.flatnonzero(p.receiver_K == r)[0]) for r in np.unique(p.receiver_K)}
        expected = [td_NT[p.sender_K[first[r]], p.row_K[first[r]]] + 1e-5 for r in p.receiver_K]
        np.testing.assert_allclose(prio[0], expected, rtol=1e-12)
    else:
        np.testing.assert_array_equal(prio[0], np.ones(p.n_relayed))


def test_an_rllib_run_does_not_depend_on_the_string_hash_seed(tmp_path: Path) -> None:
    """RLlib builds the modules in the order of the ``policies`` it is given (a set's order follows PYTHONHASHSEED;
    each module draws its initial weights in turn from torch's generator), and its connectors run the modules in the
    order of a set of agent ids (so with one global generator, which agent got which exploration draw followed the
    hash seed too). With the modules listed in agent order, two real ``train --backend rllib`` processes with
    different hash seeds start from the same weights in every module and evaluate them alike (no update: learning
    starts after the budget); each manifest records its hash seed. The training rows are not compared: in two loaded
    test suites two processes parted there, once without updates, for a reason other than the hash seed (docs/rllib.md,
    defect 11), so they would make this test depend on the machine's load."""
    import csv
    import json
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from engine_equality import tensor_hashes

    sets = [f"{k}={v}" for k, v in TINY_ENV["pursuit"].items()]
    procs = {}
    for hash_seed in ("1", "2"):  # side by side: most of each process' time is Ray starting up
        out = tmp_path / hash_seed
        args = ["train", "--env", "pursuit", "--backend", "rllib", "--super", "--num-timesteps", "80",
                "--eval-interval", "40", "--eval-episodes", "1", "--no-progress", "--no-wandb", "--out", str(out),
                "--set", "dqn.learning_starts=1000", "--set", "dqn.batch_size=8", "--set", "env.horizon=20",
                "--set", "dqn.hiddens=16", "--set", "relay.window=20", *(a for s in sets for a in ("--set", s))]
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "RAY_AUTH_MODE": "disabled"}
        with (tmp_path / f"{hash_seed}.log").open("w") as log:  # a file, not a pipe: neither waits on a full pipe
            procs[hash_seed] = subprocess.Popen([sys.executable, "-m", "suPER.cli", *args], stdout=log,
                                                stderr=subprocess.STDOUT, env=env)
    hashes, rows = [], []
    try:
        for hash_seed, proc in procs.items():
            assert proc.wait(timeout=600) == 0, (tmp_path / f"{hash_seed}.log").read_text()[-2000:]
            (run,) = [p for p in (tmp_path / hash_seed).iterdir() if (p / "manifest.json").is_file()]
            assert json.loads((run / "manifest.json").read_text())["python_hash_seed"] == hash_seed
            hashes.append(tensor_hashes(run))
            with (run / "metrics.csv").open() as f:
                rows.append([{k: v for k, v in r.items() if "per_sec" not in k and "wall_time" not in k}
                             for r in csv.DictReader(f)])
    finally:  # one failed: the other does not outlive the test
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    evaluation = ("env_steps", "team_return_mean", "all_agent_return_mean", *(f"return_pursuer_{i}" for i in range(3)))
    assert [[r[k] for k in evaluation] for r in rows[0]] == [[r[k] for k in evaluation] for r in rows[1]]
    assert len(hashes[0]) > 3 * 4 and hashes[0] == hashes[1]  # 3 modules, each several tensors


def test_rllib_backend_trains_and_relays_on_a_generic_pettingzoo_env(tmp_path: Path) -> None:
    """``--env pettingzoo:<module>:<function> --backend rllib`` through the real CLI on the tiny PettingZoo env of
    tests/envs (walkers that leave the game, two observation shapes, two action counts): the run finishes, learns
    (updates after learning starts) and relays rows between the walkers' modules, with the native run's
    per-agent columns."""
    import csv
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    args = ["train", "--env", "pettingzoo:tests.envs.tiny_pz:parallel_env", "--backend", "rllib", "--super",
            "--num-timesteps", "200", "--eval-interval", "100", "--eval-episodes", "2", "--set",
            "dqn.learning_starts=50", "--set", "dqn.batch_size=8", "--no-progress", "--no-wandb", "--out", str(tmp_path)]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "suPER.cli", *args], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    (run,) = [p for p in tmp_path.iterdir() if (p / "manifest.json").is_file()]
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["env_steps"]) for r in rows] == [0, 100, 200]
    assert int(rows[-1]["updates"]) > 0 and int(rows[-1]["relayed_rows_total"]) > 0
    assert {c for c in rows[0] if c.startswith("return_")} == {f"return_walker_{i}" for i in range(3)}
