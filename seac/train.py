"""The SEAC code's entry point, as the paper's README runs it: ``cd seac && python train.py with env=pursuit``.

A thin wrapper: sacred-style ``with KEY=VALUE ...`` settings become ``super-marl train --algo seac`` flags
(``SACRED_FLAGS``: the original SEAC's names, e.g. ``num_env_steps``, ``seed``, ``lr``, ``seac_coef``), any
other ``KEY`` naming a ``seac.*`` setting (``n_steps``, ``entropy_coef``, ...) becomes ``--set seac.KEY=VALUE``,
and a dotted ``KEY`` (``env.kwargs.x_size``) is passed as ``--set KEY=VALUE``. Flags before ``with``
(``--out DIR``) go to ``super-marl train`` unchanged.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, from `cd seac`

SACRED_FLAGS = {
    "env": "--env", "env_name": "--env", "seed": "--seed", "num_env_steps": "--num-timesteps",
    "eval_interval": "--eval-interval", "episodes_per_eval": "--eval-episodes",
}
"""sacred key -> ``super-marl train`` flag."""

SACRED_SETTINGS = {
    "time_limit": "env.horizon", "value_loss_coef": "seac.value_coef", "max_grad_norm": "seac.grad_clip",
    "seac_coef": "seac.seac_lambda", "num_processes": "seac.num_envs", "num_steps": "seac.n_steps",
}
"""sacred key -> dotted setting, where the name differs from ours."""


def settings_help() -> str:
    """What ``with help`` prints: every setting ``with KEY=VALUE`` takes, its default and what it sets."""
    from dataclasses import MISSING, fields

    from suPER.config import SEACConfig

    lines = ["usage: python train.py [super-marl train flags, e.g. --out DIR] with KEY=VALUE ...", "",
             "sacred keys of the original SEAC code:"]
    lines += [f"  {k:<18} -> super-marl train {v}" for k, v in SACRED_FLAGS.items()]
    lines += [f"  {k:<18} -> --set {v}" for k, v in SACRED_SETTINGS.items()]
    lines += ["", "SEAC settings (--set seac.KEY=VALUE), with their defaults:"]
    lines += [f"  {f.name:<18} {f.default!r}" for f in fields(SEACConfig) if f.default is not MISSING]
    lines += ["", "any dotted key (env.kwargs.x_size=10, run.eval_points=20) is passed as --set KEY=VALUE"]
    return "\n".join(lines)


def translate(argv: list[str]) -> list[str]:
    """``[flags..., "with", "env=pursuit", "lr=1e-3"]`` -> ``super-marl`` arguments.

    Raises:
        suPER.cli.UserError: a setting without ``=`` or with an unknown key.
    """
    from dataclasses import fields

    from suPER.cli import UserError
    from suPER.config import SEACConfig

    if "with" not in argv:
        return ["train", "--algo", "seac", *argv]
    at = argv.index("with")
    out = ["train", "--algo", "seac", *argv[:at]]
    own = {f.name for f in fields(SEACConfig)}
    for item in argv[at + 1:]:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"with: expected KEY=VALUE, got {item!r}")
        if key in SACRED_FLAGS:
            out += [SACRED_FLAGS[key], value]
        elif key in SACRED_SETTINGS or key in own or "." in key:
            out += ["--set", f"{SACRED_SETTINGS.get(key, key if '.' in key else f'seac.{key}')}={value}"]
        else:
            raise UserError(f"with: expected a SEAC setting ({', '.join(sorted({*SACRED_FLAGS, *SACRED_SETTINGS, *own}))}"
                            f") or a dotted key, got {key!r}")
    return out


if __name__ == "__main__":
    from suPER.cli import UserError, main

    if any(a in ("help", "--help", "-h") for a in sys.argv[1:]) and "with" in sys.argv[1:] or \
            sys.argv[1:] in (["help"], ["--help"], ["-h"]):
        print(settings_help())
        sys.exit(0)
    try:
        args = translate(sys.argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args))
