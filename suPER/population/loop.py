"""The population loop: best responses with the native DDQN trainer, the payoff table, the meta-game.

A population run keeps a population of team policies per side, the team side (battle blue, adversarial
pursuit prey) and the opponent side (red, predators), each starting with a uniformly random team
(``random``). Iteration k = 1..N, read top to bottom:

1. **best responses**: every training side trains a new team with the unchanged native DDQN trainer
   (``campaigns.execute``, one independent network and PER buffer per agent, SUPER relay within the team
   unless ``--no-relay``) for ``br_steps`` env steps, against the other side's meta-strategy after
   iteration k-1: a mixture file (``suPER.opponents.mixture``) whose member is drawn per episode. The
   opponent side trains with ``env.swap_teams`` (red / predators as the learners). Both sides respond to
   the same (k-1) strategies, so their order does not matter, and ``--br-workers`` trains them as parallel
   Ray tasks (``parallel``: the same call, the same policies).
2. **payoff table**: the missing entries of every team policy x every opponent policy
   (``suPER.population.payoff``; E greedy episodes each).
3. **meta-game**: the meta-solver (``solvers.META_SOLVERS``) maps ``u = win - loss`` to a mixture per side.
4. **record**: meta-strategy, exploitability and rating rows (``ratings``), then ``state.json``
   (finished iterations).

Exploitability rows (``exploitability.csv``), per iteration k, in units of the meta-payoff (win - loss):
``nash_conv`` = NashConv of the chosen meta-strategies in the restricted game (0 for the LP Nash);
``br_gain_<side>`` = the new best response's payoff against the other side's (k-1) strategy minus the
(k-1) strategies' value, i.e. the measured gain of deviating from the previous meta-strategy, and
``approx_nash_conv`` their sum (the measured approximate NashConv of the (k-1) meta-strategies).

Resume: an iteration is finished when ``state.json`` says so; within an unfinished one a best response
whose policy file exists is not retrained, one whose trainer run is unfinished continues from its
checkpoint (``campaigns.execute``), and the table plays only its missing entries. A finished policy
file, table entry or row is never rewritten.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suPER.loop import set_threads
from suPER.models import BatchedQNet
from suPER.opponents import TeamMeta, make_env, save_team, sha256
from suPER.opponents.mixture import Member, write_mixture
from suPER.population.config import (
    MATCH_SEED_OFFSET,
    RANDOM,
    SHIPPED,
    SIDES,
    VOLATILE,
    PopulationConfig,
)
from suPER.population.payoff import PayoffTable
from suPER.population.solvers import META_SOLVERS, best_response_gains, nash, nash_conv
from suPER.resolve import resolve
from suPER.runs import atomic_write_csv, atomic_write_json


class Population:
    """One population run folder (layout in ``docs/population.md``).

    Args:
        cfg: the run's configuration.
        folder: the run folder.
        log: one-line progress messages.
    """

    def __init__(self, cfg: PopulationConfig, folder: Path, log: Any = print) -> None:
        self.cfg, self.folder, self.log = cfg, Path(folder), log
        env_cfg = resolve(cfg.env, "ddqn", overrides=cfg.overrides, named={"env.opponent": RANDOM}).env
        self.env_cfg = env_cfg
        names = {}
        for side in SIDES:
            probe = make_env(replace(env_cfg, swap_teams=side == "opponent"))
            names[side] = (probe.spec.learner_ids, probe.spec.obs_shape, probe.spec.n_actions)
            probe.close()
        self.ids = {s: names[s][0] for s in SIDES}
        self.obs_shape, self.n_actions = names["team"][1], names["team"][2]
        self.side_name = {s: self.ids[s][0].rsplit("_", 1)[0] for s in SIDES}
        """side -> its agents' id prefix (blue / red, prey / predator): the policies' folder"""
        self.shipped_as_team = self._shipped_as_team() if cfg.vs_shipped else ""
        """the shipped opponent's file where it fits the team side (the opponent side's fixed reference), else ''"""
        self.match_lane: Any = None
        """runs payoff entries as Ray tasks (``parallel.Lane``, set by ``run``); None = here"""
        self.br_lane: Any = None
        """runs best responses as Ray tasks (``parallel.Lane``, set by ``run``); None = here"""

    def _shipped_as_team(self) -> str:
        """The shipped opponent file if its team fits the team side (battle's teams are symmetric: 6 agents,
        obs (13, 13, 5), 21 actions on map 18), else '' (adversarial pursuit: 4 predators, 8 prey)."""
        from suPER.opponents import OpponentFileError, load_team, opponent_path

        path = opponent_path(self.cfg.env, "pretrained")
        probe = make_env(self.env_cfg)
        try:
            load_team(path, probe, side="team")
            return str(path)
        except OpponentFileError:
            return ""
        finally:
            probe.close()

    # ---- files

    @property
    def payoff_path(self) -> Path:
        return self.folder / "payoff.csv"

    def policy_file(self, side: str, iteration: int) -> Path:
        """The team file of ``side``'s best response of ``iteration``."""
        return self.folder / "policies" / self.side_name[side] / f"{iteration:03d}.safetensors"

    def policy_name(self, side: str, iteration: int) -> str:
        """``random`` for iteration 0, else ``<side prefix>/<iteration>``."""
        return RANDOM if iteration == 0 else f"{self.side_name[side]}/{iteration:03d}"

    def finished(self) -> int:
        """Iterations finished (``state.json``; 0 when absent)."""
        from suPER.runs import RunFolderError

        path = self.folder / "state.json"
        if not path.exists():
            return 0
        try:
            value = json.loads(path.read_text())["finished_iterations"]
        except (OSError, ValueError, KeyError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            raise RunFolderError(f"{path}: expected {{\"finished_iterations\": N}}, got an unreadable file "
                                 f"({type(exc).__name__})", "repair it", f"start {self.folder} over") from None
        # a count of finished iterations: an integer (not a bool, not 1.7) between 0 and the iterations asked
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= self.cfg.iterations:
            raise RunFolderError(f"{path}: expected finished_iterations to be an integer in 0..{self.cfg.iterations}, "
                                 f"got {value!r}", "repair it", f"start {self.folder} over")
        return value

    def members(self, side: str, upto: int) -> dict[str, str]:
        """``side``'s policies after iteration ``upto``: name -> ``random`` or its team file."""
        out = {RANDOM: RANDOM}
        for k in range(1, upto + 1):
            if side in self.cfg.sides:
                out[self.policy_name(side, k)] = str(self.policy_file(side, k))
        return out

    def start(self, overwrite: bool) -> None:
        """Check that an existing folder is this run (same ``population.json``), or start it; call holding the
        folder's writer lock (``run``). ``overwrite`` empties the folder but its lock file, so that a second
        writer still finds the folder held.

        Raises:
            RunFolderError: ``population.json`` or ``state.json`` unreadable, or a run of other settings (nothing
                changed).
        """
        import shutil

        from suPER.runs import RunFolder, RunFolderError

        path = self.folder / "population.json"
        mine = json.loads(json.dumps(asdict(self.cfg)))
        if not overwrite:
            self.finished()  # a damaged state.json is refused here, before anything is written
            PayoffTable.load(self.payoff_path)  # and so is a damaged payoff table
        if path.exists() and not overwrite:
            try:
                theirs = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise RunFolderError(f"{path}: expected the population run's JSON settings, got an unreadable file "
                                     f"({exc})", "repair it", f"start {self.folder} over") from None
            if not isinstance(theirs, dict):
                raise RunFolderError(f"{path}: expected the population run's JSON settings, got a JSON "
                                     f"{type(theirs).__name__}", "repair it", f"start {self.folder} over")
            for key in VOLATILE:
                theirs.pop(key, None)
            if theirs != {k: v for k, v in mine.items() if k not in VOLATILE}:
                diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                raise RunFolderError(f"--out: {self.folder} holds a population run with other settings "
                                     f"({', '.join(diff)})", "use another --out", "start it over")
            atomic_write_json(path, mine)  # the volatile settings of this attempt
            return
        if overwrite:
            lock_file = RunFolder(self.folder).lock_file
            for child in self.folder.iterdir():
                if child == lock_file:
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        atomic_write_json(path, mine)

    # ---- one iteration

    def best_response(self, iteration: int, side: str, strategy: dict[str, float],
                      own: dict[str, float]) -> dict[str, Any]:
        """Train (or finish training) ``side``'s best response of ``iteration`` against ``strategy`` (the
        other side's meta-strategy; ``own`` is this side's, for ``warm_start: best``).

        Returns:
            its card entry (``policies.csv``).
        """
        from suPER import campaigns

        other = SIDES[1 - SIDES.index(side)]
        mix_dir = self.folder / "mixtures"
        mixture = mix_dir / f"it{iteration:03d}_{self.side_name[side]}_trains_against.mixture.json"
        pool = self.members(other, iteration - 1)
        write_mixture(mixture, self.cfg.env, [
            Member(name, RANDOM if f == RANDOM else str(Path("..") / Path(f).relative_to(self.folder)),
                   strategy[name]) for name, f in pool.items()])
        warm = ""
        if self.cfg.warm_start == "best":
            best = max(own, key=lambda name: own[name])  # the first of equal weights: the older policy
            warm = "" if best == RANDOM else best
        init_from = str(self.members(side, iteration - 1)[warm]) if warm else ""
        cfg = self.cfg.br_config(iteration, side, mixture, self.folder / "br", init_from)
        run_dir = Path(cfg.run.out) / cfg.run_name
        final = run_dir / "checkpoints" / "final.pt"
        t0 = time.perf_counter()
        if not final.exists():  # a finished trainer run is not repeated (execute would refuse it)
            self.log(f"iteration {iteration}: best response of {self.side_name[side]} ({self.cfg.br_steps} env steps)")
            campaigns.execute(cfg)
        state = torch.load(final, map_location="cpu", weights_only=True)
        d = cfg.dqn
        net = BatchedQNet(len(self.ids[side]), self.obs_shape, self.n_actions, body=d.model, dueling=d.dueling,
                          hiddens=d.hiddens)
        net.load_state_dict(state["q_net"])
        path = self.policy_file(side, iteration)
        if not path.exists():  # a finished policy file is never rewritten
            save_team(path, net, TeamMeta(env=self.cfg.env, agent_ids=self.ids[side], obs_shape=self.obs_shape,  # type: ignore[arg-type]
                                          n_actions=self.n_actions, body=d.model, dueling=d.dueling,
                                          hiddens=d.hiddens))
        return {"policy": self.policy_name(side, iteration), "side": self.side_name[side], "iteration": iteration,
                "file": str(path.relative_to(self.folder)), "sha256": sha256(path), "env_steps": int(state["env_steps"]),
                "seed": cfg.run.seed, "relay": cfg.relay.enabled, "trained_against": json.dumps(strategy),
                "warm_start": warm or "scratch",
                "trainer_run": str(run_dir.relative_to(self.folder)), "wall_s": round(time.perf_counter() - t0, 1)}

    def solve(self, iteration: int, table: PayoffTable) -> tuple[list[str], list[str], np.ndarray, np.ndarray,
                                                                    np.ndarray]:
        """The meta-game after ``iteration``: (team names, opponent names, u_IJ, x_I, y_J)."""
        team, opp = list(self.members("team", iteration)), list(self.members("opponent", iteration))
        u_IJ = table.matrix(team, opp)
        x_I, y_J = META_SOLVERS[self.cfg.solver](u_IJ)
        return team, opp, u_IJ, x_I, y_J

    def run(self, overwrite: bool = False, on_cluster: bool = False) -> dict[str, Any]:
        """Run (or resume) every iteration; returns the final meta-game (see ``solve``) and the folder.

        Args:
            overwrite: start over in an existing run folder.
            on_cluster: this process is a job on a Ray cluster (``--address``): matches and best responses
                run as tasks of that cluster, ``--match-workers`` / ``--br-workers`` at a time (0 = no cap).
        """
        from suPER.runs import RunFolder, writable_folder

        set_threads(self.cfg.threads)
        writable_folder(self.folder)
        with RunFolder(self.folder).lock("--out"):  # one writer per population folder (another one is refused)
            self.start(overwrite)
            return self._run(on_cluster)

    def _run(self, on_cluster: bool) -> dict[str, Any]:
        """``run`` once the folder is held and started."""
        cfg = self.cfg
        self.match_lane = self.br_lane = None
        pool = None
        if on_cluster or cfg.match_workers > 0 or cfg.br_workers > 0:
            from suPER.population.parallel import RayTaskPool

            pool = RayTaskPool(max(cfg.match_workers, cfg.br_workers * cfg.threads), on_cluster=on_cluster)
            if on_cluster or cfg.match_workers > 0:
                self.match_lane = pool.matches(cfg.match_workers)
            if on_cluster or cfg.br_workers > 0:
                self.br_lane = pool.lane(_best_response_task, cfg.threads, cfg.br_workers)
        try:
            return self._iterations()
        finally:
            if pool is not None:
                pool.close()

    def best_responses(self, iteration: int, strategy: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
        """Every training side's best response of ``iteration`` (``best_response``), in ``cfg.sides`` order:
        one after the other here, or (``--br-workers``) the unfinished ones as parallel Ray tasks.

        Args:
            strategy: side -> its meta-strategy after iteration - 1 (policy -> weight).

        Returns:
            their card entries.
        """
        calls = [(iteration, side, strategy[SIDES[1 - SIDES.index(side)]], strategy[side]) for side in self.cfg.sides]
        if self.br_lane is None:
            return [self.best_response(*c) for c in calls]
        todo = [k for k, c in enumerate(calls) if not self.br_finished(c[0], c[1])]
        cards: dict[int, dict[str, Any]] = {}
        if todo:
            self.log(f"iteration {iteration}: best responses of "
                     f"{', '.join(self.side_name[calls[k][1]] for k in todo)} as Ray tasks ({self.cfg.br_steps} env "
                     f"steps each)")
            for j, card in self.br_lane.imap([(self.cfg, str(self.folder), *calls[k]) for k in todo]):
                cards[todo[j]] = card
        # those finished before are read here (``best_response`` loads final.pt, writes a missing policy file)
        return [cards.get(k) or self.best_response(*c) for k, c in enumerate(calls)]

    def br_finished(self, iteration: int, side: str) -> bool:
        """Whether the trainer run of ``side``'s best response of ``iteration`` has finished (``final.pt``)."""
        cfg = self.cfg.br_config(iteration, side, Path("."), self.folder / "br")
        return (Path(cfg.run.out) / cfg.run_name / "checkpoints" / "final.pt").exists()

    def _fill(self, table: PayoffTable, upto: int) -> int:
        """The missing entries after iteration ``upto`` (and the ``--vs-shipped`` column); returns how many."""
        team = self.members("team", upto)
        seed = self.cfg.seed + MATCH_SEED_OFFSET
        opp = self.members("opponent", upto)
        n = table.fill(self.env_cfg, team, opp, self.cfg.eval_episodes, seed, self.payoff_path, pool=self.match_lane)
        if self.cfg.vs_shipped:
            n += table.fill(self.env_cfg, team, {SHIPPED: "pretrained"}, self.cfg.eval_episodes, seed,
                            self.payoff_path, pool=self.match_lane)
            if self.shipped_as_team:  # the opponent side's reference: the shipped weights on the team's side
                n += table.fill(self.env_cfg, {SHIPPED: self.shipped_as_team}, opp, self.cfg.eval_episodes, seed,
                                self.payoff_path, pool=self.match_lane)
        return n

    def _iterations(self) -> dict[str, Any]:
        """The loop of ``run`` (module docstring)."""
        table = PayoffTable.load(self.payoff_path)
        self._fill(table, 0)
        done = self.finished()
        if done:
            self.log(f"resuming after iteration {done} of {self.cfg.iterations}")
        for k in range(done + 1, self.cfg.iterations + 1):
            team, opp, u_prev, x_prev, y_prev = self.solve(k - 1, table)
            strategy = {"team": dict(zip(team, x_prev.tolist())), "opponent": dict(zip(opp, y_prev.tolist()))}
            t0 = time.perf_counter()
            cards = self.best_responses(k, strategy)
            t1 = time.perf_counter()
            n = self._fill(table, k)
            t2 = time.perf_counter()
            team, opp, u_IJ, x_I, y_J = self.solve(k, table)
            value_prev = float(x_prev @ u_prev @ y_prev)
            gains = {}
            for side in SIDES:
                if side not in self.cfg.sides:
                    gains[side] = float("nan")
                elif side == "team":  # u(new BR, y_prev) - x_prev u y_prev, over the previous opponents
                    gains[side] = float(u_IJ[team.index(self.policy_name(side, k)), :len(y_prev)] @ y_prev) - value_prev
                else:
                    gains[side] = value_prev - float(x_prev @ u_IJ[:len(x_prev), opp.index(self.policy_name(side, k))])
            nc = nash_conv(u_IJ, x_I, y_J)
            g_team, g_opp = best_response_gains(u_IJ, x_I, y_J)
            self._append("policies.csv", cards)
            self._append("meta_strategy.csv", [
                {"iteration": k, "side": self.side_name[s], "policy": name, "weight": float(w)}
                for s, names, p in (("team", team, x_I), ("opponent", opp, y_J)) for name, w in zip(names, p)])
            self._append("exploitability.csv", [{
                "iteration": k, "meta_solver": self.cfg.solver, "value": float(x_I @ u_IJ @ y_J), "nash_conv": nc,
                "restricted_gain_team": g_team, "restricted_gain_opponent": g_opp,
                "br_gain_team": gains["team"], "br_gain_opponent": gains["opponent"],
                "approx_nash_conv": float(np.nansum([gains["team"], gains["opponent"]])),
                "br_wall_s": round(t1 - t0, 1), "match_wall_s": round(t2 - t1, 1), "matches": n}])
            self._append("ratings.csv", ratings(k, table, team, opp, u_IJ, self.side_name))
            atomic_write_json(self.folder / "state.json", {"finished_iterations": k})
            self.log(f"iteration {k}: {n} matches, value {float(x_I @ u_IJ @ y_J):+.3f}, NashConv {nc:.3f}, "
                     f"best-response gains {gains['team']:+.3f} / {gains['opponent']:+.3f}")
        team, opp, u_IJ, x_I, y_J = self.solve(self.cfg.iterations, table)
        return {"folder": self.folder, "team": team, "opponent": opp, "u": u_IJ, "x": x_I, "y": y_J}

    def _append(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Append rows to a CSV of the run folder (rewritten atomically; rows of this iteration replace a
        killed attempt's)."""
        path = self.folder / name
        old: list[dict[str, Any]] = []
        if path.exists():
            with open(path, newline="") as fh:
                old = list(csv.DictReader(fh))
        iteration = str(rows[0]["iteration"])
        kept = [r for r in old if r["iteration"] != iteration] + rows
        atomic_write_csv(path, kept, columns=list(rows[0]))


def ratings(iteration: int, table: PayoffTable, team: list[str], opp: list[str], u_IJ: np.ndarray,
            side_name: dict[str, str]) -> list[dict[str, Any]]:
    """Every policy's rating rows: its Nash-averaging rating, its win rate against the random team and, with
    ``--vs-shipped``, against the shipped team (``win_vs_shipped``: a team-side policy against the shipped
    opponent, an opponent-side policy against the same weights playing the team's side, entry
    ``(shipped, policy)``); NaN where an entry does not exist.

    Nash averaging (Balduzzi et al. 2018, with the LP Nash instead of the maximum-entropy one): a team
    policy's rating is its payoff against the opponent side's meta-Nash, ``(u y*)_i``, an opponent policy's
    ``-(x*^T u)_j``; both are in win - loss units, and the Nash's support has the game value.
    """
    x_I, y_J = nash(u_IJ)
    out = []
    for side, names, rating in (("team", team, u_IJ @ y_J), ("opponent", opp, -(x_I @ u_IJ))):
        for name, r in zip(names, rating):
            e = table.entries[(name, RANDOM)] if side == "team" else table.entries[(RANDOM, name)]
            win, lo, hi = (e["win_rate"], e["win_lo"], e["win_hi"]) if side == "team" else (
                e["loss_rate"], e["loss_lo"], e["loss_hi"])
            ref = table.entries.get((name, SHIPPED) if side == "team" else (SHIPPED, name))
            nan = float("nan")
            ref_win = (nan, nan, nan) if ref is None else (ref["win_rate"], ref["win_lo"], ref["win_hi"]) \
                if side == "team" else (ref["loss_rate"], ref["loss_lo"], ref["loss_hi"])
            out.append({"iteration": iteration, "side": side_name[side], "policy": name, "nash_average": float(r),
                        "win_vs_random": win, "win_vs_random_lo": lo, "win_vs_random_hi": hi,
                        "win_vs_shipped": ref_win[0], "win_vs_shipped_lo": ref_win[1],
                        "win_vs_shipped_hi": ref_win[2], "episodes": e["episodes"]})
    return out


def _best_response_task(cfg: PopulationConfig, folder: str, iteration: int, side: str,
                        strategy: dict[str, float], own: dict[str, float]) -> dict[str, Any]:
    """``Population.best_response`` in a Ray worker with the run's torch threads (the sequential loop's call):
    the task of ``--br-workers`` lanes (``suPER.population.parallel``).

    Returns:
        The best response's policy card, as ``Population.best_response`` returns it.
    """
    set_threads(cfg.threads)
    return Population(cfg, Path(folder), log=lambda _m: None).best_response(iteration, side, strategy, own)
