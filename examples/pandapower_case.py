"""A pandapower case through ``powerflow``: zones, the distributed SOC power flow, and pandapower's AC check.

The network is split into zones (Louvain on the bus graph); each zone is an agent whose loads are private and
whose SOC-relaxed power flow with load shedding is its public set W_p (``docs/powerflow.md``). The zones agree
on their tie-line variables through Algorithm 1 with its defaults. The answer is written back into a
pandapower net (``powerflow.to_net``), compared with the centralized relaxation (``powerflow.socopf``), and
checked by pandapower's own AC power flow started from it (``powerflow.ac_check``).

    .venv/bin/python examples/pandapower_case.py                  # case30, 3 zones, 300 rounds
    .venv/bin/python examples/pandapower_case.py --quick          # case14, 3 zones, 150 rounds (the test suite)
    .venv/bin/python examples/pandapower_case.py --case case57 --zones 4
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import powerflow


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the example; print and return the comparison's numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="case14 and 150 rounds")
    parser.add_argument("--case", default=None, help="a pandapower.networks case (default case30, quick case14)")
    parser.add_argument("--zones", type=int, default=3, help="number of zones")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 300, quick 150)")
    args = parser.parse_args(argv)
    case = args.case or ("case14" if args.quick else "case30")
    rounds = args.rounds or (150 if args.quick else 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandapower's notes on generator voltage limits of the stock cases
        net = powerflow.load_case(case)
    problem = powerflow.zonal_problem(net, args.zones)
    result = problem.solve(rounds=rounds)
    distributed = powerflow.to_net(net, result, problem=problem)
    centralized = powerflow.to_net(net, powerflow.socopf(net))
    check = powerflow.ac_check(distributed)
    last = result.history.iloc[-1]
    vm_diff = np.abs(distributed.res_bus.vm_pu - centralized.res_bus.vm_pu)
    numbers = {"shed_mw": float(distributed.res_bus.p_shed_mw.abs().sum()),
               "max_vm_diff_from_socopf_pu": float(vm_diff.max()),
               "tie_disagreement": float(distributed.res_bus.tie_disagreement.max()),
               "consensus_residual": float(last["consensus_residual"]),
               "ac_converged": float(check.converged), "ac_max_vm_diff_pu": check.max_vm_diff_pu}
    print(f"{case}: {len(net.bus)} buses in {args.zones} zones, {len(problem.keys)} shared entries, "
          f"{len(result.history)} rounds of Algorithm 1 (defaults)")
    for name, value in numbers.items():
        print(f"  {name:>28} = {value:.3g}")
    print(distributed.res_bus[["vm_pu", "p_mw", "p_shed_mw", "tie_disagreement"]].head().to_string())
    return numbers


if __name__ == "__main__":
    main()
