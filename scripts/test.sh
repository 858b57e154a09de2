#!/usr/bin/env bash
# The README's test command: install into .venv if needed, then run the default (fast) test suite.
# Extra arguments go to pytest (e.g. -m slow for the long learning checks, -k relay; -n 0 for one process).
# Tests run in TEST_WORKERS pytest-xdist processes (default 3 on CI's 2 cores: many tests spend part of their time
# waiting on Ray starting up, subprocesses and signals, and a third worker fills those gaps; measured on a 2-core
# AMD EPYC beside the niced campaign: the suite in 709 s with 3 workers, 780 s with 2).
source "$(dirname "$0")/_venv.sh"
export RAY_AUTH_MODE=disabled WANDB_MODE=offline WANDB_SILENT=true
exec python -m pytest -n "${TEST_WORKERS:-3}" "$@"
