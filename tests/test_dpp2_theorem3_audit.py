"""DPP^2's empirical lower bound against its Theorem 3 accountant (issue 27 item 3).

The DPP2 entry of tests/test_privacy_audit.py's AUDITED compares the audit with the ledger's epsilon. Here the same
one-round run is compared with Theorem 3's eps_i(K) (privcvx.privacy.dpp2_accountant), K = T - 1 = 0: with the
k = 0 term (``include_zero=True``, privcvx's accountant) it equals the ledger's epsilon and bounds the audit; as
printed (the sum from k = 1) it is 0 for this run, which releases z_i^0, and the audit refutes it (erratum 3).
"""

import pytest

from privcvx import algorithms
from privcvx.algorithms import check_privacy
from privcvx.algorithms.privacy_audit import quadratic_pair


def test_dpp2_lower_bound_is_below_theorem_3_with_z0_and_above_it_as_printed():
    algorithm = algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5, r=0.9)
    pair = quadratic_pair("free", n=1)
    report = check_privacy(algorithm, neighbours=pair, runs=3000)
    topology = algorithm.topology_for(pair.original).bind(pair.original.names)
    prepared = algorithm.prepare(pair.original, topology, report.rounds)
    theorem3 = prepared.privacy_of(pair.original.agents[pair.index], pair.original.layouts[pair.index].dim)
    with_zero = theorem3.epsilon(report.rounds - 1, prepared.r)
    printed = theorem3.epsilon(report.rounds - 1, prepared.r, include_zero=False)
    # Theorem 3 + z^0 is the ledger's pure epsilon; the audit's claim is the ledger's tightest epsilon at its delta
    assert report.claimed_epsilon <= with_zero == pytest.approx(report.claimed_epsilon, rel=1e-5)
    print(report, with_zero, printed)
    assert printed == 0.0 < report.lower_bound <= with_zero < report.under_noised
