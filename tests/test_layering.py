"""Keeps the module map of STYLE.md true (ast import check), and runs ruff and mypy on the package."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suPER.algorithms import BACKENDS
from suPER.config import ALGORITHMS  # the records are registered by suPER.config

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "suPER"

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "config.py": ("torch", "ray", "wandb", "suPER."),
    "algorithms.py": ("torch", "ray", "wandb", "suPER."),  # a pure leaf: config.py imports it
    "envs": ("suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "suPER.opponents",
             "suPER.evaluation", "suPER.loop", "wandb", "ray", "torch"),
    "models": ("suPER.envs", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray"),
    "replay": ("suPER.envs", "suPER.models", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray", "torch"),
    "core/selection.py": ("suPER.", "wandb", "ray", "torch"),  # a pure leaf: config.py imports it
    "arrays.py": ("suPER.", "wandb", "ray"),  # the numpy-or-torch shim of replay and selection (torch lazily)
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
    "population": ("suPER.cli", "suPER.native", "suPER.core", "suPER.replay", "wandb"),
    "seeds.py": ("suPER.", "numpy", "torch", "ray", "wandb"),  # constants only: relay.py imports it
    "forked.py": ("suPER.", "ray", "wandb"),  # a leaf: a call in a forked child (loop.py's parallel evaluation)
    "stats.py": ("suPER.", "torch", "ray", "wandb"),  # a pure leaf: plotting, analysis and opponents use it
    "native/dqn_loss.py": ("suPER.", "numpy", "ray", "wandb"),  # pure tensor functions (packed runs reuse them)
    "plotting.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.cli", "ray",
                    "torch"),
}
"""module (file or folder under suPER/) -> import prefixes it must not use (STYLE.md module map)"""

ALLOWED: dict[str, tuple[str, ...]] = {
    "envs/vec_pursuit.py": ("torch",),  # issue 15: games as tensors on a device; imported lazily by make_batched_env
    "replay/torch_per.py": ("torch",),  # issue 16: a pack's replay on its device (imported by the packed trainer only)
    "core/selection.py": ("suPER.arrays",),  # issue 16: one rule definition for numpy and torch (no torch import)
    "envs/factory.py": ("suPER.opponents",),  # make_env loads a network opponent at call time (issue 14)
    "config.py": ("suPER.core.selection",  # the selection-rule registry declares relay.* fields (issue 14)
                  "suPER.algorithms"),  # the algorithm records are registered next to their config sections
}
"""file under suPER/ -> imports it may use although its folder forbids them"""


LAZY_RESOLVER = "campaigns/execute.py"
"""The one module that imports the registries' ``"module:function"`` trainer strings (``trainer_for``)."""

TRAINER_ENTRIES = {e for s in ALGORITHMS.values() for e in s.trainers.values()}
"""the algorithm records' trainer strings: an arrow of ``LAZY_RESOLVER``, not of the module that spells them"""

LAZY_SPEC = re.compile(r"(suPER(?:\.\w+)+):\w+")
"""``"suPER.pkg.module:Name"`` strings: registry entries imported at call time (``record.batched``, loaders)"""


def lazy_imports() -> dict[str, set[str]]:
    """file under suPER/ -> modules it imports through ``resolve_entry_point`` (hidden from the ast check)."""
    return {LAZY_RESOLVER: {e.partition(":")[0] for e in TRAINER_ENTRIES}}


def imports_of(path: Path) -> set[str]:
    """Modules a file imports: import statements anywhere (also inside functions), string literals passed to
    ``importlib.import_module``, ``"suPER.module:Name"`` registry strings (imported later by their user), and
    for ``LAZY_RESOLVER`` the trainers it resolves."""
    names: set[str] = set(lazy_imports().get(str(path.relative_to(PKG)), ())) if path.is_relative_to(PKG) else set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and ast.unparse(node.func).endswith("import_module")):
            names.add(node.args[0].value)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_SPEC.fullmatch(node.value)
              and node.value not in TRAINER_ENTRIES):
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


def test_trainer_strings_are_resolved_in_one_place_only() -> None:
    """The arrows behind the strings are charged to ``LAZY_RESOLVER``; no other module may resolve them."""
    users = sorted(str(f.relative_to(PKG)) for f in PKG.rglob("*.py")
                   if "resolve_entry_point" in f.read_text() and f.name != "algorithms.py")
    assert users == [LAZY_RESOLVER]


@pytest.mark.parametrize(("algo", "backend"), [(a, b) for a in ALGORITHMS for b in BACKENDS
                                               if b in ALGORITHMS[a].trainers])
def test_every_registered_trainer_resolves_and_is_layered(algo: str, backend: str) -> None:
    """Each registered ``"module:function"`` names a ``train(cfg, folder, logger, progress)`` in a module whose
    own imports are checked by a layering rule (here or in tests/seac), and resolving it works."""
    import inspect

    from suPER.algorithms import resolve_entry_point

    entry = ALGORITHMS[algo].trainers[backend]
    module = entry.partition(":")[0]
    path = ROOT / (module.replace(".", "/") + ".py")
    assert path.is_file(), entry
    rel = str(path.relative_to(PKG)) if path.is_relative_to(PKG) else None
    covered = rel is None and module.startswith("seac.") or rel is not None and any(
        rel == k or rel.startswith(k + "/") for k in FORBIDDEN)
    assert covered, f"{entry}: no layering rule covers {path.relative_to(ROOT)}"
    assert not any(module == p.rstrip(".") or module.startswith(p if p.endswith(".") else p + ".")
                   for p in FORBIDDEN["campaigns"]), f"{LAZY_RESOLVER} -> {module} breaks the campaigns rule"
    fn = resolve_entry_point(entry)
    assert list(inspect.signature(fn).parameters)[:4] == ["cfg", "folder", "logger", "progress"], entry
