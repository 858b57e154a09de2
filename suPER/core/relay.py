"""SUPER's selection and routing: which fresh transitions each agent relays, and to whom.

Pure numpy (no trainer, replay, torch or RLlib imports): every trainer that shares (the native
batched trainer and the RLlib ``suPERDQN``) calls this one module.

After each rollout fragment, sender ``s`` has ``n_s`` fresh transitions with TD errors
``td_i = Q_online(o_i, a_i) - [r_i + gamma^n (1 - d_i) Q_target(o'_i, a*_i)]`` computed by its own
online and target networks before the update. With bandwidth ``b`` it relays row ``i`` when:

* ``quantile``: ``|td_i| > q_{1-b}(H_s)``, the (1-b) quantile (linear interpolation) of the sliding
  window ``H_s`` of the sender's last ``window`` |TD| values, the current fragment included;
* ``gaussian``: ``|td_i| > mu(H_s) + sigma(H_s) * z_{1-b}`` with ``z_{1-b} = Phi^{-1}(1 - b)``;
* ``gaussian_variance``: ``|td_i| > mu(H_s) + sigma^2(H_s) * z_{1-b}`` -- the original code passed the
  variance as the scale (REFERENCE section 14, item 2); kept to reproduce its numbers;
* ``stochastic``: independently with probability ``p_i = min(1, b * n_s * |td_i| / sum_j |td_j|)``,
  drawn from the generator passed in (expected count ``b * n_s`` unless clipped);
* ``topk``: the ``relay.params.k`` rows of highest |td| of the fragment (the bandwidth only acts at its edges).

Each rule is one registered record in ``suPER.core.selection.SELECTION_RULES`` (its selector, whether
it uses the window, its own parameters); ``Relay`` dispatches by registry lookup.

``b = 0`` relays nothing and ``b = 1`` relays everything in every mode (share-all). The original's
strict ``>`` would keep the window minimum back in quantile mode at ``b = 1``; we special-case the
edges so "share-all" means all.

Routing: every selected row goes to every other *participant* (team member present in this
fragment); a sender never receives its own rows. Opponents and non-team agents neither send nor
receive; under parameter sharing there is nobody to relay to and the relay is a no-op.

Shapes: ``N`` agents, ``T`` rows per agent in the fragment, ``K`` relayed (sender, row, receiver)
triples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from suPER import seeds
from suPER.arrays import concatenate, is_tensor, like, to_numpy, uniform, zeros
from suPER.config import ConfigError, check_relay_setting
from suPER.core.selection import SELECTION_RULES, check_mode, mode_names

if TYPE_CHECKING:
    from suPER.config import RelayConfig

MODES = mode_names()
"""Selection rules (the names registered in ``suPER.core.selection.SELECTION_RULES``)."""

RELAY_SEED_OFFSET = seeds.RELAY_SEED_OFFSET
"""The relay's generator is seeded with the run seed + this, on every backend (``suPER.seeds``)."""

PAPER_FLAGS = {"relay.mode": "--suPER_mode", "relay.bandwidth": "--suPER_bandwidth", "relay.window": "--suPER_window",
               "relay.insertion_priority": "--suPER_insertion_priority"}
"""How ``Relay``'s own checks name its settings when no labels are passed (the paper's flags)."""

INSERTION_PRIORITIES = ("max", "sender", "legacy")
"""How a receiver's buffer prioritises relayed rows (see ``insertion_priorities``)."""


def team_mask(agent_ids: Sequence[str], team: str | Sequence[str] | None,
              exclude: Sequence[str] = ()) -> np.ndarray:
    """Which agents take part in relaying.

    Args:
        agent_ids: ids of the N agents (or policies) in array order.
        team: ``None``/``""`` = all; a string with commas = an explicit list of ids; any other string =
            substring match on the id, as the original (``"blue"`` selects ``blue_0..blue_5``); a
            sequence = explicit ids.
        exclude: ids that never take part (fixed opponents).

    Returns:
        bool [N].
    """
    if team is None or team == "":
        mask = np.ones(len(agent_ids), dtype=bool)
    elif isinstance(team, str) and "," not in team:
        mask = np.array([team in a for a in agent_ids], dtype=bool)
    else:
        wanted = {t.strip() for t in (team.split(",") if isinstance(team, str) else team) if t.strip()}
        mask = np.array([a in wanted for a in agent_ids], dtype=bool)
    excluded = set(exclude)
    return mask & np.array([a not in excluded for a in agent_ids], dtype=bool)


class TDWindow:
    """Per-sender ring buffers of the last ``window`` |TD| values, [N, window] (numpy, or a tensor on ``device``)."""

    def __init__(self, n_agents: int, window: int, device: Any = None) -> None:
        self.window = window
        self.values_NW: Any = zeros((n_agents, window), device)  # a packed run's device: next to its TD errors
        self.count_N = np.zeros(n_agents, dtype=np.int64)
        """total values ever pushed per agent (the ring position is count % window); on the host"""

    def push(self, agent: int, td_abs: Any) -> Any:
        """Append ``td_abs`` (of the window's kind) to agent's window and return the current window contents
        (oldest order lost)."""
        td_abs = td_abs[-self.window:]
        k = len(td_abs)
        pos = (self.count_N[agent] + np.arange(k)) % self.window
        self.values_NW[agent, like(self.values_NW, pos)] = td_abs
        self.count_N[agent] += k
        return self.values_NW[agent, : min(self.count_N[agent], self.window)]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host arrays for a checkpoint (the same whichever kind holds the window)."""
        return {"values_NW": to_numpy(self.values_NW).copy(), "count_N": self.count_N.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from ``state_dict``."""
        self.values_NW[...] = like(self.values_NW, to_numpy(state["values_NW"]))
        self.count_N[...] = state["count_N"]


def threshold(mode: str, window_values: np.ndarray, bandwidth: float) -> float:
    """The |TD| threshold above which a row is relayed (the windowed rules: quantile and gaussian modes).

    Args:
        mode: quantile | gaussian | gaussian_variance.
        window_values: the sender's |TD| window, current fragment included.
        bandwidth: b in (0, 1).

    Returns:
        ``q_{1-b}(H)``, ``mu + sigma z_{1-b}`` or ``mu + sigma^2 z_{1-b}``. NaN when the spread is 0 in
        the gaussian modes (scipy's convention; nothing is relayed then, as in the original).
    """
    empty = np.zeros(0)
    return float(SELECTION_RULES[mode].select(empty, np.asarray(window_values, dtype=np.float64), bandwidth,
                                              None, {})[1])


@dataclass
class RelayPlan:
    """Which rows go where, plus statistics for logging."""

    sender_K: np.ndarray
    """int64 [K] sending agent of each relayed copy"""
    row_K: np.ndarray
    """int64 [K] row (time index within the fragment) of the sender's transition"""
    receiver_K: np.ndarray
    """int64 [K] receiving agent"""
    selected_NT: np.ndarray
    """bool [N, T] rows selected for relay"""
    fraction_N: np.ndarray
    """float [N] selected / fresh rows per agent (0 for non-participants and agents with no rows)"""
    fresh_N: np.ndarray
    """int64 [N] fresh rows per agent in this fragment (0 for an agent dead throughout it)"""
    received_N: np.ndarray
    """int64 [N] relayed rows received per agent"""
    threshold_N: np.ndarray
    """float [N] threshold used per sender (NaN for stochastic mode, a rule without one, and non-participants)"""

    @property
    def n_relayed(self) -> int:
        """Number of copies inserted (K)."""
        return int(len(self.receiver_K))


def relayed_fraction(selected_N: np.ndarray, fresh_N: np.ndarray) -> np.ndarray:
    """float [N] ``selected_N / fresh_N`` per sender, 0 where it had no fresh rows."""
    return np.where(fresh_N > 0, selected_N / np.maximum(fresh_N, 1), 0.0)


@dataclass
class RelayTally:
    """What each sender relayed since the last evaluation, for the metrics: the fraction of its fresh rows it sent,

        fraction_n = sum_f selected_nf / sum_f fresh_nf   over the fragments f since the last evaluation

    (0 for a sender with no rows in any of them). Pooling the counts, rather than averaging each fragment's fraction,
    leaves out the fragments in which a sender had no rows: on battle a dead agent has none until its episode ends, and
    averaging counted each such fragment as a fraction of 0 (share-all, which sends every row, read 0.79-0.92 there).
    """

    selected_N: np.ndarray
    """int64 [N] rows each sender relayed"""
    fresh_N: np.ndarray
    """int64 [N] fresh rows each sender had"""

    @classmethod
    def zeros(cls, n_agents: int) -> RelayTally:
        """An empty tally for ``n_agents`` senders."""
        return cls(np.zeros(n_agents, dtype=np.int64), np.zeros(n_agents, dtype=np.int64))

    def add(self, plan: RelayPlan) -> None:
        """Count one fragment's plan."""
        self.selected_N += np.asarray(plan.selected_NT).sum(axis=1)
        self.fresh_N += plan.fresh_N

    def fraction_N(self) -> np.ndarray:
        """float [N] relayed / fresh rows per sender (0 where it had none)."""
        return relayed_fraction(self.selected_N, self.fresh_N)

    def mean_fraction(self, participants_N: np.ndarray) -> float:
        """The mean of ``fraction_N`` over the participants that had rows (0 when none had)."""
        had_rows = participants_N & (self.fresh_N > 0)
        return float(self.fraction_N()[had_rows].mean()) if had_rows.any() else 0.0

    def clear(self) -> None:
        """Start the next evaluation's interval."""
        self.selected_N[:] = 0
        self.fresh_N[:] = 0


@dataclass(frozen=True)
class InsertionPolicy:
    """How relayed (and, for ``legacy``, own) rows are prioritised in the receiver's buffer; one per run."""

    rule: str = "max"
    """max | sender | legacy (``INSERTION_PRIORITIES``)"""
    eps: float = 1e-6
    """the buffer's priority epsilon (``dqn.per_eps``)"""
    sender_side: bool = False
    """the env used worker-side prioritization in the original (its env record's ``sender_side_priorities``,
    ``suPER.envs.record.sender_side_priorities``)"""

    @classmethod
    def from_config(cls, rc: RelayConfig, per_eps: float, sender_side: bool = False) -> InsertionPolicy:
        """The policy of a run: ``rc.insertion_priority``, ``per_eps`` and the env's sender-side flag."""
        return cls(rc.insertion_priority, float(per_eps), bool(sender_side))

    def priorities(self, td_abs_NT: Any, plan: RelayPlan) -> np.ndarray | None:
        """``insertion_priorities`` of ``plan``'s copies with this policy's rule, eps and sender-side flag.

        ``td_abs_NT``: the fragment's |TD| (array or tensor); each copy's is gathered only when the rule needs it
        (not for ``max``: no gather, so a tensor's stay on its device and a pack pays no op per run)."""
        if self.rule == "max":
            return None
        td_abs_K = to_numpy(td_abs_NT[plan.sender_K, plan.row_K])
        return insertion_priorities(self.rule, td_abs_K, plan.receiver_K, self.eps, self.sender_side)


class Relay:
    """SUPER selection + routing for one team, with per-sender TD windows and a seeded generator.

    Trainers build it with ``Relay.from_config`` (the one place that decides seed offset, priority
    eps and the legacy insertion rule); the plain constructor is for tests and direct use.
    """

    def __init__(self, agent_ids: Sequence[str], mode: str = "quantile", bandwidth: float = 0.1,
                 window: int = 1500, team: str | Sequence[str] | None = None,
                 exclude: Sequence[str] = (), rng: np.random.Generator | None = None,
                 params: Mapping[str, Any] | None = None, insertion: InsertionPolicy | None = None,
                 labels: Mapping[str, str] | None = None, device: Any = None) -> None:
        labels = {**PAPER_FLAGS, **(labels or {})}
        self.rule = check_mode(mode, labels.get("relay.mode"))
        for key, value in (("relay.bandwidth", bandwidth), ("relay.window", window)):
            check_relay_setting(key, value, labels.get(key))
        self.agent_ids = list(agent_ids)
        self.mode = mode
        own = {p.name for p in self.rule.params}  # another rule's parameters are not this relay's business
        self.params = self.rule.check_params({k: v for k, v in (params or {}).items() if k in own}, labels)
        self.bandwidth = float(bandwidth)
        self.participants_N = team_mask(self.agent_ids, team, exclude)
        self.windows = TDWindow(len(self.agent_ids), window, device)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.insertion = insertion if insertion is not None else InsertionPolicy()

    @classmethod
    def from_config(cls, rc: RelayConfig, agent_ids: Sequence[str], *, seed: int | None, per_eps: float,
                    sender_side: bool = False, team: str | Sequence[str] | None = None,
                    exclude: Sequence[str] = (), labels: Mapping[str, str] | None = None,
                    device: Any = None) -> Relay:
        """The relay of a run, the same on every backend.

        Args:
            rc: the typed relay config (mode, bandwidth, window, team, insertion priority, the rule's parameters).
            agent_ids: the N sharing policies/modules in array order.
            seed: the run seed; the relay's generator gets ``seed + RELAY_SEED_OFFSET`` (None: unseeded).
            per_eps: the receiver buffers' priority epsilon (``dqn.per_eps``) for sender/legacy priorities.
            sender_side: the env's ``record.sender_side_priorities`` (the legacy rule's sender-side flag; the
                trainer looks it up with ``suPER.envs.record.sender_side_priorities``); False for other envs.
            team: overrides ``rc.team`` (RLlib accepts a list of module ids); None: ``rc.team`` ("" = all).
            exclude: ids that never take part (fixed opponents, non-trainable modules).
            labels: dotted key -> the flag as typed, for error messages.
            device: a torch device: keep the windows there and select on TD tensors (packed runs with device
                replay); None: numpy windows.
        """
        return cls(agent_ids, mode=rc.mode, bandwidth=float(rc.bandwidth), window=int(rc.window),
                   team=(team if team is not None else rc.team) or None, exclude=exclude,
                   rng=np.random.default_rng(None if seed is None else seed + RELAY_SEED_OFFSET), params=rc.params,
                   insertion=InsertionPolicy.from_config(rc, per_eps, sender_side), labels=labels, device=device)

    @property
    def active(self) -> bool:
        """False when fewer than two agents take part (e.g. parameter sharing): nothing to relay."""
        return int(self.participants_N.sum()) >= 2

    def select(self, td_abs_NT: Any, valid_NT: np.ndarray) -> tuple[Any, Any]:
        """Pick rows to relay per sender; updates the windows of participating senders.

        Args:
            td_abs_NT: |TD| of each fresh row, float [N, T]: a numpy array, or a tensor on the windows' device
                (the same rules, ``suPER.core.selection``, on the device).
            valid_NT: bool [N, T] host array, the row exists (the agent was alive at that step).

        Returns:
            (selected_NT bool [N, T], threshold_N float [N]), of ``td_abs_NT``'s kind.
        """
        n_agents = td_abs_NT.shape[0]
        tensor = is_tensor(td_abs_NT)
        selected = like(td_abs_NT, np.zeros(td_abs_NT.shape, dtype=bool))
        thresholds = like(td_abs_NT, np.full(n_agents, np.nan))
        valid_NT = to_numpy(valid_NT)
        b, rule = self.bandwidth, self.rule
        for s in np.flatnonzero(self.participants_N):  # loop over senders (<= team size), not rows
            rows = np.flatnonzero(valid_NT[s])
            if rows.size == 0:
                continue
            rows_x = like(td_abs_NT, rows)
            td = td_abs_NT[s, rows_x]
            td = td.double() if tensor else td.astype(np.float64)
            hist = self.windows.push(int(s), td) if rule.uses_window else td
            if b >= 1.0 or b <= 0.0:  # share-all / share-nothing, whatever the mode
                chosen = like(td, np.full(rows.size, b >= 1.0))
            else:
                u = uniform(self.rng, tuple(td.shape), td) if rule.draws_per_row else None
                chosen, thresholds[s] = rule.select(td, hist, b, u, self.params)
            selected[s, rows_x] = chosen
        return selected, thresholds

    def route(self, selected_NT: np.ndarray, present_N: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Expand selected rows into (sender, row, receiver) triples.

        Every selected row of sender s goes to each participant r != s that is present in this
        fragment. Vectorized: one repeat over receivers, no loop over rows.
        """
        receivers = np.flatnonzero(self.participants_N & present_N)
        sender, row = np.nonzero(selected_NT)
        if sender.size == 0 or receivers.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        s_K = np.repeat(sender, receivers.size)
        r_K = np.repeat(row, receivers.size)
        recv_K = np.tile(receivers, sender.size)
        keep = recv_K != s_K
        return s_K[keep].astype(np.int64), r_K[keep].astype(np.int64), recv_K[keep].astype(np.int64)

    def plan(self, td_abs_NT: np.ndarray, valid_NT: np.ndarray) -> RelayPlan:
        """Select and route one fragment's fresh rows."""
        if not self.active:
            n_agents = td_abs_NT.shape[0]
            return self.plan_selected(np.zeros(td_abs_NT.shape, dtype=bool), np.full(n_agents, np.nan), valid_NT)
        return self.plan_selected(*self.select(td_abs_NT, valid_NT), valid_NT)

    def plan_selected(self, selected: Any, thresholds: Any, valid_NT: np.ndarray) -> RelayPlan:
        """Route rows already selected (``select``, or ``select_many`` for a pack) and count them."""
        n_agents = selected.shape[0]
        # routing sizes the receivers' writes: one [N, T] copy to the host when selected on a device
        selected, thresholds = to_numpy(selected), to_numpy(thresholds)
        present = np.asarray(valid_NT.any(axis=1), dtype=bool)
        s_K, r_K, recv_K = self.route(selected, present)
        fresh = valid_NT.sum(axis=1)
        fraction = relayed_fraction(selected.sum(axis=1), fresh)
        received = np.bincount(recv_K, minlength=n_agents).astype(np.int64)
        return RelayPlan(s_K, r_K, recv_K, selected, fraction, fresh.astype(np.int64), received, thresholds)

    def state_dict(self) -> dict[str, Any]:
        """Windows and generator state, for checkpoints."""
        return {"windows": self.windows.state_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict``."""
        self.windows.load_state_dict(state["windows"])
        self.rng.bit_generator.state = state["rng"]


def select_many(relays: Sequence[Relay], td_abs_RNT: Any, valid_RNT: np.ndarray, windows_RNW: Any = None,
                rows: Sequence[int] | None = None, to_host: bool = False) -> list[tuple[Any, Any]]:
    """``relays[i].select(td_abs_RNT[i], valid_RNT[i])`` for every i, batched over relays and senders where it can be.

    A pack's runs each have their own ``Relay`` (windows, generator, checkpoint); selecting them one sender at a
    time costs ``R x N`` rule calls per fragment, which on a GPU is ``R x N`` times a handful of kernel launches.
    Batched, it is one window write, one call of the rule on ``[G, T]`` rows (each rule is written along the last
    axis, ``suPER.core.selection``) and, for rules that draw, one draw per run from its own generator (the same
    numbers in the same order as sender by sender). Batched when the relays are active and share the rule,
    bandwidth, parameters, window length and participants, every
    participant has all ``T`` rows of the fragment and (windowed rules) their windows are equally full and given
    stacked; otherwise relay by relay. Either way the result, the windows and the generators equal the relays'
    own ``select`` calls (``tests/core/test_relay.py``).

    Args:
        relays: R relays.
        td_abs_RNT: |TD| of the fresh rows, float [R, N, T] (numpy, or a tensor on the windows' device).
        valid_RNT: bool [R, N, T] host array.
        windows_RNW: the relays' windows side by side: ``relays[i].windows.values_NW`` is the view
            ``windows_RNW[rows[i]]`` (a pack allocates them so); None: relay by relay for windowed rules.
        rows: row of each relay in ``windows_RNW`` (default ``0 .. R-1``).
        to_host: return numpy arrays, copied off the device once for all relays when selected batched.

    Returns:
        Per relay, ``(selected_NT, threshold_N)`` of ``td_abs_RNT``'s kind (numpy with ``to_host``).
    """
    stacked = _select_stacked(relays, td_abs_RNT, valid_RNT, windows_RNW, rows)
    if stacked is None:
        picks = [rel.select(td_abs_RNT[i], valid_RNT[i]) for i, rel in enumerate(relays)]
        return [(to_numpy(s), to_numpy(t)) for s, t in picks] if to_host else picks
    selected, thresholds = (to_numpy(x) for x in stacked) if to_host else stacked
    return [(selected[i], thresholds[i]) for i in range(len(relays))]


def _select_stacked(relays: Sequence[Relay], td_abs_RNT: Any, valid_RNT: np.ndarray, windows_RNW: Any,
                    rows: Sequence[int] | None) -> tuple[Any, Any] | None:
    """``select_many``'s batched case as (selected_RNT, threshold_RN), or None (and nothing advanced) where it is
    relay by relay."""
    R = len(relays)
    if R == 0:
        return None
    first = relays[0]
    rule, b = first.rule, first.bandwidth
    part_S = np.flatnonzero(first.participants_N)
    counts = {int(rel.windows.count_N[s]) for rel in relays for s in part_S}
    batched = (all(rel.active for rel in relays)
               and all(rel.rule is rule and rel.bandwidth == b and rel.params == first.params
                       and rel.windows.window == first.windows.window
                       and np.array_equal(rel.participants_N, first.participants_N) for rel in relays)
               and bool(np.asarray(valid_RNT)[:, part_S].all())
               and (not rule.uses_window or (windows_RNW is not None and len(counts) == 1)))
    if not batched:
        return None
    tensor = is_tensor(td_abs_RNT)
    n_agents, T = td_abs_RNT.shape[1], td_abs_RNT.shape[2]
    S = like(td_abs_RNT, part_S)
    td_RST = td_abs_RNT[:, S]
    td_RST = td_RST.double() if tensor else td_RST.astype(np.float64)
    hist = td_RST
    if rule.uses_window:  # TDWindow.push of every participant of every relay at once
        window, count = first.windows.window, counts.pop()
        new = td_RST[..., -window:]
        k = new.shape[-1]
        pos = (count + np.arange(k)) % window
        row_idx = np.arange(R) if rows is None else np.asarray(rows)
        windows_RNW[like(windows_RNW, row_idx)[:, None, None], like(windows_RNW, part_S)[None, :, None],
                    like(windows_RNW, pos)[None, None, :]] = new
        for rel in relays:
            rel.windows.count_N[part_S] += k
        hist = windows_RNW[like(windows_RNW, row_idx)][:, S, : min(count + k, window)]
    G = R * len(part_S)
    selected = like(td_abs_RNT, np.zeros(td_abs_RNT.shape, dtype=bool))
    thresholds = like(td_abs_RNT, np.full((R, n_agents), np.nan))
    if b >= 1.0 or b <= 0.0:  # share-all / share-nothing, whatever the mode
        selected[:, S] = b >= 1.0
    else:
        u = None
        if rule.draws_per_row:  # each run's generator, its senders in order: the numbers of sender-by-sender draws
            u = concatenate([uniform(rel.rng, (len(part_S), T), td_RST) for rel in relays])
        chosen, c = rule.select(td_RST.reshape(G, T), hist.reshape(G, hist.shape[-1]), b, u, first.params)
        selected[:, S] = chosen.reshape(R, len(part_S), T)
        thresholds[:, S] = c.reshape(R, len(part_S))
    return selected, thresholds


def plan_many(relays: Sequence[Relay], td_abs_RNT: Any, valid_RNT: np.ndarray, windows_RNW: Any = None,
              rows: Sequence[int] | None = None) -> list[RelayPlan]:
    """``relays[i].plan(...)`` for every i, selecting through ``select_many``."""
    if not all(rel.active for rel in relays):
        return [rel.plan(td_abs_RNT[i], valid_RNT[i]) for i, rel in enumerate(relays)]
    # routing needs the selections on the host: one copy for all relays, not two per relay
    picks = select_many(relays, td_abs_RNT, valid_RNT, windows_RNW, rows, to_host=True)
    return [rel.plan_selected(sel, thr, valid_RNT[i]) for i, (rel, (sel, thr)) in enumerate(zip(relays, picks))]


def insertion_priorities(rule: str, td_abs_K: np.ndarray, receiver_K: np.ndarray, eps: float,
                         sender_side_priorities: bool) -> np.ndarray | None:
    """Priority (before ^alpha) of relayed rows in the receiver's buffer.

    Args:
        rule: ``max`` -> None (the buffer uses the receiver's current max priority: the PER
            convention); ``sender`` -> the sender's ``|td| + eps``; ``legacy`` -> the original's RLlib 2.1
            behaviour: every row of one insertion call gets the first row's ``weights`` value, which is
            1.0 without worker-side prioritization (pursuit) and the sender's ``|td| + eps`` of the
            receiver's first relayed row with it (battle, adversarial pursuit).
        td_abs_K: the sender's |TD| of each relayed copy.
        receiver_K: receiver of each copy (copies of one receiver form one insertion call).
        eps: the buffer's priority epsilon.
        sender_side_priorities: the env used worker-side prioritization in the original.
    """
    if rule == "max":
        return None
    if rule == "sender":
        return td_abs_K.astype(np.float64) + eps
    if rule == "legacy":
        if not sender_side_priorities:
            return np.ones(len(td_abs_K), dtype=np.float64)
        if len(td_abs_K) == 0:
            return np.zeros(0, dtype=np.float64)
        receivers, first_k = np.unique(receiver_K, return_index=True)
        idx = first_k[np.searchsorted(receivers, receiver_K)]
        return td_abs_K[idx].astype(np.float64) + eps
    raise ConfigError(f"--suPER_insertion_priority: expected one of {', '.join(INSERTION_PRIORITIES)}, got {rule!r}")
