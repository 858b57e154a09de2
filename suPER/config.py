"""Typed experiment configuration: one dataclass per concern, values from YAML, dotted overrides.

The dataclasses only type and validate; the paper's values live in ``experiments/envs/<env>.yaml``
(one file per environment, holding that environment's settings and its DQN hyperparameters).
A run's configuration is resolved (``suPER.resolve.resolve``) as::

    ExperimentConfig defaults  <-  experiments/envs/<env>.yaml  <-  CLI named flags  <-  --set a.b=value

from the pieces this module provides (the sections, ``named_settings``, ``route_flags``, ``apply_overrides``,
``ExperimentConfig.validate``), and the resolved result is written to the run folder as ``config.json``.

This module imports nothing heavy (no torch, ray or wandb) so the CLI can validate input instantly, and nothing
of ``suPER`` but the algorithm records (``suPER.algorithms``): the selection rules' own parameters
(``relay.params``) are checked by each rule's record when a run's config is resolved (``suPER.resolve``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args, get_origin, get_type_hints

import yaml

from suPER.algorithms import ALGORITHMS, AlgorithmSpec, algo_names, register, relay_algo_names

ROOT = Path(__file__).resolve().parent.parent
"""Repository root (the folder holding ``experiments/``)."""

EXPERIMENTS_DIR = ROOT / "experiments"
PAPER_ENVS = ("pursuit", "battle", "adversarial_pursuit")
"""The paper's three environments in its order (figures and listings show them first)."""
ENV_NAMES = tuple(sorted((p.stem for p in (EXPERIMENTS_DIR / "envs").glob("*.yaml")),
                         key=lambda e: (PAPER_ENVS.index(e) if e in PAPER_ENVS else len(PAPER_ENVS), e)))
"""Names of the envs with their own adapter = the YAML files ``experiments/envs/<name>.yaml`` (the paper's first,
then A-Z). The env registry (``suPER.envs.ENVS``, which this module may not import) refuses an adapter without its
YAML file, and ``tests/envs/test_registry.py`` that a YAML file without an adapter. Any PettingZoo parallel env is
a valid name too, through the generic adapter (``PETTINGZOO``; ``is_env_name``)."""

PETTINGZOO = "pettingzoo"
"""registry key of the generic PettingZoo adapter (``suPER.envs.pettingzoo``): ``--env pettingzoo:<module>:<function>``
trains the parallel env ``<module>.<function>(**env.kwargs)``; its settings are ``experiments/envs/pettingzoo/
defaults.yaml``, and its runs are named ``pz-<module>[-<function>]`` (``pettingzoo_env_name``)"""
PETTINGZOO_PREFIX = "pz-"
"""the recorded name of a PettingZoo env: ``pz-<module>``, plus ``-<function>`` when it is not ``parallel_env``"""
PETTINGZOO_SPELLING = f"{PETTINGZOO}:<module>:<function>"
"""how ``--env`` and grid files name a PettingZoo env (``pettingzoo:mpe2.simple_spread_v3:parallel_env``)"""
_DOTTED = r"[^\W\d]\w*(?:\.[^\W\d]\w*)*"
"""a module's dotted name (Python identifiers): no '-', '/' or '..', so ``pz-<module>-<function>`` is a file name
and reads back unambiguously"""


def pettingzoo_env_name(typed: str) -> str:
    """The recorded env name of ``pettingzoo:<module>[:<function>]``: ``pz-<module>[-<function>]``.

    Args:
        typed: ``pettingzoo:<module>:<function>`` (the function defaults to ``parallel_env``, which the name
            leaves out), or a name already in the recorded form (returned unchanged).

    Raises:
        ConfigError: not a module's dotted name and a function name.
    """
    if typed.startswith(PETTINGZOO_PREFIX):
        pettingzoo_entry_point(typed)  # checks it
        return typed
    _, _, rest = typed.partition(":")
    module, _, function = rest.partition(":")
    function = function or "parallel_env"
    if not re.fullmatch(_DOTTED, module) or not function.isidentifier():
        raise ConfigError(f"--env: expected {PETTINGZOO_SPELLING} (a module's dotted name and a function in it, "
                          f"e.g. {PETTINGZOO}:mpe2.simple_spread_v3:parallel_env), got {typed!r}")
    return PETTINGZOO_PREFIX + module + ("" if function == "parallel_env" else f"-{function}")


def pettingzoo_entry_point(name: str) -> tuple[str, str]:
    """``(module, function)`` of a PettingZoo env name (``pz-mpe2.simple_spread_v3`` ->
    ``("mpe2.simple_spread_v3", "parallel_env")``); the inverse of ``pettingzoo_env_name``.

    Raises:
        ConfigError: ``name`` is not of that form.
    """
    module, _, function = name.removeprefix(PETTINGZOO_PREFIX).partition("-")
    function = function or "parallel_env"
    if not name.startswith(PETTINGZOO_PREFIX) or not re.fullmatch(_DOTTED, module) or not function.isidentifier():
        raise ConfigError(f"env.name: expected {PETTINGZOO_PREFIX}<module>[-<function>] (a PettingZoo env's recorded "
                          f"name), got {name!r}")
    return module, function


def env_key(name: str) -> str:
    """The registry key (and settings file) an env name belongs to: ``pettingzoo`` for a PettingZoo env named
    either way (``pettingzoo:<module>:<function>`` or ``pz-...``), else the name itself."""
    return PETTINGZOO if name.startswith((PETTINGZOO_PREFIX, PETTINGZOO + ":")) else name


def canonical_env_name(name: str) -> str:
    """The name a run records: ``pettingzoo:<module>:<function>`` becomes ``pz-<module>[-<function>]`` (checked);
    every other name is returned unchanged."""
    return pettingzoo_env_name(name) if env_key(name) == PETTINGZOO and name != PETTINGZOO else name


def is_env_name(name: Any) -> bool:
    """A name a run can train on: a named env (``ENV_NAMES``) or a PettingZoo env in either spelling (its module
    is only imported when the env is built)."""
    if not isinstance(name, str):
        return False
    if name in ENV_NAMES:
        return True
    try:
        return env_key(name) == PETTINGZOO and bool(pettingzoo_env_name(name))
    except ConfigError:
        return False


def env_names_help() -> str:
    """``pursuit | battle | adversarial_pursuit | pettingzoo:<module>:<function>`` (``--env``'s choices)."""
    return " | ".join((*ENV_NAMES, PETTINGZOO_SPELLING))


class ConfigError(ValueError):
    """Bad user input in a config value: the message names the key and what was expected."""


POS, NONNEG, UNIT, UNIT_OPEN, INT1, INT0 = "> 0", ">= 0", "[0, 1]", "(0, 1]", "int >= 1", "int >= 0"
"""The range vocabulary of ``RANGES`` and of each section's ``ranges`` (checked by ``_in_range``)."""


def linear_schedule(t: int, start: float, end: float, duration: int) -> float:
    """Linear decay shared by every epsilon-greedy trainer: v(t) = start + min(1, t / duration) * (end - start)."""
    return start + min(1.0, t / max(1, duration)) * (end - start)


@dataclass
class EnvConfig:
    """Which environment to build and with which settings (REFERENCE section 4)."""

    name: str = "pursuit"
    """registry key (pursuit | battle | adversarial_pursuit), or a PettingZoo env's recorded name
    ``pz-<module>[-<function>]`` (``--env pettingzoo:<module>:<function>``)"""
    horizon: int = 500
    """steps after which an episode is truncated (the original forced 500 for every env)"""
    truncation_is_terminal: bool = False
    """treat horizon truncation as a terminal transition (no bootstrap), as the original did"""
    seed_offset: int = 100
    """training env seed = run seed + seed_offset (the original used +100)"""
    eval_seed_offset: int = 10_000
    """evaluation env seed = run seed + seed_offset + eval_seed_offset (the original reused the train seed)"""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """constructor arguments passed to the PettingZoo/MAgent2 env (map_size, n_evaders, ...)"""
    opponent: str = "random"
    """opponent team of battle/adversarial_pursuit: pretrained (experiments/opponents/<env>.safetensors, the
    env YAML default), random, learning (self-play: both teams learn) or a PATH to a team file"""
    opponent_epsilon: float = 0.0
    """epsilon-greedy exploration of a network opponent in training games (0 = greedy; the original's opponents
    explored, see ``opponent_epsilon_timesteps``)"""
    opponent_epsilon_final: float = 0.0
    """where a decaying opponent epsilon ends (only with ``opponent_epsilon_timesteps`` > 0)"""
    opponent_epsilon_timesteps: int = 0
    """0 = a constant ``opponent_epsilon``; N > 0 = each opponent agent's epsilon decays linearly from
    ``opponent_epsilon`` to ``opponent_epsilon_final`` over its own first N actions in training games, as the
    original's frozen opponents kept the experiment's schedule (0.1 -> 0.001 over 100k of their own actions,
    REFERENCE 3.4 and 8). Evaluation games use ``eval_opponent_epsilon``, constant"""
    eval_opponent_epsilon: float = 0.0
    """the same in evaluation games (0 = greedy, as the original evaluated). Greedy teams on battle's fixed map
    replay one game per evaluation; a small value (0.05) makes its episodes differ (docs/results.md, Figure 1)"""
    opponent_allow_pickle: bool = False
    """accept an opponent file in the original's pickle format (unpickling runs code from the file)"""
    pad_like_original: bool = True
    """adversarial_pursuit: pad prey obs to 10x10 and actions to 13 as the original's SuperSuit wrappers"""
    swap_teams: bool = False
    """battle / adversarial_pursuit: the opponent team (red / predators) learns against a fixed blue / prey
    team given by ``opponent`` (population training's best responses for that side)"""


@dataclass
class EpsilonGreedy:
    """Linearly decaying epsilon-greedy exploration, the fields shared by the DQN, MADDPG and QMIX sections.

    ``epsilon(t) = linear_schedule(t, epsilon_initial, epsilon_final, epsilon_timesteps)``. Why a base class
    and not a nested section: the keys stay ``dqn.epsilon_initial`` etc., as the YAML files, grid files and
    the paper's ``--exploration_initial_epsilon`` spell them.
    """

    ranges: ClassVar[dict[str, str]] = {"epsilon_initial": UNIT, "epsilon_final": UNIT, "epsilon_timesteps": INT1}
    """field -> allowed range (``RANGES`` vocabulary); every numeric field of a section has one"""

    epsilon_initial: float = 0.1
    """epsilon-greedy start value"""
    epsilon_final: float = 0.001
    """epsilon-greedy final value"""
    epsilon_timesteps: int = 100_000
    """env steps over which epsilon decays linearly"""

    def epsilon(self, env_steps: int) -> float:
        """Exploration at ``env_steps`` (``linear_schedule``)."""
        return linear_schedule(env_steps, self.epsilon_initial, self.epsilon_final, self.epsilon_timesteps)


@dataclass
class DQNConfig(EpsilonGreedy):
    """Independent (double/dueling) DQN with per-agent prioritized replay (REFERENCE sections 3, 5, 6)."""

    ranges: ClassVar[dict[str, str]] = {
        **EpsilonGreedy.ranges, "hiddens": INT1, "lr": POS, "adam_eps": POS, "gamma": UNIT_OPEN, "grad_clip": POS,
        "buffer_size": INT1, "batch_size": INT1, "rollout_fragment_length": INT1, "learning_starts": INT0,
        "target_update_freq": INT1, "per_alpha": NONNEG, "per_beta": NONNEG, "per_eps": POS}

    double_q: bool = True
    """use the online net to pick the bootstrap action (double DQN)"""
    dueling: bool = True
    """Q = V + (A - mean A) heads"""
    model: Literal["conv", "mlp", "auto"] = "conv"
    """conv = the paper's per-env conv body (observations (H, W, C)); mlp = 2x64 tanh on flattened obs (any shape);
    auto = conv for (H, W, C) observations, mlp for any other shape (the PettingZoo envs' default)"""
    hiddens: int = 256
    """width of the body output and of the hidden layer in each head"""
    lr: float = 1.6e-4
    """Adam learning rate"""
    adam_eps: float = 1e-8
    """Adam epsilon"""
    gamma: float = 0.99
    """discount factor"""
    grad_clip: float = 40.0
    """gradient-norm clip per agent network"""
    buffer_size: int = 120_000
    """replay capacity per agent (per policy), in transitions"""
    batch_size: int = 32
    """transitions sampled per agent per update"""
    rollout_fragment_length: int = 4
    """env steps between updates; every learner takes one gradient step per fragment"""
    learning_starts: int = 1000
    """env steps sampled before the first update (updates start when env_steps > learning_starts)"""
    target_update_freq: int = 1000
    """hard copy online -> target every this many env steps"""
    per_alpha: float = 0.6
    """prioritized replay exponent"""
    per_beta: float = 0.4
    """importance-sampling exponent (constant, as the original)"""
    per_eps: float = 1e-6
    """priority = |td| + per_eps"""
    parameter_sharing: bool = False
    """one network (and one buffer) for the whole learning team"""
    shared_batch: Literal["per_learner", "original"] = "per_learner"
    """rows per update of a parameter-sharing policy: per_learner = ``batch_size x N`` (an update sees as many
    samples as N independent learners); original = as the original formed it, ``ceil(batch_size x (N + M) /
    (1 + M))`` with M frozen opponents, whose buffers took part in its draw (REFERENCE 3.2): 256 / 55 / 77 on
    pursuit / battle / adversarial pursuit. Independent learners get ``batch_size`` either way"""
    def rows_per_update(self, n_learners: int, n_opponents: int) -> int:
        """Rows sampled per policy per update (``shared_batch``).

        Independent learners: ``batch_size``. Parameter sharing, ``per_learner``: ``batch_size x N``;
        ``original``: the original drew one row from every policy buffer in turn until it had
        ``batch_size x (N + M)`` rows, the M frozen opponents' buffers among them, so its one shared policy got
        ``ceil(batch_size x (N + M) / (1 + M))`` (REFERENCE 3.2).
        """
        if not self.parameter_sharing:
            return self.batch_size
        if self.shared_batch == "original":
            return -(-self.batch_size * (n_learners + n_opponents) // (1 + n_opponents))
        return self.batch_size * n_learners

    init_from: str = ""
    """team file (.safetensors) whose networks initialise the online and target nets, one per learner in
    the file's order (population training's warm start); empty = fresh random networks"""


@dataclass
class RelayConfig:
    """SUPER experience relay settings (REFERENCE section 1)."""

    enabled: bool = False
    """relay surprising transitions to teammates (the paper's --suPER)"""
    mode: str = "quantile"
    """selection rule, one of ``suPER.core.selection.SELECTION_RULES`` (quantile, gaussian, ...);
    gaussian_variance reproduces the original's variance-as-scale threshold"""
    bandwidth: float = 0.1
    """fraction of each sender's fresh transitions to relay (0 = none, 1 = all)"""
    window: int = 1500
    """length of each sender's sliding |TD| window, in transitions"""
    team: str = ""
    """substring (or comma-separated list of ids) selecting who relays; empty = the whole learning team"""
    insertion_priority: Literal["max", "sender", "legacy"] = "max"
    """priority of relayed rows in the receiver's buffer"""
    params: dict[str, Any] = field(default_factory=dict)
    """the selection rule's own parameters, only those of ``mode`` (topk: ``--set relay.params.k=3``); each is
    checked against the rule's record and, when not set, recorded at its default"""


@dataclass
class SEACConfig:
    """Shared Experience Actor-Critic (Christianos et al., NeurIPS 2020): per-agent A2C whose losses also use
    the other learners' on-policy experience, importance-weighted (defaults from the SEAC paper)."""

    ranges: ClassVar[dict[str, str]] = {
        "lr": POS, "adam_eps": POS, "gamma": UNIT_OPEN, "n_steps": INT1, "num_envs": INT1, "entropy_coef": NONNEG,
        "value_coef": NONNEG, "seac_lambda": NONNEG, "grad_clip": POS}

    lr: float = 3e-4
    """Adam learning rate"""
    adam_eps: float = 1e-3
    """Adam epsilon"""
    gamma: float = 0.99
    """discount factor"""
    n_steps: int = 5
    """rollout length per update (n-step returns)"""
    num_envs: int = 4
    """parallel training envs (each step of all envs counts num_envs env steps)"""
    entropy_coef: float = 0.01
    """entropy bonus coefficient"""
    value_coef: float = 0.5
    """value-loss coefficient"""
    seac_lambda: float = 1.0
    """weight of the other agents' (importance-weighted) experience in each agent's loss"""
    grad_clip: float = 0.5
    """gradient-norm clip per agent"""
    model: Literal["mlp", "conv"] = "mlp"
    """mlp = the SEAC paper's 2x64 MLP on flattened obs; conv = the env's conv body"""
    share_experience: bool = True
    """false = independent A2C (IA2C), the ablation without the shared-experience term"""
    eval_mode: Literal["sample", "greedy"] = "sample"
    """evaluation actions: sample = drawn from each policy (the SEAC code's evaluation); greedy = its most likely action"""


@dataclass
class MADDPGConfig(EpsilonGreedy):
    """MADDPG with centralized critics and Gumbel-softmax discrete actors (REFERENCE 7.2).

    Exploration (``EpsilonGreedy``): during training each learner acts uniformly at random with probability
    epsilon instead of its Gumbel sample (the original's EpsilonGreedy exploration; 0 = sampling only).
    """

    ranges: ClassVar[dict[str, str]] = {
        **EpsilonGreedy.ranges, "actor_lr": POS, "critic_lr": POS, "gamma": UNIT_OPEN, "tau": UNIT_OPEN,
        "hiddens": "list int >= 1", "batch_size": INT1, "buffer_size": INT1, "rollout_fragment_length": INT1,
        "learning_starts": INT0, "actor_feature_reg": NONNEG, "grad_clip": POS, "gumbel_temperature": POS}

    actor_lr: float = 2.5e-4
    """actor Adam learning rate"""
    critic_lr: float = 2.5e-4
    """critic Adam learning rate"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.015
    """soft target update: target <- tau * online + (1 - tau) * target"""
    hiddens: list[int] = field(default_factory=lambda: [64, 64])
    """actor and critic hidden layers (ReLU)"""
    batch_size: int = 32
    """transitions per update"""
    buffer_size: int = 120_000
    """replay capacity (joint transitions)"""
    rollout_fragment_length: int = 32
    """env steps between update rounds"""
    learning_starts: int = 1000
    """env steps before the first update"""
    actor_feature_reg: float = 0.001
    """L2 penalty on the actor's logits"""
    grad_clip: float = 0.5
    """gradient-norm clip"""
    gumbel_temperature: float = 1.0
    """Gumbel-softmax temperature"""
    shared_reward: bool = True
    """train every critic on the team reward (sum over learners), as the original did for pursuit"""
    eval_mode: Literal["greedy", "sample"] = "greedy"
    """evaluation actions: greedy = argmax of each actor's logits; sample = a draw from softmax(logits / temperature)"""


@dataclass
class QMIXConfig(EpsilonGreedy):
    """QMIX: GRU agent nets and a monotonic hypernetwork mixer over the global state (REFERENCE 7.1)."""

    ranges: ClassVar[dict[str, str]] = {
        **EpsilonGreedy.ranges, "lr": POS, "optim_alpha": UNIT, "optim_eps": POS, "gamma": UNIT_OPEN,
        "rnn_hidden": INT1, "mixing_embed_dim": INT1, "grad_clip": POS, "buffer_episodes": INT1,
        "batch_episodes": INT1, "updates_per_episode": INT1, "learning_starts": INT0, "target_update_freq": INT1}

    lr: float = 1.6e-4
    """RMSprop learning rate"""
    optim_alpha: float = 0.99
    """RMSprop smoothing constant"""
    optim_eps: float = 1e-5
    """RMSprop epsilon"""
    gamma: float = 0.99
    """discount factor"""
    rnn_hidden: int = 64
    """GRU cell size of the agent network"""
    mixing_embed_dim: int = 32
    """mixer hidden width"""
    double_q: bool = True
    """double-Q targets"""
    grad_clip: float = 10.0
    """gradient-norm clip"""
    buffer_episodes: int = 1000
    """replay capacity, in episodes"""
    batch_episodes: int = 1
    """episodes per update (the original sampled about one stored episode per update)"""
    updates_per_episode: int = 1
    """gradient steps after every finished training episode"""
    learning_starts: int = 1000
    """env steps before the first update"""
    target_update_freq: int = 1000
    """hard target copy every this many env steps"""


@dataclass
class RunConfig:
    """Budget, evaluation, seeds, output and logging: everything that is not the algorithm or the env."""

    algo: str = "ddqn"
    """algorithm registry key (``suPER.config.ALGORITHMS``: dqn, ddqn, seac, maddpg, qmix)"""
    num_timesteps: int = 800_000
    """env steps to train for"""
    seed: int = 1
    """run seed (python, numpy, torch); env seeds derive from it"""
    eval_interval: int = 0
    """env steps between evaluations; 0 = num_timesteps / eval_points"""
    eval_points: int = 200
    """number of evaluations when eval_interval is 0 (the original evaluated 200 times)"""
    eval_episodes: int = 20
    """greedy episodes per evaluation"""
    eval_batch: int = 20
    """evaluation games played together in lockstep, one batched policy call per step (capped at
    eval_episodes); 0 = sequential, one episode at a time on one env (same episodes, for comparison)"""
    eval_parallel: bool = False
    """evaluate off the training process (the original's --eval_in_parallel): each evaluation plays its episodes
    in a forked child, a snapshot of the trainer at the evaluation step, while training goes on; the same rows as
    in-process evaluation, one more core busy. CPU networks on Linux only (elsewhere evaluation stays in-process);
    packed runs evaluate in-process (``suPER.forked``, docs/design.md)"""
    out: str = "runs"
    """parent folder of run folders"""
    name: str = ""
    """run folder name; empty = <env>__<algo>__s<seed>[__<tag>]"""
    tag: str = ""
    """free-form label appended to the run name and recorded in the manifest"""
    protocol: Literal["ours", "paper"] = "ours"
    """which protocol the run follows: ours = this suite's corrected defaults; paper = every documented
    deviation restored to the original's behaviour (``PAPER_PROTOCOL``, ``--legacy`` / ``--protocol paper``).
    A paper-protocol run's folder name carries ``__paper``, so both protocols share one results tree"""
    final_games: int = 0
    """games the final policy plays against the env's opponent team when training ends, written to
    ``final_games.json`` (win / loss / tie rates with Wilson intervals, mean return); 0 = none. Battle's
    greedy evaluation replays nearly one game, so battle runs end with 100 varied ones (env YAML)"""
    final_games_epsilon: float = 0.05
    """the opponent's epsilon in the final games (> 0 makes the games differ); they are seeded from
    ``FINAL_GAMES_SEED``, the same games for every run"""
    device: Literal["cpu", "cuda", "auto"] = "auto"
    """torch device for networks"""
    threads: int = 1
    """torch intra-op threads (0 = torch's default). 1 is fastest for these small batched nets and never
    oversubscribes when seeds run side by side; on a busy machine 2 threads can be 10x slower"""
    wandb: bool = False
    """log to Weights & Biases (offline unless wandb_mode=online and WANDB_API_KEY is set)"""
    wandb_project: str = "super-marl"
    """W&B project"""
    wandb_group: str = ""
    """W&B group (the paper's --experiment_group)"""
    wandb_mode: Literal["offline", "online"] = "offline"
    """offline writes under the run folder; online needs WANDB_API_KEY"""
    progress: bool = True
    """show a progress bar"""
    checkpoint_replay: bool = True
    """include the replay buffers in the checkpoint written at every evaluation, so a resumed run continues
    with the same buffers (at full capacity ~1.8 GB for battle with run.replay_layout=plain, far less compact). false
    keeps checkpoints small; a resumed run then refills its buffers for dqn.learning_starts steps before learning"""
    replay_layout: Literal["compact", "plain"] = "compact"
    """storage of the DQN trainers' replay observations. compact (``suPER.replay.CompactPER``): each frame once,
    next_obs linked to the next row of the same agent when equal, MAgent cells as lossless palette codes
    (battle ~0.26 GB instead of 1.8 GB at full buffers); plain (``MultiAgentPER``): separate obs and next_obs
    arrays. Sampled batches are identical, and either layout resumes the other's checkpoints"""
    replay_device: Literal["auto", "numpy", "device"] = "auto"
    """where a packed run (``--pack``) keeps its replay, relay windows and fresh observations. device:
    ``suPER.replay.TorchPER`` tensors on run.device (plain layout), relay selection on the device, and pursuit's
    vectorized env's observations never copied to the host; numpy: ``run.replay_layout``'s numpy buffer on the
    host; auto: device when run.device resolves to a GPU, numpy on the CPU. Unpacked runs always use numpy.
    Given the same generator states both sample the same rows, and either resumes the other's checkpoints"""


# --------------------------------------------------------------------------------------------------
# the algorithms: one registered record each (suPER.algorithms); every algorithm table derives from these

register(AlgorithmSpec(
    "dqn", "dqn", DQNConfig, help="plain DQN", can_relay=True, paper_suffix="_plaindqn",
    trainers={"native": "suPER.native.dqn:train", "rllib": "suPER.core.rllib_runner:train_rllib"},
    presets={"dqn.double_q": False, "dqn.dueling": False}))
register(AlgorithmSpec(
    "ddqn", "dqn", DQNConfig, help="dueling double DQN", can_relay=True,
    trainers={"native": "suPER.native.dqn:train", "rllib": "suPER.core.rllib_runner:train_rllib"},
    presets={"dqn.double_q": True, "dqn.dueling": True}))
register(AlgorithmSpec(
    "seac", "seac", SEACConfig, help="shared experience actor-critic", trainers={"native": "seac.trainer:train"},
    flag_routes={"dqn.lr": ("seac.lr",), "dqn.model": ("seac.model",)}))
register(AlgorithmSpec(
    "maddpg", "maddpg", MADDPGConfig, help="centralized-critic DDPG", paper_suffix="_maddpg",
    trainers={"native": "suPER.baselines.maddpg:train"},
    flag_routes={"dqn.lr": ("maddpg.actor_lr", "maddpg.critic_lr"), "dqn.buffer_size": ("maddpg.buffer_size",)},
    flag_noops={"dqn.model": "mlp"}))  # its nets are MLPs on flat obs already
register(AlgorithmSpec(
    "qmix", "qmix", QMIXConfig, help="monotonic value mixing", paper_suffix="_qmix",
    trainers={"native": "suPER.baselines.qmix:train"},
    flag_routes={"dqn.lr": ("qmix.lr",)}, flag_noops={"dqn.model": "mlp"}))  # a GRU on flat obs already


def algorithm(name: str, label: str = "--algo") -> AlgorithmSpec:
    """The registered record of ``name``.

    Raises:
        ConfigError: ``"<label>: expected one of dqn, ddqn, ..., got <name>"``.
    """
    if name not in ALGORITHMS:
        raise ConfigError(f"{label}: expected one of {', '.join(algo_names())}, got {name!r}")
    return ALGORITHMS[name]


def algo_sections() -> dict[str, type]:
    """Every registered algorithm section -> its dataclass, in registration order (``dqn``, ``relay``, ``seac``, ...)."""
    out: dict[str, type] = {}
    for spec in ALGORITHMS.values():
        out.setdefault(spec.section, spec.config)
        if spec.can_relay:
            out.setdefault("relay", RelayConfig)
    return out


class _Experiment:
    """Everything a run needs: ``env``, one section per registered algorithm section (``algo_sections``:
    ``dqn``, ``relay``, ``seac``, ``maddpg``, ``qmix``) and ``run``; the trainer receives the parts it uses.

    ``ExperimentConfig`` is this class as a dataclass whose fields come from the algorithm registry, so a
    new algorithm's section appears here (and in ``--set``, YAML and ``config.json``) by its registration.
    The annotations below are for type checkers and readers; the fields are made by ``make_dataclass``.
    """

    env: EnvConfig
    dqn: DQNConfig
    relay: RelayConfig
    run: RunConfig
    if TYPE_CHECKING:  # so that type checkers treat it as the dataclass it becomes
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def validate(self, labels: dict[str, str] | None = None) -> ExperimentConfig:
        """Check every field's range and the cross-field arithmetic; raise ConfigError naming the offending key.

        Why here: a value that passes this point must not crash the run later, after its folder was
        written (a negative seed, an infinite learning rate, a gradient clip of 0). Every numeric field
        of every section has an entry in ``RANGES`` (a test checks it), non-finite floats are refused.
        The selection rule (``relay.mode``) and its parameters (``relay.params``) are checked by the rule's
        record, which this module does not import: ``suPER.resolve`` (``resolve``, ``from_dict``) does both.

        Args:
            labels: dotted key -> how the user spelled it (``--lr``, ``--suPER_bandwidth``,
                ``--set dqn.lr``); messages use it, else the dotted key.
        """
        labels = labels or {}

        def check(ok: bool, key: str, expected: str, got: Any) -> None:
            _check(ok, labels.get(key, key), expected, got)

        check(is_env_name(self.env.name), "env.name", f"one of {', '.join(ENV_NAMES)} or {PETTINGZOO_SPELLING}",
              self.env.name)
        check(bool(self.env.opponent), "env.opponent", "pretrained, random, learning or a PATH", self.env.opponent)
        for section in (f.name for f in fields(self)):
            ranges = {f.name: RANGES[f"{section}.{f.name}"] for f in fields(getattr(self, section))
                      if f"{section}.{f.name}" in RANGES}
            check_ranges(getattr(self, section), ranges, _section_label(section, labels))
        r = self.relay
        check_relay_setting("relay.insertion_priority", r.insertion_priority, labels.get("relay.insertion_priority"))
        # relay.mode and relay.params: only the rule's record knows them (suPER.resolve.check_rule)
        u = self.run
        # numpy seeds must lie in [0, 2**32); leave room for the per-env and per-episode strides added later
        train_seed = u.seed + self.env.seed_offset
        check(train_seed < SEED_LIMIT, "run.seed", f"an integer with run.seed + env.seed_offset < {SEED_LIMIT}", u.seed)
        check(train_seed >= 0, "env.seed_offset", "an offset with run.seed + env.seed_offset >= 0",
              self.env.seed_offset)
        check(train_seed + self.env.eval_seed_offset < SEED_LIMIT, "env.eval_seed_offset",
              f"an offset with run.seed + env.seed_offset + env.eval_seed_offset < {SEED_LIMIT}",
              self.env.eval_seed_offset)
        check(u.device in ("cpu", "cuda", "auto"), "run.device", "cpu, cuda or auto", u.device)
        check(u.algo in ALGORITHMS, "run.algo", f"one of {', '.join(algo_names())}", u.algo)
        check(u.algo not in ALGORITHMS or ALGORITHMS[u.algo].can_relay or not r.enabled, "relay.enabled",
              f"only with --algo {' or '.join(relay_algo_names())}", f"--algo {u.algo}")
        for key in ("run.name", "run.tag"):
            value = getattr(u, key.split(".")[1])
            check(is_folder_name(value, allow_empty=True), key, FOLDER_NAME, value)
        if is_folder_name(u.tag, allow_empty=True) and is_folder_name(u.name, allow_empty=True):
            check(is_folder_name(self.run_name), "run.name" if u.name else "run.tag",
                  f"{FOLDER_NAME}: the run folder {self.run_name[:40]}... would be longer", u.name or u.tag)
        return self

    @property
    def eval_interval(self) -> int:
        """Env steps between evaluations: ``run.eval_interval``, or by default the paper's
        ``num_timesteps / eval_points`` but never less than one episode (``env.horizon``), so that a short
        run does not spend most of its time evaluating (docs/decisions.md)."""
        if self.run.eval_interval > 0:
            return self.run.eval_interval
        return max(1, self.env.horizon, self.run.num_timesteps // max(1, self.run.eval_points))

    def eval_cost_note(self) -> str | None:
        """A one-line note when evaluation can cost more env steps than training, else None."""
        evals = self.run.num_timesteps // self.eval_interval + 1  # + the step-0 evaluation
        cost = evals * self.run.eval_episodes * self.env.horizon
        if cost <= self.run.num_timesteps:
            return None
        return (f"note: evaluating every {self.eval_interval} env steps ({evals} evaluations x "
                f"{self.run.eval_episodes} episodes of up to {self.env.horizon} steps = up to {cost} evaluation env "
                f"steps for {self.run.num_timesteps} training steps); --eval-interval / --eval-episodes change it")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-serialisable) of the sections this run's algorithm uses.

        The sections of other algorithms are left out, so config.json shows only what matters
        (``dqn`` and ``relay`` for the DQN family, ``seac`` / ``maddpg`` / ``qmix`` for a baseline).
        """
        every = set(algo_sections())
        unused = every - set(ALGORITHMS[self.run.algo].sections if self.run.algo in ALGORITHMS else every)
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in unused}

    @property
    def run_name(self) -> str:
        """The run folder name: explicit ``run.name`` or ``<env>__<algo>__s<seed>[__paper][__<tag>]``."""
        if self.run.name:
            return self.run.name
        algo = self.run.algo + (f"_super_{self.relay.mode}" if self.relay.enabled else "")
        if self.dqn.parameter_sharing:
            algo += "_ps"
        name = f"{self.env.name}__{algo}__s{self.run.seed}" + ("__paper" if self.run.protocol == "paper" else "")
        return f"{name}__{self.run.tag}" if self.run.tag else name


if TYPE_CHECKING:
    ExperimentConfig = _Experiment
else:
    ExperimentConfig = dataclasses.make_dataclass(
        "ExperimentConfig",
        [(name, cls, field(default_factory=cls))
         for name, cls in {"env": EnvConfig, **algo_sections(), "run": RunConfig}.items()],
        bases=(_Experiment,))
    ExperimentConfig.__module__ = __name__
    ExperimentConfig.__doc__ = _Experiment.__doc__


def route_flags(algo: str, named: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Point the named flags at the algorithm's own settings (``--lr`` -> ``seac.lr`` for SEAC, ...).

    The one place that decides what a named flag means for an algorithm (its ``AlgorithmSpec``):

    * a key of one of its own sections (``spec.sections``), or of ``env`` / ``run``: kept;
    * a key in ``spec.flag_routes``: set on each listed setting instead;
    * ``relay.*`` when it cannot relay: dropped, except ``relay.enabled`` (``validate`` refuses ``--super``
      by name);
    * a switch left off (False / None) or a value in ``spec.flag_noops`` (``--model mlp`` for MADDPG): dropped;
    * anything else (a key of another algorithm's section): an error naming the flag. So an algorithm
      registered without a route for ``--lr`` refuses ``--lr`` rather than silently training without it.

    Args:
        algo: registered algorithm key.
        named: dotted key -> value of the named flags (``suPER.flags.FLAG_KEYS`` targets).
        labels: dotted key -> the flag as typed, for the error; default ``--<flag name>``.

    Raises:
        ConfigError: unknown algorithm, or a flag the algorithm does not use, naming the flag.
    """
    spec = algorithm(algo)
    own, sections = set(spec.sections), set(algo_sections())
    out: dict[str, Any] = {}
    for key, value in named.items():
        section = key.split(".")[0]
        if section in own or section not in sections:
            out[key] = value
        elif key in spec.flag_routes:
            out.update(dict.fromkeys(spec.flag_routes[key], value))
        elif section == "relay":
            if key == "relay.enabled":
                out[key] = value
        elif value is False or value is None or (key in spec.flag_noops and spec.flag_noops[key] == value):
            continue
        else:
            flag = (labels or {}).get(key) or key
            raise ConfigError(f"{flag}: not used by --algo {algo} (its settings: --set {spec.section}.KEY=VALUE)")
    return out


PROTOCOLS = ("ours", "paper")
"""``run.protocol`` values: this suite's defaults, or the original's behaviour (``paper_protocol_settings``)."""

FINAL_GAMES_SEED = 1000
"""Match seed of every run's final games (``run.final_games``): the same games for every run, so methods are
compared on one set of games (as ``results/fig1_battle_final`` was measured)."""


def paper_protocol_settings(mode: str | None) -> dict[str, Any]:
    """The paper protocol (``--protocol paper``, ``--legacy``): every documented deviation of this suite
    restored to the original's behaviour at once (REFERENCE 14; docs/decisions.md lists each one).

    Args:
        mode: the ``--super-mode`` given on the command line (None when not given).

    Returns:
        Dotted overrides, ``run.protocol: paper`` among them.
    """
    settings: dict[str, Any] = {
        "run.protocol": "paper",
        "env.truncation_is_terminal": True,    # 14.6: horizon truncation stored as done=True
        "relay.insertion_priority": "legacy",  # 14.7/8: RLlib 2.1 first-row priorities
        "env.eval_seed_offset": 0,             # 14.17: evaluation env seeded like the training env
        "dqn.shared_batch": "original",        # 14.10, 3.2: parameter sharing's 256 / 55 / 77 rows per update
        # REFERENCE 8 and 3.4: frozen opponents kept the experiment's epsilon-greedy schedule (0.1 -> 0.001 over
        # 100k, every env's dqn.epsilon_*) in training games, counted by each opponent's own actions
        "env.opponent_epsilon": 0.1, "env.opponent_epsilon_final": 0.001, "env.opponent_epsilon_timesteps": 100_000,
    }
    if mode in (None, "gaussian", "gaussian_variance"):
        settings["relay.mode"] = "gaussian_variance"  # 14.2 (and the CLI default mode was gaussian)
    return settings


legacy_settings = paper_protocol_settings
"""``--legacy`` is the paper protocol as a per-run switch."""


def _literal_values(cls: type, name: str) -> tuple[str, ...]:
    hint = field_hints(cls)[name]
    return tuple(get_args(hint)) if get_origin(hint) is Literal else ()


def check_relay_setting(key: str, value: Any, label: str | None = None) -> None:
    """The one check of a relay setting (``relay.bandwidth``, ``relay.window``, ``relay.insertion_priority``; the
    rule and its parameters are checked by its record, ``suPER.core.selection``).

    Used by ``ExperimentConfig.validate`` (via ``RANGES`` for the numeric ones), ``Relay`` and
    ``suPERDQNConfig``, so every backend refuses the same values with the same message.

    Args:
        key: dotted key.
        value: the value to check.
        label: the flag as the user typed it (``--suPER_bandwidth``, ``suPER_bandwidth``); default ``key``.

    Raises:
        ConfigError: ``"<label>: expected <range>, got <value>"``.
    """
    name = key.removeprefix("relay.")
    if name == "insertion_priority":
        choices = _literal_values(RelayConfig, name)
        expected, ok = f"one of {', '.join(choices)}", value in choices
    else:
        expected, ok = in_range(RANGES[key], value)
    _check(ok, label or key, expected, value)


def _check(ok: bool, key: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {got!r}")


SEED_LIMIT = 2**32 - 2**24
"""Seeds (run seed plus env offsets) stay below this: numpy takes [0, 2**32) and the trainers add strides."""

RANGES: dict[str, str] = {
    "env.horizon": INT1, "env.seed_offset": INT0, "env.eval_seed_offset": INT0, "env.opponent_epsilon": UNIT,
    "env.eval_opponent_epsilon": UNIT, "env.opponent_epsilon_final": UNIT, "env.opponent_epsilon_timesteps": INT0,
    "relay.bandwidth": UNIT, "relay.window": INT1,
    **{f"{name}.{key}": r for name, cls in algo_sections().items() for key, r in getattr(cls, "ranges", {}).items()},
    "run.num_timesteps": INT1, "run.seed": INT0, "run.eval_interval": INT0, "run.eval_points": INT1,
    "run.eval_episodes": INT0, "run.eval_batch": INT0, "run.threads": INT0,
    "run.final_games": INT0, "run.final_games_epsilon": UNIT,
}
"""The allowed range of every numeric config field (``section.field`` -> range), checked by ``validate``.

Why a table: each value outside these ranges either crashes a run after its folder was written or
silently trains something else (a negative gradient clip flips every gradient, 0 freezes the nets), and
one table lets a test check that no numeric field is left out. An algorithm section's entries come from its
dataclass's ``ranges`` (registered sections only); a selection rule's parameters (``relay.params``) carry their
ranges in their records (``suPER.core.selection.RuleParam.range``)."""

_EXPECTED = {POS: "a number > 0", NONNEG: "a number >= 0", UNIT: "a number in [0, 1]", UNIT_OPEN: "a number in (0, 1]",
             INT1: "an integer >= 1", INT0: "an integer >= 0", "list int >= 1": "a non-empty list of integers >= 1"}


def in_range(spec: str, v: Any) -> tuple[str, bool]:
    """(what is expected, whether ``v`` meets ``spec``, a ``RANGES`` value); non-finite numbers never do."""
    expected = _EXPECTED[spec]
    if spec == "list int >= 1":
        return expected, isinstance(v, list) and bool(v) and all(isinstance(x, int) and x >= 1 for x in v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return expected, False
    if spec in (INT1, INT0) and not isinstance(v, int):  # config fields are coerced; RLlib's keys are not
        return expected, False
    ok = {POS: v > 0, NONNEG: v >= 0, UNIT: 0 <= v <= 1, UNIT_OPEN: 0 < v <= 1, INT1: v >= 1, INT0: v >= 0}[spec]
    return expected, ok


def _section_label(section: str, labels: dict[str, str]) -> Callable[[str], str]:
    """field -> how a message names ``section.field`` (the flag as typed, else the dotted key)."""
    return lambda name: labels.get(f"{section}.{name}", f"{section}.{name}")


def check_ranges(obj: Any, ranges: dict[str, str], label: Callable[[str], str] = lambda name: name) -> None:
    """The one range check of a config object: each field named in ``ranges`` (the ``RANGES`` vocabulary) against
    its range; ``ExperimentConfig.validate`` runs it on every section, ``PopulationConfig.validate`` on itself.

    Args:
        obj: a dataclass instance.
        ranges: field -> range (``INT1``, ``UNIT``, ...).
        label: field -> how the message names it (``dqn.lr``, ``--iterations``).

    Raises:
        ConfigError: ``"<label>: expected <range>, got <value>"`` for the first field out of range.
    """
    for name, spec in ranges.items():
        value = getattr(obj, name)
        expected, ok = in_range(spec, value)
        _check(ok, label(name), expected, value)


NAME_LIMIT = 255
"""Bytes of one path component (a folder name) on Linux file systems."""

FOLDER_NAME = f"a folder name (no '/', '\\', '..' or control characters, at most {NAME_LIMIT} bytes)"
"""What ``is_folder_name`` accepts, for messages."""


def is_folder_name(name: str, allow_empty: bool = False) -> bool:
    """A single path component: no separators, no ``..``, no control characters (a newline or tab in a run name
    splits the job lists built from it), at most ``NAME_LIMIT`` bytes in UTF-8 (a run name or tag becomes a folder
    name)."""
    if not name:
        return allow_empty
    return (not any(c in name for c in ("/", "\\")) and ".." not in name and name.strip() not in (".",)
            and not any(ord(c) < 32 or ord(c) == 127 for c in name) and len(name.encode("utf-8", "surrogatepass"))
            <= NAME_LIMIT)


# --------------------------------------------------------------------------------------------------
# YAML and dotted overrides


def env_yaml_path(env_name: str) -> Path:
    """Path of an environment's hyperparameter file: ``experiments/envs/<name>.yaml``, or for a generic adapter
    (one registry key, many envs: ``env_key``) its folder's ``experiments/envs/<key>/defaults.yaml``."""
    key = env_key(env_name)
    shared = EXPERIMENTS_DIR / "envs" / key / "defaults.yaml"
    return shared if shared.is_file() else EXPERIMENTS_DIR / "envs" / f"{key}.yaml"


def _read_env_yaml(env_name: str) -> dict[str, Any]:
    if env_key(env_name) == PETTINGZOO:
        canonical_env_name(env_name)  # a malformed PettingZoo name: what its spelling should be
    elif env_name not in ENV_NAMES:
        raise ConfigError(f"--env: expected one of {', '.join(ENV_NAMES)} or {PETTINGZOO_SPELLING}, got {env_name!r}")
    path = env_yaml_path(env_name)
    try:
        data = load_yaml(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read hyperparameters ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(data).__name__}")
    return data


def load_env_defaults(env_name: str) -> dict[str, Any]:
    """Read ``experiments/envs/<env>.yaml`` as a nested dict (sections env, dqn, relay, run; not ``profiles``)."""
    return {k: v for k, v in _read_env_yaml(env_name).items() if k != "profiles"}


def load_env_profiles(env_name: str) -> dict[str, dict[str, Any]]:
    """The ``profiles`` of ``experiments/envs/<env>.yaml``: named sets of dotted overrides (e.g. ``quick``)."""
    profiles = _read_env_yaml(env_name).get("profiles") or {}
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise ConfigError(f"{env_yaml_path(env_name)}: profiles: expected a mapping of name -> dotted overrides")
    return profiles


class YAMLLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, reading numbers as users write them: YAML 1.1 (PyYAML) takes ``3e-4`` and ``1E5`` for
    strings, as its float pattern needs a dot; YAML 1.2 and every other reader take them for numbers. Used for
    ``--set`` values, env YAMLs and grid files."""


YAMLLoader.add_implicit_resolver(  # after PyYAML's own: ints and dotted floats resolve as before
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """``text`` as YAML with ``YAMLLoader``."""
    return yaml.load(text, Loader=YAMLLoader)  # noqa: S506 - a SafeLoader


def parse_value(text: str) -> Any:
    """Parse a ``--set`` value with YAML rules (so 3e-4, true, [1, 2] and strings all work)."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def parse_set_pairs(pairs: list[str], flag: str = "--set") -> dict[str, Any]:
    """``["dqn.lr=3e-4"]`` -> ``{"dqn.lr": 0.0003}``: the ``--set`` option of every command (values parsed as a user
    writes them, ``parse_value``).

    Raises:
        ConfigError: a pair without ``=`` or without a key, naming ``flag``.
    """
    out: dict[str, Any] = {}
    for p in pairs:
        key, eq, val = p.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{flag}: expected section.key=value, got {p!r}")
        out[key.strip()] = parse_value(val)
    return out


_cached_type_hints = cache(get_type_hints)


def field_hints(cls: type) -> dict[str, Any]:
    """A config dataclass's field annotations, resolved (``typing.get_type_hints``) once per class: resolving them
    evaluates every string annotation again, and rebuilding the config of each of a campaign's run folders
    (``costs.run_cost``) asked ~70 times a folder. Read-only: callers share the dict."""
    return _cached_type_hints(cls)


def apply_overrides(cfg: ExperimentConfig, overrides: dict[str, Any], source: str = "--set",
                    labels: dict[str, str] | None = None) -> ExperimentConfig:
    """Apply dotted-key overrides (``{"dqn.lr": 1e-4, "env.kwargs.n_evaders": 10}``) in place.

    Unknown keys and values of the wrong type raise ConfigError naming the key as ``labels`` spells it
    (``--lr``, ``--set dqn.lr``), else ``source`` and the key.
    """
    labels = labels or {}
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        source_of = labels.get(dotted, source)
        if len(parts) < 2:
            raise ConfigError(f"{source_of}: expected section.key=value, got {dotted!r}")
        section = getattr(cfg, parts[0], None)
        if section is None or not dataclasses.is_dataclass(section):
            sections = ", ".join(f.name for f in fields(cfg))
            raise ConfigError(f"{source_of}: unknown section {parts[0]!r} in {dotted!r} (expected one of {sections})")
        names = {f.name for f in fields(section)}
        if parts[1] not in names:
            raise ConfigError(f"{source_of}: unknown key {dotted!r} (known: {', '.join(sorted(names))})")
        if len(parts) > 2:  # into a dict field such as env.kwargs
            target = getattr(section, parts[1])
            if not isinstance(target, dict):
                raise ConfigError(f"{source_of}: {'.'.join(parts[:2])} is not a mapping, cannot set {dotted!r}")
            for p in parts[2:-1]:
                target = target.setdefault(p, {})
            target[parts[-1]] = value
            continue
        where = labels.get(dotted, f"{source} {dotted}")
        setattr(section, parts[1], coerce(field_hints(type(section))[parts[1]], value, where))
    return cfg


def coerce(hint: Any, value: Any, where: str) -> Any:
    """Coerce ``value`` to the type ``hint`` (a field's annotation: bool, int, float, str, a Literal, list[int],
    a dict) or raise ConfigError naming ``where`` (``--lr``, ``--set dqn.lr``)."""
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            raise ConfigError(f"{where}: expected one of {', '.join(map(str, get_args(hint)))}, got {value!r}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):  # YAML reads --set x=1 as the integer 1
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if hint is int:
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or int(value) != value):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        return str(value)
    if origin is list:
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            raise ConfigError(f"{where}: expected a list of integers such as [64, 64], got {value!r}")
        return list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    return value


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"dqn": {"lr": 1}}`` -> ``{"dqn.lr": 1}``; dict-valued fields (env.kwargs) stay whole."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not (prefix and k == "kwargs"):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


VOLATILE_RUN_KEYS = ("progress", "device", "threads", "out", "wandb", "wandb_project", "wandb_group", "wandb_mode",
                     "checkpoint_replay", "replay_layout", "replay_device", "eval_batch", "eval_parallel",
                     "final_games", "final_games_epsilon")
"""``run.*`` settings that may change when an unfinished run is resumed (they do not change its results)."""
