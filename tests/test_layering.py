"""Keeps the module map of STYLE.md true (ast import check), and runs ruff and mypy on the package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "suPER"

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "config.py": ("torch", "ray", "wandb", "suPER."),
    "envs": ("suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray", "torch"),
    "models": ("suPER.envs", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray"),
    "replay": ("suPER.envs", "suPER.models", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray", "torch"),
    "core/selection.py": ("suPER.", "wandb", "ray", "torch"),  # a pure leaf: config.py imports it
    "core/relay.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.native", "suPER.runs", "wandb", "ray",
                      "torch"),
    "native": ("ray", "wandb", "suPER.cli"),
    "baselines": ("ray", "wandb", "suPER.cli", "suPER.native", "suPER.core"),
    "core/trainers.py": ("suPER.native", "suPER.cli", "wandb"),
    "core/rllib_buffer.py": ("suPER.native", "suPER.cli", "suPER.envs", "suPER.models", "wandb"),
    "core/rllib_runner.py": ("suPER.native", "suPER.cli", "wandb"),
    "core/rllib_model.py": ("suPER.native", "suPER.cli", "suPER.envs", "suPER.replay", "wandb"),
    "opponents.py": ("suPER.native", "suPER.core", "suPER.replay", "suPER.campaigns", "suPER.cli", "ray", "wandb"),
    "selfplay.py": ("suPER.native", "suPER.core", "suPER.replay", "suPER.cli", "ray", "wandb"),
    "runs.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "ray"),
    "campaigns": ("suPER.models", "suPER.replay", "suPER.core.relay", "suPER.envs", "suPER.cli"),
    "seeds.py": ("suPER.", "numpy", "torch", "ray", "wandb"),  # constants only: relay.py imports it
    "stats.py": ("suPER.", "torch", "ray", "wandb"),  # a pure leaf: plotting, analysis and opponents use it
    "native/dqn_loss.py": ("suPER.", "numpy", "ray", "wandb"),  # pure tensor functions (packed runs reuse them)
    "plotting.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.cli", "ray",
                    "torch"),
}
"""module (file or folder under suPER/) -> import prefixes it must not use (STYLE.md module map)"""

ALLOWED: dict[str, tuple[str, ...]] = {
    "envs/vec_pursuit.py": ("torch",),  # issue 15: games as tensors on a device; imported lazily by make_batched_env
    "config.py": ("suPER.core.selection",),  # the selection-rule registry declares relay.* fields (issue 14)
}
"""file under suPER/ -> imports it may use although its folder forbids them"""


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_follow_the_layering(module: str) -> None:
    target = PKG / module
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files
    bad = []
    for f in files:
        for name in imports_of(f):
            if any(name == a or name.startswith(a + ".") for a in ALLOWED.get(str(f.relative_to(PKG)), ())):
                continue
            for prefix in FORBIDDEN[module]:
                if name == prefix.rstrip(".") or name.startswith(prefix if prefix.endswith(".") else prefix + "."):
                    if not (module == "config.py" and name == "suPER.config"):
                        bad.append(f"{f.relative_to(ROOT)} imports {name}")
                elif name == prefix:
                    bad.append(f"{f.relative_to(ROOT)} imports {name}")
    assert not bad, bad


def test_ruff_clean() -> None:
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "suPER", "tests", "benchmarks"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_clean_on_pure_modules() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
