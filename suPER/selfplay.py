"""Train the fixed opponents by self-play, snapshot, evaluate the snapshots and pick one by a stated rule.

Self-play is the unchanged native DDQN trainer (``suPER.native.dqn.train`` through
``campaigns.execute``) on the env with ``env.opponent: learning``: every agent of both teams is an
independent learner with the paper's network (P = N = 12 policies). Every ``num_timesteps /
snapshots`` env steps the trainer evaluates (with 0 episodes: the matches below are the evaluation)
and writes ``checkpoints/latest.pt``; the progress callback then copies both teams' networks out of
that checkpoint into ``snapshots/step_<env steps>_<team>.safetensors`` (float16, the shipped format).
The last snapshot comes from ``checkpoints/final.pt``.

Each snapshot k's opponent team (red / predators) then plays ``eval_episodes`` greedy episodes
against a uniformly random team and against snapshot k-1's learning team (blue / prey); a random
vs random match is the reference. Outcomes follow the env's ``record.outcome`` (``suPER.envs.record``).

Selection rule: the **last** snapshot whose win rate against the random team has a 95% Wilson lower
bound above 0.5 (it beats random in most episodes, with confidence). If no snapshot meets it, the
snapshot with the highest win rate against random is chosen and the card says that the rule failed.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from suPER import config as C
from suPER.envs import env_record, opponent_env_names
from suPER.models import BatchedQNet
from suPER.opponents import (
    MATCH_BATCH,
    OPPONENTS_DIR,
    TeamMeta,
    load_team,
    make_batch,
    make_env,
    play,
    save_team,
    sha256,
    team_policy,
)
from suPER.resolve import resolve
from suPER.runs import atomic_write_bytes, atomic_write_csv, atomic_write_json

WIN_LOWER_BOUND = 0.5
"""the selection rule's threshold on the Wilson lower bound of the win rate against random"""


@dataclass
class Snapshot:
    """Both teams' networks at one point of self-play."""

    env_steps: int
    opponent_file: Path
    team_file: Path


def selfplay_config(env_name: str, num_timesteps: int, snapshots: int, seed: int, out: Path,
                    overrides: dict[str, Any] | None = None, threads: int = 1) -> C.ExperimentConfig:
    """The trainer config of a self-play run: the env's DDQN hyperparameters with both teams learning.

    Evaluation episodes are 0 (snapshots are evaluated in matches afterwards) and checkpoints leave out
    the replay buffers (a snapshot needs only the networks).
    """
    if env_name not in opponent_env_names():
        raise C.ConfigError(f"--env: expected one of {', '.join(opponent_env_names())}, got {env_name!r}")
    if snapshots < 1 or num_timesteps < snapshots:
        raise C.ConfigError(f"--snapshots: expected an integer in [1, num_timesteps], got {snapshots}")
    named = {"env.opponent": "learning", "run.seed": seed, "run.num_timesteps": num_timesteps,
             "run.eval_interval": max(1, num_timesteps // snapshots), "run.eval_episodes": 0,
             "run.checkpoint_replay": False, "run.out": str(out), "run.tag": "selfplay", "run.progress": False,
             "run.threads": threads, "run.device": "cpu"}
    labels = {"run.seed": "--seed", "run.num_timesteps": "--num-timesteps", "run.out": "--out",
              "run.threads": "--threads"}
    return resolve(env_name, "ddqn", overrides=overrides or {}, named=named, labels=labels)


def _split_and_save(q_state: dict[str, torch.Tensor], cfg: C.ExperimentConfig, env_steps: int,
                    folder: Path, ids: dict[str, tuple[str, ...]], all_ids: tuple[str, ...],
                    obs_shape: tuple[int, int, int], n_actions: int) -> Snapshot:
    """Write the two teams of a P = 12 self-play net as team files."""
    d = cfg.dqn
    full = BatchedQNet(len(all_ids), obs_shape, n_actions, body=d.model, dueling=d.dueling, hiddens=d.hiddens)
    full.load_state_dict(q_state)
    files = {}
    for side, team_ids in ids.items():
        net = full.subset([all_ids.index(a) for a in team_ids])
        path = folder / f"step_{env_steps:08d}_{team_ids[0].split('_')[0]}.safetensors"
        save_team(path, net, TeamMeta(env=cfg.env.name, agent_ids=team_ids, obs_shape=obs_shape, n_actions=n_actions,
                                      body=d.model, dueling=d.dueling, hiddens=d.hiddens))
        files[side] = path
    return Snapshot(env_steps, files["opponent"], files["team"])


def train_selfplay(cfg: C.ExperimentConfig, overwrite: bool = False,
                   on_snapshot: Any = None) -> tuple[Any, list[Snapshot]]:
    """Run self-play and snapshot both teams at every evaluation point.

    Returns:
        (the trainer's Summary, snapshots in order).
    """
    from suPER import campaigns

    probe = make_env(cfg.env)
    all_ids, obs_shape, n_actions = probe.spec.learner_ids, probe.spec.obs_shape, probe.spec.n_actions
    ids = {"opponent": probe.opponent_team_ids, "team": probe.team_ids}  # type: ignore[attr-defined]
    probe.close()
    folder = Path(cfg.run.out) / cfg.run_name
    snap_dir = folder / "snapshots"
    snaps: list[Snapshot] = []

    def progress(env_steps: int, stats: dict[str, float]) -> None:
        latest = folder / "checkpoints" / "latest.pt"
        taken = snaps[-1].env_steps if snaps else 0
        if env_steps - taken < cfg.eval_interval or not latest.exists():
            return
        state = torch.load(latest, map_location="cpu", weights_only=True, mmap=True)  # mmap: the replay is not read
        steps = int(state["loop"]["env_steps"])
        if steps > taken:
            snaps.append(_split_and_save(state["trainer"]["q_net"], cfg, steps, snap_dir, ids, all_ids,
                                         obs_shape, n_actions))  # type: ignore[arg-type]
            if on_snapshot is not None:
                on_snapshot(snaps[-1])

    summary = campaigns.execute(cfg, overwrite=overwrite, progress=progress)
    final = torch.load(folder / "checkpoints" / "final.pt", map_location="cpu", weights_only=True)
    if not snaps or snaps[-1].env_steps < final["env_steps"]:
        snaps.append(_split_and_save(final["q_net"], cfg, int(final["env_steps"]), snap_dir, ids, all_ids,
                                     obs_shape, n_actions))  # type: ignore[arg-type]
        if on_snapshot is not None:
            on_snapshot(snaps[-1])
    return summary, snaps


def evaluate_snapshots(cfg: C.ExperimentConfig, snaps: list[Snapshot], episodes: int, seed: int,
                       on_row: Any = None) -> list[dict[str, Any]]:
    """Matches of every snapshot's opponent team against random and against the previous snapshot.

    Rows hold the opponent's point of view: ``opp_win_rate`` = the team's loss rate, with CIs.
    """
    rows: list[dict[str, Any]] = []

    def match(opponent: str, team: str, label: str, steps: int, against: str) -> None:
        env_cfg = replace(cfg.env, opponent=opponent, opponent_epsilon=0.0)
        env = make_batch(env_cfg, min(episodes, MATCH_BATCH), seed=seed)
        try:
            s = play(env, team_policy(team, env, seed), episodes, seed).summary(seed)
        finally:
            env.close()
        row = {"snapshot": label, "env_steps": steps, "against": against, "episodes": s["episodes"],
               "opp_win_rate": s["loss_rate"], "opp_win_lo": s["loss_rate_ci"][0], "opp_win_hi": s["loss_rate_ci"][1],
               "tie_rate": s["tie_rate"], "opp_return": s["opponent_return"], "opp_return_lo": s["opponent_return_ci"][0],
               "opp_return_hi": s["opponent_return_ci"][1], "team_return": s["team_return"],
               "episode_len": s["episode_len"]}
        rows.append(row)
        if on_row is not None:
            on_row(row)

    match("random", "random", "random", 0, "random")
    for k, snap in enumerate(snaps):
        match(str(snap.opponent_file), "random", snap.opponent_file.stem, snap.env_steps, "random")
        if k > 0:
            prev = snaps[k - 1]
            match(str(snap.opponent_file), str(prev.team_file), snap.opponent_file.stem, snap.env_steps,
                  f"previous ({prev.team_file.stem})")
    return rows


def select(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The selection rule (module docstring). Returns (chosen row vs random, whether the rule was met)."""
    vs_random = [r for r in rows if r["against"] == "random" and r["snapshot"] != "random"]
    passing = [r for r in vs_random if r["opp_win_lo"] > WIN_LOWER_BOUND]
    if passing:
        return passing[-1], True
    return max(vs_random, key=lambda r: (r["opp_win_rate"], r["env_steps"])), False


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Evaluation table as CSV (atomically)."""
    atomic_write_csv(path, rows)


def table_md(rows: list[dict[str, Any]]) -> str:
    """Evaluation table as markdown (opponent's point of view, 95% CIs)."""
    lines = ["| snapshot | env steps | against | episodes | opponent win rate [95% CI] | ties | opponent return "
             "[95% CI] | team return | episode length |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['snapshot']} | {r['env_steps']} | {r['against']} | {r['episodes']} | "
                     f"{r['opp_win_rate']:.2f} [{r['opp_win_lo']:.2f}, {r['opp_win_hi']:.2f}] | {r['tie_rate']:.2f} | "
                     f"{r['opp_return']:.2f} [{r['opp_return_lo']:.2f}, {r['opp_return_hi']:.2f}] | "
                     f"{r['team_return']:.2f} | {r['episode_len']:.0f} |")
    return "\n".join(lines)


def write_card(path: Path, *, cfg: C.ExperimentConfig, command: str, chosen: dict[str, Any], rule_met: bool,
               weights: Path, rows: list[dict[str, Any]], summary: Any, train_wall_s: float, eval_wall_s: float,
               eval_episodes: int, eval_seed: int) -> None:
    """The opponent's card: how it was trained, how it was chosen, how it plays, its checksum."""
    meta = load_team(weights)[1]
    size = weights.stat().st_size
    d = cfg.dqn
    rule = (f"the last snapshot whose win rate against the random team has a 95% Wilson lower bound above "
            f"{WIN_LOWER_BOUND}")
    verdict = ("meets the rule" if rule_met else
               "**does not meet the rule**: no snapshot beat the random team by a clear margin; this is the "
               "snapshot with the highest win rate against random")
    text = f"""# Opponent: {cfg.env.name} ({', '.join(meta.agent_ids)})

Frozen opponent team for `{cfg.env.name}`, used by default (`--opponent pretrained`). Produced by this
project; the original's weights were never published (REFERENCE section 8).

| | |
|---|---|
| file | `{weights.name}` ({size / 1e6:.1f} MB, {meta.dtype}, safetensors) |
| sha256 | `{sha256(weights)}` |
| agents | {len(meta.agent_ids)} independent networks: {', '.join(meta.agent_ids)} |
| network | the paper's {cfg.env.name} conv net, dueling heads, hiddens {meta.hiddens}; obs {meta.obs_shape}, {meta.n_actions} actions |
| chosen snapshot | `{chosen['snapshot']}` at {chosen['env_steps']} env steps ({verdict}) |
| win rate vs random | {chosen['opp_win_rate']:.2f} [{chosen['opp_win_lo']:.2f}, {chosen['opp_win_hi']:.2f}] over {chosen['episodes']} episodes |
| return vs random | {chosen['opp_return']:.2f} [{chosen['opp_return_lo']:.2f}, {chosen['opp_return_hi']:.2f}] (opponent team, per episode) |

## How it was trained

Self-play with the project's native DDQN trainer (`suPER.native.dqn`): both teams learn, one
independent network and prioritized replay buffer per agent ({len(summary_ids(cfg))} learners), the
env YAML's hyperparameters (`experiments/envs/{cfg.env.name}.yaml`) except where the command overrides them.

```
{command}
```

| | |
|---|---|
| seed | {cfg.run.seed} |
| budget | {cfg.run.num_timesteps} env steps, snapshots every {cfg.eval_interval} |
| DQN | lr {d.lr:g}, batch {d.batch_size}/agent, fragment {d.rollout_fragment_length}, buffer {d.buffer_size}, target sync {d.target_update_freq}, epsilon {d.epsilon_initial:g} -> {d.epsilon_final:g} over {d.epsilon_timesteps}, gamma {d.gamma:g} |
| machine | {socket.gethostname()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), torch threads {cfg.run.threads}, torch {torch.__version__} |
| training | {train_wall_s / 60:.1f} min wall, {summary.env_steps_per_sec:.1f} env steps/s |
| evaluation | {eval_wall_s / 60:.1f} min wall, {eval_episodes} greedy episodes per match, env seed {eval_seed} |

## How it was chosen

Every snapshot's {cfg.env.name} opponent team played greedily against a uniformly random team and against the
previous snapshot's learning team. Win: {env_record(cfg.env.name).win_definition}. Selection rule: {rule}.
Rates have 95% Wilson intervals; returns 95% percentile-bootstrap intervals (`scipy.stats.bootstrap`).
All numbers are from the opponent's point of view.

{table_md(rows)}

## Regenerate

Run the command above (`--install` copies the chosen snapshot and this card to `experiments/opponents/`).
Results depend on the machine's floating-point kernels; the evaluation of the shipped file is checked by
`tests/test_opponents.py::test_shipped_opponents_beat_random`.
"""
    atomic_write_bytes(path, lambda tmp: Path(tmp).write_text(text))


def summary_ids(cfg: C.ExperimentConfig) -> tuple[str, ...]:
    """All self-play learners of ``cfg``'s env."""
    env = make_env(cfg.env)
    try:
        return env.spec.learner_ids
    finally:
        env.close()


def run(env_name: str, num_timesteps: int, snapshots: int, seed: int, out: Path, eval_episodes: int,
        overrides: dict[str, Any] | None, command: str, install: bool, overwrite: bool = False, threads: int = 1,
        log: Any = print) -> dict[str, Any]:
    """``super-marl opponents train``: self-play, snapshot evaluation, selection, card; optionally install.

    Returns:
        dict with folder, chosen row, rule_met, weights path, card path.
    """
    cfg = selfplay_config(env_name, num_timesteps, snapshots, seed, out, overrides, threads)
    t0 = time.perf_counter()
    summary, snaps = train_selfplay(cfg, overwrite, on_snapshot=lambda s: log(
        f"snapshot at {s.env_steps} env steps ({time.perf_counter() - t0:.0f} s)"))
    train_wall = time.perf_counter() - t0
    folder = Path(cfg.run.out) / cfg.run_name
    eval_seed = seed + 20_000
    t1 = time.perf_counter()
    rows = evaluate_snapshots(cfg, snaps, eval_episodes, eval_seed, on_row=lambda r: log(
        f"{r['snapshot']} vs {r['against']}: opponent win rate {r['opp_win_rate']:.2f} "
        f"[{r['opp_win_lo']:.2f}, {r['opp_win_hi']:.2f}], return {r['opp_return']:.2f}"))
    eval_wall = time.perf_counter() - t1
    chosen, rule_met = select(rows)
    write_csv(folder / "evaluation.csv", rows)
    src = next(s.opponent_file for s in snaps if s.opponent_file.stem == chosen["snapshot"])
    weights = folder / f"{env_name}.safetensors"
    data = src.read_bytes()
    atomic_write_bytes(weights, lambda tmp: Path(tmp).write_bytes(data))
    card_args = dict(cfg=cfg, command=command, chosen=chosen, rule_met=rule_met, rows=rows, summary=summary,
                     train_wall_s=train_wall, eval_wall_s=eval_wall, eval_episodes=eval_episodes, eval_seed=eval_seed)
    card = folder / f"{env_name}.card.md"
    write_card(card, weights=weights, **card_args)
    atomic_write_json(folder / "selection.json", {"chosen": chosen, "rule_met": rule_met,
                                                  "rule": f"last snapshot with Wilson lower bound of win rate vs "
                                                          f"random > {WIN_LOWER_BOUND}", "sha256": sha256(weights)})
    result = {"folder": folder, "chosen": chosen, "rule_met": rule_met, "weights": weights, "card": card}
    if install:
        dest = OPPONENTS_DIR / f"{env_name}.safetensors"
        atomic_write_bytes(dest, lambda tmp: Path(tmp).write_bytes(data))
        write_card(OPPONENTS_DIR / f"{env_name}.card.md", weights=dest, **card_args)
        result.update(weights=dest, card=OPPONENTS_DIR / f"{env_name}.card.md")
    return result
