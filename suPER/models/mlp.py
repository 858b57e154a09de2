"""A policy-batched ReLU MLP: ``P`` independent MLPs evaluated in one call (the baselines' actors and critics).

Shapes: ``P`` policies (agents), ``B`` batch rows per policy, ``I`` input features, ``Y`` output features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from suPER.models.qnet import BatchedLinear


class BatchedMLP(nn.Module):
    """``P`` independent ReLU MLPs ``I -> hiddens... -> Y`` as a stack of ``BatchedLinear`` layers.

    Each slice is initialised like ``nn.Linear`` (uniform in +-1/sqrt(fan_in) for weight and bias), so
    policy ``p`` is a plain torch MLP; no parameter is shared between policies, and clipping with
    ``clip_grad_norm_per_policy`` treats each policy on its own.

    Args:
        n_policies: P.
        in_features: I.
        hiddens: hidden layer widths (ReLU after each).
        out_features: Y (no activation on the output).
    """

    def __init__(self, n_policies: int, in_features: int, hiddens: list[int] | tuple[int, ...],
                 out_features: int) -> None:
        super().__init__()
        if n_policies < 1 or in_features < 1 or out_features < 1:
            raise ValueError(f"n_policies, in_features and out_features must be >= 1, got "
                             f"{n_policies}, {in_features}, {out_features}")
        self.n_policies = int(n_policies)
        sizes = (int(in_features), *(int(h) for h in hiddens), int(out_features))
        self.layers = nn.ModuleList(BatchedLinear(self.n_policies, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s default init, slice by slice."""
        with torch.no_grad():
            for layer in self.layers:
                bound = 1.0 / math.sqrt(layer.weight.shape[1])
                layer.weight.uniform_(-bound, bound)
                layer.bias.uniform_(-bound, bound)

    def forward(self, x_PBI: torch.Tensor) -> torch.Tensor:
        """Args: x_PBI: ``[P, B, I]`` (a broadcast view ``expand(P, B, I)`` is fine). Returns: ``[P, B, Y]``."""
        x = x_PBI
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)
