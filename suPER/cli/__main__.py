"""``python -m suPER.cli``: the ``super-marl`` command."""

import sys

from suPER.cli import main

sys.exit(main())
