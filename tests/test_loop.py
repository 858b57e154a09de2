"""RunLoop: the evaluation schedule, metrics rows, checkpoints and resume every baseline trainer shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suPER.evaluation import EvalResult
from suPER.loop import RunLoop, RunRecord
from suPER.resolve import resolve
from suPER.runs import RunFolder, read_metrics

TINY = {"env.kwargs.n_pursuers": 2, "env.kwargs.n_evaders": 2, "env.kwargs.x_size": 6, "env.kwargs.y_size": 6,
        "env.kwargs.max_cycles": 20, "env.horizon": 20, "run.eval_episodes": 1, "run.progress": False,
        "run.device": "cpu"}


def random_run(folder: RunFolder, budget: int, stop_at: int | None = None, num_envs: int = 2) -> RunLoop:
    """A 'trainer' that acts uniformly at random in ``num_envs`` envs, with the loop doing everything else."""
    cfg = resolve("pursuit", "seac", overrides={**TINY, "run.num_timesteps": budget, "run.eval_interval": 10})
    loop = RunLoop(cfg, folder, num_envs=num_envs)
    rng = np.random.default_rng(0)
    state = loop.restore()
    n, a = loop.spec.n_agents, loop.spec.n_actions
    act = lambda o, alive: rng.integers(0, a, n)  # noqa: E731
    obs = loop.reset_envs()
    if state is None:
        loop.evaluate(act)
        loop.save({"rng": rng.bit_generator.state})
    else:
        rng.bit_generator.state = state["rng"]
    returns = np.zeros(num_envs)
    while not loop.done:
        for i, env in enumerate(loop.envs):
            res = env.step(act(obs[i], None))
            returns[i] += res.reward_N.sum()
            obs[i] = env.reset() if res.episode_over else res.obs_NO
            if res.episode_over:
                loop.episode_finished(returns[i])
                returns[i] = 0.0
        if loop.tick(num_envs):
            loop.evaluate(act, {"loss": 0.0})
        if loop.checkpoint_due:
            loop.save({"rng": rng.bit_generator.state})
        if stop_at is not None and loop.env_steps >= stop_at:
            return loop  # "killed": no finish, latest.pt stays
    loop.finish(act, {"note": np.zeros(1)})
    return loop


def test_eval_rows_at_every_interval_with_parallel_envs(tmp_path):
    loop = random_run(RunFolder(tmp_path / "r"), budget=50)
    m = read_metrics(loop.folder.metrics)
    assert list(m["env_steps"]) == [0, 10, 20, 30, 40, 50]
    assert np.isfinite(m["team_return_mean"]).all() and "loss" in m
    assert (loop.folder.checkpoints / "final.pt").exists()


def test_resume_logs_every_evaluation_once_and_reaches_the_budget(tmp_path):
    folder = RunFolder(tmp_path / "r")
    first = random_run(folder, budget=60, stop_at=34)
    assert first.env_steps == 34 and (folder.checkpoints / "latest.pt").exists()
    first.metrics.append({"env_steps": 40, "team_return_mean": 1.0})  # a row written after the checkpoint
    second = random_run(folder, budget=60)
    m = read_metrics(folder.metrics)
    assert list(m["env_steps"]) == [0, 10, 20, 30, 40, 50, 60]
    assert second.env_steps == 60


def test_resume_refuses_another_configuration(tmp_path):
    import pytest

    folder = RunFolder(tmp_path / "r")
    random_run(folder, budget=40, stop_at=12)
    cfg = resolve("pursuit", "seac", overrides={**TINY, "run.num_timesteps": 40, "run.eval_interval": 10,
                                                "seac.lr": 1e-3})
    with pytest.raises(ValueError, match="different configuration"):
        RunLoop(cfg, folder).restore()


def test_run_record_rows_and_throughput_leave_out_eval_checkpoint_and_startup(tmp_path: Path) -> None:
    """The recording both backends share: column order, and env_steps_per_sec over training time only."""
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    record = RunRecord(folder)
    record.timer.total.update({"startup": 100.0, "eval": 50.0, "checkpoint": 25.0, "learn": 1.0})
    record.t_start -= 200.0  # 200 s ago: 25 s of training time
    result = EvalResult(-3.0, 0.5, -1.5, 20.0, np.array([-1.0, -2.0]), 1)
    row = record.row(500, result, ["a", "b"], float("nan"), {"loss": 0.25})
    assert list(row) == ["env_steps", "team_return_mean", "team_return_std", "all_agent_return_mean",
                         "episode_len_mean", "return_a", "return_b", "train_return_mean", "loss",
                         "env_steps_per_sec", "wall_time_s"]
    assert 200.0 <= row["wall_time_s"] < 210.0
    assert row["env_steps_per_sec"] == pytest.approx(500 / (row["wall_time_s"] - 175.0))
    assert read_metrics(folder.metrics)["loss"].tolist() == [0.25]
    summary = record.summary(500)
    assert summary.final_team_return == -3.0 and summary.env_steps_per_sec == pytest.approx(20.0, rel=0.5)
