"""``super-marl train --backend rllib``: the native experiments, trained by ``suPERDQN`` on RLlib 2.60.

Same inputs and outputs as ``suPER.native.dqn.train``: an ``ExperimentConfig`` in, the run folder's
``metrics.csv`` (the native trainer's columns), W&B through the injected logger, a ``Summary`` out.
What differs is who trains: RLlib's EnvRunner samples our own env adapters (``suPER.opponents.make_env``,
wrapped as an RLlib ``MultiAgentEnv`` whose agents are the *learners only*; fixed opponents act
inside the adapter, as in the native backend and the original), RLlib's Learner updates one
``PaperDQNTorchRLModule`` (``suPER.core.rllib_model``) per learner, and ``suPERDQN`` relays.

Mapping of the config (differences from the native trainer in brackets):
- nets: the paper's network for both ``--model conv`` and ``--model mlp``: ``PaperDQNTorchRLModule``
  holds exactly ``suPER.models.qnet.ReferenceQNet``'s layers (conv: three 2x2 stride-1 valid convs
  32/64/64·ReLU -> Linear(->64)·ReLU -> Linear(64->hiddens); mlp: flattened obs -> 2x64 tanh; dueling
  or plain heads Linear(->hiddens)·ReLU -> Linear), with ReferenceQNet's initialisers, and draws
  exploration actions uniformly over all actions [native: one ``BatchedQNet`` for all learners, which
  equals per-learner ReferenceQNets].
- replay: ``suPERDQN``'s relay buffer with capacity ``buffer_size`` env steps [native: per-agent
  transitions; equal when every learner acts every step], alpha/beta as configured [RLlib stores
  ``max(|td|, 1e-12)`` as priority: no ``per_eps``].
- one update of every module (``batch_size`` rows each) per ``rollout_fragment_length`` env steps,
  learning from ``learning_starts`` env steps [RLlib: ``>=``, native: ``>``]; hard target sync every
  ``target_update_freq`` env steps; IS-weighted Huber loss; Adam(lr) [RLlib 2.60's new-stack Learner
  ignores ``adam_epsilon`` and uses torch's default eps 1e-8, equal to ``dqn.adam_eps``'s default];
  grad-norm clip per module.
- epsilon: RLlib's piecewise-linear schedule over env steps, the same line as ``DQNConfig.epsilon``.
- one RLlib iteration = ``cfg.eval_interval`` env steps, then a greedy evaluation on the native trainer's
  evaluation env and protocol (``suPER.loop.make_eval_env``, ``RunRecord.evaluate``): evaluation i's
  episodes seeded ``episode_seeds(eval_seed, i, K)`` and played ``run.eval_batch`` games at a time with
  one forward per module and step.
- device, threads, seeds (``suPER.loop.start_run``, ``env_seeds``) and the metrics rows, timings and
  throughput (``suPER.loop.RunRecord``) are the native ``RunLoop``'s code.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from suPER.config import EnvConfig, ExperimentConfig
from suPER.opponents import make_env
from suPER.runs import Logger, RunFolder, Summary

if TYPE_CHECKING:  # suPER.loop imports torch; this module loads it only when training
    from suPER.loop import ProgressFn, RunRecord


def paper_model_config(body: str, hiddens: int, obs_shape: tuple[int, ...], obs_scale: float = 1.0) -> dict[str, Any]:
    """``model_config`` of ``PaperDQNTorchRLModule`` (DQN adds dueling, double_q, epsilon, num_atoms).

    RLlib's ``DefaultModelConfig`` fields are kept at their defaults (nothing reads them for this module,
    but connectors may look up keys such as ``max_seq_len``).

    Args:
        body: ``conv`` or ``mlp`` (``dqn.model``).
        hiddens: ``dqn.hiddens``.
        obs_shape: one observation (H, W, C) as the env adapter gives it.
        obs_scale: the env's ``EnvSpec.obs_scale`` (the encoder's input factor).

    Returns:
        the model config dict.
    """
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return {**dataclasses.asdict(DefaultModelConfig()), "paper_body": body, "paper_hiddens": int(hiddens),
            "paper_obs_shape": [int(s) for s in obs_shape], "paper_obs_scale": float(obs_scale)}


def explore_seed(seed: int, module_index: int) -> int:
    """The seed of module ``module_index``'s exploration generator (``paper_explore_seed``) in a run seeded ``seed``:
    independent streams per module from one SeedSequence, so no two agents explore in step."""
    return int(np.random.SeedSequence((int(seed), int(module_index))).generate_state(1)[0])


def _rllib_env_class() -> type:
    """``ArrayEnvAsRLlib``: our array env adapters as an RLlib MultiAgentEnv (built lazily: ray is heavy)."""
    import gymnasium as gym
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    class ArrayEnvAsRLlib(MultiAgentEnv):
        """One of our env adapters (learners only) with RLlib's dict-per-agent interface.

        env_config: ``env`` (EnvConfig as a dict), ``seed`` (first reset and opponent seed), ``flatten``
        (flat observations for the mlp body). A learner appears from its first observation: at reset if it starts
        the episode (the adapter's ``alive_N``), else in the step it joins. A learner that dies appears once more
        with its last observation and ``terminated=True``, then leaves the dicts for the rest of the episode
        (RLlib refuses data for an agent that is done); horizon cuts are ``truncated`` (or ``terminated`` with
        ``env.truncation_is_terminal``).
        """

        def __init__(self, config: dict[str, Any] | None = None) -> None:
            super().__init__()
            config = dict(config or {})
            env_cfg = EnvConfig(**config["env"])
            self._seed = int(config["seed"])
            self._seeded = False
            self._flatten = bool(config.get("flatten", False))
            self._terminal_cut = env_cfg.truncation_is_terminal
            self._env = make_env(env_cfg, seed=self._seed)
            spec = self._env.spec
            self.possible_agents = list(spec.learner_ids)
            self.agents = list(self.possible_agents)
            shape = (int(np.prod(spec.obs_shape)),) if self._flatten else tuple(spec.obs_shape)
            box = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
            self.observation_spaces = {a: box for a in self.possible_agents}
            self.action_spaces = {a: gym.spaces.Discrete(spec.n_actions) for a in self.possible_agents}
            self._acting_N = np.ones(len(self.possible_agents), dtype=bool)
            self._left_N = np.zeros(len(self.possible_agents), dtype=bool)
            """learners that left this episode (RLlib's episode is done for them)"""

        def _obs(self, obs_NO: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
            return {self.possible_agents[i]: obs_NO[i].reshape(-1) if self._flatten else obs_NO[i] for i in rows}

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            # seeded once, like the native trainer (RLlib's own per-reset seeds are not used)
            obs_NO = self._env.reset(seed=None if self._seeded else self._seed)
            self._seeded = True
            self._acting_N[:] = self._env.alive_N  # a learner that joins later has no observation yet
            self._left_N[:] = False
            rows = np.flatnonzero(self._acting_N)
            self.agents = [self.possible_agents[i] for i in rows]
            return self._obs(obs_NO, rows), {}

        def step(self, action_dict: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
            ids = self.possible_agents
            actions_N = np.array([int(action_dict.get(a, 0)) for a in ids], dtype=np.int64)
            res = self._env.step(actions_N)
            rows = np.flatnonzero(self._acting_N)
            terminated, truncated = {}, {}
            for i in rows:
                term = bool(res.terminated_N[i])
                cut = bool(res.truncated_N[i]) or (res.episode_over and not term)
                if cut and self._terminal_cut:
                    term, cut = True, False
                terminated[ids[i]], truncated[ids[i]] = term, cut
            rewards = {ids[i]: float(res.reward_N[i]) for i in rows}
            if res.episode_over:
                terminated["__all__"] = all(terminated.values())
                truncated["__all__"] = not terminated["__all__"]
                self._acting_N[:] = False
            else:
                terminated["__all__"] = truncated["__all__"] = False
                self._left_N |= self._acting_N & ~res.alive_N
                joined_N = res.alive_N & ~self._acting_N & ~self._left_N  # their first observation: no reward
                self._acting_N = res.alive_N & ~self._left_N
                rows = np.union1d(rows, np.flatnonzero(joined_N))
            obs = self._obs(res.obs_NO, rows)
            # RLlib expects every agent in this step's dicts to be listed until the next step
            self.agents = [ids[i] for i in rows]
            return obs, rewards, terminated, truncated, {}

        def close(self) -> None:
            self._env.close()

    return ArrayEnvAsRLlib


def build_config(cfg: ExperimentConfig) -> Any:
    """The ``suPERDQNConfig`` an ExperimentConfig describes (one module per learner, or one shared).

    Args:
        cfg: validated experiment config.

    Returns:
        A suPERDQNConfig ready for ``build_algo()``.
    """
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from suPER.core.rllib_buffer import BUFFER_PATH
    from suPER.core.rllib_model import PaperDQNTorchRLModule
    from suPER.core.trainers import suPERDQNConfig
    from suPER.loop import env_seeds, resolve_device
    from suPER.models.qnet import resolve_body

    d, rc, run = cfg.dqn, cfg.relay, cfg.run
    probe = make_env(cfg.env)
    spec = probe.spec
    probe.close()
    env_seed, _ = env_seeds(cfg)
    body = resolve_body(d.model, tuple(spec.obs_shape))
    model = paper_model_config(body, d.hiddens, tuple(spec.obs_shape), spec.obs_scale)
    if d.parameter_sharing:
        team = spec.team
        policies, mapping = [team], _SharedModule(team)
        batch = d.rows_per_update(spec.n_agents, len(spec.opponent_ids))
    else:
        from suPER.core.trainers import module_per_agent

        # a list, not a set: RLlib builds the modules in this order, and a set's order of strings follows
        # PYTHONHASHSEED, so each module's initial weights (drawn in turn from one generator) would too
        policies, mapping, batch = list(spec.learner_ids), module_per_agent, d.batch_size
    gpu = resolve_device(run.device).type == "cuda"
    config = (
        suPERDQNConfig()
        .environment(_rllib_env_class(), env_config={"env": dataclasses.asdict(cfg.env), "seed": env_seed,
                                                     "flatten": body == "mlp"})
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1, rollout_fragment_length=d.rollout_fragment_length)
        .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0)
        .multi_agent(policies=policies, policy_mapping_fn=mapping, count_steps_by="env_steps")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={
            module: RLModuleSpec(module_class=PaperDQNTorchRLModule,
                                 model_config={"paper_explore_seed": explore_seed(run.seed, i)})
            for i, module in enumerate(policies)}), model_config=model)
        .training(
            lr=d.lr, gamma=d.gamma, adam_epsilon=d.adam_eps, grad_clip=d.grad_clip, grad_clip_by="global_norm",
            train_batch_size_per_learner=batch, n_step=1, double_q=d.double_q, dueling=d.dueling,
            td_error_loss_fn="huber", target_network_update_freq=d.target_update_freq,
            num_steps_sampled_before_learning_starts=d.learning_starts,
            epsilon=[(0, d.epsilon_initial), (d.epsilon_timesteps, d.epsilon_final)],
            replay_buffer_config={"type": BUFFER_PATH, "capacity": d.buffer_size, "alpha": d.per_alpha,
                                  "beta": d.per_beta},
            suPER=rc.enabled, suPER_mode=rc.mode, suPER_bandwidth=rc.bandwidth, suPER_window=rc.window,
            suPER_team_sharing=rc.team or None, suPER_insertion_priority=rc.insertion_priority,
            suPER_params=dict(rc.params),
            suPER_priority_eps=d.per_eps, suPER_env_name=cfg.env.name,
        )
        .reporting(min_sample_timesteps_per_iteration=cfg.eval_interval, min_time_s_per_iteration=0,
                   metrics_num_episodes_for_smoothing=20)
        .debugging(seed=run.seed)
    )
    return config


class _SharedModule:
    """Policy mapping for parameter sharing: every learner -> the team's module (picklable)."""

    def __init__(self, module_id: str) -> None:
        self.module_id = module_id

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        return self.module_id


def train_rllib(cfg: ExperimentConfig, folder: RunFolder, logger: Logger | None = None,
                progress: ProgressFn | None = None) -> Summary:
    """Train with ``suPERDQN`` on RLlib and record the run like the native trainer.

    Device, threads and seeds are set by ``suPER.loop.start_run`` and the run is recorded through
    ``suPER.loop.RunRecord``: the same code, columns and throughput rule as the native ``RunLoop``
    (Ray's start and the algorithm build are the ``startup`` phase, left out of the throughput).
    Starts a local Ray instance bound to 127.0.0.1 (token auth off unless RAY_AUTH_MODE says
    otherwise) when none is running, and shuts it down at the end.

    Args:
        cfg: validated experiment config.
        folder: run folder (metrics.csv, checkpoints/rllib_final).
        logger: scalar sink (W&B etc.); metrics.csv is always written.
        progress: optional callback after every iteration (env_steps, stats).

    Returns:
        Summary of the run.
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from suPER.loop import RunRecord, env_seeds, make_eval_env, start_run

    start_run(cfg.run)
    if cfg.run.eval_parallel:
        print("note: --eval-parallel: the RLlib backend evaluates in-process", file=sys.stderr)
    record = RunRecord(folder, logger, progress)
    # alone (not inside a grid run's Ray): the same embedded Ray as `grid run`, token auth on and stopped
    # with the driver, SIGKILL included (suPER.embedded_ray: why not a plain ray.init)
    from suPER import embedded_ray

    own_ray = eval_env = algo = None
    try:
        with record.timer("startup"):
            own_ray = None if ray.is_initialized() else embedded_ray.start(num_cpus=1)
            eval_seed = env_seeds(cfg)[1]
            eval_env = make_eval_env(cfg, eval_seed)
            algo = build_config(cfg).build_algo()
        return _train_loop(cfg, folder, record, algo, eval_env, eval_seed)
    finally:
        if eval_env is not None:
            eval_env.close()
        if algo is not None:
            algo.stop()
        if own_ray is not None:
            embedded_ray.stop(own_ray)


def _train_loop(cfg: ExperimentConfig, folder: RunFolder, record: RunRecord, algo: Any, eval_env: Any,
                eval_seed: int) -> Summary:
    """One ``algo.train()`` per evaluation interval, then a greedy evaluation row (``record.row``)."""
    import torch

    from suPER.models.qnet import resolve_body

    d, run = cfg.dqn, cfg.run
    spec = eval_env.spec
    ids = list(spec.learner_ids)
    module_of = [spec.team if d.parameter_sharing else a for a in ids]
    flatten = resolve_body(d.model, tuple(spec.obs_shape)) == "mlp"
    batch = d.rows_per_update(spec.n_agents, len(spec.opponent_ids))
    folder.checkpoints.mkdir(parents=True, exist_ok=True)

    agents_of_module = {m: [i for i, mm in enumerate(module_of) if mm == m] for m in dict.fromkeys(module_of)}

    @torch.no_grad()
    def greedy(obs_ENO: Any, alive_EN: Any) -> np.ndarray:
        """Greedy actions of the current modules for E games (one forward per module over its E x n rows)."""
        obs = torch.as_tensor(obs_ENO, dtype=torch.float32)
        e = obs.shape[0]
        actions_EN = np.zeros((e, len(ids)), dtype=np.int64)
        for m, agents in agents_of_module.items():
            rows = obs[:, agents].reshape(e * len(agents), *obs.shape[2:])
            out = algo.get_module(m).forward_inference({"obs": rows.reshape(len(rows), -1) if flatten else rows})
            actions_EN[:, agents] = out["actions"].cpu().numpy().reshape(e, len(agents))
        return actions_EN

    def do_eval(env_steps: int, result: dict[str, Any] | None) -> None:
        res = record.evaluate(eval_env, eval_seed, run.eval_episodes, greedy)
        train_return, columns = _train_stats(result, module_of, batch, env_steps, cfg)
        if cfg.relay.enabled:
            columns.update(_relay_stats(result, module_of, spec.team))
        record.row(env_steps, res, ids, train_return, columns)

    env_steps = 0
    do_eval(0, None)  # step 0: the untrained greedy policy, as the native trainer
    while env_steps < run.num_timesteps:
        with record.timer("train"):
            result = algo.train()
        env_steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
        do_eval(env_steps, result)
        record.report_progress(env_steps, record.last_eval["train_return_mean"])
    algo.save_to_path(str(folder.checkpoints / "rllib_final"))
    return record.summary(env_steps)


def _train_stats(result: dict[str, Any] | None, module_of: list[str], batch: int, env_steps: int,
                 cfg: ExperimentConfig) -> tuple[float, dict[str, Any]]:
    """train_return_mean and the native trainer's columns loss, epsilon, updates, from RLlib's results."""
    nan = float("nan")
    if result is None:
        return nan, {"loss": nan, "epsilon": cfg.dqn.epsilon(env_steps), "updates": 0}
    learners = result.get("learners", {})
    modules = list(dict.fromkeys(module_of))
    losses = [float(learners[m]["qf_loss"]) for m in modules if "qf_loss" in learners.get(m, {})]
    trained = learners.get(modules[0], {}).get("num_module_steps_trained_lifetime", 0)
    ret = result.get("env_runners", {}).get("episode_return_mean", nan)
    return float(ret) if ret is not None else nan, {
        "loss": float(np.mean(losses)) if losses else nan,
        "epsilon": cfg.dqn.epsilon(env_steps),
        "updates": int(round(float(trained) / max(batch, 1))) if not math.isnan(float(trained)) else 0,
    }


def _relay_stats(result: dict[str, Any] | None, module_of: list[str], team: str) -> dict[str, Any]:
    """fraction_shared_mean / fraction_shared_<module> / relayed_rows_total (the native column names).

    As the native trainer, a single policy (parameter sharing, or one learner) is named after the team.
    """
    stats = (result or {}).get("suPER", {})
    modules = list(dict.fromkeys(module_of))
    names = modules if len(modules) > 1 else [team]
    row: dict[str, Any] = {"fraction_shared_mean": float(stats.get("fraction_shared_mean", 0.0))}
    row.update({f"fraction_shared_{n}": float(stats.get(f"fraction_shared_{m}", 0.0)) for n, m in zip(names, modules)})
    row["relayed_rows_total"] = int(stats.get("relayed_rows_lifetime", 0))
    return row
