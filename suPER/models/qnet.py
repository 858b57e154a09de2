"""Q-networks of the paper (REFERENCE section 5), single-policy and policy-batched.

``ReferenceQNet`` is one policy's network built from plain ``nn.Conv2d``/``nn.Linear`` modules. Its
parameter names follow RLlib 2.1's ``PursuitModel`` + ``DQNTorchModel`` (``model.{0,2,4,7}``,
``policy_fn``, ``advantage_module.dueling_A_0._model.0``, ...) so the original's weights load with
``load_state_dict`` once the unused ``value_fn.*`` entries are dropped.

``BatchedQNet`` holds ``P`` independent copies of that network and evaluates/trains all of them in one
call: the convs are one grouped convolution (``groups=P``) and the dense layers are ``baddbmm`` over a
leading policy axis. It is mathematically equal to ``P`` separate networks: no parameter is shared, and
the gradient of policy ``p``'s loss only reaches policy ``p``'s slice.

Parameter layout of ``BatchedQNet``: every parameter has the policy axis folded into dim 0, and
``param.unflatten(0, (P, -1))[p]`` is policy ``p``'s slice in exactly the shape of the same parameter
of a ``P=1`` net (conv weight ``[P*out, in, k, k]``, conv bias ``[P*out]``, dense weight
``[P, in, out]``, dense bias ``[P, 1, out]``; dense weights are stored transposed w.r.t. ``nn.Linear``).

Shapes: ``P`` policies, ``B`` batch rows per policy, ``O`` one observation: ``(H, W, C)`` (NHWC, float) for the conv
body, any shape for the mlp body (flattened),
``A`` actions.

Input scale: both nets multiply the observation by ``obs_scale`` before their first layer (``EnvSpec.obs_scale``:
1 / 255 for uint8 images, as CleanRL's Atari nets divide by 255). The replay keeps the env's compact values, so the
scale belongs to the network; it is a constructor setting, not a parameter, so state dicts are unchanged, and at
1.0 (every env but integer images) the multiply is skipped and results are bit for bit those of an unscaled net.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

BodyKind = Literal["conv", "mlp"]
BodyChoice = Literal["conv", "mlp", "auto"]
"""``dqn.model``: a body, or ``auto`` (``resolve_body``)"""

CONV_CHANNELS = (32, 64, 64)
"""output channels of the three 2x2, stride-1, unpadded convs of the conv body"""
CONV_KERNEL = 2
CONV_FC = 64
"""width of the dense layer after the conv stack"""
MLP_HIDDENS = (64, 64)
"""tanh layers of the mlp body (RLlib fcnet_hiddens [64, 64] with no_final_linear)"""


def resolve_body(body: str, obs_shape: tuple[int, ...]) -> BodyKind:
    """The body a ``dqn.model`` value builds for observations of ``obs_shape``: ``auto`` is conv for images
    (H, W, C) the conv stack fits (H, W > 3), mlp for any other shape (vectors, (rows, features) tables, small
    grids); conv and mlp are themselves (a misfit is ``_check_config``'s error)."""
    if body != "auto":
        return body  # type: ignore[return-value]
    return "conv" if conv_fits(obs_shape) else "mlp"


def conv_fits(obs_shape: tuple[int, ...]) -> bool:
    """Whether the conv body takes observations of ``obs_shape``: an image (H, W, C) with H, W > 3 (three unpadded
    2x2 convs)."""
    shrink = len(CONV_CHANNELS) * (CONV_KERNEL - 1)
    return len(obs_shape) == 3 and min(int(obs_shape[0]), int(obs_shape[1])) > shrink


def _check_config(
    obs_shape: tuple[int, ...], n_actions: int, body: str, hiddens: int
) -> tuple[int, ...]:
    """The observation shape as ints: ``(H, W, C)`` for the conv body; any shape (a vector, an image, a stack) for
    the mlp body, which flattens it."""
    shape = tuple(int(s) for s in obs_shape)
    if body not in ("conv", "mlp"):
        raise ValueError(f"body must be 'conv' or 'mlp', got {body!r}")
    if body == "conv" and len(shape) != 3:
        raise ValueError(f"the conv body needs observations of shape (H, W, C), got {obs_shape}; "
                         f"use the mlp body (--model mlp) for other shapes")
    shrink = len(CONV_CHANNELS) * (CONV_KERNEL - 1)
    if body == "conv" and (shape[0] <= shrink or shape[1] <= shrink):
        raise ValueError(f"conv body needs H, W > {shrink} (three unpadded 2x2 convs), got {obs_shape}")
    if n_actions < 1 or hiddens < 1 or not shape or min(shape) < 1:
        raise ValueError(f"n_actions, hiddens and every observation dimension must be positive, got {n_actions}, "
                         f"{hiddens}, {obs_shape}")
    return shape


def conv_flat_size(obs_shape: tuple[int, int, int]) -> int:
    """Size of the flattened conv-stack output (e.g. 1024 for pursuit's (7, 7, 3)).

    Args:
        obs_shape: one observation, (H, W, C).

    Returns:
        ``64 * (H - 3) * (W - 3)``.
    """
    shrink = len(CONV_CHANNELS) * (CONV_KERNEL - 1)
    return CONV_CHANNELS[-1] * (obs_shape[0] - shrink) * (obs_shape[1] - shrink)


def _body_out(body: str, hiddens: int) -> int:
    return hiddens if body == "conv" else MLP_HIDDENS[-1]


def check_obs_scale(obs_scale: float) -> float:
    """``obs_scale`` as a float; ValueError unless finite and > 0."""
    scale = float(obs_scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"obs_scale must be a finite number > 0, got {obs_scale!r}")
    return scale


def scale_obs(obs: torch.Tensor, obs_scale: float) -> torch.Tensor:
    """``obs * obs_scale``, or ``obs`` itself at 1.0 (no multiply: unscaled nets stay bit-identical)."""
    return obs if obs_scale == 1.0 else obs * obs_scale


# --------------------------------------------------------------------------------------------------
# single-policy reference network
# --------------------------------------------------------------------------------------------------


def _normc_(weight: torch.Tensor, std: float = 1.0) -> None:
    """RLlib's ``normc_initializer``: N(0, 1) rows rescaled to L2 norm ``std`` (per output unit)."""
    with torch.no_grad():
        weight.normal_(0.0, 1.0)
        weight.mul_(std / weight.pow(2).sum(1, keepdim=True).sqrt())


class SlimFC(nn.Module):
    """RLlib's ``SlimFC`` (Linear + optional activation, ``_model.0`` naming), zero bias.

    Args:
        in_size: input features.
        out_size: output features.
        activation: module applied after the linear layer, or None.
        init: ``"xavier"`` (RLlib default, used by the DQN heads) or ``"normc"`` (fcnet hidden layers).
    """

    def __init__(self, in_size: int, out_size: int, activation: nn.Module | None, init: str) -> None:
        super().__init__()
        linear = nn.Linear(in_size, out_size)
        if init == "xavier":
            nn.init.xavier_uniform_(linear.weight)
        elif init == "normc":
            _normc_(linear.weight, 1.0)
        else:
            raise ValueError(f"unknown init {init!r}")
        nn.init.zeros_(linear.bias)
        layers: list[nn.Module] = [linear] if activation is None else [linear, activation]
        self._model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer. Args: x: ``[..., in]``. Returns: ``[..., out]``."""
        return self._model(x)


class _QNetSettings(nn.Module):
    """The settings both Q-networks are built from, checked once: ``obs_shape``, ``n_actions``, ``body`` (resolved,
    never ``"auto"``), ``dueling``, ``hiddens``, ``obs_scale`` and ``body_out`` (the body's output width)."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, body: BodyChoice, dueling: bool, hiddens: int,
                 obs_scale: float) -> None:
        super().__init__()
        self.body: BodyKind = resolve_body(body, obs_shape)
        self.obs_shape = _check_config(obs_shape, n_actions, self.body, hiddens)
        self.n_actions = int(n_actions)
        self.dueling = bool(dueling)
        self.hiddens = int(hiddens)
        self.obs_scale = check_obs_scale(obs_scale)
        self.body_out = _body_out(self.body, hiddens)


class ReferenceQNet(_QNetSettings):
    """One policy's Q-network, built from plain torch modules (the paper's network, REFERENCE section 5).

    conv body: Conv(C->32)·ReLU -> Conv(32->64)·ReLU -> Conv(64->64)·ReLU -> Flatten (NCHW order) ->
    Linear(->64)·ReLU -> Linear(64->hiddens), PyTorch default init. mlp body: Flatten (HWC order) ->
    Linear(->64)·tanh -> Linear(64->64)·tanh, RLlib normc init, zero bias. Heads (xavier, zero bias):
    A = Linear(->hiddens)·ReLU -> Linear(->A); if dueling V = Linear(->hiddens)·ReLU -> Linear(->1)
    and Q = V + A - mean_a A, else Q = A.

    Args:
        obs_shape: one observation: (H, W, C) for the conv body, any shape for the mlp body.
        n_actions: size of the discrete action space.
        body: ``"conv"`` (the paper's per-env conv body), ``"mlp"`` (``--fully_connected``) or ``"auto"``
            (``resolve_body``).
        dueling: use the dueling value/advantage heads.
        hiddens: width of the conv body's output and of each head's hidden layer.
        obs_scale: factor applied to the observations before the first layer (``EnvSpec.obs_scale``).
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        n_actions: int,
        body: BodyChoice = "conv",
        dueling: bool = True,
        hiddens: int = 256,
        obs_scale: float = 1.0,
    ) -> None:
        super().__init__(obs_shape, n_actions, body, dueling, hiddens, obs_scale)
        if self.body == "conv":
            c = self.obs_shape[2]
            c1, c2, c3 = CONV_CHANNELS
            k = CONV_KERNEL
            self.model = nn.Sequential(
                nn.Conv2d(c, c1, k), nn.ReLU(),
                nn.Conv2d(c1, c2, k), nn.ReLU(),
                nn.Conv2d(c2, c3, k), nn.ReLU(),
                nn.Flatten(),
                nn.Linear(conv_flat_size(self.obs_shape), CONV_FC), nn.ReLU(),
            )  # fmt: skip
            self.policy_fn = nn.Linear(CONV_FC, hiddens)
        else:
            sizes = (math.prod(self.obs_shape), *MLP_HIDDENS)
            self._hidden_layers = nn.Sequential(
                *[SlimFC(sizes[i], sizes[i + 1], nn.Tanh(), "normc") for i in range(len(MLP_HIDDENS))]
            )
        self.advantage_module = nn.Sequential(
            OrderedDict(
                dueling_A_0=SlimFC(self.body_out, hiddens, nn.ReLU(), "xavier"),
                A=SlimFC(hiddens, self.n_actions, None, "xavier"),
            )
        )
        if self.dueling:
            self.value_module = nn.Sequential(
                OrderedDict(
                    dueling_V_0=SlimFC(self.body_out, hiddens, nn.ReLU(), "xavier"),
                    V=SlimFC(hiddens, 1, None, "xavier"),
                )
            )

    def features(self, obs_BO: torch.Tensor) -> torch.Tensor:
        """Body output. Args: obs_BO: ``[B, H, W, C]``, unscaled. Returns: ``[B, body_out]``."""
        obs_BO = scale_obs(obs_BO, self.obs_scale)
        if self.body == "conv":
            return self.policy_fn(self.model(obs_BO.permute(0, 3, 1, 2)))
        return self._hidden_layers(obs_BO.reshape(obs_BO.shape[0], -1))

    def forward(self, obs_BO: torch.Tensor) -> torch.Tensor:
        """Q-values.

        Args:
            obs_BO: float ``[B, H, W, C]`` observations.

        Returns:
            ``q_BA`` float ``[B, A]``.
        """
        f = self.features(obs_BO)
        a = self.advantage_module(f)
        if not self.dueling:
            return a
        v = self.value_module(f)
        return v + (a - a.mean(-1, keepdim=True))


# --------------------------------------------------------------------------------------------------
# policy-batched network
# --------------------------------------------------------------------------------------------------


class GroupedConv2d(nn.Module):
    """``P`` independent unpadded stride-1 convs as one grouped conv on ``[B, P*in, H, W]``.

    Args:
        n_policies: P.
        in_ch: input channels per policy.
        out_ch: output channels per policy.
        kernel: square kernel size.
    """

    def __init__(self, n_policies: int, in_ch: int, out_ch: int, kernel: int) -> None:
        super().__init__()
        self.n_policies = n_policies
        self.weight = nn.Parameter(torch.empty(n_policies * out_ch, in_ch, kernel, kernel))
        self.bias = nn.Parameter(torch.empty(n_policies * out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x: ``[B, P*in, H, W]``. Returns: ``[B, P*out, H-k+1, W-k+1]``."""
        return F.conv2d(x, self.weight, self.bias, groups=self.n_policies)


class BatchedLinear(nn.Module):
    """``P`` independent dense layers: ``y[p] = x[p] @ W[p] + b[p]`` via one ``baddbmm``.

    Args:
        n_policies: P.
        in_features: input features per policy.
        out_features: output features per policy.
    """

    def __init__(self, n_policies: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_policies, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(n_policies, 1, out_features))

    def forward(self, x_PBI: torch.Tensor) -> torch.Tensor:
        """Args: x_PBI: ``[P, B, in]``. Returns: ``[P, B, out]``."""
        return torch.baddbmm(self.bias, x_PBI, self.weight)


def copy_into_slices(params: Mapping[str, torch.Tensor], state_dict: Mapping[str, torch.Tensor],
                     slice_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Copy ``state_dict[name]`` into ``slice_of(params[name])`` for every name, without autograd.

    The one place that writes a small net's weights into one policy's / run's slice of a batched net
    (``BatchedQNet.load_policy_state_dict``, ``PackedQNet.load_run_state_dict``); the caller checks the keys.

    Raises:
        ValueError: a tensor's shape differs from its slice's (names the parameter).
    """
    with torch.no_grad():
        for name, param in params.items():
            dst = slice_of(param)
            src = state_dict[name]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"{name}: expected shape {tuple(dst.shape)}, got {tuple(src.shape)}")
            dst.copy_(src)


class BatchedQNet(_QNetSettings):
    """Q-networks of ``P`` independent policies, evaluated and trained in one batched call.

    Equal to ``P`` separate ``ReferenceQNet``s (see ``batched_from_reference``); each policy's slice is
    initialised exactly as a freshly built ``ReferenceQNet`` (the ``P`` slices consume the torch RNG in
    the same order as building ``P`` reference nets one after the other).

    Args:
        n_policies: P, the number of independent policies.
        obs_shape: one observation: (H, W, C) for the conv body, any shape for the mlp body.
        n_actions: size of each policy's discrete action space.
        body: ``"conv"``, ``"mlp"`` or ``"auto"`` (see ``ReferenceQNet``).
        dueling: use the dueling value/advantage heads.
        hiddens: width of the conv body's output and of each head's hidden layer.
        obs_scale: factor applied to the observations before the first layer (``EnvSpec.obs_scale``).
    """

    slice_stable: bool = False
    """Use the channels-last conv layout with autograd on too. oneDNN's NCHW grouped conv rounds a group
    differently depending on the number of groups; channels-last gives each policy bit-identical results
    whatever P is (``suPER.models.packed.PackedQNet`` needs that; measured ~10-20% slower training on CPU)."""

    def __init__(
        self,
        n_policies: int,
        obs_shape: tuple[int, ...],
        n_actions: int,
        body: BodyChoice = "conv",
        dueling: bool = True,
        hiddens: int = 256,
        obs_scale: float = 1.0,
    ) -> None:
        if n_policies < 1:
            raise ValueError(f"n_policies must be >= 1, got {n_policies}")
        super().__init__(obs_shape, n_actions, body, dueling, hiddens, obs_scale)
        self.n_policies = P = int(n_policies)
        if self.body == "conv":
            chans = (self.obs_shape[2], *CONV_CHANNELS)
            self.convs = nn.ModuleList(
                GroupedConv2d(P, chans[i], chans[i + 1], CONV_KERNEL) for i in range(len(CONV_CHANNELS))
            )
            self.fc1 = BatchedLinear(P, conv_flat_size(self.obs_shape), CONV_FC)
            self.fc2 = BatchedLinear(P, CONV_FC, hiddens)
        else:
            self.fc1 = BatchedLinear(P, math.prod(self.obs_shape), MLP_HIDDENS[0])
            self.fc2 = BatchedLinear(P, MLP_HIDDENS[0], MLP_HIDDENS[1])
        self.adv_hidden = BatchedLinear(P, self.body_out, hiddens)
        self.adv_out = BatchedLinear(P, hiddens, self.n_actions)
        if self.dueling:
            self.val_hidden = BatchedLinear(P, self.body_out, hiddens)
            self.val_out = BatchedLinear(P, hiddens, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every policy slice as a freshly built ``ReferenceQNet`` would be."""
        for p in range(self.n_policies):
            copy_reference_into(self, p, self.make_reference())

    def make_reference(self) -> ReferenceQNet:
        """A freshly initialised single-policy ``ReferenceQNet`` with this net's configuration."""
        return ReferenceQNet(self.obs_shape, self.n_actions, self.body, self.dueling, self.hiddens, self.obs_scale)

    def features(self, obs_PBO: torch.Tensor) -> torch.Tensor:
        """Body output of every policy. Args: obs_PBO: ``[P, B, H, W, C]``, unscaled. Returns: ``[P, B, body_out]``."""
        P, B = obs_PBO.shape[:2]
        if tuple(obs_PBO.shape) != (self.n_policies, B, *self.obs_shape):
            raise ValueError(
                f"expected obs of shape [P={self.n_policies}, B, {', '.join(map(str, self.obs_shape))}], "
                f"got {tuple(obs_PBO.shape)}"
            )
        dtype = self.fc1.weight.dtype
        if obs_PBO.dtype != dtype:
            obs_PBO = obs_PBO.to(dtype)
        obs_PBO = scale_obs(obs_PBO, self.obs_scale)
        if self.body == "mlp":
            x = obs_PBO.reshape(P, B, self.fc1.weight.shape[1])  # HWC flatten, as RLlib's fcnet
            return torch.tanh(self.fc2(torch.tanh(self.fc1(x))))
        h, w, c = self.obs_shape
        # [P, B, H, W, C] -> [B, P*C, H, W] (one copy); policy p owns input channels p*C..p*C+C-1,
        # which is exactly the channel group the grouped conv gives policy p's weights.
        if torch.is_grad_enabled() and not self.slice_stable:
            # NCHW: with autograd on, channels-last measured no faster on CPU and its flatten needs a copy
            x = obs_PBO.permute(1, 0, 4, 2, 3).reshape(B, P * c, h, w)
        else:
            # channels-last ([B, H, W, P*C] in memory): oneDNN's forward-only grouped conv is faster
            # (pursuit P=8, B=32: ~9-12 -> ~7-9 ms on one core); used for acting and target passes
            x = obs_PBO.permute(1, 2, 3, 0, 4).reshape(B, h, w, P * c).permute(0, 3, 1, 2)
        for conv in self.convs:
            x = F.relu_(conv(x))  # in place: conv/baddbmm backward never needs their own output
        # [B, P*64, H', W'] -> [P, B, 64*H'*W'] in each policy's NCHW flatten order: for the NCHW
        # (training) layout a strided view that baddbmm consumes without a copy, else one copy.
        x = x.reshape(B, P, self.fc1.weight.shape[1]).transpose(0, 1)
        return self.fc2(F.relu_(self.fc1(x)))

    def forward(self, obs_PBO: torch.Tensor) -> torch.Tensor:
        """Q-values of every policy on its own batch.

        Args:
            obs_PBO: float ``[P, B, H, W, C]``; row ``[p, b]`` is an observation for policy ``p``.

        Returns:
            ``q_PBA`` float ``[P, B, A]``.
        """
        f = self.features(obs_PBO)
        a = self.adv_out(F.relu_(self.adv_hidden(f)))
        if not self.dueling:
            return a
        v = self.val_out(F.relu_(self.val_hidden(f)))
        return v + (a - a.mean(-1, keepdim=True))

    # ------------------------------------------------------------------ per-policy views / export

    def policy_slice(self, param: torch.Tensor, p: int) -> torch.Tensor:
        """View of policy ``p``'s part of a parameter (or of its gradient), shaped as in a ``P=1`` net.

        Args:
            param: a parameter of this net, or a tensor of the same shape (e.g. its ``.grad``).
            p: policy index.

        Returns:
            ``param.unflatten(0, (P, -1))[p]`` (a view; writes go through).
        """
        if not 0 <= p < self.n_policies:
            raise IndexError(f"policy index {p} out of range for P={self.n_policies}")
        return param.unflatten(0, (self.n_policies, -1))[p]

    def policy_state_dict(self, p: int) -> dict[str, torch.Tensor]:
        """Weights of policy ``p`` in the layout of a single-policy (``P=1``) ``BatchedQNet``.

        Args:
            p: policy index.

        Returns:
            name -> detached contiguous copy; ``BatchedQNet(1, ...).load_state_dict`` accepts it.
        """
        return {name: self.policy_slice(param.detach(), p).clone() for name, param in self.named_parameters()}

    def subset(self, policies: Sequence[int]) -> BatchedQNet:
        """A new net holding copies of the given policies, in that order (e.g. one team of a self-play net).

        Args:
            policies: policy indices of this net.

        Returns:
            ``BatchedQNet`` with ``P = len(policies)`` and this net's configuration.
        """
        net = BatchedQNet(len(policies), self.obs_shape, self.n_actions, body=self.body, dueling=self.dueling,
                          hiddens=self.hiddens, obs_scale=self.obs_scale)
        for i, p in enumerate(policies):
            net.load_policy_state_dict(i, self.policy_state_dict(p))
        return net

    def load_policy_state_dict(self, p: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Overwrite policy ``p``'s weights (inverse of ``policy_state_dict``).

        Args:
            p: policy index.
            state_dict: the ``state_dict()`` of a ``P=1`` net with the same configuration, or the output of
                ``policy_state_dict`` of any compatible net.
        """
        params = dict(self.named_parameters())
        missing, unexpected = params.keys() - state_dict.keys(), state_dict.keys() - params.keys()
        if missing or unexpected:
            raise KeyError(
                f"policy state dict does not match this net (body={self.body}, dueling={self.dueling}): "
                f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        copy_into_slices(params, state_dict, lambda param: self.policy_slice(param, p))


# --------------------------------------------------------------------------------------------------
# reference <-> batched
# --------------------------------------------------------------------------------------------------


def _pairs(
    batched: BatchedQNet, net: ReferenceQNet
) -> list[tuple[GroupedConv2d | BatchedLinear, nn.Conv2d | nn.Linear]]:
    """(batched layer, reference layer) pairs. Both nets register their layers in the same order:
    convs, body dense layers, advantage hidden/out, value hidden/out."""
    mine = [m for m in batched.modules() if isinstance(m, (GroupedConv2d, BatchedLinear))]
    ref = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    pairs = list(zip(mine, ref))
    ok = len(mine) == len(ref) and all(
        isinstance(a, GroupedConv2d) == isinstance(b, nn.Conv2d)
        and batched.policy_slice(a.weight, 0).numel() == b.weight.numel()
        for a, b in pairs
    )
    if not ok:
        raise ValueError("layer structure of BatchedQNet and ReferenceQNet differ")
    return pairs


def _bias(layer: nn.Conv2d | nn.Linear) -> torch.Tensor:
    if layer.bias is None:
        raise ValueError(f"{layer} has no bias; the paper's layers all have one")
    return layer.bias


def _check_same_config(batched: BatchedQNet, net: ReferenceQNet) -> None:
    a = (batched.obs_shape, batched.n_actions, batched.body, batched.dueling, batched.hiddens, batched.obs_scale)
    b = (net.obs_shape, net.n_actions, net.body, net.dueling, net.hiddens, net.obs_scale)
    if a != b:
        raise ValueError(f"config mismatch (obs_shape, n_actions, body, dueling, hiddens, obs_scale): {a} vs {b}")


def copy_reference_into(batched: BatchedQNet, p: int, net: ReferenceQNet) -> None:
    """Copy a single-policy ``ReferenceQNet``'s weights into policy ``p`` of ``batched``.

    Args:
        batched: destination net.
        p: destination policy index.
        net: source net with the same configuration.
    """
    _check_same_config(batched, net)
    with torch.no_grad():
        for dst, src in _pairs(batched, net):
            w = src.weight if isinstance(src, nn.Conv2d) else src.weight.t()  # nn.Linear is [out, in]
            w_dst, b_dst = batched.policy_slice(dst.weight, p), batched.policy_slice(dst.bias, p)
            w_dst.copy_(w.reshape_as(w_dst))
            b_dst.copy_(_bias(src).reshape_as(b_dst))


def reference_from_batched(batched: BatchedQNet, p: int) -> ReferenceQNet:
    """A ``ReferenceQNet`` holding a copy of policy ``p``'s weights.

    Args:
        batched: source net.
        p: source policy index.

    Returns:
        a new ``ReferenceQNet`` on the same device/dtype as ``batched``.
    """
    w0 = batched.fc1.weight
    net = batched.make_reference().to(device=w0.device, dtype=w0.dtype)
    with torch.no_grad():
        for src, dst in _pairs(batched, net):
            w = batched.policy_slice(src.weight, p)
            w = w if isinstance(dst, nn.Conv2d) else w.reshape(w.shape[-2:]).t()
            dst.weight.copy_(w)
            _bias(dst).copy_(batched.policy_slice(src.bias, p).reshape(-1))
    return net


def batched_from_reference(nets: list[ReferenceQNet]) -> BatchedQNet:
    """Stack single-policy nets into one ``BatchedQNet`` (policy ``p`` = ``nets[p]``).

    Args:
        nets: one or more ``ReferenceQNet`` with identical configuration.

    Returns:
        a ``BatchedQNet`` with ``P = len(nets)`` on the first net's device/dtype.
    """
    if not nets:
        raise ValueError("batched_from_reference needs at least one net")
    n0 = nets[0]
    batched = BatchedQNet(len(nets), n0.obs_shape, n0.n_actions, n0.body, n0.dueling, n0.hiddens, n0.obs_scale)
    w0 = next(n0.parameters())
    batched = batched.to(device=w0.device, dtype=w0.dtype)
    for p, net in enumerate(nets):
        copy_reference_into(batched, p, net)
    return batched


# --------------------------------------------------------------------------------------------------
# training helpers
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def clip_grad_norm_per_policy(net: BatchedQNet | nn.Module, max_norm: float) -> torch.Tensor:
    """Clip each policy's gradient to global L2 norm ``max_norm``, independently per policy.

    Equal, slice by slice, to ``torch.nn.utils.clip_grad_norm_(policy_params, max_norm)`` on each policy's
    own network (RLlib's per-policy ``grad_clip``): every policy's gradient slice is multiplied by
    ``min(1, max_norm / (norm_p + 1e-6))``.

    Args:
        net: a net whose ``.grad`` fields are filled (parameters without a grad are skipped): a
            ``BatchedQNet`` or any module with ``n_policies`` whose parameters all carry the policy axis
            folded into dim 0 (built from ``GroupedConv2d`` / ``BatchedLinear``, e.g. SEAC's actor-critic).
        max_norm: largest allowed per-policy gradient norm.

    Returns:
        float ``[P]``: each policy's gradient norm before clipping.
    """
    P = int(net.n_policies)
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(P, device=next(net.parameters()).device)
    acc_dtype = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
    sq_P = torch.zeros(P, dtype=acc_dtype, device=grads[0].device)
    for g in grads:
        sq_P += torch.linalg.vector_norm(g.reshape(P, -1), dim=1, dtype=acc_dtype).square()
    norm_P = sq_P.sqrt()
    coef_P = (max_norm / (norm_P + 1e-6)).clamp(max=1.0)
    for g in grads:
        gv = g.unflatten(0, (P, -1))
        gv.mul_(coef_P.to(g.dtype).view(P, *([1] * (gv.dim() - 1))))
    return norm_P
