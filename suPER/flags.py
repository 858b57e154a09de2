"""The one table of ``super-marl train``'s options, and the flag -> setting translation it implies.

Each option is one ``Flag`` record: its name (``num_timesteps`` -> ``--num-timesteps``; the same word is the grid-file
key), the dotted config key it sets, its ``--help`` panel and the original main.py's spelling. From this table come

* ``train``'s typer signature and its ``--help`` panels (``suPER.cli.train``),
* the grid-file flag vocabulary (``FLAG_KEYS``, ``GRID_SWITCHES``; ``suPER.campaigns.grid``),
* the paper-spelling rewrite (``PAPER_RENAMES``, ``PAPER_SETTINGS``; ``suPER.cli.paper``),
* the options table of ``docs/reference.md`` (``scripts/reference.py``).

The help text of an option that sets a config key is the first sentence of that field's docstring
(``suPER.docstrings``), and its default is the config's: a setting is described once and defaulted once, next to
its declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, get_args, get_origin

from suPER import config as C
from suPER.docstrings import field_docs

PANELS = ("Run", "SUPER relay", "DQN", "Environment and opponent", "Evaluation", "Output and logging",
          "Paper spellings (the original main.py)")
"""``--help`` panels of ``train``, in order."""
RUN, SUPER, DQN, ENV, EVAL, OUTPUT, PAPER = PANELS


@dataclass(frozen=True)
class Flag:
    """One option of ``super-marl train``.

    Attributes:
        name: option name with ``_`` (``num_timesteps`` -> ``--num-timesteps``); a grid-file key when ``grid``.
        key: the dotted config key it sets; its help, type and default come from that field. None for an option
            of the command itself (``--pack``, ``--overwrite``), which states its own ``type``, ``default`` and
            ``help``.
        panel: its ``--help`` group (``PANELS``).
        help: for a key, text appended to the field docstring's first sentence; otherwise the whole help.
        paper: the original main.py's spelling of the same option with the same value (``--num_timesteps``).
        negatable: a switch with a ``--no-`` form (``--super/--no-super``); otherwise a bool is a plain flag.
        grid: a grid-file key (an entry, ``defaults`` or ``sweep`` may set it).
        super_only: means something only with the relay on: refused without ``--super`` (``train`` and grids).
        type: the option's type for a command option (keys take the field's).
        default: the option's default for a command option (keys default to None: the config decides).
    """

    name: str
    key: str | None
    panel: str
    help: str = ""
    paper: str | None = None
    negatable: bool = False
    grid: bool = True
    super_only: bool = False
    type: Any = None
    default: Any = None

    @property
    def option(self) -> str:
        """``--num-timesteps`` (``--super/--no-super`` for a negatable switch)."""
        flag = "--" + self.name.replace("_", "-")
        return f"{flag}/--no-{flag[2:]}" if self.negatable else flag

    @property
    def flag(self) -> str:
        """``--num-timesteps``: how errors name the option when the user typed it."""
        return "--" + self.name.replace("_", "-")


def _env_help() -> str:
    return C.env_names_help() + " (any PettingZoo parallel env with discrete actions)"


def _algo_help() -> str:
    from suPER.algorithms import algos_help

    return algos_help()


FLAGS: tuple[Flag, ...] = (
    # run: what is trained, how long, with which seeds and on which code path
    Flag("env", None, RUN, "environment (super-marl envs lists them)", grid=True, type=str, default="pursuit"),
    Flag("algo", None, RUN, "algorithm", grid=True, type=str, default="ddqn"),
    Flag("num_timesteps", "run.num_timesteps", RUN, paper="--num_timesteps"),
    Flag("seed", "run.seed", RUN, "env seed = seed + 100", grid=False),
    Flag("num_seeds", None, RUN, "run seeds seed .. seed+num_seeds-1", paper="--num_seeds", grid=False, type=int,
         default=1),
    Flag("quick", None, RUN, "a short budget that finishes in minutes (the env YAML's profiles: quick:)",
         type=bool, default=False),
    Flag("protocol", None, RUN, "ours (this suite's corrected defaults) | paper (the original's behaviour; the run "
         "folder name gets __paper)", type=str, default=None),
    Flag("legacy", None, RUN, "the paper protocol for this run (= --protocol paper; docs/decisions.md)", type=bool,
         default=False),
    Flag("backend", None, RUN, "native (the batched trainer) | rllib (suPERDQN on RLlib)", grid=False, type=str,
         default="native"),
    Flag("pack", None, RUN, "train the --num-seeds runs as one batched program (one run folder each)", grid=False,
         type=bool, default=False),
    Flag("device", "run.device", RUN),
    Flag("threads", "run.threads", RUN),
    Flag("set", None, RUN, "dotted override, repeatable: --set dqn.gamma=0.95 (docs/reference.md lists the keys)",
         type=list[str], default=None),
    # the relay
    Flag("super", "relay.enabled", SUPER, "--super-mode, --bandwidth, --window and --team need it",
         negatable=True),
    Flag("super_mode", "relay.mode", SUPER, paper="--suPER_mode",
         super_only=True),
    Flag("bandwidth", "relay.bandwidth", SUPER, paper="--suPER_bandwidth", super_only=True),
    Flag("window", "relay.window", SUPER, paper="--suPER_window", super_only=True),
    Flag("team", "relay.team", SUPER, paper="--team_sharing", super_only=True),
    Flag("insertion_priority", "relay.insertion_priority", SUPER, paper="--suPER_insertion_priority"),
    # the learners
    Flag("parameter_sharing", "dqn.parameter_sharing", DQN, negatable=True),
    Flag("lr", "dqn.lr", DQN),
    Flag("buffer_size", "dqn.buffer_size", DQN, paper="--buffer_size"),
    Flag("model", "dqn.model", DQN),
    # the env's opponent team
    Flag("opponent", "env.opponent", ENV),
    Flag("opponent_epsilon", "env.opponent_epsilon", ENV),
    Flag("eval_opponent_epsilon", "env.eval_opponent_epsilon", ENV),
    Flag("allow_pickle", "env.opponent_allow_pickle", ENV),
    # evaluation
    Flag("eval_interval", "run.eval_interval", EVAL, paper="--eval_interval"),
    Flag("eval_episodes", "run.eval_episodes", EVAL, paper="--eval_episodes"),
    Flag("eval_parallel", "run.eval_parallel", EVAL, negatable=True),
    # where it goes
    Flag("out", "run.out", OUTPUT, grid=False),
    Flag("tag", "run.tag", OUTPUT),
    Flag("skip_finished", None, OUTPUT, "exit 0 when the run folder already holds a finished run (resubmitted "
         "grids)", grid=False, type=bool, default=False),
    Flag("overwrite", None, OUTPUT, "start over in a folder that holds a finished or unfinished run (without it a "
         "finished run is refused and an unfinished one resumed)", grid=False, type=bool, default=False),
    Flag("progress", "run.progress", OUTPUT, grid=False, negatable=True),
    Flag("wandb", "run.wandb", OUTPUT, negatable=True),
    Flag("wandb_project", "run.wandb_project", OUTPUT, paper="--experiment_project"),
    Flag("wandb_group", "run.wandb_group", OUTPUT, paper="--experiment_group"),
    Flag("wandb_mode", "run.wandb_mode", OUTPUT),
)
"""Every option of ``super-marl train``, in ``--help`` order."""

PAPER_ONLY: tuple[Flag, ...] = (
    Flag("horizon", "env.horizon", PAPER, paper="--horizon"),
    Flag("rollout_fragment_length", "dqn.rollout_fragment_length", PAPER, paper="--rollout_fragment_length"),
    Flag("train_batch_size", "dqn.batch_size", PAPER, paper="--train_batch_size"),
    Flag("exploration_initial_epsilon", "dqn.epsilon_initial", PAPER, paper="--exploration_initial_epsilon"),
    Flag("exploration_final_epsilon", "dqn.epsilon_final", PAPER, paper="--exploration_final_epsilon"),
    Flag("env_pursuit_n_evaders", "env.kwargs.n_evaders", PAPER, paper="--env_pursuit_n_evaders"),
    Flag("env_pursuit_num_agents", "env.kwargs.n_pursuers", PAPER, paper="--env_pursuit_num_agents"),
    Flag("env_pursuit_shared_reward", "env.kwargs.shared_reward", PAPER, paper="--env_pursuit_shared_reward"),
    Flag("env_battle_map_size", "env.kwargs.map_size", PAPER, paper="--env_battle_map_size"),
    Flag("env_adversarial_pursuit_map_size", "env.kwargs.map_size", PAPER,
         paper="--env_adversarial_pursuit_map_size"),
)
"""The original's flags with no option of their own here: each sets a config key (as ``--set KEY=VALUE``)."""

_BY_NAME = {f.name: f for f in FLAGS}


def flag(name: str) -> Flag:
    """The record of option ``name`` (``"num_timesteps"``)."""
    return _BY_NAME[name]


FLAG_KEYS: dict[str, str] = {f.name: f.key for f in FLAGS if f.grid and f.key}
"""Named flags that set a config key (option name with ``_`` -> dotted key): a grid entry reads like a command
line (``bandwidth: 0.1`` is ``--bandwidth 0.1``)."""

GRID_SWITCHES: tuple[str, ...] = tuple(f.name for f in FLAGS if f.grid and not f.key)
"""Grid-file keys that are ``train`` options of their own rather than settings (``env``, ``algo``, ``quick``,
``protocol``, ``legacy``, ``set``)."""

SUPER_ONLY_FLAGS: tuple[str, ...] = tuple(f.name for f in FLAGS if f.super_only)
"""Named flags that only mean something with the relay on (``train`` and grid files refuse them without it)."""

PAPER_RENAMES: dict[str, str] = {f.paper: f.flag for f in FLAGS if f.paper}
"""The original's flag -> this CLI's flag, same value."""

PAPER_SETTINGS: dict[str, str] = {f.paper: f.key for f in PAPER_ONLY if f.paper and f.key}
"""The original's flag -> the dotted key it sets (passed as ``--set key=value``)."""


# ---- help text from the config


def _field(key: str) -> tuple[type, str]:
    """(the dataclass of a dotted key's section, the field name)."""
    section, _, name = key.partition(".")
    return type(getattr(_DEFAULTS, section)), name


_DEFAULTS = C.ExperimentConfig()


def _first_sentence(text: str) -> str:
    """Up to the first ``". "`` or ``"; "`` outside parentheses (a docstring's summary), code quotes dropped."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ".;" and text[i + 1:i + 2] == " " and (text[i - 1:i].isalnum() or text[i - 1:i] == ")"):
            text = text[:i]
            break
    return text.rstrip(".").replace("``", "")


def choices(key: str) -> tuple[str, ...]:
    """The values of a ``Literal`` field (``run.device`` -> cpu, cuda, auto); () for other fields."""
    cls, name = _field(key)
    hint = C.field_hints(cls)[name]
    return tuple(str(a) for a in get_args(hint)) if get_origin(hint) is Literal else ()


def value_type(f: Flag) -> Any:
    """The option's value type: a command option's own, or its field's (``Literal`` -> str)."""
    if f.key is None:
        return f.type
    cls, name = _field(f.key)
    hint = C.field_hints(cls)[name]
    if get_origin(hint) is Literal:
        return str
    return hint if hint in (bool, int, float, str) else str


@cache
def _keys_set_per_env() -> frozenset[str]:
    """Dotted keys that some env YAML sets (their default is the env's, not the dataclass's)."""
    return frozenset(k for env in C.ENV_NAMES for k in C.flatten(C.load_env_defaults(env)))


def default_text(f: Flag) -> str | None:
    """What ``--help`` shows as the default: the config's value; nothing where an env YAML sets its own."""
    if f.key is None:
        return None if f.default in (None, False, ()) else str(f.default)
    if f.key in _keys_set_per_env():
        return None  # the env's (docs/reference.md lists each env's value)
    cls, name = _field(f.key)
    value = getattr(getattr(_DEFAULTS, f.key.split(".")[0]), name)
    if isinstance(value, bool):
        return None
    return repr(value) if value == "" else str(value)


def help_text(f: Flag, where: bool = True) -> str:
    """The option's ``--help`` line: the field docstring's first sentence (keys), the choices, the extra help and,
    with ``where``, the paper spelling (``docs/reference.md`` names the key each option sets)."""
    if f.name == "env":
        parts = [f"{f.help}: {_env_help()}"]
    elif f.name == "algo":
        parts = [f"{f.help}: {_algo_help()}"]
    elif f.key is None:
        parts = [f.help]
    else:
        cls, name = _field(f.key)
        parts = [_first_sentence(field_docs(cls).get(name, f.key))]
        if f.key == "relay.mode":  # its docstring names the registry; the rules' names are what a user types
            from suPER.core.selection import modes_help, rule_params

            params = ", ".join(f"relay.params.{p.name} ({p.help})" for p in rule_params())
            parts = [f"selection rule: {modes_help()}; its parameters: --set {params}"]
        elif choices(f.key):
            parts.append(" | ".join(choices(f.key)))
        if f.help:
            parts.append(f.help)
    if f.paper and where:
        parts.append(f"paper: {f.paper}")
    return "; ".join(p for p in parts if p)


# ---- flags -> settings


def named_settings(env_name: str, flags: dict[str, Any],
                   label: Callable[[str], str] = lambda name: name) -> tuple[dict[str, Any], dict[str, str]]:
    """Named flags -> dotted settings, the one translation ``super-marl train`` and grid files share.

    Order (later wins): the ``quick`` profile of ``env_name`` (``profiles: quick:`` of its env YAML), the named
    flags (``FLAG_KEYS`` names), then the paper protocol's settings (``config.paper_protocol_settings``) when
    ``protocol`` is ``paper`` or ``legacy`` is true.

    Args:
        env_name: environment registry key (selects the quick profile).
        flags: ``FLAG_KEYS`` names plus the switches ``quick``, ``legacy`` and ``protocol`` (ours | paper);
            a value None = not given.
        label: flag name -> how errors name it (the CLI: ``--lr`` or the paper spelling typed; grids: ``lr``).

    Returns:
        (dotted key -> value, dotted key -> label): flags are labelled ``label(name)``, profile and legacy
        settings ``"<label(quick)> (<key>)"`` / ``"<label(legacy)> (<key>)"``.

    Raises:
        ConfigError: ``quick`` for an env without a quick profile, an unknown protocol, or a name that is not a flag.
    """
    named: dict[str, Any] = {}
    labels: dict[str, str] = {}
    if flags.get("quick"):
        quick = C.load_env_profiles(env_name).get("quick")
        if quick is None:
            raise C.ConfigError(f"{label('quick')}: no quick profile for env {env_name!r} in "
                                f"{C.env_yaml_path(env_name)} (profiles: quick:)")
        named.update(quick)
        labels.update({key: f"{label('quick')} ({key})" for key in quick})
    for name, value in flags.items():
        if name in ("quick", "legacy", "protocol") or value is None:
            continue
        if name not in FLAG_KEYS:
            raise C.ConfigError(f"{label(name)}: not a named flag (known: {', '.join(FLAG_KEYS)})")
        named[FLAG_KEYS[name]] = value
        labels[FLAG_KEYS[name]] = label(name)
    protocol = flags.get("protocol")
    if protocol is not None and protocol not in C.PROTOCOLS:
        raise C.ConfigError(f"{label('protocol')}: expected one of {', '.join(C.PROTOCOLS)}, got {protocol!r}")
    if protocol == "ours" and flags.get("legacy"):
        raise C.ConfigError(f"{label('legacy')}: is the paper protocol, which {label('protocol')} ours contradicts")
    if protocol == "paper" or flags.get("legacy"):
        switch = label("protocol") if protocol == "paper" else label("legacy")
        paper = C.paper_protocol_settings(flags.get("super_mode"))
        named.update(paper)
        labels.update({key: f"{switch} ({key})" for key in paper})
    return named, labels
