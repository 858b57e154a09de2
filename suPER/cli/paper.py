"""The original main.py's spellings (``--num_timesteps``, ``--suPER True``, ``--parameter_sharing=true``,
``--use_gpu 0``, ``--env pursuit_plaindqn``), rewritten into this CLI's flags before typer parses them.

The plain renames and the flags that set one config key come from the option table (``suPER.flags``: each
``Flag.paper``); the ones with a translation of their own are here (``PAPER_SPECIAL``).
"""

from __future__ import annotations

from suPER.algorithms import ALGORITHMS
from suPER.cli.common import UserError
from suPER.flags import PAPER_RENAMES, PAPER_SETTINGS

PAPER_IGNORED = {
    "--ray_plain_init": 0, "--ray_local_mode": 0, "--num_cpus": 1, "--framework": 1,
    "--ray_address": 1, "--suPER_insertion_method": 1, "--suPER_td_error_method": 1,
    "--suPER_broadcast_heuristic": 1, "--evaluation": 1, "--experiment_name": 1, "--fully_connected": 1,
    "--parameter_tunning": 1, "--config_file": 1,
}
"""Paper flags with no meaning for the native trainer -> number of values they take (accepted, noted)."""


PAPER_SPECIAL = {
    "--suPER": "True | False: --super | --no-super",
    "--parameter_sharing": "True | False: --parameter-sharing | --no-parameter-sharing",
    "--use_gpu": "1 | 0: --device cuda | cpu",
    "--batch_size": "N: --set dqn.batch_size=N --set dqn.rollout_fragment_length=N (the original set both)",
    "--battle_advpursuit_against_pretrained": "--opponent pretrained",
    "--eval_in_parallel": "--eval-parallel",
    "--env": "ENV with an algorithm suffix (pursuit_plaindqn): --env pursuit --algo dqn",
}
"""The original's flags with a translation of their own (``translate_paper_args``) -> what they become."""


def paper_spellings() -> dict[str, str]:
    """Every spelling of the original main.py this CLI accepts -> what it becomes (for ``--help`` and the docs)."""
    rows = {**{p: m for p, m in PAPER_RENAMES.items()}, **{p: f"--set {k}=VALUE" for p, k in PAPER_SETTINGS.items()},
            **PAPER_SPECIAL}
    rows.update({p: "accepted, no effect here" for p in PAPER_IGNORED})
    return rows


TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no")


def paper_bool(flag: str, text: str) -> bool:
    """The value of a paper boolean flag (``--suPER True``): only true/false, 1/0, yes/no in any case.

    Why strict: the original took every other word as false, so ``--suPER Ture`` trained plain DQN.
    """
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise UserError(f"{flag}: expected true/false, 1/0 or yes/no, got {text!r}")


def translate_paper_args(argv: list[str], typed: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Rewrite the paper's main.py flags into this CLI's flags.

    Args:
        argv: the command line as typed.
        typed: filled with what each rewritten flag was typed as (``"--bandwidth" -> "--suPER_bandwidth"``,
            ``"--set env.horizon" -> "--horizon"``), so errors can name the flag the user wrote.

    Returns:
        (new argv, notes for flags that were accepted but have no effect here).
    """
    out: list[str] = []
    notes: list[str] = []
    typed = {} if typed is None else typed
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")

        def value(flag: str = flag, eq: str = eq, inline: str = inline) -> str:
            nonlocal i
            if eq:
                return inline
            if i + 1 >= len(argv):
                raise UserError(f"{flag}: expected a value")
            i += 1
            return argv[i]

        if flag == "--suPER":
            out.append("--super" if paper_bool(flag, value()) else "--no-super")
            typed["--super"] = flag
        elif flag == "--parameter_sharing":
            out.append("--parameter-sharing" if paper_bool(flag, value()) else "--no-parameter-sharing")
            typed["--parameter-sharing"] = flag
        elif flag == "--use_gpu":
            v = value()
            typed["--device"] = flag
            try:
                out += ["--device", "cuda" if float(v) > 0 else "cpu"]
            except ValueError as exc:
                raise UserError(f"--use_gpu: expected a number, got {v!r}") from exc
        elif flag == "--env":
            v = value()
            for spec in ALGORITHMS.values():  # the paper's --env pursuit_plaindqn = --env pursuit --algo dqn
                if spec.paper_suffix and v.endswith(spec.paper_suffix):
                    v = v[: -len(spec.paper_suffix)]
                    out += ["--algo", spec.name]
            out += ["--env", v]
        elif flag == "--batch_size":  # the paper set both the train batch and the fragment length
            v = value()
            out += ["--set", f"dqn.batch_size={v}", "--set", f"dqn.rollout_fragment_length={v}"]
            typed.update({"--set dqn.batch_size": flag, "--set dqn.rollout_fragment_length": flag})
        elif flag == "--battle_advpursuit_against_pretrained":
            out += ["--opponent", "pretrained"]
        elif flag == "--eval_in_parallel":  # the original's evaluation parallel to training
            out.append("--eval-parallel")
            typed["--eval-parallel"] = flag
        elif flag in PAPER_RENAMES:
            out += [PAPER_RENAMES[flag], value()]
            typed[PAPER_RENAMES[flag]] = flag
        elif flag in PAPER_SETTINGS:
            out += ["--set", f"{PAPER_SETTINGS[flag]}={value()}"]
            typed[f"--set {PAPER_SETTINGS[flag]}"] = flag
        elif flag in PAPER_IGNORED:
            if PAPER_IGNORED[flag] and not eq:
                i += 1
            notes.append(f"note: {flag} has no effect with the native trainer (ignored)")
        else:
            out.append(arg)
        i += 1
    return out, notes

