"""ADMM with random local aggregators: Algorithm 1 of Xiao, Ye & Devadas, "Local Differential Privacy in
Decentralized Optimization" (the linearized ADMM (6)/(13) with private random penalties), and its exact
proximal form (12).

Every agent i holds a secret constant D_i and, in every round k + 1, draws per coordinate
Gamma[l] ~ U(0, D_i) from its private stream (never released), with |N_i| rho_bar = D_i - Gamma
(Algorithm 1 with N - 1 replaced by |N_i| on a general graph). With S_i = sum_{j in N_i} x_j^k:

    x_i^{k+1} = Proj_C[ (Gamma x_i^k + (D_i - Gamma) S_i / |N_i| - grad f_i(x_i^k) + lambda_i^k) / D_i ]
                + Delta_i^{k+1},        Delta[l] ~ Lap(0, beta_{k+1}) (rate beta: scale 1/beta)     (6)
    lambda_i^{k+1} = lambda_i^k + zeta sum_{j in N_i} (x_j^{k+1} - x_i^{k+1})

The dual sign is the **corrected** one (erratum 1 of the digest: the printed
``lambda -= zeta sum (x_j - x_i)`` diverges; ``dual_sign="printed"`` keeps it to show that). The
projection onto the agent's public set C is exact for the linearized step, whose quadratic term is
D_i/2 ||x - v||^2 whatever Gamma is (the paper omits it, taking C = R^d). ``update="exact"`` solves (12),
argmin_{x in C} f_i(x) + D_i/2 ||x - u||^2 with u the same point without the gradient, by a compiled CVXPY
problem (non-private only: the paper uses it without noise, Example (d)). ``aggregator="fixed"`` is the
baseline with fixed penalties Gamma = D_i/2, rho = D_i/(2 |N_i|) (the expectation of the random ones).

Over-relaxation (``relaxation`` alpha in [1, 2); Boyd, Parikh, Chu, Peleato & Eckstein, *Distributed
Optimization and Statistical Learning via the Alternating Direction Method of Multipliers*, Foundations and
Trends in ML 2011, Sec. 3.4.3). In (6) the neighbours' average S_i/|N_i| is the block agent i is pulled towards,
as the server's average in LinearizedADMM (`privcvx.acceleration.OverRelaxation`); its relaxation with the
agent's own last release x_i^k is

    m~_i^k = alpha S_i/|N_i| + (1 - alpha) x_i^k                                                    (R)

and the relaxed method uses m~_i^k in place of S_i/|N_i| both in (6) (and in the centre u of (12)) and in the
dual step, which (6)'s dual update writes as zeta |N_i| (S_i/|N_i| - x_i^k):

    x_i^{k+1} = Proj_C[ (Gamma x_i^k + (D_i - Gamma) m~_i^k - grad f_i(x_i^k) + lambda_i^k) / D_i ] + Delta_i^{k+1}
    lambda_i^{k+1} = lambda_i^k + zeta |N_i| (m~_i^{k+1} - x_i^{k+1})
                   = lambda_i^k + alpha zeta sum_{j in N_i} (x_j^{k+1} - x_i^{k+1})                    (R-dual)

alpha = 1 is (6) bit for bit. Written out, Gamma x_i + (D_i - Gamma) m~_i = D_i x_i + alpha (D_i - Gamma)
(S_i/|N_i| - x_i): the relaxation scales the aggregation penalty |N_i| rho_bar and the dual step by alpha with
D_i fixed, so the effective proximal weight D_i - alpha (D_i - Gamma) may be negative; the paper's convergence
theorems (3.1-3.3, which need Gamma >= 0) do not cover alpha > 1, and docs/ldp.md gives the measured effect.

Privacy with relaxation. m~_i^k is computed from released values only (the neighbours' x_j^k and the agent's
own released x_i^k), and so is lambda_i^k (a sum of zeta-weighted released differences); Gamma is still
U(0, D_i) and secret. Term A, (Gamma x_i^k + (D_i - Gamma) m~_i^k)/D_i + c, is therefore uniform on the interval
between x_i^k[l] + c_l and m~_i^k[l] + c_l, and a neighbouring function f^_i changes only c by at most
B_inf/D_i per coordinate, which does not involve m~ or alpha. So the worst-case bound of Theorem 2.2 (and the
amplified one of Theorem 2.3, evaluated ex post on the interval ending at m~) holds unchanged: the ledger is the
same for every alpha. The argument holds for both aggregators, both dual signs (the sign only changes lambda,
a function of releases) and the secret-shared exchange (which reconstructs the same S_i and never sends m~).

Privacy (Theorems 2.2, 2.3). Term A is uniform on the interval between x_i^k[l] + c_l and
S_i[l]/|N_i| + c_l, c = (lambda - grad f_i(x_i^k))/D_i, and a neighbouring function moves it by at most
alpha B_inf = B_inf / D_i per coordinate. The ledger records each release as a Laplace release of l1 sensitivity
d B_inf / D_i + 2 sqrt(d) e, i.e. epsilon d beta_k B_inf / D_i + 2 sqrt(d) beta_k e (the worst case), on any convex
set C: Pi_C keeps l2, and ||Pi(a) - Pi(a')||_1 <= sqrt(d) ||a - a'||_2 <= d ||a - a'||_inf; e is the local-solve
layer's l2 bound on a computed projection's error (`LocalProblem.error_bound`, 0 on R^d and boxes), and the coupling
of Gamma between neighbouring runs survives the projection (`privcvx.algorithms.local_dp`). On R^d the ex-post
account (`privcvx.privacy.ex_post`) evaluates Eq. (10) on each released coordinate, and ``result.privacy`` shows
both; on a set the mean is a projection of a uniform variable, so only the worst case is claimed.

``exchange="secret_sharing"`` replaces the broadcast of x_i by Algorithm 3 on a complete graph, over the sealed
pairwise channels that Theorem 2.1 assumes (`privcvx.algorithms.secure_sum`): phase 2 of round t reconstructs
S_i = sum_{j != i} x_j^{t-1}, and the agent updates. The iterates are those of shares sent in the clear, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privcvx.acceleration import as_relaxation
from privcvx.algorithms.base import AgentContext, AgentProgram, LatestReleases
from privcvx.algorithms.local_dp import (
    ExPostMethod,
    check_private_agents,
    declared_smoothness,
    linf_sensitivity,
    neighbour_broadcasts,
    release_units,
    total_epsilon,
)
from privcvx.algorithms.secure_sum import SecureSum, exact_sum
from privcvx.errors import (
    ParameterError,
    PrivacyError,
    PrivcvxError,
    check_int,
    check_scalar,
    require_positive,
)
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.ex_post import ExPostAccount, laplace_release
from privcvx.privacy.secret_sharing import DEFAULT_MODULUS, FixedPointSharing
from privcvx.privacy.sensitivity import holds_no_private_data
from privcvx.privacy.total_budget import laplace_multiplier
from privcvx.problem import Agent, DistributedProblem
from privcvx.schedules import Schedule, as_schedule, checked_value
from privcvx.topology import Topology
from privcvx.tuning import warn_nonsmooth

AGGREGATORS = ("random", "fixed")
DUAL_SIGNS = {"corrected": 1.0, "printed": -1.0}
UPDATES = ("linearized", "exact")
EXCHANGES = ("plain", "secret_sharing")


class RandomizedADMM(ExPostMethod):
    """Linearized ADMM with random local aggregators (Algorithm 1 of Xiao, Ye & Devadas).

    Parameters
    ----------
    D:
        The secret constant D_i (alpha = 1/D_i) of every agent. Default (None): the agent's declared
        ``aggregator_bound`` (`pc.Declared`), else 2 (L_i + zeta |N_i|) from its declared smoothness L_i
        (estimated without privacy). The paper's experiments use D = 10.
    zeta:
        The dual step (the paper's 0.5).
    noise_rate:
        beta_k, the Laplace *rate* of round k (a float or a schedule k -> beta_k, e.g. ``Geometric(1.02, 1.02)``
        for the paper's 1.02^k); ``None`` (default) runs without noise.
    b_inf:
        The l_inf gradient sensitivity B_inf (the paper's 1/b_i) of every agent; default: each agent's declared
        ``coordinate_sensitivity`` (`pc.Declared`), else its ``pc.Sensitivity``.
    aggregator:
        ``"random"`` (Gamma[l] ~ U(0, D_i) each round) or ``"fixed"`` (Gamma = D_i/2, the baseline).
    dual_sign:
        ``"corrected"`` (default) or ``"printed"`` (the paper's, which diverges).
    update:
        ``"linearized"`` (Algorithm 1) or ``"exact"`` (Eq. (12), a CVXPY solve per round; non-private).
    exchange:
        ``"plain"`` (broadcast x_i) or ``"secret_sharing"`` (Algorithm 3 over sealed pairwise channels; complete
        graph, N >= 3).
    relaxation:
        Over-relaxation alpha in [1, 2) of the neighbours' average, (R) in the module docstring (1: Algorithm 1).
        Computed from the releases alone, so it costs no privacy.
    share_bound, scale_bits, modulus:
        The secret sharing's public bound on |x_i[l]|, fixed-point scale 2^-scale_bits and modulus p.
    delta:
        The delta of the advanced composition (footnote 1) and of the ledgers' accountants.
    epsilon:
        A total epsilon per agent over the run, in place of ``noise_rate``: `prepare` sets the constant rate at which
        the worst-off agent's ledger reports at most it at ``delta`` (`calibrated`).
    """

    name = "randomized_admm"
    columns = ("round", "objective", "average_change", "epsilon", "epsilon_worst_case", "epsilon_ex_post", "time_s")
    diagnostic_columns = {"objective": sum, "epsilon_worst_case": max, "epsilon_ex_post": max}
    objective_columns = ("objective",)

    def __init__(self, D: float | None = None, zeta: float = 0.5,
                 noise_rate: float | Schedule | None = None, b_inf: float | None = None,
                 aggregator: str = "random", dual_sign: str = "corrected", update: str = "linearized",
                 exchange: str = "plain", share_bound: float = 1e3, scale_bits: int = 40,
                 modulus: int = DEFAULT_MODULUS, delta: float = 1e-6, relaxation: float = 1.0,
                 epsilon: float | None = None) -> None:
        self.D, self.zeta, self.noise_rate, self.b_inf, self.epsilon = D, zeta, noise_rate, b_inf, epsilon
        self.aggregator, self.dual_sign, self.update, self.exchange = aggregator, dual_sign, update, exchange
        self.share_bound, self.scale_bits, self.modulus, self.delta = share_bound, scale_bits, modulus, delta
        self.relaxation = relaxation
        self._relaxation = as_relaxation(relaxation).alpha
        self._D = None if D is None else require_positive(D, argument="D")
        self._constants: dict[str, float] = {}  # every agent's D_i, fixed by prepare()
        self._zeta = require_positive(zeta, argument="zeta")
        self._rate = None if noise_rate is None else as_schedule(noise_rate, argument="noise_rate")
        self._epsilon = total_epsilon(epsilon, noise_rate)
        self._b_inf = None if b_inf is None else require_positive(b_inf, argument="b_inf")
        for argument, value, allowed in (("aggregator", aggregator, AGGREGATORS), ("dual_sign", dual_sign, DUAL_SIGNS),
                                         ("update", update, UPDATES), ("exchange", exchange, EXCHANGES)):
            check_scalar(value, argument=argument, choices=tuple(allowed))
        if update == "exact" and (noise_rate is not None or epsilon is not None):
            raise PrivacyError("the exact proximal update (12) has no per-coordinate uniform mean and no accounted "
                               "sensitivity here: use update='linearized' under privacy", argument="update")
        require_positive(share_bound, argument="share_bound")
        check_int(scale_bits, argument="scale_bits", minimum=0)
        check_int(modulus, argument="modulus", minimum=3)
        self._delta = require_positive(delta, argument="delta")
        self.phases = 3 if exchange == "secret_sharing" else 1

    # ---- run set-up -----------------------------------------------------------------------------------
    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_decentralized(topology)
        self.require_consensus(problem)
        if self.exchange == "secret_sharing":
            n = len(problem.agents)
            if n < 3:
                raise self.unsupported("secret sharing with N < 3", f"Algorithm 3 needs N >= 3 agents, got {n}",
                                       argument="exchange")
            graph = topology.graph(1)
            if graph.number_of_edges() != n * (n - 1) // 2:
                raise self.unsupported("secret sharing on an incomplete graph", "Algorithm 3 sends a share to "
                                       "every other agent: use Topology.complete()", argument="topology")
            self.sharing(n)
        if self.private:
            check_private_agents(problem, self._b_inf, self._D is None and any(
                agent.declared.aggregator_bound is None for agent in problem.agents))

    def sharing(self, parties: int) -> FixedPointSharing:
        """The fixed-point encoding of Algorithm 3 for ``parties`` agents (this method's scale and modulus)."""
        return FixedPointSharing(parties, self.share_bound, self.scale_bits, self.modulus)

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> RandomizedADMM:
        """Fix every agent's D_i (given, or 2 (L_i + zeta |N_i|) from its smoothness), then a total ``epsilon``'s
        noise rate (`calibrated`)."""
        return self._with_constants(problem, topology).calibrated(problem, rounds)

    def _with_constants(self, problem: DistributedProblem, topology: Topology) -> RandomizedADMM:
        self.check(problem, topology)
        if self.update == "linearized":
            warn_nonsmooth("RandomizedADMM(update='linearized')", problem.agents, "its linearized step needs a "
                           "gradient and its default D_i = 2 (L_i + zeta |N_i|) an L_i (L_i = 1 is used for them)",
                           "Use update='exact' (non-private), or smooth the objective (e.g. a Huber or squared hinge "
                           "loss)")
        if self._D is not None:
            return self
        ready = self.clone()
        for agent, layout in zip(problem.agents, problem.layouts, strict=True):
            if agent.declared.aggregator_bound is not None:
                ready._constants[layout.name] = agent.declared.aggregator_bound
                continue
            degree = len(topology.neighbours(layout.name, 1))
            secret = self.private and not holds_no_private_data(agent)  # a public objective may be read
            ready._constants[layout.name] = 2.0 * (declared_smoothness(agent, layout, secret) + self._zeta * degree)
        return ready

    def calibrated(self, problem: DistributedProblem, rounds: int) -> RandomizedADMM:
        """With a total ``epsilon``: the largest constant noise rate beta at which the worst-off agent's ledger spends
        at most it over the run's ``rounds`` releases, each charged beta times `projected_release_sensitivity`
        (d_i B_inf / D_i, plus 2 sqrt(d_i) e on a set projected by a solver)."""
        if self._epsilon is None:
            return self
        units = release_units(problem, self._b_inf, lambda name: 1.0 / self.constant(name))
        unit = max((release(1.0) for release in units), default=0.0)  # no private agent: laplace_multiplier refuses
        ready = self.clone(epsilon=None, noise_rate=laplace_multiplier([unit] * rounds, self._epsilon, self._delta))
        ready._constants = dict(self._constants)  # clone() starts unprepared: keep the D_i fixed above
        return ready

    def constant(self, name: str) -> float:
        """Agent ``name``'s secret bound D_i on its random penalties: ``D``, else as fixed by `prepare` (the agent's
        declared ``aggregator_bound`` or 2 (L_i + zeta |N_i|))."""
        if self._D is not None:
            return self._D
        if name not in self._constants:
            raise ParameterError("the algorithm is not prepared for this agent: it has no D_i yet", agent=name,
                                 argument="D")
        return self._constants[name]

    def agent_program(self, agent: Agent, context: AgentContext) -> RandomizedADMMAgent:
        return RandomizedADMMAgent(agent, context, self)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> RandomizedADMMMonitor:
        sharing = self.sharing(len(problem.agents)) if self.exchange == "secret_sharing" else None
        return RandomizedADMMMonitor(problem, sharing)


class RandomizedADMMAgent(AgentProgram):
    """Agent i of Algorithm 1: its secret D_i and penalties, its estimate, dual, noise stream and ledger."""

    def __init__(self, agent: Agent, context: AgentContext, settings: RandomizedADMM) -> None:
        self.agent, self.context, self.settings = agent, context, settings
        self.name = context.name
        dim = context.layout.dim
        self.D = settings.constant(self.name)
        self.sign = DUAL_SIGNS[settings.dual_sign]
        self.projection = LocalProblem(agent, context.layout, certified=settings.private)
        self.evaluator = GradientEvaluator(agent, context.layout)
        #: Eq. (12): argmin_{x in C} f_i(x) + D/2 ||x||^2 - D u^T x, the local-solve layer's step with weight D.
        self.prox = LocalProblem(agent, context.layout, objective=True) if settings.update == "exact" else None
        # An agent without private data (pc.Sensitivity(l1=0, l2=0)): released without noise, charged nothing.
        self.noisy = settings.private and not holds_no_private_data(agent)
        self.b_inf = linf_sensitivity(agent, settings._b_inf) if self.noisy else 0.0
        self.x = self.projection.project(np.zeros(dim), np.ones(dim))  # x_i^0: public and data independent
        self.lam = np.zeros(dim)
        self.account = ExPostAccount()
        # The secret penalties of every round, drawn at once from the private stream (so that the draws do not
        # depend on the exchange: the secret-shared run repeats the plain one's Gamma).
        self.gammas = self.D * context.noise.uniform(context.rounds * dim).reshape(context.rounds, dim) \
            if settings.aggregator == "random" else np.full((context.rounds, dim), self.D / 2.0)
        #: Algorithm 3's side of this agent (`privcvx.algorithms.secure_sum`), its key pair drawn apart from the noise
        self.secure = SecureSum(context, settings.sharing(len(context.topology.graph(1)))) \
            if settings.exchange == "secret_sharing" else None

    # ---- the exchanges --------------------------------------------------------------------------------
    def start(self) -> list[Message]:
        """The broadcast of x_i^0, or, under secret sharing, of the agent's public key (round 0: the channels'
        set-up; the shares of x_i^0 follow in round 1, once every peer's key is known)."""
        if self.secure is None:
            return [self.context.message(1, {"x": self.x})]
        return self.secure.start()

    def step(self, t: int, inbox: list[Message], phase: int = 0) -> list[Message]:
        if self.secure is None:
            received = neighbour_broadcasts(self.context, t, inbox)
            self._update(t, exact_sum([received[j] for j in sorted(received)]), len(received))
            return [self.context.message(t + 1, {"x": self.x})]
        messages, others = self.secure.exchange(t, inbox, phase, self.x)
        if others is not None:  # phase 2: sum_{j != i} x_j^{t-1} reconstructed
            self._update(t, *others)
        return messages

    def _update(self, t: int, total: np.ndarray, degree: int) -> None:
        """The dual update with x^{t-1} (from round 2 on), then Eq. (6) for x^t, released in round t + 1; with
        ``relaxation`` alpha, (R) and (R-dual) of the module docstring."""
        alpha = self.settings._relaxation
        if t >= 2:
            self.lam = self.lam + self.sign * self.settings._zeta * alpha * (total - degree * self.x)
        gamma = self.gammas[t - 1]
        mean_neighbours = total / degree
        if alpha != 1.0:  # (R): the relaxed average, from the releases and the own last release
            mean_neighbours = alpha * mean_neighbours + (1.0 - alpha) * self.x
        gradient = self.evaluator.gradient(self.x) if self.prox is None else None
        centre = (gamma * self.x + (self.D - gamma) * mean_neighbours + self.lam) / self.D
        if self.prox is not None:
            mean = self.prox.step(-self.D * centre, self.D)
        else:
            if not np.all(np.isfinite(gradient)):
                raise PrivcvxError(f"round {t}: the gradient is not finite (diverged?)", agent=self.name,
                                   argument="gradient")
            mean = self.projection.project(centre - gradient / self.D, np.ones(self.x.size))
        if self.noisy:
            beta = checked_value(self.settings._rate, t, argument="noise_rate")
            shift = self.b_inf / self.D
            c = (self.lam - gradient) / self.D
            interval = None  # a projected mean is not uniform on an interval: the worst case is claimed
            if self.projection.kind == "free":  # Term A: uniform between x_i and the neighbours' mean, or fixed
                interval = (self.x + c, mean_neighbours + c) if self.settings.aggregator == "random" else (mean, mean)
            mean = laplace_release(self.context, self.account, mean, beta, shift, interval, self.projection.error_bound)
        self.x = mean

    # ---- reports and state ----------------------------------------------------------------------------
    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        worst, ex_post = self.account.per_round()
        return {"objective": self.evaluator.value(w_p), "epsilon_worst_case": float(worst.sum()),
                "epsilon_ex_post": float(ex_post.sum())}

    def output(self, released_only: bool = False) -> np.ndarray:
        """The last x_i. Under secret sharing x_i itself is never sent, so a release-only run gets nothing."""
        if released_only and self.secure is not None:
            return np.empty(0)
        return self.x.copy()

    def report(self) -> dict[str, Any]:
        """The ex-post account, computed from the agent's private interval: a diagnostic, kept only in runs that
        keep diagnostics; and the local steps' report (``result.info["local_solve"]``: the proximal step (12), or the
        projections)."""
        local = self.projection if self.prox is None else self.prox
        return {"local_solve": local.report(self.context.diagnostics),
                **({"ex_post_account": self.account.per_round()} if self.context.diagnostics else {})}

    def state_dict(self) -> dict[str, Any]:
        """The run state; under secret sharing it holds the agent's private key (a secret like the noise state)."""
        secure = {} if self.secure is None else {"secure": self.secure.state_dict()}
        return {"x": self.x, "lam": self.lam, "gammas": self.gammas, "account": self.account.state_dict(), **secure}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.lam, self.gammas = state["x"], state["lam"], state["gammas"]
        self.account.load_state_dict(state["account"])
        if self.secure is not None:
            self.secure.load_state_dict(state["secure"])


class RandomizedADMMMonitor(LatestReleases):
    """The average release (or, under secret sharing, the reconstructed sum / N) and its change."""

    def __init__(self, problem: DistributedProblem, sharing: FixedPointSharing | None) -> None:
        super().__init__(problem, "x")
        self.sharing = sharing

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        previous = self.w
        if self.sharing is None:
            self.update(messages)
        else:
            partials = [self.sharing.from_limbs(m["partial"]) for m in messages if "partial" in m.payload]
            if not partials:
                return {}
            self.w = self.sharing.decode(self.sharing.add(partials)) / len(partials)
        if t == 0:
            return {}
        return {"average_change": float(np.linalg.norm(self.w - previous))}
