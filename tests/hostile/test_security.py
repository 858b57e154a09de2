"""Hostile inputs and secrets (security): a W&B key in the environment reaches no file of a
run folder; online W&B without a network or credentials fails in seconds with one line; `grid submit`
and run_all.sh refuse bad input (secrets in the runtime env included) with one line, exit 2, nothing
submitted or written."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from suPER import config as C
from tests.hostile.conftest import (
    Outcome,
    assert_refused,
    assert_unchanged,
    run_cli,
    run_subprocess,
    snapshot,
)

FAKE_KEY = "fakewandbkey" + "0123456789abcdef" * 3  # 60 characters: passes wandb's local length check
SMOKE = C.ROOT / "experiments" / "smoke.yaml"
TINY = ["train", "--env", "pursuit", "--algo", "ddqn", "--seed", "1", "--num-timesteps", "200", "--eval-interval",
        "100", "--eval-episodes", "1", "--model", "mlp", "--set", "env.horizon=40", "--set", "dqn.learning_starts=50",
        "--set", "dqn.buffer_size=500", "--set", "dqn.hiddens=16", "--set", "relay.window=50", "--set",
        "env.kwargs.x_size=8", "--set", "env.kwargs.y_size=8", "--set", "env.kwargs.n_evaders=4", "--set",
        "env.kwargs.max_cycles=40", "--no-progress"]


def test_a_wandb_key_in_the_environment_reaches_no_file_of_a_run_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = run_cli([*TINY, "--wandb", "--wandb-mode", "offline", "--out", tmp_path], capsys)
    assert out.code == 0, out.stderr
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "finished"
    files = [f for f in run.rglob("*") if f.is_file()]
    assert any("wandb" in f.parts for f in files)  # W&B did write its offline files here ...
    assert [str(f) for f in files if FAKE_KEY.encode() in f.read_bytes()] == []  # ... without the key
    assert FAKE_KEY not in out.stdout + out.stderr


def _online(tmp_path: Path, **env: str) -> tuple[Outcome, float]:
    t0 = time.monotonic()
    out = run_subprocess([*TINY, "--wandb", "--wandb-mode", "online", "--out", tmp_path / "runs"], cwd=tmp_path,
                         env={"WANDB_MODE": "online", "WANDB_SILENT": "false", "HOME": str(tmp_path), "NETRC": "", **env})
    return out, time.monotonic() - t0


def test_online_wandb_without_a_network_fails_in_seconds_with_one_line(tmp_path: Path) -> None:
    out, took = _online(tmp_path, WANDB_API_KEY=FAKE_KEY, WANDB_INIT_TIMEOUT="3")
    assert_refused(out, 1, "--wandb-mode online", "W&B did not start within 3 s")
    assert took < 60  # was ~100 s of retries; now the init timeout plus start-up
    assert FAKE_KEY not in out.stdout + out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"  # not left "running"
    assert not (run / "metrics.csv").exists()


def test_online_wandb_without_credentials_fails_at_once(tmp_path: Path) -> None:
    out, _ = _online(tmp_path, WANDB_API_KEY="")
    assert_refused(out, 2, "--wandb-mode online: no W&B credentials")  # found before anything is written


# --------------------------------------------------------------------------------------------------
# grid submit / run_all.sh: bad input is refused before anything is submitted


def _submit(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str | Path) -> Outcome:
    before = snapshot(C.ROOT / "experiments")
    out = run_cli(["grid", "submit", SMOKE, "--filter", "name=pursuit-ddqn", "--address", "127.0.0.1:9", *args],
                  capsys)
    assert_unchanged(before, C.ROOT / "experiments", allow_new=False)
    return out


def test_grid_submit_refuses_a_secret_in_the_runtime_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "runtime.yaml"
    bad.write_text(f"env_vars:\n  WANDB_API_KEY: {FAKE_KEY}\n")
    before = snapshot(tmp_path)
    out = _submit(tmp_path, capsys, "--runtime-env", bad)
    assert_refused(out, 2, "--runtime-env", "expected no secrets", "got WANDB_API_KEY")
    assert FAKE_KEY not in out.stdout + out.stderr  # named, never echoed
    assert_unchanged(before, tmp_path, allow_new=False)


@pytest.mark.parametrize(("args", "needles"), [
    (["--per", "node"], ["--per", "expected run or grid", "'node'"]),
    (["--address", "ray://10.0.0.1:10001"], ["--address", "http://HOST:8265"]),
    (["--address", "auto"], ["--address", "got 'auto'"]),
    (["--runtime-env", "no/such/runtime.yaml"], ["--runtime-env", "no/such/runtime.yaml"]),
    (["--runtime-env", "LIST"], ["--runtime-env", "expected a mapping", "got list"]),
    (["--runtime-env", "BADYAML"], ["--runtime-env", "syntax error at line 2"]),  # where the parser stopped
    (["--runtime-env", "TOKEN"], ["--runtime-env", "got RAY_AUTH_TOKEN"]),
    (["--runtime-env", "AWS"], ["--runtime-env", "got AWS_SECRET_ACCESS_KEY"]),  # any secret-looking name
    (["--runtime-env", "KEYLINE"], ["--runtime-env", "syntax error at line 2", "not shown"]),
], ids=["per", "ray-client-address", "auto-address", "missing-runtime-env", "list-runtime-env",
        "malformed-runtime-env", "token-in-runtime-env", "aws-key-in-runtime-env", "syntax-error-beside-a-key"])
def test_grid_submit_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                       needles: list[str]) -> None:
    files = {"LIST": "- a\n- b\n", "BADYAML": "env_vars: {a: [\n", "TOKEN": "env_vars:\n  RAY_AUTH_TOKEN: t0k3n\n",
             "AWS": "env_vars:\n  AWS_SECRET_ACCESS_KEY: t0k3n\n",
             "KEYLINE": "env_vars:\n  WANDB_API_KEY: t0k3n: [\n"}
    if args[-1] in files:
        (tmp_path / "rt.yaml").write_text(files[args[-1]])
        args = [*args[:-1], str(tmp_path / "rt.yaml")]
    out = _submit(tmp_path, capsys, *args)
    assert_refused(out, 2, *needles)
    assert "t0k3n" not in out.stderr


def test_jobs_never_upload_secret_files_of_the_checkout(tmp_path: Path) -> None:
    """The jobs' working_dir is the checkout, untracked files included: Ray's own packager, given the runtime env's
    excludes, leaves out .env files, netrc files and keys (also when ray_runtime.yaml's excludes do not name them)
    and keeps the code."""
    from ray._private.runtime_env.packaging import create_package

    from suPER.campaigns import runtime_env

    bare = tmp_path / "rt.yaml"
    bare.write_text("excludes: [runs]\nenv_vars: {A: '1'}\n")
    checkout = tmp_path / "checkout"
    for name in ("suPER/x.py", ".env", ".env.local", "deploy/prod.env", "my.netrc", ".netrc", "certs/c.pem",
                 "k.key", ".ssh/id_rsa", "runs/r/latest.pt"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("s3cr3t")
    create_package(str(checkout), tmp_path / "pkg.zip", include_gitignore=True, excludes=runtime_env(bare)["excludes"],
                   logger=None)
    import zipfile

    assert zipfile.ZipFile(tmp_path / "pkg.zip").namelist() == ["suPER/x.py"]


def test_run_all_sh_dry_run_prints_commands_a_user_can_paste(tmp_path: Path) -> None:
    """The dry run's commands carry the runtime env inline (--runtime-env-json), not the temp file the script
    deletes when it exits; the JSON holds the secret-file excludes and no environment value."""
    import shlex

    r = _run_all(tmp_path, "--dry-run", str(SMOKE), "--filter", "name=pursuit-dqn")
    assert r.code == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("ray job submit")]
    assert lines
    argv = shlex.split(lines[0])
    assert "--runtime-env" not in argv and "super-marl-runtime-env" not in lines[0]
    env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert ".env" in env["excludes"] and "*.pem" in env["excludes"] and "WANDB_API_KEY" not in env["env_vars"]


def _run_all(tmp_path: Path, *args: str) -> Outcome:
    r = subprocess.run(["bash", str(C.ROOT / "run_all.sh"), "--address", "http://127.0.0.1:9", *args],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return Outcome(r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize(("args", "needles"), [
    (["--bogus", str(SMOKE)], ["--bogus", "unknown"]),
    ([str(SMOKE), str(SMOKE)], ["more than one grid file"]),
    (["--per-run", "no_such_grid.yaml"], ["no_such_grid.yaml"]),
    (["--out"], ["--out: expected a value after it"]),
    (["--seeds", "--dry-run"], ["--seeds: expected a value after it"]),
], ids=["unknown-option", "two-grids", "missing-grid", "out-without-value", "seeds-without-value"])
def test_run_all_sh_refuses_bad_input(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    assert_refused(_run_all(tmp_path, *args), 2, *needles)
    assert list(tmp_path.iterdir()) == []  # nothing written (no runtime-env file left behind either)


@pytest.mark.parametrize("command,folder", [
    (["train", "--env", "pursuit", "--quick", "--no-progress"], "pursuit__ddqn__s1"),
    (["population", "psro", "--env", "battle", "--iterations", "1", "--no-figures"], "battle__psro__s1"),
])
@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_planted_lock_file_is_never_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str],
                                               folder: str, planted: str) -> None:
    """A run or population folder's ``.writer.lock`` that is a symbolic link (to any file the user can write) or a
    FIFO is refused with one line naming it; the link's target keeps its bytes, nothing in the folder changes."""
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n")
    out = tmp_path / "out"
    (out / folder).mkdir(parents=True)
    lock = out / folder / ".writer.lock"
    if planted == "symlink":
        lock.symlink_to(victim)
    else:
        os.mkfifo(lock)
    before = snapshot(tmp_path)
    outcome = run_cli([*command, "--out", str(out)], capsys)
    assert_refused(outcome, 2, str(lock), "symbolic link" if planted == "symlink" else "another kind of file")
    assert victim.read_text() == "do not truncate me\n"
    assert snapshot(tmp_path) == before
