"""Q-networks: single-policy reference nets and policy-batched nets (REFERENCE section 5); batched MLPs."""

from suPER.models.mlp import BatchedMLP
from suPER.models.qnet import (
    BatchedLinear,
    BatchedQNet,
    GroupedConv2d,
    ReferenceQNet,
    batched_from_reference,
    check_obs_scale,
    clip_grad_norm_per_policy,
    conv_flat_size,
    copy_reference_into,
    reference_from_batched,
    resolve_body,
    scale_obs,
)

__all__ = [
    "BatchedLinear",
    "BatchedMLP",
    "BatchedQNet",
    "GroupedConv2d",
    "ReferenceQNet",
    "batched_from_reference",
    "check_obs_scale",
    "clip_grad_norm_per_policy",
    "conv_flat_size",
    "copy_reference_into",
    "reference_from_batched",
    "resolve_body",
    "scale_obs",
]
