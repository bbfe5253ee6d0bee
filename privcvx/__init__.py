"""privcvx: differentially private distributed convex optimization on top of CVXPY.

Declare each agent's local objective (which holds private data) and its public convex
constraint set W_p in CVXPY; privcvx runs a distributed algorithm on it (by default Algorithm 1
of Ryu & Kim, DP linearized ADMM with multiple local updates, with objective perturbation
(Eq. (10)) or output perturbation (Eq. (12)) and Laplace or Gaussian noise; the methods of
``privcvx.algorithms`` run on any ``pc.Topology``) and accounts for the privacy spent.
"""

from privcvx import algorithms, errors, runtime, schedules
from privcvx.comparison import Method, Study, compare
from privcvx.declared import CurvatureBound, Declared, ReleaseBound, SampleLoss
from privcvx.errors import ConvergenceWarning, NominalPrivacyWarning
from privcvx.messages import Message, Transcript
from privcvx.privacy.mechanisms import Budget, Gaussian, Laplace, Mechanism, Sensitivity
from privcvx.privacy.perturbation import ObjectivePerturbation, OutputPerturbation
from privcvx.problem import Agent, AgentSpec, DistributedProblem, SampledAgent
from privcvx.reference import CentralizedSolution
from privcvx.results import Result, load_result
from privcvx.topology import Topology
from privcvx.version import __version__ as __version__

__all__ = [
    "Agent", "AgentSpec", "Budget", "CentralizedSolution", "ConvergenceWarning", "CurvatureBound", "Declared",
    "DistributedProblem", "Gaussian", "Laplace", "Mechanism", "Message", "Method", "NominalPrivacyWarning",
    "ObjectivePerturbation", "OutputPerturbation", "ReleaseBound", "Result", "SampleLoss", "SampledAgent",
    "Sensitivity", "Study", "Topology", "Transcript", "algorithms", "compare", "errors", "load_result", "runtime",
    "schedules",
]
