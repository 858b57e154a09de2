"""Fixed-seed runs of every DQN trainer path, recorded so that a refactor can be checked to change no bit.

    python scripts/engine_equality.py record OUT [CASE ...]  # train the cases below (all) with this checkout's code
    python scripts/engine_equality.py compare OUT_A OUT_B    # same metrics rows (timing aside), same final.pt bits

Cases: native single runs on the three envs (SUPER quantile, gaussian under the paper protocol, stochastic, and
parameter sharing), packs of two (pursuit's batched env with numpy replay; battle with replay on the device and
the joined relay), and the RLlib backend on the three envs. Budgets are a few fragments past learning_starts, so
every phase (act, relay, store, learn, target sync, evaluation, checkpoint) runs. Bit equality holds between
two checkouts on one machine (float rounding differs between CPUs), so record both sides on the same machine,
with the same ``PYTHONHASHSEED`` (``record`` pins it to ``HASH_SEED``; RLlib runs of commits before 2026-12-05
depend on it).

A final.pt's ``config`` is compared as the comparing checkout reads a stored config (``suPER.resolve.migrate``):
a change of the config's layout that reads old run folders the same way compares equal, one that does not
differs.
"""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

SHORT = ["--eval-interval", "500", "--eval-episodes", "1", "--set", "dqn.learning_starts=200",
         "--set", "dqn.target_update_freq=300", "--no-progress", "--no-wandb"]
CASES: dict[str, list[str]] = {
    "pursuit_quantile": ["--env", "pursuit", "--num-timesteps", "1500", "--super", "--super-mode", "quantile"],
    "battle_gaussian_paper": ["--env", "battle", "--num-timesteps", "1000", "--super", "--super-mode",
                              "gaussian_variance", "--protocol", "paper"],
    "advp_stochastic": ["--env", "adversarial_pursuit", "--num-timesteps", "1000", "--super", "--super-mode",
                        "stochastic"],
    "advp_paramshare": ["--env", "adversarial_pursuit", "--num-timesteps", "1000", "--parameter-sharing"],
    "pack_pursuit": ["--env", "pursuit", "--num-timesteps", "1500", "--num-seeds", "2", "--pack", "--super",
                     "--super-mode", "quantile"],
    "pack_battle_device": ["--env", "battle", "--num-timesteps", "1000", "--num-seeds", "2", "--pack", "--super",
                           "--super-mode", "gaussian", "--set", "run.replay_device=device"],
    "rllib_pursuit": ["--env", "pursuit", "--num-timesteps", "600", "--backend", "rllib", "--super"],
    "rllib_battle": ["--env", "battle", "--num-timesteps", "600", "--backend", "rllib", "--super"],
    "rllib_advp": ["--env", "adversarial_pursuit", "--num-timesteps", "600", "--backend", "rllib", "--super"],
}
"""case -> ``super-marl train`` arguments (seed 1; ``SHORT`` appended)"""

WHERE = (".config.run.out",)
"""final.pt entries that say where the run was written (each side records to its own folder)"""

TIMING = ("time", "throughput", "wall", "per_s", "sps", "seconds")
"""metrics.csv columns holding any of these are wall-clock measurements, not results"""


HASH_SEED = "0"
"""``PYTHONHASHSEED`` of the recorded runs (unless the caller set one): RLlib runs of commits before the fix of
docs/rllib.md's defect 11 depend on the string hash seed (module build order, exploration order), so a comparison
against such a commit needs one fixed value on both sides; the native trainers never depended on it."""


def record(out: Path, cases: list[str]) -> None:
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", HASH_SEED)}
    for case in cases or list(CASES):
        args = CASES[case]
        cmd = ["super-marl", "train", *args, *SHORT, "--seed", "1", "--out", str(out / case)]
        print(case, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def rows(metrics: Path) -> list[dict[str, str]]:
    with metrics.open() as f:
        return [{k: v for k, v in row.items() if not any(t in k for t in TIMING)} for row in csv.DictReader(f)]


def tensor_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every tensor / array (and repr of every other leaf) of a run's final networks, by dotted key:
    the native ``checkpoints/final.pt``, or the RLlib checkpoint's module states (``rl_module/*/module_state.pkl``)."""
    import pickle

    import numpy as np
    import torch

    out: dict[str, str] = {}

    def walk(prefix: str, x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(f"{prefix}.{i}", v)
        elif isinstance(x, torch.Tensor):
            out[prefix] = hashlib.sha256(x.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
        elif isinstance(x, np.ndarray):
            out[prefix] = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()
        else:
            out[prefix] = repr(x)

    native = folder / "checkpoints" / "final.pt"
    if native.exists():
        state = torch.load(native, map_location="cpu", weights_only=False)
        if isinstance(state.get("config"), dict):
            try:
                from suPER.resolve import migrate
            except ImportError:  # a checkout from before suPER.resolve: configs compared as stored
                pass
            else:
                state["config"] = migrate(state["config"])
        walk("", state)
    for state in sorted((folder / "checkpoints" / "rllib_final").rglob("rl_module/*/module_state.pkl")):
        with state.open("rb") as f:
            walk(state.parent.name, pickle.load(f))
    if not out:
        raise FileNotFoundError(f"{folder}: no final networks (checkpoints/final.pt or rllib_final)")
    return out


def n_updates(folder: Path) -> str:
    """The last metrics row's update count (shows the runs learned), '-' where the trainer logs none."""
    last = rows(folder / "metrics.csv")[-1]
    return last.get("updates") or last.get("num_updates") or "-"


def compare(a: Path, b: Path) -> int:
    bad = 0
    for case in [c for c in CASES if (a / c).is_dir() and (b / c).is_dir()]:
        folders_a = sorted(p for p in (a / case).iterdir() if p.is_dir())
        folders_b = sorted(p for p in (b / case).iterdir() if p.is_dir())
        if [p.name for p in folders_a] != [p.name for p in folders_b]:
            print(f"{case}: run folders differ: {[p.name for p in folders_a]} vs {[p.name for p in folders_b]}")
            bad += 1
            continue
        for fa, fb in zip(folders_a, folders_b):
            same_rows = rows(fa / "metrics.csv") == rows(fb / "metrics.csv")
            ha, hb = tensor_hashes(fa), tensor_hashes(fb)
            differing = sorted(k for k in ha.keys() | hb.keys() if ha.get(k) != hb.get(k) and k not in WHERE)
            n_rows = len(rows(fa / "metrics.csv"))
            print(f"{case}/{fa.name}: metrics rows {'equal' if same_rows else 'DIFFER'} ({n_rows}), final.pt "
                  f"{'equal' if not differing else 'DIFFERS in ' + ', '.join(differing[:5])} ({len(ha)} entries), "
                  f"{n_updates(fa)} updates")
            bad += (not same_rows) + bool(differing)
    print("all equal" if not bad else f"{bad} difference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "record" and set(sys.argv[3:]) <= set(CASES):
        record(Path(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
