"""The empirical privacy audit (``pc.algorithms.check_privacy``) of every audited method and mode, at a larger N.

    .venv/bin/python bench/bench_privacy_audit.py [--runs 10000] [--only PRADMM PPADMM functional ring]

One row per configuration: the method, the scale of the claim (epsilon at the method's delta for Laplace releases,
mu for Gaussian ones), the ledger's claim, the empirical lower bound at 95% confidence, the lower bound of the
0.75x under-noised variant (the power: it must exceed the claim; a row may name another factor), the replay's
attained/charged sensitivity ratio,
and N (runs per dataset and variant), on the secure path (``seed="secure"``, not reproducible by design: the bounds
move by a few hundredths between runs). The last row is DPDG's calibration before issue 26 on the affine set
{sum x = 1}, n = 3 (the declared l1 taken through the projection): the audit must fail it. ``--only`` runs the rows
of the named classes (with PPADMM, also its calibration before issue 26, which must fail; "functional": the
functional mechanism's modes, `problems.functional_mechanism_audit`; "ring": DPDG's 10-round ring transcript). The
table is written as markdown (paste into docs/privacy.md, "Empirical audit of every method").
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import privcvx as pc
from privcvx import algorithms
from privcvx.algorithms import check_privacy
from privcvx.algorithms.privacy_audit import NeighbouringPair, PrivacyAudit, PrivacyAuditFailure, quadratic_pair

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_functional_mechanism_audit import MODES  # noqa: E402
from test_privacy_audit import AUDITED, _old_dpdg_rule, _OldPPADMM, audited_pair  # noqa: E402

from problems.functional_mechanism_audit import check_functional_mechanism, sharpest_pair  # noqa: E402


def _row(label: str, algorithm: algorithms.Algorithm, pair: NeighbouringPair, runs: int, rounds: int = 1,
         statistic: str = "llr", **options: float) -> str:
    return _line(label, lambda: check_privacy(algorithm, neighbours=pair, runs=runs, rounds=rounds,
                                              statistic=statistic, **options))


def _line(label: str, audit: Callable[[], PrivacyAudit]) -> str:
    """One row of the table: ``audit``'s report, its verdict and its time."""
    started = time.perf_counter()
    try:
        report, verdict = audit(), "pass"
    except PrivacyAuditFailure as failure:
        report, verdict = failure.report, "FAIL: " + "; ".join(failure.report.failures)
    return (f"| {label} | {report.scale} | {report.claimed:.3f} | {report.lower_bound:.3f} | "
            f"{report.under_noised:.3f} | {report.attained:.3f} | {report.runs} | {verdict} | "
            f"{time.perf_counter() - started:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--only", nargs="*", help="class names of the rows to run (default: every row)")
    arguments = parser.parse_args()
    runs, only = arguments.runs, arguments.only
    print("| method and mode | scale | claimed | lower bound | under-noised lower bound | attained | N | verdict "
          "| time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cls, entry in AUDITED.items():
        if isinstance(entry, str) or (only and cls.__name__ not in only):
            continue
        for algorithm, pair, _, *rest in entry:
            statistic, options = (*rest, *("llr", {})[len(rest):])
            label = f"`{algorithm!r}`, {_describe(pair)}" + ("" if statistic == "llr" else f", {statistic}") + "".join(
                f", {name} = {value}" for name, value in options.items())
            print(_row(label, algorithm, audited_pair(pair), runs, statistic=statistic, **options), flush=True)
    if not only or "functional" in only:
        for mode, _ in MODES:
            print(_line(f"functional mechanism, {mode}, d = 2, declared_pair", lambda mode=mode: (
                check_functional_mechanism(runs=runs, **mode))), flush=True)
        print(_line("functional mechanism, pdfc, d = 2, sharpest_pair (a real pair: no power possible)",
                    lambda: check_functional_mechanism("pdfc", pair=sharpest_pair(2), runs=runs)), flush=True)
    dpdg = algorithms.DPDistributedGradient(epsilon=2.0, q=0.05)
    if not only or "ring" in only:
        ring = quadratic_pair("box")
        ring = NeighbouringPair(ring.original, ring.neighbour, 0, pc.Topology.ring())
        print(_row(f"`{dpdg!r}`, box, the whole transcript of 10 rounds on a ring", dpdg, ring, runs, rounds=10),
              flush=True)
    if only:
        if "PPADMM" in only:  # PP-ADMM's calibration before issue 26 (tests/test_privacy_audit.py), epsilon = 4
            old = _OldPPADMM(epsilon=4.0, beta=1e-6, hessian_change=0.0)
            print(_row(f"`{old!r}`, free set, n = 1, d = e_1, projection, the calibration before issue 26", old,
                       quadratic_pair("free", n=1), runs, statistic="projection"), flush=True)
        return
    ones = {"set_kind": "free", "direction": np.ones(3)}
    for algorithm in (algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5 * 3 ** 0.5, r=0.9),
                      algorithms.DiaDSP(alpha=0.1, u_x=0.5, u_y=0.5 * 3 ** 0.5, r=0.9)):
        print(_row(f"`{algorithm!r}`, {_describe(ones)}", algorithm, quadratic_pair(**ones), runs), flush=True)
    print(_row(f"`{dpdg!r}`, affine set", dpdg, quadratic_pair("affine"), runs), flush=True)
    algorithms.DPDistributedGradient.release_sensitivity = _old_dpdg_rule  # the calibration before issue 26
    print(_row(f"`{dpdg!r}`, affine set, d = e_1, the l1 rule before issue 26", dpdg,
               quadratic_pair("affine", direction=np.eye(3)[0]), runs), flush=True)


def _describe(pair: dict | NeighbouringPair) -> str:
    """The neighbouring pair of a row, in words."""
    if isinstance(pair, NeighbouringPair):  # Q-DPSGD's per-record pair (tests/test_privacy_audit.py, LOGISTIC)
        return "binary_logistic, one record (e_1, +1) added"
    n = pair.get("n", 3)
    direction = "e_1" if pair.get("direction") is None else "(1, ..., 1)/sqrt(n)"
    return f"{pair['set_kind']} set, n = {n}, d = {direction}"


if __name__ == "__main__":
    main()
