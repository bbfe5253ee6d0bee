"""PP-ADMM: plausible private decentralized ADMM (Ding's thesis, Sec. 3.4, Algorithm 2).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022 (after Ding et al., CIKM 2020). In round t agent i

1. draws b_i1 ~ N(0, sigma_i1^2 I) and perturbs its local objective, Eq. (20):
   L_per(x) = f_i(x) + <alpha_i^t + b_i1, x> + eta sum_j ||x - (x~_i^t + x~_j^t)/2||^2;
2. solves it *inexactly*: the optimizer O(L_per, beta) returns any x^ with ||grad L_per(x^)||_2 <= beta.
   Here CVXPY solves it, the gradient norm is checked, and Newton steps polish x^ when CVXPY's answer
   falls short (`PPADMMAgent.local_solve`); a solve that cannot be certified raises, because the
   privacy guarantee rests on the certificate (caveat 6 of the digest);
3. releases x~ = x^ + b_i2, b_i2 ~ N(0, sigma_i2^2 I) ("output fuzzing").

Privacy (Thm. 6; digest Sec. 2.2; docs/zcdp_admm.md, "PP-ADMM, accounting"). The exact minimizer x of (20) has
density phi_sigma(B(x; D_i)) |det J(x; D_i)| (the change of variables of the proof of Thm. 6): its privacy loss is
the Gaussian loss of b_i1 against a shift of norm <= S_i (the gradient sensitivity, the thesis's 2/|D_i|) plus the
log-ratio of the Jacobians, at most xi_i = -2 ln(1 - h_i / mu_i) (rank-2 Hessian change of norm <= h_i, c1/|D_i| for
the thesis's losses; mu_i = mu_f + 2 eta |V_i|; needs 2 h_i < mu_i). So each objective release is (xi_i, rho_i1)-zCDP
with rho_i1 = S_i^2 / (2 sigma_i1^2) for the sigma_i1 drawn: no (epsilon_i1, delta_i1) step and no delta_i1.
Departures from the printed text, each in docs/zcdp_admm.md:

* the thesis calibrates sigma_i1 to (epsilon_i3, delta_i1) and charges the step rho_i1 = epsilon_i1^2 / (4
ln(1/delta_i1))
  (Lemma 3 used in the wrong direction, caveat 1): that charge understates the noise drawn and drops delta_i1 and
  the Jacobian term. Here sigma_i1 = S_i / sqrt(2 rho_i1) is drawn from the rho_i1 charged, and xi_i is charged too;
* the fuzzing sensitivity is 2 beta / mu_i by default (``fuzz="conservative"``: both neighbouring datasets'
  inexact solutions lie within beta / mu_i of their own exact minimizers, caveat 7); ``fuzz="printed"``
  gives the thesis's beta / mu_i;
* the proof is for unconstrained, twice differentiable local objectives: PP-ADMM refuses agents with
  constraints (caveat 5; the gradient-mapping certificate a constrained version needs is not derived).

``relaxation`` gamma != 1 over-relaxes the edge variables and duals (`ConsensusADMMAgent.relaxed`
): a change of the public linear term of (20)
only, so the privacy argument above and the ledger are unchanged.

Budget (calibrated so that the corrected total *is* the target): agent i makes at most R releases (T here; c for
IPP-ADMM), so its zCDP is (R xi_i, rho_i) with rho_i the sum of its rho's, and its (epsilon, delta)-DP is
R xi_i + rho_i + 2 sqrt(rho_i ln(1/delta)) (Lemma 4 with the additive xi). Setting that to the target gives
rho_i* = dp_to_zcdp(epsilon, delta, xi=R xi_i) (a `PrivacyError` if R xi_i >= epsilon); per release
rho_i1 = (rho_i*/R)(1 - splits), rho_i2 = (rho_i*/R) splits (Sec. 3.5.2's split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.decentralized_admm import (
    DEFAULT_ETA,
    ConsensusADMM,
    ConsensusADMMAgent,
    gradient_sensitivity,
)
from privcvx.errors import ParameterError, PrivacyError, SolverError, check_int, check_scalar, require_positive
from privcvx.privacy.mechanisms import Sensitivity, ZCDPRelease
from privcvx.privacy.zcdp import (
    dp_to_zcdp,
    gaussian_rho,
    gaussian_sigma,
    jacobian_epsilon,
    objective_perturbation,
    zcdp_gaussian,
)
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology

FUZZ = ("conservative", "printed")
#: Newton polishing: the relative step of the finite-difference Hessian, and the largest number of steps.
HESSIAN_STEP = 1e-6


def lambda_hat_lower_bound(curvature: float, samples: int, agents: int, epsilon_1: float, epsilon_3: float) -> float:
    """The thesis's rule lam_hat >= 2.8 N c1 / ((epsilon_i1 - epsilon_i3) |D_i|) (Alg. 2), for comparison.

    It drops the 2 eta |V_i| of the local step's modulus (conservative, caveat 4). `PPADMM` has no
    epsilon_i1 - epsilon_i3 to fit: it charges the Jacobian term xi_i = -2 ln(1 - h_i / mu_i) of every objective
    release.
    """
    return 2.8 * agents * curvature / ((epsilon_1 - epsilon_3) * samples)


@dataclass(frozen=True)
class PPBudget:
    """One agent's per-release budget of PP-ADMM (Sec. 3.5.2) and the noise it implies.

    ``jacobian`` is xi_i = -2 ln(1 - h_i / mu_i), the additive zCDP term of each objective release.
    """

    rho_1: float
    rho_2: float
    jacobian: float
    sigma_1: float
    sigma_2: float


class PPADMM(ConsensusADMM):
    """PP-ADMM (Algorithm 2 of Ch. 3): objective perturbation, a certified inexact solve, output fuzzing.

    Parameters
    ----------
    epsilon, delta:
        The network's total (epsilon, delta) (zCDP, Lemma 4); ``None`` runs without noise (the certified
        inexact solves remain).
    eta:
        The penalty (0.5 in the thesis).
    beta:
        The certified gradient-norm tolerance of the local solve (10^-3.5 in the thesis).
    splits:
        rho_i2's share of each release's rho (0.001 in the thesis).
    hessian_change:
        h_i, a public bound on ||Hess f_i(x; D) - Hess f_i(x; D')||_2 for neighbouring datasets (c1 / |D_i| for
        losses with L'' <= c1 and ||z|| <= 1), with the difference of rank <= 2 (one sample's term, as for the thesis's
        losses); required under privacy. Default (None): each agent's declared ``hessian_change`` (`pc.Declared`);
        a float is one bound for every agent.
    fuzz:
        "conservative" (default, sensitivity 2 beta / mu_i) or "printed" (beta / mu_i).
    strong_convexity:
        The public mu_f of [`ConsensusADMM`][privcvx.algorithms.decentralized_admm.ConsensusADMM].
    newton_steps:
        The most Newton steps that polish a solve whose gradient norm exceeds beta.
    relaxation:
        gamma in (0, 2): over-relaxed ADMM, as in [`PRADMM`][privcvx.algorithms.pr_admm.PRADMM] (1, the default, is
        the thesis's step). It stays DP at the same cost: the relaxed edge variables and dual are computed from the
        neighbours' releases and the agent's own last release, as the unrelaxed ones are, and they only change the
        linear term of L_per; sigma_i1 (from S_i), the Jacobian term xi_i (h_i, mu_i), the fuzzing sensitivity
        2 beta / mu_i and the zCDP charges depend only on the declared sensitivities, mu_i = mu_f + 2 eta |V_i| and
        the budget, none of which gamma moves (docs/zcdp_admm.md, "Acceleration").
    """

    name = "pp_admm"

    def __init__(self, epsilon: float | None = None, delta: float = 1e-4, eta: float = DEFAULT_ETA,
                 beta: float = 10 ** -3.5, splits: float = 0.001,
                 hessian_change: float | None = None, fuzz: str = "conservative",
                 strong_convexity: float = 0.0, newton_steps: int = 20, relaxation: float = 1.0) -> None:
        self.epsilon, self.delta, self.eta, self.beta, self.splits = epsilon, delta, eta, beta, splits
        self.hessian_change, self.fuzz = hessian_change, fuzz
        self.strong_convexity, self.newton_steps, self.relaxation = strong_convexity, newton_steps, relaxation
        self._common(eta, epsilon, delta, strong_convexity, relaxation)
        self._beta = require_positive(beta, argument="beta")
        self._splits = require_positive(splits, argument="splits")
        if self._splits >= 1.0:
            raise ParameterError(f"must lie in (0, 1), got {splits!r}", argument="splits")
        check_scalar(fuzz, argument="fuzz", choices=FUZZ)
        self._newton_steps = check_int(newton_steps, argument="newton_steps", minimum=0)
        self._hessian_change = None if hessian_change is None else require_positive(
            hessian_change, argument="hessian_change", allow_zero=True, error=PrivacyError)

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        super().check(problem, topology)
        for agent in problem.agents:
            if agent.constraints or any(value not in (None, False) for v in agent.variables
                                         for value in v.attributes.values()):
                raise self.unsupported("constrained local sets",
                                       "the gradient-norm certificate and the objective-perturbation proof of Thm. 6 "
                                       "hold for unconstrained local problems only (use PRADMM, whose output "
                                       "perturbation holds on convex sets)", agent=agent.name, argument="constraints")
            if self.private and self._hessian_change is None and agent.declared.hessian_change is None:
                raise PrivacyError("under privacy the Jacobian step of Thm. 6 needs h_i, a public bound on the change "
                                   "of the Hessian of f_i (c1 / |D_i|): declare pc.Declared(hessian_change=h_i) on the "
                                   "agent, or give hessian_change for every agent", agent=agent.name,
                                   argument="hessian_change")

    def releases(self, rounds: int) -> int:
        """R: how many releases share the budget (every round)."""
        return rounds

    def svt_fraction(self) -> float:
        """The share of the zCDP budget kept for IPP-ADMM's sparse vector test (none here)."""
        return 0.0

    def jacobian(self, agent: Agent, degree: int) -> float:
        """xi_i = -2 ln(1 - h_i / mu_i): the Jacobian term of each of agent i's objective releases (Thm. 6's proof)."""
        change = self._hessian_change if self._hessian_change is not None else agent.declared.require(
            "hessian_change", agent=agent.name, why="PP-ADMM's Jacobian step of Thm. 6 needs h_i")
        try:
            return jacobian_epsilon(change, self.modulus(degree))
        except PrivacyError as error:
            raise PrivacyError(f"{error.args[0]}; raise strong_convexity (lam_hat / N) or eta", agent=agent.name,
                               argument="hessian_change") from None

    def agent_rho(self, agent: Agent, degree: int, rounds: int) -> float:
        """rho_i* = dp_to_zcdp(epsilon, delta, xi = R xi_i): agent i's whole zCDP budget, so that its corrected total
        R xi_i + rho_i* + 2 sqrt(rho_i* ln(1/delta)) is exactly the target epsilon (docs/zcdp_admm.md)."""
        xi = self.releases(rounds) * self.jacobian(agent, degree)
        if xi >= self._epsilon:
            raise PrivacyError(f"the Jacobian terms of Thm. 6 alone, R xi_i = {xi:.4g}, exceed epsilon = "
                               f"{self._epsilon:.4g}; raise strong_convexity (lam_hat / N) or eta, or lower the "
                               "rounds (IPP-ADMM: max_broadcasts)", agent=agent.name, argument="hessian_change")
        return dp_to_zcdp(self._epsilon, self._delta, xi=xi)

    def budget(self, agent: Agent, degree: int, rounds: int) -> PPBudget:
        """Agent i's per-release budget and noise: sigma_i1 = S_i / sqrt(2 rho_i1) (Lemma 1 inverted)."""
        rho = (1.0 - self.svt_fraction()) * self.agent_rho(agent, degree, rounds) / self.releases(rounds)
        rho_1, rho_2 = rho * (1.0 - self._splits), rho * self._splits
        sigma_1 = gaussian_sigma(gradient_sensitivity(agent), rho_1)
        sigma_2 = gaussian_sigma(self.fuzz_sensitivity(degree), rho_2)
        return PPBudget(rho_1, rho_2, self.jacobian(agent, degree), sigma_1, sigma_2)

    def fuzz_sensitivity(self, degree: int) -> float:
        """The L2 sensitivity of x^ - x~ + (its counterpart): 2 beta / mu_i (conservative) or beta / mu_i (printed)."""
        return (2.0 if self.fuzz == "conservative" else 1.0) * self._beta / self.modulus(degree)

    def agent_program(self, agent: Agent, context: AgentContext) -> PPADMMAgent:
        return PPADMMAgent(agent, context, self)


class PPADMMAgent(ConsensusADMMAgent):
    """Agent i of PP-ADMM: b_i1 in the objective, the certified solve, b_i2 on the release."""

    def __init__(self, agent: Agent, context: AgentContext, settings: PPADMM) -> None:
        super().__init__(agent, context, settings)
        self.certificates: list[float] = []
        self.newton = 0
        if settings.private:
            self.budget = settings.budget(agent, self.degree, context.rounds)
            self.sensitivity = gradient_sensitivity(agent)

    def perturbation(self, t: int) -> np.ndarray | None:
        """b_i1 ~ N(0, sigma_i1^2 I), redrawn every round (Alg. 2 line 6)."""
        if not self.settings.private:
            return None
        budget = self.budget  # drawn here, charged with the broadcast it protects (fuzzed)
        return self.context.release(np.zeros(self.layout.dim), ZCDPRelease(budget.rho_1, budget.jacobian),
                                    Sensitivity(l2=self.sensitivity), scale=budget.sigma_1, charge=False,
                                    tags={"label": "objective"})

    def _gradient(self, x: np.ndarray, linear: np.ndarray) -> np.ndarray:
        """grad L_per(x) = grad f_i(x) + linear + 2 eta |V_i| x."""
        return self.evaluator.gradient(x) + linear + 2.0 * self.eta * self.degree * x

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        """Hess L_per(x) by central differences of grad f_i, symmetrized, plus 2 eta |V_i| I."""
        dim = x.size
        h = HESSIAN_STEP * max(1.0, float(np.linalg.norm(x)))
        columns = [(self.evaluator.gradient(x + h * e) - self.evaluator.gradient(x - h * e)) / (2.0 * h)
                   for e in np.eye(dim)]
        hessian = np.array(columns)
        return 0.5 * (hessian + hessian.T) + 2.0 * self.eta * self.degree * np.eye(dim)

    def local_solve(self, t: int, linear: np.ndarray) -> np.ndarray:
        """O(L_per, beta): the local-solve layer's solution, certified ||grad L_per(x^)||_2 <= beta, Newton-polished
        if needed."""
        x, beta = super().local_solve(t, linear), self.settings._beta
        norm = float(np.linalg.norm(self._gradient(x, linear)))
        for _ in range(self.settings._newton_steps):
            if norm <= beta:
                break
            gradient = self._gradient(x, linear)
            direction = np.linalg.solve(self._hessian(x), -gradient)
            step = 1.0
            while step > 1e-8:
                candidate = x + step * direction
                candidate_norm = float(np.linalg.norm(self._gradient(candidate, linear)))
                if candidate_norm < norm:
                    x, norm = candidate, candidate_norm
                    break
                step *= 0.5
            else:
                break
            self.newton += 1
        if not norm <= beta:
            raise SolverError(f"round {t}: the local solve is not certified: ||grad L_per|| = {norm:.3g} > beta = "
                              f"{beta:.3g} after Newton polishing (PP-ADMM's privacy needs it)",
                              agent=self.context.name, argument="beta")
        self.certificates.append(norm)
        return x

    def fuzzed(self, t: int, x_hat: np.ndarray) -> np.ndarray:
        """x^ + b_i2, recorded: the objective release (xi_i, S_i^2 / (2 sigma_i1^2)) and rho_i2 (the fuzzing)."""
        if not self.settings.private:
            return x_hat.copy()
        budget, delta = self.budget, self.settings._delta
        self.charge(t, objective_perturbation(self.sensitivity, budget.sigma_1, budget.jacobian, delta), "objective")
        sensitivity = self.settings.fuzz_sensitivity(self.degree)
        return self.released(t, x_hat, zcdp_gaussian(gaussian_rho(sensitivity, budget.sigma_2), delta), sensitivity,
                             "output", budget.sigma_2)

    def release(self, t: int, x_hat: np.ndarray) -> np.ndarray | None:
        return self.fuzzed(t, x_hat)

    def report(self) -> dict[str, Any]:
        """Adds the certified gradient norms: a *diagnostic* computed from private data, not a release."""
        if not self.context.diagnostics:
            return super().report()
        return {**super().report(), "diagnostic_certificates": list(self.certificates), "newton_steps": self.newton}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "certificates": list(self.certificates), "newton": self.newton}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.certificates, self.newton = list(state["certificates"]), int(state["newton"])
