"""Keeps the module map of STYLE.md true (ast import check), and runs ruff and mypy on the package."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "suPER"

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "config.py": ("torch", "ray", "wandb", "suPER."),
    "envs": ("suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "suPER.opponents",
             "suPER.evaluation", "suPER.loop", "wandb", "ray", "torch"),
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
    "opponents": ("suPER.native", "suPER.core", "suPER.replay", "suPER.campaigns", "suPER.cli", "suPER.selfplay",
                  "ray", "wandb"),
    "selfplay.py": ("suPER.native", "suPER.core", "suPER.replay", "suPER.cli", "ray", "wandb"),
    "runs.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "ray"),
    "campaigns": ("suPER.models", "suPER.replay", "suPER.core.relay", "suPER.envs", "suPER.cli"),
    "plotting.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.cli", "ray",
                    "torch"),
}
"""module (file or folder under suPER/) -> import prefixes it must not use (STYLE.md module map)"""

ALLOWED: dict[str, tuple[str, ...]] = {
    "envs/vec_pursuit.py": ("torch",),  # issue 15: games as tensors on a device; imported lazily by make_batched_env
    "envs/factory.py": ("suPER.opponents",),  # make_env loads a network opponent at call time (issue 14)
    "config.py": ("suPER.core.selection",),  # the selection-rule registry declares relay.* fields (issue 14)
}
"""file under suPER/ -> imports it may use although its folder forbids them"""


LAZY_SPEC = re.compile(r"(suPER(?:\.\w+)+):\w+")
"""``"suPER.pkg.module:Name"`` strings: registry entries imported at call time (``record.batched``, trainers)"""


def imports_of(path: Path) -> set[str]:
    """Modules a file imports: import statements anywhere (also inside functions), string literals passed to
    ``importlib.import_module``, and ``"suPER.module:Name"`` registry strings (imported later by their user)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and ast.unparse(node.func).endswith("import_module")):
            names.add(node.args[0].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_SPEC.fullmatch(node.value):
            names.add(node.value.split(":")[0])
    return names


def test_hidden_import_arrows_are_seen() -> None:
    """The lazy arrows are part of the graph: make_env -> the network opponent, pursuit -> its batched version."""
    assert {"suPER.opponents.team_file", "suPER.opponents.policy"} <= imports_of(PKG / "envs" / "factory.py")
    assert "suPER.envs.vec_pursuit" in imports_of(PKG / "envs" / "pursuit.py")


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
