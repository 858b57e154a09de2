#!/usr/bin/env bash
# The README's test command: install into .venv if needed, then run the default (fast) test suite.
# Extra arguments go to pytest (e.g. -m slow for the long learning checks, -k relay; -n 0 for one process).
# Tests run in TEST_WORKERS pytest-xdist processes (default 2: CI's 2 cores; most tests use one core).
source "$(dirname "$0")/_venv.sh"
export RAY_AUTH_MODE=disabled WANDB_MODE=offline WANDB_SILENT=true
exec python -m pytest -n "${TEST_WORKERS:-2}" "$@"
