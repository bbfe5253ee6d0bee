"""PP-ADMM: plausible private decentralized ADMM (Ding's thesis, Sec. 3.4, Algorithm 2).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022 (after Ding et al., CIKM 2020). In round t agent i

1. draws b_i1 ~ N(0, sigma_i1^2 I) and perturbs its local objective, Eq. (20):
   L_per(x) = f_i(x) + <alpha_i^t + b_i1, x> + eta sum_j ||x - (x~_i^t + x~_j^t)/2||^2;
2. solves it *inexactly*: the optimizer O(L_per, beta) returns any x^ with ||grad L_per(x^)||_2 <= beta.
   Here CVXPY solves it, the gradient norm is checked, and Newton steps polish x^ when CVXPY's answer
   falls short (:meth:`PPADMMAgent.local_solve`); a solve that cannot be certified raises, because the
   privacy guarantee rests on the certificate (caveat 6 of the digest);
3. releases x~ = x^ + b_i2, b_i2 ~ N(0, sigma_i2^2 I) ("output fuzzing").

Privacy (Thm. 6; digest Sec. 2.2). The exact minimizer of (20) is (epsilon_i1, delta_i1)-DP by the
objective-perturbation argument (Chaudhuri et al.): the Gaussian part with sigma_i1 calibrated to
epsilon_i3 for the gradient sensitivity S_i (the thesis's 2/|D_i|), the Jacobian part needing
2.8 h_i / mu_i <= epsilon_i1 - epsilon_i3 and 2 h_i < mu_i, where h_i bounds the change of the Hessian of
f_i (c1/|D_i| for the thesis's losses) and mu_i = mu_f + 2 eta |V_i| (the tighter valid form of the
lam_hat rule, caveat 4). Departures from the printed text, each in docs/zcdp_admm.md:

* sigma_i1 uses the analytic Gaussian calibration (Balle & Wang 2018), valid for every epsilon_i3; the
  printed classical one needs epsilon_i3 <= 1 (caveat 2), and is printed with epsilon_i1 in Alg. 3 (caveat 3);
* the fuzzing sensitivity is 2 beta / mu_i by default (``fuzz="conservative"``: both neighbouring datasets'
  inexact solutions lie within beta / mu_i of their own exact minimizers, caveat 7); ``fuzz="printed"``
  gives the thesis's beta / mu_i;
* the thesis charges the (epsilon_i1, delta_i1)-DP step rho_i1 = epsilon_i1^2/(4 ln(1/delta_i1)) zCDP, using
  Lemma 3 in the wrong direction (caveat 1): that step of the accounting is the thesis's, not a theorem;
* the proof is for unconstrained, twice differentiable local objectives: PP-ADMM refuses agents with
  constraints (caveat 5; the gradient-mapping certificate a constrained version needs is not derived).

``relaxation`` gamma != 1 over-relaxes the edge variables and duals (:meth:`ConsensusADMMAgent.relaxed
<privcvx.algorithms.decentralized_admm.ConsensusADMMAgent.relaxed>`): a change of the public linear term of (20)
only, so the privacy argument above and the ledger are unchanged.

Budget split (Sec. 3.5.2): rho = dp_to_zcdp(epsilon, delta) (Lemma 4 inverted; the thesis uses the cruder
epsilon^2 / (4 ln(1/delta))); per release rho_i1 = (rho / R)(1 - splits), rho_i2 = (rho / R) splits with R the
number of releases (T here; c for IPP-ADMM), epsilon_i1 = 2 sqrt(rho_i1 ln(1/delta_i1)), so that the thesis's
charge epsilon_i1^2 / (4 ln(1/delta_i1)) is exactly rho_i1 (Sec. 3.5.2 prints Lemma 4's
rho_i1 + 2 sqrt(rho_i1 ln(1/delta_i1)), whose charge by Thm. 6 would exceed rho_i1), and epsilon_i3 = 0.99 epsilon_i1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.decentralized_admm import (
    DEFAULT_ETA,
    ConsensusADMM,
    ConsensusADMMAgent,
    gradient_sensitivity,
)
from privcvx.errors import ParameterError, PrivacyError, SolverError, check_int, require_positive
from privcvx.privacy.mechanisms import check_delta
from privcvx.privacy.zcdp import dp_to_zcdp, gaussian_rho, thesis_dp_to_zcdp, zcdp_gaussian
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology

FUZZ = ("conservative", "printed")
#: Newton polishing: the relative step of the finite-difference Hessian, and the largest number of steps.
HESSIAN_STEP = 1e-6


def lambda_hat_lower_bound(curvature: float, samples: int, agents: int, epsilon_1: float, epsilon_3: float) -> float:
    """The thesis's rule lam_hat >= 2.8 N c1 / ((epsilon_i1 - epsilon_i3) |D_i|) (Alg. 2), for comparison.

    It drops the 2 eta |V_i| of the local step's modulus (conservative); :class:`PPADMM` checks the tighter
    2.8 h_i / mu_i <= epsilon_i1 - epsilon_i3 instead (caveat 4).
    """
    return 2.8 * agents * curvature / ((epsilon_1 - epsilon_3) * samples)


@dataclass(frozen=True)
class PPBudget:
    """One agent's per-release budget of PP-ADMM (Sec. 3.5.2) and the noise it implies."""

    rho_1: float
    rho_2: float
    epsilon_1: float
    epsilon_3: float
    delta_1: float
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
    delta_1:
        delta_i1 of the objective perturbation (1e-4 in the thesis).
    epsilon_ratio:
        epsilon_i3 / epsilon_i1 (0.99 in the thesis).
    hessian_change:
        h_i, a public bound on ||Hess f_i(x; D) - Hess f_i(x; D')||_2 for neighbouring datasets (c1 / |D_i| for
        losses with L'' <= c1 and ||z|| <= 1); required under privacy. A float or ``{agent name: float}``.
    fuzz:
        "conservative" (default, sensitivity 2 beta / mu_i) or "printed" (beta / mu_i).
    strong_convexity:
        The public mu_f of :class:`~privcvx.algorithms.decentralized_admm.ConsensusADMM`.
    newton_steps:
        The most Newton steps that polish a solve whose gradient norm exceeds beta.
    relaxation:
        gamma in (0, 2): over-relaxed ADMM, as in :class:`~privcvx.algorithms.pr_admm.PRADMM` (1, the default, is
        the thesis's step). It stays DP at the same cost: the relaxed edge variables and dual are computed from the
        neighbours' releases and the agent's own last release, as the unrelaxed ones are, and they only change the
        linear term of L_per; sigma_i1 (from S_i), the Jacobian condition (h_i, mu_i), the fuzzing sensitivity
        2 beta / mu_i and the zCDP charges depend only on the declared sensitivities, mu_i = mu_f + 2 eta |V_i| and
        the budget, none of which gamma moves (docs/zcdp_admm.md, "Acceleration").
    """

    name = "pp_admm"

    def __init__(self, epsilon: float | None = None, delta: float = 1e-4, eta: float = DEFAULT_ETA,
                 beta: float = 10 ** -3.5, splits: float = 0.001, delta_1: float = 1e-4, epsilon_ratio: float = 0.99,
                 hessian_change: float | dict[str, float] | None = None, fuzz: str = "conservative",
                 strong_convexity: float = 0.0, newton_steps: int = 20, relaxation: float = 1.0) -> None:
        self.epsilon, self.delta, self.eta, self.beta, self.splits = epsilon, delta, eta, beta, splits
        self.delta_1, self.epsilon_ratio, self.hessian_change, self.fuzz = delta_1, epsilon_ratio, hessian_change, fuzz
        self.strong_convexity, self.newton_steps, self.relaxation = strong_convexity, newton_steps, relaxation
        self._common(eta, epsilon, delta, strong_convexity, relaxation)
        self._beta = require_positive(beta, argument="beta")
        self._splits = require_positive(splits, argument="splits")
        self._delta_1 = check_delta(delta_1, argument="delta_1")
        self._ratio = require_positive(epsilon_ratio, argument="epsilon_ratio")
        if self._splits >= 1.0 or self._ratio >= 1.0:
            raise ParameterError("splits and epsilon_ratio must lie in (0, 1)",
                                 argument="splits" if self._splits >= 1.0 else "epsilon_ratio")
        if fuzz not in FUZZ:
            raise ParameterError(f"must be one of {FUZZ}, got {fuzz!r}", argument="fuzz")
        self._newton_steps = check_int(newton_steps, argument="newton_steps", minimum=0)
        if self.private and hessian_change is None:
            raise PrivacyError("under privacy the Jacobian step of Thm. 6 needs h_i, a public bound on the change of "
                               "the Hessian of f_i (c1 / |D_i|)", argument="hessian_change")

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        super().check(problem, topology)
        for agent in problem.agents:
            if agent.constraints or any(value not in (None, False) for v in agent.variables
                                         for value in v.attributes.values()):
                raise self.unsupported("constrained local sets",
                                       "the gradient-norm certificate and the objective-perturbation proof of Thm. 6 "
                                       "hold for unconstrained local problems only (use PRADMM, whose output "
                                       "perturbation holds on convex sets)", agent=agent.name, argument="constraints")

    def releases(self, rounds: int) -> int:
        """R: how many releases share the budget (every round)."""
        return rounds

    def release_budget(self) -> float:
        """The rho that the releases share (all of it here; IPP-ADMM keeps a part for the SVT)."""
        return dp_to_zcdp(self._epsilon, self._delta)

    def budget(self, agent: Agent, degree: int, rounds: int) -> PPBudget:
        """Agent i's per-release budget and noise, with the check of the Jacobian condition of Thm. 6."""
        rho = self.release_budget() / self.releases(rounds)
        rho_1, rho_2 = rho * (1.0 - self._splits), rho * self._splits
        epsilon_1 = 2.0 * math.sqrt(rho_1 * math.log(1.0 / self._delta_1))  # thesis_dp_to_zcdp(epsilon_1) = rho_1
        epsilon_3 = self._ratio * epsilon_1
        mu = self.modulus(degree)
        change = self.hessian_change[agent.name] if isinstance(self.hessian_change, dict) else self.hessian_change
        change = require_positive(change, argument="hessian_change", agent=agent.name, allow_zero=True,
                                  error=PrivacyError)
        if not (2.0 * change < mu and 2.8 * change / mu <= epsilon_1 - epsilon_3):
            raise PrivacyError(f"the Jacobian condition of Thm. 6 fails: 2.8 h_i / mu_i = {2.8 * change / mu:.4g} > "
                               f"epsilon_i1 - epsilon_i3 = {epsilon_1 - epsilon_3:.4g} (or 2 h_i >= mu_i = {mu:.4g}); "
                               "raise strong_convexity (lam_hat / N) or eta, or lower epsilon_ratio",
                               agent=agent.name, argument="hessian_change")
        sigma_1 = gradient_sensitivity(agent) * float(dp_accounting.get_sigma_gaussian(epsilon_3, self._delta_1))
        factor = 2.0 if self.fuzz == "conservative" else 1.0
        sigma_2 = factor * self._beta / (math.sqrt(2.0 * rho_2) * mu)
        return PPBudget(rho_1, rho_2, epsilon_1, epsilon_3, self._delta_1, sigma_1, sigma_2)

    def fuzz_sensitivity(self, degree: int) -> float:
        """The L2 sensitivity of x^ - x~ + (its counterpart): 2 beta / mu_i (conservative) or beta / mu_i (printed)."""
        return (2.0 if self.fuzz == "conservative" else 1.0) * self._beta / self.modulus(degree)

    def agent_program(self, agent: Agent, context: AgentContext) -> PPADMMAgent:
        return PPADMMAgent(agent, context, self)


class PPADMMAgent(ConsensusADMMAgent):
    """Agent i of PP-ADMM: b_i1 in the objective, the certified solve, b_i2 on the release."""

    def __init__(self, agent: Agent, context: AgentContext, settings: PPADMM) -> None:
        super().__init__(agent, context, settings)
        self.beta = settings._beta
        self.certificates: list[float] = []
        self.newton = 0
        if settings.private:
            self.budget = settings.budget(agent, self.degree, context.rounds)
            self.sensitivity = gradient_sensitivity(agent)

    def perturbation(self, t: int) -> np.ndarray | None:
        """b_i1 ~ N(0, sigma_i1^2 I), redrawn every round (Alg. 2 line 6)."""
        if not self.settings.private:
            return None
        return self.context.noise.perturb(np.zeros(self.layout.dim), "gaussian", self.budget.sigma_1,
                                          self.sensitivity).value

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
        """O(L_per, beta): CVXPY's solution, certified ||grad L_per(x^)||_2 <= beta, Newton-polished if needed."""
        x = self.solver(linear)
        norm = float(np.linalg.norm(self._gradient(x, linear)))
        for _ in range(self.settings._newton_steps):
            if norm <= self.beta:
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
        if not norm <= self.beta:
            raise SolverError(f"round {t}: the local solve is not certified: ||grad L_per|| = {norm:.3g} > beta = "
                              f"{self.beta:.3g} after Newton polishing (PP-ADMM's privacy needs it)",
                              agent=self.context.name, argument="beta")
        self.certificates.append(norm)
        return x

    def fuzzed(self, t: int, x_hat: np.ndarray) -> np.ndarray:
        """x^ + b_i2, recorded: rho_i1 (objective perturbation, the thesis's charge) and rho_i2 (the fuzzing)."""
        if not self.settings.private:
            return x_hat.copy()
        budget, delta = self.budget, self.settings._delta
        self.charge(t, zcdp_gaussian(thesis_dp_to_zcdp(budget.epsilon_1, budget.delta_1), delta), "objective")
        sensitivity = self.settings.fuzz_sensitivity(self.degree)
        perturbed = self.context.noise.perturb(x_hat, "gaussian", budget.sigma_2, sensitivity)
        self.charge(t, perturbed.accounted(zcdp_gaussian(gaussian_rho(sensitivity, budget.sigma_2), delta)), "output")
        return perturbed.value

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
