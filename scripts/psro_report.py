"""Markdown tables of a population run for docs/results.md (written by scripts/psro_battle.sh).

    python scripts/psro_report.py RUN_FOLDER WALLTIMES.tsv FINAL_VS_SHIPPED.txt FINAL_VS_RANDOM.txt

Reads the run folder's CSVs (payoff.csv, exploitability.csv, meta_strategy.csv, ratings.csv; layout in
docs/population.md) and the two `super-marl opponents eval` outputs of the final mixture; prints markdown.
All rates are the team side's (blue) unless a header says otherwise; intervals are 95% Wilson.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def rate(r: dict[str, str], key: str) -> str:
    """``0.55 [0.34, 0.74]`` from ``<key>_rate`` (or ``<key>``) and its ``_lo`` / ``_hi``."""
    base = key[:-5] if key.endswith("_rate") else key
    return f"{float(r[key]):.2f} [{float(r[base + '_lo']):.2f}, {float(r[base + '_hi']):.2f}]"


def table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])


def main(run: Path, times: Path, vs_shipped: Path, vs_random: Path) -> None:
    meta = rows(run / "meta_strategy.csv")
    last = max(int(r["iteration"]) for r in meta)
    final = [r for r in meta if int(r["iteration"]) == last]
    sides = list(dict.fromkeys(r["side"] for r in final))  # team side first
    team = [r["policy"] for r in final if r["side"] == sides[0]]
    opp = [r["policy"] for r in final if r["side"] == sides[1]]
    payoff = {(r["team_policy"], r["opponent_policy"]): r for r in rows(run / "payoff.csv")}
    print(f"# {run.name}: {last} iterations\n")
    print(f"## Payoff table: {sides[0]} win rate / loss rate per entry (rows {sides[0]}, columns {sides[1]})\n")
    cols = opp + (["shipped"] if any(k[1] == "shipped" for k in payoff) else [])
    body = [[t] + [f"{rate(payoff[(t, o)], 'win_rate')} / {rate(payoff[(t, o)], 'loss_rate')}"
                   if (t, o) in payoff else "" for o in cols] for t in team]
    if any(k[0] == "shipped" for k in payoff):
        body.append(["shipped (as blue)"] + [f"{rate(payoff[('shipped', o)], 'win_rate')} / "
                                             f"{rate(payoff[('shipped', o)], 'loss_rate')}"
                                             if ("shipped", o) in payoff else "" for o in cols])
    print(table(["", *cols], body), "\n")
    print("## Exploitability and wall time per iteration (meta-payoff units: win - loss)\n")
    keys = ["value", "nash_conv", "br_gain_team", "br_gain_opponent", "approx_nash_conv", "br_wall_s",
            "match_wall_s", "matches"]
    print(table(["iteration", *keys], [[r["iteration"], *[r[k] if k.endswith(("_s", "matches")) else
                                                          f"{float(r[k]):+.3f}" for k in keys]]
                                       for r in rows(run / "exploitability.csv")]), "\n")
    print(f"## Final meta-strategies (iteration {last})\n")
    print(table(["side", "policy", "weight"], [[r["side"], r["policy"], f"{float(r['weight']):.3f}"] for r in final]),
          "\n")
    print(f"## Ratings (iteration {last}; win_vs_shipped: blue against the shipped red team, red against it "
          f"playing blue)\n")
    print(table(["side", "policy", "nash_average", "win_vs_random", "win_vs_shipped", "episodes"],
                [[r["side"], r["policy"], f"{float(r['nash_average']):+.3f}", rate(r, "win_vs_random"),
                  rate(r, "win_vs_shipped") if r["win_vs_shipped"] != "nan" else "-", r["episodes"]]
                 for r in rows(run / "ratings.csv") if int(r["iteration"]) == last]), "\n")
    print("## Final red mixture (installed meta-Nash) against fixed blue teams\n")
    print("The mixture is the opponent: its win rate is the printed loss rate.\n")
    for name, path in (("the shipped red team playing blue", vs_shipped), ("a random blue team", vs_random)):
        print(f"Against {name}:\n\n```\n{path.read_text().strip()}\n```\n")
    print("## Wall time per phase\n")
    t = rows_tsv(times)
    print(table(list(t[0]), [list(r.values()) for r in t]))


def rows_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print("usage: psro_report.py RUN_FOLDER WALLTIMES.tsv FINAL_VS_SHIPPED.txt FINAL_VS_RANDOM.txt", file=sys.stderr)
        sys.exit(2)
    main(*(Path(a) for a in sys.argv[1:]))
