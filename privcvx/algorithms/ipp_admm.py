"""IPP-ADMM: PP-ADMM whose broadcasts are gated by the sparse vector technique (Ding's thesis, Sec. 3.5, Alg. 3).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022 (after Ding et al., CIKM 2020). Agent i solves the perturbed
local step of PP-ADMM (`privcvx.algorithms.pp_admm`) every round, then asks the SVT of Lyu et al.
(VLDB 2017, Alg. 1) whether the step is worth a broadcast:

    q = Clip[f_i(x~_i^t) - f_i(x^_i^{t+1})]          (here: the whole difference clipped to [-C, C])
    broadcast  iff  q + Lap(4 c C / epsilon_2) >= alpha + rho,   rho = Lap(2 c C / epsilon_1) drawn once

with at most c broadcasts (the SVT halts after c "above" answers). A broadcast is fuzzed and charged as in
PP-ADMM; a silent round releases nothing and costs nothing, and the neighbours reuse the last message
they received (Alg. 3 lines 17-19). The clipped query has sensitivity 2 C (Lemma 12, read as the range
bound: the digest notes that the printed proof holds x^ fixed and that the unclipped regularizer part
would escape the clip, so the whole difference is clipped here). The SVT is (epsilon_1 + epsilon_2)-DP
(Lemma 13). A generic epsilon-DP mechanism is dominated only by randomized response, so it is recorded once as
[`PureDP`][privcvx.privacy.mechanisms.PureDP] (epsilon_1 + epsilon_2) (randomized response's privacy profile, not a
Laplace's), (epsilon_1 + epsilon_2)^2 / 2 in zCDP; Thm. 10's total is rho'_i = rho'_1 + c (rho_i1 + rho_i2), plus
c xi_i, the Jacobian terms of the c objective releases (`privcvx.algorithms.pp_admm`). The threshold noise
Lap(2 c C / epsilon_1) of Alg. 3 has an extra
factor c over Lyu et al.'s Lap(Delta / epsilon_1) (conservative; kept as printed).

Budget: the thesis does not say how epsilon is split between the SVT and the releases. Here the SVT
gets ``svt_share`` of agent i's rho_i* = dp_to_zcdp(epsilon, delta, xi = c xi_i), split epsilon_1 : epsilon_2 =
1 : (2c)^(2/3) (Lyu et al.), and the c releases share the rest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.decentralized_admm import DEFAULT_ETA
from privcvx.algorithms.pp_admm import PPADMM, PPADMMAgent
from privcvx.errors import ParameterError, check_int, check_scalar, require_positive
from privcvx.privacy.mechanisms import Laplace, PureDP, Sensitivity
from privcvx.problem import Agent

#: The SVT query: the printed decrease f_i(x~_i^t) - f_i(x^) (Alg. 3), or its absolute value ("change").
QUERIES = ("decrease", "change")


class IPPADMM(PPADMM):
    """IPP-ADMM (Algorithm 3 of Ch. 3): PP-ADMM with SVT-gated broadcasts.

    Parameters (besides [`PPADMM`][privcvx.algorithms.pp_admm.PPADMM]'s)
    ----------
    max_broadcasts:
        c, the SVT's cutoff (at most c broadcasts per agent); None: the number of rounds.
    clip:
        C_loss: the query is clipped to [-C, C] (2 in the thesis).
    threshold:
        alpha, the SVT threshold (1e-3 in the thesis, with query="decrease"; the default 1e-6 with query="change"
        reaches the optimum without noise).
    svt_share:
        The SVT's share of the zCDP budget (not given by the thesis).
    query:
        "change" (default) or "decrease" (Alg. 3 as printed: broadcast when the local loss fell by more than
        alpha). "change" is the absolute value: broadcast when the local loss moved by more than alpha, whichever
        way. Without noise, the printed query can silence an agent whose loss must rise for the consensus, and the run
        stalls (docs/zcdp_admm.md); the clipped absolute value has the same sensitivity 2 C.
    relaxation:
        gamma in (0, 2), as in PP-ADMM: the same ledger for every gamma. Besides PP-ADMM's argument, the SVT's
        query sensitivity 2 C is the clip's range, whatever the local step computed, and the gate compares the
        agent's own release with its new solution, neither of which is a relaxed quantity. A silent neighbour's
        last release keeps entering the relaxed edge and dual updates, as it enters the unrelaxed ones.
    """

    name = "ipp_admm"
    silent_neighbours = True

    def __init__(self, epsilon: float | None = None, delta: float = 1e-4, eta: float = DEFAULT_ETA,
                 beta: float = 10 ** -3.5, splits: float = 0.001,
                 hessian_change: float | None = None, fuzz: str = "conservative",
                 strong_convexity: float = 0.0, newton_steps: int = 20, max_broadcasts: int | None = None,
                 clip: float = 2.0, threshold: float = 1e-6, svt_share: float = 0.1, query: str = "change",
                 relaxation: float = 1.0) -> None:
        super().__init__(epsilon=epsilon, delta=delta, eta=eta, beta=beta, splits=splits,
                         hessian_change=hessian_change, fuzz=fuzz,
                         strong_convexity=strong_convexity, newton_steps=newton_steps, relaxation=relaxation)
        self.max_broadcasts, self.clip, self.threshold, self.svt_share = max_broadcasts, clip, threshold, svt_share
        self.query = query
        check_scalar(query, argument="query", choices=QUERIES)
        self._c = None if max_broadcasts is None else check_int(max_broadcasts, argument="max_broadcasts", minimum=1)
        self._clip = require_positive(clip, argument="clip")
        self._threshold = check_scalar(threshold, argument="threshold", kind=float)
        self._svt_share = require_positive(svt_share, argument="svt_share")
        if self._svt_share >= 1.0:
            raise ParameterError(f"must lie in (0, 1), got {svt_share!r}", argument="svt_share")

    def cutoff(self, rounds: int) -> int:
        """The most broadcasts an agent may make in a run of ``rounds`` (the cap c of Alg. 3)."""
        return rounds if self._c is None else min(self._c, rounds)

    def releases(self, rounds: int) -> int:
        return self.cutoff(rounds)

    def svt_fraction(self) -> float:
        return self._svt_share

    def svt_epsilons(self, agent: Agent, degree: int, rounds: int) -> tuple[float, float]:
        """(epsilon_1, epsilon_2): agent i's SVT budget sqrt(2 svt_share rho_i*), split 1 : (2c)^(2/3)."""
        total = math.sqrt(2.0 * self._svt_share * self.agent_rho(agent, degree, rounds))
        epsilon_1 = total / (1.0 + (2.0 * self.cutoff(rounds)) ** (2.0 / 3.0))
        return epsilon_1, total - epsilon_1

    def agent_program(self, agent: Agent, context: AgentContext) -> IPPADMMAgent:
        return IPPADMMAgent(agent, context, self)


class IPPADMMAgent(PPADMMAgent):
    """Agent i of IPP-ADMM: the SVT gate in front of PP-ADMM's release."""

    def __init__(self, agent: Agent, context: AgentContext, settings: IPPADMM) -> None:
        super().__init__(agent, context, settings)
        self.cutoff = settings.cutoff(context.rounds)
        self.noisy_threshold: float | None = None
        if settings.private:
            self.epsilons = settings.svt_epsilons(agent, self.degree, context.rounds)

    def _laplace(self, scale: float) -> float:
        sensitivity = 2.0 * self.settings._clip
        # the SVT's noise: its privacy is the one epsilon-DP event charged at the first answer
        return float(self.context.release(np.zeros(1), Laplace(sensitivity / scale), Sensitivity(l1=sensitivity),
                                          scale=scale, charge=False, tags={"label": "svt"})[0])

    def release(self, t: int, x_hat: np.ndarray) -> np.ndarray | None:
        """Broadcast x^ + b_i2 if the SVT answers "above" (and fewer than c broadcasts were made), else nothing."""
        if self.broadcasts >= self.cutoff:
            return None  # the SVT has halted
        settings, clip = self.settings, self.settings._clip
        change = self.evaluator.value(self.x) - self.evaluator.value(x_hat)
        query = float(np.clip(change if settings.query == "decrease" else abs(change), -clip, clip))
        threshold, noise = settings._threshold, 0.0
        if settings.private:
            epsilon_1, epsilon_2 = self.epsilons
            if self.noisy_threshold is None:  # drawn once (Lyu et al., Alg. 1); the SVT's whole cost is charged now
                self.noisy_threshold = self._laplace(2.0 * self.cutoff * clip / epsilon_1)
                self.charge(t, PureDP(epsilon_1 + epsilon_2), "svt")
            threshold += self.noisy_threshold
            noise = self._laplace(4.0 * self.cutoff * clip / epsilon_2)
        if query + noise < threshold:
            return None
        return self.fuzzed(t, x_hat)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "noisy_threshold": self.noisy_threshold}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.noisy_threshold = state["noisy_threshold"]
