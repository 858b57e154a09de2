#!/usr/bin/env bash
# The README's main job: a short real experiment (DDQN on SISL pursuit, about 6 minutes on 2 cores).
# Extra arguments are passed to `super-marl train` (e.g. --seed 2, --super).
source "$(dirname "$0")/_venv.sh"
exec super-marl train --env pursuit --algo ddqn --quick --out runs/demo --overwrite "$@"
