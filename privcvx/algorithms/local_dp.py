"""What the two local-DP methods of Xiao, Ye & Devadas (paper 000) share: `RandomizedADMM` and `RandomizedDGD`.

The gradient sensitivity B_inf, the declared smoothness, the checks under privacy, and the ex-post privacy report
(`ExPostMethod`: see [`privcvx.privacy.ex_post`][privcvx.privacy.ex_post]).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from privcvx.algorithms.base import AgentContext, Algorithm
from privcvx.errors import PrivacyError, PrivcvxError
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import set_kind
from privcvx.messages import Message
from privcvx.privacy.ex_post import ex_post_summary, with_ex_post
from privcvx.privacy.mechanisms import Sensitivity, check_epsilon
from privcvx.privacy.sensitivity import SEPARABLE_KINDS, holds_no_private_data
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


def check_private_agents(algorithm: Algorithm, problem: DistributedProblem, b_inf: float | None,
                         needs_smoothness: bool, sensitivity: str) -> None:
    """Under privacy, for each agent: a gradient sensitivity B_inf, a declared L_i where the step needs one, and a
    box (or free) local set, since the per-coordinate ``sensitivity`` survives a box projection only."""
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        if holds_no_private_data(agent):
            continue  # its releases carry no noise: no bound, step or set shape to declare for them
        linf_sensitivity(agent, b_inf)
        if needs_smoothness:
            declared_smoothness(agent, layout, True)
        if set_kind(agent, layout) not in SEPARABLE_KINDS:
            raise algorithm.unsupported("non-box constraints under privacy", f"the per-coordinate sensitivity "
                                        f"{sensitivity} survives a box projection only", agent=agent.name,
                                        argument="constraints")


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
