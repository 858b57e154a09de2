"""The committed Figure 1 records (results/fig1, issue 13) redraw from a fresh clone and are complete records."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from suPER import cli
from suPER.config import from_dict

ROOT = Path(__file__).resolve().parent.parent
FIG1 = ROOT / "results" / "fig1"
RUNS = sorted(p for p in FIG1.iterdir() if p.is_dir()) if FIG1.is_dir() else []

sys.path.insert(0, str(ROOT / "scripts"))
from check_rows import check  # noqa: E402
from collect_records import RECORD_FILES  # noqa: E402


def test_there_are_committed_fig1_records() -> None:
    assert RUNS, "results/fig1 holds no run records"


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_each_record_is_a_finished_run_with_every_evaluation_once(run: Path) -> None:
    assert sorted(p.name for p in run.iterdir()) == sorted(RECORD_FILES)  # no checkpoints, nothing large
    ok, what = check(run)
    assert ok, what
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["grid"] == "fig1" and len(manifest["git_commit"]) == 40
    cfg = from_dict(json.loads((run / "config.json").read_text()))
    assert manifest["run_name"] == run.name and cfg.run.seed == manifest["seed"]
    assert manifest["env_steps"] == cfg.run.num_timesteps


def test_plot_redraws_the_figure_and_table_from_the_records(tmp_path: Path) -> None:
    assert cli.main(["plot", str(FIG1), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "team_return.png").read_bytes()[:4] == b"\x89PNG"
    table = list(csv.DictReader((tmp_path / "final_performance.csv").open()))
    recorded_envs = {from_dict(json.loads((p / "config.json").read_text())).env.name for p in RUNS}
    assert {r["env"] for r in table} == recorded_envs
    assert sum(int(r["runs"]) for r in table) == len(RUNS)  # every record lands in exactly one table row
