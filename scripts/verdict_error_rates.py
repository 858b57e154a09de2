"""How often the claim table's verdict is wrong, by simulation: why it asks Welch's test as well as the CI.

    python scripts/verdict_error_rates.py [--draws 400] [--runs 3 5] [--effects 0 1.5 3]

For each number of runs a side and each true effect (SUPER's mean minus the baseline's, in standard deviations
of normal final scores), it draws ``--draws`` pairs of configurations and prints the share of draws with a
directional verdict ("holds" or "does not hold") under three rules: the 95% percentile-bootstrap CI of the IQM
difference alone (the rule before), Welch's t-test alone (p < 0.05), and both (``suPER.analysis.verdict``).
At effect 0 that share is the false-verdict rate (nominal 5%); above 0 it is the power. Then, for each number
of runs, the coverage of the 95% percentile-bootstrap CI of one configuration's mean final score (as in the
final-performance table): the share of draws whose CI contains the true mean. Seeded: the same numbers on every
run of the same arguments (about 30 s at the defaults).
"""

from __future__ import annotations

import argparse

import numpy as np

from suPER import analysis as A
from suPER.stats import bootstrap_ci


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=400, help="simulated comparisons per cell")
    parser.add_argument("--runs", type=int, nargs="+", default=[3, 5], help="runs per configuration")
    parser.add_argument("--effects", type=float, nargs="+", default=[0.0, 1.5, 3.0], help="true effects (sd)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per comparison")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print("runs a side | effect (sd) | CI alone | Welch alone | both (the verdict)")
    print("---:|---:|---:|---:|---:")
    for n in args.runs:
        for effect in args.effects:
            ci_only = welch_only = both = 0
            for _ in range(args.draws):
                x, y = rng.normal(effect, 1.0, n), rng.normal(0.0, 1.0, n)
                (row,) = A.claim_table({"e": {"ddqn_super_quantile": x, "ddqn": y}}, n_resamples=args.resamples)
                by_ci = row["ci_low"] > 0 or row["ci_high"] < 0
                by_welch = row["welch_p"] < A.ALPHA
                ci_only += by_ci
                welch_only += by_welch
                both += row["verdict"] != A.INCONCLUSIVE
            d = args.draws
            print(f"{n} | {effect:g} | {ci_only / d:.3f} | {welch_only / d:.3f} | {both / d:.3f}")
    print()
    print("runs | coverage of the 95% bootstrap CI of a mean")
    print("---:|---:")
    for n in args.runs:
        covered = 0
        for _ in range(args.draws):
            lo, hi = bootstrap_ci((rng.normal(0.0, 1.0, n),), np.mean, n_resamples=args.resamples)
            covered += bool(lo <= 0.0 <= hi)
        print(f"{n} | {covered / args.draws:.3f}")


if __name__ == "__main__":
    main()
