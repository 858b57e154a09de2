"""``super-marl plot`` (a campaign's figures and tables) and ``super-marl compare`` (any runs on one figure)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from suPER import config as C
from suPER.cli.common import UserError

SmoothOpt = Annotated[int, typer.Option(help="moving average over this many evaluations per run (1 = none)")]
MetricOpt = Annotated[str, typer.Option(help="metrics.csv column to plot (default team_return_mean)")]
LastOpt = Annotated[float, typer.Option("--last-fraction", help="fraction of each run's last evaluations "
                                                                "that make its final score")]


ConfigOpt = Annotated[list[str] | None, typer.Option("--config", help="only configurations whose label matches "
                                                                     "this glob, e.g. 'ddqn*' (repeatable)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="file stem: NAME.png/.svg and NAME_final.md/.csv "
                                                            "(default team_return + final_performance)")]


def _title(given: str | None, default: str) -> str:
    """The figure's title: ``--title`` when given (one line of text), else ``default``."""
    if given is None:
        return default
    if any(ch in given for ch in "\n\r\t\0"):
        raise UserError(f"--title: expected one line of text, got {given!r}")
    return given


def _check_figure_args(out: Path, smooth: int, last_fraction: float, name: str | None, out_flag: str) -> None:
    """Refuse bad figure flags before any run is read, so a refusal is one line and writes nothing."""
    import os

    if smooth < 1:
        raise UserError(f"--smooth: expected a whole number of evaluations >= 1 (1 = no smoothing), got {smooth}")
    if not 0 < last_fraction <= 1:  # also refuses nan
        raise UserError(f"--last-fraction: expected a fraction in (0, 1], got {last_fraction:g}")
    if name is not None and (not name.strip() or "/" in name or os.sep in name or name in (".", "..")
                             or not C.is_folder_name(name)):
        raise UserError(f"--name: expected a file stem without folders or control characters, got {name!r}")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out_flag}: expected a folder for figures and tables, got the file {out}")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{out_flag}: expected a folder for figures and tables, got {out}, below the file {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out_flag}: expected a writable folder, got {out} ({parent} is not writable)")


def _check_output_file(path: Path, flag: str) -> None:
    """Refuse an output file that cannot be written (a folder, below a file, a read-only place) before anything is
    drawn, so a refusal writes nothing."""
    import os

    if path.is_dir():
        raise UserError(f"{flag}: expected a file to write, got the folder {path}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag}: expected a file to write, got {path}, below the file {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{flag}: expected a writable place, got {path} (not writable)")


def _report(curves: list[Any], skipped: list[Any], out: Path, metric: str, smooth: int, last_fraction: float,
            title: str, configs: list[str] | None, name: str | None, source: str,
            tags: list[str] | None = None) -> None:
    """Figure and table from the loaded runs; skipped and unfinished runs get one ``warning:`` line each.

    When nothing is left to draw, one ``error:`` line says why (the flag that filtered everything out,
    or the first file that could not be read) and nothing is written; warnings are printed only when
    a figure follows, so a refusal stays one line.
    """
    from suPER import plotting

    selected = plotting.select_configurations(curves, configs or [])
    if not selected:
        if curves and configs:
            raise UserError(f"--config: expected a glob matching a configuration "
                            f"({', '.join(sorted({c.label for c in curves}))}), got {' '.join(configs)}")
        if skipped and all(s.columns is not None and "env_steps" in s.columns and metric not in s.columns
                           for s in skipped):
            have = sorted(set().union(*(s.columns for s in skipped)) - {"env_steps"})
            raise UserError(f"--metric: expected a metrics.csv column ({', '.join(have)}), got {metric!r}")
        if skipped:
            raise UserError(f"{source}: expected at least one readable run, got {len(skipped)} run folder(s), "
                            f"none usable (first: {skipped[0].path}: {skipped[0].reason})")
        if tags:
            raise UserError(f"--tag: expected the tag of a run under {source}, got {' '.join(tags)} (no run has it)")
        raise UserError(f"{source}: expected run folders (metrics.csv + config.json) at or below it, got none")

    def warn(line: str) -> None:
        print(f"warning: {line}", file=sys.stderr)

    for s in skipped:
        warn(str(s))
    try:
        paths = plotting.report(selected, out, metric=metric, smoothing=smooth, last_fraction=last_fraction,
                                title=title, name=name, warn=warn)
    except OSError as exc:
        print(f"error: --out: cannot write figures to {out} ({exc.strerror or exc})", file=sys.stderr)
        raise typer.Exit(1) from exc
    print(paths["md"].read_text(), end="")
    n_cfg = len({(c.env, c.label) for c in selected})
    print(f"{len(selected)} runs, {n_cfg} curves -> {paths['png']}, {paths['svg']}, {paths['md']}, "
          f"{paths['csv']}")


def _find_runs(paths: list[Any], flag: str) -> list[Path]:
    """``plotting.find_run_folders`` with a path that matches nothing as one ``error: FLAG: ...`` line."""
    from suPER import plotting

    try:
        return plotting.find_run_folders(paths)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise UserError(f"{flag}: {exc}") from exc


def plot(
    campaign_dir: Annotated[Path | None, typer.Argument(help="folder holding run folders (e.g. runs/paper)")] = None,
    out: Annotated[Path | None, typer.Option(help="where figures and tables go (default CAMPAIGN_DIR/figures)")] = None,
    smooth: SmoothOpt = 1,
    metric: MetricOpt = "team_return_mean",
    last_fraction: LastOpt = 0.1,
    from_wandb: Annotated[str | None, typer.Option("--from-wandb", help="read runs of this W&B project instead "
                                                                        "(online; needs WANDB_API_KEY)")] = None,
    entity: Annotated[str | None, typer.Option(help="W&B entity of --from-wandb")] = None,
    group: Annotated[str | None, typer.Option(help="only W&B runs of this group (--from-wandb)")] = None,
    config: ConfigOpt = None,
    protocol: Annotated[str | None, typer.Option(help="only runs of this protocol: paper (the original's behaviour) "
                                                      "or ours (this suite's defaults); default both")] = None,
    name: NameOpt = None,
    analysis: Annotated[bool, typer.Option("--analysis", help="also the claim table and the aggregates across "
                                                              "envs (normalized IQM, performance profiles, "
                                                              "probability of improvement; suPER/analysis.py)")] = False,
    marl_eval: Annotated[Path | None, typer.Option("--marl-eval", help="also write the runs as JSON in "
                                                                       "marl-eval's layout (suPER/export.py)")] = None,
    figure_title: Annotated[str | None, typer.Option("--title", help="the figure's title (default: the campaign "
                                                                     "folder's name)")] = None,
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="also log the figures (images) and tables "
                                                                   "(W&B tables) to a W&B run")] = False,
    wandb_project: Annotated[str, typer.Option("--wandb-project")] = "super-marl",
    wandb_mode: Annotated[str, typer.Option("--wandb-mode", help="offline (files under OUT/wandb) | online "
                                                                 "(needs WANDB_API_KEY or wandb login)")] = "offline",
) -> None:
    """The paper's figures from a campaign: one panel per env, team return vs env steps, one curve per
    configuration (mean, 95% bootstrap band over seeds), plus a final-performance table (mean and IQM
    over the last 10% of evaluations with 95% bootstrap CIs) as markdown and CSV.

    Only finished runs make the bands and the table; unfinished ones are drawn dashed with a warning,
    and a run folder that cannot be read is skipped with a warning naming the file.
    """
    from suPER import plotting

    if protocol is not None and protocol not in C.PROTOCOLS:
        raise UserError(f"--protocol: expected {' or '.join(C.PROTOCOLS)}, got {protocol!r}")
    if marl_eval is not None:
        _check_output_file(marl_eval, "--marl-eval")
    if wandb and wandb_mode not in ("offline", "online"):
        raise UserError(f"--wandb-mode: expected offline or online, got {wandb_mode!r}")
    if wandb:  # credentials before anything is drawn: a run that cannot log is refused, not half done
        from suPER.runs import WandbError, check_wandb_credentials

        try:
            check_wandb_credentials(wandb_mode)
        except WandbError as exc:
            raise UserError(str(exc)) from None
    skipped: list[Any] = []
    if from_wandb:
        if campaign_dir is None and out is None:
            out = Path("runs") / "wandb" / from_wandb / "figures"
        target = out or (campaign_dir or Path(".")) / "figures"
        _check_figure_args(target, smooth, last_fraction, name, "--out")
        try:
            curves = plotting.load_wandb_curves(from_wandb, entity=entity, metric=metric,
                                                filters={"group": group} if group else None)
        except Exception as exc:  # network, authentication or project errors from the W&B client
            raise UserError(f"--from-wandb {from_wandb}: cannot read runs ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}); W&B needs network access and "
                            f"WANDB_API_KEY (or wandb login)") from exc
        title, source = f"W&B {from_wandb}", f"--from-wandb {from_wandb}"
    else:
        if campaign_dir is None:
            raise UserError("CAMPAIGN_DIR: expected a folder of run folders (or --from-wandb PROJECT), got nothing")
        if not campaign_dir.is_dir():
            got = "a file" if campaign_dir.exists() else "no such folder"
            raise UserError(f"{campaign_dir}: expected a folder of run folders (CAMPAIGN_DIR), got {got}")
        target = out or campaign_dir / "figures"
        _check_figure_args(target, smooth, last_fraction, name, "--out" if out else f"--out (default {target})")
        curves = plotting.load_run_curves(_find_runs([campaign_dir], "CAMPAIGN_DIR"), metric=metric,
                                          skipped=skipped)
        title, source = campaign_dir.resolve().name, str(campaign_dir)
    title = _title(figure_title, title)
    if protocol is not None:
        kept = [c for c in curves if plotting.is_paper(c.label) == (protocol == "paper")]
        if curves and not kept:
            raise UserError(f"--protocol: expected a protocol with runs under {source}, got {protocol!r} (all "
                            f"{len(curves)} runs are {'paper' if protocol == 'ours' else 'ours'})")
        curves = kept
    _report(curves, skipped, target, metric, smooth, last_fraction, title, config, name, source)
    if analysis or marl_eval:
        _analysis(plotting.select_configurations(curves, config or []), target, last_fraction, name, analysis, marl_eval)
    if wandb:
        _log_figures(target, title, source, wandb_project, wandb_mode)


def _log_figures(target: Path, title: str, source: str, project: str, mode: str) -> None:
    """Every figure (PNG) and table (CSV) ``plot`` wrote into ``target`` as one W&B run (job type analysis)."""
    from suPER.runs import WandbError, WandbLogger

    try:
        logger = WandbLogger(target, project, "", f"{title} figures", {"source": source, "figures": str(target)},
                             mode=mode, tags=["analysis"])
    except WandbError as exc:
        raise UserError(str(exc)) from None
    try:
        logger.log_files({p.stem: p for p in sorted(target.glob("*.png"))},
                         {p.stem: p for p in sorted(target.glob("*.csv"))})
    finally:
        logger.close()
    print(f"W&B ({mode}): {len(list(target.glob('*.png')))} figure(s) and {len(list(target.glob('*.csv')))} "
          f"table(s) logged" + (f" under {target / 'wandb'} (wandb sync to upload)" if mode == "offline" else ""))


def _analysis(curves: list[Any], out: Path, last_fraction: float, name: str | None, claims: bool,
              marl_eval: Path | None) -> None:
    """Claim table + aggregates (``analysis.report``) and / or the marl-eval export of ``curves``."""
    if claims:
        from suPER import analysis

        paths = analysis.report(curves, out, last_fraction=last_fraction, name=name,
                                log=lambda line: print(line, file=sys.stderr, flush=True))
        print(paths["claims_md"].read_text(), end="")
        print(f"-> {', '.join(str(p) for p in paths.values())}")
    if marl_eval:
        from suPER import export

        try:
            path = export.write_marl_eval(curves, marl_eval, last_fraction,
                                          warn=lambda line: print(line, file=sys.stderr))
            print(f"marl-eval JSON -> {path}")
        except OSError as exc:
            raise UserError(f"--marl-eval: {marl_eval}: cannot write ({exc.strerror})") from exc


def compare(
    runs_: Annotated[list[str] | None, typer.Argument(metavar="RUNS...", help="run folders, campaign folders or "
                                                                             "globs (quote them) of runs to compare")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="only runs with this --tag (repeatable); with no RUNS, "
                                                       "searches --root")] = None,
    root: Annotated[Path, typer.Option(help="where --tag looks when no RUNS are given")] = Path("runs"),
    out: Annotated[Path, typer.Option(help="where the figure and table go")] = Path("runs/compare"),
    smooth: SmoothOpt = 1,
    metric: MetricOpt = "team_return_mean",
    last_fraction: LastOpt = 0.1,
    config: ConfigOpt = None,
    name: NameOpt = None,
    figure_title: Annotated[str | None, typer.Option("--title", help="the figure's title (default: compare)")] = None,
) -> None:
    """Compare any set of runs (e.g. a tweaked flag against a campaign) on one figure, same statistics as plot.

    Example: super-marl compare 'runs/paper/pursuit__ddqn_super_quantile__s*' 'runs/*__bw005'
    """
    from suPER import plotting

    if not runs_ and not tag:
        raise UserError("RUNS: expected run folders, campaign folders or globs (or --tag), got nothing")
    _check_figure_args(out, smooth, last_fraction, name, "--out")
    title = _title(figure_title, "compare")
    folders = _find_runs(runs_, "RUNS") if runs_ else _find_runs([root], "--root")
    skipped: list[Any] = []
    curves = plotting.load_run_curves(folders, metric=metric, tags=tag or (), skipped=skipped)
    source = " ".join(runs_) if runs_ else str(root)
    _report(curves, skipped, out, metric, smooth, last_fraction, title, config, name, source, tag)

