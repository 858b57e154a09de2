#!/usr/bin/env bash
# Issue 17's measured run: PSRO on battle map 18 (6 vs 6), ITERATIONS >= 4 best responses per side of BR_STEPS
# env steps each, payoff entries of EVAL_EPISODES greedy episodes, every policy also rated against the shipped
# red team (--vs-shipped: blue policies against it, red policies against it playing blue). Then the final
# red meta-Nash mixture (--install, into the run folder) plays FINAL_EPISODES episodes against the shipped red
# team playing blue and against a random blue team. Wall time of every phase goes to $OUT/walltimes.tsv (the
# per-iteration best-response / match split is exploitability.csv's br_wall_s / match_wall_s), and
# scripts/psro_report.py prints the tables for docs/results.md into $OUT/report.md.
#
#   scripts/psro_battle.sh                         # the real run (defaults below; hours on 2 cores)
#   ITERATIONS=1 BR_STEPS=20 EVAL_EPISODES=1 FINAL_EPISODES=1 OUT=/tmp/psro-check \
#     scripts/psro_battle.sh --set env.horizon=5 --set dqn.learning_starts=10 --set dqn.buffer_size=200
#                                                  # a check that every step works (about a minute)
#
# Extra arguments go to `super-marl population psro`. Rerunning resumes (finished iterations, entries and best
# responses are kept; the evaluations are replayed). Run it with the project's virtual environment active.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ITERATIONS="${ITERATIONS:-4}"
BR_STEPS="${BR_STEPS:-20000}"
EVAL_EPISODES="${EVAL_EPISODES:-20}"
FINAL_EPISODES="${FINAL_EPISODES:-40}"
SEED="${SEED:-1}"
THREADS="${THREADS:-1}"
MATCH_WORKERS="${MATCH_WORKERS:-2}"
BR_WORKERS="${BR_WORKERS:-2}"
OUT="${OUT:-runs/psro_battle}"
PY="${PY:-python}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
RUN="$OUT/battle__psro__s$SEED"
SHIPPED="$ROOT/experiments/opponents/battle.safetensors"
mkdir -p "$OUT"
TIMES="$OUT/walltimes.tsv"
[ -f "$TIMES" ] || printf 'phase\twall_s\tstarted_utc\tcommit\tmachine\n' > "$TIMES"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
MACHINE="$(uname -n) $(nproc) CPUs"

phase() {  # phase NAME LOGFILE COMMAND...: run it, tee its output, record its wall time
  local name="$1" log="$2"; shift 2
  local start t0 t1
  start="$(date -u +%FT%TZ)"; t0="$(date +%s.%N)"
  "$@" 2>&1 | tee "$log"
  t1="$(date +%s.%N)"
  printf '%s\t%.1f\t%s\t%s\t%s\n' "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$start" "$COMMIT" "$MACHINE" >> "$TIMES"
}

phase population "$OUT/population.log" "$PY" -m suPER.cli population psro --env battle --iterations "$ITERATIONS" \
  --br-steps "$BR_STEPS" --eval-episodes "$EVAL_EPISODES" --seed "$SEED" --threads "$THREADS" \
  --match-workers "$MATCH_WORKERS" --br-workers "$BR_WORKERS" --vs-shipped --install --install-dir "$RUN/installed" \
  --out "$OUT" "$@"
MIXTURE="$RUN/installed/battle.mixture.json"
# the team side is the first argument: the shipped red weights playing blue, then a random blue team
phase final_vs_shipped "$OUT/final_vs_shipped.txt" "$PY" -m suPER.cli opponents eval --env battle --team "$SHIPPED" \
  --opponent "$MIXTURE" --episodes "$FINAL_EPISODES" --seed 30001 --threads "$THREADS"
phase final_vs_random "$OUT/final_vs_random.txt" "$PY" -m suPER.cli opponents eval --env battle --team random \
  --opponent "$MIXTURE" --episodes "$FINAL_EPISODES" --seed 30001 --threads "$THREADS"
"$PY" "$ROOT/scripts/psro_report.py" "$RUN" "$TIMES" "$OUT/final_vs_shipped.txt" "$OUT/final_vs_random.txt" \
  | tee "$OUT/report.md"
