"""The real `super-marl` command: paper spellings, one-line errors with exit code 2, nothing overwritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suPER import config as C
from suPER.cli import translate_paper_args
from suPER.flags import named_settings
from suPER.resolve import resolve, without_volatile

CLI = [sys.executable, "-m", "suPER.cli"]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WANDB_MODE": "offline", "RAY_AUTH_MODE": "disabled", "COLUMNS": "200"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_paper_spellings_translate() -> None:
    argv, notes = translate_paper_args(
        ["train", "--env", "pursuit_plaindqn", "--seed", "1", "--num_seeds", "2", "--use_gpu", "0",
         "--suPER", "True", "--suPER_mode=quantile", "--suPER_bandwidth", "0.1", "--suPER_window", "500",
         "--team_sharing", "pursuer", "--parameter_sharing=true", "--horizon", "400", "--ray_plain_init",
         "--framework", "torch", "--experiment_group", "g"])
    assert argv == ["train", "--algo", "dqn", "--env", "pursuit", "--seed", "1", "--num-seeds", "2",
                    "--device", "cpu", "--super", "--super-mode", "quantile", "--bandwidth", "0.1",
                    "--window", "500", "--team", "pursuer", "--parameter-sharing", "--set", "env.horizon=400",
                    "--wandb-group", "g"]
    assert len(notes) == 2 and "--ray_plain_init" in notes[0]
    assert translate_paper_args(["--suPER=False"])[0] == ["--no-super"]
    assert translate_paper_args(["--use_gpu", "1"])[0] == ["--device", "cuda"]


def test_help_lists_commands() -> None:
    r = run_cli("--help")
    assert r.returncode == 0 and "train" in r.stdout and "envs" in r.stdout
    r = run_cli("train", "--help")
    assert r.returncode == 0 and "--num-timesteps" in r.stdout and "--suPER " in r.stdout


def test_train_help_is_the_option_table_in_its_panels() -> None:
    """Every option of the table shows in its own panel, with the help of the config field it sets."""
    from suPER.docstrings import field_docs
    from suPER.flags import FLAGS, PANELS, PAPER_ONLY

    text = run_cli("train", "--help").stdout
    lines = text.splitlines()
    panel_of_line, panel = [], None
    for line in lines:  # the panel each line of the help sits in
        panel = next((p for p in PANELS if line.startswith(f"╭─ {p} ")), panel)
        panel_of_line.append(panel)
    assert [p for p in PANELS if any(line.startswith(f"╭─ {p} ") for line in lines)] == list(PANELS)
    for f in (*FLAGS, *PAPER_ONLY):
        shown = f.paper if f in PAPER_ONLY else f.flag
        rows = [i for i, line in enumerate(lines) if line.startswith(f"│ {shown} ")]
        assert len(rows) == 1 and panel_of_line[rows[0]] == f.panel, (shown, f.panel)
    lr_doc = field_docs(C.DQNConfig)["lr"]  # help text is the field docstring, not retyped
    assert lr_doc.split(".")[0] in " ".join(text.split())


def test_envs_command_lists_three_envs() -> None:
    r = run_cli("envs")
    assert r.returncode == 0, r.stderr
    for name, learners in (("pursuit", "8 (pursuer_0..pursuer_7)"), ("battle", "6 (blue_0..blue_5)"),
                           ("adversarial_pursuit", "8 (prey_0..prey_7)")):
        assert name in r.stdout and learners in r.stdout
    assert "pettingzoo:<module>:<function>\tpossible_agents" in r.stdout  # the generic adapter: any parallel env


def test_envs_command_describes_named_envs_as_training_sees_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``super-marl envs ENV...``: every learner, how observations are stored and how the networks read them (a
    PettingZoo env of uint8 images: x / 255); a name that is not an env is one line naming ENV."""
    from suPER import cli

    image = "pettingzoo:tests.envs.tiny_pz:image_env"
    assert cli.main(["envs", "battle", image]) == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}
    assert rows["battle"][1:3] == ["6 (blue_0, blue_1, blue_2, blue_3, blue_4, blue_5)",
                                   "6 (red_0, red_1, red_2, red_3, red_4, red_5)"]
    assert rows["battle"][5] == "x" and rows[image][3:6] == ["(6, 6, 3)", "uint8", "x / 255"]
    assert cli.main(["envs", "chess"]) == 2
    assert capsys.readouterr().err.strip() == ("error: ENV: expected one of pursuit, battle, adversarial_pursuit or "
                                               "pettingzoo:<module>:<function>, got 'chess'")


@pytest.mark.parametrize(("args", "flag"), [
    (["--env", "chess"], "--env"),
    (["--num-timesteps", "-5"], "--num-timesteps"),
    (["--num_timesteps", "-5"], "--num_timesteps:"),
    (["--super", "--bandwidth", "1.5"], "--bandwidth:"),
    (["--suPER_bandwidth", "-0.2"], "--suPER_bandwidth"),
    (["--super-mode", "median"], "--super-mode:"),
    (["--window", "0"], "--window:"),
    (["--seed", "abc"], "--seed"),
    (["--set", "dqn.nope=1"], "--set"),
    (["--algo", "ppo"], "--algo"),
])
def test_bad_input_one_line_exit_2(tmp_path: Path, args: list[str], flag: str) -> None:
    r = run_cli("train", "--out", str(tmp_path), *args)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:") and flag in lines[0]
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_unwritable_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("train", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and r.stderr.startswith("error: --out") and len(r.stderr.strip().splitlines()) == 1


def test_finished_run_is_not_overwritten(tmp_path: Path) -> None:
    run_dir = tmp_path / "pursuit__ddqn__s1"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"status": "finished"}))
    (run_dir / "metrics.csv").write_text("env_steps,team_return_mean\n0,1.0\n")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    r = run_cli("train", "--env", "pursuit", "--out", str(tmp_path))
    assert r.returncode == 2 and "already holds a finished run" in r.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_legacy_switch_turns_on_every_documented_quirk() -> None:
    from suPER.config import paper_protocol_settings as legacy_settings

    cfg = resolve("pursuit", named={"relay.enabled": True, **legacy_settings(None)})
    assert cfg.relay.mode == "gaussian_variance"  # variance as the gaussian scale (REFERENCE 14.2)
    assert cfg.env.truncation_is_terminal  # 14.6
    assert cfg.relay.insertion_priority == "legacy"  # 14.7
    assert cfg.env.eval_seed_offset == 0  # 14.17
    assert resolve("pursuit", named={**legacy_settings("quantile"), "relay.mode": "quantile"}).relay.mode == "quantile"


def test_the_plan_line_says_budget_evaluations_and_time_and_names_quick_for_long_runs() -> None:
    """``train`` with no budget starts the paper's 800k env steps: its plan line says so, with its evaluations and
    an estimated time, and names --quick; a short run's does not."""
    from suPER.cli.train import plan_line

    long = plan_line(resolve("pursuit"))
    assert "800,000 env steps, 201 evaluations x 20 episodes, estimated" in long and "--quick" in long
    assert float(long.split("estimated ")[1].split(" h")[0]) > 1
    short = plan_line(resolve("pursuit", named=named_settings("pursuit", {"quick": True})[0]))
    assert "min at the Figure 1 campaign's pace" in short and "--quick" not in short
    assert "estimated" not in plan_line(resolve("pursuit", "qmix"))  # no rate measured for it: no guess
    assert "estimated" not in plan_line(resolve("pursuit"), backend="rllib")  # the records are native runs


def test_config_file_trains_exactly_that_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`train --config FILE|JSON` rebuilds the recorded configuration; only where and how it runs may be added, and a
    setting flag beside it is refused by name (the file decides every setting)."""
    from suPER import cli
    from suPER.cli import train as cli_train

    seen: list[C.ExperimentConfig] = []
    monkeypatch.setattr(cli_train, "_train_one", lambda cfg, *a, **k: seen.append(cfg))
    argv = ["train", "--env", "battle", "--super", "--super-mode", "stochastic", "--bandwidth", "0.3",
            "--protocol", "paper", "--set", "dqn.gamma=0.95", "--seed", "7"]
    assert cli.main(argv) == 0
    original = seen.pop()
    recorded = tmp_path / "config.json"
    recorded.write_text(json.dumps(original.to_dict()))
    for given in (str(recorded), recorded.read_text()):  # a file, or its JSON text (what a cluster job carries)
        assert cli.main(["train", "--config", given, "--out", str(tmp_path / "again"), "--threads", "2"]) == 0
        again = seen.pop()
        assert without_volatile(again.to_dict()) == without_volatile(original.to_dict())
        assert again.run.out == str(tmp_path / "again") and again.run.threads == 2
        assert again.run_name == original.run_name


@pytest.mark.parametrize(("args", "line"), [
    (["--lr", "0.1"], "error: --lr: not with --config (the file decides every setting"),
    (["--suPER_bandwidth", "0.2"], "error: --suPER_bandwidth: not with --config"),
    (["--num-seeds", "2"], "error: --num-seeds: not with --config"),
])
def test_config_file_refuses_setting_flags_beside_it(tmp_path: Path, args: list[str], line: str) -> None:
    recorded = tmp_path / "config.json"
    recorded.write_text(json.dumps(resolve("pursuit").to_dict()))
    r = run_cli("train", "--config", str(recorded), *args, "--out", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip() == r.stderr.strip().splitlines()[0], r.stderr
    assert r.stderr.startswith(line), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # nothing written


@pytest.mark.parametrize(("content", "expected"), [
    (None, "error: --config {path}: expected a config.json file (or its JSON text), got no such file"),
    ("{not json", "error: --config {path}: expected JSON, got an error at line 1"),
    ("[1, 2]", "error: --config {path}: expected a JSON object (a run's config.json), got list"),
    ('{"dqn": {"lr": -1}}', "error: --config {path}: "),
])
def test_config_file_that_is_not_a_config_is_one_line(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    r = run_cli("train", "--config", str(path), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(expected.format(path=path)), r.stderr
    assert not (tmp_path / "runs").exists()
