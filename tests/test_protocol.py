"""The paper protocol (``--protocol paper`` / ``--legacy`` / ``protocol: paper``): each documented deviation restored
to the original's behaviour, recorded in every run, and the final games every battle run ends with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import config as C
from suPER import reproduce as R
from suPER.campaigns.grid import GridError, load_grid
from suPER.flags import named_settings
from suPER.resolve import resolve
from tests.test_cli import run_cli

# (dotted key, this suite's default, the original's behaviour, REFERENCE item): one row per documented deviation
DEVIATIONS = [
    ("env.truncation_is_terminal", False, True, "14.6: horizon truncation stored as done=True"),
    ("relay.insertion_priority", "max", "legacy", "14.7/8: RLlib 2.1 first-row insertion priorities"),
    ("env.eval_seed_offset", 10_000, 0, "14.17: evaluation env seeded like the training env"),
    ("dqn.shared_batch", "per_learner", "original", "14.10 / 3.2: parameter sharing's batch with opponents' buffers"),
    ("env.opponent_epsilon", 0.0, 0.1, "8 / 3.4: frozen opponents explore in training games"),
    ("env.opponent_epsilon_final", 0.0, 0.001, "8 / 3.4: ... down to 0.001"),
    ("env.opponent_epsilon_timesteps", 0, 100_000, "8 / 3.4: ... over 100k of their own actions"),
    ("run.protocol", "ours", "paper", "recorded in config.json and the run folder name"),
]


def _get(cfg: Any, dotted: str) -> Any:
    section, key = dotted.split(".")
    return getattr(getattr(cfg, section), key)


@pytest.mark.parametrize("env", C.PAPER_ENVS)  # the deviations documented for the paper's envs
@pytest.mark.parametrize("key,ours,paper,why", DEVIATIONS, ids=[d[0] for d in DEVIATIONS])
def test_paper_protocol_restores_each_documented_original(env: str, key: str, ours: Any, paper: Any, why: str) -> None:
    flags = {"super": True, "super_mode": "quantile"}
    assert _get(resolve(env, named=named_settings(env, flags)[0]), key) == ours, why
    for switch in ({"protocol": "paper"}, {"legacy": True}):
        assert _get(resolve(env, named=named_settings(env, {**flags, **switch})[0]), key) == paper, why


def test_paper_protocol_uses_the_originals_gaussian_on_the_variance() -> None:
    """14.2: gaussian (and the original's CLI default mode) becomes variance-as-scale; quantile stays quantile."""
    for mode in (None, "gaussian"):
        named = named_settings("battle", {"super": True, "super_mode": mode, "protocol": "paper"})[0]
        assert resolve("battle", named=named).relay.mode == "gaussian_variance"
    named = named_settings("battle", {"super": True, "super_mode": "gaussian"})[0]
    assert resolve("battle", named=named).relay.mode == "gaussian"


def test_protocol_values_and_conflicts_are_refused_by_name() -> None:
    with pytest.raises(C.ConfigError, match=r"--protocol: expected one of ours, paper, got 'papers'"):
        named_settings("pursuit", {"protocol": "papers"}, lambda n: "--" + n)
    with pytest.raises(C.ConfigError, match=r"--legacy: is the paper protocol, which --protocol ours contradicts"):
        named_settings("pursuit", {"protocol": "ours", "legacy": True}, lambda n: "--" + n)


LEARNERS = {"pursuit": 8, "battle": 6, "adversarial_pursuit": 8}

TINY = {"run.num_timesteps": 30, "run.eval_points": 1, "run.eval_episodes": 1, "run.progress": False,
        "env.horizon": 10, "dqn.learning_starts": 10}
"""A run of a few fragments with short episodes: enough to sample, evaluate and finish in seconds."""


@pytest.mark.parametrize("env,rows", [("pursuit", 256), ("battle", 55), ("adversarial_pursuit", 77)])
def test_parameter_sharing_batch_is_formed_as_the_original_formed_it(env: str, rows: int,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """REFERENCE 3.2: the shared policy gets 256 / 55 / 77 rows per update on the real envs under the paper
    protocol (the frozen opponents' buffers took part in the original's draw); ours gives batch_size x N. Counted
    where the trainer samples them."""
    from suPER.campaigns import execute
    from suPER.replay import CompactPER

    asked: list[int] = []
    sample = CompactPER.sample

    def counting(self: Any, batch: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(batch)
        return sample(self, batch, *args, **kwargs)

    monkeypatch.setattr(CompactPER, "sample", counting)
    for protocol, expected in (("paper", rows), ("ours", 32 * LEARNERS[env])):
        asked.clear()
        named = {**named_settings(env, {"protocol": protocol, "parameter_sharing": True})[0], **TINY,
                 "run.final_games": 0, "run.out": str(tmp_path)}
        execute(resolve(env, named=named))
        assert asked and set(asked) == {expected}, protocol


def test_opponent_epsilon_decays_with_each_opponents_own_actions() -> None:
    """REFERENCE 8 / 3.4: under the paper protocol the frozen red team explores in training games with epsilon
    0.1 -> 0.001 over its own first 100k actions, counted per agent while alive; evaluation games stay greedy."""
    from suPER.loop import make_eval_env
    from suPER.opponents import make_env

    cfg = resolve("battle", named=named_settings("battle", {"protocol": "paper"})[0])
    env = make_env(cfg.env, seed=1)
    try:
        opp = env.opponent
        assert opp.epsilon_M() == pytest.approx(np.full(6, 0.1))
        env.reset(seed=1)
        for _ in range(60):
            env.step(np.zeros(env.spec.n_agents, dtype=np.int64))
        assert (opp.acted_M > 0).all() and (opp.acted_M <= 60).all()  # the env's steps drive the counts
        before = opp.acted_M.copy()
        alive_M = np.array([True, False, True, False, True, True])
        opp.act(np.zeros((6, *env.opponent_obs_shape), dtype=np.float32), alive_M)
        assert list(opp.acted_M - before) == [1, 0, 1, 0, 1, 1]  # a dead agent takes no action
        opp.acted_M[:] = [0, 25_000, 50_000, 99_999, 100_000, 300_000]
        assert opp.epsilon_M() == pytest.approx(0.1 + np.minimum(1, opp.acted_M / 1e5) * (0.001 - 0.1))
        state = opp.state_dict()
        opp.acted_M[:] = 0
        opp.load_state_dict(state)
        assert list(opp.acted_M) == [0, 25_000, 50_000, 99_999, 100_000, 300_000]
    finally:
        env.close()
    ev = make_eval_env(cfg, 5)
    try:
        assert all(not g.opponent.explores for g in ev.games)  # greedy evaluation, as the original
    finally:
        ev.close()
    ours = make_env(resolve("battle").env, seed=1)
    try:
        assert not ours.opponent.explores
    finally:
        ours.close()


def test_paper_run_records_its_protocol_and_ends_with_final_games(tmp_path: Path) -> None:
    """Through the real CLI: ``--legacy`` and ``--protocol paper`` name the same run (``__paper``), config.json says
    so, and a battle run ends with its final policy in varied games (final_games.json, Wilson intervals)."""
    args = ["train", "--env", "battle", "--out", str(tmp_path), "--no-progress", "--protocol", "paper",
            *[a for k, v in TINY.items() if k != "run.progress" for a in ("--set", f"{k}={v}")],
            "--set", "run.final_games=3"]
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "battle__ddqn__s1__paper"
    config = json.loads((folder / "config.json").read_text())
    assert config["run"]["protocol"] == "paper" and config["dqn"]["shared_batch"] == "original"
    games = json.loads((folder / "final_games.json").read_text())
    assert games["games"] == games["episodes"] == 3 and games["opponent_epsilon"] == 0.05
    assert games["seed"] == C.FINAL_GAMES_SEED
    assert games["win_rate"] + games["loss_rate"] + games["tie_rate"] == pytest.approx(1.0)
    lo, hi = games["win_rate_ci"]
    assert 0 <= lo <= games["win_rate"] <= hi <= 1
    assert "final policy in 3 games against pretrained" in r.stdout
    again = run_cli(*[a for a in args if a not in ("--protocol", "paper")], "--legacy")
    assert again.returncode == 2 and "already holds a finished run" in again.stderr  # the same run folder
    ours = run_cli("train", "--env", "pursuit", "--out", str(tmp_path), "--no-progress",
                   *[a for k, v in TINY.items() if k != "run.progress" for a in ("--set", f"{k}={v}")])
    assert ours.returncode == 0, ours.stderr
    assert "pursuit__ddqn__s1: pursuit, ddqn, 30 env steps, 2 evaluations x 1 episodes, estimated" in ours.stderr
    assert not (tmp_path / "pursuit__ddqn__s1" / "final_games.json").exists()  # no opponent team: no games
    assert json.loads((tmp_path / "pursuit__ddqn__s1" / "config.json").read_text())["run"]["protocol"] == "ours"


def test_grid_files_and_reproduce_take_the_protocol(tmp_path: Path) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nseeds: 1\ndefaults: {protocol: paper}\nruns:\n"
                    "  - {name: a, env: pursuit, algo: ddqn}\n  - {name: b, env: pursuit, algo: ddqn, protocol: ours}\n")
    runs = load_grid(grid).runs
    assert [r.run_name for r in runs] == ["pursuit__ddqn__s1__paper", "pursuit__ddqn__s1"]
    assert runs[0].config().run.protocol == "paper" and "--protocol" in runs[0].cli_args()
    grid.write_text("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, protocol: original}\n")
    with pytest.raises(GridError, match=r"g.yaml:3: .*protocol: expected one of ours, paper, got 'original'"):
        load_grid(grid)
    _, paper = R.figure_runs("fig1", seeds=1, envs=["battle"])  # reproduce's default: the paper protocol
    _, ours = R.figure_runs("fig1", seeds=1, envs=["battle"], protocol="ours")
    assert paper and all(r.run_name.split("__")[3] == "paper" for r in paper)
    # the same runs, gaussian as the original computed it (on the variance)
    assert {r.run_name.replace("__paper", "").replace("gaussian_variance", "gaussian") for r in paper} == \
        {r.run_name for r in ours}
    assert all(r.config().run.protocol == "ours" for r in ours)
    res = run_cli("reproduce", "fig1", "--env", "battle", "--seeds", "1", "--dry-run", "--protocol", "ours",
                  "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    res = run_cli("reproduce", "fig1", "--env", "battle", "--seeds", "1", "--dry-run", "--protocol", "theirs",
                  "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--protocol: expected one of ours, paper, got 'theirs'" in res.stderr


def test_a_deviation_pair_differs_from_its_paper_run_in_that_one_setting() -> None:
    """experiments/fig1_isolate.yaml: each run is the paper protocol's run of its entry and seed (adversarial pursuit's
    share-all; pursuit's no sharing, SUPER quantile and share-all) with the insertion priority switched back to ours
    and a tag that keeps its folder apart, nothing else."""
    pairs = load_grid(C.ROOT / "experiments" / "fig1_isolate.yaml", seeds=3).runs
    paper = {(r.entry, r.seed): r for r in load_grid(C.ROOT / "experiments" / "fig1_paper.yaml", seeds=3).runs}
    assert sorted((r.entry.removesuffix("-insertmax"), r.seed) for r in pairs) == sorted(
        (e, s) for e in ("adversarial_pursuit-ddqn-shareall", "pursuit-ddqn", "pursuit-ddqn-super-quantile",
                         "pursuit-ddqn-shareall") for s in (1, 2, 3))
    for run in pairs:
        original_run = paper[(run.entry.removesuffix("-insertmax"), run.seed)]
        variant, original = C.flatten(run.config().to_dict()), C.flatten(original_run.config().to_dict())
        assert variant.keys() == original.keys()
        changed = {k: (original[k], variant[k]) for k in variant if variant[k] != original[k]}
        tag = original["run.tag"]
        assert changed == {"relay.insertion_priority": ("legacy", "max"),
                           "run.tag": (tag, f"{tag}_insertmax" if tag else "insertmax")}
        assert run.run_name == original_run.run_name + ("_insertmax" if tag else "__insertmax")


def test_the_plain_dqn_lines_are_figure_1s_paper_runs_with_plain_dqn() -> None:
    """experiments/fig1_dqn.yaml (the campaign's stage 6): no sharing, SUPER quantile and share-all on the three
    envs, seeds 1-3, each run the paper protocol's DDQN run of its entry and seed (experiments/fig1_paper.yaml: same
    budget, evaluation, protocol) with plain DQN's network and target (no double Q, no dueling), nothing else."""
    runs = load_grid(C.ROOT / "experiments" / "fig1_dqn.yaml").runs
    paper = {(r.entry, r.seed): r for r in load_grid(C.ROOT / "experiments" / "fig1_paper.yaml", seeds=3).runs}
    assert len(runs) == 27 and {r.seed for r in runs} == {1, 2, 3}
    assert {r.entry.split("-", 1)[1] for r in runs} == {"dqn", "dqn-super-quantile", "dqn-shareall"}
    for run in runs:
        ddqn = paper[(run.entry.replace("-dqn", "-ddqn"), run.seed)]
        plain, original = C.flatten(run.config().to_dict()), C.flatten(ddqn.config().to_dict())
        assert plain.keys() == original.keys()
        changed = {k: (original[k], plain[k]) for k in plain if plain[k] != original[k]}
        assert changed == {"dqn.double_q": (True, False), "dqn.dueling": (True, False), "run.algo": ("ddqn", "dqn")}
        assert run.run_name == ddqn.run_name.replace("__ddqn", "__dqn", 1)


def test_a_resumed_run_continues_the_opponents_exploration(tmp_path: Path) -> None:
    """The opponents' action counts and generator are in latest.pt, so a resumed paper-protocol run continues the
    decaying opponent epsilon where it was instead of starting again at 0.1."""
    from suPER.loop import RunLoop
    from suPER.runs import prepare_run_folder

    named = {**named_settings("battle", {"protocol": "paper"})[0], **TINY, "run.out": str(tmp_path)}
    cfg = resolve("battle", named=named)
    folder = prepare_run_folder(cfg.run.out, cfg.run_name)
    def idle(obs: np.ndarray, alive: np.ndarray) -> np.ndarray:
        return np.zeros(obs.shape[:2], dtype=np.int64)

    loop = RunLoop(cfg, folder)
    loop.reset_envs()
    loop.evaluate(idle, {})
    for _ in range(8):  # within one episode (TINY's horizon is 10)
        loop.envs[0].step(np.zeros(loop.spec.n_agents, dtype=np.int64))
    loop.save({})
    opp = loop.envs[0].opponent
    counts, draws = opp.acted_M.copy(), opp.rng.random(5)
    loop.finish(idle, {})
    again = RunLoop(cfg, folder)
    again.restore()
    assert (counts > 0).all() and list(again.envs[0].opponent.acted_M) == list(counts)
    assert list(again.envs[0].opponent.rng.random(5)) == list(draws)
    again.finish(idle, {})
