"""The conformance suite, walked over every method: `check_algorithm` runs on each configuration that
``CONFORMANCE`` lists for each class of `privcvx.algorithms.all_algorithms()`, as scikit-learn's
``test_common.py`` walks ``all_estimators()``. A method without an entry fails the walk; so does an entry that
names a class the package no longer exports."""

from __future__ import annotations

from typing import NamedTuple

import pytest

import privcvx as pc
from privcvx import algorithms
from privcvx.algorithms import check_algorithm
from privcvx.schedules import Geometric

pytestmark = pytest.mark.usefixtures("quiet_seeds")


class Case(NamedTuple):
    """One configuration: ``rounds`` for the defaults' optimum check, the ``backends`` of the determinism check,
    lines that the report's optimum check must contain (``expected``: substrings, each in some line), and how many
    problems it must have solved (``gaps``: the number of gap lines; None for any)."""

    algorithm: algorithms.Algorithm
    rounds: int = 300
    backends: tuple[str, ...] = ("serial", "process")
    expected: tuple[str, ...] = ("gap",)
    gaps: int | None = None


SERIAL = ("serial",)
REFUSES_GENERAL_FORM = ("gap", "general form: refused (general-form keys)")

#: Per method: the configurations the suite checks. Private configurations use the default secure path's
#: calibration with seeded noise (check_algorithm compares transcripts bitwise).
CONFORMANCE: dict[type[algorithms.Algorithm], list[Case]] = {
    algorithms.LinearizedADMM: [
        Case(algorithms.LinearizedADMM(local_updates=2, privacy=pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))), 150,
             expected=("general form",)),
        Case(algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Budget(1.0, 1e-5, mechanism="laplace",
                                                                    accountant="pld"))), 150, SERIAL),
        Case(algorithms.LinearizedADMM(relaxation=1.5, anderson=3, rho="adaptive-per-key",
                            privacy=pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5))), 150),
        Case(algorithms.LinearizedADMM(local_updates="auto"), 150, expected=("general form",))],
    algorithms.ExactADMM: [Case(algorithms.ExactADMM(), 150, expected=("general form",))],
    # The defaults' optimum check runs on two problems, on the complete graph and on a ring: four gap lines.
    algorithms.DPDistributedGradient: [Case(algorithms.DPDistributedGradient(epsilon=1.0), 700,
                                            expected=("general form: refused",), gaps=4)],
    algorithms.PRADMM: [Case(algorithms.PRADMM(epsilon=1.0), 100)],
    algorithms.PPADMM: [Case(algorithms.PPADMM(epsilon=2.0, hessian_change=1e-4), 100),
             Case(algorithms.PPADMM(epsilon=2.0, hessian_change=1e-4, relaxation=1.5), 100, SERIAL)],
    # A private IPP-ADMM has silent rounds, which the check's "a ledger entry every round" refuses: without noise.
    algorithms.IPPADMM: [Case(algorithms.IPPADMM(), 100), Case(algorithms.IPPADMM(relaxation=1.5), 100, SERIAL)],
    algorithms.QDPSGD: [Case(algorithms.QDPSGD(variant=1, bits=16, resolution=2.0 ** -8)),
             Case(algorithms.QDPSGD(variant=2, bits=16, resolution=2.0 ** -8))],
    algorithms.DPP2: [Case(algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5, r=0.9), 600)],
    algorithms.DiaDSP: [Case(algorithms.DiaDSP(alpha=0.1, u_x=0.5, u_y=0.5, r=0.9), 600)],
    algorithms.PPDC: [Case(algorithms.PPDC(u_x=0.5, u_v=0.5, r=0.9), 600)],
    algorithms.RandomizedADMM: [
        Case(algorithms.RandomizedADMM(noise_rate=Geometric(1.02, 1.02)), expected=REFUSES_GENERAL_FORM),
        Case(algorithms.RandomizedADMM(exchange="secret_sharing", update="exact"), expected=REFUSES_GENERAL_FORM),
        Case(algorithms.RandomizedADMM(relaxation=1.5, noise_rate=Geometric(1.02, 1.02)), 100),
        Case(algorithms.RandomizedADMM(relaxation=1.5, noise_rate=Geometric(1.02, 1.02),
                                       exchange="secret_sharing"), 100)],
    algorithms.RandomizedDGD: [Case(algorithms.RandomizedDGD(noise_rate=2.0), 1500, expected=REFUSES_GENERAL_FORM)],
}


def test_every_method_has_conformance_cases():
    assert set(CONFORMANCE) == {cls for _, cls in algorithms.all_algorithms()}
    assert all(CONFORMANCE.values())


def test_all_algorithms_lists_the_exported_methods_only():
    listed = dict(algorithms.all_algorithms())
    assert list(listed) == sorted(listed)
    assert "LinearizedADMM" in listed and "Algorithm" not in listed and "check_algorithm" not in listed


@pytest.mark.parametrize("case", [pytest.param(case, id=f"{cls.__name__}-{i}")
                                  for cls, cases in CONFORMANCE.items() for i, case in enumerate(cases)])
def test_check_algorithm(case):
    report = check_algorithm(case.algorithm, rounds=case.rounds, backends=case.backends)
    for expected in case.expected:
        assert any(expected in line for line in report["optimum"]), (expected, report["optimum"])
    if case.gaps is not None:
        assert sum("gap" in line for line in report["optimum"]) == case.gaps, report["optimum"]


def test_every_method_can_be_compared_at_a_total_budget():
    """`pc.compare` calibrates a method through its entry of ``TOTAL_PRIVACY`` (its own or a base class's): every
    method has one, and only a method without a privacy setting (no ``privacy``, no ``epsilon``) has None."""
    import inspect

    from privcvx.comparison import TOTAL_PRIVACY

    missing, unprivate = [], []
    for name, cls in algorithms.all_algorithms():
        entry = next((TOTAL_PRIVACY[base] for base in cls.__mro__ if base in TOTAL_PRIVACY), missing)
        private = {"privacy", "epsilon"} & set(inspect.signature(cls).parameters)
        if entry is missing:
            missing.append(name)
        elif (entry is None) == bool(private):
            unprivate.append(name)
    assert missing == [] and unprivate == []


def test_no_method_takes_settings_keyed_by_agent_name():
    """What a method assumes about an agent's data is its ``declared`` record (`pc.Declared`): no constructor takes
    a dict or mapping (``PRADMM(release_bounds={name: ...})`` tied an algorithm object to one problem)."""
    import inspect

    keyed = [f"{name}({parameter.name}: {parameter.annotation})" for name, cls in algorithms.all_algorithms()
             for parameter in inspect.signature(cls).parameters.values()
             if any(word in str(parameter.annotation) for word in ("dict", "Mapping"))]
    assert keyed == []
