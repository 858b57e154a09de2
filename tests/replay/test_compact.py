"""CompactPER against MultiAgentPER: same calls, bit-identical samples; the codec on real MAgent2 observations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from suPER import config as C
from suPER.native import dqn
from suPER.opponents import make_env
from suPER.replay import Batch, CellCodec, CompactPER, MultiAgentPER, ObsCodecError, load_replay_state
from suPER.resolve import resolve
from suPER.runs import RunFolder

FIELDS = ("obs", "actions", "rewards", "next_obs", "dones", "weights", "indices")


def assert_same_batch(a: Batch, b: Batch) -> None:
    """Field by field, dtype and bits (so -0.0 vs 0.0 or a NaN payload would count as a difference)."""
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), name


def trajectory_calls(seed: int, n_policies: int, n_streams: int, obs_shape: tuple[int, ...], calls: int,
                     shared: bool) -> list[tuple[np.ndarray, ...]]:
    """``add`` arguments of a trainer-like run: streams (agents) walk episodes, fragments of 1-5 steps.

    Each stream's obs is the previous next_obs unless its episode ended (done, then a fresh obs) or it was
    dead for a while; relayed copies of random rows go to another policy with the sender as stream (or -1).
    Values are few (0, 0.25, ..., 1 and a -0.0) so the codec and accidental equalities get exercised.
    """
    rng = np.random.default_rng(seed)
    values = np.array([0.0, 0.25, 0.5, 1.0, -0.0], dtype=np.float32)

    def frame() -> np.ndarray:
        return values[rng.integers(0, len(values), obs_shape)]

    cur = [frame() for _ in range(n_streams)]
    dead = np.zeros(n_streams, dtype=bool)
    out = []
    for it in range(calls):
        rows: list[tuple] = []
        for t in range(int(rng.integers(1, 6))):
            for s in range(n_streams):
                if dead[s]:
                    dead[s] = rng.random() > 0.3  # revives in a new episode
                    if not dead[s]:
                        cur[s] = frame()
                    continue
                nxt = frame() if rng.random() > 0.05 else cur[s]  # sometimes an unchanged view
                done = rng.random() < 0.1
                pol = 0 if shared else s % n_policies
                rows.append((pol, s, cur[s], t, it * 100 + t, nxt, done))
                if done:
                    dead[s] = rng.random() < 0.5  # died (absent for a while) or the episode restarts
                    cur[s] = frame()
                else:
                    cur[s] = nxt
        for _ in range(int(rng.integers(0, 2 * n_streams)) if rows and n_policies > 1 else 0):
            pol, s, o, a, r, n, d = rows[int(rng.integers(0, len(rows)))]
            receiver = (pol + int(rng.integers(1, n_policies))) % n_policies
            rows.append((receiver, s if rng.random() < 0.7 else -1, o, a, r, n, d))
        if rows:
            pol, stream, o, a, r, n, d = zip(*rows)
            out.append((np.array(pol), np.array(o), np.array(a), np.array(r, np.float32), np.array(n),
                        np.array(d, np.float32), np.array(stream)))
    return out


def drive(plain: MultiAgentPER, compact: CompactPER, calls: list[tuple[np.ndarray, ...]], batch: int = 8) -> int:
    """Apply the same adds, samples and priority updates to both; assert identical samples. Returns #samples."""
    td_rng = np.random.default_rng(123)
    n = 0
    for pol, o, a, r, nx, d, stream in calls:
        np.testing.assert_array_equal(plain.add(pol, o, a, r, nx, d), compact.add(pol, o, a, r, nx, d, stream_K=stream))
        if (plain.sizes > 0).all():
            x, y = plain.sample(batch), compact.sample(batch)
            assert_same_batch(x, y)
            td = td_rng.exponential(size=x.indices.shape)
            plain.update_priorities(x.indices, td)
            compact.update_priorities(y.indices, td)
            n += 1
    return n


@pytest.mark.parametrize("n_policies,n_streams,shared", [(3, 3, False), (1, 4, True), (2, 3, False)])
@pytest.mark.parametrize("dtype,obs_shape", [(np.float16, (3, 3, 5)), (np.uint8, (4, 2)), (np.float32, (2, 2, 3))])
def test_samples_equal_the_plain_buffer(n_policies: int, n_streams: int, shared: bool, dtype: npt.DTypeLike,
                                        obs_shape: tuple[int, ...]) -> None:
    """Episode ends, dead streams, relayed rows, interleaved streams (sharing) and many wrap-arounds (capacity 13)."""
    kw = {"alpha": 0.6, "beta": 0.4}
    plain = MultiAgentPER(n_policies, 13, obs_shape, dtype, rng=np.random.default_rng(7), **kw)
    compact = CompactPER(n_policies, 13, obs_shape, dtype, rng=np.random.default_rng(7), n_streams=n_streams, **kw)
    assert compact.codec is not None if CellCodec.applies(obs_shape, dtype) else compact.codec is None
    calls = trajectory_calls(1, n_policies, n_streams, obs_shape, 80, shared)
    assert drive(plain, compact, calls) > 50
    assert (compact.sizes == 13).all()  # wrapped many times
    # linking happened (fewer frames than 2 per row) and nothing leaked: every extra frame belongs to a stored row
    refs = compact._next_ref[compact._next_ref >= 0]
    n_extra = int((refs >= n_policies * 13).sum())
    assert compact.extra_frames == n_extra < compact.sizes.sum()


def test_one_call_larger_than_capacity_and_links_across_calls() -> None:
    """A chain of one stream over several calls: only the episode end and the newest row keep a next frame."""
    obs = np.arange(12, dtype=np.float32)[:, None, None] * np.ones((1, 2, 2), np.float32)  # frame t = t
    plain = MultiAgentPER(1, 8, (2, 2), np.float32, rng=np.random.default_rng(0))
    compact = CompactPER(1, 8, (2, 2), np.float32, rng=np.random.default_rng(0), n_streams=1)
    nxt = obs + 1
    nxt[5] = 99  # episode end after row 5: row 6 starts from a fresh frame (6 != 99)
    done = (np.arange(12) == 5).astype(np.float32)
    pol, zero = np.zeros(12, np.int64), np.zeros(12, np.int64)
    for sl in (slice(0, 3), slice(3, 7), slice(7, 12)):
        plain.add(pol[sl], obs[sl], zero[sl], obs[sl, 0, 0], nxt[sl], done[sl])
        compact.add(pol[sl], obs[sl], zero[sl], obs[sl, 0, 0], nxt[sl], done[sl], stream_K=zero[sl])
    assert compact.extra_frames == 2  # row 5 (episode end) and row 11 (newest)
    assert_same_batch(plain.sample(32), compact.sample(32))
    # 10 rows in one call into capacity 8: the first two are superseded, as in the plain buffer
    big = np.arange(10, dtype=np.float32)[:, None, None] * np.ones((1, 2, 2), np.float32) + 20
    args = (np.zeros(10, np.int64), big, np.zeros(10, np.int64), big[:, 0, 0], big + 1, np.zeros(10, np.float32))
    np.testing.assert_array_equal(plain.add(*args), compact.add(*args, stream_K=np.zeros(10, np.int64)))
    assert compact.extra_frames == 1  # the old rows' frames were released with them
    assert_same_batch(plain.sample(32), compact.sample(32))


def test_checkpoints_of_either_layout_load_into_either() -> None:
    calls = trajectory_calls(3, 3, 3, (3, 3, 5), 40, False)
    plain = MultiAgentPER(3, 11, (3, 3, 5), np.float16, rng=np.random.default_rng(1))
    compact = CompactPER(3, 11, (3, 3, 5), np.float16, rng=np.random.default_rng(1), n_streams=3)
    drive(plain, compact, calls)
    state = plain.rng.bit_generator.state
    np.testing.assert_array_equal(compact.plain_state_dict()["next_obs"], plain.state_dict()["next_obs"])
    targets = {
        "plain->compact": (plain.state_dict(), CompactPER(3, 11, (3, 3, 5), np.float16, n_streams=3)),
        "compact->compact": (compact.state_dict(), CompactPER(3, 11, (3, 3, 5), np.float16, n_streams=3)),
        "compact->plain": (compact.state_dict(), MultiAgentPER(3, 11, (3, 3, 5), np.float16)),
    }
    for name, (sd, buf) in targets.items():
        load_replay_state(buf, sd)
        for b in (plain, compact, buf):
            b.rng.bit_generator.state = state
        ref = plain.sample(16)
        assert_same_batch(ref, buf.sample(16))
        assert_same_batch(ref, compact.sample(16))
        # and they keep agreeing after more adds (pointers, pending links and palettes restored / migrated)
        more = trajectory_calls(4, 3, 3, (3, 3, 5), 10, False)
        p2 = MultiAgentPER(3, 11, (3, 3, 5), np.float16, rng=np.random.default_rng(2))
        p2.load_state_dict(plain.state_dict())
        buf.rng = np.random.default_rng(2)
        if isinstance(buf, CompactPER):
            drive(p2, buf, more)
        else:
            c2 = CompactPER(3, 11, (3, 3, 5), np.float16, rng=np.random.default_rng(2), n_streams=3)
            c2.load_state_dict(buf.state_dict())
            drive(p2, c2, more)
        assert name  # label for the loop


def test_codec_fails_loudly_instead_of_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = CellCodec((2, 3), np.float16)
    x = np.array([[[0, 1, 0.5], [0, 0, 0]], [[1, 1, 1], [0, 1, 0.5]]], dtype=np.float16)
    np.testing.assert_array_equal(codec.decode(codec.encode(x)), x)
    assert codec.n_codes == 3
    monkeypatch.setattr(CellCodec, "MAX_CODES", 4)
    with pytest.raises(ObsCodecError, match="replay_layout=plain"):
        codec.encode(np.array([[[0.1, 0, 0], [0.2, 0, 0]]], dtype=np.float16))  # 2 unseen vectors: 5 > 4
    assert codec.n_codes == 3  # nothing half-learnt
    buf = CompactPER(1, 4, (3, 3), np.float16, n_streams=1)
    with pytest.raises(ObsCodecError):  # 3 + 3 distinct cell vectors > 4
        buf.add(np.zeros(1, np.int64), np.arange(9, dtype=np.float32).reshape(1, 3, 3) / 7, np.zeros(1, np.int64),
                np.zeros(1), np.arange(9, dtype=np.float32).reshape(1, 3, 3) / 9, np.zeros(1))
    assert buf.sizes.tolist() == [0]  # the failed add stored nothing


def test_nbytes_at_capacity_is_what_a_filled_buffer_reports() -> None:
    """``nbytes_at_capacity`` (used by benchmarks/envs.py instead of filling GBs) against a buffer filled to
    capacity where every odd row of each stream keeps its own next_obs frame (share 0.5; the pool grows
    64 -> 160 -> 304 frames) and the palette holds at most 3**5 = 243 codes."""
    P, N, T, shape = 2, 200, 20, (3, 3, 5)
    buf = CompactPER(P, N, shape, np.float16, n_streams=P)
    fresh = CompactPER(P, N, shape, np.float16, n_streams=P)
    rng = np.random.default_rng(0)
    for _ in range(12):
        f = rng.integers(0, 3, (P, T + 1, *shape)).astype(np.float16) / 2  # one trajectory per policy
        nxt = f[:, 1:].copy()
        nxt[:, 1::2] = rng.integers(0, 3, nxt[:, 1::2].shape) / 2 + 2  # odd rows: next_obs not the next row's obs
        pol = np.repeat(np.arange(P), T)
        z = np.zeros(pol.size)
        buf.add(pol, f[:, :-1].reshape(-1, *shape), z.astype(np.int64), z, nxt.reshape(-1, *shape), z, stream_K=pol)
    assert buf.sizes.tolist() == [N, N] and buf.extra_frames == P * N // 2
    assert fresh.nbytes_at_capacity(0.5, n_codes=buf.codec.n_codes) == buf.nbytes
    assert fresh.nbytes_at_capacity(0.5) > buf.nbytes  # the default palette (65,536 codes) bounds from above
    assert fresh.nbytes_at_capacity(0.0, n_codes=0) == fresh.nbytes


MAGENT = {"battle": {"env.kwargs.map_size": 18, "env.opponent": "random"},
          "adversarial_pursuit": {"env.kwargs.map_size": 18, "env.opponent": "random"}}


@pytest.mark.parametrize("name", sorted(MAGENT))
def test_magent_observations_round_trip_exactly(name: str) -> None:
    """Real games (random play, deaths included): each observation decodes to its float16 bits, and the value
    sets are what makes codes pay: presence/wall channels binary, few distinct cell vectors."""
    cfg = resolve(name, overrides={**MAGENT[name], "env.horizon": 200})
    env = make_env(cfg.env, seed=5)
    spec = env.spec
    codec = CellCodec(spec.obs_shape, spec.obs_dtype)
    rng = np.random.default_rng(0)
    obs_NO, frames = env.reset(), []
    for _ in range(300):
        res = env.step(rng.integers(0, spec.n_actions, spec.n_agents))
        frames.append(res.obs_NO)
        obs_NO = env.reset() if res.episode_over else res.obs_NO
        frames.append(obs_NO)
    x = np.asarray(frames, dtype=np.float32).astype(spec.obs_dtype)  # what the plain buffer stores
    codes = codec.encode(x)
    assert codes.dtype == np.uint16 and codes.shape == x.shape[:-1]
    back = codec.decode(codes)
    assert back.dtype == x.dtype and np.array_equal(back.view(np.uint16), x.view(np.uint16))
    per_channel = [np.unique(x[..., c]) for c in range(x.shape[-1])]
    binary = [set(v.tolist()) == {0.0, 1.0} for v in per_channel]
    assert sum(binary) >= 3  # wall and presence maps (adversarial pursuit: every channel)
    assert all((v >= 0).all() and (v <= 1).all() for v in per_channel)  # the others are HP fractions (battle)
    assert 2 < codec.n_codes < 1024  # far from the uint16 limit (seen: battle 93, adversarial pursuit 4)
    env.close()


def test_trainer_gives_the_same_run_with_either_layout(tmp_path: Path) -> None:
    """The real trainer on battle with SUPER (bandwidth 0.5): same seed, plain vs compact -> identical networks."""
    nets = {}
    for layout in ("plain", "compact"):
        cfg = resolve("battle", overrides={
            "env.kwargs.map_size": 12, "env.opponent": "random", "env.horizon": 25, "run.num_timesteps": 120,
            "run.eval_points": 1, "run.eval_episodes": 1, "dqn.learning_starts": 20, "dqn.batch_size": 8,
            "dqn.hiddens": 16, "dqn.buffer_size": 60, "run.progress": False, "relay.enabled": True,
            "relay.bandwidth": 0.5, "run.replay_layout": layout, "run.threads": 1})
        torch.manual_seed(0)
        dqn.train(cfg, RunFolder(tmp_path / layout))
        nets[layout] = torch.load(tmp_path / layout / "checkpoints" / "final.pt", weights_only=False)["q_net"]
    for k, v in nets["plain"].items():
        assert torch.equal(v, nets["compact"][k]), k


def test_replay_memory_benchmark_quick() -> None:
    """benchmarks/replay_memory.py --quick runs and reports the compact layout smaller for every env."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "replay_memory.py"), "--quick"],
                          capture_output=True, text=True, timeout=180, cwd=root, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
             if line.split() and line.split()[0] in C.PAPER_ENVS}
    assert sorted(table) == sorted(C.PAPER_ENVS)  # the benchmark's default: the paper's envs
    assert all(float(r[5]) < 1 for r in table.values())  # compact bytes / plain bytes
