"""The agent of Algorithm 1 of Ryu & Kim (paper 004, lines 11-23), and its exact-step variant.

`ADMMAgent` keeps its own dual, its last local iterate z_p^{t-1,E+1}, its noise stream and its ledger. Each round it
runs E local updates Eq. (9) with ObjPert Eq. (10) or OutPert Eq. (12), each from the previous one (line 16),
releases the average of the E iterates (line 20) and updates its dual (line 22) exactly as the server does
(`privcvx.algorithms.admm_server`). `ExactStepAgent` takes the exact consensus-ADMM step in place of the E updates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from privcvx.algorithms.base import AgentContext, AgentProgram
from privcvx.errors import PrivacyError, PrivcvxError
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.mechanisms import Sensitivity
from privcvx.problem import Agent, AgentLayout
from privcvx.schedules import Constant, Schedule, checked_value, inverse_sqrt
from privcvx.topology import SERVER
from privcvx.tuning import LipschitzStep, is_smooth, smoothness_of, update_epsilon

if TYPE_CHECKING:
    from privcvx.algorithms.linearized_admm import LinearizedADMM

#: step_rule's marker for an agent with L_p = 0 and no per-update epsilon (no proximal term).
_NO_PROXIMAL_TERM = object()


class RoundTerms(NamedTuple):
    """The terms of Eq. (9) that stay the same over a round's E local updates."""

    #: 1/eta^t (an array when eta = inf: `ADMMAgent.inverse_step`).
    inverse: float | np.ndarray
    #: The metric weights m: 1/eta^t, plus rho^t on shared coordinates.
    weights: np.ndarray
    #: rho^t w_p^{t+1} + lambda_p^t, added on the shared coordinates.
    shift: np.ndarray
    #: The release sensitivity, when it does not depend on the iterate (None otherwise, or without privacy).
    sensitivity: Sensitivity | None


class ADMMAgent(AgentProgram):
    """Agent p of Algorithm 1 (lines 11-23), with its private data, noise stream and ledger."""

    def __init__(self, agent: Agent, context: AgentContext, settings: LinearizedADMM) -> None:
        self.agent = agent
        self.context = context
        self.layout: AgentLayout = context.layout
        self.privacy = settings.privacy
        self.local_updates = settings._local_updates
        self.eta = settings._eta
        self.needs_smoothness_hint = settings._rho.needs_suggestion
        self.private = settings.privacy is not None
        self.projection = LocalProblem(agent, self.layout,
                                       certified=self.privacy.solver_error
                                       if self.private and self.privacy.needs_certified_step() else False)
        self.evaluator = GradientEvaluator(agent, self.layout)
        self.mask = self.layout.shared_mask
        self.all_shared = np.array_equal(self.layout.shared_local, np.arange(self.layout.dim))
        declared = agent.sensitivity
        self.sensitivity_at_z = callable(declared) and not isinstance(declared, Sensitivity)  # e.g. Eq. (31)
        # Line 13: z_p^{0,E+1} = z_p^1, the feasible point of W_p closest to the origin.
        self.z = self.projection.project(np.zeros(self.layout.dim), np.ones(self.layout.dim))
        self.lam = np.zeros(self.layout.shared_local.size)
        self.released = self.z.copy()
        self.declared_smoothness = agent.smoothness
        self._step: Schedule | None = None
        self._terms: RoundTerms | None = None
        self._metric: tuple[tuple[float, float], tuple[float | np.ndarray, np.ndarray]] | None = None
        self._last = {"noise_magnitude": 0.0, "eta": math.nan}
        self._constant_eta: tuple[Schedule, float] | None = None  # a constant rule and its value, once checked

    @property
    def smoothness(self) -> float:
        """L_p: declared (``pc.Agent(smoothness=...)``), else [`smoothness_of`][privcvx.tuning.smoothness_of] at z_p^1
        (nan for a nonsmooth f_p, 0 for an affine one)."""
        if self.declared_smoothness is None:
            if self.private and is_smooth(self.agent.objective):  # LinearizedADMM.check refuses this run
                raise PrivacyError("L_p would be estimated from private data", agent=self.layout.name,
                                   argument="smoothness")
            self.declared_smoothness = smoothness_of(self.agent, self.evaluator, self.z)
        return self.declared_smoothness

    def step_rule(self) -> Schedule | None:
        """eta="auto": 1/L_p (no privacy), Eq. (25a) under privacy, Eq. (26a) when f_p is nonsmooth.

        ``None`` when L_p = 0 (an affine or constant f_p) and there is no per-update epsilon: the linearization
        is exact, no proximal term is needed, and `inverse_step` weights the update by rho alone.
        """
        if self._step is None:
            lipschitz = self.smoothness
            epsilon = update_epsilon(self.privacy.mechanism if self.privacy is not None else None)
            if not math.isfinite(lipschitz) or (lipschitz <= 0 and math.isinf(epsilon)):
                self._step = inverse_sqrt() if not math.isfinite(lipschitz) else _NO_PROXIMAL_TERM
            else:
                self._step = LipschitzStep(lipschitz, epsilon)
        return None if self._step is _NO_PROXIMAL_TERM else self._step

    def step_size(self, t: int) -> float:
        """eta^t: the given eta or `step_rule`'s, checked finite and > 0 (`checked_value`; inf without a proximal
        term). A constant rule (a number, or 1/L_p without privacy) is checked at its first round and its value
        kept: the same number every round, without the check's cost in every agent's round."""
        rule = self.eta if self.eta is not None else self.step_rule()
        if rule is None:
            return math.inf
        if self._constant_eta is not None and self._constant_eta[0] is rule:
            return self._constant_eta[1]
        eta = checked_value(rule, t, argument="eta")
        if isinstance(rule, Constant) or (isinstance(rule, LipschitzStep) and math.isinf(rule.epsilon)):
            self._constant_eta = (rule, eta)
        return eta

    def inverse_step(self, eta: float, rho: float) -> float | np.ndarray:
        """1/eta in Eq. (9); for eta = inf (L_p = 0) it is 0 on shared coordinates, whose step the penalty rho
        bounds, and rho on private ones (an affine f_p over an unbounded private set has no minimizer)."""
        return rho * (1.0 - self.mask) if math.isinf(eta) else 1.0 / eta

    def start(self) -> list[Message]:
        payload: dict[str, Any] = {"z": self.z[self.layout.shared_local]}
        if self.needs_smoothness_hint:  # the penalty rule starts at max_p L_p: public (declared) under privacy
            payload["smoothness"] = self.smoothness
        return [self.context.message(0, payload, receiver=SERVER)]

    def penalties(self, rho: float | np.ndarray) -> tuple[float | np.ndarray, float]:
        """rho on the local vector (0 on private coordinates) and a scalar rho for private coordinates (the
        largest entry of a per-key rho)."""
        if np.ndim(rho) == 0:
            return rho * self.mask, rho
        shared = np.zeros(self.layout.dim)
        shared[self.layout.shared_local] = rho
        return shared, float(np.max(rho))

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float | np.ndarray, eta: float,
                     warm_start: bool = False) -> tuple[np.ndarray, float]:
        """One local update, Eq. (9) with ObjPert Eq. (10) or OutPert Eq. (12); returns (z^{t,e+1}, sum|xi|).

        ``rho`` is a number, or a vector over the shared entries (``rho="adaptive-per-key"``). Within
        `step` the round's terms are computed once (`_round_terms`); a subclass may replace this
        method (ExactADMM's exact step does)."""
        terms = self._terms if self._terms is not None else self._round_terms(w_p, rho, eta)
        return self._update(z, terms, warm_start)

    def _round_terms(self, w_p: np.ndarray, rho: float | np.ndarray, eta: float) -> RoundTerms:
        """The terms of Eq. (9) for w_p, rho and eta (computed once per round; 1/eta and the weights are kept while a
        scalar rho and eta stay the same, as with a fixed rho and eta="auto" without privacy)."""
        key = (rho, eta) if isinstance(rho, float) else None
        if key is not None and self._metric is not None and self._metric[0] == key:
            inverse, weights = self._metric[1]
        else:
            shared_rho, private_rho = self.penalties(rho)
            inverse = self.inverse_step(eta, private_rho)
            weights = inverse + shared_rho
            weights.flags.writeable = False  # kept for the next rounds: read-only
            self._metric = None if key is None else (key, (inverse, weights))
        sensitivity = None
        if self.privacy is not None and not self.sensitivity_at_z:
            sensitivity = self._release_sensitivity(z=None, weights=weights)
        return RoundTerms(inverse, weights, rho * w_p + self.lam, sensitivity)

    def _release_sensitivity(self, z: np.ndarray | None, weights: np.ndarray) -> Sensitivity:
        """The sensitivity of what a local update releases (a declared callable is evaluated at z)."""
        needed = self.privacy.needs_gradient_sensitivity()
        return self.privacy.release_sensitivity(
            self.privacy.gradient_sensitivity(self.agent, None if z is None else self.layout.split(z))
            if needed else None, weights, self.projection.kind != "conic", self.projection.error_bound,
            agent=self.layout.name)

    def _update(self, z: np.ndarray, terms: RoundTerms, warm_start: bool) -> tuple[np.ndarray, float]:
        """`local_update` with the round's terms (`_round_terms`) computed once."""
        inverse, weights, shift, sensitivity = terms
        gradient = self.evaluator.gradient(z)
        # a non-finite entry makes g.g non-finite; only then (or if g.g overflows) is every entry checked
        if not math.isfinite(gradient @ gradient) and not np.isfinite(gradient).all():
            raise PrivcvxError("the gradient is not finite at the current iterate (check the data, eta and rho)",
                               agent=self.layout.name, argument="gradient")
        magnitude = 0.0
        if self.privacy is not None:
            if sensitivity is None:
                sensitivity = self._release_sensitivity(z, weights)
            if self.privacy.kind == "objective":  # the noisy gradient is released; the projection post-processes it
                gradient = self.context.release(gradient, self.privacy.mechanism, sensitivity, subtract=True,
                                                tags={"release": "gradient"})
                magnitude = self.context.last_release.magnitude
        linear = z * inverse  # Eq. (9)'s point, computed in one array (in place: the same operations)
        linear -= gradient
        if self.all_shared:
            linear += shift
        else:
            linear[self.layout.shared_local] += shift
        linear /= weights
        z_next = self.projection.project(linear, weights, warm_start)
        if self.privacy is not None and self.privacy.kind == "output":
            z_next = self.context.release(z_next, self.privacy.mechanism, sensitivity, tags={"release": "output"})
            magnitude = self.context.last_release.magnitude
        return z_next, magnitude

    def _received(self, inbox: list[Message]) -> tuple[np.ndarray, float | np.ndarray]:
        """The server's w and rho of this round (line 14); under server-side acceleration its dual becomes lambda."""
        (message,) = inbox
        payload = message.payload
        rho = payload["rho"]
        if "lam" in payload:  # server-side acceleration: the server's dual is the one to use
            self.lam = np.asarray(payload["lam"], dtype=float)
        return payload["w"], float(rho) if rho.ndim == 0 else np.asarray(rho, dtype=float)  # a payload holds arrays

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Lines 15-22: E local updates from the last iterate, release the average, update the dual."""
        w_p, rho = self._received(inbox)
        eta = self.step_size(t)
        z = self.z
        total = np.zeros(self.layout.dim)
        noise = 0.0
        terms = self._terms = self._round_terms(w_p, rho, eta)  # this round's w_p, rho and eta: read by local_update
        direct = type(self).local_update is ADMMAgent.local_update  # not replaced: `_update` with the terms itself
        try:
            for e in range(self.local_updates):
                z, magnitude = self._update(z, terms, e > 0) if direct else \
                    self.local_update(z, w_p, rho, eta, warm_start=e > 0)
                total += z
                noise += magnitude
        finally:
            self._terms = None
        self.z = z
        self.released = total / self.local_updates
        shared = self._sent()
        self.lam = self.lam + rho * (w_p - shared)
        self._last = {"noise_magnitude": noise, "eta": 1.0 / self.penalties(rho)[1] if math.isinf(eta) else eta}
        return [self.context.message(t, {"z": shared}, receiver=SERVER)]

    def _sent(self) -> np.ndarray:
        """The release's shared entries, as sent (line 20), read-only (what was sent never changes: the server's record
        of line 8 keeps it without a copy, `privcvx.algorithms.consensus.LineEight.of`): when every entry is shared,
        the release itself (no copy by indexing; the message and the agent hold the same array)."""
        shared = self.released if self.all_shared else self.released[self.layout.shared_local]
        shared.flags.writeable = False
        return shared

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_p and the W_p violation at the release, Eq. (29)'s sum |xi| and the step: from private data."""
        return {"objective": self.evaluator.value(self.released),
                "max_violation": self.evaluator.violation(self.released), **self._last}

    def output(self, released_only: bool = False) -> np.ndarray:
        """The last release z_p^{t+1}: the whole local vector, or only its shared entries (what was sent)."""
        return self.released[self.layout.shared_local].copy() if released_only else self.released.copy()

    def report(self) -> dict[str, Any]:
        """The local solves' report (``result.info["local_solve"]``): the kind, strategy and number of solves; the
        other counters depend on the private data and are kept only in runs that keep diagnostics."""
        return {"local_solve": self.projection.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {"z": self.z, "lam": self.lam, "released": self.released}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.z, self.lam, self.released = state["z"], state["lam"], state["released"]


class ExactStepAgent(ADMMAgent):
    """Agent p of Algorithm 1 with the exact consensus-ADMM step in place of the E updates Eq. (9):
    ``LinearizedADMM(local_updates="exact")`` and ``ExactADMM`` (non-private).

    The step is argmin_{z in W_p} f_p(z) + <q, z_s> + (rho/2) ||z_s||^2 with q = -(lambda_p + rho w_p), the consensus
    ADMM step of Boyd et al. (Foundations and Trends in ML, 2011), Eq. (7.6): Eq. (9) of Ryu & Kim with f_p in place
    of its linearization and no proximal term, solved by the local-solve layer (a vector rho under
    ``rho="adaptive-per-key"``)."""

    def __init__(self, agent: Agent, context: AgentContext, settings: LinearizedADMM) -> None:
        super().__init__(agent, context, settings)
        self.exact = LocalProblem(agent, self.layout, objective=True, penalized=self.layout.shared_local)
        self._eta_key: bytes | None = None  # the per-key rho of the last history eta (`_history_eta`), and its eta
        self._eta_of_rho = math.nan

    def step_rule(self) -> None:
        """No proximal term (eta = inf): the history's eta is 1/rho, as for an affine f_p (`ADMMAgent.step`);
        L_p is not estimated for the step."""
        return None

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float | np.ndarray, eta: float,
                     warm_start: bool = True) -> tuple[np.ndarray, float]:
        """The exact step (no linearization, no proximal term, no noise); ``z`` and ``eta`` are not used. A QP step
        on OSQP starts from the last round's answer (non-private: the exact step has no privacy analysis, so nothing
        relies on it being a function of this round's data alone; `state_dict` keeps the point)."""
        return self.exact.tilted_step(self.lam + rho * w_p, rho, warm_start), 0.0

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """`ADMMAgent.step` with its one update the exact step: no terms of Eq. (9) (`_round_terms`), no average of
        E iterates; the release, the dual (line 22) and the history's eta (1/rho, or a given eta, computed only when
        the run keeps diagnostics) are the same."""
        w_p, rho = self._received(inbox)
        self.z = self.released = self.local_update(self.z, w_p, rho, math.inf)[0]
        shared = self._sent()
        self.lam = self.lam + rho * (w_p - shared)
        if self.context.diagnostics:  # the history's eta (the step does not use it), read by `diagnostics` alone
            self._last = {"noise_magnitude": 0.0, "eta": self._history_eta(t, rho)}
        return [self.context.message(t, {"z": shared}, receiver=SERVER)]

    def _history_eta(self, t: int, rho: float | np.ndarray) -> float:
        """The history's eta: the given eta^t, else 1 / rho or 1 / max rho (rho.max() without its Python wrapper),
        kept while a per-key rho stays the same (bitwise) from round to round."""
        eta = math.inf if self.eta is None else checked_value(self.eta, t, argument="eta")
        if not math.isinf(eta):
            return eta
        if isinstance(rho, float):
            return 1.0 / rho
        key = rho.tobytes()
        if key != self._eta_key:
            self._eta_key, self._eta_of_rho = key, 1.0 / float(np.maximum.reduce(rho))
        return self._eta_of_rho

    def report(self) -> dict[str, Any]:
        return {"local_solve": self.exact.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "local_solve": self.exact.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.exact.load_state_dict(state["local_solve"])
