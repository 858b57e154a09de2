"""The meta-game payoff table: every policy of one side against every policy of the other.

Sides: the env's learning team ("team": battle blue, adversarial pursuit prey) is the row side, its
opponent team ("opponent": red, predators) the column side. Entry (i, j) holds the match of team policy i
against opponent policy j: E greedy episodes seeded ``episode_seeds(seed, 0, E)`` (the same episodes for
every pair: common random numbers), played ``MATCH_BATCH`` games at a time in lockstep
(``suPER.opponents.make_batch`` / ``play``, outcomes by the env record's ``outcome``), all from the team's
point of view: win / loss / tie rates with 95% Wilson intervals, mean team and opponent returns with 95%
percentile-bootstrap intervals, the number of episodes.

The meta-game's payoff is the team's expected outcome ``u_ij = win_ij - loss_ij`` in [-1, 1] (win +1,
tie 0, loss -1), so the opponent's payoff is ``-u_ij``: zero-sum by construction, also with ties. The
opponent's win rate against team policy i is ``loss_ij`` (= ``1 - win_ij - tie_ij``).

``payoff.csv`` holds one row per entry; ``fill`` computes only the pairs it lacks and rewrites the file
(atomically) after every entry, so a killed run keeps every finished match.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from suPER import config as C
from suPER.opponents import MATCH_BATCH, make_batch, play, team_policy
from suPER.runs import atomic_write_csv

COLUMNS = ("team_policy", "opponent_policy", "episodes", "seed", "win_rate", "win_lo", "win_hi", "loss_rate",
           "loss_lo", "loss_hi", "tie_rate", "team_return", "team_return_lo", "team_return_hi", "opponent_return",
           "opponent_return_lo", "opponent_return_hi", "episode_len", "wall_s")
"""payoff.csv's columns (rates and returns from the team's point of view)"""
_TEXT = ("team_policy", "opponent_policy")
_INT = ("episodes", "seed")


def play_match(env_cfg: C.EnvConfig, team: str, opponent: str, episodes: int, seed: int) -> dict[str, Any]:
    """One entry: ``episodes`` greedy episodes of team ``team`` against opponent ``opponent``.

    Args:
        env_cfg: the env (its ``opponent`` / ``swap_teams`` are replaced).
        team: ``random`` or a team file of the learning team.
        opponent: ``random`` or a team (or mixture) file of the opponent team.
        episodes: E >= 1.
        seed: the match seed.

    Returns:
        The entry's fields (``COLUMNS`` without the policy names).
    """
    t0 = time.perf_counter()
    cfg = replace(env_cfg, opponent=opponent, opponent_epsilon=0.0, swap_teams=False)
    env = make_batch(cfg, min(episodes, MATCH_BATCH), seed=seed)
    try:
        s = play(env, team_policy(team, env, seed), episodes, seed).summary(seed)
    finally:
        env.close()
    return {"episodes": s["episodes"], "seed": seed, "win_rate": s["win_rate"], "win_lo": s["win_rate_ci"][0],
            "win_hi": s["win_rate_ci"][1], "loss_rate": s["loss_rate"], "loss_lo": s["loss_rate_ci"][0],
            "loss_hi": s["loss_rate_ci"][1], "tie_rate": s["tie_rate"], "team_return": s["team_return"],
            "team_return_lo": s["team_return_ci"][0], "team_return_hi": s["team_return_ci"][1],
            "opponent_return": s["opponent_return"], "opponent_return_lo": s["opponent_return_ci"][0],
            "opponent_return_hi": s["opponent_return_ci"][1], "episode_len": s["episode_len"],
            "wall_s": time.perf_counter() - t0}


class PayoffTable:
    """Entries keyed by (team policy, opponent policy); see the module docstring.

    Attributes:
        entries: (team policy, opponent policy) -> the entry's fields (``COLUMNS``).
    """

    def __init__(self, entries: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.entries: dict[tuple[str, str], dict[str, Any]] = dict(entries or {})

    @classmethod
    def load(cls, path: Path) -> PayoffTable:
        """Read ``payoff.csv`` (an absent file is an empty table)."""
        from suPER.runs import RunFolderError

        path = Path(path)
        if not path.exists():
            return cls()
        entries = {}
        try:
            with open(path, newline="") as fh:
                reader = csv.DictReader(fh)
                if reader.fieldnames is None or not set(COLUMNS) <= set(reader.fieldnames):
                    raise ValueError(f"a file without the columns {', '.join(COLUMNS)}")
                for n, row in enumerate(reader, start=2):
                    try:
                        entry: dict[str, Any] = {k: (v if k in _TEXT else int(v) if k in _INT else float(v))
                                                 for k, v in row.items()}
                    except (TypeError, ValueError):
                        raise ValueError(f"a non-number on line {n}") from None
                    entries[(entry["team_policy"], entry["opponent_policy"])] = entry
        except (OSError, ValueError, csv.Error) as exc:  # UnicodeDecodeError (a binary file) is a ValueError
            why = str(exc) if not isinstance(exc, UnicodeDecodeError) else "bytes that are not text"
            raise RunFolderError(f"{path}: expected the payoff table (CSV), got {why}", "repair it",
                                 f"start {path.parent} over") from None
        return cls(entries)

    def save(self, path: Path) -> None:
        """Write ``payoff.csv`` atomically, rows in insertion order."""
        atomic_write_csv(Path(path), list(self.entries.values()), columns=COLUMNS)

    def missing(self, team_ids: Sequence[str], opponent_ids: Sequence[str]) -> list[tuple[str, str]]:
        """The pairs of ``team_ids x opponent_ids`` without an entry, row by row."""
        return [(i, j) for i in team_ids for j in opponent_ids if (i, j) not in self.entries]

    def fill(self, env_cfg: C.EnvConfig, team: dict[str, str], opponent: dict[str, str], episodes: int, seed: int,
             path: Path | None = None, on_entry: Callable[[dict[str, Any]], None] | None = None,
             match: Callable[..., dict[str, Any]] = play_match, pool: Any = None) -> int:
        """Play the missing entries of ``team x opponent`` (saving ``path`` after each one).

        Args:
            env_cfg: the env.
            team: team policy name -> ``random`` or its team file.
            opponent: opponent policy name -> ``random`` or its team file.
            episodes: E per entry.
            seed: the match seed of every entry.
            path: ``payoff.csv`` to rewrite after every new entry (None: keep in memory).
            on_entry: called with each new entry.
            match: the match function (``play_match``), when ``pool`` is None.
            pool: runs the matches in parallel (``parallel.RayMatchPool``: ``imap(calls)`` yields
                (call index, entry) as they finish); None = one after the other here.

        Returns:
            How many entries were played.
        """
        todo = self.missing(list(team), list(opponent))
        calls = [(env_cfg, team[i], opponent[j], episodes, seed) for i, j in todo]
        results = pool.imap(calls) if pool is not None else ((k, match(*c)) for k, c in enumerate(calls))
        for k, result in results:
            i, j = todo[k]
            entry = {"team_policy": i, "opponent_policy": j, **result}
            self.entries[(i, j)] = entry
            if path is not None:
                self.save(path)
            if on_entry is not None:
                on_entry(entry)
        return len(todo)

    def matrix(self, team_ids: Sequence[str], opponent_ids: Sequence[str], key: str = "utility") -> np.ndarray:
        """[I, J] of one field (``utility`` = ``win_rate - loss_rate``, the meta-game payoff)."""
        def value(e: dict[str, Any]) -> float:
            return float(e["win_rate"] - e["loss_rate"]) if key == "utility" else float(e[key])
        missing = self.missing(team_ids, opponent_ids)
        if missing:
            raise KeyError(f"payoff table: no entry for {missing[0]} (and {len(missing) - 1} more)")
        return np.array([[value(self.entries[(i, j)]) for j in opponent_ids] for i in team_ids], dtype=np.float64)

    def opponent_view(self, team_ids: Sequence[str], opponent_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The table from the opponent's side, [J, I]: its win rate is the team's loss rate and vice versa."""
        return {"win_rate": self.matrix(team_ids, opponent_ids, "loss_rate").T,
                "loss_rate": self.matrix(team_ids, opponent_ids, "win_rate").T,
                "tie_rate": self.matrix(team_ids, opponent_ids, "tie_rate").T}
