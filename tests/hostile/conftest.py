"""The hostile-input corpus: shared helpers.

Every case runs one bad input or fault against the real CLI and asserts the same contract:

* the exit code (2 bad input, 1 failure, 130 interrupt);
* exactly one line on stderr, which names the flag or file as the user typed it;
* no traceback anywhere in the output;
* no file that existed before the command was changed or removed (new files may appear only where the
  case says so).

Most cases run in-process through ``suPER.cli.main`` (fast); :func:`run_subprocess` runs the installed
``super-marl`` entry point for the few cases whose behaviour depends on the process (signals, exit codes as
the shell sees them).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Outcome:
    """What one CLI invocation did."""

    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def snapshot(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file below ``root`` (empty when it does not exist)."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    """``super-marl ARGV`` in this process (``suPER.cli.main``), with its stdout and stderr."""
    from suPER import cli

    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def run_subprocess(argv: list[str], cwd: Path | None = None, timeout: float = 300,
                   env: dict[str, str] | None = None) -> Outcome:
    """``super-marl ARGV`` as a real process (the console script's code path: ``python -m suPER.cli``)."""
    proc = subprocess.run([sys.executable, "-m", "suPER.cli", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_refused(outcome: Outcome, code: int, *needles: str) -> None:
    """The contract of a refused input: exit ``code``, one stderr line containing every needle, no traceback."""
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    assert outcome.code == code, f"exit {outcome.code}, expected {code}\n{text}"
    lines = outcome.stderr_lines
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{outcome.stderr}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


def assert_unchanged(before: dict[str, str], root: Path, allow_new: bool = True) -> None:
    """Every file of ``before`` is still below ``root`` with the same bytes (new files only if allowed)."""
    after = snapshot(root)
    changed = [p for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"changed or removed: {changed}"
    if not allow_new:
        assert set(after) == set(before), f"new files: {sorted(set(after) - set(before))}"
