"""The spec of a pursuit game, shared by the adapter (``suPER.envs.pursuit``) and its vectorized version
(``suPER.envs.vec_pursuit``).

Why a module of its own: the adapter's record names the vectorized version as a string (``record.batched``,
imported when a batched env is built: it needs torch), which is an arrow pursuit -> vec_pursuit; the vectorized
version importing the adapter for this function would close it into a cycle.
"""

from __future__ import annotations

import numpy as np

from suPER.envs.base import EnvSpec


def pursuit_spec(n_pursuers: int, n_evaders: int, obs_range: int, n_actions: int, name: str = "pursuit") -> EnvSpec:
    """The spec of a pursuit game (single or batched): N pursuers learn, observations (R, R, 3) of agent counts;
    ``name`` is the adapter's record name (a subclass registered under its own name keeps it).

    Observation values are agent counts (and 1 for walls), bounded by the larger team size, so uint8 stores
    them losslessly unless a team has more than 255 agents.
    """
    max_count = max(n_pursuers, n_evaders)
    return EnvSpec(
        name=name,
        learner_ids=tuple(f"pursuer_{i}" for i in range(n_pursuers)),
        opponent_ids=(),
        obs_shape=(obs_range, obs_range, 3),
        obs_dtype=np.uint8 if max_count <= np.iinfo(np.uint8).max else np.uint16,
        n_actions=n_actions,
        team="pursuer",
        cell_codes=True,
    )
