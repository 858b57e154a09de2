"""``super-marl``: the command line (typer), one module per command family.

=====================  ==========================================================================
``train``              ``suPER.cli.train``: options generated from the option table (``suPER.flags``)
``envs``               ``suPER.cli.envs``
``plot``, ``compare``  ``suPER.cli.figures``
``grid ...``           ``suPER.cli.grid``
``reproduce``          ``suPER.cli.reproduce``
``opponents ...``      ``suPER.cli.opponents``
``population ...``     ``suPER.population.cli``
=====================  ==========================================================================

The original main.py's spellings (``--num_timesteps``, ``--suPER True``) are rewritten into this CLI's flags
before typer parses them (``suPER.cli.paper``). Heavy modules (torch, the trainers) are imported lazily, so
``--help`` and input errors are instant. Bad input is any ``config.ConfigError`` (``UserError``, ``GridError``,
``RunFolderError``, ...): one line ``error: <flag as typed>: expected ..., got ...``, exit code 2.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from suPER import config as C
from suPER.cli import envs, figures, grid, opponents, reproduce, train
from suPER.cli.common import UserError, guard_numbers
from suPER.cli.paper import translate_paper_args
from suPER.population.cli import population_app

__all__ = ["UserError", "app", "main", "translate_paper_args"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="rich",
                  help="SUPER: selective experience relay for multi-agent DQN (NeurIPS 2023), rebuilt.")
app.command("train")(train.train)
app.command("envs")(envs.envs)
app.command("plot")(figures.plot)
app.command("compare")(figures.compare)
app.command("reproduce")(reproduce.reproduce)
app.add_typer(grid.grid_app, name="grid")
app.add_typer(opponents.opponents_app, name="opponents")
app.add_typer(population_app, name="population")


def _accepts_overwrite(argv: list[str]) -> bool:
    """Whether the (sub)command that ``argv`` names has an ``--overwrite`` option (``train`` does, ``grid run``
    and ``reproduce`` do not)."""
    cmd: Any = typer.main.get_command(app)  # typer's own (vendored) click classes: duck-typed, not isinstance
    for token in argv:
        if token not in getattr(cmd, "commands", {}):
            break
        cmd = cmd.commands[token]
    return any(p.name == "overwrite" for p in cmd.params)


def input_error_line(exc: C.ConfigError, argv: list[str]) -> str:
    """A typed input error as the user reads it; a run-folder error's start-over remedy in the words of the
    command typed (``RunFolderError.message``): ``train`` has ``--overwrite``, ``grid run`` and ``reproduce``
    do not (they start over a run whose folder is moved aside)."""
    from suPER.runs import RunFolderError

    line = exc.message(can_overwrite=_accepts_overwrite(argv)) if isinstance(exc, RunFolderError) else str(exc)
    if line.startswith("--out: ") and not any(a == "--out" or a.startswith("--out=") for a in argv):
        line = line.removeprefix("--out: ")  # the folder was the default: name it, not a flag nobody typed
    return line


def main(argv: list[str] | None = None) -> int:
    """Console entry point: translate paper spellings, run typer, and turn every outcome into an exit code.

    0 success, 1 a failure the command reports (failed runs of ``grid run``, failed jobs of ``grid submit
    --wait``), 2 bad input (one line ``error: <flag>: ...``), 130 an interrupt (Ctrl-C). Why explicit: in
    non-standalone mode typer *returns* the code of ``typer.Exit`` (and turns Ctrl-C into ``Exit(130)``)
    instead of exiting, so ignoring the return value made all of these exit 0.
    """
    import os

    for stream in (sys.stdout, sys.stderr):  # an ASCII-only PYTHONIOENCODING must not turn a path into a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        os.getcwd()
    except FileNotFoundError:
        print("error: the current directory no longer exists (deleted while this shell was in it); cd to an "
              "existing folder", file=sys.stderr)
        return 2
    try:  # typer >= 0.29 vendors click as typer._click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions as click_exc

    argv = list(sys.argv[1:] if argv is None else argv)
    as_typed = list(argv)  # the command to run again after an interrupt, in the user's own spellings
    typed: dict[str, str] = {}
    try:
        argv, notes = translate_paper_args(argv, typed)
        for n in notes:
            print(n, file=sys.stderr)
        command = guard_numbers(typer.main.get_command(app))
        code = command.main(args=argv, prog_name="super-marl", standalone_mode=False, obj={"typed": typed})
    except typer.Exit as exc:
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except click_exc.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(exc.format_message(), file=sys.stderr)
            return 0
        print(f"error: {exc.format_message()}".replace("\n", " "), file=sys.stderr)
        return 2
    except C.ConfigError as exc:  # bad input, typed by its class (UserError, GridError, RunFolderError, ...)
        print(f"error: {input_error_line(exc, argv)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a run that could not start its W&B logging, or stopped on a failed write
        from suPER.runs import RunFailure, WandbError

        if isinstance(exc, (WandbError, RunFailure)):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0  # a command's None return: success
    if code == 130:
        import shlex

        print(f"interrupted: to resume from the latest checkpoints, run the same command again: "
              f"{shlex.join(['super-marl', *as_typed])}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

