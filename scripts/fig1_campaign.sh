#!/usr/bin/env bash
# Issue 13: start or resume the Figure 1 campaign (docs/results.md "Figure 1, reproduced") on this machine.
#
#   bash scripts/fig1_campaign.sh [--worktree DIR] [GRID-RUN ARGS...]
#   bash scripts/fig1_campaign.sh --filter 'name=*-ddqn,*-super-quantile'   # the central claim's runs first (seed order)
#   bash scripts/fig1_campaign.sh                      # the whole grid (finished runs skipped, unfinished resumed)
#   bash scripts/fig1_campaign.sh --filter 'env=pursuit,adversarial_pursuit' --filter 'name=*-ddqn,*-super-quantile'
#                                   # on a machine that may not outlive the session: runs that fit one (not battle)
#   bash scripts/fig1_campaign.sh [--worktree DIR] --status    # running or not, each run's progress and time left,
#                                                              # every evaluation row checked
#   bash scripts/fig1_campaign.sh [--worktree DIR] --collect   # finished runs' records -> results/fig1 (then commit)
#
# Every step is idempotent: the worktree pinned at the campaign's commit (created if missing, refused if it is at
# another commit) with this checkout's experiments/fig1.yaml beside its own as fig1.main.yaml, its .venv (created if missing, ~3 min), the finished runs' records copied from results/fig1 into
# its run folder (status "finished" in their manifests, so `grid run` skips them instead of training them again;
# a new machine has lost the run folders), then `grid run` detached in its own session at the lowest scheduler
# share (setsid gives it its own autogroup, where plain nice does not yield; so the autogroup is niced too).
# Check afterwards: python scripts/check_rows.py DIR/runs/fig1 (every evaluation row exactly once).
# CPU kernels: runs use the machine's own (AVX-512 where it has it), so a seed repeats bit for bit only on a machine
# like the one that made it (docs/decisions.md, "Bit-reproducible per CPU instruction set"). To compute what an AVX2
# machine does (battle seed 1's records were made on one: repeated bit for bit that way), prefix the command with
#   ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2   (Ray's workers inherit them; ~1.35x slower here)
set -euo pipefail
COMMIT=c083f22
repo=$(cd "$(dirname "$0")/.." && pwd)
wt=/work/fig1
if [ "${1:-}" = --worktree ]; then wt=$2; shift 2; fi
# the checks run with this checkout's code (grid list shows progress and time left there) when it has a venv
py="$repo/.venv/bin/python"; [ -x "$py" ] || py="$wt/.venv/bin/python"
case "${1:-}" in
  --status)
    if pgrep -af "grid run experiments/fig1" > /dev/null; then echo "campaign: running"; else echo "campaign: not running"; fi
    grid="$wt/experiments/fig1.main.yaml"; [ -f "$grid" ] || grid="$wt/experiments/fig1.yaml"
    RAY_AUTH_MODE=disabled "$py" -m suPER.cli grid list "$grid" --out "$wt/runs/fig1" \
      | grep -vE $'\t(-|pending)\t' || true
    exec "$py" "$repo/scripts/check_rows.py" "$wt/runs/fig1" ;;
  --collect)
    exec "$py" "$repo/scripts/collect_records.py" "$wt/runs/fig1" "$repo/results/fig1" ;;
esac
if pgrep -f "grid run experiments/fig1" > /dev/null; then
  echo "fig1_campaign.sh: a Figure 1 campaign is already running (pgrep -af 'grid run'); stop it first" >&2; exit 2
fi
[ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "$COMMIT"
at=$(git -C "$wt" rev-parse --short=7 HEAD)
[ "$at" = "$COMMIT" ] || { echo "fig1_campaign.sh: --worktree $wt is at $at, the campaign runs at $COMMIT" >&2; exit 2; }
[ -x "$wt/.venv/bin/super-marl" ] || (cd "$wt" && bash scripts/test.sh --version)
mkdir -p "$wt/runs/fig1"
# the grid file is this checkout's: its `only:` grew after the pinned commit (battle and adversarial pursuit's
# SUPER gaussian and stochastic); the code that trains stays the pinned commit's. It goes in untracked beside the
# pinned one, so the worktree stays clean and manifests name the pinned commit without '-dirty' (session 16 copied
# it over the tracked file: its 6 gaussian runs say c083f22...-dirty; the checkout undoes that copy)
git -C "$wt" checkout -- experiments/fig1.yaml
cp "$repo/experiments/fig1.yaml" "$wt/experiments/fig1.main.yaml"
for rec in "$repo"/results/fig1/*/; do
  [ -e "$wt/runs/fig1/$(basename "$rec")" ] || cp -r "$rec" "$wt/runs/fig1/"
done
cd "$wt"
export RAY_AUTH_MODE=disabled WANDB_MODE=offline WANDB_SILENT=true
setsid nohup bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true
  exec nice -n 19 .venv/bin/super-marl grid run experiments/fig1.main.yaml --cpus-per-trial 1 --no-wandb "$@"' \
  fig1 "$@" >> campaign.log 2>&1 < /dev/null &
echo "fig1_campaign.sh: started in $wt at $COMMIT (pid $!), log $wt/campaign.log"
