#!/usr/bin/env python
"""Print docs/results.md's Figure 1 tables from the committed records, so the doc is pasted, never retyped.

    python scripts/fig1_tables.py [RECORDS] [--protocol ours|paper|compare|relay|dqn|costs]
    python scripts/fig1_tables.py --update docs/results.md      # after --collect: every part's tables at once

``ours`` (default) and ``paper``: that protocol's runs only, as markdown tables: each run's final score (the mean of
its last 10% of evaluations) per env and configuration, seeds in order; the claim table (``analysis.claim_table``:
every SUPER rule with runs minus each baseline, Welch p Holm-adjusted per env and protocol, TOST at 10% of the env's
random-to-best range, the verdict under each final-score window, seeds for 80% power), as ``plot --analysis`` computes
it with the shipped random-policy returns; and for ``paper``, battle's final policies on 100 varied games (each run's
``final_games.json``) and the claim table judged on them (``analysis.final_game_scores``). ``compare``: each claim's
verdict under both protocols (``analysis.protocol_comparison``), then the deviation pairs (RECORDS' sibling
fig1_isolate: runs of the paper protocol with one setting set back to ours) and each claim recomputed against a
pair's variant. ``relay``: the fraction of its fresh rows each SUPER configuration relayed, per run. ``dqn``:
the plain-DQN lines (RECORDS' sibling fig1_dqn) as ``paper``'s tables. ``costs``: what the runs cost and a
full-budget run would need (``scripts/run_costs.py``). ``tests/test_results_records.py`` checks that results.md's
tables hold these numbers.
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
"""(column name, configuration label) of our protocol's final-score table"""

PAPER_CONFIGURATIONS = (("no sharing", "ddqn (paper)"), ("SUPER quantile", "ddqn_super_quantile (paper)"),
                        ("SUPER gaussian", "ddqn_super_gaussian_variance (paper)"),
                        ("SUPER stochastic", "ddqn_super_stochastic (paper)"),
                        ("share-all", "ddqn_super_gaussian_variance (paper) [shareall]"),
                        ("parameter sharing", "ddqn_ps (paper)"))
"""the same for the paper protocol: its gaussian thresholds on the variance, as the original's did"""

DQN_CONFIGURATIONS = (("no sharing", "dqn (paper)"), ("SUPER quantile", "dqn_super_quantile (paper)"),
                      ("share-all", "dqn_super_gaussian_variance (paper) [shareall]"))
"""the plain-DQN lines' configurations (experiments/fig1_dqn.yaml, the paper protocol)"""

COMPANIONS = ("fig1_isolate", "fig1_dqn")
"""Campaign folders beside RECORDS whose runs stay out of Figure 1's tables, each with a part of its own: the
deviation pairs (experiments/fig1_isolate.yaml; ``compare``'s pair tables) and the plain-DQN lines
(experiments/fig1_dqn.yaml; ``dqn``)."""


def _p(p: float) -> str:
    return "-" if p != p else "<0.001" if p < 0.001 else f"{p:.3f}"


def _ci(low: float, high: float) -> str:
    return "-" if low != low else f"[{low:.1f}, {high:.1f}]"


def claim_rows(curves: list[plotting.RunCurve]) -> list[dict]:
    """``analysis.claim_table`` of the curves (2,000 bootstrap resamples as ``plot --analysis``, the shipped
    random-policy returns for the TOST margins), envs in ``ENVS`` order."""
    import tempfile

    scores = analysis.scores_by_configuration(curves)
    with tempfile.TemporaryDirectory() as tmp:  # measurements the shipped data lack would land here
        random = analysis.random_returns(curves, Path(tmp) / "random_returns.json")
    margins = analysis.protocol_margins(scores, random)
    order = {env: i for i, (env, _) in enumerate(ENVS)}
    rows = analysis.claim_table(scores, margins=margins, windows=analysis.window_scores(curves))
    return sorted(rows, key=lambda r: order.get(r["env"], len(order)))


def final_games(curves: list[plotting.RunCurve], configurations: tuple[tuple[str, str], ...]) -> str:
    """Battle's final policies on 100 varied games (``final_games.json`` of each finished battle run of the
    configurations among ``curves``, seeds in order): win rate with its 95% Wilson interval, loss and tie rates,
    mean episode length and team return, one row per configuration, one value per seed."""
    curves = [c for c in curves if c.env == "battle" and c.finished]
    lines = ["| configuration | seeds | win rate [95% Wilson] | loss rate | tie rate | episode length | team return |",
             "|---|---|---|---|---|---|---|"]
    for name, label in configurations:
        games = sorted((c.seed, g) for c in curves if c.label == label
                       and (g := analysis.final_games_record(c)) is not None)
        if not games:
            continue
        seeds = ", ".join(f"s{s}" for s, _ in games)
        win = ", ".join(f"{g['win_rate']:.2f} [{g['win_rate_ci'][0]:.2f}, {g['win_rate_ci'][1]:.2f}]" for _, g in games)
        loss, tie = (", ".join(f"{g[k]:.2f}" for _, g in games) for k in ("loss_rate", "tie_rate"))
        length = ", ".join(f"{g['episode_len']:.0f}" for _, g in games)
        ret = ", ".join(f"{g['team_return']:+.1f}" for _, g in games)
        lines.append(f"| {name} | {seeds} | {win} | {loss} | {tie} | {length} | {ret} |")
    return "\n".join(lines)


def comparison(rows: list[dict]) -> str:
    """Each claim's verdict under both protocols (``analysis.protocol_comparison`` of ``claim_rows``), envs in
    ``ENVS`` order."""
    lines = [analysis.PROTOCOL_HEADER]
    for t in analysis.protocol_comparison(rows):
        diff = {p: "-" if t[f"{p}_difference"] != t[f"{p}_difference"] else f"{t[f'{p}_difference']:+.1f}"
                for p in ("paper", "ours")}
        verdicts = {p: t[f"{p}_verdict"].replace(" at this budget", "") for p in ("paper", "ours")}
        p_cells = {p: analysis.comparison_p(t, p) for p in ("paper", "ours")}
        lines.append(f"| {t['env'].replace('_', ' ')} | {t['claim'].removeprefix('SUPER-')} | {t['paper_runs']} | "
                     f"{diff['paper']} | {p_cells['paper']} | {verdicts['paper']} | {t['ours_runs']} | {diff['ours']} | "
                     f"{p_cells['ours']} | {verdicts['ours']} | {t['same_verdict']} |")
    return "\n".join(lines)


PAIR_HEADER = ("| env | configuration | set back to ours | pairs | paper protocol | with it | difference | mean [95% CI] | "
               "paired p |\n|---|---|---|---:|---|---|---|---|---:|")

PAIR_CLAIM_HEADER = ("| env | claim | paper: runs | difference | p (Holm, claims) | verdict | set back | "
                     "against the variant: runs | difference | 95% CI | Welch p | ours: difference |\n"
                     "|---|---|---:|---:|---:|---|---|---:|---:|---|---:|---:|")
SET_BACK = {"baseline": "baseline", "both": "both sides"}
"""``claims_against_variants``' ``set_back`` as the table says it"""


def _name(label: str) -> str:
    """A configuration label as the tables name it (``PAPER_CONFIGURATIONS``, ``CONFIGURATIONS``), else as is."""
    return {lab: name for name, lab in (*PAPER_CONFIGURATIONS, *CONFIGURATIONS)}.get(label, label)


def pairs(curves: list[plotting.RunCurve], variants: list[plotting.RunCurve], rows: list[dict]) -> str:
    """Which deviation moves a verdict: each deviation pair (``analysis.deviation_pairs``: a paper-protocol
    configuration and its runs with one setting set back to ours, seed by seed) and each claim against that
    configuration recomputed with the variant in its place, and with both sides' variants where the SUPER side has
    a pair of the same deviation (``analysis.claims_against_variants``), beside the claim under both protocols
    (``analysis.protocol_comparison`` of ``rows``, the curves' ``claim_rows``). A row saying so while no pair has
    finished."""
    found = analysis.deviation_pairs(curves, variants)
    lines = [PAIR_HEADER]
    for r in found:
        ci = _ci(r["ci_low"], r["ci_high"])  # "-" where one pair gives no interval: the mean alone then
        mean = f"{r['mean_difference']:+.1f}" + ("" if ci == "-" else f" {ci}")
        per_seed = {k: ", ".join(f"s{s} {v:+.1f}" for s, v in zip(r["seeds"], r[k]))
                    for k in ("base_scores", "variant_scores", "differences")}
        lines.append(f"| {r['env'].replace('_', ' ')} | {_name(r['configuration'])} | {r['deviation']} | "
                     f"{r['pairs']} | {per_seed['base_scores']} | {per_seed['variant_scores']} | "
                     f"{per_seed['differences']} | {mean} | "
                     f"{_p(r['paired_p'])} |")
    if not found:
        lines.append("| - | no finished pair yet | | | | | | | |")
    compared = {(t["env"], t["claim"]): t for t in analysis.protocol_comparison(rows)}
    recomputed = [PAIR_CLAIM_HEADER]
    for r in analysis.claims_against_variants(analysis.scores_by_configuration(curves), found):
        rule, _, baseline = r["claim"].removesuffix(plotting.PAPER_SUFFIX).partition(" - ")
        claim = f"{analysis.PAPER_RULE_NAMES.get(rule, rule)} - {baseline}"
        t = compared[(r["env"], claim)]
        ours = "-" if t["ours_difference"] != t["ours_difference"] else f"{t['ours_difference']:+.1f}"
        recomputed.append(f"| {r['env'].replace('_', ' ')} | {claim.removeprefix('SUPER-')} | {t['paper_runs']} | "
                           f"{t['paper_difference']:+.1f} | {analysis.comparison_p(t, 'paper')} | "
                           f"{t['paper_verdict'].replace(' at this budget', '')} | {SET_BACK[r['set_back']]} | "
                           f"{r['runs']} | {r['difference']:+.1f} | {_ci(r['ci_low'], r['ci_high'])} | "
                           f"{_p(r['welch_p'])} | {ours} |")
    if len(recomputed) == 1:
        recomputed.append("| - | no finished pair yet | | | | | | | | | | |")
    return "\n".join(lines) + "\n\n" + "\n".join(recomputed)


RELAY_METRIC = "fraction_shared_mean"
"""metrics.csv's relayed / fresh rows of each sender since the last evaluation, mean over the senders"""


def relay_table(fractions: list[plotting.RunCurve]) -> str:
    """The fraction of its fresh rows each SUPER configuration relayed (``RELAY_METRIC`` curves of the finished
    runs, a run's value the mean of its evaluations after the first, which precedes any relay), per env and
    protocol, seeds in order, with their mean. Share-all relays every row and reads 1 where no sender ever lacks
    rows; the records' commits averaged each fragment's fraction, so a fragment in which a dead sender (battle) had
    no rows counted as 0, and share-all's value is the share of (sender, fragment) pairs that had rows."""
    lines = ["| env | protocol | configuration | seeds | fraction relayed, per seed | mean |", "|---|---|---|---|---|---:|"]
    for env, row_name in ENVS:
        for protocol, configurations in (("paper", PAPER_CONFIGURATIONS), ("ours", CONFIGURATIONS)):
            for name, label in configurations:
                runs = sorted((c.seed, float(c.values[1:].mean())) for c in fractions
                              if c.env == env and c.label == label and c.finished and len(c.values) > 1)
                if not runs:
                    continue
                seeds = ", ".join(f"s{s}" for s, _ in runs)
                values = ", ".join(f"{v:.3f}" for _, v in runs)
                mean = sum(v for _, v in runs) / len(runs)
                lines.append(f"| {row_name} | {protocol} | {name} | {seeds} | {values} | {mean:.3f} |")
    return "\n".join(lines)


CLAIM_HEADER = ("| env | SUPER rule | baseline | runs | IQM difference | 95% CI | P(improvement) | Welch p (Holm) | "
                "TOST p (Holm) | verdict | other windows | seeds for 80% power |\n"
                "|---|---|---|---|---:|---|---:|---:|---:|---|---|---:|")


def claim_lines(rows: list[dict], env_note: str = "") -> list[str]:
    """Claim rows (``analysis.claim_table``) as markdown table rows, the env cell followed by ``env_note``."""
    lines = []
    for r in rows:
        others = r["verdicts_by_window"] or "-"  # the other windows (the table's own, last 10%, is its verdict)
        seeds = r["seeds_for_power"]
        rule, _, baseline = r["claim"].removesuffix(plotting.PAPER_SUFFIX).partition(" - ")
        rule = analysis.PAPER_RULE_NAMES.get(rule, rule).removeprefix("SUPER-")  # the paper's gaussian: on the variance
        lines.append(f"| {r['env'].replace('_', ' ')}{env_note} | {rule} | {baseline} | {r['super_runs']} vs "
                     f"{r['baseline_runs']} | {r['iqm_difference']:+.1f} | {_ci(r['ci_low'], r['ci_high'])} | "
                     f"{r['probability_of_improvement']:.2f} | {_p(r['welch_p'])} ({_p(r['welch_p_holm'])}) | "
                     f"{_p(r['tost_p_holm'])} | {r['verdict'].removesuffix(' at this budget')}"
                     f"{analysis.FRAGILE if r['fragile'] else ''} | {others} | "
                     f"{'-' if seeds != seeds else '>10000' if seeds == float('inf') else f'{seeds:.0f}'} |")
    return lines


def markdown(curves: list[plotting.RunCurve], configurations: tuple[tuple[str, str], ...] = CONFIGURATIONS) -> str:
    """The final-score table (each run's score, seeds in order) and the claim table of one protocol's curves
    (``claim_rows``), envs in ``ENVS`` order."""
    scores = analysis.scores_by_configuration(curves)
    lines = ["| env | " + " | ".join(name for name, _ in configurations) + " |",
             "|---|" + "---:|" * len(configurations)]
    for env, row_name in ENVS:
        cells = [", ".join(f"{v:+.1f}" for v in scores.get(env, {}).get(label, [])) for _, label in configurations]
        lines.append(f"| {row_name} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", CLAIM_HEADER, *claim_lines(claim_rows(curves))])


def games_claims(curves: list[plotting.RunCurve]) -> str:
    """The claim table on the final policies' varied games (``analysis.final_game_scores``: each run's mean team
    return over them; battle), env cells marked "(varied games)"."""
    rows = analysis.claim_table(analysis.final_game_scores(curves), 2000)
    return "\n".join([CLAIM_HEADER, *claim_lines(rows, " (varied games)")])


SECTIONS = {"compare": ("### Verdicts by protocol", "### What each rule relays"),
            "relay": ("### What each rule relays", "### Across DQN variants"),
            "dqn": ("### Across DQN variants", "### What the full budget needs"),
            "paper": ("#### Results: the protocol's", "### Under our protocol"),
            "ours": ("### Under our protocol", "#### Honest notes"),
            "costs": ("### What the full budget needs", "\n## ")}
"""part -> (first line of its part of results.md's Figure 1 section, the heading that ends it)"""


def tables(curves: list[plotting.RunCurve], records: Path, protocol: str,
           companions: dict[str, list[plotting.RunCurve]] | None = None) -> str:
    """The markdown tables of one part of results.md's Figure 1 section, separated by blank lines; ``companions``:
    the runs of each of ``COMPANIONS`` (none when missing)."""
    companions = companions or {}
    if protocol == "costs":  # scripts/run_costs.py's table (its closing count line is prose, not a table)
        from run_costs import table

        return "\n".join(line for line in table(records).splitlines() if line.startswith("|"))
    if protocol == "compare":
        rows = claim_rows(curves)  # bootstraps and random-policy returns: once for both tables
        return comparison(rows) + "\n\n" + pairs(curves, companions.get("fig1_isolate", []), rows)
    if protocol == "relay":
        return relay_table(plotting.load_run_curves(plotting.find_run_folders([records]), RELAY_METRIC, skipped=[]))
    if protocol == "dqn":
        dqn = companions.get("fig1_dqn", [])
        return "\n\n".join([markdown(dqn, DQN_CONFIGURATIONS), final_games(dqn, DQN_CONFIGURATIONS),
                              games_claims(dqn)])
    if protocol == "paper":
        paper = [c for c in curves if plotting.is_paper(c.label)]
        return "\n\n".join([markdown(paper, PAPER_CONFIGURATIONS), final_games(paper, PAPER_CONFIGURATIONS),
                            games_claims(paper)])
    return markdown([c for c in curves if not plotting.is_paper(c.label)])


def replace_tables(text: str, start: str, end: str, blocks: list[str]) -> str:
    """``text`` with the markdown tables between the line starting with ``start`` and the next ``end`` replaced, in
    order, by ``blocks`` (the prose around them kept).

    Raises:
        ValueError: a heading is missing, or the part holds another number of tables than ``blocks``.
    """
    first = text.index(start)
    last = text.index(end, first)
    lines = text[first:last].split("\n")
    out, tables_seen, k = [], 0, 0
    while k < len(lines):
        if lines[k].startswith("|"):
            while k < len(lines) and lines[k].startswith("|"):
                k += 1
            if tables_seen < len(blocks):
                out.append(blocks[tables_seen])
            tables_seen += 1
            continue
        out.append(lines[k])
        k += 1
    if tables_seen != len(blocks):
        raise ValueError(f"{start!r}: expected {len(blocks)} tables, found {tables_seen}")
    return text[:first] + "\n".join(out) + text[last:]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python scripts/fig1_tables.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="?", default=str(ROOT / "results" / "fig1"), metavar="RECORDS")
    parser.add_argument("--protocol", choices=("ours", "paper", "compare", "relay", "dqn", "costs"), default="ours")
    parser.add_argument("--update", metavar="RESULTS_MD", help="write every part's tables into this file (results.md: "
                        "each part's tables replaced in order, its prose kept) instead of printing one part")
    args = parser.parse_args(argv)
    records = Path(args.records)
    if not records.is_dir():
        print(f"RECORDS: expected a folder of run records, got {args.records!r}", file=sys.stderr)
        return 2
    curves = plotting.load_run_curves(plotting.find_run_folders([records]))
    companions = {name: plotting.load_run_curves(plotting.find_run_folders([records.parent / name]))
                  for name in COMPANIONS if (records.parent / name).is_dir()}
    if args.update is None:
        print(tables(curves, records, args.protocol, companions))
        return 0
    path = Path(args.update)
    try:
        text = path.read_text()
        for protocol, (start, end) in SECTIONS.items():
            text = replace_tables(text, start, end, tables(curves, records, protocol, companions).split("\n\n"))
    except (OSError, ValueError) as exc:
        print(f"--update: expected results.md with the Figure 1 parts ({exc})", file=sys.stderr)
        return 2
    from suPER.runs import atomic_write_text

    atomic_write_text(path, text)
    print(f"{path}: Figure 1 tables written from {records}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
