"""The same hostile numbers through every numeric option of every command: refused by construction.

The options are enumerated from the command tree itself (``suPER.cli.common.numeric_options``), so a command
added later is in this corpus without an edit here, and gets the check without a line of its own
(``guard_numbers``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from suPER.cli import app
from suPER.cli.common import numeric_options
from tests.hostile.conftest import assert_refused, run_cli, snapshot

OPTIONS = [(path, param) for path, param in numeric_options(typer.main.get_command(app)) if param.opts]
HOSTILE = {float: ("nan", "inf", "-inf", "-1e-9", "-3"), int: ("-1", "-5000")}


def _required(command_path: list[str]) -> list[str]:
    """Dummy values for the command's required arguments and options (never reached: the number is refused first)."""
    cmd = typer.main.get_command(app)
    for name in command_path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    args: list[str] = []
    for p in cmd.params:
        if p.required:
            args += ["x"] if not p.opts or not p.opts[0].startswith("-") else [p.opts[0], "x"]
    return args


CASES = [pytest.param(path, param.opts[0], value, id=f"{' '.join(path)} {param.opts[0]} {value}")
         for path, param in OPTIONS for value in HOSTILE[param.type_descriptor.annotation]]


def test_the_corpus_reaches_every_command_with_a_number() -> None:
    commands = {" ".join(path) for path, _ in OPTIONS}
    assert {"train", "plot", "compare", "reproduce", "grid run", "grid submit", "opponents train", "opponents eval",
            "population psro"} <= commands


@pytest.mark.parametrize(("path", "flag", "value"), CASES)
def test_a_negative_or_non_finite_number_is_one_line_naming_the_flag(
        path: list[str], flag: str, value: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("kept")
    before = snapshot(tmp_path)
    outcome = run_cli([*path, *_required(path), f"{flag}={value}"], capsys)
    assert_refused(outcome, 2, f"error: {flag}: expected ")
    assert snapshot(tmp_path) == before  # nothing written, nothing changed


def test_a_paper_spelling_is_named_as_typed(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert_refused(run_cli(["train", "--suPER_bandwidth", "nan"], capsys), 2,
                   "error: --suPER_bandwidth: expected a finite number >= 0, got nan")
