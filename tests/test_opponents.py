"""Network opponents: team file format, bad files, the original's pickle, greedy acting, the CLI."""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from suPER import config as C
from suPER import opponents as O
from suPER.cli import main
from suPER.envs import opponent_env_names
from suPER.evaluation import episode_seeds, play_episodes
from suPER.loop import make_eval_env
from suPER.models import BatchedQNet
from suPER.models.qnet import reference_from_batched
from suPER.opponents import make_batch, make_env
from suPER.resolve import resolve

ADV_SHAPE, ADV_ACTIONS = (10, 10, 5), 13
PREDATORS = tuple(f"predator_{i}" for i in range(4))


def env_cfg(name: str, opponent: str = "random", **kw: object) -> C.EnvConfig:
    return replace(resolve(name, "ddqn").env, opponent=opponent, **kw)  # type: ignore[arg-type]


def team(tmp_path: Path, hiddens: int = 256, seed: int = 0, name: str = "team.safetensors",
         dtype: str = "float16") -> tuple[Path, BatchedQNet]:
    torch.manual_seed(seed)
    net = BatchedQNet(4, ADV_SHAPE, ADV_ACTIONS, hiddens=hiddens)
    path = tmp_path / name
    O.save_team(path, net, O.TeamMeta("adversarial_pursuit", PREDATORS, ADV_SHAPE, ADV_ACTIONS, hiddens=hiddens,
                                      dtype=dtype))
    return path, net


def q_of(net: BatchedQNet, obs_MO: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return net(torch.as_tensor(obs_MO, dtype=torch.float32)[:, None])[:, 0]


def test_team_file_round_trip_float16(tmp_path: Path) -> None:
    path, net = team(tmp_path, hiddens=32)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
        assert {f.get_tensor(k).dtype for k in keys} == {torch.float16}
    assert meta["format"] == "super-marl-team" and meta["env"] == "adversarial_pursuit"
    assert "predator_3.fc1.weight" in keys and len(keys) == 4 * len(dict(net.named_parameters()))
    loaded, m = O.load_team(path)
    assert m.agent_ids == PREDATORS and m.obs_shape == ADV_SHAPE and m.n_actions == ADV_ACTIONS and m.hiddens == 32
    assert loaded.fc1.weight.dtype == torch.float32
    half = BatchedQNet(4, ADV_SHAPE, ADV_ACTIONS, hiddens=32)
    half.load_state_dict({k: v.half().float() for k, v in net.state_dict().items()})
    obs = np.random.default_rng(0).random((4, *ADV_SHAPE)).astype(np.float32)
    for k, v in half.state_dict().items():  # the file holds exactly the float16-rounded weights (a copy: exact)
        assert torch.equal(loaded.state_dict()[k], v), k
    # two net objects may run different kernels (memory alignment); 1e-6 still tells float16 rounding apart
    torch.testing.assert_close(q_of(loaded, obs), q_of(half, obs), rtol=1e-6, atol=1e-6)


def test_same_team_saves_the_same_bytes(tmp_path: Path) -> None:
    """safetensors writes its metadata in a random (Rust HashMap) order; save_team's files are canonical: the
    header's keys sorted, so two saves of one team are byte-identical (the cards' sha256, --br-workers' check)."""
    first, net = team(tmp_path, hiddens=8, name="a.safetensors")
    digests = {O.sha256(first)}
    for k in range(5):
        path = tmp_path / f"b{k}.safetensors"
        O.save_team(path, net, O.TeamMeta("adversarial_pursuit", PREDATORS, ADV_SHAPE, ADV_ACTIONS, hiddens=8))
        digests.add(O.sha256(path))
    assert len(digests) == 1
    raw = first.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    meta = json.loads(raw[8:8 + n])["__metadata__"]
    assert list(meta) == sorted(meta) and n % 8 == 0
    loaded, m = O.load_team(first)
    assert m.hiddens == 8 and all(torch.equal(v, net.state_dict()[k].half().float())
                                  for k, v in loaded.state_dict().items())


def test_bad_files_fail_with_one_line_naming_file_and_shapes(tmp_path: Path) -> None:
    path, net = team(tmp_path, hiddens=32)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    mislabelled = tmp_path / "mislabelled.safetensors"  # says battle, holds adversarial pursuit's predators
    O.save_team(mislabelled, net, O.TeamMeta("battle", PREDATORS, ADV_SHAPE, ADV_ACTIONS, hiddens=32))
    env = make_env(env_cfg("battle"))  # battle's red team: 6 agents, (13, 13, 5), 21 actions
    try:
        with pytest.raises(O.OpponentFileError) as exc:
            O.load_team(path, env)
        assert str(exc.value) == f"{path}: expected a team of battle, got a team file of adversarial_pursuit"
        with pytest.raises(O.OpponentFileError) as exc:
            O.load_team(mislabelled, env)
    finally:
        env.close()
    msg = str(exc.value)
    assert "\n" not in msg and str(mislabelled) in msg
    assert "expected 6 agents with obs (13, 13, 5) and 21 actions" in msg and "found 4 agents with obs (10, 10, 5)" in msg
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # never modified

    with pytest.raises(O.OpponentFileError, match="no such weights file"):
        O.load_team(tmp_path / "missing.safetensors")

    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(O.OpponentFileError) as exc:
        O.load_team(truncated)
    assert str(truncated) in str(exc.value) and "\n" not in str(exc.value)

    # tensors that disagree with the metadata: name the tensor, the expected and the found shape
    with safe_open(str(path), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    tensors["predator_1.adv_out.weight"] = torch.zeros(1, 32, 9, dtype=torch.float16)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(O.OpponentFileError) as exc:
        O.load_team(bad)
    assert "predator_1.adv_out.weight: expected (1, 32, 13), found (1, 32, 9)" in str(exc.value)


def test_cli_bad_opponent_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.safetensors"
    assert main(["train", "--env", "battle", "--opponent", str(missing), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {missing}: no such weights file"
    assert not (tmp_path / "runs").exists()
    path, _ = team(tmp_path, hiddens=32)
    assert main(["opponents", "eval", "--env", "battle", "--opponent", str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: expected a team of battle, got a team file of adversarial_pursuit"


def test_a_team_file_of_nan_weights_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A team whose weights are NaN (or inf) would play and be trained against without a word: refused by name,
    before any folder is written."""
    torch.manual_seed(0)
    net = BatchedQNet(4, ADV_SHAPE, ADV_ACTIONS, hiddens=8)
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(float("nan"))
    path = tmp_path / "nan.safetensors"
    O.save_team(path, net, O.TeamMeta("adversarial_pursuit", PREDATORS, ADV_SHAPE, ADV_ACTIONS, hiddens=8))
    assert main(["train", "--env", "adversarial_pursuit", "--opponent", str(path), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: expected finite weights, got NaN or inf in predator_0.") and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_original_pickle_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, net = team(tmp_path)
    weights = {}
    for p, agent in enumerate(PREDATORS):  # RLlib 2.1 get_weights(): {policy_id: {param: ndarray}}
        sd = {k: v.numpy() for k, v in reference_from_batched(net, p).state_dict().items()}
        sd.update({"value_fn.weight": np.zeros((1, 64), np.float32), "value_fn.bias": np.zeros(1, np.float32)})
        weights[agent] = sd
    weights["prey_0"] = weights["predator_0"]  # other policies in the file are ignored
    path = tmp_path / "advpursuit.weights"
    path.write_bytes(pickle.dumps(weights))
    cfg = env_cfg("adversarial_pursuit", opponent=str(path))
    with pytest.raises(O.OpponentFileError, match="--allow-pickle"):
        make_env(cfg)
    env = make_env(replace(cfg, opponent_allow_pickle=True), seed=3)
    try:
        assert "warning" in capsys.readouterr().err
        loaded = env.opponent.net  # type: ignore[attr-defined]
        obs = np.random.default_rng(1).random((4, *ADV_SHAPE)).astype(np.float32)
        assert torch.allclose(q_of(loaded, obs), q_of(net, obs), atol=1e-5)
        env.reset(seed=3)
        env.step(np.zeros(8, dtype=np.int64))
    finally:
        env.close()


def test_greedy_actions_are_deterministic_and_epsilon_is_seeded(tmp_path: Path) -> None:
    path, net = team(tmp_path, hiddens=32, dtype="float32")
    loaded, _ = O.load_team(path)
    obs = np.random.default_rng(2).random((4, *ADV_SHAPE)).astype(np.float32)
    alive = np.ones(4, dtype=bool)
    greedy = O.NetworkOpponent(loaded, 0.0, seed=1)
    state = greedy.rng.bit_generator.state
    a1, a2 = greedy.act(obs, alive), greedy.act(obs, alive)
    assert np.array_equal(a1, a2) and np.array_equal(a1, q_of(net, obs).argmax(-1).numpy())
    assert greedy.rng.bit_generator.state == state  # greedy acting draws nothing
    e1, e2 = O.NetworkOpponent(loaded, 0.5, seed=7), O.NetworkOpponent(loaded, 0.5, seed=7)
    seq1 = [e1.act(obs, alive) for _ in range(20)]
    seq2 = [e2.act(obs, alive) for _ in range(20)]
    assert all(np.array_equal(x, y) for x, y in zip(seq1, seq2))
    assert any(not np.array_equal(x, a1) for x in seq1)


def test_env_with_file_opponent_plays_and_counts_outcomes(tmp_path: Path) -> None:
    path, _ = team(tmp_path, hiddens=32)
    env = make_env(env_cfg("adversarial_pursuit", opponent=str(path), horizon=15), seed=5)
    try:
        assert isinstance(env.opponent, O.NetworkOpponent)  # type: ignore[attr-defined]
        res = O.play(env, O.team_policy("random", env, 5), 3, seed=5)
    finally:
        env.close()
    assert res.length_K.tolist() == [15, 15, 15]
    assert np.array_equal(res.outcome_K, -np.sign(res.opponent_return_K).astype(int))
    s = res.summary()
    assert 0 <= s["win_rate_ci"][0] <= s["win_rate"] <= s["win_rate_ci"][1] <= 1


def test_wilson_interval() -> None:
    lo, hi = O.wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)


def test_opponents_train_and_eval_cli_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "opp"
    args = ["opponents", "train", "--env", "adversarial_pursuit", "--num-timesteps", "40", "--snapshots", "2",
            "--eval-episodes", "1", "--out", str(out), "--set", "env.horizon=8", "--set", "dqn.batch_size=2",
            "--set", "dqn.learning_starts=20", "--set", "dqn.hiddens=16"]
    assert main(args) == 0
    folder = out / "adversarial_pursuit__ddqn__s1__selfplay"
    snaps = sorted(p.name for p in (folder / "snapshots").iterdir())
    assert snaps == ["step_00000020_predator.safetensors", "step_00000020_prey.safetensors",
                     "step_00000040_predator.safetensors", "step_00000040_prey.safetensors"]
    rows = (folder / "evaluation.csv").read_text().splitlines()
    assert len(rows) == 1 + 4  # random vs random, 2 snapshots vs random, 1 vs the previous snapshot
    card = (folder / "adversarial_pursuit.card.md").read_text()
    assert "sha256" in card and O.sha256(folder / "adversarial_pursuit.safetensors") in card
    assert "super-marl opponents train --env adversarial_pursuit --num-timesteps 40" in card
    capsys.readouterr()
    # the self-play run's final.pt as the prey team against the chosen predators
    assert main(["opponents", "eval", "--env", "adversarial_pursuit", "--team",
                 str(folder / "checkpoints" / "final.pt"), "--opponent",
                 str(folder / "adversarial_pursuit.safetensors"), "--episodes", "1"]) == 0
    assert "team win rate" in capsys.readouterr().out


@pytest.mark.parametrize("name", opponent_env_names())
def test_shipped_opponents_beat_random(name: str) -> None:
    """The shipped file loads against the env and its team beats a random team on fixed seeded episodes
    (the card's claim, re-checked on 4 episodes from seed 20001; horizon cut to 100 steps for speed)."""
    path = O.OPPONENTS_DIR / f"{name}.safetensors"
    card = (O.OPPONENTS_DIR / f"{name}.card.md").read_text()
    assert O.sha256(path) in card
    env = make_env(env_cfg(name, opponent="pretrained", horizon=100), seed=20_001)
    try:
        assert isinstance(env.opponent, O.NetworkOpponent)  # type: ignore[attr-defined]
        res = O.play(env, O.team_policy("random", env, 20_001), 4, seed=20_001)
    finally:
        env.close()
    random_env = make_env(env_cfg(name, opponent="random", horizon=100), seed=20_001)
    try:
        ref = O.play(random_env, O.team_policy("random", random_env, 20_001), 4, seed=20_001)
    finally:
        random_env.close()
    assert res.opponent_return_K.mean() > ref.opponent_return_K.mean()
    assert (res.outcome_K < 0).mean() >= 0.75  # the random team loses at least 3 of the 4 episodes


def test_battle_won_by_elimination_counts_the_survivors() -> None:
    """When one battle team is wiped out the engine ends the game and magent2 terminates every agent, the
    survivors too; episodes must still count the survivors (from the engine), so under battle's outcome rule
    (``opponents.outcomes``, as ``opponents.play`` applies it) the side left standing wins instead of a 0-vs-0 tie. A random blue
    team against the shipped red one is wiped out in some episodes; checked on a batch of games and on one env
    playing them one at a time (the random team's draws differ between the two: each on its own games)."""
    cfg = env_cfg("battle", opponent="pretrained")
    for env in (make_batch(cfg, 12, seed=7), make_env(cfg, seed=7)):
        try:
            ep = play_episodes(env, O.team_policy("random", env, 7), episode_seeds(7, 0, 12))
        finally:
            env.close()
        early = ep.length_K < cfg.horizon  # ended by the engine: a team eliminated
        assert early.any() and (~early).any(), ep.length_K
        assert np.all((ep.team_alive_K[early] == 0) != (ep.opponent_alive_K[early] == 0))  # one side standing
        assert np.all(O.outcomes("battle", ep)[early] != 0)


def test_eval_opponent_epsilon_explores_in_evaluation_games_only() -> None:
    """``env.eval_opponent_epsilon`` (``--eval-opponent-epsilon``): the evaluation env's network opponent
    explores with it while training games keep ``env.opponent_epsilon`` (the original: exploring in training,
    greedy in evaluation, i.e. ``--opponent-epsilon 0.1``); a greedy team then plays differing battle games."""
    cfg = resolve("battle", "ddqn", overrides={"env.eval_opponent_epsilon": 0.05, "env.opponent_epsilon": 0.1,
                                               "env.horizon": 100, "run.eval_episodes": 4})
    eval_env, train_env = make_eval_env(cfg, eval_seed=11), make_env(cfg.env, seed=11)
    try:
        assert [g.opponent.epsilon for g in eval_env.games] == [0.05] * 4  # type: ignore[attr-defined]
        assert train_env.opponent.epsilon == 0.1  # type: ignore[attr-defined]
        greedy_blue = O.team_policy(str(O.OPPONENTS_DIR / "battle.safetensors"), eval_env, 11)
        ep = play_episodes(eval_env, greedy_blue, episode_seeds(11, 0, 4))
    finally:
        eval_env.close()
        train_env.close()
    assert len(set(np.round(ep.agent_return_KN.sum(axis=1), 6))) > 1
    with pytest.raises(C.ConfigError, match=r"env.eval_opponent_epsilon: expected a number in \[0, 1\]"):
        resolve("battle", "ddqn", overrides={"env.eval_opponent_epsilon": 1.5})
