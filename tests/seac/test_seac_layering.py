"""seac/ reuses suPER's envs, config, models, loop and runs, never the DQN trainer or the RLlib layer (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

SEAC = Path(__file__).resolve().parents[2] / "seac"


def test_seac_imports_follow_the_layering() -> None:
    bad = []
    for f in sorted(SEAC.rglob("*.py")):
        if f.name == "train.py":  # the original's entry point (`python train.py with env=...`): a thin shim over the CLI
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            bad += [f"{f.name} imports {n}" for n in names
                    if n.split(".")[:2] in (["suPER", "native"], ["suPER", "core"], ["suPER", "cli"])
                    or n.split(".")[0] in ("ray", "wandb")]
    assert not bad, bad
