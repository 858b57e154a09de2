"""Hostile inputs to ``plot`` and ``compare``: broken run folders, unfinished runs, bad flags.

Refused inputs answer one ``error:`` line (exit 2) and write nothing. A broken or unfinished run among
good ones does not abort the figure: it gets one ``warning: FILE: ...`` line naming the file at fault,
and the figure and table are drawn from the rest (exit 0), with unfinished runs kept out of the table.
"""

from __future__ import annotations

import csv
import json
import os
import pathlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from suPER.resolve import resolve
from tests.hostile.conftest import Outcome, assert_refused, assert_unchanged, run_cli, snapshot

CSV_HEADER = "env_steps,team_return_mean,loss\n"


def make_run(root: Path, seed: int, values: list[float], *, status: str | None = "finished", env: str = "pursuit",
             interval: int = 100) -> Path:
    """A run folder as a trainer leaves it (config.json, metrics.csv, manifest.json), without training."""
    cfg = resolve(env, "ddqn", named={"run.seed": seed})
    folder = root / cfg.run_name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    rows = "".join(f"{i * interval},{v},0.1\n" for i, v in enumerate(values))
    (folder / "metrics.csv").write_text(CSV_HEADER + rows)
    if status is not None:
        (folder / "manifest.json").write_text(json.dumps({"status": status, "seed": seed}))
    return folder


def good_values(seed: int) -> list[float]:
    """20 evaluations rising with the seed; the last 10% (2 evaluations) sit at ``2 * seed``."""
    return [seed * t / 10 for t in range(18)] + [2.0 * seed] * 2


def small_campaign(tmp_path: Path, seeds: tuple[int, ...] = (1, 2, 3)) -> Path:
    root = tmp_path / "camp"
    for s in seeds:
        make_run(root, s, good_values(s))
    return root


def folder_of(root: Path, seed: int) -> Path:
    return root / resolve("pursuit", "ddqn", named={"run.seed": seed}).run_name


def assert_drawn(outcome: Outcome, out: Path, *warned: str) -> list[dict[str, str]]:
    """Exit 0, a figure and a table under ``out``, one ``warning:`` line per needle (and no other stderr line)."""
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    assert outcome.code == 0, text
    lines = outcome.stderr_lines
    assert len(lines) == len(warned), outcome.stderr
    for line, needle in zip(lines, warned):
        assert line.startswith("warning: ") and needle in line, (needle, line)
    assert (out / "team_return.png").read_bytes()[:4] == b"\x89PNG"
    return list(csv.DictReader((out / "final_performance.csv").open()))


def final_mean(seeds: tuple[int, ...]) -> float:
    """The table's mean for runs made by ``good_values``: each run's mean over its last 2 evaluations."""
    return float(np.mean([np.mean(good_values(s)[-2:]) for s in seeds]))


# --------------------------------------------------------------------------------------------------
# a broken run among good ones: skipped with one warning naming the file, the figure is still drawn


def _half_written(folder: Path) -> str:
    text = (folder / "metrics.csv").read_text()
    (folder / "metrics.csv").write_text(text[: text.rindex(",")])  # killed mid-row: the last row lacks a field
    return "metrics.csv"


def _binary(folder: Path) -> str:
    (folder / "metrics.csv").write_bytes(bytes(range(256)) * 4)
    return "metrics.csv"


def _not_utf8(folder: Path) -> str:
    (folder / "metrics.csv").write_bytes(CSV_HEADER.encode() + b"0,\xff\xfe,0.1\n")
    return "metrics.csv"


def _empty_metrics(folder: Path) -> str:
    (folder / "metrics.csv").write_bytes(b"")
    return "metrics.csv"


def _text_in_metric(folder: Path) -> str:
    (folder / "metrics.csv").write_text(CSV_HEADER + "0,1.0,0.1\n100,oops,0.1\n")
    return "metrics.csv"


def _steps_backwards(folder: Path) -> str:
    (folder / "metrics.csv").write_text(CSV_HEADER + "0,1.0,0.1\n200,2.0,0.1\n100,3.0,0.1\n")
    return "metrics.csv"


def _infinite_value(folder: Path) -> str:
    (folder / "metrics.csv").write_text(CSV_HEADER + "0,1.0,0.1\n100,inf,0.1\n")
    return "metrics.csv"


def _corrupt_config(folder: Path) -> str:
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    return "config.json"


def _config_not_a_run(folder: Path) -> str:
    (folder / "config.json").write_text("[1, 2, 3]")
    return "config.json"


def _no_config(folder: Path) -> str:
    (folder / "config.json").unlink()
    return "config.json"


DEFECTS: dict[str, Callable[[Path], str]] = {
    "half_written_metrics": _half_written, "binary_metrics": _binary, "non_utf8_metrics": _not_utf8,
    "empty_metrics": _empty_metrics, "text_in_metric_column": _text_in_metric, "env_steps_backwards": _steps_backwards,
    "infinite_value": _infinite_value, "half_written_config": _corrupt_config, "config_not_a_run": _config_not_a_run,
    "missing_config": _no_config,
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_broken_run_is_skipped_with_one_warning(defect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    bad = folder_of(root, 2)
    file = DEFECTS[defect](bad)
    before = snapshot(root)
    outcome = run_cli(["plot", root], capsys)
    rows = assert_drawn(outcome, root / "figures", f"warning: {bad / file}:")
    assert [(r["configuration"], r["runs"]) for r in rows] == [("ddqn", "2")]
    assert float(rows[0]["mean"]) == pytest.approx(final_mean((1, 3)), rel=1e-5)  # table written with 6 digits
    assert_unchanged(before, root)


def test_unreadable_metrics_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """chmod 000 does not stop root (the tests run as root), so reading that one file is also made to fail."""
    root = small_campaign(tmp_path)
    target = folder_of(root, 3) / "metrics.csv"
    target.chmod(0)
    real = pathlib.Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.resolve() == target.resolve():
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    try:
        outcome = run_cli(["compare", root, "--out", tmp_path / "cmp"], capsys)
    finally:
        target.chmod(0o644)
    rows = assert_drawn(outcome, tmp_path / "cmp", f"warning: {target}: cannot read (Permission denied)")
    assert rows[0]["runs"] == "2"


def test_metric_only_some_runs_have_warns_for_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    extra = folder_of(root, 1) / "metrics.csv"
    lines = extra.read_text().splitlines()
    extra.write_text("\n".join([lines[0] + ",fraction_shared"] + [f"{row},0.25" for row in lines[1:]]) + "\n")
    outcome = run_cli(["plot", root, "--metric", "fraction_shared", "--out", tmp_path / "f"], capsys)
    text = outcome.stdout + outcome.stderr
    assert outcome.code == 0 and "Traceback" not in text, text
    warned = outcome.stderr_lines
    assert len(warned) == 2 and all(w.startswith("warning: ") and "'fraction_shared'" in w for w in warned)
    assert {str(folder_of(root, s) / "metrics.csv") for s in (2, 3)} == {w.split(": ")[1] for w in warned}
    rows = list(csv.DictReader((tmp_path / "f" / "final_performance.csv").open()))
    assert rows[0]["runs"] == "1" and float(rows[0]["mean"]) == pytest.approx(0.25, rel=1e-5)


# --------------------------------------------------------------------------------------------------
# unfinished runs: out of the final table, with a warning naming their manifest; drawn dashed


def test_run_killed_at_step_500_is_left_out_of_the_final_table(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path, seeds=(1, 2))
    killed = make_run(root, 3, [-100.0] * 6, status="running")  # evaluations at 0..500, then killed
    before = snapshot(root)
    outcome = run_cli(["plot", root], capsys)
    rows = assert_drawn(outcome, root / "figures", f"warning: {killed / 'manifest.json'}: run is running "
                                                   "(last evaluation at 500 env steps)")
    assert [(r["configuration"], r["runs"], r["final_env_steps"]) for r in rows] == [("ddqn", "2", "1900")]
    assert float(rows[0]["mean"]) == pytest.approx(final_mean((1, 2)), rel=1e-5)
    md = (root / "figures" / "final_performance.md").read_text()
    assert "Left out (unfinished):" in md and str(killed / "manifest.json") in md
    svg = (root / "figures" / "team_return.svg").read_text()
    assert "DDQN (no sharing) (unfinished run)" in svg  # its curve is drawn and marked
    assert_unchanged(before, root)


@pytest.mark.parametrize("manifest", ["missing", "corrupt"])
def test_run_without_a_readable_manifest_counts_as_unfinished(manifest: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path, seeds=(1, 2))
    odd = make_run(root, 3, good_values(3), status=None if manifest == "missing" else "finished")
    if manifest == "corrupt":
        (odd / "manifest.json").write_text('{"status": "fini')
    outcome = run_cli(["compare", root, "--out", tmp_path / "cmp"], capsys)
    rows = assert_drawn(outcome, tmp_path / "cmp", f"warning: {odd / 'manifest.json'}: run is without a readable "
                                                   "manifest (status unknown)")
    assert rows[0]["runs"] == "2" and float(rows[0]["mean"]) == pytest.approx(final_mean((1, 2)), rel=1e-5)


def test_only_unfinished_runs_draw_curves_and_an_empty_table(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "camp"
    runs = [make_run(root, s, good_values(s)[:5], status=st) for s, st in ((1, "running"), (2, "failed"))]
    outcome = run_cli(["plot", root], capsys)
    rows = assert_drawn(outcome, root / "figures", *(f"warning: {r / 'manifest.json'}: run is {st}"
                                                     for r, st in zip(runs, ("running", "failed"))))
    assert rows == []


# --------------------------------------------------------------------------------------------------
# refused: one error line, exit 2, nothing written


def refused(argv: list[object], capsys: pytest.CaptureFixture[str], watch: Path, *needles: str) -> None:
    before = snapshot(watch)
    assert_refused(run_cli(list(argv), capsys), 2, *needles)
    assert_unchanged(before, watch, allow_new=False)


@pytest.mark.parametrize("value", ["-1", "0"])
def test_smooth_below_one(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    refused(["plot", root, "--smooth", value], capsys, tmp_path, "error: --smooth:", f"got {value}")


@pytest.mark.parametrize(("value", "expected"), [("0", "(0, 1]"), ("1.5", "(0, 1]"), ("-0.1", ">= 0"), ("nan", ">= 0")])
def test_last_fraction_out_of_range(value: str, expected: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Negative and non-finite values are refused when the command line is parsed (every numeric option's guard),
    the others by the command's own range."""
    root = small_campaign(tmp_path)
    refused(["compare", root, "--last-fraction", value, "--out", tmp_path / "cmp"], capsys, tmp_path,
            "error: --last-fraction:", expected)


@pytest.mark.parametrize("command", ["plot", "compare"])
def test_out_is_a_file(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    (tmp_path / "taken").write_text("not a folder")
    refused([command, root, "--out", tmp_path / "taken"], capsys, tmp_path, "error: --out:",
            str(tmp_path / "taken"))


def test_out_below_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    (tmp_path / "taken").write_text("not a folder")
    refused(["plot", root, "--out", tmp_path / "taken" / "figs"], capsys, tmp_path, "error: --out:",
            str(tmp_path / "taken"))


def test_default_out_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    (root / "figures").write_text("a file where the figures folder would go")
    refused(["plot", root], capsys, tmp_path, "error: --out", str(root / "figures"))


def test_empty_campaign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    refused(["plot", tmp_path / "empty"], capsys, tmp_path, f"error: {tmp_path / 'empty'}:", "got none")


def test_campaign_dir_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f.txt").write_text("x")
    refused(["plot", tmp_path / "f.txt"], capsys, tmp_path, f"error: {tmp_path / 'f.txt'}:", "got a file")


def test_campaign_dir_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["plot", tmp_path / "nope"], capsys, tmp_path, f"error: {tmp_path / 'nope'}:", "no such folder")


def test_glob_matching_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_campaign(tmp_path)
    pattern = str(tmp_path / "camp" / "battle__*")
    refused(["compare", pattern, "--out", tmp_path / "cmp"], capsys, tmp_path, "error: RUNS:", pattern)


def test_compare_without_runs_or_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["compare", "--out", tmp_path / "cmp"], capsys, tmp_path, "error: RUNS:")


def test_tag_no_run_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_campaign(tmp_path)
    refused(["compare", "--tag", "bw005", "--root", tmp_path, "--out", tmp_path / "cmp"], capsys, tmp_path,
            "error: --tag:", "bw005")


def test_tag_root_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["compare", "--tag", "x", "--root", tmp_path / "nope", "--out", tmp_path / "cmp"], capsys, tmp_path,
            "error: --root:", str(tmp_path / "nope"))


def test_metric_no_run_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    refused(["plot", root, "--metric", "team_retrun_mean"], capsys, tmp_path, "error: --metric:",
            "'team_retrun_mean'", "team_return_mean")  # names what exists


def test_config_glob_matching_no_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    refused(["plot", root, "--config", "qmix*"], capsys, tmp_path, "error: --config:", "qmix*", "ddqn")


@pytest.mark.parametrize("name", ["a/b", "", ".."])
def test_name_that_is_not_a_file_stem(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    refused(["plot", root, "--name", name], capsys, tmp_path, "error: --name:")


def test_every_run_broken_is_one_error_naming_the_first_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path, seeds=(1, 2))
    for s in (1, 2):
        _binary(folder_of(root, s))
    first = folder_of(root, 1) / "metrics.csv"
    refused(["plot", root], capsys, tmp_path, f"error: {root}:", "2 run folder(s)", str(first))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder; the check cannot fail")
def test_out_not_writable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_campaign(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        refused(["plot", root, "--out", locked / "figs"], capsys, tmp_path, "error: --out:", "not writable")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("damage,needle", [
    ("duplicate-row", "expected increasing env_steps (each evaluation once)"),
    ("unknown-env", "expected env.name to be one of"),
])
def test_records_that_break_the_run_folder_contract_are_skipped_with_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, needle: str) -> None:
    """A run with an evaluation row logged twice, or whose config.json names an env that does not exist, is left
    out of the figure with one warning naming the file (it was drawn without a word)."""
    from suPER import cli

    root = tmp_path / "campaign"
    for seed in (1, 2):
        run = root / f"pursuit__ddqn__s{seed}"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps({"status": "finished"}))
        (run / "config.json").write_text(json.dumps({"env": {"name": "pursuit"}, "run": {"seed": seed, "algo": "ddqn"}}))
        (run / "metrics.csv").write_text("env_steps,team_return_mean\n0,-1\n100,0\n200,1\n")
    bad = root / "pursuit__ddqn__s2"
    if damage == "duplicate-row":
        (bad / "metrics.csv").write_text("env_steps,team_return_mean\n0,-1\n100,0\n100,0\n200,1\n")
        named = bad / "metrics.csv"
    else:
        (bad / "config.json").write_text(json.dumps({"env": {"name": "no_such_env"}, "run": {"seed": 2}}))
        named = bad / "config.json"
    capsys.readouterr()
    assert cli.main(["plot", str(root), "--out", str(tmp_path / "figs")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(named) in err[0] and needle in err[0]
    table = (tmp_path / "figs" / "final_performance.csv").read_text()
    assert ",1," in table.replace(" ", "")  # one run left in the table


@pytest.mark.parametrize("args,needle", [
    (["--marl-eval", "{dir}"], "--marl-eval: expected a file to write, got the folder"),
    (["--marl-eval", "{file}/x.json"], "--marl-eval: expected a file to write, got"),
    (["--name", "fig\nure"], "--name: expected a file stem without folders or control characters"),
])
def test_outputs_are_checked_before_any_figure_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          args: list[str], needle: str) -> None:
    """A --marl-eval that is a folder or below a file, or a --name with a newline: refused before the figures are
    written (they were written first, then the export failed)."""
    from suPER import cli
    from suPER.config import ROOT

    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    argv = [a.format(dir=tmp_path / "adir", file=tmp_path / "afile") for a in args]
    capsys.readouterr()
    code = cli.main(["plot", str(ROOT / "results" / "fig1"), "--out", str(tmp_path / "figs"), *argv])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and needle in err[0]
    assert not (tmp_path / "figs").exists()
