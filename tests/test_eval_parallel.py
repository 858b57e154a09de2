"""Evaluation off the training process (``run.eval_parallel``, ``suPER.forked``): the same metrics rows as
in-process evaluation, played in another process, failures named in one line, no orphan process, and the
paper's ``--eval_in_parallel`` spelling. The SIGKILL-and-resume exactly-once check is a parametrization of
``tests/native/test_resume.py``."""

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

from suPER import campaigns
from suPER import config as C
from suPER import resolve as R
from suPER.flags import named_settings
from suPER.forked import ForkedCall, ForkedCallError
from suPER.loop import RunLoop
from suPER.runs import RunFailure, RunFolder

TIMING_COLUMNS = ("env_steps_per_sec", "wall_time_s")

PURSUIT = {"env.horizon": 40, "dqn.learning_starts": 100, "dqn.buffer_size": 2000, "dqn.hiddens": 32,
           "dqn.model": "mlp", "env.kwargs.x_size": 10, "env.kwargs.y_size": 10, "env.kwargs.n_evaders": 10}
BATTLE = {"env.horizon": 30, "dqn.learning_starts": 50, "dqn.buffer_size": 1000, "dqn.hiddens": 32,
          "dqn.model": "mlp"}


def resolve(tmp_path: Path, env: str, overrides: dict[str, object], budget: int, **run: object) -> C.ExperimentConfig:
    named = {"run.num_timesteps": budget, "run.eval_interval": budget // 4, "run.eval_episodes": 2,
             "run.out": str(tmp_path), "run.progress": False, "run.device": "cpu", "relay.enabled": True,
             "relay.mode": "quantile", "relay.bandwidth": 0.2, **{f"run.{k}": v for k, v in run.items()}}
    return R.resolve(env, "ddqn", overrides=dict(overrides), named=named)


def metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)]


@pytest.mark.parametrize(("env", "overrides", "budget"), [
    ("pursuit", PURSUIT, 400), pytest.param("battle", BATTLE, 200, marks=pytest.mark.slow)])  # MAgent: ~20 s
def test_forked_evaluations_write_the_rows_of_in_process_ones(tmp_path: Path, env: str,
                                                              overrides: dict[str, object], budget: int) -> None:
    """DDQN + SUPER on a real env, once evaluating in-process and once forked: every metrics.csv column but the
    two timing ones is equal, row for row (the same episodes, weights and trainer columns at each step), and the
    forked run's training is untouched by its evaluations (same final networks)."""
    import torch

    seq = campaigns.execute(resolve(tmp_path / "seq", env, overrides, budget))
    par_cfg = resolve(tmp_path / "par", env, overrides, budget, eval_parallel=True)
    par = campaigns.execute(par_cfg)
    rows_seq, rows_par = metrics(seq.run_dir), metrics(par.run_dir)
    assert [int(r["env_steps"]) for r in rows_par] == list(range(0, budget + 1, budget // 4))
    assert rows_par == rows_seq
    a = torch.load(seq.run_dir / "checkpoints" / "final.pt", weights_only=True)["q_net"]
    b = torch.load(par.run_dir / "checkpoints" / "final.pt", weights_only=True)["q_net"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((par.run_dir / "config.json").read_text())["run"]["eval_parallel"] is True


def test_an_evaluation_is_played_in_another_process_while_the_parent_goes_on(tmp_path: Path) -> None:
    """RunLoop.evaluate with eval_parallel returns at once; the episodes' actions are chosen in a child process
    (the policy writes its pid); the row appears when the child is done and the loop polls (``tick``)."""
    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    loop = RunLoop(cfg, RunFolder(tmp_path / "run"))
    assert loop.eval_parallel
    pid_file = tmp_path / "pids"
    n, a = loop.spec.n_agents, loop.spec.n_actions

    def act(obs_ENO: np.ndarray, alive_EN: np.ndarray) -> np.ndarray:
        with pid_file.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.01)
        return np.zeros((len(obs_ENO), n), dtype=np.int64) % a

    assert loop.evaluate(act, {"loss": 1.5}) is None
    pending = loop._pending
    # back before the child's 40 policy calls of >= 10 ms each are done: the parent did not wait for them
    assert pending is not None and not pending.call.ready()
    assert len(loop.metrics.rows) == 0 and not loop.checkpoint_due
    deadline = time.monotonic() + 60
    while not loop.metrics.rows and time.monotonic() < deadline:
        loop.tick(0)
        time.sleep(0.01)
    pids = {int(p) for p in pid_file.read_text().split()}
    assert pids and os.getpid() not in pids  # every action was chosen in the child
    row = loop.metrics.rows[0]
    assert float(row["env_steps"]) == 0 and float(row["loss"]) == 1.5 and loop.checkpoint_due
    for env in [*loop.envs, loop.eval_env]:
        env.close()


def test_a_failed_or_killed_evaluation_is_one_named_error(tmp_path: Path) -> None:
    """The child's exception comes back as one line naming the evaluation step and the error; a child killed by
    a signal is named as such; neither leaves a zombie."""
    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    loop = RunLoop(cfg, RunFolder(tmp_path / "run"))

    def broken(obs_ENO: np.ndarray, alive_EN: np.ndarray) -> np.ndarray:
        raise ValueError("policy exploded\nsecond line")

    loop.evaluate(broken)
    with pytest.raises(RunFailure, match=r"^evaluation at env step 0 failed in its worker process: "
                                         r"ValueError: policy exploded; the run stopped and .* is resumable"):
        loop.collect_evaluation()
    assert loop.metrics.rows == []

    call = ForkedCall(lambda: time.sleep(60), "evaluation at env step 7")
    pid = call.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ForkedCallError, match="evaluation at env step 7: its worker process ended without a "
                                              "result \\(killed by SIGKILL"):
        call.result()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left
    for env in [*loop.envs, loop.eval_env]:
        env.close()


def test_an_evaluation_that_stops_responding_is_killed_within_its_bound(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked evaluation that hangs no longer blocks training forever: the wait at the next checkpoint is bounded,
    the worker is killed (no zombie), and the run stops with one line naming the evaluation step."""
    from suPER import loop as L

    monkeypatch.setattr(L, "FORKED_EVAL_TIMEOUT_S", 2.0)
    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    loop = RunLoop(cfg, RunFolder(tmp_path / "run"))

    def hung(obs_ENO: np.ndarray, alive_EN: np.ndarray) -> np.ndarray:
        time.sleep(3600)
        raise AssertionError("unreachable")

    loop.evaluate(hung)
    pid = loop._pending.call.pid  # type: ignore[union-attr]
    t0 = time.monotonic()
    with pytest.raises(RunFailure, match=r"^evaluation at env step 0: its worker process gave no result within 2 s "
                                         r"\(stopped responding\); it was killed; the run stopped"):
        loop.collect_evaluation()
    assert time.monotonic() - t0 < 30
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped
    for env in [*loop.envs, loop.eval_env]:
        env.close()


def test_the_child_dies_with_its_parent_and_ignores_ctrl_c(tmp_path: Path) -> None:
    """A parent SIGKILLed while an evaluation is in flight leaves no process behind (PR_SET_PDEATHSIG), and a
    Ctrl-C sent to the child's process group does not end it (the parent decides)."""
    script = ("import os, sys, time, signal\n"
              "from suPER.forked import ForkedCall\n"
              "call = ForkedCall(lambda: time.sleep(120), 'x')\n"
              "print(call.pid, flush=True)\n"
              "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())  # type: ignore[union-attr]
    time.sleep(0.3)
    os.kill(child, signal.SIGINT)
    time.sleep(0.3)
    assert _alive(child), "SIGINT ended the evaluation child"
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the evaluation child outlived its parent"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_packed_runs_and_cuda_evaluate_in_process(tmp_path: Path) -> None:
    """A pack's loops never fork (their runs checkpoint in lockstep); neither would a CUDA run."""
    from suPER.forked import fork_supported

    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    loop = RunLoop(cfg, RunFolder(tmp_path / "run"), allow_eval_parallel=False)
    assert not loop.eval_parallel
    import torch

    assert not fork_supported(torch.device("cuda")) and fork_supported(torch.device("cpu"))
    for env in [*loop.envs, loop.eval_env]:
        env.close()


@pytest.mark.parametrize("spelling", [["--eval-parallel"], ["--eval_in_parallel"]])
def test_the_flag_and_the_papers_spelling_set_eval_parallel(tmp_path: Path, spelling: list[str]) -> None:
    """``--eval-parallel`` and the original's ``--eval_in_parallel`` (no longer ignored) reach run.eval_parallel;
    it is a volatile setting, so a run started without it resumes with it."""
    from suPER import cli

    argv, notes = cli.translate_paper_args(["--env", "pursuit", *spelling])
    assert "--eval-parallel" in argv and not notes
    flags = {"eval_parallel": True}
    named, _ = named_settings("pursuit", flags, lambda name: name)
    assert named["run.eval_parallel"] is True
    assert "eval_parallel" in C.VOLATILE_RUN_KEYS


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("stop_at", [101, pytest.param(204, marks=pytest.mark.slow)])
def test_interrupted_with_an_evaluation_in_flight_then_resumed_logs_every_evaluation_once(
        tmp_path: Path, stop_at: int) -> None:
    """Stopped (an exception in the progress callback) at several points, some while an evaluation is in flight:
    the checkpoint never lacks the row of an evaluation before it, and the resumed run ends with every row once."""
    def stop(env_steps: int, stats: dict[str, float]) -> None:
        if env_steps >= stop_at:
            raise Interrupt

    cfg = resolve(tmp_path / "cut", "pursuit", PURSUIT, 400, eval_parallel=True, eval_interval=50)
    with pytest.raises(Interrupt):
        campaigns.execute(cfg, progress=stop)
    run_dir = tmp_path / "cut" / cfg.run_name
    import torch

    saved = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)
    steps_saved = [int(r[0]) for r in saved["metrics"]["rows"]]
    assert steps_saved == list(range(0, (saved["loop"]["env_steps"] // 50) * 50 + 1, 50))
    campaigns.execute(cfg)
    assert [int(r["env_steps"]) for r in metrics(run_dir)] == list(range(0, 401, 50))


def test_a_checkpoint_waits_for_the_evaluation_in_flight(tmp_path: Path) -> None:
    """``save`` right after a forked evaluation (the step-0 pattern of every trainer) writes its row into the
    checkpoint's copy of metrics.csv."""
    import torch

    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    loop = RunLoop(cfg, RunFolder(tmp_path / "run"))
    n = loop.spec.n_agents

    def slow(obs_ENO: np.ndarray, alive_EN: np.ndarray) -> np.ndarray:
        time.sleep(0.005)
        return np.zeros((len(obs_ENO), n), dtype=np.int64)

    loop.evaluate(slow)
    loop.save({})
    saved = torch.load(loop.latest, weights_only=True)
    assert [int(r[0]) for r in saved["metrics"]["rows"]] == [0] and not loop.checkpoint_due
    for env in [*loop.envs, loop.eval_env]:
        env.close()


def test_where_it_cannot_fork_a_note_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose networks cannot fork (CUDA, not Linux) and a pack say once, on stderr, that they evaluate
    in-process; a run that can fork says nothing."""
    from suPER import loop as loop_mod
    from suPER.native.packed import train_pack

    cfg = resolve(tmp_path, "pursuit", PURSUIT, 100, eval_parallel=True)
    RunLoop(cfg, RunFolder(tmp_path / "a"))
    assert "note" not in capsys.readouterr().err
    monkeypatch.setattr(loop_mod, "fork_supported", lambda device: False)
    RunLoop(cfg, RunFolder(tmp_path / "b"))
    err = capsys.readouterr().err
    assert err.count("note: --eval-parallel: evaluations are forked only for CPU networks on Linux") == 1
    monkeypatch.undo()
    cfgs = [resolve(tmp_path / "pack", "pursuit", PURSUIT, 120, eval_parallel=True, seed=s) for s in (1, 2)]
    out = train_pack(cfgs, [RunFolder(tmp_path / "pack" / c.run_name) for c in cfgs])
    assert all(not isinstance(o, BaseException) for o in out)
    err = capsys.readouterr().err
    assert err.count("note: --eval-parallel: packed runs evaluate in-process") == 1 and "forked only" not in err
