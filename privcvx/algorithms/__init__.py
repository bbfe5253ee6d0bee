"""Distributed algorithms, one module each, on one protocol (:mod:`privcvx.algorithms.base`).

* :class:`LinearizedADMM`: Algorithm 1 of Ryu & Kim (paper 004), server-based.
* :class:`DPDistributedGradient`: the DP distributed projected gradient of Huang, Mitra & Vaidya (paper 001).
* :class:`PRADMM`, :class:`PPADMM`, :class:`IPPADMM`: the decentralized zCDP ADMMs of Ding's thesis, Ch. 3.

:func:`check_algorithm` runs the conformance checks every algorithm must pass.
"""

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, Coordinator, Monitor
from privcvx.algorithms.conformance import check_algorithm
from privcvx.algorithms.dp_gradient import DPDistributedGradient
from privcvx.algorithms.ipp_admm import IPPADMM
from privcvx.algorithms.linearized_admm import LinearizedADMM
from privcvx.algorithms.pp_admm import PPADMM
from privcvx.algorithms.pr_admm import PRADMM

__all__ = ["AgentContext", "AgentProgram", "Algorithm", "Coordinator", "DPDistributedGradient", "IPPADMM",
           "LinearizedADMM", "Monitor", "PPADMM", "PRADMM", "check_algorithm"]
