"""What the two local-DP methods of Xiao, Ye & Devadas (paper 000) share: `RandomizedADMM` and `RandomizedDGD`.

The gradient sensitivity B_inf, the declared smoothness, the checks under privacy, and the ex-post privacy report
(`ExPostMethod`: see [`privcvx.privacy.ex_post`][privcvx.privacy.ex_post]).

Privacy on any convex set (Theorem 2.2 with a projection). Both methods release y = Pi_C[v(A, f_i)] + Lap(beta)^d
where Pi_C is the Euclidean projection onto the agent's public set C, A is the private aggregator (Gamma ~ U(0, D_i)
per coordinate, or the DGD weights w) drawn from the agent's private stream with a law that does not depend on
f_i, and v = Term A + c with c = alpha_k (lambda - grad f_i(x)) at a public point x (the agent's or the network's
last release). A neighbouring f^_i changes only c, by t with ||t||_inf <= alpha_k B_inf, the same t for every A. So
the coupling of Theorem 2.2 (the same A under both datasets) holds after the projection: for each A the means
Pi(v(A, f_i)) and Pi(v(A, f^_i)) differ by at most s_1 in l1, the Laplace density ratio is at most e^{beta s_1}
for each A, and so is the ratio of the mixtures over A (both average over the same law of A). On R^d or a box
(a clip per coordinate) s_1 = d alpha_k B_inf; on any other convex set Pi is non-expansive in l2 and
s_1 <= sqrt(d) ||t||_2 <= d ||t||_inf = d alpha_k B_inf, the same worst-case charge; a projection computed within
e (l2) of the exact one adds 2 sqrt(d) e (`privcvx.privacy.ex_post.projected_release_sensitivity`). Only the
ex-post account, Eq. (10), needs the mean to be uniform on an interval: it is claimed on R^d alone, and everywhere
else the ledger's worst case is the claim.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from privcvx.algorithms.base import AgentContext, Algorithm
from privcvx.errors import PrivacyError, PrivcvxError
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem, set_kind
from privcvx.messages import Message
from privcvx.privacy.ex_post import ex_post_summary, projected_release_sensitivity, with_ex_post
from privcvx.privacy.mechanisms import Sensitivity, check_epsilon
from privcvx.privacy.sensitivity import holds_no_private_data
from privcvx.problem import Agent, DistributedProblem
from privcvx.schedules import Schedule
from privcvx.tuning import smoothness_of


def linf_sensitivity(agent: Agent, override: float | None) -> float:
    """B_inf: the bound on |grad f_i(x)[l] - grad f^_i(x)[l]| (the digest's erratum 3: a gradient sensitivity).

    ``override`` (the algorithm's ``b_inf``, one bound for every agent) wins; otherwise the agent's declared
    ``coordinate_sensitivity`` (`pc.Declared`), else its declared ``pc.Sensitivity`` (its l2, else its l1 bound,
    both >= the l_inf norm).
    """
    if override is not None:
        return override
    if agent.declared.coordinate_sensitivity is not None:
        return agent.declared.coordinate_sensitivity
    sensitivity = agent.sensitivity
    if not isinstance(sensitivity, Sensitivity):
        raise PrivacyError("privacy is on: declare pc.Declared(coordinate_sensitivity=B_inf), or a constant "
                           "pc.Sensitivity bounding the change of the gradient over neighbouring datasets (or give "
                           "b_inf for every agent)", agent=agent.name, argument="coordinate_sensitivity")
    return sensitivity.get("l2")


def total_epsilon(epsilon: float | None, noise_rate: float | Schedule | None) -> float | None:
    """A random-aggregator method's total ``epsilon`` (None, or checked): it sets the noise rate, so not both."""
    if epsilon is None:
        return None
    if noise_rate is not None:
        raise PrivacyError("give a total epsilon or a noise_rate, not both: the epsilon sets the rate",
                           argument="epsilon")
    return check_epsilon(epsilon)


def declared_smoothness(agent: Agent, layout: Any, private: bool) -> float:
    """The agent's declared L_i; estimated at the origin without privacy (refused under privacy)."""
    if agent.smoothness is not None:
        return agent.smoothness
    if private:
        raise PrivacyError("a setting that shapes the releases must be public: declare pc.Agent(smoothness=L) "
                           "or give the step explicitly", agent=agent.name, argument="smoothness")
    estimate = smoothness_of(agent, GradientEvaluator(agent, layout), np.zeros(layout.dim))
    return estimate if math.isfinite(estimate) and estimate > 0 else 1.0


def check_private_agents(problem: DistributedProblem, b_inf: float | None, needs_smoothness: bool) -> None:
    """Under privacy, for each agent: a gradient sensitivity B_inf and a declared L_i where the step needs one. Any
    convex local set is accepted (the module docstring: the l1 charge d alpha_k B_inf holds after any projection)."""
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        if holds_no_private_data(agent):
            continue  # its releases carry no noise: no bound or step to declare for them
        linf_sensitivity(agent, b_inf)
        if needs_smoothness:
            declared_smoothness(agent, layout, True)


def release_units(problem: DistributedProblem, b_inf: float | None,
                  shift_of: Callable[[str], float]) -> list[Callable[[float], float]]:
    """For each agent with private data, a function of the round's shift factor alpha_k (``shift_of(name)``: 1/D_i,
    or 1 for a step eta_k given per round) to the l1 sensitivity of its release (`projected_release_sensitivity` of
    the shift alpha_k B_inf, with its projection's solver error e, fixed once): what a total epsilon is calibrated
    to."""
    units = []
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        if holds_no_private_data(agent):
            continue
        error = LocalProblem(agent, layout, certified=True).error_bound if set_kind(agent, layout) == "conic" else 0.0
        shift = linf_sensitivity(agent, b_inf) * shift_of(layout.name)
        units.append(functools.partial(_unit, layout.dim, shift, error, agent.name))
    return units


def _unit(dim: int, shift: float, error: float, name: str, alpha: float) -> float:
    return projected_release_sensitivity(dim, alpha * shift, error, agent=name)


def neighbour_broadcasts(context: AgentContext, t: int, inbox: list[Message]) -> dict[str, np.ndarray]:
    """Round t's broadcasts x_j of the agent's neighbours, in the topology's order; a `PrivcvxError` naming the agent
    when one is missing."""
    received = {m.sender: m["x"] for m in inbox if m.round == t}
    neighbours = context.neighbours(t)
    missing = sorted(set(neighbours) - set(received))
    if missing:
        raise PrivcvxError(f"round {t}: no broadcast from the neighbours {missing}", agent=context.name,
                           argument="messages")
    return {j: received[j] for j in neighbours}


class ExPostMethod(Algorithm):
    """An algorithm of paper 000: ``info["ex_post"]`` and the privacy table's ex-post columns under privacy, from
    the agents' private intervals (`privcvx.privacy.ex_post`); ``private`` and ``_delta`` are the method's."""

    _delta: float
    _rate: Any
    _epsilon: float | None

    @property
    def private(self) -> bool:
        """Whether the agents add noise (a ``noise_rate``, or a total ``epsilon`` that sets it, is given)."""
        return self._rate is not None or self._epsilon is not None

    def summarize(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """``info["ex_post"]`` under privacy (from the agents' private intervals: see `privcvx.privacy.ex_post`)."""
        return ex_post_summary(reports) if self.private else {}

    def privacy_report(self, table: pd.DataFrame, reports: list[dict[str, Any]]) -> pd.DataFrame:
        return with_ex_post(table, reports, self._delta)
