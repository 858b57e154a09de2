#!/usr/bin/env bash
# Submit every run of a grid file to a Ray cluster through the Job Submission API (`ray job submit`),
# as the original run_all.sh did, with ray_runtime.yaml as the jobs' runtime environment.
#
#   ./run_all.sh [options] GRID_FILE            e.g. ./run_all.sh experiments/paper_grid.yaml
#   ./run_all.sh [options]                      no GRID_FILE: the original's default, the paper grid minus
#                                               MADDPG and SEAC, seeds 1-3 (117 jobs)
#
#   --address URL    the cluster's dashboard (default: $RAY_ADDRESS, else http://127.0.0.1:8265, where
#                    `ray dashboard cluster/aws.yaml` forwards the head's dashboard)
#   --per-run        one job per run: `super-marl train ...` (default)
#   --per-grid       one job for the grid: `super-marl grid run GRID_FILE` (Ray Tune on the cluster)
#   --out DIR        run folders on the cluster (default ~/super-marl-runs/<grid name>, expanded there)
#   --filter F       select runs, as `super-marl grid list --filter` (repeatable)
#   --seeds S        seeds for every entry (a count or a list 1,2,3)
#   --cpus N         CPUs per run (default 1)      --gpus N   GPUs per run (default 0)
#   --wandb/--no-wandb  log online to W&B project ${WANDB_PROJECT:-super-marl}, group <grid name> (default:
#                    when ~/.config/super-marl/wandb.netrc, the nodes' W&B login, exists here)
#   --wait           wait until every job has ended; exit 1 if one did not succeed
#   --dry-run        print the `ray job submit` commands instead of running them
#
# Secrets never travel with the jobs: Ray logs every job's runtime env and serves it from the dashboard,
# so WANDB_API_KEY is not passed on even when it is set here. The nodes log in to W&B with the netrc
# file that cluster/aws.yaml installs on them (mode 0600); see cluster/aws.yaml.
# Resubmitting the same grid skips finished runs and resumes unfinished ones from their checkpoints.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }

cd "$(dirname "${BASH_SOURCE[0]}")"     # the repository root: shipped to the cluster as working_dir
PY="${PYTHON:-python}"
ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"
PER=run; OUT=""; CPUS=1; GPUS=0; WAIT=0; DRY=0; GRID=""; SEEDS_GIVEN=0
LIST_ARGS=(); WANDB_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in  # an option that takes a value and got none is one line, not "unbound variable"
    --address|--out|--filter|--seeds|--cpus|--gpus)
      [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || { echo "error: $1: expected a value after it" >&2; exit 2; } ;;
  esac
  case "$1" in
    --address) ADDRESS="$2"; shift 2 ;;
    --per-run) PER=run; shift ;;
    --per-grid) PER=grid; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --filter|--seeds) [ "$1" = --filter ] || SEEDS_GIVEN=1; LIST_ARGS+=("$1" "$2"); shift 2 ;;
    --cpus) CPUS="$2"; shift 2 ;;
    --gpus) GPUS="$2"; shift 2 ;;
    --wandb|--no-wandb) WANDB_ARGS=("$1"); shift ;;
    --wait) WAIT=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    -*) echo "error: $1: expected an option of ./run_all.sh --help, got an unknown one" >&2; exit 2 ;;
    *) [ -z "$GRID" ] || { echo "error: more than one grid file" >&2; exit 2; }; GRID="$1"; shift ;;
  esac
done
if [ -z "$GRID" ]; then  # as the original's bare run_all.sh: most experiments (except MADDPG and SEAC), 3 seeds
  GRID=experiments/paper_grid.yaml
  LIST_ARGS=(--filter "algo=dqn,ddqn,qmix" "${LIST_ARGS[@]+"${LIST_ARGS[@]}"}")
  [ "$SEEDS_GIVEN" = 1 ] || LIST_ARGS+=(--seeds 3)
  echo "no grid file given: submitting $GRID without MADDPG and SEAC (--filter algo=dqn,ddqn,qmix)$([ "$SEEDS_GIVEN" = 1 ] || echo ', seeds 1-3'), as the original run_all.sh" >&2
fi
case "$ADDRESS" in http://*|https://*) ;; *) ADDRESS="http://$ADDRESS" ;; esac

# The jobs of the grid (this validates the whole grid file before anything is submitted).
JOB_ARGS=(--per "$PER" --cpus "$CPUS" --gpus "$GPUS" --wandb-project "${WANDB_PROJECT:-super-marl}")
[ -z "$OUT" ] || JOB_ARGS+=(--out "$OUT")
JOBS="$("$PY" -m suPER.cli grid submit "$GRID" "${LIST_ARGS[@]+"${LIST_ARGS[@]}"}" "${JOB_ARGS[@]}" \
        "${WANDB_ARGS[@]+"${WANDB_ARGS[@]}"}" --print-jobs)"
[ -n "$JOBS" ] || { echo "error: $GRID: no runnable run selected" >&2; exit 2; }

# Fail within seconds when no cluster answers.
if [ "$DRY" = 0 ] && ! "$PY" -c 'import sys; from suPER.campaigns import check_cluster; check_cluster(sys.argv[1])' \
     "$ADDRESS" 2>/tmp/run_all.$$.err; then
  tail -n 1 /tmp/run_all.$$.err | sed 's/^[A-Za-z.]*Error: /error: /' >&2; rm -f /tmp/run_all.$$.err; exit 2
fi
rm -f /tmp/run_all.$$.err

# Runtime env = ray_runtime.yaml + the repository as working_dir (no secrets: see the header).
RUNTIME_ENV="$(umask 077; mktemp "${TMPDIR:-/tmp}/super-marl-runtime-env.XXXXXX")"
trap 'rm -f "$RUNTIME_ENV"' EXIT
"$PY" -c 'import json, sys; from suPER.campaigns import runtime_env; json.dump(runtime_env(sys.argv[1]), open(sys.argv[2], "w"))' \
  ray_runtime.yaml "$RUNTIME_ENV"

# a dry run prints commands a user can paste: the runtime env inline (it holds no secret), not the temp file that
# is removed when this script exits
if [ "$DRY" = 1 ]; then RUNTIME_ARGS=(--runtime-env-json "$(cat "$RUNTIME_ENV")"); else RUNTIME_ARGS=(--runtime-env "$RUNTIME_ENV"); fi
IDS=()
while IFS=$'\t' read -r ID JOB_CPUS JOB_GPUS ENTRY; do
  CMD=(ray job submit --address "$ADDRESS" --no-wait "${RUNTIME_ARGS[@]}" --submission-id "$ID")
  [ "$JOB_CPUS" = 0 ] || CMD+=(--entrypoint-num-cpus "$JOB_CPUS")
  [ "$JOB_GPUS" = 0 ] || CMD+=(--entrypoint-num-gpus "$JOB_GPUS")
  CMD+=(-- bash -c "$ENTRY")
  if [ "$DRY" = 1 ]; then
    printf '%q ' "${CMD[@]}"; echo
  else
    echo "submitting $ID"
    "${CMD[@]}" >/dev/null
    IDS+=("$ID")
  fi
done <<< "$JOBS"
[ "$DRY" = 1 ] && exit 0
echo "submitted ${#IDS[@]} job(s) to $ADDRESS; follow one with: ray job logs --address $ADDRESS --follow ${IDS[0]}"

if [ "$WAIT" = 1 ]; then
  FAILED=0
  for ID in "${IDS[@]}"; do
    MISSES=0
    while :; do
      # `ray job status` prints e.g. "Job 'ID' succeeded" or "Status for job 'ID': RUNNING"
      STATUS="$(ray job status --address "$ADDRESS" "$ID" 2>&1 | grep -oiE "\b(pending|running|succeeded|failed|stopped)\b" \
                | tail -n 1 | tr '[:lower:]' '[:upper:]' || true)"
      case "$STATUS" in
        SUCCEEDED|FAILED|STOPPED) break ;;
        "") MISSES=$((MISSES + 1)); [ "$MISSES" -lt 20 ] || { STATUS=UNKNOWN; break; } ;;
      esac
      sleep 3
    done
    echo "$ID: $STATUS"
    [ "$STATUS" = SUCCEEDED ] || FAILED=$((FAILED + 1))
  done
  [ "$FAILED" = 0 ] || { echo "$FAILED job(s) did not succeed (ray job logs --address $ADDRESS ID)" >&2; exit 1; }
fi
