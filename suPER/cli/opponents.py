"""``super-marl opponents train | eval``: the fixed opponent teams, trained by self-play and played against."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from suPER import config as C
from suPER.cli.common import UserError
from suPER.resolve import resolve

opponents_app = typer.Typer(no_args_is_help=True, help="Fixed opponent teams of battle / adversarial_pursuit: "
                            "train them by self-play, evaluate teams against them.")


@opponents_app.command("train")
def opponents_train(
    env: Annotated[str, typer.Option(help="battle | adversarial_pursuit")],
    num_timesteps: Annotated[int | None, typer.Option("--num-timesteps", help="self-play env steps (default: "
                                                      "about an hour on 2 cores)")] = None,
    snapshots: Annotated[int, typer.Option(help="snapshots taken along the way (evenly spaced)")] = 6,
    seed: Annotated[int, typer.Option(help="run seed")] = 1,
    eval_episodes: Annotated[int, typer.Option("--eval-episodes", help="greedy episodes per evaluation match")] = 20,
    lr: Annotated[float | None, typer.Option(help="learning rate (default: the env YAML's)")] = None,
    out: Annotated[Path, typer.Option(help="parent folder of the self-play run folder")] = Path("runs/opponents"),
    install: Annotated[bool, typer.Option("--install", help="copy the chosen opponent and its card to "
                                          "experiments/opponents/")] = False,
    overwrite: Annotated[bool, typer.Option(help="start over in an existing run folder")] = False,
    threads: Annotated[int, typer.Option(help="torch threads")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted override, e.g. --set dqn.batch_size=16")] = None,
) -> None:
    """Train an opponent team by self-play (both teams learn), snapshot it, evaluate every snapshot against a
    random team and the previous snapshot, and pick the last snapshot that beats random by a clear margin."""
    import shlex

    from suPER import selfplay
    from suPER.envs import env_record, opponent_env_names

    # default: the env record's opponent_train_budget (about an hour on 2 shared cores, docs/design.md, "Opponents")
    budget = num_timesteps if num_timesteps is not None else (
        env_record(env).opponent_train_budget if env in opponent_env_names() else 0)
    if budget < 1:
        raise UserError(f"--num-timesteps: expected an integer >= 1, got {budget}")
    if eval_episodes < 1:
        raise UserError(f"--eval-episodes: expected an integer >= 1, got {eval_episodes}")
    overrides = C.parse_set_pairs(set_ or [])
    if lr is not None:
        overrides["dqn.lr"] = lr
    command = shlex.join(["super-marl", *sys.argv[1:]]) if sys.argv[1:2] == ["opponents"] else (
        f"super-marl opponents train --env {env} --num-timesteps {budget} --snapshots {snapshots} --seed {seed} "
        f"--eval-episodes {eval_episodes}" + (f" --lr {lr:g}" if lr is not None else ""))
    res = selfplay.run(env, budget, snapshots, seed, out, eval_episodes, overrides, command, install,
                       overwrite=overwrite, threads=threads, log=lambda m: print(m, flush=True))
    c = res["chosen"]
    print(f"chosen {c['snapshot']} ({'meets' if res['rule_met'] else 'does NOT meet'} the selection rule): win rate "
          f"vs random {c['opp_win_rate']:.2f} [{c['opp_win_lo']:.2f}, {c['opp_win_hi']:.2f}] -> {res['weights']}, "
          f"card {res['card']}")


@opponents_app.command("eval")
def opponents_eval(
    env: Annotated[str, typer.Option(help="battle | adversarial_pursuit")],
    team: Annotated[str, typer.Option(help="the learning side: random | a run's checkpoints/final.pt | a team "
                                           ".safetensors file")] = "random",
    opponent: Annotated[str, typer.Option(help="pretrained | random | PATH (.safetensors team or .mixture.json)")] = "pretrained",
    episodes: Annotated[int, typer.Option(help="episodes to play")] = 20,
    seed: Annotated[int, typer.Option(help="env seed of the first episode (and of random / epsilon draws)")] = 1,
    opponent_epsilon: Annotated[float, typer.Option("--opponent-epsilon", help="opponent exploration")] = 0.0,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="accept files in the original's pickle "
                                                                      "format")] = False,
    threads: Annotated[int, typer.Option(help="torch threads")] = 1,
) -> None:
    """Play a team against an opponent for N episodes: mean returns and win rate with 95% CIs."""
    from suPER import opponents as O
    from suPER.envs import opponent_env_names
    from suPER.loop import set_threads
    from suPER.opponents import make_batch

    if env not in opponent_env_names():
        raise UserError(f"--env: expected one of {', '.join(opponent_env_names())}, got {env!r}")
    if episodes < 1:
        raise UserError(f"--episodes: expected an integer >= 1, got {episodes}")
    if threads < 0:
        raise UserError(f"--threads: expected an integer >= 0, got {threads}")
    set_threads(threads)
    cfg = resolve(env, "ddqn", named={"env.opponent": opponent, "env.opponent_epsilon": opponent_epsilon,
                                        "env.opponent_allow_pickle": allow_pickle},
                    labels={"env.opponent": "--opponent", "env.opponent_epsilon": "--opponent-epsilon"})
    e = make_batch(cfg.env, min(episodes, O.MATCH_BATCH), seed=seed)
    try:
        s = O.play(e, O.team_policy(team, e, seed, allow_pickle), episodes, seed).summary(seed)
    finally:
        e.close()
    ci = lambda c: f"[{c[0]:.2f}, {c[1]:.2f}]"  # noqa: E731
    print(f"{env}: team {team} ({e.spec.team}) vs opponent {opponent} ({len(e.spec.opponent_ids)} agents, "
          f"epsilon {opponent_epsilon:g}), {episodes} episodes from seed {seed}")
    print(f"team return      {s['team_return']:8.2f} {ci(s['team_return_ci'])}")
    print(f"opponent return  {s['opponent_return']:8.2f} {ci(s['opponent_return_ci'])}")
    print(f"team win rate    {s['win_rate']:8.2f} {ci(s['win_rate_ci'])}   loss rate {s['loss_rate']:.2f} "
          f"{ci(s['loss_rate_ci'])}   ties {s['tie_rate']:.2f}   mean length {s['episode_len']:.0f}")

