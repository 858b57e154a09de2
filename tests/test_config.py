"""Typed config: YAML values, dotted overrides, validation messages, JSON round trip."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from suPER import config as C
from suPER.flags import named_settings
from suPER.resolve import from_dict, resolve, without_volatile


def test_yaml_values_land_in_dataclasses(env_name: str) -> None:
    """Every env by name (``tests/conftest.py``)."""
    env = env_name
    data = yaml.safe_load(C.env_yaml_path(env).read_text())
    cfg = resolve(env)
    assert set(data.pop("profiles")) == {"quick"}  # named override sets, not config sections
    for section, values in data.items():
        for key, value in values.items():
            assert getattr(getattr(cfg, section), key) == value, f"{section}.{key}"


def test_paper_hyperparameters() -> None:
    p, b = resolve("pursuit"), resolve("battle")
    assert (p.dqn.lr, p.dqn.buffer_size, p.dqn.rollout_fragment_length, p.dqn.target_update_freq) == (1.6e-4, 120000, 4, 1000)
    assert (b.dqn.lr, b.dqn.buffer_size, b.dqn.rollout_fragment_length, b.dqn.target_update_freq) == (1e-4, 90000, 5, 1200)
    assert p.eval_interval == 4000 and b.eval_interval == 1500
    assert p.env.horizon == b.env.horizon == 500


def test_algo_presets() -> None:
    assert (resolve("pursuit", "dqn").dqn.double_q, resolve("pursuit", "dqn").dqn.dueling) == (False, False)
    assert (resolve("pursuit", "ddqn").dqn.double_q, resolve("pursuit", "ddqn").dqn.dueling) == (True, True)


def test_dotted_overrides_and_types() -> None:
    cfg = resolve("pursuit", overrides={"dqn.lr": 1e-3, "env.kwargs.n_evaders": 5, "dqn.dueling": "false"})
    assert cfg.dqn.lr == 1e-3 and cfg.env.kwargs["n_evaders"] == 5 and cfg.dqn.dueling is False
    with pytest.raises(C.ConfigError, match="unknown key 'dqn.learning_rate'"):
        resolve("pursuit", overrides={"dqn.learning_rate": 1})
    with pytest.raises(C.ConfigError, match="dqn.batch_size: expected an integer"):
        resolve("pursuit", overrides={"dqn.batch_size": "many"})
    with pytest.raises(C.ConfigError, match="unknown section 'foo'"):
        resolve("pursuit", overrides={"foo.bar": 1})


@pytest.mark.parametrize(("key", "value"), [
    ("relay.bandwidth", 1.5), ("relay.bandwidth", -0.1), ("relay.window", 0), ("relay.mode", "median"),
    ("run.num_timesteps", -5), ("dqn.gamma", 1.5),
])
def test_validation_names_the_key_or_the_flag_as_typed(key: str, value: object) -> None:
    with pytest.raises(C.ConfigError, match=f"^(--set )?{key}: expected"):
        resolve("pursuit", overrides={key: value})
    with pytest.raises(C.ConfigError, match="^--suPER_something: expected"):
        resolve("pursuit", overrides={key: value}, labels={key: "--suPER_something"})


NUMERIC = [(s.name, f.name) for s in fields(C.ExperimentConfig) for f in fields(s.type if isinstance(s.type, type)
           else getattr(C, str(s.type))) if f.type in ("int", "float", "list[int]", int, float)]


def test_every_numeric_field_has_a_range() -> None:
    assert len(NUMERIC) > 50
    missing = [f"{s}.{n}" for s, n in NUMERIC if f"{s}.{n}" not in C.RANGES]
    assert not missing, missing
    assert set(C.RANGES) == {f"{s}.{n}" for s, n in NUMERIC}  # and no stale entries


OUTSIDE = {C.POS: (0, 1e-3), C.NONNEG: (-1e-3, 0), C.UNIT: (1.001, 1.0), C.UNIT_OPEN: (0, 1.0), C.INT1: (0, 1),
           C.INT0: (-1, 0), "list int >= 1": ([0], [1])}
"""range -> (a value just outside it, the boundary value inside it)"""


@pytest.mark.parametrize("key", sorted(C.RANGES))
def test_each_range_refuses_just_outside_and_takes_the_boundary(key: str) -> None:
    section = key.split(".")[0]  # resolve with an algorithm that reads the section (env and run: any)
    algo = next((a for a, spec in C.ALGORITHMS.items() if section in spec.sections), "ddqn")
    bad, edge = OUTSIDE[C.RANGES[key]]
    with pytest.raises(C.ConfigError, match=f"^{key}: expected"):
        resolve("pursuit", algo, overrides={key: bad})
    if key != "run.eval_points":
        assert getattr(getattr(resolve("pursuit", algo, overrides={key: edge}), key.split(".")[0]),
                       key.split(".")[1]) == edge
    if C.RANGES[key] in (C.POS, C.NONNEG, C.UNIT, C.UNIT_OPEN):
        for value in (float("inf"), float("nan")):
            with pytest.raises(C.ConfigError, match=f"^{key}: expected"):
                resolve("pursuit", algo, overrides={key: value})


def test_seed_sums_stay_in_numpy_range() -> None:
    with pytest.raises(C.ConfigError, match="^env.seed_offset: expected an integer >= 0"):
        resolve("pursuit", overrides={"run.seed": 5, "env.seed_offset": -1000})
    with pytest.raises(C.ConfigError, match="^run.seed: expected"):
        resolve("pursuit", overrides={"run.seed": 2**32})
    with pytest.raises(C.ConfigError, match="^env.eval_seed_offset: expected"):
        resolve("pursuit", overrides={"run.seed": C.SEED_LIMIT - 200, "env.eval_seed_offset": 10_000})
    assert resolve("pursuit", overrides={"run.seed": C.SEED_LIMIT - 101, "env.eval_seed_offset": 0}).run.seed


@pytest.mark.parametrize("name", ["a/b", "..", "../x", "a\\b", "x..y"])
@pytest.mark.parametrize("key", ["run.tag", "run.name"])
def test_names_that_are_paths_are_refused(key: str, name: str) -> None:
    with pytest.raises(C.ConfigError, match=f"^{key}: expected a folder name"):
        resolve("pursuit", overrides={key: name})


@pytest.mark.parametrize(("total", "interval"), [(1000, 500), (99_999, 500), (100_000, 500), (800_000, 4000)])
def test_default_eval_interval_is_at_least_one_episode(total: int, interval: int) -> None:
    cfg = resolve("pursuit", overrides={"run.num_timesteps": total})
    assert cfg.eval_interval == interval == max(cfg.env.horizon, total // 200)
    assert resolve("pursuit", overrides={"run.num_timesteps": total, "run.eval_interval": 5}).eval_interval == 5


def test_eval_cost_note_only_when_evaluation_outweighs_training() -> None:
    cheap = resolve("pursuit", overrides={"run.num_timesteps": 1000, "run.eval_episodes": 0})
    assert cheap.eval_cost_note() is None
    dear = resolve("pursuit", overrides={"run.num_timesteps": 1000})  # 3 evaluations x 20 x 500 steps
    assert dear.eval_cost_note() is not None and "up to 30000 evaluation env steps" in dear.eval_cost_note()


def test_set_booleans_take_one_and_zero() -> None:
    assert resolve("pursuit", overrides={"dqn.dueling": 0}).dqn.dueling is False
    assert resolve("pursuit", overrides={"dqn.dueling": 1}).dqn.dueling is True
    with pytest.raises(C.ConfigError, match="expected true or false"):
        resolve("pursuit", overrides={"dqn.dueling": 2})


def test_unknown_env() -> None:
    with pytest.raises(C.ConfigError, match="--env: expected one of pursuit, battle, adversarial_pursuit"):
        resolve("chess")


def test_json_round_trip() -> None:
    cfg = resolve("battle", "dqn", overrides={"relay.enabled": True, "relay.mode": "stochastic", "run.seed": 7})
    back = from_dict(cfg.to_dict())
    assert back.to_dict() == cfg.to_dict()  # the sections this algorithm uses (others are not recorded)
    assert set(cfg.to_dict()) == {"env", "dqn", "relay", "run"}
    seac = resolve("pursuit", "seac", overrides={"seac.lr": 1e-3})
    assert set(seac.to_dict()) == {"env", "seac", "run"} and from_dict(seac.to_dict()).seac.lr == 1e-3


def test_epsilon_schedule() -> None:
    d = resolve("pursuit").dqn
    assert d.epsilon(0) == pytest.approx(0.1)
    assert d.epsilon(50_000) == pytest.approx(0.0505)
    assert d.epsilon(10**7) == pytest.approx(0.001)
    m = resolve("pursuit", "maddpg").maddpg  # MADDPG: the original's EpsilonGreedy 0.1 -> 0.001 / 100k
    assert (m.epsilon(0), m.epsilon(50_000), m.epsilon(10**7)) == pytest.approx((0.1, 0.0505, 0.001))
    cfg = resolve("pursuit", "maddpg", overrides={"maddpg.epsilon_initial": 1.0, "maddpg.epsilon_timesteps": 10})
    assert from_dict(cfg.to_dict()).maddpg.epsilon(5) == pytest.approx(0.5005)  # recorded in config.json
    for key, value in (("maddpg.epsilon_initial", 1.5), ("maddpg.epsilon_final", -0.1),
                       ("maddpg.epsilon_timesteps", 0)):
        with pytest.raises(C.ConfigError, match=key):
            resolve("pursuit", "maddpg", overrides={key: value})


def test_run_name() -> None:
    cfg = resolve("pursuit", overrides={"relay.enabled": True, "run.tag": "bw005", "run.seed": 3})
    assert cfg.run_name == "pursuit__ddqn_super_quantile__s3__bw005"


def test_named_flags_reach_the_baselines_own_settings() -> None:
    assert resolve("pursuit", "seac", named={"dqn.lr": 1e-3, "dqn.model": "conv"}).seac.lr == 1e-3
    m = resolve("pursuit", "maddpg", named={"dqn.lr": 1e-3, "dqn.buffer_size": 5000,
                                            "dqn.parameter_sharing": False}).maddpg
    assert (m.actor_lr, m.critic_lr, m.buffer_size) == (1e-3, 1e-3, 5000)
    assert resolve("pursuit", "qmix", named={"dqn.lr": 2e-4}).qmix.lr == 2e-4
    with pytest.raises(C.ConfigError, match="^--buffer-size: not used by --algo qmix"):  # as the flag names it
        resolve("pursuit", "qmix", **dict(zip(("named", "labels"), named_settings("pursuit", {"buffer_size": 5000},
                                                                                  lambda n: "--" + n.replace("_", "-")))))
    with pytest.raises(C.ConfigError, match="^dqn.parameter_sharing: not used by --algo seac"):  # no label: the key
        resolve("pursuit", "seac", named={"dqn.parameter_sharing": True})
    with pytest.raises(C.ConfigError, match="^relay.enabled: expected only with --algo dqn or ddqn"):
        resolve("pursuit", "seac", named={"relay.enabled": True, "relay.mode": "quantile"})


def test_a_config_written_before_a_new_field_still_matches_for_resume() -> None:
    """config.json of a run started before ``env.swap_teams`` / ``dqn.init_from`` existed: the new fields
    count at their defaults, so the run resumes; a changed value or an unknown key still differs."""
    cfg = resolve("battle", "ddqn")
    old = cfg.to_dict()
    del old["env"]["swap_teams"], old["dqn"]["init_from"]
    assert without_volatile(old) == without_volatile(cfg.to_dict())
    changed = cfg.to_dict()
    changed["dqn"]["lr"] = 1.0
    assert without_volatile(changed) != without_volatile(cfg.to_dict())
    unknown = cfg.to_dict()
    unknown["dqn"]["removed_field"] = 3
    assert without_volatile(unknown) != without_volatile(cfg.to_dict())


def test_numbers_parse_as_users_write_them(tmp_path: Path) -> None:
    """``--set dqn.lr=3e-4`` (the README's own example) and ``lr: 3e-4`` in a grid file are numbers, although YAML
    1.1 (PyYAML) reads exponents without a dot as strings; ints, dotted floats and words are unchanged."""
    from suPER.campaigns.grid import load_grid

    assert C.parse_value("3e-4") == pytest.approx(3e-4) and C.parse_value("1E5") == 1e5
    assert C.parse_value("7") == 7 and isinstance(C.parse_value("7"), int) and C.parse_value("1e") == "1e"
    cfg = resolve("pursuit", overrides={"dqn.lr": C.parse_value("3e-4")})
    assert cfg.dqn.lr == pytest.approx(3e-4)
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nseeds: 1\nruns:\n  - {name: a, env: pursuit, algo: ddqn, lr: 3e-4, set: {dqn.gamma: 9.5e-1}}\n")
    (run,) = load_grid(grid).runs
    assert run.config().dqn.lr == pytest.approx(3e-4) and run.config().dqn.gamma == pytest.approx(0.95)


def test_the_population_config_goes_through_the_same_range_check() -> None:
    """PopulationConfig declares a range for every numeric field, and ``config.check_ranges`` (the check of every
    experiment section) refuses just outside it, naming the population command's flag."""
    from dataclasses import replace

    from suPER.population.config import PopulationConfig

    numeric = {f.name for f in fields(PopulationConfig) if f.type in ("int", "float", int, float)}
    assert numeric and set(PopulationConfig.ranges) == numeric
    base = PopulationConfig(env="battle", iterations=1, br_steps=10, eval_episodes=1)
    for name, spec in PopulationConfig.ranges.items():
        bad, edge = OUTSIDE[spec]
        with pytest.raises(C.ConfigError, match=f"^--{name.replace('_', '-')}: expected"):
            C.check_ranges(replace(base, **{name: bad}), PopulationConfig.ranges,
                           lambda n: "--" + n.replace("_", "-"))
        C.check_ranges(replace(base, **{name: edge}), PopulationConfig.ranges)
