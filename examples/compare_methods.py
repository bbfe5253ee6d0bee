"""Methods from different papers at the same total privacy, with `pc.compare` (a study no paper ran).

    .venv/bin/python examples/compare_methods.py [--problem digits|case14] [--quick] [--out DIR]

Algorithm 1 (ObjPert and OutPert, Gaussian, paper 004), PR-ADMM (the thesis's decentralized zCDP ADMM) and, on the
full-consensus digits problem, the DP distributed gradient of paper 001 (it refuses case14's general-form zones),
each calibrated through its own accountant to the same total (epsilon, delta) per agent over the whole run.
RandomizedADMM sets its noise by its rate, not by a total budget, so `pc.compare` refuses it (docs/compare.md).
Writes runs.csv, summary.csv, reference.csv and accuracy.png, and prints the final relative gaps.
"""

from __future__ import annotations

import argparse
from functools import partial

import privcvx as pc
from privcvx.algorithms import PRADMM, DPDistributedGradient, LinearizedADMM


def digits() -> pc.DistributedProblem:
    from problems.experiment import build

    return build("digits", None, agents=10, split="iid", alpha=0.5, bound=0.1, test_fraction=0.2, data_seed=0,
                 sensitivity="worst_case")


def case14() -> pc.DistributedProblem:
    from powerflow.experiment import build

    return build("case14", "3", beta=0.01, sensitivity="exact", zone_seed=0)


def study(problem: str, quick: bool) -> pc.Study:
    gaussian = pc.Gaussian(1.0, 1e-6)
    methods = [pc.Method("ObjPert", LinearizedADMM(privacy=pc.ObjectivePerturbation(gaussian))),
               pc.Method("OutPert", LinearizedADMM(privacy=pc.OutputPerturbation(gaussian)))]
    methods.append(pc.Method("PR-ADMM", PRADMM()))  # the zones declare PR-ADMM's release bounds themselves
    if problem == "digits":
        methods.append(pc.Method("DPDG", DPDistributedGradient()))
    return pc.Study(problem=partial({"digits": digits, "case14": case14}[problem]), methods=methods,
                    epsilons=[1.0, 10.0] if quick else [0.1, 1.0, 10.0], delta=1e-6,
                    rounds=20 if quick else 200, seeds=(0,) if quick else (0, 1, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=["digits", "case14"], default="digits")
    parser.add_argument("--quick", action="store_true", help="2 epsilons, 20 rounds, 1 seed")
    parser.add_argument("--out", default=None, help="output folder (default out/compare_<problem>)")
    options = parser.parse_args()
    comparison = pc.compare(study(options.problem, options.quick), options.out or f"out/compare_{options.problem}")
    columns = ["method", "epsilon", "relative_gap_mean", "distance_mean", "epsilon_spent_max", "converged"]
    print(comparison.summary[columns].to_string(index=False))


if __name__ == "__main__":
    main()
