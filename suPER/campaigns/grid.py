"""Campaigns: grid files expanded into runs, executed locally (Ray Tune) or on a Ray cluster (jobs).

A grid file (``experiments/paper_grid.yaml``, ``bandwidth_sweep.yaml``, ``smoke.yaml``) lists entries
written in the flag vocabulary of ``super-marl train`` (``suPER.flags.FLAG_KEYS`` plus ``env``, ``algo``,
``legacy``, ``protocol`` (ours | paper), ``quick`` and dotted ``set`` overrides), so every expanded run is one CLI
invocation::

    name: paper                 # campaign name; default output folder runs/<name>
    seeds: 5                    # 5 -> seeds 1..5, or an explicit list [1, 2, 3]
    base: other_grid.yaml       # optional: inherit that file's defaults and runs (this file's keys win)
    defaults: {eval_episodes: 20}               # flags for every run (entries override them)
    env_defaults: {pursuit: {set: {env.kwargs.x_size: 8}}}   # flags for every run of one env
    only: [pursuit-ddqn, "*-super-quantile"]    # optional: keep only these entries (name globs)
    order: seed                 # optional: run seed 1 of every entry first, then seed 2, ... (default: entry)
    runs:
      - {name: pursuit-ddqn-super-quantile, env: pursuit, algo: ddqn, super: true, super_mode: quantile,
         bandwidth: 0.1}
      - {name: pursuit-qmix, env: pursuit, algo: qmix, pending: "QMIX trainer not implemented yet"}
      - {name: pursuit-bw, env: pursuit, algo: ddqn, super: true, sweep: {bandwidth: [0.01, 0.1]}}

``sweep`` expands an entry into the product of its lists; each point gets the name suffix
``[bandwidth=0.01]`` and the tag ``bandwidth0.01`` (appended to the entry's own tag) so run folders stay
distinct. Entries marked ``pending`` are listed but never run (their trainers have not landed).

The whole file is validated before anything runs: unknown keys, unknown envs or algorithms, values of
the wrong type, duplicate entry names and two runs writing the same run folder are reported as
``FILE:LINE: entry 'NAME': problem`` (``GridError``, exit code 2 in the CLI).
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from suPER import config as C
from suPER.flags import FLAG_KEYS, GRID_SWITCHES, SUPER_ONLY_FLAGS, flag, named_settings, value_type
from suPER.resolve import nest_rule_params, resolve

GRID_KEYS = ("name", "description", "seeds", "base", "defaults", "env_defaults", "only", "order", "runs")
"""Top-level keys of a grid file."""

SPECIAL_KEYS = GRID_SWITCHES
"""Entry keys besides ``FLAG_KEYS`` that are ``super-marl train`` options of their own (``env``, ``algo``, ``legacy``,
``protocol``, ``quick``, ``set``)."""

ENTRY_ONLY_KEYS = ("name", "pending", "note", "sweep", "seeds")
"""Entry keys that describe the entry itself rather than a flag."""

FLAG_NAMES = (*FLAG_KEYS, *SPECIAL_KEYS)
"""Everything a ``defaults`` / ``env_defaults`` block may hold."""

GRID_DECIDED = {
    "run.seed": "is the grid's to decide (seeds: N or seeds: [7] on the entry), not a set: key",
    "run.out": "where runs live is the campaign's (--out of grid run / grid submit), not an entry's",
    "run.name": "run folders are named by the grid (env, algorithm, seed, tag: use tag:), not set per entry",
}
"""Settings a grid decides for each run: refused in ``set`` blocks (a run.out there wrote outside the campaign
folder; a run.seed turned every seed of an entry into one folder)."""

class GridError(C.ConfigError):
    """A grid file is malformed: the message starts with ``FILE:LINE`` and names the entry."""


# --------------------------------------------------------------------------------------------------
# YAML with line numbers


class _Mapping(dict):  # type: ignore[type-arg]
    """A YAML mapping that remembers its own line and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[str, int]


GRID_FILE_LIMITS = {"bytes": 1_000_000, "depth": 32, "aliases": 20}
"""What a grid file may hold: the paper grid is 7 KB, 4 levels deep, without aliases. A file past a limit (a YAML
alias bomb, a 20,000-deep list, ``base: /dev/zero``) is refused with one line instead of hanging or exhausting
memory."""


class _LineLoader(C.YAMLLoader):
    """SafeLoader (numbers as users write them, ``config.YAMLLoader``) whose mappings are ``_Mapping``s, which rejects
    duplicate keys, and which stops at ``GRID_FILE_LIMITS``'s depth and alias count while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            self._aliases += 1
            if self._aliases > GRID_FILE_LIMITS["aliases"]:
                raise yaml.composer.ComposerError(None, None, f"more than {GRID_FILE_LIMITS['aliases']} aliases "
                                                  f"(a grid file needs none)", self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > GRID_FILE_LIMITS["depth"]:
                raise yaml.composer.ComposerError(None, None, f"nested more than {GRID_FILE_LIMITS['depth']} levels "
                                                  f"deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    loader.flatten_mapping(node)
    out = _Mapping()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _line(node: Any, key: str | None = None) -> int:
    """Line of ``node`` (or of ``key`` inside it) when the loader recorded one, else 0."""
    if isinstance(node, _Mapping):
        return node.key_lines.get(key, node.line) if key is not None else node.line
    return 0


def load_grid_yaml(path: Path) -> _Mapping:
    """Parse a grid file with line numbers; syntax errors become ``GridError('FILE:LINE: ...')``.

    Only a regular file of at most ``GRID_FILE_LIMITS["bytes"]`` is read (a FIFO would block, ``/dev/zero`` never
    ends), opened without blocking and read with a bound.
    """
    import os
    import stat

    limit = GRID_FILE_LIMITS["bytes"]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise GridError(f"{path}: expected a grid file (a regular YAML file), got another kind of file")
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise GridError(f"{path}: cannot read grid file ({exc.strerror})") from exc
    if len(raw) > limit:
        raise GridError(f"{path}: expected a grid file of at most {limit:,} bytes, got a larger file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GridError(f"{path}: expected a UTF-8 text file, got bytes that are not text") from None
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - _LineLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise GridError(f"{where}: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise GridError(f"{path}: {exc}") from exc
    if not isinstance(data, _Mapping):
        raise GridError(f"{path}: expected a mapping with keys {', '.join(GRID_KEYS)}, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------------------------------
# expanded runs


@dataclass
class GridRun:
    """One run of an expanded grid: an entry at one seed (and one sweep point).

    Attributes:
        entry: the entry's readable name (with a ``[key=value]`` suffix for sweep points).
        env: environment name as a run records it (``pz-<module>`` for ``pettingzoo:<module>:<function>``).
        algo: algorithm registry key.
        seed: run seed.
        flags: named flags (``FLAG_KEYS`` names plus ``legacy`` / ``quick``) with their values.
        overrides: dotted ``set`` overrides.
        pending: why the entry cannot run yet (None when it can).
        where: ``FILE:LINE`` of the entry.
        note: free text from the grid file.
    """

    entry: str
    env: str
    algo: str
    seed: int
    flags: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    pending: str | None = None
    where: str = ""
    note: str = ""
    _run_name: str = ""

    def config(self, out: str | Path | None = None, **run_fields: Any) -> C.ExperimentConfig:
        """The resolved config ``super-marl train`` would build for this run.

        Args:
            out: parent folder of the run folder (``run.out``); None keeps the default.
            run_fields: further ``run.*`` values (e.g. ``progress=False``).

        Raises:
            GridError: the entry is pending or its flags do not resolve.
        """
        if self.pending:
            raise GridError(f"{self.where}: entry {self.entry!r} is pending ({self.pending})")
        named, labels = named_settings(self.env, self.flags)  # errors name the grid's own keys
        named["run.seed"] = self.seed
        if out is not None:
            named["run.out"] = str(out)
        named.update({f"run.{k}": v for k, v in run_fields.items()})
        labels.update({dotted: f"set: {dotted}" for dotted in self.overrides})
        return resolve(self.env, self.algo, overrides=dict(self.overrides), named=named, labels=labels)

    @property
    def run_name(self) -> str:
        """The run folder name (as ``super-marl train`` names it); ``<env>__<algo>__s<seed>`` when pending."""
        if not self._run_name:
            self._run_name = f"{self.env}__{self.algo}__s{self.seed}" if self.pending else self.config().run_name
        return self._run_name

    def cli_args(self) -> list[str]:
        """The ``super-marl train`` arguments of this run (without ``--out``)."""
        args = ["--env", self.env, "--algo", self.algo, "--seed", str(self.seed)]
        for key, value in self.flags.items():
            f = flag(key)
            if value_type(f) is bool:  # a switch: --x, --no-x where it has one, nothing for a plain flag left off
                if value or f.negatable:
                    args.append(f.flag if value else f"--no-{f.flag[2:]}")
            else:
                args += [f"--{key.replace('_', '-')}", _scalar_text(value)]
        for key, value in self.overrides.items():
            args += ["--set", f"{key}={_scalar_text(value)}"]
        return args

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for Tune's param space and JSON)."""
        return {"entry": self.entry, "env": self.env, "algo": self.algo, "seed": self.seed, "flags": self.flags,
                "overrides": self.overrides, "pending": self.pending, "where": self.where, "note": self.note,
                "_run_name": self.run_name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GridRun:
        """Inverse of :meth:`as_dict`."""
        return cls(**d)


def _scalar_text(value: Any) -> str:
    """A value as the CLI text that parses back to it (YAML flow style for lists/dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


# --------------------------------------------------------------------------------------------------
# loading and validation


@dataclass
class Grid:
    """An expanded grid file."""

    path: Path
    name: str
    description: str
    runs: list[GridRun]

    @property
    def default_out(self) -> Path:
        """``runs/<name>`` next to the current directory."""
        return Path("runs") / self.name

    def select(self, filters: Sequence[str] = ()) -> list[GridRun]:
        """Runs matching every filter (see :func:`matches`)."""
        return [r for r in self.runs if all(matches(r, f) for f in filters)]


FILTER_KEYS = ("env", "algo", "name", "run", "seed", "tag", "status")
"""Keys accepted by ``--filter KEY=GLOB`` (a bare GLOB matches the entry name or the run folder)."""


def parse_filter(text: str) -> tuple[str | None, str]:
    """``"env=pursuit"`` -> ("env", "pursuit"); ``"*quantile*"`` -> (None, "*quantile*").

    Raises:
        GridError: unknown filter key.
    """
    key, eq, pattern = text.partition("=")
    if not eq:
        return None, text
    key = key.strip()
    if key not in FILTER_KEYS:
        raise GridError(f"--filter: expected KEY=GLOB with KEY one of {', '.join(FILTER_KEYS)}, got {text!r}")
    return key, pattern.strip()


def matches(run: GridRun, text: str) -> bool:
    """Whether ``run`` passes ``--filter text`` (glob, case-sensitive; comma = any of several globs)."""
    key, pattern = parse_filter(text)
    fields_ = {
        "env": [run.env], "algo": [run.algo], "name": [run.entry], "run": [run.run_name], "seed": [str(run.seed)],
        "tag": [str(run.flags.get("tag", ""))], "status": ["pending" if run.pending else "runnable"],
    }
    values = [run.entry, run.run_name] if key is None else fields_[key]
    return any(fnmatch.fnmatchcase(v, p) for p in pattern.split(",") for v in values)


def parse_seeds(value: Any, where: str) -> list[int]:
    """``5`` -> [1..5]; ``[1, 3]`` -> [1, 3]; ``"1,2"`` -> [1, 2].

    Raises:
        GridError: anything else.
    """
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",")] if "," in value else int(value)
        except ValueError:
            raise GridError(f"{where}: seeds: expected a count or a list of integers, got {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return list(range(1, value + 1))
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if len(set(value)) != len(value):
            raise GridError(f"{where}: seeds: duplicate seeds in {value}")
        return list(value)
    raise GridError(f"{where}: seeds: expected a count >= 1 or a list of integers, got {value!r}")


def _unknown(key: Any, known: Iterable[str], what: str) -> str:
    hint = difflib.get_close_matches(str(key), list(known), n=1)
    return f"unknown {what} {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else f" (known: {', '.join(known)})")


def _check_flags(block: Any, where: str, what: str, allow: Iterable[str] = ()) -> dict[str, Any]:
    """Validate a mapping of flags (names and value types); returns it as a plain dict."""
    if not isinstance(block, dict):
        raise GridError(f"{where}: {what}: expected a mapping of flags, got {type(block).__name__}")
    known = (*FLAG_NAMES, *allow)
    for key, value in block.items():
        at = f"{where.rsplit(':', 1)[0]}:{_line(block, key)}" if _line(block, key) else where
        if key not in known:
            raise GridError(f"{at}: {what}: {_unknown(key, known, 'key')}")
        if key == "env" and not C.is_env_name(value):
            raise GridError(f"{at}: {what}: env: expected one of {', '.join(C.ENV_NAMES)} or "
                            f"{C.PETTINGZOO_SPELLING}, got {value!r}")
        if key == "algo" and not isinstance(value, str):
            raise GridError(f"{at}: {what}: algo: expected a name, got {value!r}")
        if (key in ("legacy", "quick") or key in _BOOL_FLAG_NAMES) and not isinstance(value, bool):
            raise GridError(f"{at}: {what}: {key}: expected true or false (unquoted), got {value!r}")
        if key == "protocol" and value not in C.PROTOCOLS:
            raise GridError(f"{at}: {what}: protocol: expected one of {', '.join(C.PROTOCOLS)}, got {value!r}")
        if key == "set":
            if not isinstance(value, dict):
                raise GridError(f"{at}: set: expected a mapping of dotted keys, got {type(value).__name__}")
            for dotted, v in value.items():
                sub = f"{where.rsplit(':', 1)[0]}:{_line(value, dotted)}" if _line(value, dotted) else at
                if dotted in GRID_DECIDED:
                    raise GridError(f"{sub}: {what}: set: {dotted}: {GRID_DECIDED[dotted]}")
                if _is_bool_setting(str(dotted)) and not isinstance(v, bool):
                    raise GridError(f"{sub}: {what}: set: {dotted}: expected true or false (unquoted), got {v!r}")
                _type_check({str(dotted): v}, f"{sub}: {what}: set", flag=False)
        elif key in FLAG_KEYS:
            _type_check({FLAG_KEYS[key]: value}, f"{at}: {what}: {key}")
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in block.items()}


_DEFAULTS = C.ExperimentConfig()


def _is_bool_setting(dotted: str) -> bool:
    """Whether ``section.key`` is a boolean setting of the config (``env.kwargs.*`` are the library's: not checked).
    A grid file must give those as YAML true / false: a quoted "false" is text, which one command took for False and
    another (``grid submit``'s ``--super``) for True."""
    section, _, key = dotted.partition(".")
    obj = getattr(_DEFAULTS, section, None)
    return obj is not None and "." not in key and isinstance(getattr(obj, key, None), bool)


_BOOL_FLAG_NAMES = frozenset(name for name, dotted in FLAG_KEYS.items() if _is_bool_setting(dotted))
"""``FLAG_KEYS`` names whose setting is a boolean."""


def _type_check(overrides: dict[str, Any], source: str, flag: bool = True) -> None:
    """Apply ``overrides`` to a scratch config: unknown keys and wrong types raise GridError.

    With ``flag`` the source already names the flag, so the dotted key is left out of the message.
    """
    try:
        C.apply_overrides(C.ExperimentConfig(), nest_rule_params(overrides)[0], source=source)
    except C.ConfigError as exc:
        msg = str(exc)
        if flag:
            for dotted in overrides:
                msg = msg.replace(f"{source} {dotted}:", f"{source}:")
        raise GridError(msg) from None


def _merge(*blocks: dict[str, Any]) -> dict[str, Any]:
    """Later blocks win; ``set`` mappings are merged key by key."""
    out: dict[str, Any] = {}
    for b in blocks:
        for k, v in b.items():
            out[k] = {**out.get(k, {}), **v} if k == "set" else v
    return out


def load_grid(path: str | Path, seeds: Any = None, _seen: tuple[Path, ...] = ()) -> Grid:
    """Read, validate and expand a grid file (and its ``base`` chain).

    Args:
        path: grid file.
        seeds: overrides the file's ``seeds`` (a count, list or "1,2,3"); entry-level seeds still win.

    Returns:
        The grid with every run expanded (entries x sweep points x seeds), in file order, or seed by
        seed with ``order: seed``.

    Raises:
        GridError: the first problem found, as ``FILE:LINE: ...``.
    """
    path = Path(path)
    raw = _load_raw(path, _seen)
    default_seeds = parse_seeds(seeds, "--seeds") if seeds is not None else raw["seeds"]
    runs: list[GridRun] = []
    names: dict[str, str] = {}
    for entry, where in raw["entries"]:
        name = entry["name"]
        if name in names:
            raise GridError(f"{where}: entry {name!r}: duplicate entry name (first at {names[name]})")
        names[name] = where
        runs += _expand_entry(entry, where, raw["defaults"], raw["env_defaults"], default_seeds)
    folders: dict[str, GridRun] = {}
    for run in runs:
        if run.pending:
            continue
        try:
            folder = run.run_name
        except C.ConfigError as exc:
            raise GridError(f"{run.where}: entry {run.entry!r}: {exc}") from None
        if folder in folders:
            other = folders[folder]
            raise GridError(f"{run.where}: entry {run.entry!r}: writes the same run folder {folder!r} as entry "
                            f"{other.entry!r} ({other.where}); give one of them a distinct tag")
        folders[folder] = run
    if raw["order"] == "seed":
        seed_rank = {s: i for i, s in enumerate(default_seeds)}
        runs = sorted(runs, key=lambda r: seed_rank.get(r.seed, len(seed_rank) + r.seed))  # stable: entry order kept
    return Grid(path, raw["name"] or path.stem, raw["description"], runs)


def _load_raw(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """Top-level validation and ``base`` inheritance; entries are returned unexpanded with their location."""
    data = load_grid_yaml(path)
    file = str(path)
    for key in data:
        if key not in GRID_KEYS:
            raise GridError(f"{file}:{_line(data, key)}: {_unknown(key, GRID_KEYS, 'top-level key')}")
    merged: dict[str, Any] = {"name": "", "description": "", "seeds": [1, 2, 3, 4, 5], "defaults": {},
                              "env_defaults": {}, "entries": [], "order": "entry"}
    if "base" in data:
        base = path.parent / str(data["base"])
        if base.resolve() in seen or base.resolve() == path.resolve():
            raise GridError(f"{file}:{_line(data, 'base')}: base: {base} includes itself")
        merged = _load_raw(base, (*seen, path.resolve()))
    at = {k: f"{file}:{_line(data, k)}" for k in data}
    if "name" in data:
        if not isinstance(data["name"], str) or not C.is_folder_name(data["name"]):
            raise GridError(f"{at['name']}: name: expected {C.FOLDER_NAME}, "
                            f"got {data['name']!r}")
        merged["name"] = data["name"]
    if "description" in data:
        if not isinstance(data["description"], (str, int, float)):
            raise GridError(f"{at['description']}: description: expected text, got {type(data['description']).__name__}")
        merged["description"] = str(data["description"])
    if "seeds" in data:
        merged["seeds"] = parse_seeds(data["seeds"], at["seeds"])
    if "defaults" in data:
        merged["defaults"] = _merge(merged["defaults"], _check_flags(data["defaults"], at["defaults"], "defaults"))
    if "env_defaults" in data:
        block = data["env_defaults"]
        if not isinstance(block, dict):
            raise GridError(f"{at['env_defaults']}: env_defaults: expected a mapping env -> flags")
        for env, flags in block.items():
            where = f"{file}:{_line(block, env) or _line(data, 'env_defaults')}"
            if not C.is_env_name(env):
                raise GridError(f"{where}: env_defaults: {_unknown(env, C.ENV_NAMES, 'env')}")
            env = C.canonical_env_name(env)  # pettingzoo:<module>:<function> and pz-<module> are one env
            checked = _check_flags(flags, where, f"env_defaults.{env}")
            if "env" in checked or "algo" in checked:
                raise GridError(f"{where}: env_defaults.{env}: env and algo belong in the entries")
            merged["env_defaults"][env] = _merge(merged["env_defaults"].get(env, {}), checked)
    if "runs" in data:
        entries = data["runs"]
        if not isinstance(entries, list):
            raise GridError(f"{at['runs']}: runs: expected a list of entries, got {type(entries).__name__}")
        for i, entry in enumerate(entries):
            where = f"{file}:{_line(entry) or _line(data, 'runs')}"
            merged["entries"].append((_check_entry(entry, where, i), where))
    if "order" in data:
        if data["order"] not in GRID_ORDERS:
            raise GridError(f"{at['order']}: order: expected one of {', '.join(GRID_ORDERS)}, got {data['order']!r}")
        merged["order"] = data["order"]
    if "only" in data:  # applies to the entries inherited and listed so far, i.e. of this file and its base
        only = _check_only(data["only"], at["only"])
        kept = [(e, w) for e, w in merged["entries"] if any(fnmatch.fnmatchcase(e["name"], g) for g in only)]
        unmatched = [g for g in only if not any(fnmatch.fnmatchcase(e["name"], g) for e, _ in kept)]
        if unmatched:
            raise GridError(f"{at['only']}: only: {unmatched[0]!r} matches no entry of the grid")
        merged["entries"] = kept
    if not merged["entries"]:
        raise GridError(f"{file}: runs: the grid has no entries")
    return merged


GRID_ORDERS = ("entry", "seed")
"""``order:`` entry = every seed of an entry before the next entry; seed = seed 1 of every entry first."""


def _check_only(value: Any, where: str) -> list[str]:
    """``only:`` -> a list of entry-name globs."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(g, str) and g for g in value):
        raise GridError(f"{where}: only: expected a list of entry-name globs, got {value!r}")
    return value


def _check_entry(entry: Any, where: str, index: int) -> dict[str, Any]:
    """Validate one entry of ``runs``."""
    if not isinstance(entry, dict):
        raise GridError(f"{where}: runs[{index}]: expected a mapping with name, env, algo and flags, "
                        f"got {type(entry).__name__} {entry!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise GridError(f"{where}: runs[{index}]: every entry needs a name (a readable label), got {name!r}")
    what = f"entry {name!r}"
    for key in ("env", "algo"):
        if key not in entry:
            raise GridError(f"{where}: {what}: missing {key!r}")
    flags = _check_flags(_sub_mapping(entry, ENTRY_ONLY_KEYS), where, what)
    out = dict(flags, name=name)
    if "pending" in entry:
        if not isinstance(entry["pending"], str) or not entry["pending"]:
            raise GridError(f"{where}: {what}: pending: expected the reason as text, got {entry['pending']!r}")
        out["pending"] = entry["pending"]
    elif entry["algo"] not in C.ALGORITHMS:
        raise GridError(f"{where}: {what}: {_unknown(entry['algo'], C.algo_names(), 'algo')}; mark the entry "
                        f"'pending: <reason>' until its trainer lands")
    if "note" in entry:
        out["note"] = str(entry["note"])
    if "seeds" in entry:
        out["seeds"] = parse_seeds(entry["seeds"], where)
    if "sweep" in entry:
        sweep = entry["sweep"]
        if not isinstance(sweep, dict) or not sweep:
            raise GridError(f"{where}: {what}: sweep: expected a mapping flag -> list of values")
        for key, values in sweep.items():
            if key not in FLAG_KEYS:
                raise GridError(f"{where}: {what}: sweep: {_unknown(key, FLAG_KEYS, 'flag')}")
            if not isinstance(values, list) or not values:
                raise GridError(f"{where}: {what}: sweep: {key}: expected a non-empty list, got {values!r}")
            for v in values:
                _type_check({FLAG_KEYS[key]: v}, f"{where}: {what}: sweep: {key}")
        out["sweep"] = {k: list(v) for k, v in sweep.items()}
    return out


def _sub_mapping(m: dict[str, Any], drop: Iterable[str]) -> _Mapping:
    """A copy of ``m`` without ``drop`` keys that keeps the line numbers."""
    out = _Mapping({k: v for k, v in m.items() if k not in drop})
    out.line, out.key_lines = _line(m), dict(getattr(m, "key_lines", {}))
    return out


def _expand_entry(entry: dict[str, Any], where: str, defaults: dict[str, Any],
                  env_defaults: dict[str, dict[str, Any]], seeds: list[int]) -> list[GridRun]:
    """One entry -> its runs (sweep points x seeds), with defaults merged under the entry's flags."""
    env, algo = C.canonical_env_name(entry["env"]), entry["algo"]
    own = {k: v for k, v in entry.items() if k in FLAG_NAMES}
    flags = _merge(defaults, env_defaults.get(env, {}), own)
    flags.pop("env", None)
    flags.pop("algo", None)
    overrides = dict(flags.pop("set", {}))
    sweep = entry.get("sweep", {})
    points: list[dict[str, Any]] = [dict(zip(sweep, combo)) for combo in itertools.product(*sweep.values())]
    runs: list[GridRun] = []
    for point in points:
        point_flags = dict(flags, **point)
        name = entry["name"]
        relay_only = [k for k in SUPER_ONLY_FLAGS if point_flags.get(k) is not None]
        if relay_only and "super" not in point_flags and not entry.get("pending"):
            raise GridError(f"{where}: entry {name!r}: {relay_only[0]}: is a SUPER setting, but super is not set: add "
                            f"super: true to relay (super: false keeps it off on purpose)")
        if point:
            name += "[" + ",".join(f"{k}={_scalar_text(v)}" for k, v in point.items()) + "]"
            own_tag = [str(flags["tag"])] if flags.get("tag") else []
            point_flags["tag"] = "_".join(own_tag + [f"{k}{_scalar_text(v)}" for k, v in point.items()])
        for seed in entry.get("seeds", seeds):
            runs.append(GridRun(entry=name, env=env, algo=algo, seed=seed, flags=dict(point_flags),
                                overrides=dict(overrides), pending=entry.get("pending"), where=where,
                                note=entry.get("note", "")))
    return runs
