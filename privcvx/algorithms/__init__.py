"""Distributed algorithms, one module each, on one protocol ([`privcvx.algorithms.base`][privcvx.algorithms.base]).

* `LinearizedADMM`: Algorithm 1 of Ryu & Kim (paper 004), server-based.
* `ExactADMM`: consensus ADMM with exact local solves, the non-private yardstick of rounds.
* `DPDistributedGradient`: the DP distributed projected gradient of Huang, Mitra & Vaidya (paper 001).
* `RandomizedADMM`, `RandomizedDGD`: random local aggregators for local DP (Xiao, Ye & Devadas).
* `PRADMM`, `PPADMM`, `IPPADMM`: the decentralized zCDP ADMMs of Ding's thesis, Ch. 3.
* `QDPSGD`: quantized DP decentralized SGD, Q-DPSGD-1/-2 (Ding's thesis, Ch. 4).
* `DPP2`: double privacy protection for nonconvex problems, Ou, Wang, Liu & Lu (paper 003), with its
  baselines `DiaDSP` and `PPDC`.

`check_algorithm` runs the conformance checks every algorithm must pass; `check_privacy` audits a private
algorithm's privacy claim empirically ([`privcvx.algorithms.privacy_audit`][privcvx.algorithms.privacy_audit]);
`all_algorithms()` lists every method, as scikit-learn's ``all_estimators()``, for suites that walk them all.
What a new method needs (the protocol's bases, `Message`, `LatestReleases`, `GradientEvaluator` and the
conformance problems) is importable from here.
"""

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, Coordinator, LatestReleases, Monitor
from privcvx.algorithms.conformance import check_algorithm, consensus_problem, general_form_problem
from privcvx.algorithms.diadsp import DiaDSP
from privcvx.algorithms.dp_gradient import DPDistributedGradient
from privcvx.algorithms.dpp2 import DPP2
from privcvx.algorithms.exact_admm import ExactADMM
from privcvx.algorithms.ipp_admm import IPPADMM
from privcvx.algorithms.linearized_admm import LinearizedADMM
from privcvx.algorithms.pp_admm import PPADMM
from privcvx.algorithms.ppdc import PPDC
from privcvx.algorithms.pr_admm import PRADMM
from privcvx.algorithms.privacy_audit import check_privacy
from privcvx.algorithms.qdpsgd import QDPSGD
from privcvx.algorithms.randomized_admm import RandomizedADMM
from privcvx.algorithms.randomized_dgd import RandomizedDGD
from privcvx.gradients import GradientEvaluator
from privcvx.messages import Message


def all_algorithms() -> list[tuple[str, type[Algorithm]]]:
    """Every method of this package, as ``(name, class)`` sorted by name: the concrete `Algorithm` subclasses
    that ``__all__`` exports."""
    return sorted((name, value) for name, value in globals().items()
                  if name in __all__ and isinstance(value, type) and issubclass(value, Algorithm)
                  and value is not Algorithm)


__all__ = ["AgentContext", "AgentProgram", "Algorithm", "Coordinator", "DPDistributedGradient", "DPP2", "DiaDSP",
           "ExactADMM", "GradientEvaluator", "IPPADMM", "LatestReleases", "LinearizedADMM", "Message", "Monitor",
           "PPADMM", "PPDC", "PRADMM", "QDPSGD", "RandomizedADMM", "RandomizedDGD", "all_algorithms",
           "check_algorithm", "check_privacy", "consensus_problem", "general_form_problem"]
