"""Algorithms: one registered record per ``--algo`` key (``ALGORITHMS``).

Every table about algorithms derives from these records: the ``--algo`` names and help, the config
sections an algorithm reads (``ExperimentConfig``'s sections and what ``config.json`` holds), the presets
an algorithm key implies, where the named flags (``--lr``, ``--buffer-size``, ...) land for it, whether
it can relay (``--super``), the paper's ``--env <env><suffix>`` spellings, and the trainer each backend
calls. The records are registered in ``suPER.config`` next to their config dataclasses; adding an
algorithm = its config dataclass, its trainer and one ``register(AlgorithmSpec(...))`` line
(docs/extending.md has the checklist).

Trainers are named as ``"module:function"`` strings and imported only when a run starts
(``resolve_entry_point``), so this module and ``suPER.config`` stay free of torch and ray;
``tests/test_layering.py`` checks the arrows behind those strings.

Pure Python: imports nothing from ``suPER``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("native", "rllib")
"""Trainer backends (``--backend``): native = this package's batched trainers; rllib = suPERDQN on RLlib."""


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm: its config section, trainers, presets, flag routes and paper spellings.

    A named flag is a dotted key of ``suPER.config.FLAG_KEYS`` (``--lr`` is ``dqn.lr``). For an algorithm
    the rule is decided once, in ``suPER.config.route_flags``: a key of one of its own ``sections`` is
    kept; a key in ``flag_routes`` goes to the listed settings; a value in ``flag_noops`` (and any switch
    left off: False / None) is dropped; ``relay.*`` keys are dropped when it cannot relay (``relay.enabled``
    is kept, so ``--super`` is refused by name); any other key of another algorithm's section is an error
    naming the flag. So forgetting a route refuses ``--lr`` instead of silently dropping it.
    """

    name: str
    """registry key: what users type (``--algo NAME``, ``run.algo`` in YAML and grid files)"""
    section: str
    """the ``ExperimentConfig`` field holding its settings (``dqn`` for dqn and ddqn; ``--set <section>.KEY``)"""
    config: type
    """the dataclass of that section (algorithms sharing a section share it)"""
    trainers: Mapping[str, str]
    """backend (``BACKENDS``) -> ``"module:function"`` of ``train(cfg, folder, logger, progress) -> Summary``"""
    help: str
    """a few words for ``--algo``'s help"""
    presets: Mapping[str, Any] = field(default_factory=dict)
    """dotted overrides the key implies, applied after the env YAML (dqn: no dueling, no double-Q)"""
    flag_routes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """named-flag key of another section -> its own settings it sets (``dqn.lr`` -> ``("seac.lr",)``)"""
    flag_noops: Mapping[str, Any] = field(default_factory=dict)
    """named-flag key -> a value that asks for what the algorithm does anyway (``dqn.model: mlp``): dropped"""
    can_relay: bool = False
    """SUPER relay applies (``--super``); its runs then also read and record the ``relay`` section"""
    paper_suffix: str = ""
    """the paper's ``--env <env><suffix>`` spelling of this algorithm (``_plaindqn``); empty = none"""

    @property
    def sections(self) -> tuple[str, ...]:
        """Config sections its runs read and record in ``config.json`` (besides ``env`` and ``run``)."""
        return (self.section, "relay") if self.can_relay else (self.section,)


ALGORITHMS: dict[str, AlgorithmSpec] = {}
"""Registry: ``--algo`` key -> record, in registration order (help lists and config sections follow it).
Filled when ``suPER.config`` is imported (the records are registered there, next to their dataclasses);
read it as ``suPER.config.ALGORITHMS`` to be sure it is."""


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add an algorithm to ``ALGORITHMS``.

    Raises:
        ValueError: a taken name or paper suffix, a section already registered with another dataclass,
            a backend outside ``BACKENDS``, no native trainer, or an entry point not ``"module:function"``.
    """
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is already registered")
    for other in ALGORITHMS.values():
        if other.section == spec.section and other.config is not spec.config:
            raise ValueError(f"algorithm {spec.name!r}: section {spec.section!r} is {other.config.__name__} "
                             f"(registered by {other.name!r}), not {spec.config.__name__}")
        if spec.paper_suffix and other.paper_suffix == spec.paper_suffix:
            raise ValueError(f"algorithm {spec.name!r}: paper suffix {spec.paper_suffix!r} is {other.name!r}'s")
    if "native" not in spec.trainers or not set(spec.trainers) <= set(BACKENDS):
        raise ValueError(f"algorithm {spec.name!r}: trainers needs 'native' and only backends of {BACKENDS}")
    for entry in spec.trainers.values():
        module, colon, function = entry.partition(":")
        if not (module and colon and function):
            raise ValueError(f"algorithm {spec.name!r}: trainer {entry!r} is not 'module:function'")
    ALGORITHMS[spec.name] = spec
    return spec


def algo_names() -> tuple[str, ...]:
    """Every registered ``--algo`` key, in registration order."""
    return tuple(ALGORITHMS)


def relay_algo_names() -> tuple[str, ...]:
    """The keys of the algorithms SUPER relay applies to (``can_relay``)."""
    return tuple(name for name, spec in ALGORITHMS.items() if spec.can_relay)


def backend_algo_names(backend: str) -> tuple[str, ...]:
    """The keys of the algorithms that have a trainer for ``backend``."""
    return tuple(name for name, spec in ALGORITHMS.items() if backend in spec.trainers)


def algos_help() -> str:
    """``dqn (plain DQN) | ddqn (dueling double DQN) | ...`` for ``--algo``'s help."""
    return " | ".join(f"{s.name} ({s.help})" for s in ALGORITHMS.values())


def resolve_entry_point(entry: str) -> Any:
    """Import ``"module:function"`` and return the function.

    Raises:
        ModuleNotFoundError: the module (or one it needs) is not installed.
        AttributeError: the module has no such function.
    """
    import importlib

    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)
