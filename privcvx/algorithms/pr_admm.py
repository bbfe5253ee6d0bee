"""PR-ADMM: differentially private robust decentralized ADMM (Ding's thesis, Sec. 3.3, Algorithm 1).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022 (after Ding et al., IEEE BigData 2019). Every agent solves
the exact local step (14) of `privcvx.algorithms.decentralized_admm` and broadcasts
x~_i^{t+1} = x_i^{t+1} + xi_i^{t+1}, xi ~ N(0, (sigma^2)_i^{t+1} I), with a decaying variance:

* `PeriodicDecay`, Eq. (16): (sigma^2)^{t+1} = (sigma^2)^1 R_P^floor(t / T_p);
* `IterationDecay`, Eq. (17): (sigma^2)^{t+1} = (sigma^2)^1 / (R_T t (t + 1)), undefined at t = 0:
  the first release uses (sigma^2)^1 (the guard that Thm. 3's total implies);
* `ConstantNoise`.

Robustness: a neighbour j whose cumulative deviation sum_k ||x~_i^k - x~_j^k|| exceeds ``threshold`` (U)
is replaced by x~_i^t in the primal step (Alg. 1 line 15); the dual step uses what was received.

Privacy. The release has L2 sensitivity Delta_i = S_i / mu_i with S_i the declared gradient sensitivity
and mu_i = mu_f + 2 eta |V_i| the local step's strong convexity: the local step's first-order
condition, for two datasets, gives mu_i ||x_D - x_D'|| <= ||grad f_i(x_D'; D) - grad f_i(x_D'; D')||, with
or without a convex constraint set W_i. Lemma 10 prints Delta_i = V / (eta |V_i|), which drops the
1/|D_i| of f_i and is about |D_i| times larger (digest, Sec. 2.1): the bound here is the one with a proof.
The local step is computed within the local-solve layer's ``error_bound`` e of the exact argmin in l2 over the
penalized (shared) entries (`privcvx.localsolve.LocalProblem.error_bound`, certified per answer), so what is released
moves by at most Delta_i + 2 e, and that is the sensitivity charged and calibrated. Release k is
rho_k = Delta_i^2 / (2 sigma_k^2)-zCDP (Thm. 1); the agent's ledger sums every rho_k exactly (the closed form of
Thm. 2 prints a "-1" that undercounts by one rho^1). Given (epsilon, delta), sigma_1 is calibrated per agent so
that its total is exactly rho* = dp_to_zcdp(epsilon, delta)
(Lemma 4 inverted); the network's rho is the largest agent's (Lemma 11).

General form: only the shared entries are released, and the local step is mu_i = mu_f + 2 eta min_k |V_i(k)|
strongly convex in them only. An agent with private variables declares a `pc.ReleaseBound` or a
`pc.CurvatureBound` (how the data move f_i) as its ``pc.Declared(release_bound=...)``, from which the sensitivity of
the released part follows (docs/zcdp_admm.md, "General form").
"""

from __future__ import annotations

import math
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
from privcvx.errors import ParameterError, PrivacyError, check_scalar, require_positive
from privcvx.privacy.mechanisms import Gaussian
from privcvx.privacy.sensitivity import certified_solver_error
from privcvx.privacy.zcdp import calibrate_first_sigma, gaussian_rho, zcdp_gaussian
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology


@dataclass(frozen=True)
class ConstantNoise:
    """The same variance in every release."""

    def weight(self, k: int) -> float:
        """(sigma^2)^1 / (sigma^2)^k: release k's share of rho relative to the first release's."""
        return 1.0


@dataclass(frozen=True)
class PeriodicDecay:
    """Periodic linear decay, Eq. (16): (sigma^2)^{t+1} = (sigma^2)^1 R_P^floor(t / T_p), R_P in (0, 1)."""

    rate: float = 0.925
    period: int = 1

    def __post_init__(self) -> None:
        check_scalar(self.rate, argument="rate", kind=float, low=0.0, high=1.0, closed="neither")
        check_scalar(self.period, argument="period", kind=int, low=1)

    def weight(self, k: int) -> float:
        """(sigma^2)^1 / (sigma^2)^k under schedule (16)."""
        return float(self.rate) ** (-((k - 1) // self.period))


@dataclass(frozen=True)
class IterationDecay:
    """Iteration-based decay, Eq. (17): (sigma^2)^{t+1} = (sigma^2)^1 / (R_T t (t + 1)) for t >= 1.

    Eq. (17) divides by 0 at t = 0: the first release uses (sigma^2)^1, as Thm. 3's total implies.
    """

    rate: float = 0.015

    def __post_init__(self) -> None:
        require_positive(self.rate, argument="rate")

    def weight(self, k: int) -> float:
        """(sigma^2)^1 / (sigma^2)^k under schedule (17), with the t = 0 guard."""
        t = k - 1
        return 1.0 if t == 0 else float(self.rate) * t * (t + 1)


Schedule = ConstantNoise | PeriodicDecay | IterationDecay


def missing_bound(agent: str) -> PrivacyError:
    """The error for a general-form agent with private variables and no declared release bound."""
    return PrivacyError("the agent has private variables: the sensitivity of its released shared entries needs a "
                        "declared bound (pc.Declared(release_bound=pc.ReleaseBound or pc.CurvatureBound) on the "
                        "agent)", agent=agent, argument="release_bound")


def thm2_printed_total(rate: float, period: int, rounds: int) -> float:
    """Thm. 2 as printed: rho_total / rho^1 = T_p (1 - R^(T/T_p)) / (R^(T/T_p - 1) - R^(T/T_p)) - 1.

    The fraction alone is sum_{k=1}^T R^-floor((k-1)/T_p) when T_p divides T; the "-1" undercounts it by one
    (digest, Sec. 2.1). Kept to document the erratum; the ledger never uses it.
    """
    ratio = rounds / period
    return period * (1.0 - rate ** ratio) / (rate ** (ratio - 1.0) - rate ** ratio) - 1.0


def thm3_total(rate: float, rounds: int) -> float:
    """Thm. 3: rho_total / rho^1 = (R_T T (T^2 - 1) + 3) / 3 = 1 + sum_{t=1}^{T-1} R_T t (t + 1)."""
    return (rate * rounds * (rounds * rounds - 1) + 3.0) / 3.0


class PRADMM(ConsensusADMM):
    """PR-ADMM (Algorithm 1 of Ch. 3): exact local steps, Gaussian output noise with a decaying variance.

    In general form (keys held by some agents, private variables) agent i's penalty is, for each shared entry k,
    eta sum_{j in V_i(k)} ||x_k - (x~_{i,k} + x~_{j,k})/2||^2 over the neighbours holding k, with the dual (13)
    per entry; private variables are free in the local step and never released.

    Parameters
    ----------
    epsilon, delta:
        The network's total (epsilon, delta) over the run (zCDP, Lemma 4); ``epsilon=None`` (default)
        runs without noise: then this is the non-private decentralized ADMM of Shi et al., the thesis's baseline.
    eta:
        The penalty eta (0.5 in the thesis).
    schedule:
        `PeriodicDecay` (default, the thesis's best R_P = 0.925, T_p = 1), `IterationDecay`
        or `ConstantNoise`.
    threshold:
        U, the cumulative-deviation threshold of the robustness filter; None (default) turns it off.
    strong_convexity:
        A public lower bound mu_f on every f_i's strong-convexity modulus (sensitivity S_i / (mu_f + 2 eta |V_i|)).
    relaxation:
        gamma in (0, 2): over-relaxed ADMM (1, the default, is the thesis's). Computed from the releases alone
        (post-processing), so the privacy accounting is unchanged (docs/zcdp_admm.md, "Acceleration").
    """

    name = "pr_admm"
    general_form = True

    def __init__(self, epsilon: float | None = None, delta: float = 1e-4, eta: float = DEFAULT_ETA,
                 schedule: Schedule | None = None, threshold: float | None = None,
                 strong_convexity: float = 0.0, relaxation: float = 1.0) -> None:
        self.epsilon, self.delta, self.eta, self.schedule = epsilon, delta, eta, schedule
        self.threshold, self.strong_convexity = threshold, strong_convexity
        self.relaxation = relaxation
        self._common(eta, epsilon, delta, strong_convexity, relaxation)
        if self._relaxation != 1.0 and threshold is not None:
            raise ParameterError("the robustness threshold U is defined for the thesis's step (relaxation = 1)",
                                 argument="relaxation")
        self._schedule = PeriodicDecay() if schedule is None else schedule
        if not isinstance(self._schedule, (ConstantNoise, PeriodicDecay, IterationDecay)):
            raise ParameterError(f"must be a PeriodicDecay, IterationDecay or ConstantNoise, got {schedule!r}",
                                 argument="schedule")
        self._threshold = math.inf if threshold is None else require_positive(threshold, argument="threshold")

    def sensitivity(self, agent: Agent, degree: int, private_variables: bool = False) -> float:
        """The L2 sensitivity Delta_i of agent i's released (shared) local solution.

        S_i / mu_i with mu_i = mu_f + 2 eta min_k |V_i(k)| (|V_i| under full consensus), or, when the agent
        declares a release bound (``agent.declared.release_bound``, a `pc.ReleaseBound` or `pc.CurvatureBound`;
        required when it has private variables), that bound's ``sensitivity(mu_i)`` (docs/zcdp_admm.md, "General
        form").
        """
        declared = agent.declared.release_bound
        mu = self.modulus(degree)
        if not mu > 0.0:
            raise PrivacyError("the local step is not strongly convex on the released entries (an entry no "
                               "neighbour holds, and strong_convexity = 0)", agent=agent.name, argument="topology")
        if declared is None:
            if private_variables:  # check() refuses this in the driver; a program built alone still must not
                raise missing_bound(agent.name)
            return gradient_sensitivity(agent) / mu
        return declared.sensitivity(mu)

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        """The engine's checks; under privacy, a declared release bound for every agent with private variables."""
        super().check(problem, topology)
        if self.private:
            for agent, layout in zip(problem.agents, problem.layouts, strict=True):
                if layout.shared_local.size < layout.dim and agent.declared.release_bound is None:
                    raise missing_bound(layout.name)

    def sigmas(self, sensitivity: float, rounds: int) -> np.ndarray:
        """sigma_k, k = 1..T: sigma_1 calibrated so that the T releases spend exactly (epsilon, delta) in zCDP."""
        weights = np.array([self._schedule.weight(k) for k in range(1, rounds + 1)])
        if sensitivity == 0.0:  # an agent without private data: its releases are public, drawn without noise
            return np.zeros(rounds)
        first = calibrate_first_sigma(self._epsilon, self._delta, sensitivity, weights)
        return first / np.sqrt(weights)

    def agent_program(self, agent: Agent, context: AgentContext) -> PRADMMAgent:
        return PRADMMAgent(agent, context, self)


class PRADMMAgent(ConsensusADMMAgent):
    """Agent i of PR-ADMM: the robustness filter and the noisy release."""

    def __init__(self, agent: Agent, context: AgentContext, settings: PRADMM) -> None:
        super().__init__(agent, context, settings)
        self.threshold = settings._threshold
        self.deviation = dict.fromkeys(self.neighbours, 0.0)
        if settings.private:
            private_variables = self.layout.shared_local.size < self.layout.dim
            exact = settings.sensitivity(agent, self.penalty_degree, private_variables)
            # the computed step is within error_bound of the exact argmin in l2 (certified): two neighbouring releases
            # differ by up to 2 error_bound more (0 without private data: the same input, the same answer)
            self.sensitivity = exact + 2.0 * certified_solver_error(self.solver.error_bound, agent.name) \
                if exact > 0.0 else 0.0
            self.sigma = settings.sigmas(self.sensitivity, context.rounds)

    def primal_neighbours(self, t: int) -> dict[str, np.ndarray]:
        """Alg. 1 lines 11-16: a neighbour whose cumulative deviation exceeds U is replaced by x~_i^t (on the
        entries both hold)."""
        for j, value in self.received.items():
            mine, theirs = self.common(j, value)
            self.deviation[j] += float(np.linalg.norm(mine - theirs))
        return {j: (self.in_place_of(j, value) if self.deviation[j] > self.threshold else value)
                for j, value in self.received.items()}

    def release(self, t: int, x_hat: np.ndarray) -> np.ndarray:
        if not self.settings.private:
            return x_hat.copy()
        sigma = float(self.sigma[min(t, len(self.sigma)) - 1])
        # sensitivity 0: a public value, released without noise and charged nothing (the mechanism is not recorded)
        mechanism = zcdp_gaussian(gaussian_rho(self.sensitivity, sigma), self.settings._delta) if sigma > 0.0 \
            else Gaussian(epsilon=1.0, delta=self.settings._delta)
        return self.released(t, x_hat, mechanism, self.sensitivity, "output", sigma)

    def report(self) -> dict[str, Any]:
        return {**super().report(), "filtered": sorted(j for j, d in self.deviation.items() if d > self.threshold)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "deviation": dict(self.deviation)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.deviation = dict(state["deviation"])
