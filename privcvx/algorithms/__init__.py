"""Distributed algorithms, one module each, on one protocol (:mod:`privcvx.algorithms.base`).

* :class:`LinearizedADMM`: Algorithm 1 of Ryu & Kim (paper 004), server-based.
* :class:`DPDistributedGradient`: the DP distributed projected gradient of Huang, Mitra & Vaidya (paper 001).
* :class:`RandomizedADMM`, :class:`RandomizedDGD`: random local aggregators for local DP (Xiao, Ye & Devadas).
* :class:`QDPSGD`: quantized DP decentralized SGD, Q-DPSGD-1/-2 (Ding's thesis, Ch. 4).

:func:`check_algorithm` runs the conformance checks every algorithm must pass.
"""

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, Coordinator, Monitor
from privcvx.algorithms.conformance import check_algorithm
from privcvx.algorithms.dp_gradient import DPDistributedGradient
from privcvx.algorithms.linearized_admm import LinearizedADMM
from privcvx.algorithms.qdpsgd import QDPSGD
from privcvx.algorithms.randomized_admm import RandomizedADMM
from privcvx.algorithms.randomized_dgd import RandomizedDGD

__all__ = ["AgentContext", "AgentProgram", "Algorithm", "Coordinator", "DPDistributedGradient", "LinearizedADMM",
           "Monitor", "QDPSGD", "RandomizedADMM", "RandomizedDGD", "check_algorithm"]
