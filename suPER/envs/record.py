"""The environment registry: one ``EnvRecord`` per environment, carried by its adapter class.

An adapter class declares what the rest of the suite needs to know about its environment as one
class attribute ``record = EnvRecord(...)`` (plus the classmethod ``constructor_kwargs``, the library's
argument names). Everything that lists or distinguishes environments derives from the registry: the
registered names (``ENVS``), the envs with an opponent team (``opponent_env_names``) and the opponent kinds
they resolve, match outcomes (``record.outcome``), the opponent cards' win definition, the self-play budget
of ``opponents train``, the relay's legacy sender-side flag (``sender_side_priorities``), the batched
version (``make_batched_env``) and the ``env.kwargs`` check (``suPER.envs.check``). ``suPER.config``, which may
import no env library, lists the env names from their YAML files (``config.ENV_NAMES``).

``register`` checks a record when its adapter is registered (``suPER/envs/__init__.py``), so a
forgotten fact fails on import with a message naming the adapter and the fact, never as a
``KeyError`` deep in a run. Values (hyperparameters, the ``--quick`` profile, the default budget)
stay in YAML (``experiments/envs/<key>.yaml``, its ``profiles: quick:``); the record holds
facts about the environment itself, not settings.

Pure python (no env library, no torch), so importing it costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from suPER.config import PETTINGZOO_SPELLING, env_key, env_yaml_path

OutcomeFn = Callable[[int, int, float], int]
"""(team alive, opponent alive, opponent team return) at the end of an episode -> +1 the learning team won,
0 tie, -1 the opponent won."""

OPPONENT_KINDS = ("random", "learning")
"""``env.opponent`` values the adapters resolve themselves (uniformly random opponents; self-play, both
teams learning). Every env with an opponent team also takes a network opponent: ``pretrained`` (the
shipped ``experiments/opponents/<key>.safetensors``) or a PATH to a team file (``suPER.opponents``)."""


class EnvRegistrationError(TypeError):
    """An adapter's record is missing a fact or states an impossible one (a programming error)."""


class UnusableEnvError(ValueError):
    """The env an ``env.name`` names cannot be adapted: a PettingZoo module that does not import, a function it
    lacks, an AEC env, a continuous action space. The message reads ``expected ..., got ...`` without the key;
    the caller prefixes the flag as typed (``suPER.envs.check.probe_env``)."""


@dataclass(frozen=True, kw_only=True)
class EnvRecord:
    """What the suite knows about one environment, declared once on its adapter class."""

    name: str
    """registry key = ``EnvConfig.name`` = ``experiments/envs/<name>.yaml`` = the adapter's class name,
    snake-cased, without ``Env`` (``AdversarialPursuitEnv`` -> ``adversarial_pursuit``)"""
    sender_side_priorities: bool
    """the original's config used worker-side prioritization for this env (``worker_side_prioritization``);
    decides the ``--legacy`` insertion rule of relayed rows (``suPER.core.relay.InsertionPolicy``). No default:
    the original set it per env, and a wrong guess changes every legacy run's priorities."""
    has_opponents: bool = False
    """an opponent team is driven inside the adapter (``env.opponent`` = random | learning | pretrained | PATH);
    True makes ``outcome``, ``win_definition`` and ``opponent_train_budget`` required"""
    outcome: OutcomeFn | None = None
    """with opponents: who won an episode (``OutcomeFn``), for matches and self-play snapshot selection"""
    win_definition: str = ""
    """with opponents: ``outcome`` in words, written into the opponent cards"""
    opponent_train_budget: int = 0
    """with opponents: default env steps of ``super-marl opponents train`` (self-play)"""
    batched: str | None = None
    """``module:Class`` of a ``BatchedMultiAgentEnv`` version (E games as tensors on a device), imported
    lazily by ``make_batched_env`` because it needs torch; None: no batched version"""
    generic: bool = False
    """one adapter for many library envs, each with its own name, which ``suPER.config.env_key`` maps to this
    record (``pz-<module>`` -> ``pettingzoo``, so far the one generic adapter): its constructor and
    ``constructor_kwargs`` take the env's name as ``name=``, its spec carries that name, and its settings file is
    ``experiments/envs/<name>/defaults.yaml``"""

    @property
    def opponent_kinds(self) -> tuple[str, ...]:
        """``env.opponent`` values the adapter resolves itself (empty without an opponent team)."""
        return OPPONENT_KINDS if self.has_opponents else ()


ENVS: dict[str, Any] = {}
"""registry key -> adapter class (registration order = listing order); filled by ``register``"""

_ADAPTER_METHODS = ("reset", "step", "close", "constructor_kwargs")
_ADAPTER_PROPERTIES = ("alive_N",)
"""read on the class: an adapter computes them from its state (``MultiAgentEnv.alive_N`` after a reset)"""


def snake_case(class_name: str) -> str:
    """``AdversarialPursuitEnv`` -> ``adversarial_pursuit`` (the registry key an adapter class must have)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name.removesuffix("Env")).lower()


def own_record(cls: type) -> EnvRecord:
    """The record ``cls`` declares itself, never one inherited: a subclass of an adapter is another env, and under
    its parent's record it would run with the parent's name and facts (every lookup by ``spec.name`` would find
    the parent). Adapters name their spec with it.

    Raises:
        EnvRegistrationError: ``cls`` declares no ``record = EnvRecord(...)`` of its own.
    """
    rec = cls.__dict__.get("record")
    if not isinstance(rec, EnvRecord):
        parent = getattr(cls, "record", None)
        inherited = f" (it would inherit {parent.name!r}'s)" if isinstance(parent, EnvRecord) else ""
        raise EnvRegistrationError(f"{cls.__module__}.{cls.__qualname__}: expected a class attribute record = "
                                   f"EnvRecord(...) of its own{inherited}, found {cls.__dict__.get('record')!r}")
    return rec


def register(cls: type) -> type:
    """Add an adapter class to ``ENVS`` after checking its record.

    Args:
        cls: a ``MultiAgentEnv`` adapter class with a ``record: EnvRecord`` class attribute.

    Returns:
        ``cls`` (usable as a decorator).

    Raises:
        EnvRegistrationError: no record, a name that is not the snake-cased class name, a duplicate, a
            missing YAML file, a missing adapter method, a missing opponent fact, a malformed batched path.
    """
    where = f"{cls.__module__}.{cls.__qualname__}"
    rec = own_record(cls)

    def require(ok: bool, fact: str, expected: str, got: Any) -> None:
        if not ok:
            raise EnvRegistrationError(f"{where}: record.{fact}: expected {expected}, got {got!r}")

    require(rec.name == snake_case(cls.__name__), "name", f"{snake_case(cls.__name__)!r} (the snake-cased class "
            f"name without Env)", rec.name)
    require(rec.name not in ENVS, "name", "a key not registered yet", rec.name)
    require(env_yaml_path(rec.name).is_file(), "name", f"a YAML file {env_yaml_path(rec.name)}", rec.name)
    require(not rec.generic or env_yaml_path(rec.name).name == "defaults.yaml", "generic",
            f"a settings folder experiments/envs/{rec.name}/defaults.yaml (its envs are not names of their own)",
            rec.generic)
    missing = [m for m in _ADAPTER_METHODS if not callable(getattr(cls, m, None))]
    missing += [m for m in _ADAPTER_PROPERTIES if not isinstance(getattr(cls, m, None), property)]
    members = (*_ADAPTER_METHODS, *(f"property {m}" for m in _ADAPTER_PROPERTIES))
    require(not missing, "name", f"an adapter with {', '.join(members)}", f"{cls.__name__} without "
            f"{', '.join(missing)}")
    require(isinstance(rec.sender_side_priorities, bool), "sender_side_priorities", "True or False",
            rec.sender_side_priorities)
    if rec.has_opponents:
        require(callable(rec.outcome), "outcome", "an outcome rule (team alive, opponent alive, opponent return) "
                "-> +1 / 0 / -1", rec.outcome)
        require(bool(rec.win_definition.strip()), "win_definition", "the outcome rule in words", rec.win_definition)
        require(isinstance(rec.opponent_train_budget, int) and rec.opponent_train_budget >= 1,
                "opponent_train_budget", "an integer >= 1 (env steps)", rec.opponent_train_budget)
        require(callable(getattr(cls, "set_opponent", None)), "has_opponents", "an adapter with set_opponent",
                cls.__name__)
    else:
        require(rec.outcome is None and not rec.win_definition and not rec.opponent_train_budget, "has_opponents",
                "True when outcome / win_definition / opponent_train_budget are set", rec.has_opponents)
    if rec.batched is not None:
        require(bool(re.fullmatch(r"[\w.]+:\w+", rec.batched)), "batched", "'package.module:Class'", rec.batched)
    ENVS[rec.name] = cls
    return cls


def env_record(name: str) -> EnvRecord:
    """The record of a registered env, or of the generic adapter a name belongs to (``pz-...`` -> ``pettingzoo``).

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    key = env_key(name)
    if key not in ENVS:
        named = [n for n, cls in ENVS.items() if not cls.record.generic]
        raise ValueError(f"env.name: expected one of {', '.join(named)} or {PETTINGZOO_SPELLING}, got {name!r}")
    rec: EnvRecord = ENVS[key].record
    return rec


def adapter_class(name: str) -> Any:
    """The adapter class that builds env ``name`` (``env_record``'s)."""
    return ENVS[env_record(name).name]


def opponent_env_names() -> tuple[str, ...]:
    """Registered envs with an opponent team (battle, adversarial_pursuit)."""
    return tuple(n for n, cls in ENVS.items() if cls.record.has_opponents)


def sender_side_priorities(name: str | None) -> bool:
    """``record.sender_side_priorities`` of a registered env; False for any other (e.g. a user's RLlib env)."""
    return bool(name is not None and env_key(name) in ENVS and env_record(name).sender_side_priorities)
