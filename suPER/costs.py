"""What runs cost: rates measured from finished runs, and the time runs still need at those rates.

A finished run gives two rates from its manifest (whose times cover the whole run: a resumed run restores its
times with its last checkpoint, so the work redone after a kill is counted once and the lost part never)::

    training s per env step  = (wall_time_s - timings_s.eval) / env_steps
    evaluation s per episode = timings_s.eval / evaluation_episodes(cfg)
    evaluation_episodes      = (num_timesteps // eval_interval + 1) x eval_episodes + final_games

(training: acting, env, learning, relay, storing and checkpoints, everything outside evaluation; evaluation: the
step-0 evaluation and battle's final varied games included). The rates of an (env, protocol) are the medians over
its runs. A run of ``n`` env steps that has trained ``done`` of them still needs::

    (n - done) x train + ((n - done) / n x evaluations x eval_episodes + final_games) x evaluation   seconds

Two rates rather than one wall time per env step, because a campaign's evaluation density (40 points x 10
episodes) is not the paper's (200 x 20): the same rates estimate both. They are what the runs met on their
machine, load included (``Rates.source`` names the CPU); only native DQN-family runs are measured, so other
algorithms and the RLlib backend get no estimate rather than a wrong one.

Used by ``reproduce`` (the plan it prints), ``train`` (the plan line), ``grid list`` (the time to go) and
``scripts/run_costs.py`` (the cost table of docs/results.md). The committed Figure 1 records (``RECORDS``) are
the rates of last resort; a campaign's own finished runs come first.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from suPER import config as C

RECORDS = C.ROOT / "results" / "fig1"
"""the committed Figure 1 records: two runs at a time on a 2-core machine beside other work (results/fig1/LOG.md)"""


@dataclass(frozen=True)
class RunCost:
    """What one finished run cost (``run_cost``)."""

    env: str
    protocol: str
    cpu: str
    """the CPU model and vector kernels of the machine it ran on, e.g. ``Intel(R) Xeon(R) Processor (AVX512)``;
    ``mixed: A; B`` when its segments (a resumed run) ran on different ones"""
    train_s_per_step: float
    eval_s_per_episode: float
    wall_h: float


@dataclass(frozen=True)
class Rates:
    """The median rates of some runs of one (env, protocol), and where they were measured."""

    train_s_per_step: float
    eval_s_per_episode: float
    source: str
    """e.g. ``median of 5 finished runs in results/fig1 (Intel(R) Xeon(R) Processor (AVX512))``"""


def evaluation_episodes(cfg: C.ExperimentConfig) -> int:
    """Episodes a whole run evaluates: ``(n // eval_interval + 1) x eval_episodes + final_games``."""
    return (cfg.run.num_timesteps // cfg.eval_interval + 1) * cfg.run.eval_episodes + cfg.run.final_games


def measurable(cfg: C.ExperimentConfig) -> bool:
    """Whether the records can price this run: a DQN-family algorithm (what every record trained)."""
    return C.ALGORITHMS[cfg.run.algo].section == "dqn"


def run_cost(folder: Path) -> RunCost | None:
    """The cost of a finished native DQN-family run folder; None for any other folder."""
    from suPER.resolve import from_dict

    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        cfg = from_dict(json.loads((Path(folder) / "config.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if (manifest.get("status") != "finished" or not manifest.get("timings_s")
            or manifest.get("backend", "native") != "native" or not measurable(cfg)):
        return None
    eval_s = float(manifest["timings_s"].get("eval", 0.0))
    segments = [manifest, *manifest.get("resumed", [])]  # the first segment's machine, then each resume's
    cpus = list(dict.fromkeys(f"{m['cpu']} ({m.get('cpu_capability', 'kernels not recorded')})" if m.get("cpu")
                              else "not recorded" for m in segments))
    cpu = cpus[0] if len(cpus) == 1 else "mixed: " + "; ".join(cpus)
    return RunCost(cfg.env.name, cfg.run.protocol, cpu,
                   (float(manifest["wall_time_s"]) - eval_s) / int(manifest["env_steps"]),
                   eval_s / evaluation_episodes(cfg), float(manifest["wall_time_s"]) / 3600)


def grouped_costs(folder: Path, *fields: str) -> tuple[dict[tuple[str, ...], list[RunCost]], int]:
    """The ``run_cost`` of every run folder in ``folder``, grouped by the values of ``fields``; and how many run
    folders were left out (unfinished, another backend or algorithm)."""
    groups: dict[tuple[str, ...], list[RunCost]] = defaultdict(list)
    skipped = 0
    runs = sorted(p for p in Path(folder).iterdir() if (p / "manifest.json").is_file()) if Path(folder).is_dir() else []
    for run in runs:
        cost = run_cost(run)
        if cost is None:
            skipped += 1
        else:
            groups[tuple(getattr(cost, f) for f in fields)].append(cost)
    return groups, skipped


def medians(costs: Sequence[RunCost], where: str = "") -> Rates:
    """The median rates of some runs (``where``: the folder they are in, for the source)."""
    cpus = ", ".join(dict.fromkeys(c.cpu if c.cpu != "not recorded" else "CPU not recorded" for c in costs))
    return Rates(statistics.median(c.train_s_per_step for c in costs),
                 statistics.median(c.eval_s_per_episode for c in costs),
                 f"median of {len(costs)} finished run{'s' * (len(costs) > 1)}{' in ' + where if where else ''} "
                 f"({cpus})")


def measured_rates(folder: Path) -> dict[tuple[str, str], Rates]:
    """(env, protocol) -> the median rates of the finished runs in ``folder`` (empty when it has none)."""
    where = _shown(Path(folder))
    return {(env, protocol): medians(costs, where)
            for (env, protocol), costs in grouped_costs(folder, "env", "protocol")[0].items()}


def _shown(folder: Path) -> str:
    """``folder`` relative to the repository when inside it (results/fig1), else as given."""
    try:
        return str(folder.resolve().relative_to(C.ROOT))
    except ValueError:
        return str(folder)


@dataclass
class Pricing:
    """Rates looked up table by table, in order: a table with the run's (env, protocol) gives them, else one with its
    env under the other protocol, before any later table is read. A protocol changes little of a step's cost and the
    machine much, so a campaign's own runs under the other protocol price its runs better than the committed records
    of another machine (the source says which was used)."""

    tables: list[dict[tuple[str, str], Rates]]

    @classmethod
    def of(cls, *folders: Path | None) -> Pricing:
        """The finished runs of ``folders`` in that order (None skipped), the committed records last."""
        order = [Path(f) for f in folders if f is not None]
        if RECORDS.resolve() not in (p.resolve() for p in order):
            order.append(RECORDS)
        return cls([measured_rates(f) for f in order])

    def rates(self, env: str, protocol: str) -> Rates | None:
        """The rates that price a run of ``env`` under ``protocol``, None where no finished run measured that env."""
        for table in self.tables:
            if (env, protocol) in table:
                return table[(env, protocol)]
            for (e, p), r in table.items():
                if e == env:
                    return Rates(r.train_s_per_step, r.eval_s_per_episode, f"{r.source}, {p} protocol")
        return None

    def price(self, cfg: C.ExperimentConfig) -> Rates | None:
        """The rates of a run of ``cfg`` (``rates`` of its env and protocol); None where it cannot be priced (another
        algorithm, or no finished run of its env)."""
        return self.rates(cfg.env.name, cfg.run.protocol) if measurable(cfg) else None


def seconds_left(cfg: C.ExperimentConfig, rates: Rates, done_steps: int = 0) -> float:
    """Seconds a run of ``cfg`` still needs at ``rates`` after ``done_steps`` env steps (module docstring)."""
    n = cfg.run.num_timesteps
    left = max(n - done_steps, 0)
    if left == 0:
        return 0.0
    episodes = left / n * (evaluation_episodes(cfg) - cfg.run.final_games) + cfg.run.final_games
    return left * rates.train_s_per_step + episodes * rates.eval_s_per_episode


@dataclass
class ToGo:
    """What a set of runs still needs (``to_go``): ``seconds`` of the runs with rates, and why the others have none."""

    runs: int
    running: int
    seconds: float
    env_steps: int
    sources: dict[str, str]
    """``env (protocol)`` -> where its rates come from"""
    unpriced: list[str]
    """why each run without an estimate has none (its time is not in ``seconds``), e.g. ``qmix (only DQN-family runs
    are measured)``"""

    def describe(self, parallel: int) -> list[str]:
        """``grid list``'s lines: runs, env steps, hours of runs and hours ``parallel`` at a time; the rates'
        sources; the envs without a rate."""
        if not self.runs:
            return ["to go: nothing, every run finished"]
        text = f"to go: {self.runs} runs ({self.running} running), {self.env_steps:,} env steps"
        if self.sources:
            text += (f", ~{hours(self.seconds)} of runs, ~{hours(self.seconds / max(1, parallel))} {parallel} at a "
                     f"time (training, evaluations, checkpoints)")
        return [text, *filter(None, [self.rates_line(), self.unpriced_line()])]

    def rates_line(self) -> str:
        """``rates: battle (paper): median of 5 finished runs in results/fig1 (CPU); ...``, empty without rates."""
        return "rates: " + "; ".join(f"{k}: {v}" for k, v in self.sources.items()) if self.sources else ""

    def unpriced_line(self) -> str:
        """How many runs have no estimate (not in the hours) and why, empty when every run has one."""
        if not self.unpriced:
            return ""
        return f"no estimate for {len(self.unpriced)} runs: {', '.join(dict.fromkeys(self.unpriced))}"


def to_go(runs: Iterable[tuple[C.ExperimentConfig, int]], pricing: Pricing, running: int = 0) -> ToGo:
    """Add up runs given as (config, env steps done), ``running`` of them running (the caller leaves finished runs
    out)."""
    out = ToGo(0, running, 0.0, 0, {}, [])
    for cfg, done in runs:
        out.runs += 1
        out.env_steps += max(cfg.run.num_timesteps - done, 0)
        rates = pricing.price(cfg)
        if rates is None:
            out.unpriced.append(f"{cfg.run.algo} (only DQN-family runs are measured)" if not measurable(cfg) else
                                f"{cfg.env.name} (no finished run of it to measure a rate from)")
            continue
        out.seconds += seconds_left(cfg, rates, done)
        out.sources.setdefault(f"{cfg.env.name} ({cfg.run.protocol})", rates.source)
    return out


def local_parallel(cpus_per_trial: float) -> int:
    """Runs Ray Tune keeps side by side on this machine: CPUs / CPUs per run."""
    return max(1, int((os.cpu_count() or 1) // max(cpus_per_trial, 1e-9)))


def hours(seconds: float) -> str:
    """``1.5 h`` / ``12 min`` / ``40 s``."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else \
        f"{seconds:.0f} s"


def full_budget_h(env: str, rates: Rates) -> float:
    """Hours of one run at the paper's budget and evaluation (``resolve(env)``) at ``rates``."""
    from suPER.resolve import resolve

    return seconds_left(resolve(env), rates) / 3600
