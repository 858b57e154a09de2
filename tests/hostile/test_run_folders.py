"""Hostile-input corpus: run folders - damaged, missing or foreign files, a second writer, a full disk.

Two tiny pursuit runs are built once per module and copied into every case: ``finished`` (300 env steps,
evaluations at 0, 100, 200, 300) and ``unfinished`` (interrupted at 250 env steps by a Ctrl-C: manifest
``interrupted``, ``checkpoints/latest.pt`` at 200, metrics rows 0, 100, 200). Each case damages a copy, runs
the same ``super-marl train`` command again and asserts the contract of conftest.py: a refusal is exit 2 with
one stderr line naming the file and nothing changed; a repair says what it found and ends with every
evaluation row exactly once.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.hostile.conftest import assert_refused, assert_unchanged, run_cli, snapshot

RUN = "pursuit__ddqn__s1"
BUDGET = 300
TINY = ["train", "--env", "pursuit", "--model", "mlp", "--num-timesteps", str(BUDGET), "--eval-interval", "100",
        "--eval-episodes", "1", "--no-progress", "--threads", "1", "--set", "env.horizon=50",
        "--set", "dqn.learning_starts=100", "--set", "dqn.buffer_size=3000", "--set", "dqn.hiddens=32",
        "--set", "env.kwargs.x_size=10", "--set", "env.kwargs.y_size=10", "--set", "env.kwargs.n_evaders=10"]
ALL_ROWS = list(range(0, BUDGET + 1, 100))


def train(out: Path, *extra: str) -> list[str]:
    return [*TINY, "--out", str(out), *extra]


def steps(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(r["env_steps"]) for r in csv.DictReader(f)]


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def manifest(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "manifest.json").read_text())


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``finished`` and ``unfinished`` run folders (parents of RUN), built once."""
    from suPER import cli, loop

    root = tmp_path_factory.mktemp("templates")
    assert cli.main(train(root / "finished")) == 0
    real = loop.RunLoop.report_progress

    def ctrl_c_at_250(self: loop.RunLoop) -> None:
        if self.env_steps >= 250:
            raise KeyboardInterrupt
        real(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop.RunLoop, "report_progress", ctrl_c_at_250)
        assert cli.main(train(root / "unfinished")) == 130
    run_dir = root / "unfinished" / RUN
    assert manifest(run_dir)["status"] == "interrupted" and steps(run_dir) == [0, 100, 200]
    assert torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)["loop"]["env_steps"] == 200
    return {"finished": root / "finished", "unfinished": root / "unfinished"}


@pytest.fixture
def finished(templates: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the finished run's parent folder (pass it as --out)."""
    shutil.copytree(templates["finished"], tmp_path / "out")
    return tmp_path / "out"


@pytest.fixture
def unfinished(templates: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the interrupted run's parent folder (pass it as --out)."""
    shutil.copytree(templates["unfinished"], tmp_path / "out")
    return tmp_path / "out"


def refused(out: Path, capsys: pytest.CaptureFixture[str], *needles: str, extra: tuple[str, ...] = ()) -> None:
    """The same train command is refused: exit 2, one line with the needles, nothing in ``out`` changed or new."""
    before = snapshot(out)
    outcome = run_cli(train(out, *extra), capsys)
    assert_refused(outcome, 2, *needles)
    assert_unchanged(before, out, allow_new=False)


# --------------------------------------------------------------------------------------------------
# a finished run whose manifest cannot be read is not retrained


@pytest.mark.parametrize("damage", [
    pytest.param(lambda p: p.unlink(), id="missing"),
    pytest.param(lambda p: p.write_text("{"), id="invalid-json"),
    pytest.param(lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), id="truncated"),
    pytest.param(lambda p: p.write_text("[1, 2]"), id="json-list"),
    pytest.param(lambda p: p.write_text('{"status": "done"}'), id="unknown-status"),
    pytest.param(lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), id="not-utf8"),
    pytest.param(lambda p: p.write_text(""), id="empty"),
])
def test_finished_run_with_unreadable_manifest_is_refused(finished: Path, capsys: pytest.CaptureFixture[str],
                                                          damage: Any) -> None:
    damage(finished / RUN / "manifest.json")
    refused(finished, capsys, str(finished / RUN / "manifest.json"), "--overwrite")


def test_unreadable_manifest_is_refused_with_skip_finished_too(finished: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (finished / RUN / "manifest.json").write_text("not json")
    refused(finished, capsys, str(finished / RUN / "manifest.json"), extra=("--skip-finished",))


def test_unfinished_run_with_unreadable_manifest_is_refused(unfinished: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (unfinished / RUN / "manifest.json").write_text('{"status": ')
    refused(unfinished, capsys, str(unfinished / RUN / "manifest.json"))


def test_finished_run_is_refused(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(finished, capsys, str(finished / RUN), "already holds a finished run")


def test_overwrite_starts_over_despite_an_unreadable_manifest(finished: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (finished / RUN / "manifest.json").write_text("{")
    outcome = run_cli(train(finished, "--overwrite"), capsys)
    assert outcome.code == 0, outcome.stderr
    assert manifest(finished / RUN)["status"] == "finished" and steps(finished / RUN) == ALL_ROWS


# --------------------------------------------------------------------------------------------------
# damaged checkpoint or config of an unfinished run: one line naming the file, nothing changed


def hostile_pickle(path: Path, marker: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    torch.save({"version": 2, "config": {}, "loop": {}, "x": Payload()}, path)


@pytest.mark.parametrize("damage, needle", [
    pytest.param(lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "truncated or damaged",
                 id="truncated"),
    pytest.param(lambda p: p.write_bytes(b""), "empty file", id="zero-bytes"),
    pytest.param(lambda p: p.write_bytes(os.urandom(4096)), "truncated or damaged", id="random-bytes"),
    pytest.param(lambda p: torch.save({"weights": torch.zeros(3)}, p), "another kind of file", id="foreign-torch-file"),
    pytest.param(lambda p: torch.save({**torch.load(p, weights_only=True), "version": 99}, p), "format",
                 id="future-version"),
    pytest.param(lambda p: torch.save({**torch.load(p, weights_only=True), "loop": {"env_steps": "x"}}, p),
                 "damaged counters", id="damaged-counters"),
])
def test_damaged_checkpoint_is_refused(unfinished: Path, capsys: pytest.CaptureFixture[str], damage: Any,
                                       needle: str) -> None:
    latest = unfinished / RUN / "checkpoints" / "latest.pt"
    damage(latest)
    refused(unfinished, capsys, str(latest), needle, "--overwrite")


def test_hostile_checkpoint_is_refused_without_running_its_code(unfinished: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    latest = unfinished / RUN / "checkpoints" / "latest.pt"
    marker = tmp_path / "payload-ran"
    hostile_pickle(latest, marker)
    refused(unfinished, capsys, str(latest), "--overwrite")
    assert not marker.exists()


@pytest.mark.parametrize("damage, needle", [
    pytest.param(lambda p: p.unlink(), "missing", id="missing"),
    pytest.param(lambda p: p.write_text('{"env": '), "unreadable", id="invalid-json"),
    pytest.param(lambda p: p.write_text("[]"), "JSON list", id="json-list"),
])
def test_damaged_config_of_an_unfinished_run_names_config_json(unfinished: Path, capsys: pytest.CaptureFixture[str],
                                                               damage: Any, needle: str) -> None:
    damage(unfinished / RUN / "config.json")
    refused(unfinished, capsys, str(unfinished / RUN / "config.json"), needle)


def test_unfinished_run_of_another_configuration_names_the_key(unfinished: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    refused(unfinished, capsys, str(unfinished / RUN), "dqn.lr", extra=("--lr", "0.123"))


def test_overwrite_restarts_an_unfinished_run_with_a_damaged_checkpoint(unfinished: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    latest = unfinished / RUN / "checkpoints" / "latest.pt"
    latest.write_bytes(latest.read_bytes()[:100])
    outcome = run_cli(train(unfinished, "--overwrite"), capsys)
    assert outcome.code == 0, outcome.stderr
    m = manifest(unfinished / RUN)
    assert m["status"] == "finished" and "resumed" not in m and steps(unfinished / RUN) == ALL_ROWS


# --------------------------------------------------------------------------------------------------
# metrics.csv: restored from the checkpoint's copy of its rows (format 2), refused without one (format 1)


def resumed_ok(out: Path, capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    outcome = run_cli(train(out), capsys)
    assert "Traceback" not in outcome.stderr
    assert outcome.code == 0, outcome.stderr
    for needle in needles:
        assert needle in outcome.stderr, outcome.stderr
    assert steps(out / RUN) == ALL_ROWS  # every evaluation exactly once
    assert manifest(out / RUN)["status"] == "finished" and len(manifest(out / RUN)["resumed"]) == 1
    return outcome.stderr


def cut_last_row(path: Path) -> None:
    """Cut the file in the middle of its last row (as a copy killed mid-write would)."""
    text = path.read_text()
    last = text.rstrip("\n").rfind("\n")
    path.write_text(text[: last + 1 + (len(text) - last) // 3])


@pytest.mark.parametrize("damage, found", [
    pytest.param(cut_last_row, "differs from the checkpoint's copy", id="row-cut-mid-line"),
    pytest.param(lambda p: p.unlink(), "missing", id="deleted"),
    pytest.param(lambda p: p.write_text(p.read_text().replace("\n100,", "\nabc,", 1)), "differs", id="non-numeric"),
    pytest.param(lambda p: p.write_text(p.read_text().splitlines()[0] + "\n"), "holds 0 of the 3 rows",
                 id="rows-dropped"),
    pytest.param(lambda p: p.write_bytes(b"\xff\xfe" * 50), "cannot be read", id="not-utf8"),
])
def test_damaged_metrics_are_restored_from_the_checkpoint(unfinished: Path, capsys: pytest.CaptureFixture[str],
                                                          damage: Any, found: str) -> None:
    metrics = unfinished / RUN / "metrics.csv"
    original = metrics_rows(unfinished / RUN)
    damage(metrics)
    resumed_ok(unfinished, capsys, str(metrics), found, "restored its 3 row(s) up to env step 200")
    assert metrics_rows(unfinished / RUN)[:3] == original  # the rows before the checkpoint, cell for cell


def as_format_1(latest: Path) -> None:
    """Rewrite a checkpoint as the earlier format: no copy of the metrics rows."""
    raw = torch.load(latest, weights_only=True)
    raw.pop("metrics")
    torch.save({**raw, "version": 1}, latest)


@pytest.mark.parametrize("damage, needle", [
    pytest.param(cut_last_row, "cut short", id="row-cut-mid-line"),
    pytest.param(lambda p: p.unlink(), "missing", id="deleted"),
    pytest.param(lambda p: p.write_text(p.read_text().replace("\n100,", "\n100,x", 1)), "is not a number",
                 id="non-numeric"),
])
def test_damaged_metrics_without_a_copy_in_the_checkpoint_are_refused(unfinished: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      damage: Any, needle: str) -> None:
    as_format_1(unfinished / RUN / "checkpoints" / "latest.pt")
    damage(unfinished / RUN / "metrics.csv")
    refused(unfinished, capsys, str(unfinished / RUN / "metrics.csv"), needle, "--overwrite")


def test_format_1_checkpoint_with_whole_metrics_still_resumes(unfinished: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    as_format_1(unfinished / RUN / "checkpoints" / "latest.pt")
    resumed_ok(unfinished, capsys, "resuming")


# --------------------------------------------------------------------------------------------------
# leftovers of a killed writer, a second writer


def test_temp_files_of_a_killed_writer_are_removed(unfinished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = unfinished / RUN / "checkpoints"
    stale = [ckpt / ".latest.pt.k2j4x9ab.pt", ckpt / ".latest.pt.zz81qq0c.pt", unfinished / RUN / ".metrics.csv.a1b2c3d4.tmp",
             unfinished / RUN / ".final_games.json.9x8y7z6w.tmp"]
    for p in stale:
        p.write_bytes(b"\0" * 200_000)
    keep = unfinished / RUN / ".user-notes"
    keep.write_text("mine")
    resumed_ok(unfinished, capsys, "removed 4 temp file(s)")
    assert not any(p.exists() for p in stale) and keep.read_text() == "mine"


def test_manifest_left_running_by_a_dead_writer_resumes(unfinished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = unfinished / RUN / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "running"}))
    resumed_ok(unfinished, capsys, "said running, but no process was writing it")


def test_deleted_checkpoint_with_evaluations_after_step_0_is_refused(unfinished: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Starting over would silently drop the evaluations the missing checkpoint would have continued."""
    (unfinished / RUN / "checkpoints" / "latest.pt").unlink()
    assert any(s > 0 for s in steps(unfinished / RUN))
    refused(unfinished, capsys, "latest.pt: missing", "metrics.csv", "--overwrite")


def test_second_writer_is_refused(unfinished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A lock held through another open file (as another process would) refuses the run, naming the folder."""
    from suPER.runs import RunFolder

    with RunFolder(unfinished / RUN).lock():
        before = snapshot(unfinished)
        outcome = run_cli(train(unfinished), capsys)
        assert_refused(outcome, 2, str(unfinished / RUN), "another process", f"pid {os.getpid()}",
                       "another --out or --tag")
        assert_unchanged(before, unfinished, allow_new=False)
    assert not (unfinished / RUN / ".writer.lock").exists()


# --------------------------------------------------------------------------------------------------
# a full disk: one line, exit 1, resumable


def assert_failed_one_line(outcome: Any, *needles: str) -> None:
    """A failure once the run has started: exit 1, no traceback, one ``error:`` line (the last; the lines
    before it are the run's normal start message) holding every needle."""
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome.stderr
    assert outcome.code == 1, outcome.stderr
    errors = [line for line in outcome.stderr_lines if line.startswith("error:")]
    assert errors == [outcome.stderr_lines[-1]], outcome.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def disk_full_after(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``arm(root, n)``: after ``n`` more atomic writes below ``root``, every write there fails with ENOSPC
    (the rename of a written temp file fails, as the write of a full disk would; the temp file is left to the
    writer's cleanup)."""
    import suPER.runs as runs

    real = runs.os.replace
    state: dict[str, Any] = {"root": None, "left": 0}

    def replace(src: Any, dst: Any) -> None:
        root = state["root"]
        if root is not None and Path(dst).resolve().is_relative_to(root):
            if state["left"] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            state["left"] -= 1
        real(src, dst)

    def arm(root: Path, n: int) -> None:
        state.update(root=Path(root).resolve(), left=n)

    monkeypatch.setattr(runs.os, "replace", replace)
    yield arm
    state["root"] = None


@pytest.mark.parametrize("writes_before_full", [2, 4], ids=["at-first-metrics-row", "after-first-checkpoint"])
def test_disk_full_is_one_line_and_the_folder_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      disk_full_after: Any, writes_before_full: int) -> None:
    out = tmp_path / "out"
    disk_full_after(out, writes_before_full)  # manifest, config.json, then metrics.csv / latest.pt
    outcome = run_cli(train(out), capsys)
    assert_failed_one_line(outcome, "No space left on device", "resumable", str(out / RUN))
    run_dir = out / RUN
    assert manifest(run_dir)["status"] == "running"  # the disk was full: the last manifest write failed too
    assert not [p for p in run_dir.rglob(".*") if p.name != ".writer.lock"], "temp files left behind"
    assert not (run_dir / ".writer.lock").exists()
    disk_full_after(out, 10**9)  # space freed
    outcome = run_cli(train(out), capsys)
    assert outcome.code == 0, outcome.stderr
    assert steps(run_dir) == ALL_ROWS and manifest(run_dir)["status"] == "finished"


def test_disk_full_while_checkpointing_marks_the_manifest_failed(unfinished: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the big checkpoint write fails (the small manifest still fits): manifest failed, resumable."""
    import suPER.loop as loop

    def full(obj: Any, path: Any) -> None:
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(loop, "torch_save", full)
    before = steps(unfinished / RUN)
    outcome = run_cli(train(unfinished), capsys)
    assert_failed_one_line(outcome, str(unfinished / RUN / "checkpoints" / "latest.pt"), "No space left on device")
    assert manifest(unfinished / RUN)["status"] == "failed"
    assert not list((unfinished / RUN / "checkpoints").glob(".latest.pt.*"))
    monkeypatch.undo()
    resumed = run_cli(train(unfinished), capsys)
    assert resumed.code == 0 and steps(unfinished / RUN) == ALL_ROWS and before == [0, 100, 200]


# --------------------------------------------------------------------------------------------------
# several seeds after a crash


def test_num_seeds_rerun_skips_finished_seeds_and_resumes_the_rest(finished: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1 finished, seed 2 interrupted by a crash: the same ``--num-seeds 2`` command skips seed 1 with a
    note (its files untouched) and resumes seed 2 (it used to be refused at seed 1)."""
    from suPER import loop

    real = loop.RunLoop.report_progress

    def crash_at_250(self: loop.RunLoop) -> None:
        if self.env_steps >= 250:
            raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(loop.RunLoop, "report_progress", crash_at_250)
    assert run_cli(train(finished, "--seed", "2"), capsys).code == 130
    assert manifest(finished / "pursuit__ddqn__s2")["status"] == "interrupted"
    monkeypatch.undo()
    seed2 = finished / "pursuit__ddqn__s2"
    assert steps(seed2) == [0, 100, 200]
    before = snapshot(finished / RUN)
    outcome = run_cli(train(finished, "--num-seeds", "2"), capsys)
    assert outcome.code == 0, outcome.stderr
    assert f"{RUN}: already finished" in outcome.stdout and "resuming" in outcome.stderr
    assert_unchanged(before, finished / RUN, allow_new=False)
    assert steps(seed2) == ALL_ROWS and manifest(seed2)["status"] == "finished" and len(manifest(seed2)["resumed"]) == 1


# --------------------------------------------------------------------------------------------------
# grid run: the same refusal, before Ray starts

GRID = """
name: tiny
seeds: 1
defaults:
  num_timesteps: 120
  eval_interval: 40
  eval_episodes: 1
  model: mlp
  set: {env.horizon: 30, dqn.learning_starts: 40, dqn.buffer_size: 500, dqn.hiddens: 16,
        env.kwargs.x_size: 8, env.kwargs.y_size: 8, env.kwargs.n_evaders: 5, env.kwargs.n_pursuers: 4}
runs:
  - {name: plain, env: pursuit, algo: ddqn}
"""


@pytest.mark.parametrize("manifest_text", [None, "{oops"], ids=["missing", "invalid-json"])
def test_grid_run_refuses_a_folder_whose_manifest_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 manifest_text: str | None) -> None:
    from suPER import campaigns

    grid_file = tmp_path / "tiny.yaml"
    grid_file.write_text(GRID)
    out = tmp_path / "campaign"
    run_dir = out / campaigns.load_grid(grid_file).runs[0].run_name
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.csv").write_text("env_steps,team_return_mean\n0,-1.5\n")
    if manifest_text is not None:
        (run_dir / "manifest.json").write_text(manifest_text)
    before = snapshot(tmp_path)
    outcome = run_cli(["grid", "run", str(grid_file), "--out", str(out)], capsys)
    # the remedy is one grid run has: train's "pass --overwrite" would name an option grid run does not take
    assert_refused(outcome, 2, str(run_dir / "manifest.json"), "move the run folder aside")
    assert "--overwrite" not in outcome.stderr
    assert_unchanged(before, tmp_path, allow_new=False)


def test_run_folder_error_words_its_start_over_remedy_per_command() -> None:
    from suPER.runs import START_OVER_ELSEWHERE, RunFolderError

    damaged = RunFolderError("runs/x/config.json: damaged", "restore it", "restart the run from scratch")
    assert str(damaged) == "runs/x/config.json: damaged; restore it, or pass --overwrite to restart the run from scratch"
    assert damaged.message(can_overwrite=False) == f"runs/x/config.json: damaged; restore it, or {START_OVER_ELSEWHERE}"
    locked = RunFolderError("--out: runs/x is being written by another process", "wait for it")
    assert locked.message(can_overwrite=False) == str(locked) == "--out: runs/x is being written by another process; wait for it"
    assert RunFolderError("--out: folder runs is not writable").message(can_overwrite=False) == \
        "--out: folder runs is not writable"


def test_writer_exited_only_when_the_lock_names_a_dead_process_on_this_host(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from suPER.runs import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    assert not folder.writer_exited()  # no lock file: cannot be told
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    here = socket.gethostname()
    holders = [({"pid": dead, "host": here}, True), ({"pid": os.getpid(), "host": here}, False),
               ({"pid": dead, "host": here + "-elsewhere"}, False), ({"pid": "x", "host": here}, False)]
    for holder, exited in holders:
        folder.lock_file.write_text(json.dumps(holder))
        assert folder.writer_exited() is exited, holder
    for text in ["", "{oops", "[1, 2]"]:
        folder.lock_file.write_text(text)
        assert not folder.writer_exited(), text


def test_ctrl_c_during_a_checkpoint_write_lands_after_the_file(tmp_path: Path) -> None:
    """Ctrl-C inside torch.save (the fresh-clone check once hit it right after the step-0 evaluation) must not
    turn into torch's 'unexpected pos' RuntimeError (exit 1, a traceback) or cost the checkpoint: the write
    finishes, then the interrupt is raised as the handler in place says."""
    import signal

    from suPER.runs import atomic_write_bytes

    state = {"w": torch.arange(200_000, dtype=torch.float32)}

    def interrupted_save(p: str) -> None:
        with open(p, "wb") as f:
            os.kill(os.getpid(), signal.SIGINT)  # arrives while torch.save's zip writer is open
            torch.save(state, f)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write_bytes(tmp_path / "latest.pt", interrupted_save)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert torch.equal(torch.load(tmp_path / "latest.pt", weights_only=True)["w"], state["w"])
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]  # no temp file left


def test_a_finished_run_of_another_configuration_is_not_counted_as_done(finished: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign folder holding this run finished at another budget: ``grid list`` marks it stale and ``grid run``
    refuses it with one line naming the differing key, before Ray starts and with nothing changed; asked as it
    was made, it counts as finished."""
    flags = {"env.horizon": 50, "dqn.learning_starts": 100, "dqn.buffer_size": 3000, "dqn.hiddens": 32,
             "env.kwargs.x_size": 10, "env.kwargs.y_size": 10, "env.kwargs.n_evaders": 10}

    def grid(budget: int) -> Path:
        path = tmp_path / f"g{budget}.yaml"
        path.write_text("name: g\nseeds: 1\nruns:\n  - {name: a, env: pursuit, algo: ddqn, model: mlp, num_timesteps: "
                        f"{budget}, eval_interval: 100, eval_episodes: 1, set: {json.dumps(flags)}}}\n")
        return path

    listed = run_cli(["grid", "list", grid(2 * BUDGET), "--out", finished], capsys)
    assert listed.code == 0 and f"{RUN}\tstale\t" in listed.stdout and "stale: a finished run" in listed.stdout
    before = snapshot(finished)
    outcome = run_cli(["grid", "run", grid(2 * BUDGET), "--out", finished], capsys)
    assert_refused(outcome, 2, str(finished / RUN), f"run.num_timesteps: {BUDGET} in the folder vs {2 * BUDGET} now")
    assert_unchanged(before, finished, allow_new=False)
    same = run_cli(["grid", "list", grid(BUDGET), "--out", finished], capsys)
    assert f"{RUN}\tfinished\t" in same.stdout


def test_a_torch_write_failure_is_an_os_error_naming_the_file(tmp_path: Path) -> None:
    """torch's zip writer reports a full disk as a RuntimeError ("file write failed"): the atomic writer turns it into
    an OSError naming the destination, so every caller's one-line failure path handles it, and leaves no temp file."""
    from suPER.runs import atomic_write_bytes

    def full(path: str) -> None:
        Path(path).write_bytes(b"\0" * 10)
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed")

    with pytest.raises(OSError, match="write failed") as exc:
        atomic_write_bytes(tmp_path / "latest.pt", full)
    assert exc.value.filename == str(tmp_path / "latest.pt")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="another error"):  # any other RuntimeError stays what it is
        atomic_write_bytes(tmp_path / "x.pt", lambda p: (_ for _ in ()).throw(RuntimeError("another error")))
