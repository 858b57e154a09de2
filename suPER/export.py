"""Run folders in the JSON layout of instadeepai/marl-eval (what BenchMARL / Mava tooling loads).

Layout (checked against ``id-marl-eval`` 0.0.4: ``marl_eval/json_tools/json_logger.py`` writes it and
``marl_eval/utils/data_processing_utils.py::data_process_pipeline`` reads it)::

    {env_name: {task_name: {algorithm_name: {"seed_<seed>": {
        "step_<i>": {"step_count": <env steps>, "elapsed_time": <s>, "<metric>": [values]},   # i = 0, 1, ...
        "absolute_metrics": {"<metric>": [values]}}}}}}

Here ``env_name`` is ``pettingzoo`` (all three envs are PettingZoo games), ``task_name`` our env
(pursuit, battle, adversarial_pursuit), so marl-eval's aggregation over tasks is our aggregation over
envs; ``algorithm_name`` is the configuration label of the figures (``ddqn_super_quantile``, ...). Each
step holds the evaluation at that env step: ``return`` = [the team return averaged over its greedy
evaluation episodes] (metrics.csv keeps only the mean, so the list has one value) and ``elapsed_time`` the
run's wall time. ``absolute_metrics.return`` = [the run's final score: the mean of its last 10% of
evaluations], the number our tables use (marl-eval's own convention is a re-evaluation of the best
policy, which our runs do not make). marl-eval lower-cases keys and needs the same number of steps in
every run of a task: export finished campaigns (runs cut short have fewer steps).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suPER import plotting
from suPER.config import ConfigError
from suPER.plotting import RunCurve
from suPER.runs import atomic_write_text, read_metrics

ENV_NAME = "pettingzoo"
"""marl-eval ``env_name`` of every run (the task is our env)."""

METRIC = "return"
"""marl-eval metric name of the team return (``mean_episode_return`` style: higher is better)."""


def marl_eval_data(curves: Sequence[RunCurve], last_fraction: float = 0.1) -> dict[str, Any]:
    """The marl-eval JSON of ``curves`` (see the module docstring).

    Raises:
        ConfigError: a configuration label holds a comma (marl-eval rejects them).
    """
    data: dict[str, Any] = {}
    for c in curves:
        if "," in c.label:
            raise ConfigError(f"--marl-eval: configuration {c.label!r} holds a comma, which marl-eval rejects")
        wall = _wall_times(c)
        run: dict[str, Any] = {f"step_{i}": {"step_count": int(s), "elapsed_time": float(w), METRIC: [float(v)]}
                               for i, (s, v, w) in enumerate(zip(c.steps, c.values, wall))}
        run["absolute_metrics"] = {METRIC: [float(plotting.final_scores([c], last_fraction)[0])]}
        data.setdefault(ENV_NAME, {}).setdefault(c.env, {}).setdefault(c.label, {})[f"seed_{c.seed}"] = run
    return data


def _wall_times(c: RunCurve) -> list[float]:
    """Wall time of each evaluation row of a run folder (NaN-free rows of metrics.csv); 0 when unknown."""
    metrics = Path(c.source) / "metrics.csv"
    if metrics.is_file():
        cols = read_metrics(metrics)
        if "wall_time_s" in cols:
            by_step = dict(zip(cols["env_steps"].tolist(), cols["wall_time_s"].tolist()))
            return [float(by_step.get(s, 0.0)) for s in c.steps.tolist()]
    return [0.0] * len(c.steps)


def uneven_seeds(data: dict[str, Any]) -> list[str]:
    """Why marl-eval would not load ``data`` whole: its loaders keep only the seeds every (task, algorithm) has, so
    unequal seed counts drop runs silently. ``task/algorithm N`` for each (task, algorithm) when the counts differ."""
    counts = {(task, algo): len(seeds) for tasks in data.values() for task, algos in tasks.items()
              for algo, seeds in algos.items()}
    if len(set(counts.values())) <= 1:
        return []
    return [f"{task}/{algo} {n}" for (task, algo), n in counts.items()]


def write_marl_eval(curves: Sequence[RunCurve], path: Path, last_fraction: float = 0.1,
                    warn: Callable[[str], None] | None = None) -> Path:
    """Write :func:`marl_eval_data` to ``path`` (atomically), keys in the order marl-eval reads them (``step_0,
    step_1, ..., step_10``: its time-series functions take the steps in file order), and say through ``warn`` when
    the export will not load whole (``uneven_seeds``). Returns ``path``."""
    data = marl_eval_data(curves, last_fraction)
    uneven = uneven_seeds(data)
    if uneven and warn is not None:
        warn(f"warning: marl-eval keeps only the seeds every task and algorithm has, so it will drop runs of "
             f"{Path(path).name}; seeds: {', '.join(uneven)} (select equal sets with --config)")
    atomic_write_text(Path(path), json.dumps(data, indent=2) + "\n")
    return Path(path)
