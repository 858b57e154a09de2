"""Checks of an env config against the env library itself, before a run folder is written.

Why here and not in ``suPER.config``: the config module imports no env library (instant CLI errors,
layering), but whether ``env.kwargs`` are right is only known to the library's own constructor: PettingZoo
pursuit's ``Pursuit.__init__`` (what ``pursuit_v4.raw_env`` / ``parallel_env`` pass their kwargs to) and
MAgent2's ``battle_v4`` / ``adversarial_pursuit_v4.parallel_env`` (named arguments plus the module's
``default_reward_args``). A typo (``n_pursuer``) or a value the game cannot use (``x_size=0``) would
otherwise crash the run after its folder was written, and then every resume the same way.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from suPER.config import ConfigError, EnvConfig
from suPER.envs.base import EnvSpec
from suPER.envs.record import UnusableEnvError

_NOT_CONFIGURABLE = {"self", "render_mode", "evader_controller", "pursuer_controller", "reward_args", "kwargs", "args"}
"""Constructor arguments a config cannot set: the adapter owns rendering, controllers are objects."""

ANY_KWARG = "**"
"""In ``constructor_kwargs``: the library takes any keyword (its names are then checked by the library itself, when
``probe_env`` builds the env)."""


def accepted_kwargs(env_name: str) -> list[str]:
    """The ``env.kwargs`` keys the env's own constructor takes (read from the installed library).

    Args:
        env_name: registry key (pursuit | battle | adversarial_pursuit); the adapter's ``constructor_kwargs``
            reads them from the library.

    Returns:
        Sorted names.
    """
    from suPER.envs.record import adapter_class, env_record

    rec = env_record(env_name)  # unknown name: one line listing the registered ones
    names = adapter_class(env_name).constructor_kwargs(**({"name": env_name} if rec.generic else {}))
    return sorted(names - _NOT_CONFIGURABLE)


def probe_env(cfg: EnvConfig, labels: dict[str, str] | None = None) -> EnvSpec:
    """Check ``cfg.kwargs`` names against the constructor, then build the env, reset it and take one step.

    Args:
        cfg: env section of a validated config (its opponent is replaced by a random one for the probe).
        labels: dotted key -> the flag as typed (``--set env.kwargs.x_size``), for the messages.

    Returns:
        The env's spec (learner ids, spaces).

    Raises:
        ConfigError: an unknown key (with a did-you-mean) or settings the env rejects.
    """
    from dataclasses import replace

    from suPER.envs.factory import build_adapter

    labels = labels or {}
    try:
        known = accepted_kwargs(cfg.name)
    except UnusableEnvError as exc:  # a PettingZoo module or function that is not there: name --env as typed
        raise ConfigError(f"{labels.get('env.name', 'env.name')}: {exc}") from exc
    for key in cfg.kwargs:
        if ANY_KWARG not in known and key not in known:
            dotted = f"env.kwargs.{key}"
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"{labels.get(dotted, dotted)}: unknown {cfg.name} setting {key!r} ({hint}"
                              f"{cfg.name} takes: {', '.join(known)})")
    typed = [k for k in labels if k.startswith("env.kwargs.")]
    where = labels[typed[0]] if len(typed) == 1 else "env.kwargs"
    # name what was typed: the one setting given (its value), else every setting of the env
    shown = (f"{typed[0].removeprefix('env.kwargs.')}={cfg.kwargs.get(typed[0].removeprefix('env.kwargs.'))!r}"
             if len(typed) == 1 else repr(dict(cfg.kwargs)))
    try:
        try:
            env = build_adapter(replace(cfg, kwargs=dict(cfg.kwargs), opponent="random"), seed=0)
        except UnusableEnvError as exc:  # an AEC env, continuous actions, ...: the env itself, not its settings
            raise ConfigError(f"{labels.get('env.name', 'env.name')}: {exc}") from exc
        try:
            env.reset(seed=0)
            env.step(np.zeros(len(env.spec.learner_ids), dtype=np.int64))
            spec = env.spec
        finally:
            env.close()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the library's own code means these settings are unusable
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(f"{where}: expected settings {cfg.name} can run, got {shown} "
                          f"({type(exc).__name__}{': ' + detail if detail else ''})") from exc
    if not spec.learner_ids:
        raise ConfigError(f"{where}: expected settings with at least one learner, got {dict(cfg.kwargs)!r}")
    return spec


def describe_ids(ids: Any) -> str:
    """``pursuer_0, pursuer_1, ...`` (every id: they are what a user copies into --team)."""
    return ", ".join(map(str, ids))
