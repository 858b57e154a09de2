"""``super-marl population psro|fsp|selfplay``: the population loop from the command line.

The three commands differ only in the default meta-solver (``config.METHODS``). Bad input raises
``ConfigError`` naming the flag (``suPER.cli.main`` prints one line and exits 2). Heavy modules are
imported inside the commands.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from suPER import config as C
from suPER.docstrings import field_docs
from suPER.population.config import PopulationConfig
from suPER.population.solvers import solver_names

_D = PopulationConfig(env="")
"""the defaults of every option that is a ``PopulationConfig`` field (written once, there)"""
_DOC = field_docs(PopulationConfig)


def _help(name: str, extra: str = "") -> str:
    """An option's help: its field's docstring (first sentence), then ``extra``."""
    text = _DOC[name].split(". ")[0].replace("``", "")
    return f"{text} ({extra})" if extra else text

population_app = typer.Typer(no_args_is_help=True, help="Population training of battle / adversarial_pursuit "
                             "teams (PSRO, fictitious self-play, self-play) with SUPER-DDQN best responses.")

SIDE_CHOICES = {"both": ("team", "opponent"), "team": ("team",), "opponent": ("opponent",)}


def _run(method: str, env: str, iterations: int, br_steps: int, eval_episodes: int, seed: int, sides: str,
         meta_solver: str, warm_start: str, relay: bool, out: Path | None, install: bool, install_dir: Path | None,
         overwrite: bool, figures: bool, threads: int, match_workers: int, br_workers: int, vs_shipped: bool,
         set_: list[str] | None, address: str | None, wait: bool, on_cluster: bool) -> None:
    from suPER.population.config import run_folder
    from suPER.population.loop import Population

    if sides not in SIDE_CHOICES:
        raise C.ConfigError(f"--sides: expected one of {', '.join(SIDE_CHOICES)}, got {sides!r}")
    cfg = PopulationConfig(env=env, method=method, meta_solver=meta_solver, iterations=iterations, br_steps=br_steps,
                           eval_episodes=eval_episodes, seed=seed, sides=SIDE_CHOICES[sides], warm_start=warm_start,
                           relay=relay, threads=threads, match_workers=match_workers, br_workers=br_workers,
                           vs_shipped=vs_shipped, overrides=C.parse_set_pairs(set_ or [])).validate()
    if address is not None:
        _submit(method, cfg, address, wait, dict(
            env=env, iterations=iterations, br_steps=br_steps, eval_episodes=eval_episodes, seed=seed, sides=sides,
            meta_solver=meta_solver, warm_start=warm_start, relay=relay, out=out, install=install,
            install_dir=install_dir, overwrite=overwrite, figures=figures, threads=threads,
            match_workers=match_workers, br_workers=br_workers, vs_shipped=vs_shipped, set_=set_))
        return
    out = out if out is not None else Path("runs/population")
    if install and install_dir is not None:  # checked before any best response trains, not after all of them
        from suPER.runs import writable_folder

        writable_folder(install_dir, "--install-dir")
    pop = Population(cfg, run_folder(out, cfg), log=lambda m: print(m, flush=True))
    try:
        res = pop.run(overwrite=overwrite, on_cluster=on_cluster)
    except OSError as exc:  # disk full and the like (runs.atomic_write_bytes turns torch's errors into OSError)
        from suPER.runs import RunFailure, describe_os_error

        raise RunFailure(f"{describe_os_error(exc)}; the population stopped and {pop.folder} is resumable: rerun "
                         f"the same command") from None
    print(f"{res['folder']}: team strategy " + ", ".join(f"{n} {w:.2f}" for n, w in zip(res["team"], res["x"]))
          + "; opponent strategy " + ", ".join(f"{n} {w:.2f}" for n, w in zip(res["opponent"], res["y"])))
    if figures:
        from suPER.population.figures import draw_all

        for path in draw_all(pop.folder, res["team"], res["opponent"]):
            print(f"figure: {path}")
    if install:
        from suPER.opponents import OPPONENTS_DIR
        from suPER.population.install import install as do_install

        command = shlex.join(["super-marl", *sys.argv[1:]]) if sys.argv[1:2] == ["population"] else (
            f"super-marl population {method} --env {env} --iterations {iterations} --br-steps {br_steps} "
            f"--eval-episodes {eval_episodes} --seed {seed} --sides {sides}")
        r = do_install(pop, install_dir if install_dir is not None else OPPONENTS_DIR, command)
        print(f"installed {r['mixture']} (" + ", ".join(f"{n} {w:.2f}" for n, w in r["members"].items())
              + f"), card {r['card']}")


def _submit(method: str, cfg: Any, address: str, wait: bool, settings: dict[str, Any]) -> None:
    """``--address``: submit the run as one Ray job (``suPER.population.submit``); ``--wait``: until it ends."""
    from suPER import campaigns
    from suPER.population.config import run_folder
    from suPER.population.submit import CLUSTER_OUT, cluster_path, plan_job

    out = cluster_path("--out", settings["out"]) if settings["out"] is not None else CLUSTER_OUT
    if settings["install"]:
        if settings["install_dir"] is None:
            raise C.ConfigError("--install: with --address expected --install-dir on the cluster's storage (the "
                                "job's experiments/opponents/ is a temporary copy)")
        settings["install_dir"] = cluster_path("--install-dir", settings["install_dir"])
    url = campaigns.dashboard_url(address)
    name = run_folder(Path("."), cfg).name
    job = plan_job(method, settings, out, name)
    [jid] = campaigns.submit_jobs([job], url, campaigns.runtime_env(), name)
    print(f"submitted {jid} to {url}; run folder {out}/{name} on the cluster\n  ray job logs --address {url} {jid}",
          flush=True)
    if wait:
        status = campaigns.wait_for_jobs(url, [jid], on_change=lambda j, st: print(f"{j}: {st}", file=sys.stderr))
        print(f"{jid}: {status[jid]}")
        if status[jid] != "SUCCEEDED":
            raise typer.Exit(1)


def _register(method: str, summary: str) -> None:
    """One command per method; all share these options."""

    def command(
        env: Annotated[str, typer.Option(help="battle | adversarial_pursuit")],
        iterations: Annotated[int, typer.Option(help=_help("iterations"))] = _D.iterations,
        br_steps: Annotated[int, typer.Option("--br-steps", help=_help("br_steps"))] = _D.br_steps,
        eval_episodes: Annotated[int, typer.Option("--eval-episodes", help=_help("eval_episodes"))] = _D.eval_episodes,
        seed: Annotated[int, typer.Option(help=_help("seed"))] = _D.seed,
        sides: Annotated[str, typer.Option(help="which sides train: both | team (blue / prey) | opponent "
                                                "(red / predators)")] = "both",
        meta_solver: Annotated[str, typer.Option("--meta-solver", help=f"{solver_names()} (default: the "
                                                 f"method's)")] = _D.meta_solver,
        warm_start: Annotated[str, typer.Option("--warm-start", help=_help("warm_start"))] = _D.warm_start,
        relay: Annotated[bool, typer.Option("--relay/--no-relay", help=_help("relay"))] = _D.relay,
        out: Annotated[Path | None, typer.Option(help="parent folder of the run folder (default runs/population; "
                                                  "with --address ~/super-marl-runs/population on the cluster)")] = None,
        install: Annotated[bool, typer.Option("--install", help="write the final meta-Nash mixture of the "
                                              "opponent side as <env>.mixture.json with a card")] = False,
        install_dir: Annotated[Path | None, typer.Option("--install-dir", help="where --install writes "
                                                         "(default experiments/opponents/)")] = None,
        overwrite: Annotated[bool, typer.Option(help="start over in an existing run folder")] = False,
        figures: Annotated[bool, typer.Option("--figures/--no-figures", help="draw payoff, meta-strategy and "
                                              "exploitability figures")] = True,
        threads: Annotated[int, typer.Option(help=_help("threads"))] = _D.threads,
        match_workers: Annotated[int, typer.Option("--match-workers", help=_help("match_workers"))] = _D.match_workers,
        br_workers: Annotated[int, typer.Option("--br-workers", help=_help("br_workers"))] = _D.br_workers,
        vs_shipped: Annotated[bool, typer.Option("--vs-shipped", help=_help("vs_shipped"))] = _D.vs_shipped,
        set_: Annotated[list[str] | None, typer.Option("--set", help="dotted override of the best-response "
                                                       "trainer, e.g. --set dqn.lr=1e-4")] = None,
        address: Annotated[str | None, typer.Option(help="submit the whole run as one Ray job to the cluster whose "
                                                    "dashboard is here (http://HOST:8265; as grid submit)")] = None,
        wait: Annotated[bool, typer.Option(help="with --address: wait for the job; exit 1 if it fails")] = False,
        on_cluster: Annotated[bool, typer.Option("--on-cluster", hidden=True, help="this is the submitted job: "
                                                 "run matches and best responses as tasks of its cluster")] = False,
    ) -> None:
        _run(method, env, iterations, br_steps, eval_episodes, seed, sides, meta_solver, warm_start, relay, out, install,
             install_dir, overwrite, figures, threads, match_workers, br_workers, vs_shipped, set_, address, wait,
             on_cluster)

    command.__doc__ = summary
    population_app.command(method)(command)


_register("psro", "PSRO: best responses to the other side's meta-Nash (linear programming) of the payoff table.")
_register("fsp", "Fictitious self-play: best responses to the uniform mixture of the other side's policies.")
_register("selfplay", "Self-play: best responses to the other side's newest policy.")
