"""Meta-solvers of a two-player zero-sum meta-game, and NashConv of a mixture (pure numpy / scipy).

The meta-game is a matrix ``u_IJ``: the row side's expected payoff when its policy i meets the column
side's policy j; the column side gets ``-u_IJ`` (zero-sum). A meta-solver maps ``u_IJ`` to a mixture
per side, ``(x_I, y_J)``, each a probability vector. Registry ``META_SOLVERS`` (name -> ``MetaSolverSpec``
record: its function and a one-line summary, from which ``--meta-solver``'s help, its error and the docs' table
are made); the population commands pick one by name (``psro``: ``nash``, ``fsp``: ``uniform``, ``selfplay``: ``last``,
or any of them with ``--meta-solver``).

* ``nash``: the minimax mixtures by linear programming (``scipy.optimize.linprog``, HiGHS). Row:
  ``max v  s.t.  (x^T u)_j >= v for all j, sum x = 1, x >= 0``; column: ``min w  s.t.  (u y)_i <= w``.
  Every Nash equilibrium of a zero-sum game is such a pair and all have the same value ``v = w``.
* ``uniform``: ``x = 1/|I|`` (fictitious self-play: the average of all past best responses).
* ``last``: all weight on the newest policy (plain self-play).
* ``prd``: projected replicator dynamics (Lanctot et al. 2017, "A Unified Game-Theoretic Approach to
  MARL"): ``x <- P(x + dt * x * (u y - x^T u y))`` and ``y <- P(y + dt * y * (-(x^T u) + x^T u y))``,
  where ``P`` is the Euclidean projection onto the simplex of weights at least ``gamma`` (Wang &
  Carreira-Perpinan 2013's sort algorithm, shifted by gamma). The answer is the average of all iterates
  (replicator orbits cycle around an interior equilibrium, e.g. rock-paper-scissors; their time average
  converges). Step, floor, iterations, projection and averaging are OpenSpiel's defaults
  (``projected_replicator_dynamics``: 1e5 steps of 1e-3, gamma 1e-6, exact projection, whole trajectory); the
  clip-and-renormalise projection with the last half averaged, used before, left NashConv up to 0.65 on
  random games with payoffs in [-5, 5] (tests/population/test_solvers.py).

NashConv of ``(x, y)``: the sum of both sides' gains from deviating to a best response,
``NashConv = max_i (u y)_i - x^T u y + x^T u y - min_j (x^T u)_j = max_i (u y)_i - min_j (x^T u)_j``;
0 exactly at a Nash equilibrium, and ``exploitability = NashConv / 2`` (OpenSpiel's convention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MetaSolver = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``u_IJ -> (x_I, y_J)``: the row and column sides' mixtures"""

PRD_ITERATIONS = 100_000
"""projected replicator dynamics: iterations (OpenSpiel's default)"""
PRD_DT = 1e-3
"""projected replicator dynamics: step size (OpenSpiel's default)"""
PRD_GAMMA = 1e-6
"""projected replicator dynamics: the least weight of a strategy (OpenSpiel's default)"""


def _check(u_IJ: np.ndarray) -> np.ndarray:
    """A finite 2-d payoff matrix with at least one row and column (float64)."""
    u = np.asarray(u_IJ, dtype=np.float64)
    if u.ndim != 2 or 0 in u.shape or not np.isfinite(u).all():
        raise ValueError(f"meta-game: expected a finite 2-d payoff matrix, got shape {u.shape}")
    return u


def _maximin(u_IJ: np.ndarray) -> np.ndarray:
    """The row side's maximin mixture: ``argmax_x min_j (x^T u)_j`` by linear programming."""
    from scipy.optimize import linprog

    n, m = u_IJ.shape
    # variables [x_1..x_n, v]; minimise -v s.t. v - (x^T u)_j <= 0, sum x = 1, x >= 0, v free
    c = np.zeros(n + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-u_IJ.T, np.ones((m, 1))])
    a_eq = np.hstack([np.ones((1, n)), np.zeros((1, 1))])
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=[1.0],
                  bounds=[(0, None)] * n + [(None, None)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"meta-game: linprog failed ({res.message})")
    x = np.clip(res.x[:n], 0.0, None)
    return x / x.sum()


def nash(u_IJ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimax (Nash) mixtures of the zero-sum game ``u_IJ`` (module docstring)."""
    u = _check(u_IJ)
    return _maximin(u), _maximin(-u.T)


def uniform(u_IJ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Uniform mixtures over each side's policies (fictitious self-play)."""
    n, m = _check(u_IJ).shape
    return np.full(n, 1.0 / n), np.full(m, 1.0 / m)


def last(u_IJ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All weight on each side's newest (last) policy (self-play)."""
    n, m = _check(u_IJ).shape
    return np.eye(n)[-1], np.eye(m)[-1]


def _project(p: np.ndarray, gamma: float) -> np.ndarray:
    """The Euclidean projection of ``p`` onto ``{x : x_i >= gamma, sum x = 1}``: ``x = max(p - lam, gamma)`` with the
    one ``lam`` that makes it sum to 1, found from the sorted weights (Wang & Carreira-Perpinan 2013, shifted by
    gamma; OpenSpiel's exact projection)."""
    n = len(p)
    u = np.sort(p)[::-1]
    k = np.arange(1, n + 1)
    shift = (1.0 - np.cumsum(u) - (n - k) * gamma) / k  # -lam if the k largest weights stay above gamma
    rho = int(np.searchsorted(u + shift <= gamma, True))
    return np.maximum(p + shift[rho - 1], gamma)


def prd(u_IJ: np.ndarray, iterations: int = PRD_ITERATIONS, dt: float = PRD_DT,
        gamma: float = PRD_GAMMA) -> tuple[np.ndarray, np.ndarray]:
    """Projected replicator dynamics from the uniform mixtures; the mean of all iterates (module docstring)."""
    u = _check(u_IJ)
    n, m = u.shape
    x, y = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    sum_x, sum_y = np.zeros(n), np.zeros(m)
    for _ in range(iterations):
        uy_I, xu_J = u @ y, x @ u
        value = x @ uy_I
        x, y = _project(x + dt * x * (uy_I - value), gamma), _project(y + dt * y * (value - xu_J), gamma)
        sum_x += x
        sum_y += y
    return sum_x / iterations, sum_y / iterations


@dataclass(frozen=True)
class MetaSolverSpec:
    """One meta-solver: what users type, its function, and one line for ``--help`` and the docs."""

    name: str
    """``--meta-solver NAME``, ``meta_solver`` in population.json"""
    solve: MetaSolver
    summary: str

    def __call__(self, u_IJ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.solve(u_IJ)


META_SOLVERS: dict[str, MetaSolverSpec] = {}
"""name -> meta-solver record (``--meta-solver NAME``), in registration order"""


def register(spec: MetaSolverSpec) -> MetaSolverSpec:
    """Add a meta-solver; its name must be new.

    Raises:
        ValueError: the name is taken.
    """
    if spec.name in META_SOLVERS:
        raise ValueError(f"meta-solver {spec.name!r} is registered already")
    META_SOLVERS[spec.name] = spec
    return spec


def solver_names() -> str:
    """``nash | uniform | ...`` for help texts and errors."""
    return " | ".join(META_SOLVERS)


register(MetaSolverSpec("nash", nash, "minimax mixtures by linear programming (PSRO's default)"))
register(MetaSolverSpec("uniform", uniform, "uniform over each side's policies (fictitious self-play's default)"))
register(MetaSolverSpec("last", last, "all weight on each side's newest policy (self-play's default)"))
register(MetaSolverSpec("prd", prd, "projected replicator dynamics, mean of the iterates (OpenSpiel's defaults)"))


def nash_conv(u_IJ: np.ndarray, x_I: np.ndarray, y_J: np.ndarray) -> float:
    """NashConv of the mixtures ``(x_I, y_J)`` in the zero-sum game ``u_IJ``: ``max_i (u y)_i - min_j (x^T u)_j``.

    Args:
        u_IJ: the row side's payoffs.
        x_I: the row side's mixture.
        y_J: the column side's mixture.

    Returns:
        The sum of both sides' best-response gains (>= 0 up to rounding; 0 at a Nash equilibrium).
    """
    u = _check(u_IJ)
    return float((u @ np.asarray(y_J, dtype=np.float64)).max() - (np.asarray(x_I, dtype=np.float64) @ u).min())


def best_response_gains(u_IJ: np.ndarray, x_I: np.ndarray, y_J: np.ndarray) -> tuple[float, float]:
    """Each side's gain from its best pure response to the other's mixture: ``(max_i (u y)_i - x^T u y,
    x^T u y - min_j (x^T u)_j)``; their sum is ``nash_conv``."""
    u = _check(u_IJ)
    value = float(x_I @ u @ y_J)
    return float((u @ y_J).max() - value), float(value - (x_I @ u).min())
