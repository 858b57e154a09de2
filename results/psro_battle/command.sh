#!/bin/bash
# issue 17's measured PSRO run on battle map 18 (pinned worktree at fa6cfb2)
cd /work/psro
. /work/main/.venv/bin/activate
export PYTHONPATH=/work/psro RAY_AUTH_MODE=disabled WANDB_MODE=offline WANDB_SILENT=true
exec nice -n 19 super-marl population psro --env battle --iterations 4 --br-steps 6000 --eval-episodes 10 \
  --seed 1 --vs-shipped --threads 1 --out runs/population \
  --set dqn.lr=2.5e-4 --set dqn.epsilon_initial=0.5 --set dqn.epsilon_final=0.02 --set dqn.epsilon_timesteps=3000
