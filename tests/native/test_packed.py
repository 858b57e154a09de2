"""Packed runs: each run of a pack trains exactly as the same run alone (pack of one), and survives a failing run."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from suPER import config as C
from suPER.core.relay import InsertionPolicy
from suPER.native import dqn
from suPER.native.fragment import Fragment, RowIndex, Rows, fragment_index
from suPER.native.packed import check_packable, train_pack
from suPER.resolve import resolve
from suPER.runs import RunFolder

TINY = {"env.horizon": 20, "env.kwargs.x_size": 8, "env.kwargs.y_size": 8, "env.kwargs.n_pursuers": 3,
        "env.kwargs.n_evaders": 4, "dqn.hiddens": 16, "dqn.batch_size": 8, "dqn.buffer_size": 400,
        "dqn.learning_starts": 40, "dqn.target_update_freq": 100, "dqn.epsilon_timesteps": 400,
        "relay.window": 50, "relay.bandwidth": 0.3, "run.eval_episodes": 1, "run.device": "cpu", "run.threads": 1}
"""Tiny pursuit with the paper's conv dueling network: 3 pursuers on an 8x8 map, batch 8."""


def tiny_cfg(seed: int, relay: bool, updates: int, tmp: Path, **extra: Any) -> C.ExperimentConfig:
    """A run with ``updates`` updates (one per 4-step fragment after learning_starts) and 5 (1) evaluations after step 0."""
    steps = 40 + 4 * updates
    named = {"run.seed": seed, "relay.enabled": relay, "run.num_timesteps": steps,
             "run.eval_interval": steps // (5 if updates >= 50 else 1),
             "run.out": str(tmp)}
    return resolve("pursuit", "ddqn", overrides={**TINY, **extra}, named=named)


def pack_of(cfgs: list[C.ExperimentConfig], sub: str, batched_env: bool = False) -> list[Any]:
    """Train ``cfgs`` as one pack under ``tmp/sub`` (single-game envs unless ``batched_env``)."""
    folders = [RunFolder(Path(c.run.out) / sub / c.run_name) for c in cfgs]
    return train_pack(cfgs, folders, batched_env=batched_env)


def record(cfg: C.ExperimentConfig, sub: str) -> dict[str, Any]:
    """What a run left: its metrics rows and its last checkpoint (replay rows, generators, nets, Adam)."""
    path = Path(cfg.run.out) / sub / cfg.run_name
    with (path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    latest = torch.load(path / "checkpoints" / "latest.pt", weights_only=True)
    return {"rows": rows, "trainer": latest["trainer"], "final": torch.load(path / "checkpoints" / "final.pt",
                                                                            weights_only=True)}


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Bit-equal nested checkpoints (tensors, numbers, generator states)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def check_pack_equals_alone(tmp_path: Path, updates: int, n_runs: int = 3, batched_env: bool = False) -> None:
    """Seeds 1.. n_runs; the last run without relay (no sharing), the others SUPER quantile."""
    cfgs = [tiny_cfg(1 + i, i < n_runs - 1, updates, tmp_path) for i in range(n_runs)]
    out = pack_of(cfgs, "pack", batched_env)
    assert all(not isinstance(s, BaseException) for s in out), out
    for cfg in cfgs:
        assert pack_of([cfg], "alone", batched_env)[0].env_steps == cfg.run.num_timesteps
    recs = {sub: [record(c, sub) for c in cfgs] for sub in ("pack", "alone")}
    for p, a in zip(recs["pack"], recs["alone"]):
        assert p["trainer"]["updates"] == updates
        # same actions and replay contents (rows, priorities, generator states), same nets and Adam state
        assert_same(p["trainer"], a["trainer"], "latest.pt")
        assert_same(p["final"], a["final"], "final.pt")
        for rp, ra in zip(p["rows"], a["rows"], strict=True):
            for k in ("env_steps", "team_return_mean", "epsilon", "updates", "fraction_shared_mean"):
                assert rp.get(k) == ra.get(k), k
            if rp["loss"] != "nan":
                assert abs(float(rp["loss"]) - float(ra["loss"])) <= 1e-6
    # the runs are not copies of each other: seeds and relay settings reach their own slot
    first, last = recs["pack"][0]["trainer"], recs["pack"][-1]["trainer"]
    assert not torch.equal(first["replay"]["actions"], last["replay"]["actions"])
    assert int(first["relay_received"].sum()) > 0 and last["relay"] is None


def test_pack_of_two_equals_each_run_alone(tmp_path: Path) -> None:
    """The cheap default variant (2 runs, 8 updates) of the slow checks below."""
    check_pack_equals_alone(tmp_path, updates=8, n_runs=2)


def test_pack_on_the_batched_env_equals_each_run_alone_on_it(tmp_path: Path) -> None:
    """R runs stepping R games of VecPursuitEnv: each run as if packed alone (one game), bit for bit."""
    check_pack_equals_alone(tmp_path, updates=8, n_runs=2, batched_env=True)


@pytest.mark.slow
def test_pack_of_three_equals_each_run_alone_50_updates(tmp_path: Path) -> None:
    check_pack_equals_alone(tmp_path, updates=50)


@pytest.mark.slow
def test_pack_of_three_equals_each_run_alone_500_updates(tmp_path: Path) -> None:
    check_pack_equals_alone(tmp_path, updates=500)


def test_acting_and_init_equal_the_unpacked_trainer(tmp_path: Path) -> None:
    """Until learning starts, a packed run is dqn.train's run: same init, acting, replay rows and step-0 row."""
    cfg = tiny_cfg(4, True, 0, tmp_path)  # 40 env steps, no update
    pack_of([cfg], "pack")
    folder = RunFolder(tmp_path / "unpacked" / cfg.run_name)
    dqn.train(cfg, folder)
    p, u = record(cfg, "pack"), record(cfg, "unpacked")
    assert_same(p["trainer"]["q_net"], u["trainer"]["q_net"], "q_net")
    assert_same(p["trainer"]["replay"], u["trainer"]["replay"], "replay")
    assert_same(p["trainer"]["rng"], u["trainer"]["rng"], "rng")
    assert [r["team_return_mean"] for r in p["rows"]] == [r["team_return_mean"] for r in u["rows"]]


@pytest.mark.parametrize("replay", ["numpy", pytest.param("device", marks=pytest.mark.slow)])
def test_a_failing_run_does_not_stop_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay: str) -> None:
    """The survivor trains as if alone; with device replay its buffer is a view of the pack's one buffer, which
    the learn phase then samples run by run."""
    extra = {"run.replay_device": replay}
    cfgs = [tiny_cfg(1, True, 4, tmp_path, **extra), tiny_cfg(2, False, 4, tmp_path, **extra)]
    from suPER import loop as loop_mod

    made: list[Any] = []
    real_init = loop_mod.RunLoop.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)
        if len(made) == 1:  # the first run's training env breaks after 48 steps (after 2 updates)
            env, calls = self.envs[0], [0]
            step = env.step

            def broken(actions: np.ndarray) -> Any:
                calls[0] += 1
                if calls[0] > 48:
                    raise RuntimeError("env exploded")
                return step(actions)

            env.step = broken

    monkeypatch.setattr(loop_mod.RunLoop, "__init__", init)
    out = pack_of(cfgs, "pack")
    monkeypatch.undo()
    assert isinstance(out[0], RuntimeError) and "exploded" in str(out[0])
    assert out[1].env_steps == cfgs[1].run.num_timesteps
    pack_of([cfgs[1]], "alone")
    assert_same(record(cfgs[1], "pack")["trainer"], record(cfgs[1], "alone")["trainer"], "survivor")


def test_a_run_failing_while_all_runs_step_together_does_not_stop_the_others(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On the batched env (every run recorded at once, ``_record_all``) the first run's evaluation breaks at its
    second evaluation: it stops there, and the survivor trains exactly as alone on the batched env."""
    cfgs = [tiny_cfg(1, True, 12, tmp_path, **{"run.eval_interval": 40}), tiny_cfg(2, False, 12, tmp_path)]
    from suPER import loop as loop_mod

    made: list[Any] = []
    real_init = loop_mod.RunLoop.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)
        if len(made) == 1:
            real_evaluate, calls = self.evaluate, [0]

            def broken(*a: Any, **k: Any) -> Any:
                calls[0] += 1
                if calls[0] > 2:
                    raise RuntimeError("evaluation exploded")
                return real_evaluate(*a, **k)

            self.evaluate = broken

    monkeypatch.setattr(loop_mod.RunLoop, "__init__", init)
    out = pack_of(cfgs, "pack", batched_env=True)
    monkeypatch.undo()
    assert isinstance(out[0], RuntimeError) and "exploded" in str(out[0])
    assert out[1].env_steps == cfgs[1].run.num_timesteps
    pack_of([cfgs[1]], "alone", batched_env=True)
    assert_same(record(cfgs[1], "pack")["trainer"], record(cfgs[1], "alone")["trainer"], "survivor")


def test_unpackable_runs_are_refused(tmp_path: Path) -> None:
    a, b = tiny_cfg(1, True, 10, tmp_path), tiny_cfg(2, True, 10, tmp_path, **{"dqn.adam_eps": 1e-4})
    with pytest.raises(ValueError, match="differ in dqn.adam_eps"):
        check_packable([a, b])
    check_packable([a, tiny_cfg(2, True, 10, tmp_path, **{"dqn.lr": 1e-3})])  # learning rates may differ


def test_a_pack_mixing_learning_rates_trains_each_run_as_alone(tmp_path: Path) -> None:
    """Two runs with lr 1e-3 and 3e-4 in one pack (PackedAdam's per-run step sizes), 24 updates each:
    each run's nets and Adam moments equal the same run packed alone (torch's own foreach Adam).

    Tolerance: the per-run step repeats torch's CPU foreach arithmetic (same float32 operations in the
    same order), so the difference measured 0.0 (torch 2.13, CPU); atol 1e-6 on weights of scale ~0.1-1
    admits float32 re-association only, while giving run 1 the other rate moves its weights by ~2e-2
    (measured), and the test checks that the two runs' rates reached their own slots.
    """
    lrs = (1e-3, 3e-4)
    cfgs = [tiny_cfg(1 + i, False, 24, tmp_path, **{"dqn.lr": lr}) for i, lr in enumerate(lrs)]
    assert all(not isinstance(s, BaseException) for s in pack_of(cfgs, "pack"))
    for cfg in cfgs:
        pack_of([cfg], "alone")
    for cfg in cfgs:
        p, a = record(cfg, "pack")["final"], record(cfg, "alone")["final"]
        for part in ("q_net", "target_net"):
            for name in p[part]:
                torch.testing.assert_close(p[part][name], a[part][name], rtol=0, atol=1e-6, msg=f"{part}.{name}")
        for i, st in p["optimizer"]["state"].items():
            for k in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(st[k], a["optimizer"]["state"][i][k], rtol=1e-5, atol=1e-9)
        assert p["optimizer"]["param_groups"][0]["lr"] == cfg.dqn.lr  # the run's own rate in its checkpoint


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pack_equals_each_run_alone_on_cuda(tmp_path: Path) -> None:
    """On CUDA (batched pursuit on the device, fused Adam): same replay rows and losses as each run alone."""
    cfgs = [tiny_cfg(1 + i, i == 0, 50, tmp_path, **{"run.device": "cuda"}) for i in range(2)]
    assert all(not isinstance(s, BaseException) for s in pack_of(cfgs, "pack", batched_env=True))
    for cfg in cfgs:
        pack_of([cfg], "alone", batched_env=True)
        p, a = record(cfg, "pack"), record(cfg, "alone")
        assert_same(p["trainer"]["replay"], a["trainer"]["replay"], "replay")
        for rp, ra in zip(p["rows"], a["rows"], strict=True):
            if rp["loss"] != "nan":
                assert abs(float(rp["loss"]) - float(ra["loss"])) <= 1e-6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_pack_mixing_learning_rates_on_cuda(tmp_path: Path) -> None:
    """On CUDA the mixed-rate step (foreach ops, per-run step sizes) against each run alone (fused Adam):
    equal to float32 rounding (atol 1e-5 on weights of scale ~0.1-1 over 24 updates; a swapped rate moves
    them ~2e-2 on CPU). Not run yet: no GPU was lent to the session that wrote it."""
    lrs = (1e-3, 3e-4)
    cfgs = [tiny_cfg(1 + i, False, 24, tmp_path, **{"dqn.lr": lr, "run.device": "cuda"}) for i, lr in enumerate(lrs)]
    assert all(not isinstance(s, BaseException) for s in pack_of(cfgs, "pack", batched_env=True))
    for cfg in cfgs:
        pack_of([cfg], "alone", batched_env=True)
        p, a = record(cfg, "pack")["final"], record(cfg, "alone")["final"]
        for name in p["q_net"]:
            torch.testing.assert_close(p["q_net"][name], a["q_net"][name], rtol=0, atol=1e-5, msg=name)


class Interrupt(Exception):
    """Raised by a progress callback: the pack stops like a killed process (its folders keep latest.pt)."""


def stop_after(steps: int) -> Any:
    def progress(env_steps: int, _: dict[str, Any]) -> None:
        if env_steps >= steps:
            raise Interrupt

    return progress


def device_replay_cfgs(tmp: Path, sub: str, replay: str, updates: int = 8, n_runs: int = 2,
                       **extra: Any) -> list[C.ExperimentConfig]:
    """Seeds 1..n_runs, the first with SUPER quantile, with ``run.replay_device=replay`` (numpy: the plain layout)."""
    return [tiny_cfg(1 + i, i == 0, updates, tmp / sub, **{"run.replay_device": replay, "run.replay_layout": "plain",
                                                          **extra}) for i in range(n_runs)]


def assert_same_rows(a: list[dict[str, str]], b: list[dict[str, str]]) -> None:
    """metrics.csv rows equal but for timings; losses to 1e-6 (the trees' ``p ** alpha`` may round apart)."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for k in ra:
            if k == "loss" and ra[k] != "nan":
                assert abs(float(ra[k]) - float(rb[k])) <= 1e-6
            elif "per_sec" not in k and not k.startswith("perf") and "time" not in k:
                assert ra[k] == rb[k], k


def check_device_replay_equals_numpy_replay(tmp_path: Path, updates: int, n_runs: int, device: str = "cpu") -> None:
    """``run.replay_device=device`` on the CPU (TorchPER, device relay windows, the batched env's observations
    kept as tensors): each run logs the numpy-replay pack's rows and ends with the same replay rows."""
    cfgs = {m: device_replay_cfgs(tmp_path, m, m, updates, n_runs, **{"run.device": device}) for m in ("numpy", "device")}
    train_and_compare_replays(cfgs)
    assert int(record(cfgs["device"][0], "pack")["trainer"]["relay_received"].sum()) > 0


def train_and_compare_replays(cfgs: dict[str, list[C.ExperimentConfig]], trees: bool = False) -> None:
    """Train the ``numpy`` and the ``device`` pack on the batched env; each run: the same metrics rows, replay rows
    and generator states (``trees``: also sum trees and max priorities to 1e-9, and the relay's state)."""
    for m, c in cfgs.items():
        assert all(not isinstance(s, BaseException) for s in pack_of(c, "pack", batched_env=True)), m
    for a, b in zip(cfgs["numpy"], cfgs["device"]):
        ra, rb = record(a, "pack"), record(b, "pack")
        assert_same_rows(ra["rows"], rb["rows"])
        for k in ("obs", "next_obs", "actions", "rewards", "dones", "size", "ptr"):
            assert torch.equal(ra["trainer"]["replay"][k], rb["trainer"]["replay"][k]), k
        assert_same(ra["trainer"]["rng"], rb["trainer"]["rng"])
        if trees:
            for k in ("sum_tree", "max_priority"):  # numpy's and torch's p ** alpha may round apart
                assert torch.allclose(ra["trainer"]["replay"][k], rb["trainer"]["replay"][k], rtol=1e-9, atol=0.0), k
            assert_same(ra["trainer"]["relay"], rb["trainer"]["relay"], "relay")


def test_device_replay_pack_of_one_equals_the_numpy_replay_pack(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap default variant (one SUPER run, 4 updates) of the slow check below; the device pack's
    observations never became numpy (the batched env's tensors went into tensor fragments and TorchPER)."""
    from suPER.native import packed

    seen: list[bool] = []
    real_obs = packed.PackEnvs._obs

    def obs(self: Any, o: torch.Tensor) -> Any:
        out = real_obs(self, o)
        seen.append(isinstance(out, torch.Tensor))
        return out

    monkeypatch.setattr(packed.PackEnvs, "_obs", obs)
    check_device_replay_equals_numpy_replay(tmp_path, updates=4, n_runs=1)
    steps = 40 + 4 * 4 + 1  # each env step, plus the first reset (the episodes of 20 steps add resets)
    n = len(seen) // 2
    assert n >= steps and seen == [False] * n + [True] * n  # the numpy pack's as numpy, the device pack's not


@pytest.mark.parametrize("second", [{"relay.mode": "stochastic"}, {"relay.insertion_priority": "sender"}],
                         ids=["joined", "run-by-run"])
def test_a_device_pack_adds_every_runs_rows_at_once_as_each_run_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     second: dict[str, Any]) -> None:
    """Two SUPER runs sharing the pack's one device buffer: their own rows, then their relayed rows, go in with one
    add each per fragment (``_store_and_relay_joined``), or run by run when one add cannot take both (max vs
    sender insertion priorities). Either way each run ends with the numpy-replay pack's replay rows, priorities,
    relay state and metrics, whose runs add alone."""
    from suPER.replay.torch_per import TorchPER

    adds: list[tuple[int, bool]] = []
    real_add = TorchPER.add

    def add(self: Any, policy_K: Any, *args: Any, **kwargs: Any) -> Any:
        pol = np.asarray(policy_K)  # (runs in this add: 3 policies per run, relayed rows: stream = sender != policy)
        adds.append((len(np.unique(pol // 3)), bool(np.any(np.asarray(kwargs["stream_K"]) != pol % 3))))
        return real_add(self, policy_K, *args, **kwargs)

    monkeypatch.setattr(TorchPER, "add", add)
    gathers: list[int] = []  # the joined adds' rows come from the pack's stacked fragment, one gather for all runs
    real_join = RowIndex.join
    monkeypatch.setattr(RowIndex, "join", staticmethod(lambda parts, *a: gathers.append(len(parts)) or real_join(parts, *a)))
    cfgs = {m: [tiny_cfg(1, True, 6, tmp_path / m, **{"run.replay_device": m, "run.replay_layout": "plain"}),
                tiny_cfg(2, True, 6, tmp_path / m, **{"run.replay_device": m, "run.replay_layout": "plain", **second})]
            for m in ("numpy", "device")}
    train_and_compare_replays(cfgs, trees=True)
    assert all(int(record(c, "pack")["trainer"]["relay_received"].sum()) > 0 for c in cfgs["device"])
    joined = "relay.mode" in second  # own rows always go in one add; relayed rows when they can
    assert (2, False) in adds and ((2, True) in adds) == joined and (1, False) not in adds
    assert 2 in gathers


def test_rows_gathered_from_the_stacked_fragment_equal_each_runs_own() -> None:
    """``RowIndex.join`` on a pack's stacked fragment (runs' fragments are its views) gives ``Rows.join`` of each
    run's own rows, and ``grouped(runs=True)`` the concatenation of each run's ``grouped``, on device tensors and
    numpy fields alike."""
    R, T, N, n_pol = 3, 4, 4, 2
    rng = np.random.default_rng(0)
    stacked = Fragment(*(torch.as_tensor(rng.random((R, T, N, 2, 2, 3)), dtype=torch.float32) for _ in range(2)),
                       rng.integers(0, 5, (R, T, N)), rng.random((R, T, N)).astype(np.float32),
                       rng.random((R, T, N)) < 0.3, rng.random((R, T, N)) < 0.8)
    frags = [Fragment(*(x[r] for x in (stacked.obs_TNO, stacked.next_obs_TNO, stacked.action_TN, stacked.reward_TN,
                                       stacked.done_TN, stacked.valid_TN))) for r in range(R)]
    policy_of_agent_N = np.arange(N) % n_pol
    parts = {r: fragment_index(frags[r], policy_of_agent_N, None, InsertionPolicy("max", 0.01, False))
             for r in (0, 2)}  # run 1 sits this add out
    got = RowIndex.join(parts, stacked, n_pol)
    want = Rows.join([parts[r].rows(frags[r]) for r in parts], [r * n_pol for r in parts])
    for a, b in zip((got.policy_K, *got.fields, got.stream_K), (want.policy_K, *want.fields, want.stream_K)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert got.priority_K is None and len(got.policy_K) == sum(f.valid_TN.sum() for f in (frags[0], frags[2]))
    for a, b in zip(stacked.grouped(n_pol, runs=True), (np.concatenate([np.asarray(f.grouped(n_pol)[i]) for f in frags])
                                                        for i in range(5))):
        assert np.array_equal(np.asarray(a), b)


@pytest.mark.slow
def test_device_replay_pack_of_two_equals_the_numpy_replay_pack(tmp_path: Path) -> None:
    check_device_replay_equals_numpy_replay(tmp_path, updates=30, n_runs=2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_replay_pack_on_cuda_equals_the_numpy_replay_pack(tmp_path: Path) -> None:
    """On CUDA: TorchPER, relay windows and the vectorized env's observations on the GPU, the same rows."""
    check_device_replay_equals_numpy_replay(tmp_path, updates=30, n_runs=2, device="cuda")


@pytest.mark.slow
def test_a_pack_resumes_across_replay_devices(tmp_path: Path) -> None:
    """Interrupted after its evaluation at step 56, a device-replay pack resumes with numpy replay and a numpy
    pack with device replay: the two end with the same rows (each checkpoint loads into the other buffer)."""
    out = {}
    for first, then in (("device", "numpy"), ("numpy", "device")):
        cfgs = device_replay_cfgs(tmp_path, first, first, **{"run.eval_interval": 28})
        with pytest.raises(Interrupt):
            train_pack(cfgs, [RunFolder(Path(c.run.out) / "pack" / c.run_name) for c in cfgs], batched_env=True,
                       progress=stop_after(60))
        again = device_replay_cfgs(tmp_path, first, then, **{"run.eval_interval": 28})
        assert all(not isinstance(s, BaseException) for s in pack_of(again, "pack", batched_env=True))
        out[first] = [record(c, "pack")["rows"] for c in again]
    for a, b in zip(out["device"], out["numpy"]):
        assert [r["env_steps"] for r in a] == ["0", "28", "56", "72"]
        assert_same_rows(a, b)
