"""Every builder's declared sensitivity replayed on its worst-case neighbours (issue 27, item 5).

Each builder module provides ``worst_case_pairs`` (or, for the functional mechanism, ``worst_case_coefficients``):
neighbouring datasets under its declared relation. ``privcvx.sensitivity_audit`` replays what the differing agent
releases (its gradient, Q-DPSGD's clipped record sum, or the released coefficients) on both and compares the change
with the declared bound: it must never exceed it, and a bound loose by more than 10x is reported. :data:`AUDITS`
is keyed by builder function; a builder of ``problems`` or ``powerflow`` that is not in it fails the suite.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import powerflow
import powerflow.experiment
import privcvx as pc
import problems
import problems.experiment
from powerflow import zonal
from privcvx.sensitivity_audit import (
    LOOSE_RATIO,
    BuilderAudit,
    SensitivityExceeded,
    check_builder,
    check_release,
    clipped_record_sum,
)
from problems import binary_logistic as binary
from problems import distributed_fair_logistic as distributed_fair
from problems import fair_logistic as fair
from problems import l2_logistic, ldp_logistic, logistic, nonconvex_logistic

#: The module (``problems.rendezvous`` is also the name of the builder function ``problems`` exports).
rendezvous = importlib.import_module("problems.rendezvous")

#: Q-DPSGD's per-record clipping norm in the audit of binary_logistic (below the records' largest gradient norm).
CLIP = 0.5
#: The relations of federated_logistic (docs/problems.md).
RELATIONS_LOGISTIC = {"replace_one": "replace_one: one sample of one agent replaced, ||x|| <= 1",
                      "add_remove": "add_remove: one sample added to one agent (weighting 'agent'), ||x|| <= 1"}
#: The dimension of the fair-logistic audit: UCI Adult's 14 attributes without the protected one (``load_fair_adult``).
FAIR_DIMENSION = 13


def _data(rows: int = 60, dim: int = 5, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, dim)), rng.integers(0, classes, rows)


def _zonal(factor: float = 1.0, sensitivity: str = "exact") -> BuilderAudit:
    return check_builder("zonal_problem", zonal.worst_case_pairs("case14", 3, sensitivity=sensitivity),
                         relation=zonal.RELATION, factor=factor)


def _zonal_cost_shedding(factor: float = 1.0) -> BuilderAudit:
    """objective="cost+shedding": gamma times Eq. (28)'s bound, attained (the cost's gradient does not move)."""
    pairs = zonal.worst_case_pairs("case14", 3, objective="cost+shedding")
    return check_builder("zonal_problem (cost+shedding)", pairs, relation=zonal.RELATION, factor=factor)


def _federated(factor: float = 1.0, sensitivity: str = "worst_case", relation: str = "replace_one") -> BuilderAudit:
    X, y = _data()
    pairs = logistic.worst_case_pairs(X, y, agents=3, sensitivity=sensitivity, relation=relation)
    return check_builder(f"federated_logistic ({sensitivity})", pairs, relation=RELATIONS_LOGISTIC[relation],
                         factor=factor)


def _federated_add_remove(factor: float = 1.0) -> BuilderAudit:
    return _federated(factor, relation="add_remove")


def _binary(factor: float = 1.0) -> BuilderAudit:
    X, y = _data(classes=2)
    return check_builder(f"binary_logistic (clip {CLIP})", binary.worst_case_pairs(X, y, agents=3),
                         relation=binary.RELATION, release=clipped_record_sum(CLIP), declared=pc.Sensitivity(l2=CLIP),
                         factor=factor)


def _ldp(factor: float = 1.0) -> BuilderAudit:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    pairs = ldp_logistic.worst_case_pairs(X, rng.choice([-1.0, 1.0], 60), agents=3, samples=10)
    return check_builder("ldp_logistic", pairs, relation=ldp_logistic.RELATION,
                         coordinate=pairs[0].original.agents[0].declared.coordinate_sensitivity, factor=factor)


def _rendezvous(factor: float = 1.0) -> BuilderAudit:
    return check_builder("rendezvous", rendezvous.worst_case_pairs(np.zeros((3, 2))), relation=rendezvous.RELATION,
                         factor=factor)


def _fair(d: int = FAIR_DIMENSION) -> BuilderAudit:
    l1, l2 = fair.coefficient_sensitivity(d)
    changes = [("one share", *pair) for pair in fair.worst_case_coefficients(d)]
    return check_release(f"fair_logistic (d = {d})", fair.RELATION, changes, pc.Sensitivity(l1=l1, l2=l2))


def _nonconvex(factor: float = 1.0) -> BuilderAudit:
    features, labels = nonconvex_logistic.paper_data(nodes=3, samples=20, dim=4)
    return check_builder("nonconvex_logistic", nonconvex_logistic.worst_case_pairs(
        features, labels, feature_bound=nonconvex_logistic.PAPER_FEATURE_BOUND), relation=nonconvex_logistic.RELATION,
        factor=factor)


def _decentralized(factor: float = 1.0) -> BuilderAudit:
    X, y = _data(classes=2)
    pairs = l2_logistic.worst_case_pairs(l2_logistic.thesis_preprocess(X), np.where(y > 0, 1.0, -1.0), agents=3)
    return check_builder("decentralized_logistic", pairs,
                         relation=l2_logistic.RELATION, factor=factor)


#: Every builder and the audits of its valid (default) declarations. fair_logistic and distributed_fair_logistic
#: release the same coefficients of one share (problems.fair_logistic.perturb_coefficients).
AUDITS: dict[Callable, tuple[Callable[[], BuilderAudit], ...]] = {
    powerflow.zonal_problem: (_zonal, _zonal_cost_shedding),
    logistic.federated_logistic: (_federated, _federated_add_remove),
    binary.binary_logistic: (_binary,),
    ldp_logistic.ldp_logistic: (_ldp,),
    rendezvous.rendezvous: (_rendezvous,),
    fair.fair_logistic: (_fair,),
    distributed_fair.distributed_fair_logistic: (_fair,),
    nonconvex_logistic.nonconvex_logistic: (_nonconvex,),
    l2_logistic.decentralized_logistic: (_decentralized,),
}
#: Functions that only load data and call a builder above.
DISPATCHERS = {problems.experiment.build: logistic.federated_logistic,
               powerflow.experiment.build: powerflow.zonal_problem}


def _builders() -> list[Callable]:
    """The public functions of problems and powerflow that return a problem (or the fair logistic model)."""
    found = []
    for package in (problems, powerflow):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, function in inspect.getmembers(module, inspect.isfunction):
                returned = str(function.__annotations__.get("return", ""))
                if function.__module__ == module.__name__ and not name.startswith("_") and (
                        "DistributedProblem" in returned or "FairModel" in returned):
                    found.append(function)
    return found


def test_every_builder_is_audited() -> None:
    builders = _builders()
    assert logistic.federated_logistic in builders and powerflow.zonal_problem in builders
    missing = [f"{f.__module__}.{f.__name__}" for f in builders if f not in AUDITS and f not in DISPATCHERS]
    assert missing == [], f"builders without a sensitivity audit (add them to AUDITS): {missing}"


@pytest.mark.parametrize("audit", sorted({a for audits in AUDITS.values() for a in audits}, key=lambda a: a.__name__))
def test_declared_bound_holds_on_the_worst_case_neighbours(audit: Callable[[], BuilderAudit]) -> None:
    result = audit()
    for row in result.norms:
        assert 0 < row.replayed <= row.declared * (1 + 1e-9), row
        print(row.builder, row.norm, f"declared {row.declared:.4g} replayed {row.replayed:.4g} ratio {row.ratio:.3g}",
              "LOOSE (> 10x)" if row.loose else "")


def test_exact_bounds_are_attained() -> None:
    """Power-flow's "exact" and rendezvous's bounds are the sensitivities themselves: the replay attains them."""
    for result in (_zonal(), _zonal_cost_shedding(), _rendezvous()):
        assert [row.ratio for row in result.norms] == pytest.approx([1.0, 1.0], rel=1e-9), result.rows()


def test_a_loose_bound_is_reported() -> None:
    """The functional mechanism's Lemma 21-22 l1 bound grows as d^2/4, its replayed change does not: at Adult's
    d = 13 it is loose by more than 10x (reported), at d = 2 it is not."""
    assert [row.norm for row in _fair(FAIR_DIMENSION).loose] == ["l1"]
    assert _fair(2).loose == []
    assert all(row.ratio < LOOSE_RATIO for row in _federated().norms)


def test_the_nominal_powerflow_bound_fails() -> None:
    """Sec. 6.1.1's 2 beta is exceeded by the replayed gradient change: the audit catches a wrong bound."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.NominalPrivacyWarning)
        with pytest.raises(SensitivityExceeded, match=r"zonal_problem .* the l1 change .* exceeds the declared l1"):
            _zonal(sensitivity="paper")


@pytest.mark.parametrize("audit", [_zonal, _zonal_cost_shedding, _federated, _federated_add_remove, _binary, _ldp,
                                   _rendezvous, _nonconvex, _decentralized], ids=lambda audit: audit.__name__)
def test_a_halved_bound_fails(audit: Callable[..., BuilderAudit]) -> None:
    """Half the declared bound is exceeded: every replay above comes within 2x of its bound (fair_logistic's does not
    at d = 13, which test_a_loose_bound_is_reported shows)."""
    with pytest.raises(SensitivityExceeded, match="exceeds the declared"):
        audit(factor=0.5)


def test_the_nominal_logistic_bound_holds_at_the_iterate() -> None:
    """Eq. (31) at W (nominal only because W is private) is still a bound at every replayed point."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.NominalPrivacyWarning)
        result = _federated(sensitivity="paper")
    assert all(row.replayed <= row.declared for row in result.norms)
