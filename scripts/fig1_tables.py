#!/usr/bin/env python
"""Print docs/results.md's Figure 1 tables from the committed records, so the doc is pasted, never retyped.

    python scripts/fig1_tables.py [results/fig1]

Two markdown tables: each run's final score (the mean of its last 10% of evaluations) per env and configuration,
seeds in order; and the claim table (``analysis.claim_table``: every SUPER rule with runs minus each baseline, Welch
p Holm-adjusted per env, TOST at 10% of the env's random-to-best range, the verdict under each final-score window,
seeds for 80% power), as ``plot --analysis`` computes it with the shipped random-policy returns.
``tests/test_results_records.py`` checks that results.md's tables hold these numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from suPER import analysis, plotting

ROOT = Path(__file__).resolve().parent.parent

ENVS = (("pursuit", "pursuit (200k)"), ("battle", "battle (100k)"),
        ("adversarial_pursuit", "adversarial pursuit (100k)"))
"""(env, its row name: the budget in env steps)"""

CONFIGURATIONS = (("no sharing", "ddqn"), ("SUPER quantile", "ddqn_super_quantile"),
                  ("SUPER gaussian", "ddqn_super_gaussian"), ("SUPER stochastic", "ddqn_super_stochastic"),
                  ("share-all", "ddqn_super_gaussian [shareall]"), ("parameter sharing", "ddqn_ps"))
"""(column name, configuration label) of the final-score table"""


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def markdown(curves: list[plotting.RunCurve]) -> str:
    """The final-score table (each run's score, seeds in order) and the claim table (``analysis.claim_table``, 2,000
    bootstrap resamples as ``plot --analysis``), envs in ``ENVS`` order."""
    import tempfile

    scores = analysis.scores_by_configuration(curves)
    with tempfile.TemporaryDirectory() as tmp:  # measurements the shipped data lack would land here
        random = analysis.random_returns(curves, Path(tmp) / "random_returns.json")
    margins = analysis.margins_of(analysis.normalize(scores, random)[1])
    lines = ["| env | " + " | ".join(name for name, _ in CONFIGURATIONS) + " |",
             "|---|" + "---:|" * len(CONFIGURATIONS)]
    for env, row_name in ENVS:
        cells = [", ".join(f"{v:+.1f}" for v in scores.get(env, {}).get(label, [])) for _, label in CONFIGURATIONS]
        lines.append(f"| {row_name} | " + " | ".join(cells) + " |")
    lines += ["", "| env | SUPER rule | baseline | runs | IQM difference | 95% CI | P(improvement) | Welch p (Holm) | "
              "TOST p (Holm) | verdict | other windows | seeds for 80% power |",
              "|---|---|---|---|---:|---|---:|---:|---:|---|---|---:|"]
    order = {env: i for i, (env, _) in enumerate(ENVS)}
    rows = analysis.claim_table(scores, margins=margins, windows=analysis.window_scores(curves))
    for r in sorted(rows, key=lambda r: order.get(r["env"], len(order))):
        others = r["verdicts_by_window"]  # the other windows (the table's own, last 10%, is its verdict)
        seeds = r["seeds_for_power"]
        lines.append(f"| {r['env'].replace('_', ' ')} | {r['super'].removeprefix('ddqn_super_')} | "
                     f"{r['claim'].split(' - ', 1)[1]} | {r['super_runs']} vs {r['baseline_runs']} | "
                     f"{r['iqm_difference']:+.1f} | [{r['ci_low']:.1f}, {r['ci_high']:.1f}] | "
                     f"{r['probability_of_improvement']:.2f} | {_p(r['welch_p'])} ({_p(r['welch_p_holm'])}) | "
                     f"{_p(r['tost_p_holm'])} | {r['verdict'].removesuffix(' at this budget')}"
                     f"{' (fragile)' if r['fragile'] else ''} | {others} | "
                     f"{'-' if seeds != seeds else '>10000' if seeds == float('inf') else f'{seeds:.0f}'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python scripts/fig1_tables.py [RECORDS]", file=sys.stderr)
        return 2
    records = Path(argv[0]) if argv else ROOT / "results" / "fig1"
    if not records.is_dir():
        print(f"RECORDS: expected a folder of run records, got {str(records)!r}", file=sys.stderr)
        return 2
    curves = plotting.load_run_curves(plotting.find_run_folders([records]))
    print(markdown([c for c in curves if not plotting.is_paper(c.label)]))  # our protocol's section
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
