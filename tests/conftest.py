"""Envs registered at run time for the registry-parametrised tests.

A test that takes an ``env_name`` argument runs once per name in ``ENVS_UNDER_TEST``: every named env
(``suPER.config.ENV_NAMES``, one adapter and YAML file each) and the envs registered here at run time through the
generic PettingZoo adapter, where a name is all it takes (``pettingzoo:<module>:<function>``). So the registry's
contract (builds, steps to the horizon, describes itself, YAML values land, budgets) is checked on an env that is
none of the paper's: ``tests/envs/tiny_pz.py``, vector observations of two shapes, two action counts, agents that
leave the game.
"""

from __future__ import annotations

import pytest

from suPER import config as C

RUN_TIME_ENVS = (C.pettingzoo_env_name("pettingzoo:tests.envs.tiny_pz:parallel_env"),)
"""PettingZoo envs registered for the tests (their modules import from the repository root)"""

ENVS_UNDER_TEST = (*C.ENV_NAMES, *RUN_TIME_ENVS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test taking ``env_name`` over ``ENVS_UNDER_TEST``."""
    if "env_name" in metafunc.fixturenames:
        metafunc.parametrize("env_name", ENVS_UNDER_TEST)
