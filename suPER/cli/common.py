"""What every command of ``super-marl`` shares: the input error, flag parsing helpers, the env checks and tables."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from suPER import config as C


class UserError(C.ConfigError):
    """Bad input found by the command line itself: printed as one line, exit code 2 (every ``ConfigError`` is)."""


def click_context() -> Any:
    """The running click context (typer >= 0.29 vendors click as ``typer._click``), or None."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer
        from click.globals import get_current_context  # type: ignore[no-redef]
    return get_current_context(silent=True)


def numeric_options(command: Any) -> list[tuple[list[str], Any]]:
    """Every int or float option and argument of ``command`` and its subcommands: (command path, click parameter)."""
    found: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])
        for param in getattr(cmd, "params", []):
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is not None and descriptor.annotation in (int, float):
                found.append((path, param))

    walk(command, [])
    return found


def guard_numbers(command: Any) -> Any:
    """Give every numeric option of every command the same check, by construction: a finite number >= 0.

    Why here and not per command: nan passes every ``<`` / ``>`` comparison a command writes, so each command that
    forgot one ran with it (``--cpus-per-trial nan`` ended in a traceback after starting Ray). No option of this CLI
    takes a negative number (counts, budgets, seeds, rates, fractions, epsilons), so one rule covers all; tighter
    bounds (``>= 1``, ``(0, 1]``) stay with the command or the config's ranges. A new command gets the check
    without a line of its own.

    Returns:
        ``command``, with a callback on each numeric parameter (chained before any callback it had).

    Raises (from the callback, at parse time, before the command runs):
        UserError: ``"<flag as typed>: expected a finite number >= 0, got <value>"`` (``an integer`` for ints).
    """
    import math

    for _, param in numeric_options(command):
        def check(ctx: Any, p: Any, value: Any, then: Any = param.callback) -> Any:
            if value is not None and not (math.isfinite(value) and value >= 0):
                flag = p.opts[0] if p.opts else p.name.upper()
                typed = typed_flags(ctx)
                what = "an integer" if isinstance(value, int) else "a finite number"
                raise UserError(f"{typed.get(flag, flag)}: expected {what} >= 0, got {value}")
            return then(ctx, p, value) if then is not None else value

        param.callback = check
    return command


def positive(flag: str, value: float) -> float:
    """A number above 0 (``guard_numbers`` has already refused negatives, nan and inf at parse time).

    Raises:
        UserError: ``"<flag>: expected a finite number > 0, got 0.0"``.
    """
    if not value > 0:
        raise UserError(f"{flag}: expected a finite number > 0, got {value}")
    return value

def typed_flags(ctx: Any = None) -> dict[str, str]:
    """What ``main`` recorded of the paper spellings the user typed (``--bandwidth -> --suPER_bandwidth``), from
    ``ctx`` or the running click context."""
    ctx = ctx if ctx is not None else click_context()
    obj = ctx.find_root().obj if ctx is not None else None
    return dict(obj.get("typed", {})) if isinstance(obj, dict) else {}


def check_with_env(cfg: C.ExperimentConfig, labels: dict[str, str] | None = None) -> None:
    """The checks that need the env library, run before any folder is written: ``env.kwargs`` against the
    env's constructor (``suPER.envs.check``), the DQN body against its observation shape and ``--team`` against
    the learner ids it builds.

    Why the team: a team that matches no learner, or one, makes a ``..._super_*`` run that never relays.

    Raises:
        ConfigError: naming the flag as typed (``labels``) and, for the team, every learner id available.
    """
    from suPER.core.relay import team_mask
    from suPER.envs.check import describe_ids, probe_env

    labels = labels or {}
    spec = probe_env(cfg.env, labels)
    if C.ALGORITHMS[cfg.run.algo].section == "dqn" and cfg.dqn.model == "conv":
        from suPER.models.qnet import conv_fits

        if not conv_fits(spec.obs_shape):  # the net is built after the run folder: refuse before it
            raise C.ConfigError(f"{labels.get('dqn.model', 'dqn.model')}: expected mlp or auto for {cfg.env.name}'s "
                                f"observations of shape {tuple(spec.obs_shape)}, got conv (it needs (H, W, C) images "
                                f"with H, W > 3)")
    if not spec.opponent_ids and not cfg.env.swap_teams:
        for key in ("env.opponent", "env.opponent_epsilon", "env.eval_opponent_epsilon", "env.opponent_allow_pickle"):
            typed = labels.get(key, "")
            if typed.startswith("-") and "(" not in typed:  # a flag the user typed, not one a protocol set
                from suPER.envs import opponent_env_names

                raise C.ConfigError(f"{typed}: expected no opponent setting for {cfg.env.name}, which has no "
                                    f"opponent team (envs with one: {', '.join(opponent_env_names())})")
    r = cfg.relay
    if r.enabled and r.team and not cfg.dqn.parameter_sharing:
        n = int(team_mask(spec.learner_ids, r.team).sum())
        if n < 2:
            raise C.ConfigError(f"{labels.get('relay.team', 'relay.team')}: expected an id substring or comma list "
                                f"matching at least two learners of {cfg.env.name} "
                                f"({describe_ids(spec.learner_ids)}), got {r.team!r} (matches {n})")


def print_table(title: str, columns: list[str], rows: list[list[str]], notes: tuple[str, ...] | list[str] = ()) -> None:
    """Print a table whose cells a user may copy (env names, agent ids, run folders): never truncated.

    Why: rich's default tables cut long cells to ``adversarial…`` on an 80-column terminal and when
    stdout is a pipe (where it assumes 80 columns). On a terminal every column folds instead; anywhere
    else the rows are plain tab-separated lines (easy to grep and cut).
    """
    if not sys.stdout.isatty():
        print(title)
        for line in ([columns] + rows):
            print("\t".join(line))
        for n in notes:
            print(n)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console()
    console.print(table)
    for n in notes:
        console.print(n, soft_wrap=True)



FilterOpt = Annotated[list[str] | None, typer.Option(
    "--filter", help="select runs: KEY=GLOB with KEY env|algo|name|run|seed|tag|status, or a bare GLOB on the "
    "entry name / run folder; repeat to AND, comma-separate globs to OR")]
SeedsOpt = Annotated[str | None, typer.Option(help="seeds for every entry: a count (5 -> 1..5) or a list 1,2,3")]


