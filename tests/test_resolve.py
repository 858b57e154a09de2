"""A run's config resolved with its selection rule's record: the rule's parameters under ``relay.params`` (only the
active rule's), their spellings, and a config.json of the earlier layout (every rule's parameters as fields of
``relay``) migrated on read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suPER import config as C
from suPER.campaigns.grid import load_grid
from suPER.resolve import from_dict, load_json, migrate, resolve, without_volatile


def old_layout(cfg: C.ExperimentConfig, **rule_fields: object) -> dict[str, object]:
    """``cfg.to_dict()`` as the earlier version wrote it: no ``relay.params``, every registered rule's parameters
    (topk's ``k``, default 1) as fields of ``relay``."""
    data = cfg.to_dict()
    relay = {k: v for k, v in data["relay"].items() if k != "params"}
    data["relay"] = {**relay, "k": 1, **rule_fields}
    return data


def test_config_json_holds_only_the_active_rules_parameters() -> None:
    quantile = resolve("pursuit", overrides={"relay.enabled": True}).to_dict()["relay"]
    assert quantile["params"] == {} and "k" not in quantile
    topk = resolve("pursuit", overrides={"relay.enabled": True, "relay.mode": "topk"}).to_dict()["relay"]
    assert topk["params"] == {"k": 1}  # the default, recorded: the value the run used
    assert resolve("pursuit", overrides={"relay.mode": "topk", "relay.params": {"k": 5}}).relay.params == {"k": 5}


def test_a_config_json_of_the_earlier_layout_is_migrated_on_read(tmp_path: Path) -> None:
    cfg = resolve("pursuit", overrides={"relay.enabled": True, "run.seed": 3})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(old_layout(cfg)))
    assert load_json(path).to_dict() == cfg.to_dict()  # topk's k did not act on a quantile run: dropped
    assert without_volatile(json.loads(path.read_text())) == without_volatile(cfg.to_dict())  # so it resumes

    topk = resolve("pursuit", overrides={"relay.enabled": True, "relay.mode": "topk", "relay.params.k": 3})
    old = old_layout(topk, k=3)
    assert migrate(old)["relay"]["params"] == {"k": 3} and "k" not in migrate(old)["relay"]
    assert from_dict(old).to_dict() == topk.to_dict()
    assert migrate(topk.to_dict()) == topk.to_dict()  # this layout: unchanged


def test_a_config_json_that_no_longer_fits_is_still_refused_by_name() -> None:
    data = old_layout(resolve("pursuit", overrides={"relay.enabled": True}), bandwith=0.2)
    with pytest.raises(C.ConfigError, match="unknown key 'relay.bandwith'"):
        from_dict(data)
    bad = resolve("pursuit").to_dict()
    bad["relay"]["params"] = {"k": 2}  # a parameter quantile does not have
    with pytest.raises(C.ConfigError, match="relay.params.k: not a parameter of selection rule 'quantile'"):
        from_dict(bad)


def test_grid_files_set_rule_parameters_in_either_spelling(tmp_path: Path) -> None:
    for key in ("relay.params.k", "relay.k"):
        grid = tmp_path / f"{key}.yaml"
        grid.write_text(f"name: g\nseeds: [1]\nruns:\n  - {{name: topk, env: pursuit, algo: ddqn, super: true, "
                        f"super_mode: topk, set: {{{key}: 4}}}}\n")
        [run] = load_grid(grid).runs
        assert run.config().relay.params == {"k": 4}
