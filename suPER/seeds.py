"""Which generator of a run gets which seed: the run seed plus one named offset per generator.

Trainers never write ``seed + 1`` themselves; they take their offsets from here, so two generators of
one run never share a stream by accident and a new trainer sees which offsets are taken. The global
RNGs (python, numpy, torch) are seeded with the run seed itself (``suPER.runs.seed_everything``); env
seeds have their own offsets in ``EnvConfig`` (``seed_offset``, ``eval_seed_offset``).
"""

from __future__ import annotations

EXPLORATION_SEED_OFFSET = 0
"""epsilon-greedy draws of the DQN, QMIX and MADDPG trainers (``np.random.default_rng(seed)``)"""

REPLAY_SEED_OFFSET = 1
"""replay sampling (native DQN's prioritized buffers, QMIX's episode buffer, MADDPG's buffer)"""

RELAY_SEED_OFFSET = 2
"""the SUPER relay's generator (``Relay.from_config``), on every backend"""

EVAL_DRAWS_SEED_OFFSET = 3
"""MADDPG's evaluation draws (kept apart from training randomness)"""
