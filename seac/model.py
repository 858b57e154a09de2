"""SEAC's per-agent actor-critic networks, batched over agents (one call evaluates all N agents' nets).

``mlp`` (the SEAC paper's network, ``semitable/seac`` ``MLPBase``): separate actor and critic bodies,
each Flatten (HWC) -> Linear(->64)·ReLU -> Linear(64->64)·ReLU; policy head Linear(64->A), value head
Linear(64->1). Orthogonal init with gain sqrt(2) (policy head 0.01), zero biases, as the original.

``conv`` (the env's conv body of the SUPER paper, REFERENCE section 5): Conv(C->32)·ReLU ->
Conv(32->64)·ReLU -> Conv(64->64)·ReLU (2x2, stride 1, unpadded) -> Flatten (NCHW) -> Linear(->64)·ReLU,
shared by a linear policy head and a linear value head (the A2C CNN layout SEAC's code base descends from).

Agent ``p``'s network only ever sees ``p``'s parameter slice: the layers are ``suPER.models``' grouped
convs and ``baddbmm`` dense layers, so the N networks are independent but run as one batched call.

Shapes: ``P`` agents (policies), ``B`` rows per agent, ``O`` one observation (H, W, C), ``A`` actions.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from suPER.models import BatchedLinear, GroupedConv2d, check_obs_scale, conv_flat_size, scale_obs

HIDDEN = 64
"""width of the SEAC paper's MLP layers (and of the conv body's dense layer)"""
CONV_CHANNELS = (32, 64, 64)
"""output channels of the paper's three 2x2 convs"""


def _orthogonal_(layer: BatchedLinear | GroupedConv2d, n_policies: int, gain: float) -> None:
    """Orthogonal weights (per policy slice, as ``nn.init.orthogonal_`` on a single layer) and zero bias."""
    with torch.no_grad():
        for p in range(n_policies):
            if isinstance(layer, BatchedLinear):
                w = torch.empty(layer.weight.shape[2], layer.weight.shape[1])  # nn.Linear layout [out, in]
                nn.init.orthogonal_(w, gain)
                layer.weight[p].copy_(w.t())
            else:
                nn.init.orthogonal_(layer.weight.unflatten(0, (n_policies, -1))[p], gain)
        layer.bias.zero_()


class SEACNet(nn.Module):
    """N independent actor-critics evaluated in one call.

    Args:
        n_policies: P, one per learning agent.
        obs_shape: one observation: (H, W, C) for the conv body, any shape for the mlp body (flattened).
        n_actions: size of the discrete action space.
        body: ``"mlp"`` (SEAC paper) or ``"conv"`` (the SUPER paper's conv body).
        obs_scale: factor applied to the observations before the first layer (``EnvSpec.obs_scale``: 1 / 255 for
            uint8 images, 1 for every env of the paper).
    """

    def __init__(self, n_policies: int, obs_shape: tuple[int, ...], n_actions: int,
                 body: Literal["mlp", "conv"] = "mlp", obs_scale: float = 1.0) -> None:
        super().__init__()
        self.obs_scale = check_obs_scale(obs_scale)
        if body not in ("mlp", "conv"):
            raise ValueError(f"body must be 'mlp' or 'conv', got {body!r}")
        if body == "conv" and len(obs_shape) != 3:
            raise ValueError(f"the conv body needs observations of shape (H, W, C), got {obs_shape}; use "
                             f"seac.model=mlp for other shapes")
        if not obs_shape or min(obs_shape) < 1:
            raise ValueError(f"every observation dimension must be positive, got {obs_shape}")
        self.n_policies = P = int(n_policies)
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.n_actions = int(n_actions)
        self.body = body
        relu = math.sqrt(2.0)
        if body == "mlp":
            flat = math.prod(self.obs_shape)
            self.actor1, self.actor2 = BatchedLinear(P, flat, HIDDEN), BatchedLinear(P, HIDDEN, HIDDEN)
            self.critic1, self.critic2 = BatchedLinear(P, flat, HIDDEN), BatchedLinear(P, HIDDEN, HIDDEN)
            hidden: list[BatchedLinear | GroupedConv2d] = [self.actor1, self.actor2, self.critic1, self.critic2]
        else:
            h, w, c = self.obs_shape
            if h <= len(CONV_CHANNELS) or w <= len(CONV_CHANNELS):
                raise ValueError(f"conv body needs H, W > {len(CONV_CHANNELS)}, got {obs_shape}")
            chans = (c, *CONV_CHANNELS)
            self.convs = nn.ModuleList(GroupedConv2d(P, chans[i], chans[i + 1], 2) for i in range(len(CONV_CHANNELS)))
            self.fc = BatchedLinear(P, conv_flat_size((h, w, c)), HIDDEN)
            hidden = [*self.convs, self.fc]
        self.policy_head = BatchedLinear(P, HIDDEN, self.n_actions)
        self.value_head = BatchedLinear(P, HIDDEN, 1)
        for layer in [*hidden, self.value_head]:
            _orthogonal_(layer, P, relu)
        _orthogonal_(self.policy_head, P, 0.01)

    def forward(self, obs_PBO: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy logits and state values of every agent's network on its own rows.

        Args:
            obs_PBO: float ``[P, B, *O]``; row ``[p, b]`` is evaluated by agent ``p``'s network.

        Returns:
            ``logits_PBA`` ``[P, B, A]`` and ``value_PB`` ``[P, B]``.
        """
        P, B = obs_PBO.shape[:2]
        if tuple(obs_PBO.shape) != (self.n_policies, B, *self.obs_shape):
            raise ValueError(f"expected obs of shape [P={self.n_policies}, B, {', '.join(map(str, self.obs_shape))}], "
                             f"got {tuple(obs_PBO.shape)}")
        obs_PBO = scale_obs(obs_PBO.float(), self.obs_scale)
        if self.body == "mlp":
            x = obs_PBO.reshape(P, B, -1)
            actor = F.relu(self.actor2(F.relu(self.actor1(x))))
            critic = F.relu(self.critic2(F.relu(self.critic1(x))))
        else:
            h, w, c = self.obs_shape
            x = obs_PBO.permute(1, 0, 4, 2, 3).reshape(B, P * c, h, w)  # policy p owns channel group p
            for conv in self.convs:
                x = F.relu(conv(x))
            actor = critic = F.relu(self.fc(x.reshape(B, P, -1).transpose(0, 1)))
        return self.policy_head(actor), self.value_head(critic)[..., 0]
