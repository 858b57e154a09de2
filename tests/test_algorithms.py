"""The algorithm registry: every registered algorithm is exercised here the moment it is registered.

Each test iterates ``suPER.config.ALGORITHMS`` (no hard-coded lists of names): its config sections,
its presets, where the named flags go for it, ``--algo`` help and the paper's suffixes, and one tiny
real ``super-marl train`` run through the CLI.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from suPER import cli
from suPER import config as C
from suPER.algorithms import AlgorithmSpec, algos_help, register
from suPER.config import ALGORITHMS
from suPER.metrics import metric
from suPER.resolve import from_dict, resolve

NAMED = {"dqn.lr": 1e-3, "dqn.buffer_size": 500, "dqn.model": "conv", "dqn.parameter_sharing": True}
"""The named flags that target an algorithm section (``--lr``, ``--buffer-size``, ``--model``, ``--parameter-sharing``)."""


def test_the_names_users_type_are_registered() -> None:
    assert {"dqn", "ddqn", "seac", "maddpg", "qmix"} <= set(ALGORITHMS)
    assert all(f"{name} (" in algos_help() for name in ALGORITHMS)
    for spec in ALGORITHMS.values():
        if spec.paper_suffix:  # the paper's --env pursuit_plaindqn
            argv, _ = cli.translate_paper_args(["--env", f"battle{spec.paper_suffix}"])
            assert argv == ["--algo", spec.name, "--env", "battle"]


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_each_algorithm_records_its_sections_and_presets(algo: str) -> None:
    spec = ALGORITHMS[algo]
    cfg = resolve("pursuit", algo)
    assert cfg.run.algo == algo and isinstance(getattr(cfg, spec.section), spec.config)
    for dotted, value in spec.presets.items():
        section, key = dotted.split(".")
        assert getattr(getattr(cfg, section), key) == value, dotted
    assert list(cfg.to_dict()) == ["env", *spec.sections, "run"]
    assert from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()
    if not spec.can_relay:
        with pytest.raises(C.ConfigError, match=r"^--super: expected only with --algo .*, got '--algo "):
            resolve("pursuit", algo, named={"relay.enabled": True}, labels={"relay.enabled": "--super"})


@pytest.mark.parametrize("algo", list(ALGORITHMS))
@pytest.mark.parametrize("key", list(NAMED))
def test_a_named_flag_reaches_the_algorithm_or_is_refused(algo: str, key: str) -> None:
    """``--lr`` and friends land on the algorithm's own settings or are refused by name: never dropped."""
    spec = ALGORITHMS[algo]
    flag = "--" + key.split(".")[1].replace("_", "-")
    value = NAMED[key]
    section = key.split(".")[0]
    if section not in spec.sections and key not in spec.flag_routes:
        with pytest.raises(C.ConfigError, match=f"^{flag}: not used by --algo {algo}"):
            resolve("pursuit", algo, named={key: value}, labels={key: flag})
        return
    cfg = resolve("pursuit", algo, named={key: value})
    for target in spec.flag_routes.get(key, (key,)) if section not in spec.sections else (key,):
        s, k = target.split(".")
        assert getattr(getattr(cfg, s), k) == value, target


def test_an_algorithm_registered_without_a_route_refuses_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = AlgorithmSpec("toy", "seac", C.SEACConfig, trainers={"native": "seac.trainer:train"}, help="toy")
    monkeypatch.setitem(ALGORITHMS, "toy", toy)
    with pytest.raises(C.ConfigError, match=r"^--lr: not used by --algo toy \(its settings: --set seac.KEY=VALUE\)"):
        C.route_flags("toy", {"dqn.lr": 1e-3, "run.seed": 2}, {"dqn.lr": "--lr"})  # named as the user typed it
    assert C.route_flags("toy", {"dqn.parameter_sharing": False, "relay.bandwidth": 0.5, "run.seed": 2}) == \
        {"run.seed": 2}  # switches left off and relay settings of an algorithm that cannot relay: dropped
    monkeypatch.setitem(ALGORITHMS, "toy", dataclasses.replace(toy, flag_routes={"dqn.lr": ("seac.lr",)}))
    assert C.route_flags("toy", {"dqn.lr": 1e-3}) == {"seac.lr": 1e-3}


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "qmix"}, "already registered"),
    ({"section": "dqn"}, "section 'dqn' is DQNConfig"),
    ({"paper_suffix": "_qmix"}, "paper suffix '_qmix'"),
    ({"trainers": {"rllib": "a:b"}}, "trainers needs 'native'"),
    ({"trainers": {"native": "suPER.baselines.qmix"}}, "is not 'module:function'"),
])
def test_register_refuses_a_clash(change: dict[str, object], message: str) -> None:
    spec = AlgorithmSpec("fresh", "fresh", C.QMIXConfig, trainers={"native": "a:b"}, help="x")
    with pytest.raises(ValueError, match=message):
        register(dataclasses.replace(spec, **change))
    assert "fresh" not in ALGORITHMS


TINY_SECTION = {"learning_starts": 40, "buffer_size": 500, "buffer_episodes": 20}
"""Section fields that, where an algorithm's section has them, keep a smoke run tiny."""


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_tiny_cli_run_of_each_algorithm(algo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One real ``super-marl train --algo <algo>`` on a small pursuit: a finished run folder that records
    its own sections and an evaluation row per interval."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    spec = ALGORITHMS[algo]
    names = {f.name for f in dataclasses.fields(spec.config)}
    small = [a for k, v in TINY_SECTION.items() if k in names for a in ("--set", f"{spec.section}.{k}={v}")]
    code = cli.main(["train", "--env", "pursuit", "--algo", algo, "--num-timesteps", "80", "--eval-interval", "40",
                     "--eval-episodes", "1", "--no-progress", "--out", str(tmp_path), "--set", "env.horizon=20",
                     "--set", "env.kwargs.x_size=10", "--set", "env.kwargs.y_size=10", "--set", "env.kwargs.n_evaders=10",
                     *small])  # the smoke grid's small pursuit
    assert code == 0
    run_dir = tmp_path / f"pursuit__{algo}__s1"
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
    assert set(json.loads((run_dir / "config.json").read_text())) == {"env", *spec.sections, "run"}
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["env_steps"]) for r in rows] == [0, 40, 80]
    assert all(r["team_return_mean"] not in ("", "nan") for r in rows)
    assert [c for c in rows[0] if metric(c) is None] == []  # every column is documented (docs/reference.md)


class Interrupted(Exception):
    """Raised from a progress callback: a run stopped mid-way (as Ctrl-C or a crash would stop it)."""


SMALL_PURSUIT = {"env.kwargs.n_pursuers": 2, "env.kwargs.n_evaders": 2, "env.kwargs.x_size": 6,
                 "env.kwargs.y_size": 6, "env.kwargs.max_cycles": 30, "env.horizon": 30, "run.eval_episodes": 1,
                 "run.progress": False, "run.device": "cpu", "run.num_timesteps": 300, "run.eval_interval": 100}


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_every_trainer_resumes_where_it_was_interrupted(algo: str, tmp_path: Path) -> None:
    """Stopped after its checkpoint at 100 env steps, a run trained again into the same folder continues from that
    checkpoint: the rows written before stay as they were, progress resumes past 100 (a restart would report from
    its first steps), and it ends at its budget with one row per evaluation and a learner that kept learning."""
    from suPER.campaigns import trainer_for
    from suPER.runs import RunFolder, read_metrics

    spec = ALGORITHMS[algo]
    names = {f.name for f in dataclasses.fields(spec.config)}
    tiny = {f"{spec.section}.{k}": v for k, v in TINY_SECTION.items() if k in names}
    cfg = resolve("pursuit", algo, overrides={**SMALL_PURSUIT, **tiny})
    train, folder = trainer_for("native", algo), RunFolder(tmp_path / "run")

    def interrupt(env_steps: int, stats: dict[str, float]) -> None:
        if env_steps >= 150:
            raise Interrupted

    with pytest.raises(Interrupted):
        train(cfg, folder, progress=interrupt)
    assert (folder.checkpoints / "latest.pt").exists() and not (folder.checkpoints / "final.pt").exists()
    before = read_metrics(folder.metrics)
    seen: list[int] = []
    summary = train(cfg, folder, progress=lambda env_steps, stats: seen.append(env_steps))
    after = read_metrics(folder.metrics)
    assert summary.env_steps == 300 and list(after["env_steps"]) == [0, 100, 200, 300]
    assert seen and seen[0] > 100
    for column in before:  # the rows up to the checkpoint, as written (timing columns aside)
        if column not in ("env_steps_per_sec", "wall_time_s"):
            np.testing.assert_array_equal(after[column][:2], before[column][:2], err_msg=column)
    loss = next(c for c in ("loss", "critic_loss") if c in after)
    assert after["updates"][-1] > after["updates"][1] > 0 and np.isfinite(after[loss][-1])
