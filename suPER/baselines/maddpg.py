"""MADDPG (Lowe et al., 2017) for the learning team: decentralized actors, centralized critics.

Read top to bottom: loop -> nets -> replay -> resume -> loop (act, step, record, store, learn, soft-update
targets, log) -> save. The shared plumbing (envs, evaluation schedule, metrics.csv, checkpoints,
resume) is ``suPER.loop.RunLoop``; this file holds only the algorithm.

Agent ``i`` has an actor ``pi_i(o_i) -> logits`` over its discrete actions and a critic
``Q_i(o_1..o_N, a_1..a_N)`` that sees every learner's flattened observation and one-hot action. The N
actors are one ``BatchedMLP`` (P = N), the N critics another, so each forward is one batched call. The
frozen opponents of battle / adversarial pursuit live inside the env and are not modelled.

Discrete actions use the Gumbel-softmax trick, straight-through (``gumbel_softmax_st``): the forward
value is the one-hot of ``argmax(logits + g)`` and the gradient is that of
``softmax((logits + g) / temperature)``. Evaluation is greedy (``argmax logits``), or samples with its
own generator when ``maddpg.eval_mode=sample``.

Training exploration (the original's EpsilonGreedy on top of the actors, REFERENCE 7.2): each learner i
independently acts

    a_i = uniform over its A actions                         with probability eps(t)
    a_i = argmax(logits_i / temperature + g), g ~ Gumbel     otherwise (a draw from softmax(logits_i / T))

with ``eps(t) = linear_schedule(t, epsilon_initial, epsilon_final, epsilon_timesteps)`` at env step t
(0.1 -> 0.001 over 100k by default). Epsilon keeps actions the actor has already given up on reaching
the replay, so the centralized critics can still rank them. ``epsilon_initial = epsilon_final = 0``
gives pure Gumbel sampling.

Losses on a batch of B joint transitions (REFERENCE 7.2; ``alive_Bi`` = learner i acted at t):

* critic i: ``y_i = r_i + gamma (1 - d_i) Q'_i(o', a')`` with ``a'_j`` the target actor j's
  straight-through sample at ``o'_j`` (zero for learners dead at t+1), and
  ``L_i = sum_b alive_bi (Q_i(o, a) - y_i)^2 / max(1, sum_b alive_bi)``. With ``shared_reward``
  every ``r_i`` is the team reward ``sum_j r_j`` (the original's pursuit setting).
* actor i: ``L_i = -sum_b alive_bi Q_i(o, a_1..pi_i(o_i)..a_N) / max(1, sum_b alive_bi)
  + actor_feature_reg * mean over alive rows and actions of logits_i^2``: the buffer's joint action
  with agent i's own action replaced by its current straight-through sample (RLlib's MADDPG loss).

Dead learners (battle) are masked everywhere: their rows drop out of both losses, their actions enter
the critics as zero vectors and their observations are the env's zeros. The N losses are summed
(Adam is elementwise, so this equals N separate optimisers) and each agent's gradient is clipped to
norm ``grad_clip`` on its own. Update order per round: critic step, then actor step against the
updated critic (Lowe et al.), then the soft target update ``target <- tau online + (1 - tau) target``.
One update round every ``rollout_fragment_length`` env steps once ``env_steps > learning_starts``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from suPER.config import ExperimentConfig
from suPER.loop import ProgressFn, RunLoop, to_numpy
from suPER.models import BatchedMLP, clip_grad_norm_per_policy, scale_obs
from suPER.replay import UniformReplay
from suPER.runs import Logger, RunFolder, Summary
from suPER.seeds import EVAL_DRAWS_SEED_OFFSET, EXPLORATION_SEED_OFFSET, REPLAY_SEED_OFFSET


def train(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
          progress: ProgressFn | None = None) -> Summary:
    """Train MADDPG on ``cfg.env``'s learning team.

    Args:
        cfg: validated experiment config (``cfg.maddpg`` holds the algorithm's settings).
        folder: run folder for metrics.csv and checkpoints.
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: per-step callback (the CLI's progress bar).

    Returns:
        Summary of the run.
    """
    m = cfg.maddpg
    loop = RunLoop(cfg, folder, logger, progress)
    spec, device = loop.spec, loop.device
    N, A = spec.n_agents, spec.n_actions
    OBS = int(np.prod(spec.obs_shape))

    # ---- networks: N actors and N centralized critics, each set one batched module; soft-updated targets
    actor = BatchedMLP(N, OBS, m.hiddens, A).to(device)
    critic = BatchedMLP(N, N * (OBS + A), m.hiddens, 1).to(device)
    target_actor = copy.deepcopy(actor).requires_grad_(False)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=m.actor_lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=m.critic_lr)

    # ---- replay: joint transitions of the whole team, sampled uniformly
    buffer = UniformReplay(m.buffer_size, {
        "obs": ((N, OBS), spec.obs_dtype), "next_obs": ((N, OBS), spec.obs_dtype), "action": ((N,), np.int64),
        "reward": ((N,), np.float32), "done": ((N,), np.float32), "alive": ((N,), bool),
        "next_alive": ((N,), bool)}, rng=np.random.default_rng(cfg.run.seed + REPLAY_SEED_OFFSET))

    rng = np.random.default_rng(cfg.run.seed + EXPLORATION_SEED_OFFSET)  # epsilon-greedy exploration draws
    eval_rng = np.random.default_rng(cfg.run.seed + EVAL_DRAWS_SEED_OFFSET)  # evaluation draws never touch training randomness

    def obs_tensor(obs: np.ndarray) -> torch.Tensor:
        """Observations as the actors and critics read them: float, times ``EnvSpec.obs_scale`` (1 / 255 for uint8
        images)."""
        return scale_obs(torch.as_tensor(obs, device=device).float(), spec.obs_scale)

    @torch.no_grad()
    def greedy(obs_ENO: np.ndarray, alive_EN: np.ndarray | None = None) -> np.ndarray:
        """Evaluation actions [E, N] of E games: argmax of each actor's logits, or (``eval_mode=sample``) a
        Gumbel-max draw; one forward with learner n's actor on its E observations."""
        e = obs_ENO.shape[0]
        obs_NEO = obs_tensor(obs_ENO).reshape(e, N, OBS).transpose(0, 1)
        logits_ENA = actor(obs_NEO).transpose(0, 1).cpu().numpy()
        if m.eval_mode == "sample":
            logits_ENA = logits_ENA / m.gumbel_temperature - np.log(-np.log(eval_rng.random(logits_ENA.shape)))
        return logits_ENA.argmax(-1)

    @torch.no_grad()
    def explore(obs_NO: np.ndarray) -> np.ndarray:
        """Training actions: per learner, uniform with probability epsilon, else a Gumbel-max sample of
        softmax(logits / temperature) (module docstring)."""
        logits_NA = actor(obs_tensor(obs_NO).reshape(N, 1, OBS))[:, 0]
        sampled_N = (logits_NA / m.gumbel_temperature + sample_gumbel(logits_NA)).argmax(-1).cpu().numpy()
        random_N = rng.random(N) < m.epsilon(loop.env_steps)
        return np.where(random_N, rng.integers(0, A, N), sampled_N)

    def trainer_state() -> dict[str, Any]:
        return {"actor": actor.state_dict(), "critic": critic.state_dict(),
                "target_actor": target_actor.state_dict(), "target_critic": target_critic.state_dict(),
                "actor_opt": actor_opt.state_dict(), "critic_opt": critic_opt.state_dict(),
                "replay": buffer.state_dict() if cfg.run.checkpoint_replay else None,
                "rng": rng.bit_generator.state, "updates": updates, "learn_after": learn_after}

    # ---- resume or start
    updates, learn_after = 0, m.learning_starts
    critic_losses: list[float] = []
    actor_losses: list[float] = []
    state = loop.restore()
    if state is not None:
        for net, key in ((actor, "actor"), (critic, "critic"), (target_actor, "target_actor"),
                         (target_critic, "target_critic"), (actor_opt, "actor_opt"), (critic_opt, "critic_opt")):
            net.load_state_dict(state[key])
        updates, learn_after = int(state["updates"]), int(state["learn_after"])
        if "rng" in state:  # checkpoints written before epsilon-greedy exploration have none
            rng.bit_generator.state = state["rng"]
        if state["replay"] is not None:
            buffer.load_state_dict(to_numpy(state["replay"], keep=("rng",)))
        else:  # refill the empty buffer before learning again
            learn_after = loop.env_steps + m.learning_starts
    obs_NO = loop.reset_envs()[0].reshape(N, OBS)
    if state is None:
        loop.evaluate(greedy)  # step 0: the untrained greedy policy
        loop.save(trainer_state())
    env = loop.envs[0]
    alive_N = env.alive_N
    ep_return = 0.0

    def extra() -> dict[str, Any]:
        row = {"critic_loss": float(np.mean(critic_losses)) if critic_losses else float("nan"),
               "actor_loss": float(np.mean(actor_losses)) if actor_losses else float("nan"),
               "epsilon": m.epsilon(loop.env_steps), "updates": updates}
        critic_losses.clear()
        actor_losses.clear()
        return row

    # ---- loop: one iteration = one env step
    while not loop.done:
        # act: Gumbel-max samples of the current actors, uniform with probability epsilon
        with loop.timer("act"):
            actions_N = explore(obs_NO)
        # step
        with loop.timer("env"):
            res = env.step(actions_N)
        next_obs_NO = res.obs_NO.reshape(N, OBS)
        done_N = res.terminated_N | (res.truncated_N & cfg.env.truncation_is_terminal)
        # store the joint transition (learners dead before the step are masked by alive)
        with loop.timer("store"):
            buffer.add(obs=obs_NO[None], next_obs=next_obs_NO[None], action=actions_N[None],
                       reward=res.reward_N[None], done=done_N[None], alive=alive_N[None],
                       next_alive=res.alive_N[None])
        # record
        ep_return += float(np.where(alive_N, res.reward_N, 0.0).sum())
        if res.episode_over:
            loop.episode_finished(ep_return)
            ep_return = 0.0
            obs_NO, alive_N = env.reset().reshape(N, OBS), env.alive_N
        else:
            obs_NO, alive_N = next_obs_NO, res.alive_N
        due = loop.tick(1)

        # learn: one round (critic, then actor) every rollout_fragment_length env steps
        if loop.env_steps > learn_after and loop.env_steps % m.rollout_fragment_length == 0:
            with loop.timer("learn"):
                b = {k: torch.as_tensor(v, device=device) for k, v in buffer.sample(m.batch_size).items()}
                b["obs"] = scale_obs(b["obs"].float(), spec.obs_scale)
                b["next_obs"] = scale_obs(b["next_obs"].float(), spec.obs_scale)
                B = m.batch_size
                loss_c_N = critic_loss(critic, target_actor, target_critic, b, m.gamma, m.shared_reward,
                                       m.gumbel_temperature, sample_gumbel(torch.empty(N, B, A, device=device)))
                critic_opt.zero_grad(set_to_none=True)
                loss_c_N.sum().backward()
                clip_grad_norm_per_policy(critic, m.grad_clip)
                critic_opt.step()
                loss_a_N = actor_loss(actor, critic, b, m.actor_feature_reg, m.gumbel_temperature,
                                      sample_gumbel(torch.empty(N, B, A, device=device)))
                actor_opt.zero_grad(set_to_none=True)
                loss_a_N.sum().backward()
                clip_grad_norm_per_policy(actor, m.grad_clip)
                actor_opt.step()
                # sync targets: soft update
                soft_update(target_actor, actor, m.tau)
                soft_update(target_critic, critic, m.tau)
                updates += 1
                critic_losses.append(float(loss_c_N.detach().mean()))
                actor_losses.append(float(loss_a_N.detach().mean()))

        # log: evaluate at exact multiples of the interval, checkpoint after it
        if due:
            loop.evaluate(greedy, extra())
        if loop.checkpoint_due:
            loop.save(trainer_state())
        loop.report_progress()

    # ---- final evaluation and save
    return loop.finish(greedy, {"actor": actor.state_dict(), "critic": critic.state_dict(),
                                "target_actor": target_actor.state_dict(),
                                "target_critic": target_critic.state_dict(), "updates": updates}, extra())


def sample_gumbel(like: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log U)`` shaped like ``like`` (torch's global RNG)."""
    u = torch.rand_like(like, dtype=torch.float32).clamp_(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def gumbel_softmax_st(logits: torch.Tensor, gumbel: torch.Tensor, temperature: float) -> torch.Tensor:
    """Straight-through Gumbel-softmax: forward one-hot(argmax(logits / T + g)), gradient of the soft sample.

    Args:
        logits: ``[..., A]``.
        gumbel: Gumbel noise of the same shape.
        temperature: T.

    Returns:
        ``[..., A]`` one-hot values carrying the gradient of ``softmax(logits / T + g)``.
    """
    soft = torch.softmax(logits / temperature + gumbel, dim=-1)
    hard = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft


def critic_input(obs_BNO: torch.Tensor, act_PBNA: torch.Tensor) -> torch.Tensor:
    """Each critic's input ``[all obs, all one-hot actions]``: ``[P, B, N*OBS + N*A]``.

    Args:
        obs_BNO: float observations of the N learners, flattened per learner.
        act_PBNA: joint (one-hot) actions as each of the P critics should see them.
    """
    P, B = act_PBNA.shape[:2]
    return torch.cat([obs_BNO.reshape(1, B, -1).expand(P, B, -1), act_PBNA.reshape(P, B, -1)], dim=-1)


def critic_loss(critic: BatchedMLP, target_actor: BatchedMLP, target_critic: BatchedMLP, b: dict[str, torch.Tensor],
                gamma: float, shared_reward: bool, temperature: float, gumbel_NBA: torch.Tensor) -> torch.Tensor:
    """Masked squared TD error of every critic (module docstring), ``[N]``.

    Args:
        critic, target_actor, target_critic: the batched nets.
        b: batch ``obs``/``next_obs`` float ``[B, N, OBS]``, ``action`` int ``[B, N]``, ``reward``/``done`` float
            ``[B, N]``, ``alive``/``next_alive`` bool ``[B, N]``.
        gamma: discount.
        shared_reward: every critic learns the team reward ``sum_j r_j``.
        temperature: Gumbel-softmax temperature of the target actors' samples.
        gumbel_NBA: Gumbel noise for the target actors' samples.
    """
    obs, next_obs, alive, next_alive = b["obs"], b["next_obs"], b["alive"].float(), b["next_alive"].float()
    N, B, A = gumbel_NBA.shape
    reward_BN = b["reward"].sum(-1, keepdim=True).expand(B, N) if shared_reward else b["reward"]
    with torch.no_grad():
        next_logits_NBA = target_actor(next_obs.transpose(0, 1))
        next_act_NBA = gumbel_softmax_st(next_logits_NBA, gumbel_NBA, temperature) * next_alive.T[..., None]
        q_next_NB = target_critic(critic_input(next_obs, next_act_NBA.transpose(0, 1).expand(N, B, N, A)))[..., 0]
        y_NB = reward_BN.T + gamma * (1.0 - b["done"].T) * q_next_NB
    act_BNA = F.one_hot(b["action"], A).float() * alive[..., None]
    q_NB = critic(critic_input(obs, act_BNA.expand(N, B, N, A)))[..., 0]
    mask_NB = alive.T
    return (mask_NB * (q_NB - y_NB).square()).sum(-1) / mask_NB.sum(-1).clamp(min=1.0)


def actor_loss(actor: BatchedMLP, critic: BatchedMLP, b: dict[str, torch.Tensor], feature_reg: float,
               temperature: float, gumbel_NBA: torch.Tensor) -> torch.Tensor:
    """Masked policy loss of every actor (module docstring), ``[N]``; gradients reach the actors (and critic).

    Args:
        actor, critic: the batched nets.
        b: batch as in ``critic_loss``.
        feature_reg: weight of the mean squared logits.
        temperature: Gumbel-softmax temperature.
        gumbel_NBA: Gumbel noise for the actors' samples.
    """
    obs, alive = b["obs"], b["alive"].float()
    N, B, A = gumbel_NBA.shape
    logits_NBA = actor(obs.transpose(0, 1))
    pi_NBA = gumbel_softmax_st(logits_NBA, gumbel_NBA, temperature)
    buffer_BNA = F.one_hot(b["action"], A).float() * alive[..., None]
    own_N1N1 = torch.eye(N, device=obs.device).reshape(N, 1, N, 1)
    # critic i sees the buffer's joint action with slot i replaced by actor i's fresh sample
    joint_NBNA = own_N1N1 * pi_NBA[:, :, None, :] + (1.0 - own_N1N1) * buffer_BNA[None]
    q_NB = critic(critic_input(obs, joint_NBNA))[..., 0]
    mask_NB = alive.T
    count_N = mask_NB.sum(-1).clamp(min=1.0)
    reg_N = (mask_NB * logits_NBA.square().mean(-1)).sum(-1) / count_N
    return -(mask_NB * q_NB).sum(-1) / count_N + feature_reg * reg_N


@torch.no_grad()
def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``target <- tau * online + (1 - tau) * target``, parameter by parameter."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.lerp_(o, tau)
