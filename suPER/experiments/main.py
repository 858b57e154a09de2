"""The original's entry point, as its README runs it: ``python suPER/experiments/main.py --env pursuit --suPER True ...``.

A thin wrapper, no logic of its own: every flag goes to ``super-marl train`` (``suPER.cli.main``), whose
``translate_paper_args`` maps the paper's main.py spellings (``--suPER True``, ``--suPER_mode``,
``--num_seeds``, ``--use_gpu 0``, ``--env pursuit_plaindqn``, ...) onto its own flags and accepts the
flags without meaning here (``--ray_local_mode``, ``--ray_plain_init``, ...) with a note.
"""

import sys
from pathlib import Path

# run as a script, this folder is on sys.path rather than the repository root that holds the package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from suPER.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
