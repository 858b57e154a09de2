#!/usr/bin/env bash
# Battle's Figure 1 final policies on 100 varied games each (docs/results.md, Figure 1, honest notes).
# Run folders: the campaign worktree's runs/fig1 (checkpoints are not committed; seed 1 of no sharing and
# SUPER quantile lost theirs with a replaced machine). The shipped red team plays with epsilon 0.05 so that
# the games differ (greedy against greedy on battle's fixed map replays one game). Code: main at 9ad8876
# (survivors counted from the engine); 2-core AMD EPYC (AVX-512), 2026-12-03, two at a time, ~65 s each.
# SUPER gaussian's three (session 16) were added afterwards, with main at 0d981fd: RUNS="..." plays only those named.
#   bash results/fig1_battle_final/command.sh [RUN-FOLDERS]
set -euo pipefail
runs=${1:-/work/fig1/runs/fig1}
all="battle__ddqn__s2 battle__ddqn__s3 battle__ddqn_ps__s1 battle__ddqn_ps__s2 battle__ddqn_ps__s3
     battle__ddqn_super_gaussian__s1__shareall battle__ddqn_super_gaussian__s2__shareall
     battle__ddqn_super_gaussian__s3__shareall battle__ddqn_super_quantile__s2 battle__ddqn_super_quantile__s3
     battle__ddqn_super_gaussian__s1 battle__ddqn_super_gaussian__s2 battle__ddqn_super_gaussian__s3"
for run in ${RUNS:-$all}; do
  super-marl opponents eval --env battle --team "$runs/$run/checkpoints/final.pt" --episodes 100 \
    --opponent-epsilon 0.05 --seed 1000 > "results/fig1_battle_final/$run.txt"
  # against the greedy red team (the campaign's training and evaluation opponent): 20 episodes, ~10 s a run
  super-marl opponents eval --env battle --team "$runs/$run/checkpoints/final.pt" --episodes 20 \
    --seed 1000 > "results/fig1_battle_final/greedy/$run.txt"
done
