"""Campaigns: grid files expanded into runs, executed locally (Ray Tune) or on a Ray cluster (jobs).

A grid file (``experiments/paper_grid.yaml``, ``bandwidth_sweep.yaml``, ``smoke.yaml``) lists entries
written in the flag vocabulary of ``super-marl train`` (``config.FLAG_KEYS`` plus ``env``, ``algo``,
``legacy``, ``quick`` and dotted ``set`` overrides), so every expanded run is one CLI invocation::

    name: paper                 # campaign name; default output folder runs/<name>
    seeds: 5                    # 5 -> seeds 1..5, or an explicit list [1, 2, 3]
    base: other_grid.yaml       # optional: inherit that file's defaults and runs (this file's keys win)
    defaults: {eval_episodes: 20}               # flags for every run (entries override them)
    env_defaults: {pursuit: {set: {env.kwargs.x_size: 8}}}   # flags for every run of one env
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

GRID_KEYS = ("name", "description", "seeds", "base", "defaults", "env_defaults", "runs")
"""Top-level keys of a grid file."""

SPECIAL_KEYS = ("env", "algo", "legacy", "quick", "set")
"""Entry keys besides ``config.FLAG_KEYS`` that are also ``super-marl train`` options."""

ENTRY_ONLY_KEYS = ("name", "pending", "note", "sweep", "seeds")
"""Entry keys that describe the entry itself rather than a flag."""

FLAG_NAMES = (*C.FLAG_KEYS, *SPECIAL_KEYS)
"""Everything a ``defaults`` / ``env_defaults`` block may hold."""

BOOL_FLAGS = {"super": "super", "parameter_sharing": "parameter-sharing", "wandb": "wandb",
              "legacy": "legacy", "quick": "quick"}
"""Boolean flags -> their ``--X/--no-X`` option stem."""


class GridError(C.ConfigError):
    """A grid file is malformed: the message starts with ``FILE:LINE`` and names the entry."""


# --------------------------------------------------------------------------------------------------
# YAML with line numbers


class _Mapping(dict):  # type: ignore[type-arg]
    """A YAML mapping that remembers its own line and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[str, int]


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings are ``_Mapping``s and which rejects duplicate keys."""


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
    """Parse a grid file with line numbers; syntax errors become ``GridError('FILE:LINE: ...')``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GridError(f"{path}: cannot read grid file ({exc.strerror})") from exc
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
        env: environment registry key.
        algo: algorithm registry key.
        seed: run seed.
        flags: named flags (``config.FLAG_KEYS`` names plus ``legacy`` / ``quick``) with their values.
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
        named = named_overrides(self.env, self.flags)
        named["run.seed"] = self.seed
        if out is not None:
            named["run.out"] = str(out)
        named.update({f"run.{k}": v for k, v in run_fields.items()})
        return C.resolve(self.env, self.algo, overrides=dict(self.overrides), named=named)

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
            if key in BOOL_FLAGS:
                stem = BOOL_FLAGS[key]
                args.append(f"--{stem}" if value else f"--no-{stem}")
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


def named_overrides(env: str, flags: dict[str, Any]) -> dict[str, Any]:
    """Flags -> dotted overrides in the CLI's order: quick profile, named flags, then --legacy."""
    named: dict[str, Any] = {}
    if flags.get("quick"):
        profiles = C.load_profiles().get("quick", {})
        if env not in profiles:
            raise C.ConfigError(f"quick: no quick profile for env {env!r} in {C.EXPERIMENTS_DIR / 'profiles.yaml'}")
        named.update(profiles[env])
    named.update({C.FLAG_KEYS[k]: v for k, v in flags.items() if k in C.FLAG_KEYS})
    if flags.get("legacy"):
        named.update(C.legacy_settings(flags.get("super_mode")))
    return named


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
        if key == "env" and value not in C.ENV_NAMES:
            raise GridError(f"{at}: {what}: env: expected one of {', '.join(C.ENV_NAMES)}, got {value!r}")
        if key == "algo" and not isinstance(value, str):
            raise GridError(f"{at}: {what}: algo: expected a name, got {value!r}")
        if key in ("legacy", "quick") and not isinstance(value, bool):
            raise GridError(f"{at}: {what}: {key}: expected true or false, got {value!r}")
        if key == "set":
            if not isinstance(value, dict):
                raise GridError(f"{at}: set: expected a mapping of dotted keys, got {type(value).__name__}")
            for dotted, v in value.items():
                sub = f"{where.rsplit(':', 1)[0]}:{_line(value, dotted)}" if _line(value, dotted) else at
                _type_check({str(dotted): v}, f"{sub}: {what}: set", flag=False)
        elif key in C.FLAG_KEYS:
            _type_check({C.FLAG_KEYS[key]: value}, f"{at}: {what}: {key}")
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in block.items()}


def _type_check(overrides: dict[str, Any], source: str, flag: bool = True) -> None:
    """Apply ``overrides`` to a scratch config: unknown keys and wrong types raise GridError.

    With ``flag`` the source already names the flag, so the dotted key is left out of the message.
    """
    try:
        C.apply_overrides(C.ExperimentConfig(), overrides, source=source)
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
        The grid with every run expanded (entries x sweep points x seeds), in file order.

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
    return Grid(path, raw["name"] or path.stem, raw["description"], runs)


def _load_raw(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """Top-level validation and ``base`` inheritance; entries are returned unexpanded with their location."""
    data = load_grid_yaml(path)
    file = str(path)
    for key in data:
        if key not in GRID_KEYS:
            raise GridError(f"{file}:{_line(data, key)}: {_unknown(key, GRID_KEYS, 'top-level key')}")
    merged: dict[str, Any] = {"name": "", "description": "", "seeds": [1, 2, 3, 4, 5], "defaults": {},
                              "env_defaults": {}, "entries": []}
    if "base" in data:
        base = path.parent / str(data["base"])
        if base.resolve() in seen or base.resolve() == path.resolve():
            raise GridError(f"{file}:{_line(data, 'base')}: base: {base} includes itself")
        merged = _load_raw(base, (*seen, path.resolve()))
    at = {k: f"{file}:{_line(data, k)}" for k in data}
    if "name" in data:
        if not isinstance(data["name"], str) or not data["name"] or "/" in data["name"]:
            raise GridError(f"{at['name']}: name: expected a folder name, got {data['name']!r}")
        merged["name"] = data["name"]
    if "description" in data:
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
            if env not in C.ENV_NAMES:
                raise GridError(f"{where}: env_defaults: {_unknown(env, C.ENV_NAMES, 'env')}")
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
    if not merged["entries"]:
        raise GridError(f"{file}: runs: the grid has no entries")
    return merged


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
    elif entry["algo"] not in C.ALGOS:
        raise GridError(f"{where}: {what}: {_unknown(entry['algo'], C.ALGOS, 'algo')}; mark the entry "
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
            if key not in C.FLAG_KEYS:
                raise GridError(f"{where}: {what}: sweep: {_unknown(key, C.FLAG_KEYS, 'flag')}")
            if not isinstance(values, list) or not values:
                raise GridError(f"{where}: {what}: sweep: {key}: expected a non-empty list, got {values!r}")
            for v in values:
                _type_check({C.FLAG_KEYS[key]: v}, f"{where}: {what}: sweep: {key}")
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
    env, algo = entry["env"], entry["algo"]
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
        if point:
            name += "[" + ",".join(f"{k}={_scalar_text(v)}" for k, v in point.items()) + "]"
            own_tag = [str(flags["tag"])] if flags.get("tag") else []
            point_flags["tag"] = "_".join(own_tag + [f"{k}{_scalar_text(v)}" for k, v in point.items()])
        for seed in entry.get("seeds", seeds):
            runs.append(GridRun(entry=name, env=env, algo=algo, seed=seed, flags=dict(point_flags),
                                overrides=dict(overrides), pending=entry.get("pending"), where=where,
                                note=entry.get("note", "")))
    return runs


# --------------------------------------------------------------------------------------------------
# executing one run: fresh, resumed or refused

BACKENDS = ("native", "rllib")
"""Trainer backends ``execute`` can call."""


def trainer_for(backend: str) -> Any:
    """The ``train(cfg, folder, logger, progress) -> Summary`` function of a backend (imported lazily).

    Raises:
        ConfigError: unknown or unavailable backend.
    """
    if backend == "rllib":
        try:
            from suPER.core.rllib_runner import train_rllib  # type: ignore[import-not-found]
        except ImportError as exc:
            raise C.ConfigError(f"--backend rllib: not available in this version ({exc})") from exc
        return train_rllib
    if backend != "native":
        raise C.ConfigError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    from suPER.native.dqn import train

    return train


def opponent_file(cfg: C.ExperimentConfig) -> dict[str, Any]:
    """Which opponent weights a run plays against (path and SHA-256), for its manifest: ``pretrained``
    names a file that a later version of the repository may replace."""
    import hashlib

    if cfg.env.name not in ("battle", "adversarial_pursuit") or cfg.env.opponent in ("random", "learning"):
        return {}
    path = (C.EXPERIMENTS_DIR / "opponents" / f"{cfg.env.name}.safetensors" if cfg.env.opponent == "pretrained"
            else Path(cfg.env.opponent))
    if not path.is_file():
        return {}
    return {"opponent_file": str(path), "opponent_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def execute(cfg: C.ExperimentConfig, overwrite: bool = False, backend: str = "native", progress: Any = None,
            on_start: Any = None, extra_manifest: dict[str, Any] | None = None) -> Any:
    """Train one run into ``cfg.run.out/cfg.run_name``: a fresh start, a resume, or a refusal.

    * a finished run is refused (``RunFolderError``) unless ``overwrite``;
    * an unfinished run (manifest ``running`` / ``failed`` / ``interrupted``) with ``checkpoints/latest.pt``
      is resumed from that checkpoint, provided its config.json matches ``cfg`` (up to
      ``config.VOLATILE_RUN_KEYS``);
    * anything else starts fresh (old metrics.csv and latest.pt are removed).

    The manifest records status, provenance and every resume; when the run finishes the large
    ``latest.pt`` is removed (``final.pt`` stays) and ``curve.png`` is drawn.

    Args:
        cfg: validated config.
        overwrite: replace a finished run (or an unfinished one) instead of refusing / resuming it.
        backend: trainer backend (``BACKENDS``).
        progress: per-fragment callback ``(env_steps, stats)`` passed to the trainer.
        on_start: called as ``on_start(folder, resumed)`` once the folder is ready, before training.
        extra_manifest: extra manifest fields (e.g. the grid entry).

    Returns:
        The trainer's Summary.
    """
    import json
    import socket
    import time

    from suPER import runs
    from suPER.plotting import plot_curve

    train_fn = trainer_for(backend)  # before touching the disk: an unavailable backend writes nothing
    folder = runs.prepare_run_folder(cfg.run.out, cfg.run_name, overwrite=overwrite)
    previous = folder.read_manifest()
    latest = folder.checkpoints / "latest.pt"
    resume = not overwrite and latest.exists() and previous.get("status") != runs.FINISHED
    if resume:
        try:
            old = json.loads(folder.config.read_text())
        except (OSError, ValueError):
            old = None
        if old is None or C.without_volatile(old) != C.without_volatile(cfg.to_dict()):
            diff = _first_difference(C.without_volatile(old or {}), C.without_volatile(cfg.to_dict()))
            raise runs.RunFolderError(
                f"--out: {folder.path} holds an unfinished run of a different configuration ({diff}); pass "
                f"--overwrite to start it over, or use another --tag")
    else:
        folder.metrics.unlink(missing_ok=True)
        latest.unlink(missing_ok=True)
    runs.atomic_write_json(folder.config, cfg.to_dict())
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if resume:
        manifest = dict(previous, status=runs.RUNNING, end_time=None, **(extra_manifest or {}))
        manifest["resumed"] = [*previous.get("resumed", []), {"time": now, "after_status": previous.get("status"),
                                                               "host": socket.gethostname()}]
    else:
        manifest = runs.new_manifest(cfg.run.seed, extra={"run_name": cfg.run_name, "tag": cfg.run.tag,
                                                          "backend": backend, **(extra_manifest or {})})
    manifest.update(opponent_file(cfg))
    if cfg.run.wandb and not manifest.get("wandb_id"):
        manifest["wandb_id"] = f"{cfg.run_name}-{int(time.time())}"[-64:]
    runs.atomic_write_json(folder.manifest, manifest)
    logger: runs.Logger = runs.NoLogger()
    if cfg.run.wandb:
        logger = runs.WandbLogger(folder.path, cfg.run.wandb_project, cfg.run.wandb_group, cfg.run_name,
                                  cfg.to_dict(), mode=cfg.run.wandb_mode, tags=[cfg.run.tag] if cfg.run.tag else None,
                                  run_id=manifest["wandb_id"])
    if on_start is not None:
        on_start(folder, resume)
    status = runs.FAILED
    try:
        summary = train_fn(cfg, folder, logger=logger, progress=progress)
        status = runs.FINISHED
    except KeyboardInterrupt:
        status = runs.INTERRUPTED
        raise
    finally:
        logger.close()
        manifest.update(status=status, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        runs.atomic_write_json(folder.manifest, manifest)
    manifest.update(env_steps=summary.env_steps, final_team_return=summary.final_team_return,
                    env_steps_per_sec=summary.env_steps_per_sec, wall_time_s=summary.wall_time_s,
                    timings_s=summary.timings)
    runs.atomic_write_json(folder.manifest, manifest)
    latest.unlink(missing_ok=True)  # only unfinished runs need it; final.pt stays
    plot_curve([folder.path], folder.curve, title=cfg.run_name)
    return summary


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    """``"dqn.lr: 0.001 vs 0.0003"`` for the first differing key of two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
        return "identical"
    return f"{prefix.rstrip('.')}: {a!r} in the folder vs {b!r} now"


# --------------------------------------------------------------------------------------------------
# many runs: Ray Tune, one trial per run


@dataclass
class Plan:
    """What ``grid run`` will do with the selected runs of a grid."""

    todo: list[GridRun]
    """runs to start fresh or resume"""
    finished: list[GridRun]
    """runs whose folder already holds a finished run (skipped)"""
    pending: list[GridRun]
    """entries whose trainer has not landed (skipped)"""
    resumable: list[str] = field(default_factory=list)
    """run folders of ``todo`` that will resume from a checkpoint"""


def plan_runs(runs_: Sequence[GridRun], out: Path) -> Plan:
    """Sort runs into to-do / finished / pending, and refuse unfinished folders of another configuration.

    Raises:
        RunFolderError: an unfinished run folder holds a different configuration (nothing has run yet).
    """
    import json

    from suPER import runs

    plan = Plan([], [], [])
    for run in runs_:
        if run.pending:
            plan.pending.append(run)
            continue
        folder = runs.RunFolder(out / run.run_name)
        status = folder.status()
        if status == runs.FINISHED:
            plan.finished.append(run)
            continue
        if status is not None and (folder.checkpoints / "latest.pt").exists():
            cfg = run.config(out=out)
            try:
                old = json.loads(folder.config.read_text())
            except (OSError, ValueError):
                old = {}
            if C.without_volatile(old) != C.without_volatile(cfg.to_dict()):
                raise runs.RunFolderError(
                    f"--out: {folder.path} holds an unfinished run of a different configuration "
                    f"({_first_difference(C.without_volatile(old), C.without_volatile(cfg.to_dict()))}); "
                    f"remove it or choose another --out")
            plan.resumable.append(run.run_name)
        plan.todo.append(run)
    return plan


def _trainable(config: dict[str, Any]) -> None:
    """Ray Tune function trainable: build the run's config and train it into its run folder."""
    import time

    from ray import tune

    run = GridRun.from_dict(config["run"])
    cfg = run.config(out=config["out"], progress=False, threads=config["threads"], device=config["device"],
                     **config.get("run_fields", {}))
    budget = cfg.run.num_timesteps
    last = [0.0]

    def progress(env_steps: int, stats: dict[str, float]) -> None:
        now = time.monotonic()
        if now - last[0] >= config["report_every_s"]:
            last[0] = now
            tune.report({"env_steps": env_steps, "budget": budget, "team_return": stats.get("team_return"),
                         "done": False})

    summary = execute(cfg, progress=progress, extra_manifest={"grid": config["grid"], "grid_entry": run.entry})
    tune.report({"env_steps": summary.env_steps, "budget": budget, "team_return": summary.final_team_return,
                 "env_steps_per_sec": summary.env_steps_per_sec, "done": True})


def init_ray(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> str:
    """Connect to ``address`` (or ``RAY_ADDRESS``), or start Ray embedded on loopback only.

    The embedded instance has no dashboard and listens on 127.0.0.1; Ray's token authentication is
    disabled for it (``RAY_AUTH_MODE=disabled`` unless set), since nothing outside this machine can
    reach it.

    Returns:
        ``"cluster <address>"`` or ``"local"``.
    """
    import os

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, log_to_driver=False)
        return f"cluster {address}"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=num_cpus or os.cpu_count(), num_gpus=num_gpus, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=True,
             logging_level="WARNING")
    return "local"


def run_grid(grid: Grid, runs_: Sequence[GridRun], out: Path, cpus_per_trial: float = 1.0,
             gpus_per_trial: float = 0.0, address: str | None = None, max_failures: int = 1,
             console: Any = None, run_fields: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """Run the selected runs of ``grid`` through Ray Tune, one trial per run, each into ``out/<run name>``.

    Finished runs are skipped, unfinished ones resume from their latest checkpoint (in the trial, via
    :func:`execute`), pending entries are skipped. A trial that fails is retried ``max_failures`` times
    (each retry resumes from the run's checkpoint).

    Args:
        grid: the expanded grid.
        runs_: the runs to consider (e.g. ``grid.select(filters)``).
        out: campaign folder holding the run folders.
        cpus_per_trial: CPUs reserved per run (also its torch thread count, rounded, at least 1).
        gpus_per_trial: GPUs reserved per run (> 0 puts the networks on CUDA).
        address: Ray cluster to use; None = ``RAY_ADDRESS`` or an embedded local instance.
        max_failures: retries per failing trial.
        console: rich console for the live table (None: a new one on stderr).
        run_fields: ``run.*`` settings for every run that do not change results (W&B logging).

    Returns:
        Run names by outcome: ``finished`` (now), ``skipped`` (finished before), ``failed``, ``pending``.
    """
    import sys
    import time

    from rich.console import Console

    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    out = Path(out).resolve()
    plan = plan_runs(runs_, out)
    outcome: dict[str, list[str]] = {"finished": [], "skipped": [r.run_name for r in plan.finished], "failed": [],
                                     "pending": [r.entry for r in plan.pending]}
    if plan.finished:
        console.print(f"skipping {len(plan.finished)} finished run(s)")
    if plan.pending:
        console.print(f"skipping {len(plan.pending)} pending run(s) (trainer not available yet)")
    if not plan.todo:
        console.print("nothing to run")
        return outcome
    console.print(f"{len(plan.todo)} run(s) to train ({len(plan.resumable)} resuming from a checkpoint) -> {out}")

    import os

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our live table replaces Tune's console output
    import ray
    from ray import tune

    where = init_ray(address)
    try:
        threads = max(1, int(cpus_per_trial))
        param = {"run": tune.grid_search([r.as_dict() for r in plan.todo]), "out": str(out), "threads": threads,
                 "device": "cuda" if gpus_per_trial > 0 else "cpu", "grid": grid.name, "report_every_s": 2.0,
                 "run_fields": dict(run_fields or {})}
        table = _live_table(console, [r.run_name for r in plan.todo], where)

        def trial_name(trial: Any) -> str:
            return _trial_run_name(trial.config)

        tuner = tune.Tuner(
            tune.with_resources(_trainable, {"cpu": cpus_per_trial, "gpu": gpus_per_trial}),
            param_space=param,
            tune_config=tune.TuneConfig(trial_name_creator=trial_name, trial_dirname_creator=trial_name),
            run_config=tune.RunConfig(name=f"{grid.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                      storage_path=str(out / ".tune"), verbose=0, log_to_file=True,
                                      failure_config=tune.FailureConfig(max_failures=max_failures),
                                      callbacks=[table]),
        )
        with table:
            results = tuner.fit()
        for res in results:
            name = _trial_run_name(res.config)
            (outcome["failed"] if res.error else outcome["finished"]).append(name)
            if res.error:
                console.print(f"[red]failed[/] {name}: {str(res.error).strip().splitlines()[-1]} "
                              f"(log: {res.path})")
    finally:
        ray.shutdown()
    return outcome


def _live_table(console: Any, run_names: Sequence[str], where: str) -> Any:
    """A Tune callback that keeps a rich live table of every trial's progress (use it as a context manager)."""
    import time

    from ray.tune import Callback
    from rich.live import Live
    from rich.table import Table

    class LiveTable(Callback):
        def __init__(self, console: Any, run_names: Sequence[str], where: str) -> None:
            # no closure over these: Tune pickles its callbacks (the class goes by value)
            self.rows: dict[str, dict[str, Any]] = {n: {"status": "PENDING"} for n in run_names}
            self.title = f"Ray Tune ({where})"
            self.console: Any = console
            self.live: Any = None
            self.t0 = time.monotonic()

        def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks; the live display stays here
            return {"rows": self.rows, "title": self.title, "console": None, "live": None, "t0": self.t0}

        def __enter__(self) -> LiveTable:
            self.live = Live(self.render(), console=self.console, refresh_per_second=1, transient=False)
            self.live.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            if self.live is not None:
                self.live.update(self.render())
                self.live.__exit__(None, None, None)
                self.console.line()

        def render(self) -> Table:
            done = sum(r["status"] == "FINISHED" for r in self.rows.values())
            table = Table(title=f"{self.title}: {done}/{len(self.rows)} runs finished, "
                                f"{time.monotonic() - self.t0:.0f} s", title_justify="left")
            for col in ("run", "status", "env steps", "eval team return", "steps/s"):
                table.add_column(col, overflow="fold")
            for name, r in self.rows.items():
                steps = f"{r['env_steps']}/{r['budget']}" if "env_steps" in r else "-"
                ret, sps = r.get("team_return"), r.get("env_steps_per_sec")
                table.add_row(name, r["status"], steps, "-" if ret is None or ret != ret else f"{ret:.2f}",
                              "-" if sps is None else f"{sps:.0f}")
            return table

        def _set(self, trial: Any, **values: Any) -> None:
            self.rows.setdefault(_trial_run_name(trial.config), {}).update(values)
            if self.live is not None:
                self.live.update(self.render())

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="RUNNING")

        def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="RETRYING")

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            keys = ("env_steps", "budget", "team_return", "env_steps_per_sec")
            self._set(trial, **{k: result[k] for k in keys if k in result})

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="FINISHED")

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._set(trial, status="ERROR")

    return LiveTable(console, run_names, where)


def _trial_run_name(config: dict[str, Any]) -> str:
    """The run folder name of a trial, from its config (``{"run": GridRun.as_dict(), ...}``)."""
    return str(config["run"]["_run_name"])


# --------------------------------------------------------------------------------------------------
# cluster: Ray Job Submission (one job per run, or one job per grid)

RUNTIME_ENV_FILE = C.ROOT / "ray_runtime.yaml"
"""Runtime environment of submitted jobs (ships the repository as the jobs' working_dir)."""

SECRET_ENV_VARS = ("WANDB_API_KEY",)
"""Taken from the submitter's environment at submit time; never written to the repository."""


class ClusterError(C.ConfigError):
    """The Ray cluster cannot be reached or refused a job."""


def dashboard_url(address: str | None) -> str:
    """``host:port`` / ``http://host:port`` / None (``RAY_ADDRESS``, else 127.0.0.1:8265) -> ``http://host:port``."""
    import os

    address = address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"
    if address.startswith("ray://") or address == "auto":
        raise ClusterError(f"--address: job submission needs the dashboard's HTTP address (http://HOST:8265), "
                           f"got {address!r}")
    return address if address.startswith(("http://", "https://")) else f"http://{address}"


def check_cluster(address: str, timeout_s: float = 10.0) -> str:
    """Ask the cluster's dashboard for its version; fail within ``timeout_s`` with a clear message.

    Returns:
        The cluster's Ray version.

    Raises:
        ClusterError: nothing answers at ``address``.
    """
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=timeout_s) as resp:  # noqa: S310 - http(s) only
            return str(json.loads(resp.read().decode()).get("ray_version", "?"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ClusterError(f"--address: no Ray cluster answers at {address} ({reason}); start one (ray up "
                           f"cluster/aws.yaml), forward its dashboard (ray dashboard cluster/aws.yaml) or fix "
                           f"--address / RAY_ADDRESS") from None


def runtime_env(path: str | Path = RUNTIME_ENV_FILE, with_secrets: bool = True) -> dict[str, Any]:
    """The jobs' runtime environment: ``ray_runtime.yaml`` with the repository as working_dir, plus
    ``SECRET_ENV_VARS`` copied from this process's environment when ``with_secrets``."""
    import os

    try:
        env = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterError(f"--runtime-env: cannot read {path} ({exc})") from exc
    env["working_dir"] = str(C.ROOT)
    env_vars = {k: str(v) for k, v in (env.get("env_vars") or {}).items()}
    if with_secrets:
        env_vars.update({k: os.environ[k] for k in SECRET_ENV_VARS if os.environ.get(k)})
    env["env_vars"] = env_vars
    return env


@dataclass
class Job:
    """One job to submit: its id, the shell command it runs on the cluster and its resources."""

    submission_id: str
    entrypoint: str
    num_cpus: float
    num_gpus: float
    runs: list[str]


def _out_arg(out: str) -> str:
    """Shell text for ``--out``: a leading ``~/`` stays unquoted so it expands on the cluster node."""
    import shlex

    return "~/" + shlex.quote(out[2:]) if out.startswith("~/") else shlex.quote(out)


def plan_jobs(grid: Grid, runs_: Sequence[GridRun], out: str, per: str = "run", cpus: float = 1.0,
              gpus: float = 0.0, filters: Sequence[str] = (), seeds: str | None = None,
              wandb: bool | None = None, wandb_project: str = "super-marl") -> list[Job]:
    """The jobs that submit ``runs_``: one ``super-marl train`` per run, or one ``super-marl grid run``.

    Args:
        grid: the grid (its file must lie inside the repository, which is shipped as working_dir).
        runs_: selected runs (pending ones are left out).
        out: run folders' parent on the cluster (``~/...`` expands there; use shared storage on
            multi-node clusters).
        per: ``run`` or ``grid``.
        cpus: CPUs per run (the job's entrypoint resources per run; per trial for ``grid``).
        gpus: GPUs per run.
        filters: ``--filter`` values (``grid`` jobs repeat them).
        seeds: ``--seeds`` value (``grid`` jobs repeat it).
        wandb: log online to W&B; None = when WANDB_API_KEY is set here.
        wandb_project: W&B project (the group is the grid name).
    """
    import os
    import shlex
    import time

    if per not in ("run", "grid"):
        raise GridError(f"--per: expected run or grid, got {per!r}")
    if wandb is None:
        wandb = bool(os.environ.get("WANDB_API_KEY"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    todo = [r for r in runs_ if not r.pending]
    wb = ["--wandb", "--wandb-mode", "online", "--wandb-project", wandb_project, "--wandb-group", grid.name] \
        if wandb else []
    if per == "run":
        jobs = []
        for r in todo:
            args = ["python", "-m", "suPER.cli", "train", *r.cli_args(), "--no-progress", "--skip-finished",
                    "--threads", str(max(1, int(cpus))), *(["--device", "cuda"] if gpus > 0 else []), *wb]
            jobs.append(Job(f"{grid.name}-{r.run_name}-{stamp}", f"{shlex.join(args)} --out {_out_arg(out)}",
                            cpus, gpus, [r.run_name]))
        return jobs
    try:
        rel = Path(grid.path).resolve().relative_to(C.ROOT)
    except ValueError:
        raise GridError(f"{grid.path}: a grid submitted as one job must lie inside the repository {C.ROOT} "
                        f"(it is shipped as the job's working_dir)") from None
    args = ["python", "-m", "suPER.cli", "grid", "run", str(rel), "--cpus-per-trial", str(cpus),
            "--gpus-per-trial", str(gpus), *[a for f in filters for a in ("--filter", f)],
            *(["--seeds", seeds] if seeds else []), *wb]
    return [Job(f"{grid.name}-grid-{stamp}", f"{shlex.join(args)} --out {_out_arg(out)}", 0.0, 0.0,
                [r.run_name for r in todo])]


def submit_jobs(jobs: Sequence[Job], address: str, env: dict[str, Any], grid_name: str) -> list[str]:
    """Submit ``jobs`` through ``ray.job_submission.JobSubmissionClient``.

    Returns:
        The submission ids.

    Raises:
        ClusterError: the cluster is unreachable (checked first, within seconds) or refuses a job.
    """
    check_cluster(address)
    from ray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(address)
        ids = []
        for job in jobs:
            ids.append(client.submit_job(entrypoint=job.entrypoint, submission_id=job.submission_id, runtime_env=env,
                                         entrypoint_num_cpus=job.num_cpus or None,
                                         entrypoint_num_gpus=job.num_gpus or None,
                                         metadata={"grid": grid_name, "runs": ",".join(job.runs)[:1000]}))
        return ids
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"--address {address}: {str(exc).strip().splitlines()[-1]}") from exc


def wait_for_jobs(address: str, ids: Sequence[str], poll_s: float = 2.0, timeout_s: float | None = None,
                  on_change: Any = None) -> dict[str, str]:
    """Poll until every job is terminal (or ``timeout_s`` passed).

    Returns:
        Submission id -> final status (``SUCCEEDED``, ``FAILED``, ``STOPPED``, or the last seen status).
    """
    import time

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    status: dict[str, str] = {}
    t0 = time.monotonic()
    while True:
        for jid in ids:
            if status.get(jid) in ("SUCCEEDED", "FAILED", "STOPPED"):
                continue
            new = str(client.get_job_status(jid).value)
            if new != status.get(jid) and on_change is not None:
                on_change(jid, new)
            status[jid] = new
        if all(s in ("SUCCEEDED", "FAILED", "STOPPED") for s in status.values()):
            return status
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            return status
        time.sleep(poll_s)
