"""SEAC: Shared Experience Actor-Critic (Christianos, Schäfer & Albrecht, NeurIPS 2020), batched over agents.

Read top to bottom: loop (envs, schedule, checkpoints) -> net -> optimizer -> rollout storage -> resume
-> loop -> save. One iteration is one rollout of ``n_steps`` steps of all ``num_envs`` envs (act, step,
record per step), then returns, learn, checkpoint.

Every learner ``i`` is an A2C agent with its own actor-critic. Its loss uses its own rollout *and* the
rollouts of the other learners ``k != i`` (importance-weighted), as the official code
(``semitable/seac``, ``a2c.py::A2C.update``) computes it; ``w_ik = pi_i(a_k|o_k) / (pi_k(a_k|o_k) + 1e-7)``
(detached, ``pi_k`` the behaviour probability recorded when ``k`` acted), ``lambda = seac.seac_lambda``,
means over the ``T * E`` rollout rows::

    L_i = mean[-log pi_i(a_i|o_i) (R_i - V_i(o_i))]                                (own policy loss)
        + c_V mean[(R_i - V_i(o_i))^2]                                             (own value loss)
        - c_H mean[H(pi_i(.|o_i))]                                                 (own entropy)
        + lambda sum_{k!=i} mean[-w_ik log pi_i(a_k|o_k) (R_k - V_i(o_k))]           (shared policy loss)
        + lambda c_V sum_{k!=i} mean[w_ik (R_k - V_i(o_k))^2]                         (shared value loss)

Advantages are detached in the policy terms. ``R_k`` is agent k's n-step return bootstrapped with agent
k's *own* critic ``V_k`` (the official code computes each agent's returns once with its own value and
every learner regresses onto them; docs/decisions.md). Horizon truncation follows the official
``use_proper_time_limits``: the return of a truncated step is that agent's value estimate ``V_k(o_t)``.
Rows of dead learners (battle: ``alive`` False when acting) are masked out of every term (they still
count in the ``T * E`` denominator, so a dead agent's data is never up-weighted).

All N actor-critics are one ``SEACNet`` (grouped convs / ``baddbmm``): acting is one call over
``[N, E]``, and the update evaluates every agent's net on every agent's data in one call over
``[N_i, N_k * T * E]``. Losses are summed over agents (Adam is elementwise, so this equals N separate
optimisers) and each agent's gradient is clipped to ``grad_clip`` on its own. Team sharing: only the
learning team is in the arrays (opponents live inside the env), so experience is shared within the
learning team by construction.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from seac.model import SEACNet
from suPER.config import ExperimentConfig
from suPER.loop import ProgressFn, RunLoop
from suPER.models import clip_grad_norm_per_policy
from suPER.runs import Logger, RunFolder, Summary

IS_EPS = 1e-7
"""added to the behaviour probability in the importance weight's denominator (as the official code)"""


def nstep_returns(reward_TEN: torch.Tensor, value_TEN: torch.Tensor, bootstrap_EN: torch.Tensor,
                  cont_TEN: torch.Tensor, cut_TEN: torch.Tensor, gamma: float) -> torch.Tensor:
    """n-step returns of every agent, with the official code's time-limit rule.

    ``R_t = r_t + gamma * cont_t * R_{t+1}`` with ``R_T = bootstrap``; where step t was cut by the horizon,
    ``R_t = V(o_t)`` instead (``use_proper_time_limits``: no learning signal from a cut step).

    Args:
        reward_TEN: rewards [T, E, N].
        value_TEN: each agent's own value of o_t recorded when acting [T, E, N].
        bootstrap_EN: each agent's own value of o_T [E, N].
        cont_TEN: 1 where the episode goes on for that agent after step t, else 0.
        cut_TEN: 1 where step t was truncated (not terminated) for that agent.
        gamma: discount.

    Returns:
        returns [T, E, N].
    """
    out = torch.empty_like(reward_TEN)
    ret = bootstrap_EN
    for t in reversed(range(reward_TEN.shape[0])):  # the time recursion; every agent and env at once
        ret = reward_TEN[t] + gamma * cont_TEN[t] * ret
        ret = torch.where(cut_TEN[t] > 0, value_TEN[t], ret)
        out[t] = ret
    return out


def seac_loss(logits_IKBA: torch.Tensor, value_IKB: torch.Tensor, action_KB: torch.Tensor,
              behaviour_logp_KB: torch.Tensor, return_KB: torch.Tensor, valid_KB: torch.Tensor,
              seac_lambda: float, value_coef: float, entropy_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The SEAC loss of every agent (module docstring), summed over agents.

    Args:
        logits_IKBA: agent i's policy logits on agent k's rows [N, N, B, A].
        value_IKB: agent i's value of agent k's rows [N, N, B].
        action_KB: actions agent k took [N, B] (int64).
        behaviour_logp_KB: log pi_k(a_k|o_k) when agent k acted [N, B].
        return_KB: agent k's n-step returns [N, B].
        valid_KB: 1 where agent k was alive when acting [N, B].
        seac_lambda: weight of the other agents' experience (0 = independent A2C).
        value_coef: c_V.
        entropy_coef: c_H.

    Returns:
        (scalar loss to minimise, logged means: per-agent averages of each term and of the off-diagonal
        importance weights over valid rows).
    """
    n, _, b, _ = logits_IKBA.shape
    logp_all_IKBA = F.log_softmax(logits_IKBA, dim=-1)
    logp_IKB = logp_all_IKBA.gather(-1, action_KB.expand(n, n, b)[..., None])[..., 0]
    adv_IKB = return_KB - value_IKB
    own_IK = torch.eye(n, dtype=torch.bool, device=logits_IKBA.device)
    weight_IKB = (logp_IKB.exp() / (behaviour_logp_KB.exp() + IS_EPS)).detach()
    weight_IKB = torch.where(own_IK[..., None], torch.ones_like(weight_IKB), weight_IKB)  # own data: plain A2C
    mask_IKB = valid_KB.expand(n, n, b)
    policy_IK = (-weight_IKB * mask_IKB * logp_IKB * adv_IKB.detach()).sum(-1) / b
    value_IK = (weight_IKB * mask_IKB * adv_IKB.pow(2)).sum(-1) / b
    own_logp_IBA = logp_all_IKBA.diagonal(dim1=0, dim2=1).permute(2, 0, 1)
    entropy_I = (-(own_logp_IBA.exp() * own_logp_IBA).sum(-1) * valid_KB).sum(-1) / b
    coef_IK = torch.full((n, n), seac_lambda, dtype=logits_IKBA.dtype, device=logits_IKBA.device).fill_diagonal_(1.0)
    loss = ((coef_IK * (policy_IK + value_coef * value_IK)).sum() - entropy_coef * entropy_I.sum())
    with torch.no_grad():
        other_IK = ~own_IK
        other_mask_IKB = mask_IKB * other_IK[..., None]
        stats = {
            "loss": float(loss) / n,
            "policy_loss": float(policy_IK.diagonal().mean()),
            "value_loss": float(value_IK.diagonal().mean()),
            "seac_policy_loss": float((policy_IK * other_IK).sum(1).mean()),
            "seac_value_loss": float((value_IK * other_IK).sum(1).mean()),
            "entropy": float(entropy_I.mean()),
            "importance_weight_mean": float((weight_IKB * other_mask_IKB).sum() / other_mask_IKB.sum().clamp(min=1)),
        }
    return loss, stats


def train(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
          progress: ProgressFn | None = None) -> Summary:
    """Train SEAC learners (independent A2C with ``seac.share_experience`` false).

    Args:
        cfg: validated experiment config (``cfg.seac`` and ``cfg.env``, ``cfg.run``).
        folder: run folder for metrics.csv and checkpoints.
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: optional per-iteration callback.

    Returns:
        Summary of the run.
    """
    s = cfg.seac
    E, T = s.num_envs, s.n_steps
    loop = RunLoop(cfg, folder, logger, progress, num_envs=E)
    device, spec, timer = loop.device, loop.spec, loop.timer
    N, obs_shape, A = spec.n_agents, spec.obs_shape, spec.n_actions
    seac_lambda = s.seac_lambda if s.share_experience else 0.0
    cut_is_terminal = cfg.env.truncation_is_terminal

    # ---- networks: N independent actor-critics in one batched module, one Adam over all of them
    net = SEACNet(N, obs_shape, A, body=s.model, obs_scale=spec.obs_scale).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=s.lr, eps=s.adam_eps)

    # ---- rollout storage: step t of env e for agent n; obs has the extra bootstrap row T
    obs_TENO = torch.zeros((T + 1, E, N, *obs_shape), device=device)
    action_TEN = torch.zeros((T, E, N), dtype=torch.int64, device=device)
    logp_TEN, value_TEN, reward_TEN, cont_TEN, cut_TEN, valid_TEN = (
        torch.zeros((T, E, N), device=device) for _ in range(6))

    @torch.no_grad()
    def policy_act(obs_ENO: np.ndarray, alive_EN: np.ndarray | None = None) -> np.ndarray:
        """Evaluation actions [E, N] of the learning team in E games: sampled from each policy (or its mode,
        ``eval_mode``); one forward with agent n's net on its E observations."""
        logits_ENA = net(torch.as_tensor(obs_ENO, device=device).transpose(0, 1))[0].transpose(0, 1)
        if s.eval_mode == "greedy":
            return logits_ENA.argmax(-1).cpu().numpy()
        return torch.distributions.Categorical(logits=logits_ENA).sample().cpu().numpy()

    def per_agent(x_TEN: torch.Tensor) -> torch.Tensor:
        """[T, E, N, ...] -> [N, T * E, ...]: each agent's rollout rows."""
        return x_TEN.permute(2, 0, 1, *range(3, x_TEN.dim())).reshape(N, -1, *x_TEN.shape[3:])

    def trainer_state() -> dict[str, Any]:
        return {"net": net.state_dict(), "optimizer": optimizer.state_dict()}

    stats_sum: dict[str, float] = defaultdict(float)
    updates, updates_since_eval = 0, 0

    def stats_row() -> dict[str, Any]:
        row: dict[str, Any] = {k: v / max(updates_since_eval, 1) for k, v in stats_sum.items()}
        row["updates"] = updates
        return row

    # ---- resume
    state = loop.restore()
    if state is not None:
        net.load_state_dict(state["net"])
        optimizer.load_state_dict(state["optimizer"])
    obs_ENO = np.stack(loop.reset_envs())
    alive_EN = np.stack([env.alive_N for env in loop.envs])
    episode_return_E = np.zeros(E)
    if state is None:
        loop.evaluate(policy_act)
        loop.save(trainer_state())

    while not loop.done:
        obs_TENO[0] = torch.as_tensor(obs_ENO, device=device)
        steps = T
        for t in range(T):
            # ---- act: every agent in every env, one batched call
            with timer("act"), torch.no_grad():
                logits_NEA, value_NE = net(obs_TENO[t].transpose(0, 1))
                dist = torch.distributions.Categorical(logits=logits_NEA)
                act_NE = dist.sample()
                action_TEN[t], logp_TEN[t], value_TEN[t] = act_NE.T, dist.log_prob(act_NE).T, value_NE.T
            valid_TEN[t] = torch.as_tensor(alive_EN, device=device)
            actions_EN = action_TEN[t].cpu().numpy()
            # ---- step every env; an env whose episode is over is reset at once
            with timer("env"):
                for e, env in enumerate(loop.envs):
                    res = env.step(actions_EN[e])
                    terminal_N = res.terminated_N | (res.truncated_N & cut_is_terminal)
                    cut_N = res.truncated_N & ~terminal_N
                    reward_TEN[t, e] = torch.as_tensor(res.reward_N, device=device)
                    cont_TEN[t, e] = torch.as_tensor(~(terminal_N | cut_N | res.episode_over), device=device)
                    cut_TEN[t, e] = torch.as_tensor(cut_N, device=device)
                    episode_return_E[e] += float(res.reward_N[alive_EN[e]].sum())
                    if res.episode_over:
                        loop.episode_finished(episode_return_E[e])
                        episode_return_E[e] = 0.0
                        obs_ENO[e], alive_EN[e] = env.reset(), env.alive_N
                    else:
                        obs_ENO[e], alive_EN[e] = res.obs_NO, res.alive_N
            # ---- record
            obs_TENO[t + 1] = torch.as_tensor(obs_ENO, device=device)
            if loop.tick(E):
                loop.evaluate(policy_act, stats_row())
                stats_sum.clear()
                updates_since_eval = 0
            if loop.done:  # the budget ends mid-rollout: learn from the steps taken
                steps = t + 1
                break

        # ---- learn: returns with each agent's own critic, then every net on every agent's rows
        with timer("learn"):
            with torch.no_grad():
                bootstrap_EN = net(obs_TENO[steps].transpose(0, 1))[1].T
                return_TEN = nstep_returns(reward_TEN[:steps], value_TEN[:steps], bootstrap_EN,
                                           cont_TEN[:steps], cut_TEN[:steps], s.gamma)

            obs_KBO = per_agent(obs_TENO[:steps])
            logits, values = net(obs_KBO.reshape(1, N * steps * E, *obs_shape).expand(N, -1, *obs_shape))
            loss, stats = seac_loss(logits.reshape(N, N, steps * E, A), values.reshape(N, N, steps * E),
                                    per_agent(action_TEN[:steps]), per_agent(logp_TEN[:steps]),
                                    per_agent(return_TEN), per_agent(valid_TEN[:steps]),
                                    seac_lambda, s.value_coef, s.entropy_coef)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm_N = clip_grad_norm_per_policy(net, s.grad_clip)
            optimizer.step()
        updates += 1
        updates_since_eval += 1
        for k, v in stats.items():
            stats_sum[k] += v
        stats_sum["grad_norm_mean"] += float(grad_norm_N.mean())

        # ---- checkpoint (after the rollout in which an evaluation ran) and progress
        if loop.checkpoint_due:
            loop.save(trainer_state())
        loop.report_progress()

    return loop.finish(policy_act, {"net": net.state_dict()}, stats_row())
