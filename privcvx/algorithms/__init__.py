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
algorithm's privacy claim empirically ([`privcvx.algorithms.privacy_audit`][privcvx.algorithms.privacy_audit]).
"""

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, Coordinator, Monitor
from privcvx.algorithms.conformance import check_algorithm
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

__all__ = ["AgentContext", "AgentProgram", "Algorithm", "Coordinator", "DPDistributedGradient", "DPP2", "DiaDSP",
           "ExactADMM", "IPPADMM", "LinearizedADMM", "Monitor", "PPADMM", "PPDC", "PRADMM", "QDPSGD",
           "RandomizedADMM", "RandomizedDGD", "check_algorithm", "check_privacy"]
