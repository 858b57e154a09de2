"""QMIX (Rashid et al., 2018) for the learning team: recurrent agent Q-networks mixed monotonically.

Read top to bottom: loop -> nets -> episode replay -> resume -> loop (act, step, record, store at the
end of each episode, learn, sync target, log) -> save. The shared plumbing (envs, evaluation schedule,
metrics.csv, checkpoints, resume) is ``suPER.loop.RunLoop``; this file holds only the algorithm.

Networks (REFERENCE 7.1, RLlib's QMIX as the original ran it):

* agent net, shared by every learner (RLlib grouped the team into one QMIX policy):
  ``Linear(OBS -> H)·ReLU -> GRU(H) -> Linear(H -> A)`` on the flattened observation. The GRU runs over
  whole episodes in one ``nn.GRU`` call (no Python loop over time); acting feeds one step at a time.
* mixer over the global state ``s`` (the concatenated observations of the N learners; see
  docs/decisions.md): ``hidden = elu(q_N · |W1(s)| + b1(s))``, ``Q_tot = hidden · |W2(s)| + V(s)``
  with hypernetworks ``W1, b1, W2`` (one linear layer each) and ``V = Linear·ReLU·Linear``. The
  absolute values make ``dQ_tot / dQ_i >= 0``.

Loss on a batch of stored episodes, over valid steps t (``mask_t``), team reward ``r_t`` = sum of the
learners' rewards, ``d_t`` = the team's true terminal (horizon truncation bootstraps unless
``env.truncation_is_terminal``)::

    y_t = r_t + gamma (1 - d_t) Q_tot^target(q^target_N(o_{t+1}, a*), s_{t+1}),
    a*_i = argmax_a Q_i(o_{t+1}, a) (online, double-Q) or of Q_i^target
    L   = sum_t mask_t (Q_tot(q_N(o_t, a_t), s_t) - y_t)^2 / sum_t mask_t

Dead learners (battle) are masked: their Q enters the mixer as 0 at every step they are not alive,
both for the taken action and for the bootstrap. Optimiser RMSprop (alpha 0.99, eps 1e-5), gradient
norm clipped to ``grad_clip``, hard target copy every ``target_update_freq`` env steps. Replay holds
whole episodes and samples them uniformly (the original's prioritized buffer never updated a
priority, so it was uniform too); ``updates_per_episode`` gradient steps on ``batch_episodes``
episodes follow every finished training episode once ``env_steps > learning_starts``. Exploration is
epsilon-greedy per learner on the DQN runs' schedule.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suPER.config import ExperimentConfig
from suPER.loop import ProgressFn, RunLoop, to_numpy
from suPER.models import scale_obs
from suPER.replay import UniformReplay
from suPER.runs import Logger, RunFolder, Summary
from suPER.seeds import EXPLORATION_SEED_OFFSET, REPLAY_SEED_OFFSET


class RNNAgent(nn.Module):
    """``Linear(OBS -> H)·ReLU -> GRU(H) -> Linear(H -> A)``, one set of weights for every learner.

    Args:
        obs_size: OBS, the flattened observation size.
        hidden: H, the GRU width.
        n_actions: A.
    """

    def __init__(self, obs_size: int, hidden: int, n_actions: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.fc1 = nn.Linear(obs_size, hidden)
        self.rnn = nn.GRU(hidden, hidden)
        self.fc2 = nn.Linear(hidden, n_actions)

    def forward(self, obs_TBO: torch.Tensor, h_1BH: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Q-values along sequences.

        Args:
            obs_TBO: float ``[T, B, OBS]`` (B = episodes x learners, or the N learners when acting).
            h_1BH: hidden state before the first step.

        Returns:
            ``q_TBA`` and the hidden state after the last step.
        """
        y_TBH, h_1BH = self.rnn(F.relu(self.fc1(obs_TBO)), h_1BH)
        return self.fc2(y_TBH), h_1BH


class QMixer(nn.Module):
    """Monotonic mixing network with hypernetworks over the state (RLlib's / pymarl's ``QMixer``).

    Args:
        n_agents: N.
        state_size: S.
        embed: E, the mixing width.
    """

    def __init__(self, n_agents: int, state_size: int, embed: int) -> None:
        super().__init__()
        self.n_agents, self.embed = n_agents, embed
        self.hyper_w1 = nn.Linear(state_size, embed * n_agents)
        self.hyper_b1 = nn.Linear(state_size, embed)
        self.hyper_w2 = nn.Linear(state_size, embed)
        self.value = nn.Sequential(nn.Linear(state_size, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, q_KN: torch.Tensor, state_KS: torch.Tensor) -> torch.Tensor:
        """``Q_tot`` of K rows: ``[K, N]`` agent Q-values and ``[K, S]`` states -> ``[K]``."""
        K = q_KN.shape[0]
        w1_KNE = self.hyper_w1(state_KS).abs().view(K, self.n_agents, self.embed)
        hidden_K1E = F.elu(torch.bmm(q_KN.view(K, 1, self.n_agents), w1_KNE) + self.hyper_b1(state_KS).view(K, 1, -1))
        w2_KE1 = self.hyper_w2(state_KS).abs().view(K, self.embed, 1)
        return (torch.bmm(hidden_K1E, w2_KE1).view(K) + self.value(state_KS).view(K))


def train(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
          progress: ProgressFn | None = None) -> Summary:
    """Train QMIX on ``cfg.env``'s learning team.

    Args:
        cfg: validated experiment config (``cfg.qmix`` holds the algorithm's settings).
        folder: run folder for metrics.csv and checkpoints.
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: per-step callback (the CLI's progress bar).

    Returns:
        Summary of the run.
    """
    q = cfg.qmix
    loop = RunLoop(cfg, folder, logger, progress)
    spec, device = loop.spec, loop.device
    N, A = spec.n_agents, spec.n_actions
    OBS = int(np.prod(spec.obs_shape))
    T = cfg.env.horizon  # longest possible episode (max_cycles may end it earlier)
    rng = np.random.default_rng(cfg.run.seed + EXPLORATION_SEED_OFFSET)  # exploration draws

    # ---- networks: one shared recurrent agent net, the mixer, and their targets
    agent = RNNAgent(OBS, q.rnn_hidden, A).to(device)
    mixer = QMixer(N, N * OBS, q.mixing_embed_dim).to(device)
    target_agent = copy.deepcopy(agent).requires_grad_(False)
    target_mixer = copy.deepcopy(mixer).requires_grad_(False)
    params = [*agent.parameters(), *mixer.parameters()]
    optimizer = torch.optim.RMSprop(params, lr=q.lr, alpha=q.optim_alpha, eps=q.optim_eps)

    # ---- replay: whole episodes padded to the horizon, sampled uniformly
    buffer = UniformReplay(q.buffer_episodes, {
        "obs": ((T + 1, N, OBS), spec.obs_dtype), "action": ((T, N), np.int64), "reward": ((T,), np.float32),
        "terminal": ((T,), np.float32), "alive": ((T + 1, N), bool), "length": ((), np.int64)},
        rng=np.random.default_rng(cfg.run.seed + REPLAY_SEED_OFFSET))
    episode = {k: np.zeros_like(v[0]) for k, v in buffer.data.items()}  # the episode being collected

    def obs_tensor(obs: np.ndarray) -> torch.Tensor:
        """Observations as the nets read them: float, times ``EnvSpec.obs_scale`` (1 / 255 for uint8 images)."""
        return scale_obs(torch.as_tensor(obs, device=device).float(), spec.obs_scale)

    eval_h = [torch.zeros(1, N, q.rnn_hidden, device=device)]  # [1, E*N, H]: game e's learners at e*N..

    def eval_reset(num_games: int) -> None:
        """E evaluation episodes start: a zero hidden state per game and learner."""
        eval_h[0] = torch.zeros(1, num_games * N, q.rnn_hidden, device=device)

    @torch.no_grad()
    def greedy(obs_ENO: np.ndarray, alive_EN: np.ndarray | None = None) -> np.ndarray:
        """argmax of each learner's Q in E games [E, N], carrying the evaluation hidden state (``eval_reset``
        sizes and clears it)."""
        e = obs_ENO.shape[0]
        q_1BA, eval_h[0] = agent(obs_tensor(obs_ENO).reshape(1, e * N, OBS), eval_h[0])
        return q_1BA[0].argmax(-1).reshape(e, N).cpu().numpy()

    def trainer_state() -> dict[str, Any]:
        return {"agent": agent.state_dict(), "mixer": mixer.state_dict(), "target_agent": target_agent.state_dict(),
                "target_mixer": target_mixer.state_dict(), "optimizer": optimizer.state_dict(),
                "replay": buffer.state_dict() if cfg.run.checkpoint_replay else None,
                "rng": rng.bit_generator.state, "updates": updates, "last_target_sync": last_target_sync,
                "learn_after": learn_after}

    # ---- resume or start
    updates, last_target_sync, learn_after = 0, 0, q.learning_starts
    losses: list[float] = []
    state = loop.restore()
    if state is not None:
        for net, key in ((agent, "agent"), (mixer, "mixer"), (target_agent, "target_agent"),
                         (target_mixer, "target_mixer"), (optimizer, "optimizer")):
            net.load_state_dict(state[key])
        rng.bit_generator.state = state["rng"]
        updates, last_target_sync = int(state["updates"]), int(state["last_target_sync"])
        learn_after = int(state["learn_after"])
        if state["replay"] is not None:
            buffer.load_state_dict(to_numpy(state["replay"], keep=("rng",)))
        else:  # refill the empty buffer before learning again
            learn_after = loop.env_steps + q.learning_starts
    obs_NO = loop.reset_envs()[0].reshape(N, OBS)
    if state is None:
        loop.evaluate(greedy, on_reset=eval_reset)  # step 0: the untrained greedy policy
        loop.save(trainer_state())
    env = loop.envs[0]
    alive_N = env.alive_N
    h_1NH = torch.zeros(1, N, q.rnn_hidden, device=device)
    t = 0

    def extra() -> dict[str, Any]:
        row = {"loss": float(np.mean(losses)) if losses else float("nan"),
               "epsilon": q.epsilon(loop.env_steps), "updates": updates}
        losses.clear()
        return row

    # ---- loop: one iteration = one env step; store and learn when an episode ends
    while not loop.done:
        # act: epsilon-greedy on the recurrent Q, epsilon scheduled by env steps
        with loop.timer("act"), torch.no_grad():
            q_1NA, h_1NH = agent(obs_tensor(obs_NO)[None], h_1NH)
            actions_N = q_1NA[0].argmax(-1).cpu().numpy()
            explore_N = rng.random(N) < q.epsilon(loop.env_steps)
            actions_N = np.where(explore_N, rng.integers(0, A, N), actions_N)
        # step
        with loop.timer("env"):
            res = env.step(actions_N)
        # record the step into the episode being collected
        episode["obs"][t], episode["action"][t], episode["alive"][t] = obs_NO, actions_N, alive_N
        episode["reward"][t] = np.where(alive_N, res.reward_N, 0.0).sum()
        t += 1
        obs_NO, alive_N = res.obs_NO.reshape(N, OBS), res.alive_N
        due = loop.tick(1)

        if res.episode_over or t == T:
            # store: the finished episode (final observation included) as one replay row
            with loop.timer("store"):
                truncated = bool(res.truncated_N.any()) or not res.episode_over
                episode["obs"][t], episode["alive"][t], episode["length"][...] = obs_NO, alive_N, t
                episode["terminal"][t - 1] = float(not truncated or cfg.env.truncation_is_terminal)
                buffer.add(**{k: v[None] for k, v in episode.items()})
                loop.episode_finished(float(episode["reward"][:t].sum()))
                for v in episode.values():
                    v[...] = 0
            obs_NO, alive_N, t = env.reset().reshape(N, OBS), env.alive_N, 0
            h_1NH = torch.zeros(1, N, q.rnn_hidden, device=device)

            # learn: gradient steps on uniformly sampled whole episodes
            if loop.env_steps > learn_after:
                with loop.timer("learn"):
                    for _ in range(q.updates_per_episode):
                        b = to_batch(buffer.sample(q.batch_episodes), device, spec.obs_scale)
                        loss = qmix_loss(agent, mixer, target_agent, target_mixer, b, q.gamma, q.double_q)
                        optimizer.zero_grad(set_to_none=True)
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_(params, q.grad_clip)
                        optimizer.step()
                        losses.append(float(loss.detach()))
                        updates += 1
                # sync target: hard copy every target_update_freq env steps (first sync at the first update)
                if loop.env_steps - last_target_sync >= q.target_update_freq or updates == q.updates_per_episode:
                    target_agent.load_state_dict(agent.state_dict())
                    target_mixer.load_state_dict(mixer.state_dict())
                    last_target_sync = loop.env_steps

        # log: evaluate at exact multiples of the interval, checkpoint after it
        if due:
            loop.evaluate(greedy, extra(), on_reset=eval_reset)
        if loop.checkpoint_due:
            loop.save(trainer_state())
        loop.report_progress()

    # ---- final evaluation and save
    return loop.finish(greedy, {"agent": agent.state_dict(), "mixer": mixer.state_dict(),
                                "target_agent": target_agent.state_dict(), "target_mixer": target_mixer.state_dict(),
                                "updates": updates}, extra(), on_reset=eval_reset)


def to_batch(rows: dict[str, np.ndarray], device: torch.device, obs_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Sampled episodes -> tensors cropped to the longest sampled episode, with the step mask ``mask`` [B, T]; the
    observations float and times ``obs_scale`` (``EnvSpec.obs_scale``: what the agent net and the mixer's state
    read)."""
    t_max = int(rows["length"].max())
    b = {"obs": scale_obs(torch.as_tensor(rows["obs"][:, : t_max + 1], device=device).float(), obs_scale),
         "alive": torch.as_tensor(rows["alive"][:, : t_max + 1], device=device),
         "action": torch.as_tensor(rows["action"][:, :t_max], device=device),
         "reward": torch.as_tensor(rows["reward"][:, :t_max], device=device),
         "terminal": torch.as_tensor(rows["terminal"][:, :t_max], device=device)}
    b["mask"] = (torch.arange(t_max, device=device)[None] < torch.as_tensor(rows["length"], device=device)[:, None])
    return b


def qmix_loss(agent: RNNAgent, mixer: QMixer, target_agent: RNNAgent, target_mixer: QMixer,
              b: dict[str, torch.Tensor], gamma: float, double_q: bool) -> torch.Tensor:
    """Masked mean squared TD error of ``Q_tot`` over a batch of episodes (module docstring).

    Args:
        agent, mixer, target_agent, target_mixer: the networks.
        b: ``obs`` float ``[B, T+1, N, OBS]``, ``alive`` bool ``[B, T+1, N]``, ``action`` int ``[B, T, N]``,
            ``reward``/``terminal`` float ``[B, T]``, ``mask`` bool ``[B, T]`` (valid steps).
        gamma: discount.
        double_q: pick the bootstrap action with the online agent net.

    Returns:
        The scalar loss.
    """
    obs, alive = b["obs"], b["alive"].float()
    B, T1, N, OBS = obs.shape
    T = T1 - 1
    obs_TBO = obs.permute(1, 0, 2, 3).reshape(T1, B * N, OBS)  # sequences of every (episode, learner)
    state_BTS = obs.reshape(B, T1, N * OBS)
    h0 = torch.zeros(1, B * N, agent.hidden, device=obs.device)
    q_BTNA = agent(obs_TBO, h0)[0].reshape(T1, B, N, -1).transpose(0, 1)
    with torch.no_grad():
        q_target_BTNA = target_agent(obs_TBO, h0)[0].reshape(T1, B, N, -1).transpose(0, 1)
        chooser = q_BTNA if double_q else q_target_BTNA
        a_star = chooser[:, 1:].argmax(-1, keepdim=True)
        q_next_BTN = q_target_BTNA[:, 1:].gather(-1, a_star)[..., 0] * alive[:, 1:]
        q_tot_next = target_mixer(q_next_BTN.reshape(B * T, N), state_BTS[:, 1:].reshape(B * T, -1)).view(B, T)
        y_BT = b["reward"] + gamma * (1.0 - b["terminal"]) * q_tot_next
    q_taken_BTN = q_BTNA[:, :-1].gather(-1, b["action"][..., None])[..., 0] * alive[:, :-1]
    q_tot = mixer(q_taken_BTN.reshape(B * T, N), state_BTS[:, :-1].reshape(B * T, -1)).view(B, T)
    mask = b["mask"].float()
    return (mask * (q_tot - y_BT).square()).sum() / mask.sum().clamp(min=1.0)
