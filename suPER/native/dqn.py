"""Independent (double/dueling) DQN for N learners, batched across agents, with optional SUPER relay.

Read top to bottom: the run (seed, envs, buffers, relay: ``suPER.native.dqn_run.DQNRun``, the same per-run
code a pack runs) -> nets -> resume -> loop -> save. One loop
iteration is one rollout fragment of ``rollout_fragment_length`` env steps, in the original's order
(REFERENCE 1.3): act, step, record (for each env step), then store, relay, learn, sync target,
evaluate/log, checkpoint.

Envs, the evaluation schedule, metrics.csv, checkpoints and resume come from ``suPER.loop.RunLoop``
(shared with the baseline trainers). At the end of every fragment in which an evaluation ran (and after
the step-0 evaluation) the trainer checkpoints ``latest.pt``: networks, target, optimizer, the replay
buffers (unless ``run.checkpoint_replay`` is false), the numpy generators of exploration, replay sampling
and the relay, the relay windows and counters (the loop adds its own counters and torch's RNG). When the
run folder already holds ``latest.pt``, ``train`` continues from it. Not restored: the environments'
internal state, so a resumed run is a valid continuation with the same budget, evaluation schedule and
update count, but not bit-identical to an uninterrupted run.

All N learners' Q-networks are one ``BatchedQNet`` (P = N policies, or P = 1 with parameter
sharing), so acting, TD computation and the update are one batched call each. Replay is one
``CompactPER`` (``run.replay_layout: plain``: ``MultiAgentPER``) holding P independent prioritized buffers;
rows carry their agent (own rows) or sender (relayed rows) as stream, so a row's next_obs can be the next
row's obs.

Loss per policy p (REFERENCE 3.3): ``L_p = mean_b w_b * huber(td_b)`` with
``td = Q(o, a) - [r + gamma * (1 - d) * Q_target(o', a*)]``, ``a* = argmax Q(o')`` (double-Q) or
``argmax Q_target(o')``; the policies' losses are summed (Adam is elementwise, so this equals P
separate optimisers) and each policy's gradient is clipped to norm ``grad_clip`` on its own. The formulas
are pure functions in ``suPER.native.dqn_loss`` (TD target, weighted loss, priorities).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from suPER.config import ExperimentConfig
from suPER.loop import ProgressFn
from suPER.native.dqn_run import DQNRun, dqn_update, fresh_abs_td, greedy_actions
from suPER.runs import Logger, RunFolder, Summary


def train(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
          progress: ProgressFn | None = None) -> Summary:
    """Train independent DQN learners (plus SUPER relay when ``cfg.relay.enabled``).

    Args:
        cfg: validated experiment config.
        folder: run folder to write metrics.csv and checkpoints into.
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: optional per-fragment callback.

    Returns:
        Summary of the run.
    """
    d = cfg.dqn
    # ---- the run's own state: loop (seeds, envs, evaluation schedule, metrics, checkpoints), initial networks,
    # exploration generator, replay buffers, relay (suPER.native.dqn_run)
    run = DQNRun.build(cfg, folder, logger, progress)
    loop, n_pol = run.loop, run.n_pol
    device, timer, env = loop.device, loop.timer, loop.envs[0]
    n_agents = loop.spec.n_agents
    batch_per_policy = d.rows_per_update(n_agents, len(loop.spec.opponent_ids))

    # ---- networks: online + target, one batched module for all policies
    q_net = run.init_net.to(device)
    target_net = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=d.lr, eps=d.adam_eps, fused=True)  # 10x faster step on CPU

    def greedy_batch(obs_ENO: np.ndarray | torch.Tensor, alive_EN: np.ndarray | None = None) -> np.ndarray:
        """Greedy actions [E, N] of E games (evaluation)."""
        return greedy_actions(q_net, obs_ENO, n_pol, device)

    def networks() -> dict[str, dict]:
        return {"q_net": q_net.state_dict(), "target_net": target_net.state_dict(), "optimizer": optimizer.state_dict()}

    # ---- resume: continue from this folder's latest checkpoint, if there is one
    saved = loop.restore()
    if saved is not None:
        nets = run.restore(saved)
        q_net.load_state_dict(nets["q_net"])
        target_net.load_state_dict(nets["target_net"])
        optimizer.load_state_dict(nets["optimizer"])
    run.obs_NO, run.alive_N = loop.reset_envs()[0], env.alive_N  # env state is not checkpointed
    if saved is None:
        loop.evaluate(greedy_batch, run.eval_columns())  # step 0: the untrained greedy policy
        loop.save(run.checkpoint(networks()))

    # ---- loop: one iteration = one rollout fragment
    T = d.rollout_fragment_length
    while not loop.done:
        run.frag.valid_TN[:] = False
        for t in range(T):
            if loop.done:
                break
            # act: epsilon-greedy with epsilon scheduled by env steps
            with timer("act"):
                actions_N = run.explore(greedy_actions(q_net, run.obs_NO[None], n_pol, device)[0])
            # step
            with timer("env"):
                res = env.step(actions_N)
            # record the transition of every learner that acted; evaluate when due; reset a finished episode
            run.record(t, actions_N, res, lambda: loop.evaluate(greedy_batch, run.eval_columns()),
                       lambda: (env.reset(), env.alive_N))

        # TD of the fresh rows with each sender's pre-update nets (for the relay, and legacy priorities)
        td_NT = None
        if run.needs_fresh_td:
            with timer("relay"):
                td_NT = fresh_abs_td(q_net, target_net, *run.frag.grouped(n_pol), d.gamma, d.double_q,
                                     device).reshape(n_agents, T).cpu().numpy()

        # store the fragment's own rows; relay (SUPER): copy surprising fresh rows into teammates' buffers
        run.store_and_relay(td_NT)

        # learn: one gradient step of every policy on its own prioritized batch
        if loop.env_steps > run.learn_after:
            with timer("learn"):
                b = run.buffer.sample(batch_per_policy)
                td_abs_PB, loss_P = dqn_update(q_net, target_net, optimizer, b.obs, b.actions, b.rewards, b.next_obs,
                                               b.dones, b.weights, d.gamma, d.double_q, d.grad_clip, device)
                run.buffer.update_priorities(b.indices, td_abs_PB.cpu().numpy())
            if run.note_update(float(loss_P.mean())):  # sync target: a hard copy
                target_net.load_state_dict(q_net.state_dict())

        # checkpoint: after every fragment that evaluated, so a resumed run logs each evaluation once
        if loop.checkpoint_due:
            loop.save(run.checkpoint(networks()))
        loop.report_progress()

    # ---- final evaluation (unless the last step evaluated) and final.pt (networks, optimizer, counters)
    return loop.finish(greedy_batch, DQNRun.final(networks(), run.updates), run.eval_columns())
