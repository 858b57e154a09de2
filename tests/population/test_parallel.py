"""``--br-workers``: an iteration's best responses as parallel Ray tasks give the sequential policies (bit for bit),
dispatch only unfinished best responses and resume a killed one from its checkpoint; ``--address``: the job."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from suPER.cli import main
from suPER.population.config import PopulationConfig
from suPER.population.loop import Population

ROOT = Path(__file__).resolve().parents[2]
TINY = {"env.kwargs.map_size": 12, "dqn.batch_size": 2, "dqn.hiddens": 8, "dqn.buffer_size": 500, "env.horizon": 20,
        "dqn.learning_starts": 20}
"""battle 2 vs 2 on map 12, a tiny network and batch, learning from env step 20"""
TINY_ARGS = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


class RecordingLane:
    """A ``parallel.Lane`` stand-in: records the calls, finishes them in reverse order with stub cards."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def imap(self, calls: list[tuple[Any, ...]]) -> Any:
        self.calls += calls
        for k, c in reversed(list(enumerate(calls))):  # finishing out of order must not matter
            yield k, {"policy": f"task {c[3]}"}


def test_best_responses_dispatch_only_unfinished_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane gets the sequential call's arguments (run config, folder, iteration, side, the other side's
    strategy, its own) for every side whose trainer run has no final.pt; finished ones are read here; cards come
    back in side order whatever order the tasks finish in. (The real tasks: the slow test below.)"""
    cfg = PopulationConfig(env="battle", iterations=1, br_steps=20, eval_episodes=1, br_workers=2,
                           overrides=TINY).validate()
    pop = Population(cfg, tmp_path / "run", log=lambda _m: None)
    monkeypatch.setattr(pop, "best_response", lambda k, side, *_: {"policy": f"here {side}"})
    strategy = {"team": {"random": 1.0}, "opponent": {"random": 0.25, "red/001": 0.75}}
    pop.br_lane = lane = RecordingLane()
    assert [c["policy"] for c in pop.best_responses(2, strategy)] == ["task team", "task opponent"]
    assert lane.calls == [(cfg, str(pop.folder), 2, "team", strategy["opponent"], strategy["team"]),
                          (cfg, str(pop.folder), 2, "opponent", strategy["team"], strategy["opponent"])]
    assert not pop.br_finished(2, "team")
    run = pop.folder / "br" / "battle__ddqn_super_quantile__s2001__it002_team" / "checkpoints"
    run.mkdir(parents=True)
    (run / "final.pt").touch()
    assert pop.br_finished(2, "team") and not pop.br_finished(2, "opponent")
    pop.br_lane = lane = RecordingLane()
    assert [c["policy"] for c in pop.best_responses(2, strategy)] == ["here team", "task opponent"]
    assert [c[3] for c in lane.calls] == ["opponent"]
    pop.br_lane = None  # --br-workers 0: all here, in side order
    assert [c["policy"] for c in pop.best_responses(2, strategy)] == ["here team", "here opponent"]


def test_cluster_job_entrypoint_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The job reruns the same command with --on-cluster and --out on the cluster (~/ expands there); paths
    that would land in the job's temporary working_dir are refused before anything is submitted, and so is an
    address where no cluster answers."""
    from suPER.population.submit import plan_job

    settings = dict(env="battle", iterations=4, br_steps=30000, eval_episodes=40, seed=3, sides="both",
                    meta_solver="", warm_start="best", relay=False, threads=1, match_workers=4, br_workers=2,
                    figures=True, vs_shipped=True, overwrite=False, install=True, install_dir="~/inst",
                    set_=["dqn.lr=2e-4"])
    job = plan_job("psro", settings, "~/runs pop", "battle__psro__s3")
    assert job.entrypoint == (
        "python -m suPER.cli population psro --env battle --iterations 4 --br-steps 30000 --eval-episodes 40 "
        "--seed 3 --sides both --warm-start best --no-relay --threads 1 --match-workers 4 --br-workers 2 --figures "
        "--vs-shipped --set dqn.lr=2e-4 --on-cluster --out ~/'runs pop' --install --install-dir ~/inst")
    assert job.submission_id.startswith("population-battle-psro-s3-") and (job.num_cpus, job.runs) == (
        0.0, ["battle__psro__s3"])
    base = ["population", "psro", "--env", "battle", "--address", "http://127.0.0.1:9", *TINY_ARGS]
    for extra, flag in ((["--out", "rel/runs"], "--out: with --address expected an absolute or ~/ path"),
                        (["--install"], "--install: with --address expected --install-dir"),
                        (["--install", "--install-dir", "inst"], "--install-dir: with --address"),
                        (["--br-workers", "-1"], "--br-workers: expected an integer >= 0"),
                        ([], "--address: no Ray cluster answers at http://127.0.0.1:9")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {flag}") and "\n" not in err, err


def cli(*args: str) -> list[str]:
    """The command line of ``super-marl`` with this checkout's package."""
    return [sys.executable, "-c", "import sys; from suPER.cli import main; sys.exit(main(sys.argv[1:]))", *args]


ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_parallel_best_responses_equal_the_sequential_ones_and_resume(tmp_path: Path) -> None:
    """One PSRO iteration, both sides, 100-step best responses that learn: with --br-workers 2 the policy files
    are byte-identical to the sequential run's, and so are the trainer metrics (timing columns aside), the cards
    and the payoff table (wall time aside). Then a --br-workers run SIGKILLed after a best response's first
    checkpoint resumes that best response from it."""
    args = ["population", "psro", "--env", "battle", "--iterations", "1", "--br-steps", "100", "--eval-episodes", "2",
            "--no-figures", *TINY_ARGS]
    assert main([*args, "--out", str(tmp_path / "seq")]) == 0
    assert main([*args, "--out", str(tmp_path / "par"), "--br-workers", "2"]) == 0
    seq, par = tmp_path / "seq" / "battle__psro__s1", tmp_path / "par" / "battle__psro__s1"
    for side in ("blue", "red"):
        assert (seq / "policies" / side / "001.safetensors").read_bytes() == (
            par / "policies" / side / "001.safetensors").read_bytes(), side
    timing = {"wall_s", "wall_time_s", "env_steps_per_sec"}
    for name in ("policies.csv", "payoff.csv", *[str(p.relative_to(seq)) for p in seq.glob("br/*/metrics.csv")]):
        a, b = rows(seq / name), rows(par / name)
        assert [{k: v for k, v in r.items() if k not in timing} for r in a] == [
            {k: v for k, v in r.items() if k not in timing} for r in b], name
    assert int(rows(seq / "br" / "battle__ddqn_super_quantile__s1001__it001_team" / "metrics.csv")[-1]["updates"]) > 0

    folder = tmp_path / "kill" / "battle__psro__s1"
    cmd = cli(*args, "--out", str(tmp_path / "kill"), "--br-workers", "2")
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while not list(folder.glob("br/*/checkpoints/latest.pt")):
        assert proc.poll() is None and time.monotonic() - t0 < 600, "kill point not reached"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    unfinished = [p.parents[1] for p in folder.glob("br/*/checkpoints/latest.pt")
                  if not (p.parent / "final.pt").exists()]
    assert unfinished, "both best responses finished before the kill"
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for run_dir in unfinished:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "finished" and len(manifest["resumed"]) == 1, run_dir.name
    assert json.loads((folder / "state.json").read_text()) == {"finished_iterations": 1}
