"""The population commands end to end on battle's smallest map: every output, install, resume after SIGKILL."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from suPER import opponents as O
from suPER.cli import main
from tests.hostile.test_run_folders import disk_full_after  # noqa: F401, F811 - the fixture

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "env.kwargs.map_size=12", "--set", "dqn.batch_size=2", "--set", "dqn.hiddens=8",
        "--set", "dqn.buffer_size=500"]
"""battle 2 vs 2 on map 12, a tiny network and batch"""


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_selfplay_writes_every_output_warm_starts_and_installs(tmp_path: Path) -> None:
    """The cheap default-suite variant: two 20-step best responses of the red side (no updates: learning
    starts after 20 steps), the second warm-started from the first (self-play's meta-strategy: the newest)."""
    args = ["population", "selfplay", "--env", "battle", "--iterations", "2", "--br-steps", "20", "--sides",
            "opponent", "--eval-episodes", "1", "--warm-start", "best", "--out", str(tmp_path), "--install",
            "--install-dir", str(tmp_path / "inst"), *TINY, "--set", "env.horizon=6", "--set",
            "dqn.learning_starts=20"]
    assert main(args) == 0
    folder = tmp_path / "battle__selfplay__s1"
    for name in ("population.json", "state.json", "payoff.csv", "policies.csv", "meta_strategy.csv",
                 "exploitability.csv", "ratings.csv", "payoff.png", "meta_strategy.png", "exploitability.png"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 2}
    net1, meta = O.load_team(folder / "policies" / "red" / "001.safetensors")
    net2, _ = O.load_team(folder / "policies" / "red" / "002.safetensors")
    assert meta.agent_ids == ("red_0", "red_1") and meta.hiddens == 8
    for k, v in net1.state_dict().items():  # warm start and no update: the same networks
        assert torch.equal(v, net2.state_dict()[k]), k
    card = rows(folder / "policies.csv")
    assert [(r["policy"], r["env_steps"], r["trained_against"], r["warm_start"]) for r in card] == [
        ("red/001", "20", '{"random": 1.0}', "scratch"), ("red/002", "20", '{"random": 1.0}', "red/001")]
    assert O.sha256(folder / "policies" / "red" / "001.safetensors") == card[0]["sha256"]
    assert [(r["team_policy"], r["opponent_policy"]) for r in rows(folder / "payoff.csv")] == [
        ("random", "random"), ("random", "red/001"), ("random", "red/002")]
    # self-play: all weight on the newest policy of each side (the team side did not train: random)
    assert [(r["side"], r["policy"], float(r["weight"])) for r in rows(folder / "meta_strategy.csv")
            if r["iteration"] == "2"] == [("blue", "random", 1.0), ("red", "random", 0.0), ("red", "red/001", 0.0),
                                          ("red", "red/002", 1.0)]
    rated = {(r["side"], r["policy"]): r for r in rows(folder / "ratings.csv") if r["iteration"] == "2"}
    assert sorted(rated) == [("blue", "random"), ("red", "random"), ("red", "red/001"), ("red", "red/002")]
    payoff = {(r["team_policy"], r["opponent_policy"]): r for r in rows(folder / "payoff.csv")}
    assert rated[("red", "red/001")]["win_vs_random"] == payoff[("random", "red/001")]["loss_rate"]
    mixture = json.loads((tmp_path / "inst" / "battle.mixture.json").read_text())
    assert mixture["format"] == "super-marl-mixture" and abs(sum(m["weight"] for m in mixture["members"]) - 1) < 1e-9
    assert "Opponent mixture: battle (red side)" in (tmp_path / "inst" / "battle.mixture.card.md").read_text()
    # a finished run extended by one iteration: only the new best response and its entry are computed
    before = rows(folder / "payoff.csv")
    assert main([*args[:4], "--iterations", "3", *args[6:]]) == 0
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 3}
    assert rows(folder / "payoff.csv")[:3] == before and len(rows(folder / "payoff.csv")) == 4
    assert [r["policy"] for r in rows(folder / "policies.csv")] == ["red/001", "red/002", "red/003"]
    assert json.loads((folder / "population.json").read_text())["iterations"] == 3


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, flag in ((["--iterations", "0"], "--iterations"), (["--sides", "blue"], "--sides"),
                        (["--meta-solver", "lp"], "--meta-solver"), (["--set", "dqn.lr"], "--set")):
        assert main(["population", "psro", "--env", "battle", "--out", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {flag}") and "\n" not in err, err
    assert main(["population", "psro", "--env", "pursuit", "--out", str(tmp_path)]) == 2
    assert "--env" in capsys.readouterr().err
    assert main(["population", "psro", "--env", "battle", "--out", str(tmp_path), "--vs-shipped", *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --vs-shipped: the shipped opponent does not fit") and "\n" not in err, err
    assert not list(tmp_path.iterdir())


def test_a_folder_it_cannot_use_is_one_line_exit_2_and_left_as_it_was(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """--out under a file, a damaged population.json or state.json, a run of other settings, a folder another
    process writes: one line naming the file or flag, exit 2, nothing written (refused before any training)."""
    from suPER.runs import RunFolder

    args = ["population", "selfplay", "--env", "battle", "--iterations", "1", "--br-steps", "20", "--sides",
            "opponent", "--eval-episodes", "1", *TINY]

    def refused(out: Path, *needles: str, extra: tuple[str, ...] = ()) -> str:
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert main([*args, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and all(n in err for n in needles), err
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
        return err

    (tmp_path / "afile").write_text("x")
    refused(tmp_path / "afile", "--out: cannot create folder")
    folder = tmp_path / "runs" / "battle__selfplay__s1"
    folder.mkdir(parents=True)
    (folder / "population.json").write_text("{oops")
    refused(tmp_path / "runs", str(folder / "population.json"), "--overwrite")
    (folder / "population.json").write_text('{"env": "battle", "seed": 7}')
    refused(tmp_path / "runs", "--out:", "other settings", "seed")
    # --overwrite with a bad setting: the setting is refused before the folder is emptied
    refused(tmp_path / "runs", "--iterations: expected", extra=("--overwrite", "--iterations", "0"))
    with RunFolder(folder).lock():
        err = refused(tmp_path / "runs", "being written by another process", f"pid {os.getpid()}", "another --out")
        assert "--overwrite" not in err and "--tag" not in err  # a population has no --tag to choose another folder
    (folder / "population.json").unlink()
    (folder / "state.json").write_text("[]")
    refused(tmp_path / "runs", f"error: {folder / 'state.json'}: expected")  # even without population.json
    for bad in ("-1", "true", "1.7", "5"):  # a count of finished iterations: 0..--iterations, an integer
        (folder / "state.json").write_text(f'{{"finished_iterations": {bad}}}')
        refused(tmp_path / "runs", f"error: {folder / 'state.json'}: expected finished_iterations to be an integer "
                                   f"in 0..1, got {bad.replace('true', 'True')}")
    (folder / "state.json").unlink()
    (folder / "payoff.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    refused(tmp_path / "runs", f"error: {folder / 'payoff.csv'}: expected the payoff table (CSV), got bytes that "
                               f"are not text")
    (folder / "payoff.csv").write_text("team_policy,opponent_policy\nrandom,random\n")
    refused(tmp_path / "runs", f"{folder / 'payoff.csv'}: expected the payoff table (CSV), got a file without the "
                               f"columns team_policy, opponent_policy, episodes")


def _wait(proc: subprocess.Popen[bytes], ready, timeout: float = 900.0) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not ready():
        assert proc.poll() is None, "the run ended before the kill point"
        assert time.monotonic() - t0 < timeout, "kill point not reached"
        time.sleep(0.1)


@pytest.mark.slow
def test_psro_two_iterations_resumes_after_sigkill(tmp_path: Path) -> None:
    """2 iterations x 2 sides x 300-step best responses; SIGKILL once inside iteration 2's first best
    response (after its first checkpoint) and once while iteration 2's payoff entries are being played.
    The resumed run finishes; no policy file, table entry or iteration-1 row is recomputed."""
    cmd = [sys.executable, "-c", "import sys; from suPER.cli import main; sys.exit(main(sys.argv[1:]))",
           "population", "psro", "--env", "battle", "--iterations", "2", "--br-steps", "300", "--eval-episodes",
           "3", "--out", str(tmp_path), *TINY, "--set", "env.horizon=30", "--set", "dqn.learning_starts=50",
           "--no-figures"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    folder = tmp_path / "battle__psro__s1"
    br2 = folder / "br" / "battle__ddqn_super_quantile__s2001__it002_team"

    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait(proc, lambda: (br2 / "checkpoints" / "latest.pt").exists())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 1}
    first = rows(folder / "payoff.csv")
    assert len(first) == 4  # 1 x 1 then 2 x 2
    red1 = O.sha256(folder / "policies" / "red" / "001.safetensors")

    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait(proc, lambda: len(rows(folder / "payoff.csv")) >= 5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    second = rows(folder / "payoff.csv")
    assert second[:4] == first and len(second) < 9

    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resuming after iteration 1 of 2" in out.stdout
    assert "best response of" not in out.stdout  # both of iteration 2 were finished before the second kill
    assert f"iteration 2: {9 - len(second)} matches" in out.stdout
    final = rows(folder / "payoff.csv")
    assert final[:len(second)] == second and len(final) == 9
    assert O.sha256(folder / "policies" / "red" / "001.safetensors") == red1
    manifest = json.loads((br2 / "manifest.json").read_text())
    assert manifest["status"] == "finished" and len(manifest["resumed"]) == 1  # continued from its checkpoint
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 2}
    assert [r["iteration"] for r in rows(folder / "exploitability.csv")] == ["1", "2"]
    assert [r["policy"] for r in rows(folder / "policies.csv")] == ["blue/001", "red/001", "blue/002", "red/002"]


def test_nash_average_ratings_of_a_known_table() -> None:
    """Team policy b beats everything; opponent policy r draws with random and loses to b: the Nash puts the
    team on b, the opponent on either, so b rates +1 (its payoff against the opponent's Nash). The shipped
    references: b against the shipped opponent (column), r against the shipped weights on the team side (row)."""
    from suPER.population.loop import ratings
    from suPER.population.payoff import PayoffTable

    def entry(t: str, o: str, win: float, loss: float) -> dict[str, object]:
        return {"team_policy": t, "opponent_policy": o, "episodes": 4, "win_rate": win, "win_lo": 0.0,
                "win_hi": 1.0, "loss_rate": loss, "loss_lo": 0.0, "loss_hi": 1.0, "tie_rate": 1 - win - loss}

    table = PayoffTable({(t, o): entry(t, o, w, lo) for t, o, w, lo in (
        ("random", "random", 0.0, 0.0), ("random", "r", 0.0, 0.5), ("b", "random", 1.0, 0.0), ("b", "r", 1.0, 0.0),
        ("b", "shipped", 0.25, 0.5), ("shipped", "r", 0.75, 0.125))})
    team, opp = ["random", "b"], ["random", "r"]
    rated = ratings(3, table, team, opp, table.matrix(team, opp), {"team": "blue", "opponent": "red"})
    got = {(r["side"], r["policy"]): (r["nash_average"], r["win_vs_random"]) for r in rated}
    assert got[("blue", "b")] == (1.0, 1.0) and got[("red", "r")] == (-1.0, 0.5)
    assert got[("blue", "random")][0] in (0.0, -0.5) and got[("red", "random")] == (-1.0, 0.0)
    shipped = {(r["side"], r["policy"]): r["win_vs_shipped"] for r in rated}
    assert shipped[("blue", "b")] == 0.25 and shipped[("red", "r")] == 0.125  # r's win = the row's loss rate
    assert np.isnan(shipped[("blue", "random")]) and np.isnan(shipped[("red", "random")])


def test_init_from_refuses_a_team_that_does_not_fit(tmp_path: Path) -> None:
    from suPER import config as C
    from suPER.models import BatchedQNet
    from suPER.native.dqn_run import load_init_team

    path = tmp_path / "t.safetensors"
    O.save_team(path, BatchedQNet(2, (13, 13, 5), 21, hiddens=8),
                O.TeamMeta("battle", ("red_0", "red_1"), (13, 13, 5), 21, hiddens=8))
    fits = BatchedQNet(2, (13, 13, 5), 21, hiddens=8)
    assert set(load_init_team(str(path), fits)) == set(fits.state_dict())
    with pytest.raises(C.ConfigError, match="dqn.init_from: .*t.safetensors holds 2 networks"):
        load_init_team(str(path), BatchedQNet(3, (13, 13, 5), 21, hiddens=8))


@pytest.mark.slow
def test_vs_shipped_reference_column(tmp_path: Path) -> None:
    """On battle's map 18 every blue policy also plays the shipped red team, and every red policy the same weights
    playing blue; ratings.csv reports both, and the meta-game ignores them."""
    args = ["population", "psro", "--env", "battle", "--iterations", "1", "--br-steps", "10", "--sides", "team",
            "--eval-episodes", "1", "--vs-shipped", "--no-figures", "--out", str(tmp_path), "--set", "env.horizon=5",
            "--set", "dqn.learning_starts=10", "--set", "dqn.buffer_size=200"]
    assert main(args) == 0
    folder = tmp_path / "battle__psro__s1"
    pairs = [(r["team_policy"], r["opponent_policy"]) for r in rows(folder / "payoff.csv")]
    assert pairs == [("random", "random"), ("random", "shipped"), ("shipped", "random"), ("blue/001", "random"),
                     ("blue/001", "shipped")]
    rated = {(r["side"], r["policy"]): r for r in rows(folder / "ratings.csv")}
    payoff = {(r["team_policy"], r["opponent_policy"]): r for r in rows(folder / "payoff.csv")}
    assert rated[("blue", "blue/001")]["win_vs_shipped"] == payoff[("blue/001", "shipped")]["win_rate"]
    assert rated[("red", "random")]["win_vs_shipped"] == payoff[("shipped", "random")]["loss_rate"]
    assert sorted(r["policy"] for r in rows(folder / "meta_strategy.csv")) == ["blue/001", "random", "random"]


@pytest.mark.parametrize("writes_before_full", [3, 12], ids=["at-the-settings", "in-the-first-best-response"])
def test_disk_full_during_a_population_is_one_line_and_it_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  disk_full_after: object,  # noqa: F811 - the fixture
                                                                  writes_before_full: int) -> None:
    """The disk fills during a population run: one error line naming what could not be written and that the run
    resumes, exit 1 (an 87-line traceback from torch's zip writer before); with space freed the same command
    finishes."""
    args = ["population", "selfplay", "--env", "battle", "--iterations", "1", "--br-steps", "20", "--sides",
            "opponent", "--eval-episodes", "1", "--no-figures", *TINY, "--out", str(tmp_path / "runs")]
    disk_full_after(tmp_path / "runs", writes_before_full)  # type: ignore[operator]
    capsys.readouterr()
    assert main(args) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "No space left on device" in err[0] and "resumable" in err[0], err
    disk_full_after(tmp_path / "runs", 10**9)  # type: ignore[operator]
    assert main(args) == 0, capsys.readouterr().err
