"""The paper's Q-network as an RLlib 2.60 RLModule: ``PaperDQNTorchRLModule``.

RLlib's ``DefaultDQNTorchRLModule`` builds its encoder and heads from ``DQNCatalog`` (``DefaultModelConfig``).
Its CNN encoder goes from the last conv straight into the heads, so it cannot express the paper's body
(SUPER-REFERENCE section 5: convs -> Linear(->64)·ReLU -> Linear(64->hiddens)). This module keeps
everything of ``DefaultDQNTorchRLModule`` (forward passes, epsilon-greedy, dueling combination,
double-Q train pass, ``TargetNetworkAPI``) and only replaces what ``DefaultDQNRLModule.setup`` builds:

- ``encoder``: the body of a freshly built ``suPER.models.qnet.ReferenceQNet`` (conv: ``model`` +
  ``policy_fn``; mlp: ``_hidden_layers``), called as RLlib calls encoders (batch dict in,
  ``{ENCODER_OUT: features}`` out);
- ``af``: ReferenceQNet's ``advantage_module`` (Linear(->hiddens)·ReLU -> Linear(->A));
- ``vf`` (dueling): ReferenceQNet's ``value_module`` (Linear(->hiddens)·ReLU -> Linear(->1)).

So layer shapes, activations and initialisation (PyTorch default for the conv body, RLlib normc for
the mlp body, xavier-uniform / zero bias for the heads) are the native backend's, by construction.
Target networks are deep copies (``make_target_networks`` of the parent, same attribute names).

Parameter names are ReferenceQNet's under three prefixes (``encoder.``, ``af.`` for
``advantage_module.``, ``vf.`` for ``value_module.``); ``reference_to_module_name`` maps them and
``load_reference_weights`` / ``to_reference`` copy weights between the two.

Model config keys (besides DQN's auto-included ``dueling``, ``double_q``, ``epsilon``, ``num_atoms``):
``paper_body`` ("conv" | "mlp"), ``paper_hiddens`` (int), ``paper_obs_shape`` (H, W, C) -- optional when
the observation space is already (H, W, C); needed for flattened mlp observations only to name the
shape (the mlp body flattens in HWC order either way) -- and ``paper_obs_scale`` (``EnvSpec.obs_scale``, the
factor the encoder applies to observations first; 1.0 when absent, as in modules saved before it existed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from suPER.models.qnet import ReferenceQNet, scale_obs

REFERENCE_PREFIXES = (("advantage_module.", "af."), ("value_module.", "vf."))
"""ReferenceQNet name prefix -> RLModule prefix; every other ReferenceQNet parameter lives under ``encoder.``."""


class PaperEncoder(nn.Module):
    """The body of a ReferenceQNet, with RLlib's encoder call convention.

    Args:
        net: the ReferenceQNet whose body layers this encoder takes over (shared, not copied).
    """

    def __init__(self, net: ReferenceQNet) -> None:
        super().__init__()
        self.body = net.body
        self.obs_shape = net.obs_shape
        self.obs_scale = net.obs_scale
        if net.body == "conv":
            self.model = net.model
            self.policy_fn = net.policy_fn
        else:
            self._hidden_layers = net._hidden_layers

    def forward(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Body output.

        Args:
            batch: RLlib batch with ``obs`` float ``[B, H, W, C]`` (or ``[B, H*W*C]`` for the mlp body), unscaled.

        Returns:
            ``{ENCODER_OUT: [B, body_out]}``.
        """
        obs = scale_obs(batch[Columns.OBS].float(), self.obs_scale)
        if self.body == "conv":
            x = obs.reshape(-1, *self.obs_shape).permute(0, 3, 1, 2)  # NHWC -> NCHW, as ReferenceQNet
            return {ENCODER_OUT: self.policy_fn(self.model(x))}
        return {ENCODER_OUT: self._hidden_layers(obs.reshape(obs.shape[0], -1))}


def _obs_shape(observation_space: Any, model_config: Mapping[str, Any], body: str) -> tuple[int, int, int]:
    shape = model_config.get("paper_obs_shape")
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if observation_space is not None and int(np.prod(shape)) != int(np.prod(observation_space.shape)):
            raise ValueError(f"paper_obs_shape {shape} does not match the observation space {observation_space.shape}")
        return shape  # type: ignore[return-value]
    space_shape = tuple(int(s) for s in observation_space.shape)
    if len(space_shape) == 3:
        return space_shape  # type: ignore[return-value]
    if body == "mlp" and len(space_shape) == 1:
        return (1, 1, space_shape[0])
    raise ValueError(f"PaperDQNTorchRLModule: observation space shape {space_shape} is not (H, W, C); "
                     "set model_config['paper_obs_shape']")


class PaperDQNTorchRLModule(DefaultDQNTorchRLModule):
    """RLlib's DQN torch RLModule with the paper's network (``ReferenceQNet``'s layers).

    Built without a Catalog (nothing of it is used; the default Categorical action distribution
    comes from the Discrete action space).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["catalog_class"] = None  # DefaultDQNTorchRLModule would force DQNCatalog
        TorchRLModule.__init__(self, *args, **kwargs)

    def setup(self) -> None:
        """What ``DefaultDQNRLModule.setup`` does, with the paper's encoder and heads."""
        from ray.rllib.utils.schedules.scheduler import Scheduler

        mc = self.model_config
        self.uses_dueling = bool(mc.get("dueling"))
        self.uses_double_q = bool(mc.get("double_q"))
        self.num_atoms = int(mc.get("num_atoms", 1))
        if self.num_atoms != 1:
            raise ValueError(f"PaperDQNTorchRLModule: num_atoms must be 1 (the paper's heads), got {self.num_atoms}")
        self.epsilon_schedule = Scheduler(fixed_value_or_schedule=mc["epsilon"], framework=self.framework)
        body = mc.get("paper_body", "conv")
        hiddens = int(mc.get("paper_hiddens", 256))
        net = ReferenceQNet(_obs_shape(self.observation_space, mc, body), int(self.action_space.n), body=body,
                            dueling=self.uses_dueling, hiddens=hiddens, obs_scale=float(mc.get("paper_obs_scale", 1.0)))
        self.paper_config = {"obs_shape": net.obs_shape, "n_actions": net.n_actions, "body": net.body,
                             "dueling": net.dueling, "hiddens": net.hiddens, "obs_scale": net.obs_scale}
        self.encoder = PaperEncoder(net)
        self.af = net.advantage_module
        if self.uses_dueling:
            self.vf = net.value_module
        seed = mc.get("paper_explore_seed")
        self.explore_generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        """this module's own generator of exploration draws (``paper_explore_seed``; None: torch's global one)"""

    def _forward_exploration(self, batch: dict[str, Any], t: int) -> dict[str, Any]:
        """Epsilon-greedy with the random action uniform over *all* actions (the original and native).

        ``DefaultDQNTorchRLModule`` draws the random action from ``multinomial(Q != 0)``: it treats an
        action whose Q-value is exactly 0.0 as masked, and raises when all are (e.g. the mlp body, whose
        biases start at zero, on an all-zero observation). Our envs have no action masks.

        The draws come from this module's own generator when ``paper_explore_seed`` is set (``build_config`` sets
        one per module): RLlib's connectors run the modules in the order of a set of agent ids, which follows
        PYTHONHASHSEED, so with torch's one global generator which agent got which draw followed the hash seed.
        """
        q = self.compute_q_values(batch)[QF_PREDS]
        greedy = q.argmax(-1)
        self.epsilon_schedule.update(t)
        epsilon = self.epsilon_schedule.get_current_value()
        n = int(self.action_space.n)
        if self.explore_generator is None:
            random_actions = torch.randint(0, n, greedy.shape, device=greedy.device)
            explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
        else:  # drawn on the CPU (where the generator lives), a few numbers per step
            random_actions = torch.randint(0, n, greedy.shape, generator=self.explore_generator).to(greedy.device)
            explore = (torch.rand(greedy.shape, generator=self.explore_generator) < epsilon).to(greedy.device)
        return {Columns.ACTIONS: torch.where(explore, random_actions, greedy)}


# --------------------------------------------------------------------------------------------------
# weights: ReferenceQNet <-> PaperDQNTorchRLModule


def reference_to_module_name(name: str, target: bool = False) -> str:
    """The module's parameter name for a ReferenceQNet parameter name.

    Args:
        name: e.g. ``model.0.weight`` or ``advantage_module.A._model.0.bias``.
        target: name of the target network's copy instead.

    Returns:
        e.g. ``encoder.model.0.weight`` / ``_target_encoder.model.0.weight`` or ``af.A._model.0.bias``.
    """
    for ref_prefix, mod_prefix in REFERENCE_PREFIXES:
        if name.startswith(ref_prefix):
            out = mod_prefix + name[len(ref_prefix):]
            break
    else:
        out = "encoder." + name
    return "_target_" + out if target else out


def load_reference_weights(module: PaperDQNTorchRLModule, state_dict: Mapping[str, torch.Tensor],
                           target: bool = True) -> None:
    """Copy a ReferenceQNet's weights into the module (and its target nets, when it has them).

    Args:
        module: destination (unwrapped).
        state_dict: ``ReferenceQNet.state_dict()`` with the module's configuration.
        target: also copy into the target networks (skipped when the module has none).
    """
    params = dict(module.named_parameters())
    has_target = hasattr(module, "_target_encoder")
    names = [(n, reference_to_module_name(n)) for n in state_dict]
    if target and has_target:
        names += [(n, reference_to_module_name(n, target=True)) for n in state_dict]
    own = {n for n in params if not n.startswith("_target_") or (target and has_target)}
    missing = own - {m for _, m in names}
    unknown = [m for _, m in names if m not in params]
    if missing or unknown:
        raise KeyError(f"reference weights do not match the module: missing {sorted(missing)}, "
                       f"unknown {sorted(unknown)}")
    with torch.no_grad():
        for ref_name, mod_name in names:
            dst, src = params[mod_name], state_dict[ref_name]
            if tuple(dst.shape) != tuple(src.shape):
                raise ValueError(f"{mod_name}: expected shape {tuple(dst.shape)}, got {tuple(src.shape)}")
            dst.copy_(src)


def to_reference(module: PaperDQNTorchRLModule, target: bool = False) -> ReferenceQNet:
    """A ReferenceQNet holding a copy of the module's online (or target) weights.

    Args:
        module: source (unwrapped).
        target: copy the target networks instead of the online ones.

    Returns:
        a new ReferenceQNet on the module's device.
    """
    c = module.paper_config
    net = ReferenceQNet(c["obs_shape"], c["n_actions"], body=c["body"], dueling=c["dueling"], hiddens=c["hiddens"],
                        obs_scale=c.get("obs_scale", 1.0))
    params = dict(module.named_parameters())
    net.load_state_dict({n: params[reference_to_module_name(n, target)].detach().clone()
                         for n in net.state_dict()})
    return net.to(next(module.parameters()).device)
