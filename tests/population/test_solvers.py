"""Meta-solvers and NashConv on matrix games with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from suPER.population.solvers import META_SOLVERS, best_response_gains, nash, nash_conv, prd

RPS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
PENNIES = np.array([[1.0, -1.0], [-1.0, 1.0]])
# row 2 is strictly dominated by row 0; column 2 by column 1 (the column side minimises);
# without them the game is matching pennies scaled by 2 and shifted: the Nash is (1/2, 1/2) on the rest
DOMINATED = np.array([[2.0, 0.0, 3.0], [0.0, 2.0, 4.0], [-1.0, -1.0, 2.0]])
# a pure saddle point: row 1 / column 0 (3 is the least of its row and the largest of its column)
SADDLE = np.array([[1.0, 5.0, 2.0], [3.0, 4.0, 6.0], [0.0, 7.0, 1.0]])


@pytest.mark.parametrize(("game", "x", "y"), [
    (RPS, [1 / 3] * 3, [1 / 3] * 3),
    (PENNIES, [0.5, 0.5], [0.5, 0.5]),
    (DOMINATED, [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]),
    (SADDLE, [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]),
])
def test_nash_of_known_games(game: np.ndarray, x: list[float], y: list[float]) -> None:
    got_x, got_y = nash(game)
    np.testing.assert_allclose(got_x, x, atol=1e-7)
    np.testing.assert_allclose(got_y, y, atol=1e-7)
    assert abs(nash_conv(game, got_x, got_y)) < 1e-6


def test_nash_conv_of_known_nash_is_zero_and_positive_elsewhere() -> None:
    assert abs(nash_conv(RPS, np.full(3, 1 / 3), np.full(3, 1 / 3))) < 1e-6
    assert abs(nash_conv(SADDLE, np.eye(3)[1], np.eye(3)[0])) < 1e-6
    # pure rock against uniform: the row loses nothing (uniform is indifferent) but the column gains 1 by paper
    x, y = np.eye(3)[0], np.full(3, 1 / 3)
    assert best_response_gains(RPS, x, y) == pytest.approx((0.0, 1.0))
    assert nash_conv(RPS, x, y) == pytest.approx(1.0)


# rock-paper-scissors with doubled rock/scissors stakes: Nash (1/4, 1/2, 1/4), away from PRD's uniform start
BIASED_RPS = np.array([[0.0, -1.0, 2.0], [1.0, 0.0, -1.0], [-2.0, 1.0, 0.0]])


def test_prd_approaches_the_nash() -> None:
    for game, x in ((BIASED_RPS, [0.25, 0.5, 0.25]), (DOMINATED, [0.5, 0.5, 0.0])):
        np.testing.assert_allclose(nash(game)[0], x, atol=1e-7)
        got_x, got_y = prd(game)
        # Euler steps of size dt = 1e-3 around a cycling orbit: the time average is within 0.01 of the Nash
        np.testing.assert_allclose(got_x, x, atol=0.01)
        np.testing.assert_allclose(got_y, x, atol=0.01)
        assert nash_conv(game, got_x, got_y) < 0.02


@pytest.mark.parametrize("games", [range(0, 3), pytest.param(range(3, 6), marks=pytest.mark.slow)])  # ~6 s a game
def test_prd_stays_near_equilibrium_on_random_games(games: range) -> None:
    """NashConv of PRD's mixtures on random zero-sum games with payoffs in [-5, 5] and 2-6 policies a side: below
    0.1 on each (OpenSpiel's defaults; the clip-and-renormalise projection with dt 0.02 used before reached 0.65
    on such games), and the projection keeps every weight >= gamma with sum 1. Six games, three of them with -m
    slow."""
    from suPER.population.solvers import PRD_GAMMA, _project

    rng = np.random.default_rng(0)
    random_games = [rng.uniform(-5, 5, (rng.integers(2, 7), rng.integers(2, 7))) for _ in range(6)]
    for game in (random_games[i] for i in games):
        x, y = prd(game)
        assert nash_conv(game, x, y) < 0.1, game
    p = _project(np.array([0.4, 0.7, 0.6]), 0.2)  # the worked example of the sort algorithm: lam = 0.25
    np.testing.assert_allclose(p, [0.2, 0.45, 0.35])
    q = _project(rng.normal(size=50), PRD_GAMMA)
    assert q.min() >= PRD_GAMMA and abs(q.sum() - 1) < 1e-12


def test_uniform_and_last() -> None:
    u = np.zeros((2, 4))
    assert [list(p) for p in META_SOLVERS["uniform"](u)] == [[0.5, 0.5], [0.25] * 4]
    assert [list(p) for p in META_SOLVERS["last"](u)] == [[0.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


@pytest.mark.parametrize("name", sorted(META_SOLVERS))
def test_every_solver_returns_mixtures(name: str) -> None:
    rng = np.random.default_rng(0)
    x, y = META_SOLVERS[name](rng.normal(size=(3, 5)))
    assert x.shape == (3,) and y.shape == (5,)
    for p in (x, y):
        assert (p >= 0).all() and p.sum() == pytest.approx(1.0)


def test_bad_matrix_is_refused() -> None:
    with pytest.raises(ValueError, match="payoff matrix"):
        nash(np.array([1.0, 2.0]))


def test_a_registered_meta_solver_reaches_help_errors_and_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """One record per meta-solver: registering one puts it in --meta-solver's help, the config's accepted names and
    docs/reference.md's table; a taken name is refused."""
    import sys
    from pathlib import Path

    from typer.testing import CliRunner

    from suPER.population import solvers
    from suPER.population.config import PopulationConfig

    spec = solvers.MetaSolverSpec("first", lambda u: (np.eye(len(u))[0], np.eye(u.shape[1])[0]),
                                  "all weight on the first policy")
    solvers.register(spec)
    try:
        assert PopulationConfig(env="battle", meta_solver="first").validate().solver == "first"
        with pytest.raises(ValueError, match="registered already"):
            solvers.register(spec)
        scripts = str(Path(__file__).resolve().parents[2] / "scripts")
        sys.path.insert(0, scripts)
        try:
            import reference
        finally:
            sys.path.remove(scripts)
        assert "| `first` | all weight on the first policy |" in reference.meta_solvers()
    finally:
        solvers.META_SOLVERS.pop("first")
    from suPER.population import cli as population_cli

    monkeypatch.setenv("COLUMNS", "200")
    text = CliRunner().invoke(population_cli.population_app, ["psro", "--help"]).output
    assert "nash | uniform | last | prd" in text  # the help is made when the command is defined
