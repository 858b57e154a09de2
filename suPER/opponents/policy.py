"""Network teams as policies: a frozen team file (or a run's checkpoint) acting greedily, batched over agents.

``NetworkOpponent`` is the fixed opponent team the env adapters drive (``suPER.opponents.make_env`` builds it for
``env.opponent`` = pretrained | PATH); ``team_policy`` is the learning side of a match (``opponents eval``,
self-play snapshot matches). The weights come from ``suPER.opponents.team_file``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from suPER.envs.batched import LockstepBatch
from suPER.evaluation import BatchActFn
from suPER.models import BatchedQNet
from suPER.opponents.team_file import load_team, team_from_checkpoint

if TYPE_CHECKING:
    from suPER.envs import MultiAgentEnv


class NetworkOpponent:
    """A team of M frozen per-agent Q-networks acting greedily (or epsilon-greedily), batched.

    One forward pass of the ``BatchedQNet`` per env step: agent p's observation is policy p's batch
    of one row, ``a_p = argmax_a Q_p(o_p, a)``. With ``epsilon > 0`` each agent independently takes a
    uniform action with probability epsilon (the original's opponents kept their epsilon-greedy
    exploration during training rollouts, REFERENCE 8); the draws come from the policy's own
    generator, seeded from the env seed, so acting never touches numpy's or torch's global RNG.

    With ``epsilon_timesteps`` > 0 agent m's epsilon decays with its own action count t_m (its actions while
    alive, as RLlib counted a policy's computed actions): ``eps_m = linear_schedule(t_m, epsilon,
    epsilon_final, epsilon_timesteps)``. The counts are state (``state_dict``), checkpointed with the run.

    Args:
        net: the team's networks (P = M).
        epsilon: exploration probability in [0, 1]; 0 = greedy (default); the start value of a decay.
        seed: seed of the exploration generator.
        epsilon_final: where a decay ends.
        epsilon_timesteps: own actions over which epsilon decays linearly; 0 = constant ``epsilon``.
    """

    def __init__(self, net: BatchedQNet, epsilon: float = 0.0, seed: int | None = None,
                 epsilon_final: float = 0.0, epsilon_timesteps: int = 0) -> None:
        self.net = net.eval().requires_grad_(False)
        self.epsilon = float(epsilon)
        self.epsilon_final = float(epsilon_final)
        self.epsilon_timesteps = int(epsilon_timesteps)
        self.rng = np.random.default_rng(seed)
        self.acted_M = np.zeros(net.n_policies, dtype=np.int64)
        """actions each agent took so far (counted while alive; drives a decaying epsilon)"""

    @property
    def explores(self) -> bool:
        """Whether any action may be random (a greedy policy draws nothing from its generator)."""
        return self.epsilon > 0 or (self.epsilon_timesteps > 0 and self.epsilon_final > 0)

    def epsilon_M(self) -> np.ndarray:
        """Each agent's current epsilon [M]: ``epsilon``, or its decay at the agent's own action count."""
        if self.epsilon_timesteps <= 0:
            return np.full(len(self.acted_M), self.epsilon)
        frac_M = np.minimum(1.0, self.acted_M / self.epsilon_timesteps)
        return self.epsilon + frac_M * (self.epsilon_final - self.epsilon)

    def state_dict(self) -> dict[str, object]:
        """The exploration state a resumed run continues from: action counts and the generator."""
        return {"acted_M": self.acted_M.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Inverse of ``state_dict``."""
        self.acted_M[:] = np.asarray(state["acted_M"], dtype=np.int64)
        self.rng.bit_generator.state = state["rng"]

    @torch.no_grad()
    def act(self, obs_MO: np.ndarray, alive_M: np.ndarray) -> np.ndarray:
        """Actions [M] (int64); dead agents' rows are computed too (their actions are not sent)."""
        obs = torch.as_tensor(np.asarray(obs_MO, dtype=np.float32))[:, None]
        actions_M = self.net(obs)[:, 0].argmax(-1).numpy().astype(np.int64)
        if self.explores:
            m = len(actions_M)
            explore_M = self.rng.random(m) < self.epsilon_M()
            actions_M = np.where(explore_M, self.rng.integers(0, self.net.n_actions, m), actions_M)
        self.acted_M += np.asarray(alive_M, dtype=bool)
        return actions_M

    @torch.no_grad()
    def act_batch(self, obs_EMO: np.ndarray, alive_EM: np.ndarray,
                  peers: Sequence[NetworkOpponent] | None = None) -> np.ndarray:
        """Actions [E, M] for E games at once: one forward over all E x M observations.

        Args:
            obs_EMO: float32 [E, M, *obs_shape], game e's opponents in row e.
            alive_EM: bool [E, M].
            peers: game e's own policy at index e (default: this one for every game); its generator draws
                game e's exploration, so a game explores exactly as when it is played alone. Every peer must
                act with this policy's network.

        Raises:
            ValueError: a peer with another network.
        """
        obs = torch.as_tensor(np.asarray(obs_EMO, dtype=np.float32))
        e = obs.shape[0]
        actions_EM = self.net(obs.transpose(0, 1)).argmax(-1).T.numpy().astype(np.int64)
        peers = [self] * e if peers is None else list(peers)
        if any(p.net is not self.net for p in peers):
            raise ValueError("NetworkOpponent.act_batch: every game's opponent must share this network")
        for g, p in enumerate(peers):
            if p.explores:
                m = actions_EM.shape[1]
                explore_M = p.rng.random(m) < p.epsilon_M()
                actions_EM[g] = np.where(explore_M, p.rng.integers(0, p.net.n_actions, m), actions_EM[g])
            p.acted_M += np.asarray(alive_EM[g], dtype=bool)
        return actions_EM


def team_policy(spec: str, env: MultiAgentEnv | LockstepBatch, seed: int, allow_pickle: bool = False) -> BatchActFn:
    """The learning side of a match: ``random``, a run's ``checkpoints/final.pt`` or a team file, as a batched
    act ``(obs_ENO, alive_EN) -> actions_EN``.

    A run checkpoint holds P = N policies (independent learners) or P = 1 (parameter sharing); a
    self-play checkpoint (P = all agents) contributes the learning team's policies.
    """
    if isinstance(env, LockstepBatch):
        env = env.games[0]  # the games' common shapes and ids
    n, n_actions = env.spec.n_agents, env.spec.n_actions
    if spec == "random":
        rng = np.random.default_rng(seed)
        return lambda obs, alive: rng.integers(0, n_actions, (len(obs), n))
    path = Path(spec)
    if path.suffix == ".pt":
        net = team_from_checkpoint(path, env)
    else:
        net, _ = load_team(path, env, "team", allow_pickle)
    if net.n_policies == 1 and n > 1:
        return lambda obs, alive: _shared_act(net, obs)
    return NetworkOpponent(net, 0.0, seed).act_batch


@torch.no_grad()
def _shared_act(net: BatchedQNet, obs_ENO: np.ndarray) -> np.ndarray:
    """Greedy actions [E, N] of one shared network for every learner of E games."""
    e, n = obs_ENO.shape[:2]
    obs = torch.as_tensor(np.asarray(obs_ENO, dtype=np.float32)).reshape(1, e * n, *obs_ENO.shape[2:])
    return net(obs)[0].argmax(-1).reshape(e, n).numpy().astype(np.int64)
