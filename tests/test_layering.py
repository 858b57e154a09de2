"""Keeps the module map of STYLE.md true: a declared layer order that no import climbs, an import graph without
cycles, each module's forbidden imports (ast import check, every import kind); and runs ruff and mypy."""

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

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("__init__.py", "arrays.py", "seeds.py", "forked.py", "stats.py", "docstrings.py", "metrics.py",
                "algorithms.py", "embedded_ray.py",
                "core/__init__.py")),  # an empty package file, run by every import of suPER.core.selection
    ("config", ("config.py",)),
    ("rules", ("core/selection.py",)),
    ("components", ("resolve.py", "flags.py", "envs", "models", "replay", "core/relay.py", "runs.py", "costs.py",
                    "evaluation.py", "plotting.py")),
    ("opponents", ("opponents",)),
    ("shared loop", ("loop.py",)),
    ("trainers", ("native", "baselines", "core")),
    ("orchestration", ("campaigns", "selfplay.py", "population", "analysis.py", "export.py", "reproduce.py")),
    ("interface", ("cli", "experiments")),
)
"""The package's layers, bottom to top: (name, its modules as files or folders under suPER/). A module imports
modules of its own layer or of layers below it, never of a layer above (``test_no_module_imports_a_higher_layer``),
counting every import kind ``imports_of`` sees plus the package ``__init__`` files Python runs on the way. A file
listed by name belongs to its layer even inside a folder listed in another (``core/selection.py`` in ``core``).

- leaves: pure helpers and records that import nothing from suPER (the algorithm records, the numpy-or-torch shim,
  seed offsets, the embedded Ray instance the RLlib runner and Ray Tune start);
- config: the typed config sections, YAML and dotted overrides (imports the algorithm records only);
- rules: the SUPER selection rules, each a record that declares and checks its own parameters;
- components: a run's resolved config (config + the rule's record), the option table of ``train`` and the flag
  -> setting translation (``flags``), env adapters with random / learning
  opponents, networks, replay, relay routing, run folders and what runs cost, evaluation episodes, plots;
- opponents: network opponent teams, and the env with its opponent team built (``make_env``, ``make_batch``);
- shared loop: what every trainer shares (envs, evaluation schedule, checkpoints, resume);
- trainers: the native trainers, the baselines, suPERDQN on RLlib and the ``--backend rllib`` runner;
- orchestration: campaigns (grids, one run executed, Ray Tune, cluster jobs), self-play, population training,
  analysis and exports;
- interface: the ``super-marl`` command and the paper's ``suPER/experiments/main.py``."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "config.py": ("torch", "ray", "wandb"),  # of suPER only the leaves (LAYERS): the algorithm records
    "algorithms.py": ("torch", "ray", "wandb", "suPER."),  # a pure leaf: config.py imports it
    "resolve.py": ("torch", "ray", "wandb"),
    "envs": ("suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "suPER.resolve",
             "wandb", "ray"),  # torch: only vec_pursuit.py, lazily (test_lower_layers_import_without_torch)
    "models": ("suPER.envs", "suPER.replay", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray"),
    "replay": ("suPER.envs", "suPER.models", "suPER.core", "suPER.native", "suPER.runs", "wandb", "ray"),
    "core/selection.py": ("wandb", "ray", "torch"),  # torch through suPER.arrays, when a tensor comes in
    "arrays.py": ("suPER.", "wandb", "ray"),  # the numpy-or-torch shim of replay and selection (torch lazily)
    "core/relay.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.native", "suPER.runs", "suPER.resolve",
                      "wandb", "ray", "torch"),
    "evaluation.py": ("suPER.envs.factory", "suPER.resolve", "ray", "wandb"),  # plays the episodes it is given
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
    "docstrings.py": ("suPER.", "numpy", "torch", "ray", "wandb"),  # a pure leaf: field docs for --help, reference
    "metrics.py": ("suPER.", "numpy", "torch", "ray", "wandb"),  # a pure leaf: the metrics.csv column records
    "embedded_ray.py": ("suPER.", "torch", "wandb"),  # a leaf: the RLlib runner, Ray Tune and population use it
    "native/dqn_loss.py": ("suPER.", "numpy", "ray", "wandb"),  # pure tensor functions (packed runs reuse them)
    "plotting.py": ("suPER.envs", "suPER.models", "suPER.replay", "suPER.core", "suPER.native", "suPER.cli", "ray",
                    "torch"),
}
"""module (file or folder under suPER/) -> import prefixes it must not use (STYLE.md module map), besides any module
of a higher layer (``LAYERS``). No exceptions: a file under a folder follows the folder's rule too."""


LAZY_RESOLVER = "campaigns/execute.py"
"""The one module that imports the registries' ``"module:function"`` trainer strings (``trainer_for``)."""

TRAINER_ENTRIES = {e for s in ALGORITHMS.values() for e in s.trainers.values()}
"""the algorithm records' trainer strings: an arrow of ``LAZY_RESOLVER``, not of the module that spells them"""

LAZY_SPEC = re.compile(r"(suPER(?:\.\w+)+):\w+")
"""``"suPER.pkg.module:Name"`` strings: registry entries imported at call time (``record.batched``, loaders); an
arrow of the module that spells them"""


def lazy_imports() -> dict[str, set[str]]:
    """file under suPER/ -> modules it imports through ``resolve_entry_point`` (hidden from the ast check)."""
    return {LAZY_RESOLVER: {e.partition(":")[0] for e in TRAINER_ENTRIES}}


def is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module of this repository (a ``.py`` file or a package folder)."""
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Modules a file imports: import statements anywhere (also inside functions; ``from a import b`` names ``a``
    and, when it is a module, ``a.b``), string literals passed to ``importlib.import_module``,
    ``"suPER.module:Name"`` registry strings (imported later by their user), and for ``LAZY_RESOLVER`` the
    trainers it resolves."""
    names: set[str] = set(lazy_imports().get(str(path.relative_to(PKG)), ())) if path.is_relative_to(PKG) else set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}"))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and ast.unparse(node.func).endswith("import_module")):
            names.add(node.args[0].value)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_SPEC.fullmatch(node.value)
              and node.value not in TRAINER_ENTRIES):
            names.add(node.value.split(":")[0])
    return names


def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file (a package is its ``__init__.py``)."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (``imports_of``: every kind, call-time ones included)."""
    mods = modules()
    return {m: {n for n in imports_of(f) if n in mods and n != m} for m, f in mods.items()}


def parents(name: str) -> list[str]:
    """The packages Python runs before it imports ``name`` (``suPER.core.selection`` -> ``suPER``, ``suPER.core``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def layer_of(path: Path) -> int:
    """Index in ``LAYERS`` of a file under suPER/: the layer listing it, or its closest folder."""
    rel = path.relative_to(PKG).as_posix()
    best, where = -1, -1
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if (rel == m or rel.startswith(m + "/")) and len(m) > best:
                best, where = len(m), i
    return where


def test_every_module_has_one_layer() -> None:
    listed = [m for _, members in LAYERS for m in members]
    assert len(listed) == len(set(listed)), "a module listed in two layers"
    assert [m for m in listed if not (PKG / m).exists()] == []
    assert [str(f.relative_to(PKG)) for f in modules().values() if layer_of(f) < 0] == []


def test_no_module_imports_a_higher_layer() -> None:
    """Every import (statements anywhere, importlib, registry strings) and the package ``__init__`` files Python
    runs on the way stay in the importing module's layer or below."""
    mods = modules()
    graph = import_graph()
    upward = []
    for m, targets in graph.items():
        here = layer_of(mods[m])
        for t in sorted(targets | {p for x in (m, *targets) for p in parents(x) if p in mods} - {m}):
            if layer_of(mods[t]) > here:
                upward.append(f"{m} ({LAYERS[here][0]}) imports {t} ({LAYERS[layer_of(mods[t])][0]})")
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_import_graph_has_no_cycles() -> None:
    """No module reaches itself through imports of any kind (a package's ``__init__`` importing its own
    submodules is the one arrow not counted back: Python runs the ``__init__`` first)."""
    assert cycles(import_graph()) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check itself


def test_hidden_import_arrows_are_seen() -> None:
    """The lazy arrows are part of the graph: pursuit -> its batched version (a registry string), the RLlib runner
    -> the embedded Ray (a call-time import), ``from suPER import runs`` -> suPER.runs, the trainers -> their
    resolver."""
    graph = import_graph()
    assert "suPER.envs.vec_pursuit" in graph["suPER.envs.pursuit"]
    assert "suPER.embedded_ray" in graph["suPER.core.rllib_runner"]
    assert "suPER.runs" in graph["suPER.campaigns.execute"]
    assert {"suPER.native.dqn", "suPER.core.rllib_runner"} <= graph["suPER.campaigns.execute"]
    assert "suPER.native.dqn" not in graph["suPER.config"]  # the trainer strings it spells are LAZY_RESOLVER's


def test_lower_layers_import_without_torch_ray_or_wandb() -> None:
    """The config, the rules, a run's resolved config, the env adapters, replay, relay, evaluation and run folders
    import none of the heavy packages (torch arrives with a tensor or a batched env, never with the import)."""
    code = ("import sys; import suPER.config, suPER.core.selection, suPER.resolve, suPER.envs, suPER.replay, "
            "suPER.core.relay, suPER.evaluation, suPER.runs; "
            "print(sorted(m for m in ('torch', 'ray', 'wandb') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_follow_the_layering(module: str) -> None:
    target = PKG / module
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files
    bad = []
    for f in files:
        for name in imports_of(f):
            for prefix in FORBIDDEN[module]:
                if name == prefix.rstrip(".") or name.startswith(prefix if prefix.endswith(".") else prefix + "."):
                    bad.append(f"{f.relative_to(ROOT)} imports {name}")
                elif name == prefix:
                    bad.append(f"{f.relative_to(ROOT)} imports {name}")
    assert not bad, bad


def test_ruff_clean() -> None:
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "suPER", "tests", "benchmarks", "scripts"], cwd=ROOT,
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
