"""benchmarks/device_check.sh's code paths import on the GPU device image, which lacks ray, wandb, magent2, supersuit.

The device image (/work/.library/device/KINDS.md) has torch, numpy, scipy, pyyaml...; the pursuit game's libraries
travel as wheels (scripts/fetch_device_wheels.sh); the heavy packages are not there, so the pack trainer, the
vectorized pursuit and batched evaluation must import without them (magent2 only on first use of a MAgent env).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

ABSENT_ON_DEVICE = ("ray", "wandb", "magent2", "supersuit")


def test_pursuit_pack_imports_without_the_heavy_packages() -> None:
    """suPER's modules imported afresh with those packages blocked (``sys.modules[name] = None``, submodules
    too, makes their import raise ImportError, as when not installed): the device check's modules import, and
    the block is real (a MAgent env's library, imported on first use, then fails). In this process rather than
    a fresh interpreter (that costs ~2 s of torch import); the previous suPER modules are put back after."""
    saved = {k: m for k, m in sys.modules.items() if k == "suPER" or k.startswith("suPER.")
             or k.split(".")[0] in ABSENT_ON_DEVICE}
    try:
        for k in saved:
            del sys.modules[k]
        for k in (*saved, *ABSENT_ON_DEVICE):
            if k.split(".")[0] in ABSENT_ON_DEVICE:
                sys.modules[k] = None  # type: ignore[assignment]
        envs = importlib.import_module("suPER.envs")
        for name in ("suPER.native.packed", "suPER.envs.vec_pursuit", "suPER.evaluation", "suPER.runs"):
            importlib.import_module(name)
        assert "battle" in envs.ENVS
        with pytest.raises(ImportError):
            envs.BattleEnv.library()
    finally:
        for k in [k for k in sys.modules if k == "suPER" or k.startswith("suPER.")
                  or k.split(".")[0] in ABSENT_ON_DEVICE]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_device_scripts_parse() -> None:
    """``bash -n``: every command line of the one-shot device script and the wheel fetcher is valid shell."""
    for script in ("benchmarks/device_check.sh", "scripts/fetch_device_wheels.sh"):
        proc = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True, timeout=10)
        assert proc.returncode == 0, f"{script}: {proc.stderr}"
