"""The env registry: every registered env is exercised here by name, and a record missing a fact is refused."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suPER import config as C
from suPER.envs import (
    ENVS,
    EnvRecord,
    EnvRegistrationError,
    env_info,
    env_record,
    opponent_env_names,
)
from suPER.envs import record as R
from suPER.envs.check import accepted_kwargs
from suPER.opponents import OPPONENTS_DIR, NetworkOpponent, make_env
from suPER.resolve import resolve


def test_registry_keys_are_the_env_yaml_files() -> None:
    generic = {n for n in ENVS if env_record(n).generic}
    # an adapter needs its YAML (register), a YAML its adapter (here); a generic adapter's file is its folder's
    assert set(ENVS) - generic == set(C.ENV_NAMES) and generic == {C.PETTINGZOO}
    assert all(C.env_yaml_path(n) == C.EXPERIMENTS_DIR / "envs" / n / "defaults.yaml" for n in generic)
    assert C.ENV_NAMES[:3] == C.PAPER_ENVS
    assert opponent_env_names() == tuple(n for n in ENVS if env_record(n).has_opponents)


def test_every_registered_env_builds_steps_and_has_its_data(env_name: str) -> None:
    """Every env by name (``tests/conftest.py``: the named envs and the ones registered at run time)."""
    name = env_name
    rec = env_record(name)
    cfg = replace(resolve(name, "ddqn").env, opponent="random", horizon=4)
    env = make_env(cfg, seed=3)
    try:
        assert env.spec.name == name == cfg.name and rec.name == C.env_key(name)  # lookups by spec.name find rec
        assert env_record(env.spec.name) is rec
        info = env_info(name)
        assert info["learner_ids"] == list(env.spec.learner_ids)
        assert info["obs_shape"] == list(env.spec.obs_shape) and info["n_actions"] == env.spec.n_actions
        obs_NO = env.reset(3)
        assert obs_NO.shape == (env.spec.n_agents, *env.spec.obs_shape)
        steps = 1
        while not env.step(np.zeros(env.spec.n_agents, dtype=np.int64)).episode_over:
            steps += 1
        assert steps == 4  # the config's horizon
    finally:
        env.close()
    assert set(cfg.kwargs) <= set(accepted_kwargs(name))  # the YAML's kwargs are the library's arguments
    assert resolve(name).run.num_timesteps >= 1  # default budget
    assert set(C.load_env_profiles(name)["quick"]) >= {"run.num_timesteps"}  # --quick
    assert (info["opponent_ids"] != []) == rec.has_opponents


@pytest.mark.parametrize("name", opponent_env_names())
def test_every_opponent_env_ships_its_opponent_and_an_outcome_rule(name: str) -> None:
    rec = env_record(name)
    assert resolve(name).env.opponent == "pretrained"
    assert (OPPONENTS_DIR / f"{name}.safetensors").is_file() and (OPPONENTS_DIR / f"{name}.card.md").is_file()
    env = make_env(replace(resolve(name, "ddqn").env, horizon=2), seed=1)  # the shipped weights fit the env
    try:
        assert isinstance(env.opponent, NetworkOpponent)  # type: ignore[attr-defined]
    finally:
        env.close()
    assert rec.outcome is not None
    assert {rec.outcome(a, o, r) for a, o, r in ((3, 1, 2.0), (1, 3, -2.0), (2, 2, 0.0))} <= {-1, 0, 1}
    assert rec.opponent_train_budget >= 1 and rec.win_definition


# --------------------------------------------------------------------------------------------------
# registration refuses a forgotten or impossible fact


class _Base:
    @property
    def alive_N(self) -> Any: ...

    def reset(self, seed: int | None = None) -> Any: ...
    def step(self, actions_N: Any) -> Any: ...
    def close(self) -> None: ...
    def set_opponent(self, opponent: Any) -> None: ...

    @classmethod
    def constructor_kwargs(cls) -> set[str]:
        return set()


def _adapter(class_name: str, **facts: Any) -> type:
    return type(class_name, (_Base,), {"record": EnvRecord(**facts)} if facts else {})


@pytest.fixture
def scratch_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An empty registry whose YAML folder is tmp_path (holding tiny_grid.yaml)."""
    (tmp_path / "tiny_grid.yaml").write_text("env: {name: tiny_grid}\n")
    monkeypatch.setattr(R, "env_yaml_path", lambda name: tmp_path / f"{name}.yaml")
    monkeypatch.setattr(R, "ENVS", {})
    return R.ENVS


def test_a_complete_record_registers(scratch_registry: dict[str, Any]) -> None:
    cls = _adapter("TinyGridEnv", name="tiny_grid", sender_side_priorities=False)
    assert R.register(cls) is cls and scratch_registry == {"tiny_grid": cls}
    assert env_record("tiny_grid").opponent_kinds == () and not R.sender_side_priorities("tiny_grid")
    with pytest.raises(EnvRegistrationError, match="a key not registered yet"):
        R.register(cls)


def test_the_sender_side_fact_has_no_default() -> None:
    with pytest.raises(TypeError, match="sender_side_priorities"):
        EnvRecord(name="tiny_grid")  # type: ignore[call-arg]


@pytest.mark.parametrize(("class_name", "facts", "message"), [
    ("TinyGridEnv", {}, "expected a class attribute record = EnvRecord"),
    ("TinyGrid2Env", {"name": "tiny_grid", "sender_side_priorities": False}, "record.name: expected 'tiny_grid2'"),
    ("OtherEnv", {"name": "other", "sender_side_priorities": False}, "a YAML file"),
    ("TinyGridEnv", {"name": "tiny_grid", "sender_side_priorities": False, "has_opponents": True},
     "record.outcome: expected an outcome rule"),
    ("TinyGridEnv", {"name": "tiny_grid", "sender_side_priorities": False, "has_opponents": True,
                     "outcome": lambda a, o, r: 0}, "record.win_definition"),
    ("TinyGridEnv", {"name": "tiny_grid", "sender_side_priorities": False, "has_opponents": True,
                     "outcome": lambda a, o, r: 0, "win_definition": "never"}, "record.opponent_train_budget"),
    ("TinyGridEnv", {"name": "tiny_grid", "sender_side_priorities": False, "win_definition": "never"},
     "record.has_opponents: expected True"),
    ("TinyGridEnv", {"name": "tiny_grid", "sender_side_priorities": False, "batched": "tiny.VecGrid"},
     "record.batched: expected 'package.module:Class'"),
])
def test_an_incomplete_record_is_refused_at_registration(scratch_registry: dict[str, Any], class_name: str,
                                                         facts: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvRegistrationError, match=message):
        R.register(_adapter(class_name, **facts))
    assert scratch_registry == {}


def test_an_adapter_without_its_library_arguments_is_refused(scratch_registry: dict[str, Any]) -> None:
    cls = type("TinyGridEnv", (), {"record": EnvRecord(name="tiny_grid", sender_side_priorities=False),
                                   "reset": _Base.reset, "step": _Base.step, "close": _Base.close})
    with pytest.raises(EnvRegistrationError, match="without constructor_kwargs"):
        R.register(cls)


def test_an_adapter_without_its_alive_mask_is_refused(scratch_registry: dict[str, Any]) -> None:
    """``alive_N`` is how callers learn which learners start an episode: a class without it is refused."""
    members = {k: v for k, v in vars(_Base).items() if k != "alive_N" and not k.startswith("__")}
    cls = type("TinyGridEnv", (), {**members, "record": EnvRecord(name="tiny_grid", sender_side_priorities=False)})
    with pytest.raises(EnvRegistrationError, match="property alive_N.*without alive_N"):
        R.register(cls)
    assert scratch_registry == {}


def test_unknown_names_fail_with_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=re.escape(f"env.name: expected one of {', '.join(C.ENV_NAMES)} or "
                                                   f"{C.PETTINGZOO_SPELLING}, got 'chess'")):
        env_record("chess")
    assert not R.sender_side_priorities("chess") and not R.sender_side_priorities(None)


def test_a_subclass_with_its_own_record_names_its_spec_by_it() -> None:
    """An env built on PursuitEnv under its own record is not mistaken for pursuit: the spec's name (which every
    lookup by name uses) is the record's, not the parent's."""
    from dataclasses import replace

    from suPER.envs.pursuit import PursuitEnv

    class TinyPursuitEnv(PursuitEnv):
        record = replace(PursuitEnv.record, name="tiny_pursuit")

    env = TinyPursuitEnv({"x_size": 8, "y_size": 8, "n_evaders": 3, "n_pursuers": 2}, horizon=10)
    try:
        assert env.spec.name == "tiny_pursuit"
    finally:
        env.close()
    parent = PursuitEnv({"x_size": 8, "y_size": 8, "n_evaders": 3, "n_pursuers": 2}, horizon=10)
    try:
        assert parent.spec.name == "pursuit"
    finally:
        parent.close()


def test_a_subclass_without_its_own_record_is_refused_not_run_as_its_parent(scratch_registry: dict[str, Any]) -> None:
    """A subclass that forgot its record would run as pursuit (spec.name 'pursuit', pursuit's facts in every
    lookup by name): building or registering it is refused; with its own record it is found under its own name."""
    from suPER.envs.pursuit import PursuitEnv

    small = {"x_size": 8, "y_size": 8, "n_evaders": 3, "n_pursuers": 2}

    class QuietPursuitEnv(PursuitEnv):
        pass

    with pytest.raises(EnvRegistrationError, match="of its own \\(it would inherit 'pursuit''s\\)"):
        QuietPursuitEnv(small, horizon=10)
    with pytest.raises(EnvRegistrationError, match="of its own"):
        R.register(QuietPursuitEnv)

    class TinyGridEnv(PursuitEnv):
        record = replace(PursuitEnv.record, name="tiny_grid", batched=None)

    R.register(TinyGridEnv)
    env = TinyGridEnv(small, horizon=10)
    try:
        assert env.spec.name == "tiny_grid" and env_record(env.spec.name) is TinyGridEnv.record
        assert env_record(env.spec.name) is not PursuitEnv.record
    finally:
        env.close()
