"""Hostile inputs to ``super-marl train`` / ``grid``: each is one line naming the flag as typed, exit 2,
nothing written (CLI exit codes and input validation)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.conftest import assert_refused, assert_unchanged, run_cli, run_subprocess, snapshot

TINY = ["--num-timesteps", "200", "--set", "dqn.learning_starts=100", "--model", "mlp", "--no-progress",
        "--set", "env.kwargs.x_size=10", "--set", "env.kwargs.y_size=10", "--set", "env.kwargs.n_evaders=10",
        "--set", "run.eval_episodes=1", "--buffer-size", "500", "--set", "run.checkpoint_replay=false"]
"""The smoke grid's tiny pursuit (10 evaders: with the default 30 on a 10x10 map a reset can hang)."""

CASES = [
    # paper booleans: only true/false, 1/0, yes/no
    (["--suPER", "Ture"], "--suPER:"),
    (["--suPER=maybe"], "--suPER:"),
    (["--parameter_sharing=ture"], "--parameter_sharing:"),
    (["--parameter_sharing", "2"], "--parameter_sharing:"),
    # a team that matches no learner or only one
    (["--super", "--team", "nobody"], "--team:"),
    (["--suPER", "true", "--team_sharing", "nobody"], "--team_sharing:"),
    (["--super", "--team", "pursuer_3"], "pursuer_7"),
    # numeric ranges, every section
    (["--set", "dqn.grad_clip=-1"], "--set dqn.grad_clip:"),
    (["--set", "dqn.grad_clip=0"], "--set dqn.grad_clip:"),
    (["--set", "dqn.epsilon_timesteps=-5"], "--set dqn.epsilon_timesteps:"),
    (["--set", "dqn.hiddens=0"], "--set dqn.hiddens:"),
    (["--set", "dqn.adam_eps=-1"], "--set dqn.adam_eps:"),
    (["--lr", "inf"], "--lr:"),
    (["--lr", "nan"], "--lr:"),
    (["--lr", "0"], "--lr:"),
    (["--algo", "seac", "--lr", "-1"], "--lr:"),
    (["--algo", "qmix", "--set", "qmix.optim_alpha=2"], "--set qmix.optim_alpha:"),
    (["--algo", "maddpg", "--set", "maddpg.tau=0"], "--set maddpg.tau:"),
    (["--algo", "maddpg", "--set", "maddpg.hiddens=[0]"], "--set maddpg.hiddens:"),
    (["--set", "dqn.buffer_size=.inf"], "--set dqn.buffer_size:"),
    (["--horizon", "0"], "--horizon:"),
    (["--batch_size", "0"], "--batch_size:"),
    (["--eval-episodes", "-1"], "--eval-episodes:"),
    (["--threads", "-2"], "--threads:"),
    # seeds that crash later
    (["--seed", "-1"], "--seed:"),
    (["--set", "env.seed_offset=-1000"], "--set env.seed_offset:"),
    (["--seed", str(2**32)], "--seed:"),
    # env kwargs checked against the env's own constructor
    (["--set", "env.kwargs.bogus_kwarg=3"], "--set env.kwargs.bogus_kwarg:"),
    (["--set", "env.kwargs.n_pursuer=5"], "did you mean 'n_pursuers'"),
    (["--set", "env.kwargs.x_size=0"], "--set env.kwargs.x_size:"),
    (["--env", "battle", "--opponent", "random", "--set", "env.kwargs.map_sise=20"], "did you mean 'map_size'"),
    (["--env", "battle", "--opponent", "random", "--set", "env.kwargs.map_size=2"],
     "--set env.kwargs.map_size: expected settings battle can run, got map_size=2 ("),
    (["--env", "adversarial_pursuit", "--opponent", "random", "--set", "env.kwargs.tag_penalty=x"],
     "--set env.kwargs.tag_penalty:"),
    (["--env_pursuit_num_agents", "0"], "--env_pursuit_num_agents:"),
    # names that are paths
    (["--tag", "a/b"], "--tag:"),
    (["--tag", ".."], "--tag:"),
    (["--tag", "..\\x"], "--tag:"),
    (["--set", "run.name=../escape"], "--set run.name:"),
    (["--tag", "a\nb"], "--tag:"),  # control characters split job lists built from names
    (["--tag", "x\ty"], "--tag:"),
    (["--tag", "t" * 256], "--tag:"),  # past the file system's 255 bytes a component
    (["--tag", "t" * 240], "--tag:"),  # fits alone, but not in the run folder's name
    (["--protocol", "original"], "--protocol: expected one of ours, paper"),
    # an opponent for an env without one was ignored, even a missing file; 0 evaluation episodes wrote NaN rows
    (["--opponent", "no/such/team.safetensors"], "--opponent: expected no opponent setting for pursuit"),
    (["--opponent-epsilon", "0.1"], "--opponent-epsilon: expected no opponent setting"),
    (["--eval-episodes", "0"], "--eval-episodes: expected an integer >= 1"),
    (["--pack", "--num-seeds", "2", "--eval-parallel"], "--eval-parallel: packed runs evaluate in-process"),
    (["--pack", "--num_seeds", "2", "--eval_in_parallel"], "--eval_in_parallel: packed runs evaluate in-process"),
    # a SUPER setting while SUPER is off would train plain DDQN without a word
    (["--bandwidth", "0.3"], "--bandwidth: is a SUPER setting, but SUPER is off: add --super"),
    (["--suPER_mode", "quantile"], "--suPER_mode: is a SUPER setting, but SUPER is off"),
    (["--window", "100", "--team", "pursuer"], "--window: is a SUPER setting"),
    # the flag as typed, not its other spelling or the internal key
    (["--bandwidth", "1.5"], "--bandwidth:"),
    (["--suPER_bandwidth", "1.5"], "--suPER_bandwidth:"),
    (["--super-mode", "median"], "--super-mode:"),
    (["--suPER_mode", "median"], "--suPER_mode:"),
    (["--window", "0"], "--window:"),
    (["--num_seeds", "0"], "--num_seeds:"),
]


@pytest.mark.parametrize(("args", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_train_input_is_one_line_exit_2_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             args: list[str], needle: str) -> None:
    (tmp_path / "keep.txt").write_text("existing")
    before = snapshot(tmp_path)
    outcome = run_cli(["train", "--out", tmp_path, *args], capsys)
    assert_refused(outcome, 2, "error: ", needle)
    assert_unchanged(before, tmp_path, allow_new=False)


def test_team_error_lists_every_learner_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_cli(["train", "--out", tmp_path, "--super", "--team", "nobody"], capsys)
    assert_refused(outcome, 2, "--team:", *(f"pursuer_{i}" for i in range(8)))


GRID_CASES = [
    ("name: ../up\nruns:\n  - {name: a, env: pursuit, algo: ddqn}\n", ":1:", "name:"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, tag: a/b}\n", ":3:", "tag:"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, set: {run.name: ..}}\n", ":3:", "run.name"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, set: {env.kwargs.n_pursuer: 3}}\n", ":3:",
     "did you mean 'n_pursuers'"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, super: true, team: nobody}\n", ":3:", "team:"),
    ('name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, tag: "x\\n\\tbash -c evil"}\n', ":3:", "tag:"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, tag: " + "t" * 300 + "}\n", ":3:", "tag:"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, protocol: theirs}\n", ":3:", "protocol:"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, bandwidth: 0.3}\n", ":3:",
     "bandwidth: is a SUPER setting, but super is not set"),
    # a quoted "false" is text: grid run took it for False, grid submit for --super (another experiment)
    ('name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, super: "false"}\n', ":3:",
     "super: expected true or false (unquoted), got 'false'"),
    ('name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, set: {relay.enabled: "no"}}\n', ":3:",
     "set: relay.enabled: expected true or false (unquoted), got 'no'"),
    ("name: g\nseeds: 3\nruns:\n  - {name: a, env: pursuit, algo: ddqn, set: {run.seed: 7}}\n", ":4:",
     "set: run.seed: is the grid's to decide"),
    ("name: g\nruns:\n  - {name: a, env: pursuit, algo: ddqn, set: {run.out: /tmp/elsewhere}}\n", ":3:",
     "set: run.out: where runs live is the campaign's"),
    ("name: g\ndefaults: {set: {run.name: x}}\nruns:\n  - {name: a, env: pursuit, algo: ddqn}\n", ":2:",
     "set: run.name: run folders are named by the grid"),
]


@pytest.mark.parametrize(("text", "line", "needle"), GRID_CASES)
@pytest.mark.parametrize("command", ["list", "run"])
def test_bad_grid_file_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                           line: str, needle: str, command: str) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(text)
    before = snapshot(tmp_path)
    outcome = run_cli(["grid", command, grid, *(["--out", tmp_path / "runs"] if command == "run" else [])], capsys)
    if command == "list" and needle in ("did you mean 'n_pursuers'", "team:"):
        assert outcome.code == 0  # listing does not build envs; run does, before anything starts
        return
    assert_refused(outcome, 2, f"{grid}{line}", needle)
    assert_unchanged(before, tmp_path, allow_new=False)


CAMPAIGN_CASES = [
    # an --out Ray Tune cannot use (it writes out/.tune): refused before Ray starts
    (["grid", "run", "experiments/smoke.yaml", "--filter", "name=pursuit-dqn", "--out", "{file}"],
     "--out: expected a folder, got the file"),
    (["grid", "run", "experiments/smoke.yaml", "--filter", "name=pursuit-dqn", "--out", "{file}/x"],
     "--out: cannot create folder"),
    (["reproduce", "fig1", "--layer", "experiments/smoke.yaml", "--env", "pursuit", "--seeds", "1", "--filter",
      "name=*-ddqn", "--out", "{file}"], "--out: expected a folder, got the file"),
    # a selection that matches nothing is a typo, not a finished figure
    (["reproduce", "fig1", "--filter", "nothing-is-called-this", "--out", "{tmp}/r"], "--filter: no run of fig1"),
    (["reproduce", "fig1", "--layer", "experiments/smoke.yaml", "--env", "pursuit", "--seeds", "1", "--filter",
      "name=*-ddqn", "--out", "{file}/x"], "--out: cannot create folder"),
    (["reproduce", "fig1", "--env", "pursuit", "--dry-run", "--out", "{file}"], "--out: expected a folder, got the file"),
    (["reproduce", "fig1", "--env", "battle", "--filter", "env=pursuit", "--dry-run"], "--filter: no run of fig1"),
    # nan / inf where a count of CPUs, GPUs or gigabytes is asked (a traceback after Ray started, before)
    (["grid", "run", "experiments/smoke.yaml", "--cpus-per-trial", "nan"], "--cpus-per-trial: expected a finite"),
    (["grid", "run", "experiments/smoke.yaml", "--gpus-per-trial", "nan"], "--gpus-per-trial: expected a finite"),
    (["grid", "run", "experiments/smoke.yaml", "--pack", "--pack-memory-gb", "inf"], "--pack-memory-gb: expected"),
    (["reproduce", "fig1", "--cpus-per-trial", "nan", "--dry-run"], "--cpus-per-trial: expected a finite"),
    (["grid", "submit", "experiments/smoke.yaml", "--cpus", "nan", "--print-jobs"], "--cpus: expected a finite"),
    (["grid", "submit", "experiments/smoke.yaml", "--gpus", "-inf", "--print-jobs"], "--gpus: expected a finite"),
    # population: checked before any best response trains (a negative seed ran to the end; a file as --install-dir
    # failed after every best response had trained)
    (["population", "psro", "--env", "battle", "--seed", "-1", "--out", "{tmp}/p"], "--seed: expected an integer >= 0"),
    (["population", "psro", "--env", "battle", "--set", "env.kwargs.bogus=1", "--out", "{tmp}/p"],
     "--set env.kwargs.bogus: unknown battle setting 'bogus'"),
    (["population", "psro", "--env", "battle", "--set", "env.kwargs.map_size=2", "--out", "{tmp}/p"],
     "--set env.kwargs.map_size: expected settings battle can run, got map_size=2"),
    (["population", "psro", "--env", "battle", "--install", "--install-dir", "{file}", "--out", "{tmp}/p"],
     "--install-dir: expected a folder, got the file"),
    # the flag as typed, not the config key it sets
    (["opponents", "eval", "--env", "battle", "--opponent-epsilon", "2"], "--opponent-epsilon: expected"),
    (["opponents", "eval", "--env", "battle", "--threads", "-1"], "--threads: expected an integer >= 0"),
    (["opponents", "train", "--env", "battle", "--threads", "-1", "--out", "{tmp}/o"],
     "--threads: expected an integer >= 0"),
]


@pytest.mark.parametrize(("args", "needle"), CAMPAIGN_CASES, ids=[" ".join(a[:2] + a[-2:]) for a, _ in CAMPAIGN_CASES])
def test_bad_campaign_input_is_one_line_exit_2_before_ray_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 args: list[str], needle: str) -> None:
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "afile").write_text("not a folder")
    argv = [a.format(file=tmp_path / "afile", tmp=tmp_path) for a in args]
    argv = [str(root / a) if a.startswith("experiments/") else a for a in argv]
    before = snapshot(tmp_path)
    outcome = run_cli(argv, capsys)
    assert_refused(outcome, 2, needle)
    assert_unchanged(before, tmp_path, allow_new=False)
    if "--out" in needle:  # refused before a plan of runs that will not start is printed
        assert outcome.stdout == "", outcome.stdout


@pytest.mark.parametrize("where", ["environment", "flag"])
def test_an_unreachable_ray_address_is_one_line_within_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """``RAY_ADDRESS`` inherited from the environment (or ``--address``) where no cluster answers: one line naming
    it, exit 2, instead of minutes of Ray's rpc retries. Loopback port 9 (discard): nothing listens there."""
    import time

    root = Path(__file__).resolve().parents[2]
    args = ["grid", "run", str(root / "experiments" / "smoke.yaml"), "--filter", "name=pursuit-dqn", "--out",
            str(tmp_path / "runs")]
    if where == "environment":
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    else:
        args += ["--address", "127.0.0.1:9"]
    t0 = time.monotonic()
    outcome = run_cli(args, capsys)
    assert time.monotonic() - t0 < 60
    assert_refused(outcome, 2, "RAY_ADDRESS (in the environment)" if where == "environment" else "--address",
                   "no Ray cluster answers at 127.0.0.1:9")


def test_good_paper_booleans_are_accepted() -> None:
    from suPER.cli import translate_paper_args

    for word, flag in (("TRUE", "--super"), ("Yes", "--super"), ("1", "--super"), ("no", "--no-super"),
                       ("False", "--no-super"), ("0", "--no-super")):
        assert translate_paper_args(["--suPER", word])[0] == [flag]


def test_super_settings_with_super_switched_off_on_purpose_are_accepted(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The original's baseline lines pass ``--suPER=False --suPER_bandwidth=0.0``: typed off, the setting is moot."""
    for args in (["--suPER", "False", "--suPER_bandwidth", "0.0"], ["--no-super", "--bandwidth", "0.3"]):
        out = run_cli(["train", "--env", "pursuit", *args, "--num-timesteps", "1", "--eval-episodes", "1",
                       "--no-progress", "--out", tmp_path / args[0].strip("-")], capsys)
        assert out.code == 0, out.stderr
        assert (tmp_path / args[0].strip("-") / "pursuit__ddqn__s1" / "manifest.json").is_file()


@pytest.mark.parametrize("how", ["pipe", "80 columns"])
def test_names_are_never_truncated(how: str) -> None:
    if how == "pipe":
        outcome = run_subprocess(["envs"], env={"COLUMNS": "80"})
        text = outcome.stdout
    else:  # a real 80-column terminal: the output goes through a pseudo-terminal
        proc = subprocess.run(["script", "-qc", f"{sys.executable} -m suPER.cli envs", "/dev/null"],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
        text = proc.stdout
        assert max(len(line.rstrip()) for line in text.splitlines() if "\x1b" not in line) <= 80
    assert "…" not in text
    if how == "pipe":
        columns = ["".join(cells) for cells in zip(*(line.split("\t") for line in text.splitlines()[1:]))]
    else:  # folded cells: read each column top to bottom
        body = [line.strip().strip("│").split("│") for line in text.splitlines() if line.strip().startswith("│")]
        columns = ["".join(c.strip() for c in cells) for cells in zip(*body)]
    assert "adversarial_pursuit" in columns[0] and "4(predator_0..predator_3)" in columns[2].replace(" ", ""), text


def test_sigint_during_train_exits_130_and_marks_the_run_interrupted(tmp_path: Path) -> None:
    """Ctrl-C as the shell sends it: exit 130, no traceback, the manifest says interrupted."""
    proc = subprocess.Popen([sys.executable, "-m", "suPER.cli", "train", "--out", str(tmp_path), *TINY[:1],
                             "100000", *TINY[2:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": "offline"})
    manifest = tmp_path / "pursuit__ddqn__s1" / "metrics.csv"
    deadline = time.monotonic() + 120
    while not manifest.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in out + err
    assert err.strip().splitlines()[-1].startswith("interrupted")
    import json

    assert json.loads((tmp_path / "pursuit__ddqn__s1" / "manifest.json").read_text())["status"] == "interrupted"


def test_tiny_run_evaluates_once_per_episode_at_most(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default schedule of a 1k-step run: every max(horizon, total/200) env steps, said at start."""
    outcome = run_cli(["train", "--out", tmp_path, "--num-timesteps", "400", *TINY[2:], "--set", "env.horizon=50"],
                      capsys)
    assert outcome.code == 0, outcome.stderr
    rows = (tmp_path / "pursuit__ddqn__s1" / "metrics.csv").read_text().splitlines()[1:]
    steps = [int(r.split(",")[0]) for r in rows]
    assert steps == list(range(0, 401, 50)), steps  # the paper's total/200 would be every 2 env steps
    assert "note: evaluating every 50 env steps" in outcome.stderr


def _bomb() -> str:
    """Billion laughs: 9 levels of 9 aliases each, 9**9 strings once expanded."""
    lines = ["name: g", 'l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join([*lines, "description: *l8", ""])


@pytest.mark.parametrize("content,needle", [
    (_bomb(), "more than 20 aliases"),
    ("runs: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested more than 32 levels deep"),
    ("name: g\ndescription: " + "x" * 1_100_000 + "\n", "expected a grid file of at most 1,000,000 bytes"),
    ("FIFO", "expected a grid file (a regular YAML file), got another kind of file"),
    ("name: g\nbase: /dev/zero\n", "/dev/zero: expected a grid file (a regular YAML file)"),
    (b"name: g\n\xff\xfe\n", "expected a UTF-8 text file"),
], ids=["alias-bomb", "deep-list", "too-large", "fifo", "dev-zero-base", "not-text"])
def test_grid_files_are_read_with_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any,
                                         needle: str) -> None:
    """A hostile grid file is one line, exit 2, within seconds: no hang on an alias bomb or a FIFO, no
    RecursionError on deep nesting, no MemoryError on /dev/zero."""
    import time

    grid = tmp_path / "g.yaml"
    if content == "FIFO":
        os.mkfifo(grid)
    elif isinstance(content, bytes):
        grid.write_bytes(content)
    else:
        grid.write_text(content)
    t0 = time.monotonic()
    outcome = run_cli(["grid", "list", grid], capsys)
    assert time.monotonic() - t0 < 30
    assert_refused(outcome, 2, needle)


def test_a_deleted_current_directory_and_an_ascii_only_encoding_are_one_line_or_work(tmp_path: Path) -> None:
    """The shell's current folder deleted under it: one line, exit 2 (a FileNotFoundError traceback before). An
    ASCII-only PYTHONIOENCODING with a non-ASCII --out: the command runs and prints the path escaped."""
    gone = tmp_path / "gone"
    gone.mkdir()
    r = subprocess.run(["bash", "-c", f"cd {gone} && rmdir {gone} && exec {sys.executable} -m suPER.cli envs"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("error: the current directory no longer exists (deleted while this shell was in "
                                "it); cd to an existing folder")
    out = tmp_path / "résultats"
    (out / "pursuit__ddqn__s1").mkdir(parents=True)
    (out / "pursuit__ddqn__s1" / "manifest.json").write_text('{"status": "finished"}')
    r = run_subprocess(["train", "--env", "pursuit", "--out", out], env={"PYTHONIOENCODING": "ascii"})
    assert_refused(r, 2, "r\\xe9sultats", "already holds a finished run")


COMMANDS = {
    "train": ["train", "--env", "pursuit"],
    "grid run": ["grid", "run", "experiments/smoke.yaml", "--filter", "name=pursuit-dqn"],
    "reproduce": ["reproduce", "fig1", "--env", "pursuit", "--seeds", "1"],
    "population": ["population", "psro", "--env", "battle", "--iterations", "1"],
    "opponents train": ["opponents", "train", "--env", "battle"],
    "plot": ["plot", "results/fig1"],
}
"""Every command that writes: the same hostile values go through each."""

SAME_VALUES = [
    ("--out", "{file}", ("train", "grid run", "reproduce", "population", "opponents train", "plot")),
    ("--threads", "-1", ("train", "population", "opponents train")),
    ("--seed", "-1", ("train", "population", "opponents train")),
    ("--cpus-per-trial", "nan", ("grid run", "reproduce")),
]


@pytest.mark.parametrize("flag,value,command", [(f, v, c) for f, v, cs in SAME_VALUES for c in cs],
                         ids=[f"{c}:{f}={v}" for f, v, cs in SAME_VALUES for c in cs])
def test_the_same_hostile_value_is_refused_by_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            flag: str, value: str, command: str) -> None:
    """One hostile value, every command that takes the flag: one line naming the flag as typed, exit 2, nothing
    written, whichever command a user runs it through."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "afile").write_text("not a folder")
    argv = [str(root / a) if a.startswith(("experiments/", "results/")) else a for a in COMMANDS[command]]
    out = [] if flag == "--out" else ["--out", str(tmp_path / "o")]
    before = snapshot(tmp_path)
    outcome = run_cli([*argv, *out, flag, value.format(file=tmp_path / "afile")], capsys)
    assert_refused(outcome, 2, f"{flag}:")
    assert_unchanged(before, tmp_path, allow_new=False)
