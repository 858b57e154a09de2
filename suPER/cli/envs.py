"""``super-marl envs [ENV ...]``: the registered environments, or what the suite sees of the named ones."""

from __future__ import annotations

from typing import Annotated

import typer

from suPER import config as C
from suPER.cli.common import UserError, print_table


def envs(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="ENV", help="describe these envs as training sees them (spelled as --env takes them, e.g. "
                                 "battle or pettingzoo:mpe2.simple_spread_v3:parallel_env); none: list every env")] = None,
) -> None:
    """List the environments with their learners, opponents and spaces; with ENV names, describe those: each
    learner, the observation shape, how observations are stored and how the network reads them, the actions."""
    from suPER.envs import ENVS, env_info

    if names:
        _describe(names)
        return
    rows = []
    for name in ENVS:
        if ENVS[name].record.generic:  # one adapter for many envs, each built by its own name
            rows.append([C.PETTINGZOO_SPELLING, "possible_agents", "-", "its Box", "its Discrete", "agents"])
            continue
        info = env_info(name)
        learners = info["learner_ids"]
        opps = info["opponent_ids"]
        rows.append([name, f"{len(learners)} ({learners[0]}..{learners[-1]})",
                     f"{len(opps)} ({opps[0]}..{opps[-1]})" if opps else "-",
                     str(tuple(info["obs_shape"])), str(info["n_actions"]), info["team"]])
    print_table("environments", ["env", "learners", "opponents", "obs shape", "actions", "team"], rows)


def _describe(names: list[str]) -> None:
    """One row per typed env name, built with its settings file's defaults; a name that is not an env, or a
    PettingZoo env that cannot be used, is one line naming it."""
    from suPER.envs import env_info
    from suPER.envs.record import UnusableEnvError

    rows = []
    for typed in names:
        try:
            info = env_info(C.canonical_env_name(typed))
        except (C.ConfigError, UnusableEnvError) as exc:
            raise UserError(f"ENV: {str(exc).removeprefix('--env: ').removeprefix('env.name: ')}") from None
        scale = info["obs_scale"]
        reads = "x" if scale == 1.0 else f"x / {1 / scale:g}" if (1 / scale).is_integer() else f"x * {scale:g}"
        opps = info["opponent_ids"]
        rows.append([typed, f"{len(info['learner_ids'])} ({', '.join(info['learner_ids'])})",
                     f"{len(opps)} ({', '.join(opps)})" if opps else "-", str(tuple(info["obs_shape"])),
                     info["obs_dtype"], reads, str(info["n_actions"]), info["team"]])
    print_table("environments", ["env", "learners", "opponents", "obs shape", "stored as", "network reads",
                                 "actions", "team"], rows)
