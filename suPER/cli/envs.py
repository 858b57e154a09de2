"""``super-marl envs``: the registered environments with their learners, opponents and spaces."""

from __future__ import annotations

from suPER import config as C
from suPER.cli.common import print_table


def envs() -> None:
    """List the environments with their learners, opponents and spaces."""
    from suPER.envs import ENVS, env_info

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

