"""docs/reference.md is what the code generates; every setting and metric is described once, where it is declared."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from suPER import cli
from suPER.config import ENV_NAMES, PETTINGZOO, ExperimentConfig, flatten, load_env_defaults
from suPER.docstrings import field_docs
from suPER.metrics import METRICS, metric, wandb_key
from suPER.runs import namespaced_metrics

ROOT = Path(__file__).resolve().parent.parent


def test_reference_doc_is_current() -> None:
    """The CI check: ``scripts/reference.py --check`` exits 0 only when docs/reference.md is the generated text."""
    r = subprocess.run([sys.executable, "scripts/reference.py", "--check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_reference_check_fails_on_a_stale_doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import reference
    finally:
        sys.path.pop(0)
    stale = tmp_path / "reference.md"
    stale.write_text(reference.reference().replace("Adam learning rate", "Adam step size", 1))
    monkeypatch.setattr(reference, "OUT", stale)
    assert reference.main(["--check"]) == 1
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0  # rewritten


def test_every_config_field_has_a_docstring() -> None:
    """What --help and docs/reference.md show comes from the field docstrings: none may be missing (inherited
    fields included, as dqn.epsilon_initial from EpsilonGreedy)."""
    missing = [f"{s.name}.{f.name}" for s in dataclasses.fields(ExperimentConfig)
               for f in dataclasses.fields(s.type) if not field_docs(s.type).get(f.name)]
    assert missing == []
    assert field_docs(dataclasses.fields(ExperimentConfig)[1].type)["epsilon_initial"] == "epsilon-greedy start value"


def test_env_yamls_hold_only_what_differs_from_the_defaults() -> None:
    """Each default value in one place: an env YAML that restated a dataclass default would be a second copy that
    silently stops agreeing when the default changes."""
    defaults = {f"{s.name}.{f.name}": f.default for s in dataclasses.fields(ExperimentConfig)
                for f in dataclasses.fields(s.type) if f.default is not dataclasses.MISSING}
    restated = [f"{env}: {k}" for env in (*ENV_NAMES, PETTINGZOO) for k, v in flatten(load_env_defaults(env)).items()
                if k != "env.name" and k in defaults and v == defaults[k]]
    assert restated == []


def test_wandb_keys_follow_the_metric_records() -> None:
    row = {"env_steps": 5, "team_return_mean": 1.0, "return_pursuer_3": 0.5, "loss": 0.1, "seac_value_loss": 0.2,
           "fraction_shared_mean": 0.1, "fraction_shared_blue_0": 0.2, "relayed_rows_total": 7, "updates": 3,
           "wall_time_s": 1.0, "some_new_loss": 1.0, "some_new_chart": 2.0}
    assert namespaced_metrics(row, {"act": 0.5}) == {
        "charts/team_return_mean": 1.0, "charts/return_pursuer_3": 0.5, "losses/loss": 0.1,
        "losses/seac_value_loss": 0.2, "relay/fraction_shared_mean": 0.1, "relay/fraction_shared_blue_0": 0.2,
        "relay/relayed_rows_total": 7, "perf/updates": 3, "perf/wall_time_s": 1.0, "losses/some_new_loss": 1.0,
        "charts/some_new_chart": 2.0, "perf/time_act_s": 0.5}
    assert metric("fraction_shared_mean").per_agent is False  # the exact record before the per-sender prefix
    assert len({m.column for m in METRICS}) == len(METRICS)
    assert wandb_key("env_steps_per_sec") == "perf/env_steps_per_sec"


def test_a_super_run_writes_only_documented_columns(tmp_path: Path) -> None:
    """A real SUPER run on adversarial pursuit (per-sender relay columns, learners by id): every metrics.csv
    column has its record."""
    code = cli.main(["train", "--env", "adversarial_pursuit", "--num-timesteps", "60", "--eval-interval", "30",
                     "--eval-episodes", "1", "--super", "--no-progress", "--out", str(tmp_path),
                     "--set", "env.horizon=20", "--set", "dqn.learning_starts=10"])
    assert code == 0
    (metrics_csv,) = tmp_path.glob("*/metrics.csv")
    columns = next(csv.reader(metrics_csv.open()))
    assert any(c.startswith("fraction_shared_prey") for c in columns)
    assert [c for c in columns if metric(c) is None] == []
