"""``suPER.costs``: rates from finished runs' manifests, the order they are looked up in, and what runs still need
at those rates (``reproduce``'s plan, ``train``'s plan line and ``grid list``'s time to go use them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suPER import costs
from suPER.resolve import resolve

CAMPAIGN = {"run.num_timesteps": 100_000, "run.eval_points": 40, "run.eval_episodes": 10}
"""a Figure 1 campaign run: 41 evaluations x 10 episodes (battle adds 100 final games)"""


def record(folder: Path, env: str, wall_s: float, eval_s: float, protocol: str = "ours", algo: str = "ddqn",
           **manifest: object) -> Path:
    """A finished run folder of ``env`` whose manifest says ``wall_s`` in all and ``eval_s`` evaluating."""
    cfg = resolve(env, algo, overrides={**CAMPAIGN, "run.protocol": protocol})
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    (folder / "manifest.json").write_text(json.dumps({
        "status": "finished", "env_steps": 100_000, "wall_time_s": wall_s, "timings_s": {"eval": eval_s, "learn": 1.0},
        "cpu": "Test CPU", "cpu_capability": "AVX2", "backend": "native", **manifest}))
    return folder


def test_a_finished_run_gives_its_training_and_evaluation_rates(tmp_path: Path) -> None:
    """Training: time outside evaluation per env step; evaluation: per episode, step 0's evaluation and battle's 100
    final games included (410 + 100 episodes)."""
    cost = costs.run_cost(record(tmp_path / "b", "battle", wall_s=3000.0, eval_s=510.0))
    assert cost is not None and (cost.env, cost.protocol, cost.cpu) == ("battle", "ours", "Test CPU (AVX2)")
    assert cost.train_s_per_step == pytest.approx(2490.0 / 100_000)
    assert cost.eval_s_per_episode == pytest.approx(1.0)
    assert cost.wall_h == pytest.approx(3000 / 3600)
    pursuit = costs.run_cost(record(tmp_path / "p", "pursuit", wall_s=1000.0, eval_s=41.0, protocol="paper"))
    assert pursuit is not None and pursuit.protocol == "paper" and pursuit.eval_s_per_episode == pytest.approx(0.1)


@pytest.mark.parametrize("manifest,algo", [({"status": "running"}, "ddqn"), ({"backend": "rllib"}, "ddqn"),
                                           ({}, "qmix")])
def test_only_finished_native_dqn_runs_are_measured(tmp_path: Path, manifest: dict, algo: str) -> None:
    """An unfinished run has no whole-run times; RLlib and the other algorithms run at other rates, so they are never
    priced by these."""
    assert costs.run_cost(record(tmp_path / "r", "pursuit", 100.0, 10.0, algo=algo, **manifest)) is None


def test_a_resumed_run_counts_and_names_every_machine_it_ran_on(tmp_path: Path) -> None:
    """A resumed run's manifest keeps its times from its last checkpoint on (suPER.loop restores them), so it is
    measured like any other; its CPU is each segment's, "mixed" when they differ."""
    same = {"cpu": "Test CPU", "cpu_capability": "AVX2", "time": "t", "after_status": "running"}
    cost = costs.run_cost(record(tmp_path / "a", "pursuit", 1000.0, 41.0, resumed=[same]))
    assert cost is not None and cost.cpu == "Test CPU (AVX2)" and cost.eval_s_per_episode == pytest.approx(0.1)
    other = {**same, "cpu": "Other CPU", "cpu_capability": "AVX512"}
    cost = costs.run_cost(record(tmp_path / "b", "pursuit", 1000.0, 41.0, resumed=[same, other]))
    assert cost is not None and cost.cpu == "mixed: Test CPU (AVX2); Other CPU (AVX512)"


def test_rates_come_from_the_folders_in_order_then_the_env_under_the_other_protocol(tmp_path: Path) -> None:
    """A campaign's own finished runs price its runs before the committed records, under the other protocol too (the
    machine sets a step's cost more than the protocol does), and say so; within one table the run's own protocol
    comes first; an env no table has comes from the records; an env no run measured gets no estimate."""
    for seed, wall in enumerate([1000.0, 2000.0, 9000.0]):  # median: 2000 s
        record(tmp_path / "own" / f"p{seed}", "pursuit", wall, 41.0)
    pricing = costs.Pricing.of(tmp_path / "own")
    own = pricing.rates("pursuit", "ours")
    assert own is not None and own.train_s_per_step == pytest.approx(1959.0 / 100_000)
    assert own.source == f"median of 3 finished runs in {tmp_path / 'own'} (Test CPU (AVX2))"
    committed = costs.measured_rates(costs.RECORDS)
    assert len(pricing.tables) == 2 and pricing.tables[1] == committed  # the committed records come last
    assert ("pursuit", "paper") in committed  # the records have the exact pair: the campaign's own runs still win
    borrowed = pricing.rates("pursuit", "paper")
    assert borrowed is not None and borrowed.train_s_per_step == own.train_s_per_step
    assert borrowed.source == f"{own.source}, ours protocol"
    assert pricing.rates("battle", "paper") == committed[("battle", "paper")]  # nothing of battle here: the records
    exact = costs.Rates(0.5, 2.0, "the paper's runs")
    both = {**pricing.tables[0], ("pursuit", "paper"): exact}
    assert costs.Pricing([both, committed]).rates("pursuit", "paper") == exact
    assert costs.Pricing([{}]).rates("battle", "paper") is None


def test_what_a_run_still_needs_at_given_rates() -> None:
    """Half of a 100k-step battle campaign run left: 50k training steps, half of its 410 evaluation episodes and all
    100 final games; a finished run nothing; a run without rates no number."""
    rates = costs.Rates(0.02, 1.5, "test")
    pricing = costs.Pricing([{("battle", "paper"): rates}])
    cfg = resolve("battle", overrides={**CAMPAIGN, "run.protocol": "paper"})
    assert cfg.run.final_games == 100
    assert pricing.price(cfg) == rates
    assert costs.seconds_left(cfg, rates, 50_000) == pytest.approx(50_000 * 0.02 + (205 + 100) * 1.5)
    assert costs.seconds_left(cfg, rates, 100_000) == 0.0
    assert pricing.price(resolve("battle", "qmix", overrides=CAMPAIGN)) is None
    go = costs.to_go([(cfg, 50_000), (cfg, 0), (resolve("pursuit", overrides=CAMPAIGN), 0),
                      (resolve("battle", "qmix", overrides=CAMPAIGN), 0)], pricing, running=1)
    assert (go.runs, go.running, go.env_steps) == (4, 1, 350_000)
    assert go.unpriced == ["pursuit (no finished run of it to measure a rate from)",
                           "qmix (only DQN-family runs are measured)"]
    assert go.seconds == pytest.approx(50_000 * 0.02 + 305 * 1.5 + 100_000 * 0.02 + 510 * 1.5)  # 4222.5 s
    lines = go.describe(parallel=2)
    assert lines[0] == "to go: 4 runs (1 running), 350,000 env steps, ~1.2 h of runs, ~35 min 2 at a time " \
                       "(training, evaluations, checkpoints)"
    assert lines[1] == "rates: battle (paper): test"
    assert lines[2] == "no estimate for 2 runs: pursuit (no finished run of it to measure a rate from), qmix (only " \
                       "DQN-family runs are measured)"


def test_full_budget_is_the_papers_run_at_the_rates() -> None:
    """The paper's battle run: 300k env steps, 200 evaluations x 20 episodes plus step 0's, and 100 final games."""
    assert costs.full_budget_h("battle", costs.Rates(0.02, 1.0, "")) == \
        pytest.approx((300_000 * 0.02 + (201 * 20 + 100) * 1.0) / 3600)
