"""Payoff table (only missing entries, CIs, the two sides' views), the mixture opponent and swapped teams,
on battle's smallest map (2 vs 2, map 12) with 10-step episodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from suPER import config as C
from suPER import opponents as O
from suPER.evaluation import episode_seeds
from suPER.models import BatchedQNet
from suPER.opponents.mixture import MEMBER_SEED_TAG, Member, write_mixture
from suPER.population.payoff import PayoffTable, play_match
from suPER.resolve import resolve


@pytest.fixture(scope="module")
def env_cfg() -> C.EnvConfig:
    base = resolve("battle", "ddqn").env
    return replace(base, opponent="random", horizon=10, kwargs={**base.kwargs, "map_size": 12})


def team_file(folder: Path, side: str, seed: int) -> str:
    """A random-weight team of battle map 12's blue or red side (2 agents, hiddens 8)."""
    torch.manual_seed(seed)
    net = BatchedQNet(2, (13, 13, 5), 21, hiddens=8)
    path = folder / f"{side}{seed}.safetensors"
    O.save_team(path, net, O.TeamMeta("battle", (f"{side}_0", f"{side}_1"), (13, 13, 5), 21, hiddens=8))
    return str(path)


def test_fill_plays_only_missing_entries(tmp_path: Path, env_cfg: C.EnvConfig) -> None:
    played: list[tuple[str, str]] = []

    def match(cfg: C.EnvConfig, team: str, opponent: str, episodes: int, seed: int) -> dict[str, Any]:
        played.append((team, opponent))
        return play_match(cfg, team, opponent, episodes, seed)

    path = tmp_path / "payoff.csv"
    table = PayoffTable()
    assert table.fill(env_cfg, {"random": "random"}, {"random": "random"}, 2, 5, path, match=match) == 1
    first = dict(table.entries[("random", "random")])
    red = team_file(tmp_path, "red", 1)
    loaded = PayoffTable.load(path)  # a resumed run reads the file back
    assert loaded.entries[("random", "random")] == pytest.approx(first)
    n = loaded.fill(env_cfg, {"random": "random", "b1": team_file(tmp_path, "blue", 2)},
                    {"random": "random", "r1": red}, 2, 5, path, match=match)
    assert n == 3 and len(played) == 4 and played[0] == ("random", "random")
    assert ("random", "random") not in [(t, o) for t, o in played[1:]]
    again = PayoffTable.load(path)
    assert len(again.entries) == 4 and again.entries[("random", "random")] == pytest.approx(first)
    assert again.missing(["random", "b1"], ["random", "r1"]) == []
    u = again.matrix(["random", "b1"], ["random", "r1"])
    assert u.shape == (2, 2) and ((u >= -1) & (u <= 1)).all()


def test_cis_shrink_with_episodes(env_cfg: C.EnvConfig) -> None:
    few, many = (play_match(env_cfg, "random", "random", e, 7) for e in (3, 16))
    assert many["episodes"] == 16 and few["episodes"] == 3
    for lo, hi in (("win_lo", "win_hi"), ("loss_lo", "loss_hi"), ("team_return_lo", "team_return_hi")):
        assert many[lo] <= many[hi] and many[hi] - many[lo] < few[hi] - few[lo], lo


def test_two_sides_agree_and_mixture_plays_one_member_per_seeded_episode(tmp_path: Path,
                                                                         env_cfg: C.EnvConfig) -> None:
    """Team i vs opponent j played from the other side (red learning, ``swap_teams``) is the same game:
    the opponent's win rate there is the team's loss rate here (1 - win - tie). A mixture of two red
    teams plays, in each seeded episode, exactly the member ``default_rng([17, seed])`` draws."""
    blue, red_a, red_b = team_file(tmp_path, "blue", 3), team_file(tmp_path, "red", 4), team_file(tmp_path, "red", 5)
    here = play_match(env_cfg, blue, red_a, 4, 11)
    swapped_cfg = replace(env_cfg, opponent=blue, swap_teams=True)
    env = O.make_batch(swapped_cfg, 4, seed=11)
    try:
        assert env.spec.learner_ids == ("red_0", "red_1") and env.spec.opponent_ids == ("blue_0", "blue_1")
        there = O.play(env, O.team_policy(red_a, env, 11), 4, 11).summary()
    finally:
        env.close()
    assert there["win_rate"] == pytest.approx(here["loss_rate"]) == pytest.approx(1 - here["win_rate"]
                                                                                   - here["tie_rate"])
    assert there["team_return"] == pytest.approx(here["opponent_return"], abs=1e-5)

    mix = tmp_path / "red.mixture.json"
    write_mixture(mix, "battle", [Member("a", Path(red_a).name, 1.0), Member("b", Path(red_b).name, 1.0),
                                  Member("c", "missing.safetensors", 0.0)])  # weight 0: never loaded
    seeds = episode_seeds(11, 0, 4)
    drawn = [int(np.random.default_rng([MEMBER_SEED_TAG, int(s)]).choice(2, p=[0.5, 0.5])) for s in seeds]
    env = O.make_batch(replace(env_cfg, opponent=str(mix)), 4, seed=11)
    try:
        first, last = env.games[0].opponent, env.games[3].opponent  # type: ignore[attr-defined]
        assert first is not last and first.member(1).net is last.member(1).net  # one copy of the weights
        mixed = O.play(env, O.team_policy(blue, env, 11), 4, 11)
    finally:
        env.close()
    pure = {k: O.play(e, O.team_policy(blue, e, 11), 4, 11) for k, e in
            (("a", O.make_env(replace(env_cfg, opponent=red_a))), ("b", O.make_env(replace(env_cfg, opponent=red_b))))}
    expected = [pure["ab"[d]].opponent_return_K[k] for k, d in enumerate(drawn)]
    np.testing.assert_allclose(mixed.opponent_return_K, expected, atol=1e-5)
    assert len(set(drawn)) == 2  # both members played (else the check would not tell them apart)


def test_bad_mixture_file_is_one_config_error(tmp_path: Path, env_cfg: C.EnvConfig) -> None:
    bad = tmp_path / "bad.mixture.json"
    bad.write_text('{"format": "super-marl-mixture", "version": "1", "env": "battle", "members": []}')
    with pytest.raises(C.ConfigError, match="bad.mixture.json: expected members"):
        O.make_env(replace(env_cfg, opponent=str(bad)))


@pytest.mark.slow
def test_ray_tasks_give_the_local_entries(tmp_path: Path, env_cfg: C.EnvConfig) -> None:
    """``--match-workers``: the entries played as Ray tasks equal the ones played here (wall time aside)."""
    from suPER.population.parallel import RayTaskPool

    team = {"random": "random", "b": team_file(tmp_path, "blue", 2)}
    opponent = {"random": "random", "r": team_file(tmp_path, "red", 3)}
    local, remote = PayoffTable(), PayoffTable()
    local.fill(env_cfg, team, opponent, 3, 9)
    pool = RayTaskPool(2)
    try:
        assert remote.fill(env_cfg, team, opponent, 3, 9, tmp_path / "payoff.csv", pool=pool.matches(2)) == 4
    finally:
        pool.close()
    assert set(remote.entries) == set(local.entries)
    for key, entry in local.entries.items():
        assert {k: v for k, v in remote.entries[key].items() if k != "wall_s"} == pytest.approx(
            {k: v for k, v in entry.items() if k != "wall_s"}), key
    assert len(PayoffTable.load(tmp_path / "payoff.csv").entries) == 4


def test_a_mixture_of_many_members_reads_each_file_once_and_has_a_limit(tmp_path: Path, env_cfg: C.EnvConfig,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 members naming 2 team files: the env builds in seconds having checked each file's header once and read
    at most the first drawn member's weights; every member drawn later shares one network per file, each file
    read once. Past MAX_MIXTURE_MEMBERS the file is one OpponentFileError line."""
    import json as js
    import time

    from suPER.opponents import mixture as M
    from suPER.opponents import team_file as TF

    red1, red2 = team_file(tmp_path, "red", 1), team_file(tmp_path, "red", 2)
    members = [{"policy": f"p{k}", "file": Path(red1 if k % 2 else red2).name, "weight": 1.0} for k in range(3000)]
    path = tmp_path / "big.mixture.json"
    path.write_text(js.dumps({"format": M.FORMAT, "version": M.FORMAT_VERSION, "env": "battle", "members": members}))
    monkeypatch.setattr(M, "MAX_MIXTURE_MEMBERS", 5000)
    reads: list[str] = []
    headers: list[str] = []
    real, real_inspect = TF.load_team, TF.inspect_team
    monkeypatch.setattr(M, "load_team", lambda p, *a, **k: (reads.append(str(p)), real(p, *a, **k))[1])
    monkeypatch.setattr(M, "inspect_team", lambda p, *a, **k: (headers.append(str(p)), real_inspect(p, *a, **k))[1])
    t0 = time.monotonic()
    env = O.make_env(replace(env_cfg, opponent=str(path)), seed=1)
    try:
        assert len(headers) == 2 and len(reads) <= 1 and time.monotonic() - t0 < 60  # lazily: the drawn one only
        mixture = env.opponent  # type: ignore[attr-defined]
        nets = {id(mixture.member(k).net) for k in range(3000)}
        assert len(mixture.built) == 3000 and len(nets) == 2 and sorted(set(reads)) == sorted(reads)
    finally:
        env.close()
    monkeypatch.setattr(M, "MAX_MIXTURE_MEMBERS", 1000)
    with pytest.raises(C.ConfigError, match="big.mixture.json: expected at most 1000 members of positive weight, got 3000"):
        O.make_env(replace(env_cfg, opponent=str(path)), seed=1)


def test_loading_an_opponent_draws_from_torch_as_reading_every_file_up_front_did(tmp_path: Path,
                                                                                env_cfg: C.EnvConfig) -> None:
    """A run's networks are initialised from torch's global generator after its opponent is built, so how an
    opponent loads must not move that generator: checking a file draws nothing, a mixture draws what reading each
    distinct file once draws (``load_team``), and a member read later, when first drawn, draws nothing."""
    from suPER.opponents import inspect_team, load_team

    red_a, red_b = team_file(tmp_path, "red", 4), team_file(tmp_path, "red", 5)
    torch.manual_seed(0)
    expected_after_check = torch.rand(1).item()
    torch.manual_seed(0)
    inspect_team(red_a)
    assert torch.rand(1).item() == expected_after_check

    mix = tmp_path / "red.mixture.json"
    write_mixture(mix, "battle", [Member("a", Path(red_a).name, 1.0), Member("b", Path(red_b).name, 1.0)])
    torch.manual_seed(0)
    load_team(red_a)
    load_team(red_b)
    eager = torch.rand(1).item()
    torch.manual_seed(0)
    env = O.make_env(replace(env_cfg, opponent=str(mix)), seed=1)
    try:
        assert torch.rand(1).item() == eager
        state = torch.get_rng_state()
        mixture = env.opponent  # type: ignore[attr-defined]
        for k in range(2):
            mixture.member(k)  # the member not drawn at build time is read now
        assert torch.equal(torch.get_rng_state(), state)
    finally:
        env.close()
