"""What a population run does (``PopulationConfig``, stored as ``population.json``) and the names it uses.

Light on purpose (no torch): ``super-marl population --help`` takes its option defaults and help texts from these
fields, so each default is written once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from suPER import config as C
from suPER.population.solvers import META_SOLVERS
from suPER.resolve import resolve

METHODS: dict[str, str] = {"psro": "nash", "fsp": "uniform", "selfplay": "last"}
"""command -> its default meta-solver"""
SIDES = ("team", "opponent")
RANDOM = "random"
"""the first policy of each side: a uniformly random team"""
SHIPPED = "shipped"
"""the references of ``--vs-shipped``: the env's shipped opponent team (``--opponent pretrained``) as a column
(against every team-side policy) and, where it fits the team side (battle: same agents, obs and actions), the
same weights playing the team's side as a row (against every opponent-side policy); both outside the meta-game"""
WARM_STARTS = ("scratch", "best")
VOLATILE = ("threads", "match_workers", "br_workers", "iterations")
"""settings a resumed run may change: speed only, and the number of iterations (a finished run can be extended;
finished iterations are kept either way)"""
MATCH_SEED_OFFSET = 20_000
"""payoff matches are seeded run seed + this (the same episodes for every pair)"""


@dataclass
class PopulationConfig:
    """What a population run does (stored as ``population.json``; a resume must match it)."""

    ranges: ClassVar[dict[str, str]] = {"iterations": C.INT1, "br_steps": C.INT1, "eval_episodes": C.INT1,
                                        "seed": C.INT0, "threads": C.INT1, "match_workers": C.INT0,
                                        "br_workers": C.INT0}
    """field -> allowed range (``config.RANGES`` vocabulary), checked by ``config.check_ranges`` as every config is"""

    env: str
    """battle | adversarial_pursuit"""
    method: str = "psro"
    """psro | fsp | selfplay (names the run and picks the default meta-solver)"""
    meta_solver: str = ""
    """a meta-solver (``solvers.META_SOLVERS``: nash, uniform, last, prd, ...); empty = the method's (``METHODS``)"""
    iterations: int = 4
    """best-response iterations"""
    br_steps: int = 20_000
    """env steps of every best response"""
    eval_episodes: int = 20
    """episodes per payoff-table entry"""
    seed: int = 1
    """run seed (best response k of side s: seed + 1000 k + s)"""
    sides: tuple[str, ...] = SIDES
    """sides that train best responses (team, opponent or both); the others keep their random team"""
    warm_start: str = "scratch"
    """scratch: every best response starts from fresh networks; best: from its side's policy with the
    largest weight in that side's previous meta-strategy (scratch while that is the random team)"""
    relay: bool = True
    """SUPER relay within each best-response team"""
    threads: int = 1
    """torch threads"""
    vs_shipped: bool = False
    """also play every team-side policy against the shipped opponent (``experiments/opponents/<env>``), a
    reference column outside the meta-game (``ratings.csv``: win_vs_shipped), and, where that team fits the team
    side (battle), every opponent-side policy against the same weights playing the team's side (a reference row)"""
    match_workers: int = 0
    """payoff entries as parallel Ray tasks on this many CPUs; 0 = one after the other in this process"""
    br_workers: int = 0
    """an iteration's best responses (one per training side) as parallel Ray tasks, this many at a time
    (``--threads`` CPUs each); 0 = one after the other in this process"""
    overrides: dict[str, Any] = field(default_factory=dict)
    """dotted overrides of the best-response trainer config (``--set dqn.lr=...``)"""

    @property
    def solver(self) -> str:
        """The meta-solver used."""
        return self.meta_solver or METHODS[self.method]

    def validate(self) -> PopulationConfig:
        """Check every field; raise ConfigError naming the flag."""
        from suPER.envs import opponent_env_names

        if self.env not in opponent_env_names():
            raise C.ConfigError(f"--env: expected one of {', '.join(opponent_env_names())}, got {self.env!r}")
        if self.method not in METHODS:
            raise C.ConfigError(f"method: expected one of {', '.join(METHODS)}, got {self.method!r}")
        if self.solver not in META_SOLVERS:
            raise C.ConfigError(f"--meta-solver: expected one of {', '.join(META_SOLVERS)}, got {self.meta_solver!r}")
        C.check_ranges(self, self.ranges, lambda name: "--" + name.replace("_", "-"))
        if self.warm_start not in WARM_STARTS:
            raise C.ConfigError(f"--warm-start: expected one of {', '.join(WARM_STARTS)}, got {self.warm_start!r}")
        if not self.sides or any(s not in SIDES for s in self.sides):
            raise C.ConfigError(f"--sides: expected team, opponent or both, got {','.join(self.sides)!r}")
        last = self.seed + 1000 * self.iterations + len(SIDES)  # the largest best-response seed (br_config)
        if self.seed < 0 or last + C.ExperimentConfig().env.seed_offset >= C.SEED_LIMIT:
            raise C.ConfigError(f"--seed: expected an integer >= 0 with seed + 1000 x --iterations below "
                                f"{C.SEED_LIMIT - 1000}, got {self.seed}")
        for it in sorted({1, self.iterations}):  # the trainer config resolves (bad --set fails here), first and last
            self.br_config(it, self.sides[-1], Path("."), Path("."))
        if any(k.startswith("env.kwargs.") for k in self.overrides):  # the env's own constructor, as train probes it
            from dataclasses import replace

            from suPER.envs.check import probe_env

            env_cfg = resolve(self.env, "ddqn", overrides=self.overrides).env
            probe_env(replace(env_cfg, opponent="random"), {k: f"--set {k}" for k in self.overrides})
        if self.vs_shipped:
            from suPER.opponents import check_opponent

            env_cfg = resolve(self.env, "ddqn", overrides=self.overrides, named={"env.opponent": "pretrained"}).env
            try:
                check_opponent(env_cfg)
            except C.ConfigError as exc:
                raise C.ConfigError(f"--vs-shipped: the shipped opponent does not fit this env ({exc})") from exc
        return self

    def br_config(self, iteration: int, side: str, mixture: Path, out: Path, init_from: str = "") -> C.ExperimentConfig:
        """The trainer config of best response ``iteration`` of ``side`` against the mixture file ``mixture``
        (starting from the team file ``init_from``, if given).

        Evaluation episodes are 0 (the payoff table is the evaluation); a checkpoint (without the replay
        buffers) every fifth of the budget lets a killed best response continue.
        """
        named = {"env.opponent": str(mixture), "env.swap_teams": side == "opponent", "env.opponent_epsilon": 0.0,
                 "relay.enabled": self.relay, "relay.team": "", "run.seed": self.seed + 1000 * iteration + SIDES.index(side),
                 "run.num_timesteps": self.br_steps, "run.eval_episodes": 0,
                 "run.eval_interval": max(1, self.br_steps // 5), "run.checkpoint_replay": False, "run.out": str(out),
                 "run.tag": f"it{iteration:03d}_{side}", "run.progress": False, "run.threads": self.threads,
                 "run.device": "cpu", "dqn.init_from": init_from}
        return resolve(self.env, "ddqn", overrides=self.overrides, named=named)


def run_folder(out: Path, cfg: PopulationConfig) -> Path:
    """``<out>/<env>__<method>[_<solver>]__s<seed>``."""
    solver = "" if cfg.solver == METHODS[cfg.method] else f"_{cfg.solver}"
    return Path(out) / f"{cfg.env}__{cfg.method}{solver}__s{cfg.seed}"
