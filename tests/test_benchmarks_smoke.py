"""Smoke tests of benchmarks/throughput.py in --quick mode (numbers are not checked, only that it runs).

The default test skips the RLlib part (~10 s); the RLlib part starts a Ray cluster (~30-50 s on 2 cores)
and is marked slow (run with ``pytest -m slow``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "throughput.py"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def test_quick_env_and_native(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = _run(["--quick", "--threads", "1", "--skip", "rllib", "--json", str(out)], timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| raw `pursuit_v5.parallel_env`, random actions |" in proc.stdout
    assert "| ours: native DDQN, paper CNN" in proc.stdout
    data = json.loads(out.read_text())
    for key in ("parallel_env", "lean", "vectorized"):
        assert data["env"][key]["env_steps_per_sec"] > 0
    (native,) = data["native"]
    assert native["threads"] == 1 and native["torch_threads_seen"] == 1
    assert native["env_steps"] == 80 and not native["capped"]
    assert native["env_steps_per_sec"] > 0
    assert native["updates_per_4_env_steps"] == pytest.approx(1.0, abs=0.01)  # paper replay ratio


@pytest.mark.slow
def test_quick_rllib_and_ratio(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = _run(["--quick", "--threads", "1", "--skip", "env", "--json", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "target: >= 3x RLlib with the paper CNN at the paper replay ratio: " in proc.stdout
    data = json.loads(out.read_text())
    (run,) = data["rllib"]["runs"]
    assert run["env_steps_per_sec"] > 0 and run["measured_env_steps"] >= 20
    assert run["updates_per_4_env_steps"] == pytest.approx(1.0, abs=0.01)  # same replay ratio as ours
    assert run["params_per_agent"] == 156_710  # the conv stack + 64-wide dueling heads
    assert "ours (1 thread) / RLlib (1 thread)" in data["ratios"]


def test_envs_quick(tmp_path: Path) -> None:
    """benchmarks/envs.py --quick: the pursuit table (single game and batched at E = 1, 16, 256), the MAgent
    envs' single game and lockstep batches (E = 1, 4), the batched evaluation's speedup line and rows, the replay
    bytes rows (plain vs compact at full buffers), the JSON."""
    out = tmp_path / "envs.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "envs.py"), "--quick", "--seconds", "0.2",
                           "--cpu-only", "--json", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| pursuit | VecPursuitEnv | cpu | 256 |" in proc.stdout
    assert "eval speedup batched/sequential (pursuit): " in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["impl"], r["E"]) for r in rows] == [("PursuitEnv (single game)", 1), ("VecPursuitEnv", 1),
                                                  ("VecPursuitEnv", 16), ("VecPursuitEnv", 256),
                                                  *[(impl, e) for _ in ("battle", "adversarial_pursuit") for impl, e in
                                                    [("MAgentEnv (single game)", 1), ("LockstepBatch", 1),
                                                     ("LockstepBatch", 4)]],
                                                  ("sequential (4 episodes)", 1), ("batched (4 episodes)", 4),
                                                  *[(layout, 1) for _ in range(3)
                                                    for layout in ("plain MultiAgentPER", "compact CompactPER")]]
    assert "| battle | LockstepBatch | cpu | 4 |" in proc.stdout
    env_rows = [r for r in rows if "replay_bytes" not in r]
    assert all(r["env_steps_per_sec"] > 0 and r["env_steps_per_cpu_sec"] > 0 for r in env_rows)
    # replay bytes: battle's plain layout is obs + next_obs of 6 x 90,000 rows of 13x13x5 float16 plus trees/arrays
    replay = {(r["env"], r["impl"]): r for r in rows if "replay_bytes" in r}
    plain = replay[("replay: battle", "plain MultiAgentPER")]["replay_bytes"]
    assert 2 * 6 * 90_000 * 13 * 13 * 5 * 2 < plain < 1.02 * 2 * 6 * 90_000 * 13 * 13 * 5 * 2
    assert 0.1 < replay[("replay: battle", "compact CompactPER")]["ratio_vs_plain"] < 0.2
    assert "replay bytes per run at full buffers (adversarial_pursuit): plain " in proc.stdout
    assert all(r["env_steps"] % r["E"] == 0 for r in rows if r["env"] == "pursuit")
    assert all(r["env_steps"] == 4 * 15 for r in rows if r["env"] == "evaluation: pursuit")  # never all caught


@pytest.mark.slow
def test_conv_forms_quick() -> None:
    """benchmarks/conv_forms.py --quick: the SGEMM ceiling line and one row per case, where the im2col + bmm
    form it compares against gives the library's Q-values to float32 rounding (same weights, same inputs)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "conv_forms.py"), "--quick"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "fp32 ceiling: 1024^3 SGEMM " in proc.stdout
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| pursuit |")]
    assert [r[1].strip() for r in rows] == ["act B=1", "eval B=20", "update B=32"]
    for r in rows:
        assert float(r[2]) > 0 and float(r[3]) > 0
        assert float(r[7]) < 1e-5  # max |dQ| of the two forms: Q-values are O(1e-1), fp32 rounding is ~1e-7
