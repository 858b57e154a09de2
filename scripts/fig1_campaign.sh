#!/usr/bin/env bash
# Start or resume the Figure 1 campaign (docs/results.md, "Figure 1") on this machine: its stages in order, each a
# `grid run` that skips finished runs and resumes unfinished ones, so one command continues wherever it stopped.
#
#   1. paper protocol, battle + adversarial pursuit: no sharing, SUPER quantile, share-all, parameter sharing,
#      seeds 1-5 (40 runs)
#   2. paper protocol, battle + adversarial pursuit: SUPER gaussian (the original's, on the variance) and SUPER
#      stochastic, seeds 1-3 (12 runs)
#   3. paper protocol, pursuit: no sharing, SUPER quantile, share-all, seeds 1-3 (9 runs)
#   4. our protocol, battle + adversarial pursuit: seeds 4-5 of stage 1's configurations (16 runs, 2 of them
#      recorded already)
#   5. deviation pairs (experiments/fig1_isolate.yaml, in runs/fig1_isolate): adversarial pursuit's share-all and
#      pursuit's no sharing, SUPER quantile and share-all under the paper protocol with our insertion priority,
#      seeds 1-3 (12 runs; each pairs with stage 1's or stage 3's run of its configuration and seed)
#   6. the paper's plain-DQN lines (experiments/fig1_dqn.yaml, in runs/fig1_dqn): DQN without double Q-learning, no
#      sharing, SUPER quantile and share-all, the three envs under the paper protocol, seeds 1-3 (27 runs)
#
#   bash scripts/fig1_campaign.sh [--worktree DIR]              # start or resume (detached, lowest CPU share)
#   bash scripts/fig1_campaign.sh [--worktree DIR] --stages     # the stages' commands, as it runs them
#   bash scripts/fig1_campaign.sh [--worktree DIR] --status     # running or not, each run's progress, time to go, rows checked
#   bash scripts/fig1_campaign.sh [--worktree DIR] --collect    # finished runs' records -> results/<folder>, then the
#                                                               # report redrawn from them (commit both)
#
# Every step is idempotent: the worktree pinned at the campaign's commit (created if missing, refused at another
# commit), its .venv (created if missing, a few minutes), the grid files the pinned commit lacks copied in
# (untracked: fig1_isolate.yaml, whose base is the pinned fig1_paper.yaml, and fig1_dqn.yaml), the finished runs' records copied from
# results/<folder> into its run folders (status "finished", so `grid run` skips them: a new machine has lost the run
# folders), then the stages detached in their own session at the lowest scheduler share (setsid gives them their own
# autogroup, where plain nice does not yield; so the autogroup is niced too), logging to DIR/campaign.log.
# Campaign folders: runs/fig1 (stages 1-4, records in results/fig1), runs/fig1_isolate (stage 5's deviation pairs,
# records in results/fig1_isolate) and runs/fig1_dqn (stage 6, records in results/fig1_dqn): the last two never enter
# Figure 1's tables, and their claims are their own Holm families.
# Check after a resume: python scripts/check_rows.py DIR/runs (every evaluation row exactly once).
# The report --collect redraws: docs/results.md's Figure 1 tables (scripts/fig1_tables.py --update), each protocol's
# team-return figure, the plain-DQN lines' (results/fig1_dqn) and our protocol's aggregate figure in docs/figures;
# the analysis behind the prose (claims, notes, aggregates as .md and .csv) lands in DIR/runs/fig1-report. The prose
# around the tables stays for a person to update.
# Records made before this campaign (our protocol, seeds 1-3 and two seed-4 runs) were run at c083f22 by the
# script's earlier version (git log -- scripts/fig1_campaign.sh).
set -euo pipefail
COMMIT=19fb679
repo=$(cd "$(dirname "$0")/.." && pwd)
wt=/work/fig1-paper
if [ "${1:-}" = --worktree ]; then
  [ -n "${2:-}" ] || { echo "fig1_campaign.sh: --worktree: expected a folder" >&2; exit 2; }
  wt=$2; shift 2
fi
# the checks run with this checkout's code when it has a venv
py="$repo/.venv/bin/python"; [ -x "$py" ] || py="$wt/.venv/bin/python"
PAPER=experiments/fig1_paper.yaml OURS=experiments/fig1.yaml ISOLATE=experiments/fig1_isolate.yaml
DQN=experiments/fig1_dqn.yaml
COPIED="$ISOLATE $DQN"  # grid files the pinned commit lacks
FOLDERS="fig1 fig1_isolate fig1_dqn"  # campaign folders under runs/ (worktree) and results/ (records)
FOUR='name=*-ddqn,*-super-quantile,*-shareall,*-paramshare'
stages() {  # one line per grid run: its campaign folder, grid file, then its arguments
  printf '%s\n' \
    "fig1 $PAPER --seeds 5 --filter env=battle,adversarial_pursuit --filter $FOUR" \
    "fig1 $PAPER --seeds 3 --filter env=battle,adversarial_pursuit --filter name=*-super-gaussian,*-super-stochastic" \
    "fig1 $PAPER --seeds 3 --filter env=pursuit --filter name=*-ddqn,*-super-quantile,*-shareall" \
    "fig1 $OURS --seeds 5 --filter seed=4,5 --filter env=battle,adversarial_pursuit --filter $FOUR" \
    "fig1_isolate $ISOLATE --seeds 3" \
    "fig1_dqn $DQN --seeds 3"
}
# a grid file the pinned commit lacks (untracked there; its runs' config.json record what it sets), for every command
if [ -d "$wt/experiments" ]; then for f in $COPIED; do cp "$repo/$f" "$wt/$f"; done; fi
case "${1:-}" in
  --stages)
    stages | sed -E 's/^([^ ]+) (.*)$/super-marl grid run \2 --out runs\/\1/'; exit 0 ;;
  --status)
    if pgrep -f "fig1-campaign-stages" > /dev/null; then echo "campaign: running"; else echo "campaign: not running"; fi
    list() {  # grid list of a stage line: its folder, then its words as grid run gets them (set -f: globs are filters)
      local out=$1; shift
      # shellcheck disable=SC2068
      (set -f; RAY_AUTH_MODE=disabled "$py" -m suPER.cli grid list "$wt"/$@ --out "$wt/runs/$out")
    }
    for grid in "fig1 $OURS --seeds 5" "fig1 $PAPER --seeds 5" "fig1_isolate $ISOLATE --seeds 3" "fig1_dqn $DQN --seeds 3"; do
      # every started run of the campaign folders (set -f: no glob in these words)
      # shellcheck disable=SC2086
      (set -f; list $grid) | grep -vE $'\t(-|pending)\t|^(to go|rates|no estimate)' || true
    done
    k=0; togo=""
    while read -r line; do  # per stage: runs finished, and grid list's time to go at the measured rates
      # shellcheck disable=SC2086
      k=$((k + 1)); listed=$(set -f; list $line)
      runs=$(grep -E '^[0-9]+ runs of' <<< "$listed" | cut -d' ' -f1)
      echo "stage $k: $(grep -c $'\tfinished' <<< "$listed" || true) of $runs runs finished"
      grep -E '^(to go|rates|no estimate)' <<< "$listed" | sed 's/^/  /'
      togo+=$(grep -E '^to go' <<< "$listed")$'\n'
    done < <(stages)
    # all stages: the sum of their hours of runs (grid list prints h, min or s)
    awk 'match($0, /~[0-9.]+ (h|min|s) of runs/) { split(substr($0, RSTART + 1, RLENGTH - 1), a, " ");
           s += a[1] * (a[2] == "h" ? 3600 : a[2] == "min" ? 60 : 1) }
         match($0, /^to go: [0-9]+ runs/) { split(substr($0, RSTART, RLENGTH), b, " "); n += b[3] }
         END { printf "to go, all stages: %d runs, ~%.0f h of runs, ~%.0f h two at a time\n", n, s / 3600, s / 7200 }' <<< "$togo"
    checked=(); for out in $FOLDERS; do checked+=("$wt/runs/$out"); done
    exec "$py" "$repo/scripts/check_rows.py" "${checked[@]}" ;;
  --collect)
    [ -d "$wt/runs" ] || { echo "fig1_campaign.sh: --collect: no campaign under $wt/runs: expected the --worktree DIR of a started campaign" >&2; exit 2; }
    for out in $FOLDERS; do
      [ -d "$wt/runs/$out" ] || continue
      "$py" "$repo/scripts/collect_records.py" "$wt/runs/$out" "$repo/results/$out"
    done
    "$py" "$repo/scripts/fig1_tables.py" --update "$repo/docs/results.md"
    report="$wt/runs/fig1-report"; rm -rf "$report"; mkdir -p "$report"
    title="the learning team's greedy evaluation return over training, SUPER against the baselines"
    draw() {  # a figure: records under results/, protocol, file stem, "under ..." of its title, more plot options
      local records=$1 protocol=$2 name=$3 under=$4; shift 4
      "$py" -m suPER.cli plot "$repo/results/$records" --protocol "$protocol" --name "$name" --out "$report" \
        --title "Figure 1 under $under: $title" "$@" > /dev/null
      cp "$report/$name.png" "$repo/docs/figures/$name.png"
    }
    draw fig1 paper fig1_paper_team_return "the paper's protocol"
    draw fig1 ours fig1_team_return "our protocol" --analysis  # with its claim table and the aggregates across envs
    draw fig1_dqn paper fig1_dqn_team_return "the paper's protocol with plain DQN"
    cp "$report/fig1_team_return_aggregate.png" "$repo/docs/figures/fig1_aggregate.png"
    echo "fig1_campaign.sh: docs/results.md's tables and docs/figures redrawn; analysis for the prose in $report"
    exit 0 ;;
  "") ;;
  *) echo "fig1_campaign.sh: unknown argument ${1}: expected --worktree DIR, --stages, --status or --collect" >&2
     exit 2 ;;
esac
if pgrep -f "fig1-campaign-stages" > /dev/null; then
  echo "fig1_campaign.sh: the Figure 1 campaign is already running (pgrep -af fig1-campaign-stages); stop it first" >&2
  exit 2
fi
[ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "$COMMIT"
at=$(git -C "$wt" rev-parse --short=7 HEAD)
[ "$at" = "$COMMIT" ] || { echo "fig1_campaign.sh: --worktree $wt is at $at, the campaign runs at $COMMIT" >&2; exit 2; }
[ -x "$wt/.venv/bin/super-marl" ] || (cd "$wt" && bash scripts/test.sh --version)
for f in $COPIED; do cp "$repo/$f" "$wt/$f"; done
for out in $FOLDERS; do
  mkdir -p "$wt/runs/$out"
  for rec in "$repo/results/$out"/*/; do
    [ -d "$rec" ] || continue
    [ -e "$wt/runs/$out/$(basename "$rec")" ] || cp -r "$rec" "$wt/runs/$out/"
  done
done
stages > "$wt/runs/fig1-stages.txt"  # untracked: the worktree stays clean, manifests name the pinned commit
cd "$wt"
export RAY_AUTH_MODE=disabled WANDB_MODE=offline WANDB_SILENT=true
# At the lowest CPU share beside a loaded machine the raylet can miss Ray's health checks for longer than the
# default 5 x 3 s; Ray then marks the one node dead and Tune waits for resources forever (2026-12-05, load 60 on 2
# cores). Tolerate 10 minutes of missed checks (read by the GCS at start).
export RAY_health_check_failure_threshold=200
# shellcheck disable=SC2016 # expanded by the detached bash
setsid nohup bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true
  set -f  # the stages globs are grid filters, not file names
  while read -r out line; do
    echo "== $(date -u +%FT%TZ) grid run $line --out runs/$out"
    nice -n 19 .venv/bin/super-marl grid run $line --out "runs/$out" --cpus-per-trial 1 --no-wandb < /dev/null \
      || { echo "== stage stopped (exit $?): rerun scripts/fig1_campaign.sh to resume"; exit 1; }
  done < runs/fig1-stages.txt
  echo "== $(date -u +%FT%TZ) every stage finished"' fig1-campaign-stages >> campaign.log 2>&1 < /dev/null &
echo "fig1_campaign.sh: started in $wt at $COMMIT (pid $!), log $wt/campaign.log"
