"""``check_privacy``: an empirical privacy audit of a private algorithm, the privacy counterpart of ``check_algorithm``.

The audit (issue 27; Jagielski, Ullman & Oprea 2020, Nasr et al. 2021) runs one agent's program many times on each
of two neighbouring datasets D and D' and bounds its epsilon from below:

1. **The neighbouring pair** (`NeighbouringPair`): two problems that differ only in agent ``index``'s data, so
   that its declared sensitivity is attained. By default `quadratic_pair`: f_i(x) = ||x - a_i||^2 / 2, and
   agent 0's a_0 moves by ``shift`` along the first coordinate, so its gradient moves by exactly the declared
   l1 = l2 = ``shift`` at every point.
2. **The runs.** The audited agent's program runs alone (`AgentContext.for_agent`'s context, on the secure
   path, ``seed="secure"``) for ``rounds`` rounds, with a public inbox that is the same for both datasets: the
   messages the other parties sent it in one reference run on D (the adversary knows every other agent). Each run
   records the agent's releases (`AgentContext.release`).
3. **The statistic: the log-likelihood ratio** of the run's data-dependent releases, log p_D'(y) / p_D(y). A replay
   runs the program of the other dataset on the same inbox, its releases forced to the observed ones, which gives
   each release's noise-free value under both datasets; with the noise actually drawn (the grid's discrete Laplace
   or Gaussian, Canonne, Kamath & Steinke 2020) this is the exact LLR of the transcript. The replay also measures
   the attained sensitivity of each release against the one it was charged for.
4. **The bound.** For each threshold of a grid fixed in advance (a fraction of the run's largest possible LLR for
   Laplace releases; z-scores of the LLR for Gaussian ones), the test "LLR >= tau" has a true positive rate TPR on
   D' and a false positive rate FPR on D, with Clopper-Pearson bounds at ``confidence`` (Bonferroni over the
   thresholds and the two rates). Laplace releases: (epsilon, delta)-DP implies TPR <= e^epsilon FPR + delta, so
   epsilon_lb = max_tau log((TPR_lb - delta) / FPR_ub), against the ledger's epsilon at the method's delta.
   Gaussian releases: mu-GDP (Dong, Roth & Su 2022) implies TPR <= Phi(Phi^-1(FPR) + mu), so
   mu_lb = max_tau Phi^-1(TPR_lb) - Phi^-1(FPR_ub), against the mu = sqrt(sum 2 rho) of the charged releases
   (exact for the Gaussian mechanism; the grid's discrete Gaussian, charged as rho-zCDP, approximates it within its
   2^-10 inflation of the sensitivity). The (epsilon, delta) of a Gaussian at a small delta lives in tails that
   thousands of runs cannot reach, so only the mu scale gives the audit power there.
5. **Power.** The same audit on a variant whose drawn noise scale is ``under_noising`` times the release path's (the
   ledger unchanged, `AgentContext.audit_noise_factor`) must exceed the claim; otherwise it has no power.

The claim is read from the audited agent's ledger over the audited rounds (its epsilon at the algorithm's
``accounting_delta`` is the tightest valid accountant's). A release that has probability 0 under the other
dataset (Mironov 2012's floating-point attack) gives an infinite LLR: the audit counts the runs that made one
(``impossible``) and fails on any.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np
from scipy.stats import beta as beta_distribution
from scipy.stats import norm

from privcvx.algorithms.base import AgentContext, Algorithm, Release
from privcvx.errors import ParameterError, PrivacyError, PrivcvxError, check_int, check_scalar
from privcvx.messages import Message, Router
from privcvx.privacy.accounting import PrivacyLedger, tightest_epsilon
from privcvx.privacy.grid import calibrate, to_grid
from privcvx.privacy.mechanisms import Mechanism, Sensitivity
from privcvx.privacy.noise import SEEDED_PATH, NoiseSource
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import SERVER, Topology

#: Fractions of the run's largest possible LLR (Laplace releases) at which the test "LLR >= tau" is made.
LAPLACE_THRESHOLDS = (0.25, 0.5, 0.75, 0.9, 0.999)
#: z-scores of the LLR under D' (Gaussian releases: LLR ~ N(mu^2/2, mu^2)) at which the test is made.
GAUSSIAN_THRESHOLDS = (-0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5)
#: z-scores (under D') of the projection statistic at which an epsilon claim is tested: an epsilon bound comes from
#: the tails, where FPR is small (the largest is about log(runs) at the runs CI can afford).
EPSILON_PROJECTION_THRESHOLDS = (0.0, 0.5, 1.0, 1.5, 2.0)
#: A release's attained sensitivity may exceed its charged one by this relative amount, plus the rounding of its
#: values (`_rounding`), before the replay reports the charge as exceeded.
ATTAINED_TOLERANCE = 1e-6


@dataclass(frozen=True)
class NeighbouringPair:
    """Two problems that differ only in agent ``index``'s data: D (``original``) and D' (``neighbour``).

    Everything but the agent's private data (its set, its declared sensitivity and smoothness, the other agents)
    must be the same in both. ``topology``: the graph of the audit's runs (None: the algorithm's default).
    """

    original: DistributedProblem
    neighbour: DistributedProblem
    index: int = 0
    topology: Topology | None = None


def quadratic_pair(set_kind: str = "box", *, n: int = 3, agents: int = 3, shift: float = 1.0,
                   direction: np.ndarray | None = None, declared: Sensitivity | None = None,
                   bound: float = 50.0) -> NeighbouringPair:
    """f_i(x) = ||x - a_i||^2 / 2 on a public set; agent 0's a_0 moves by ``shift`` times the unit ``direction``.

    The gradient x - a_0 then moves by the same vector d at every x, so its declared sensitivity (default
    l1 = ||d||_1, l2 = ||d||_2) is attained in every round. ``set_kind``: "box" ([-bound, bound]^n, wide enough
    that no release is clipped), "affine" ({sum x = 1}, not a box: a projection keeps l2, not l1), or "free" (R^n).
    Default ``direction``: e_1 (one coordinate: the sharpest test of Laplace noise), and on the affine set the unit
    vector along (n - 1, -1, ..., -1), whose projection has the largest l1 norm for its l2 norm (the pair on which
    the sqrt(n) l2 rule of [`privcvx.privacy.sensitivity`][privcvx.privacy.sensitivity] is closest to attained).
    """
    if set_kind not in ("box", "affine", "simplex", "free"):
        raise ParameterError(f'must be "box", "affine", "simplex" or "free", got {set_kind!r}', argument="set_kind")
    if direction is None:
        direction = np.r_[n - 1.0, -np.ones(n - 1)] if set_kind in ("affine", "simplex") else np.eye(n)[0]
    change = shift * np.asarray(direction, dtype=float) / np.linalg.norm(direction)
    if declared is None:
        declared = Sensitivity(l1=float(np.abs(change).sum()), l2=float(np.linalg.norm(change)))
    rng = np.random.default_rng(0)
    centres = 0.1 * rng.normal(size=(agents, n))

    def problem(first: np.ndarray) -> DistributedProblem:
        built = []
        for i, centre in enumerate([first, *centres[1:]]):
            x = cp.Variable(n)
            constraints = {"box": [x >= -bound, x <= bound], "affine": [cp.sum(x) == 1],
                           "simplex": [cp.sum(x) == 1, x >= 0], "free": []}[set_kind]
            built.append(Agent(0.5 * cp.sum_squares(x - centre), constraints, shared=x, name=f"agent-{i}",
                               smoothness=1.0, sensitivity=declared))
        return DistributedProblem(built)

    return NeighbouringPair(problem(centres[0]), problem(centres[0] - change))


@dataclass(frozen=True)
class PrivacyAudit:
    """What `check_privacy` measured.

    ``scale``: "epsilon" (Laplace releases: pure DP, the bound at ``delta``) or "mu" (Gaussian releases: mu-GDP,
    Dong, Roth & Su 2022). ``claimed``: the ledger's claim on that scale for the audited releases (its epsilon at
    ``delta``, or sqrt(sum 2 rho)); ``claimed_epsilon``: the ledger's epsilon at ``delta`` either way;
    ``lower_bound``: the empirical lower bound at ``confidence``; ``under_noised``: the same for the variant with
    ``under_noising`` times the noise (must exceed ``claimed``: the audit's power); ``attained``: the largest ratio,
    over the releases, of the replayed noise-free change to the sensitivity charged (1 when the pair is worst
    case); ``impossible``: runs with a release of probability 0 under the other dataset; ``failures``: why it
    failed (empty if it passed).
    """

    method: str
    scale: str
    claimed: float
    claimed_epsilon: float
    delta: float
    lower_bound: float
    under_noised: float
    under_noising: float
    attained: float
    impossible: int
    runs: int
    rounds: int
    releases: int
    confidence: float
    failures: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def power(self) -> bool:
        """Whether the audit caught the under-noised variant."""
        return self.under_noised > self.claimed


class PrivacyAuditFailure(AssertionError):
    """`check_privacy` failed; ``report`` is the `PrivacyAudit`."""

    def __init__(self, report: PrivacyAudit) -> None:
        super().__init__(f"{report.method}: " + "; ".join(report.failures))
        self.report = report


# ---- recording and replaying one agent's releases ---------------------------------------------------------------

@dataclass(frozen=True)
class DrawnRelease:
    """One release as drawn: its noise-free value, the noise's kind and scale, the charged sensitivity, whether it
    was on the grid, and whether the noise was subtracted."""

    value: np.ndarray
    kind: str
    scale: float
    bound: float
    secure: bool
    subtract: bool


class _UniformTape:
    """An agent's noise source whose ``uniform`` draws (its secret aggregators: RandomizedADMM's penalties Gamma,
    RandomizedDGD's weights w) are kept (``replayed=None``: ``recorded``) or replayed from a recording in order;
    every other draw goes to ``source``. The replay on D' is so conditioned on the recorded run's aggregators: the
    charged bound holds for every fixed aggregator, drawn independently of the data, so a statistic that also reads
    them still gives a valid lower bound."""

    def __init__(self, source: NoiseSource, replayed: list[np.ndarray] | None = None) -> None:
        self.source = source
        self.recorded: list[np.ndarray] = []
        self.replayed = None if replayed is None else deque(replayed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def uniform(self, size: int) -> np.ndarray:
        if self.replayed is None:
            values = self.source.uniform(size)
            self.recorded.append(np.array(values, dtype=float))
            return values
        if not self.replayed or self.replayed[0].shape != (size,):
            raise PrivcvxError("the replay on the neighbouring dataset draws other uniforms than the run: the audit "
                               "needs a program whose random draws do not depend on the data in number or size",
                               argument="neighbours")
        return self.replayed.popleft().copy()

    def replay(self, recorded: list[np.ndarray]) -> None:
        """Replay ``recorded`` (a recording's uniforms) from now on."""
        self.replayed = deque(recorded)


class _RecordingContext(AgentContext):
    """An agent context that also keeps, for each release, what the replay's likelihood needs."""

    drawn: list[DrawnRelease | None]

    def release(self, value: np.ndarray, mechanism: Mechanism, sensitivity: Sensitivity, *,
                tags: Mapping[str, Any] | None = None, scale: float | None = None, subtract: bool = False,
                charge: bool = True) -> np.ndarray:
        released = super().release(value, mechanism, sensitivity, tags=tags, scale=scale, subtract=subtract,
                                   charge=charge)
        calibrated = self.noise.calibrated(mechanism)
        drawn = (calibrated.scale(sensitivity) if scale is None else scale) * self.audit_noise_factor
        self.drawn.append(DrawnRelease(np.array(value, dtype=float), calibrated.draws, drawn,
                                 sensitivity.get(calibrated.norm), self.noise.path != SEEDED_PATH, subtract))
        return released

    def charge(self, event: Mechanism, *, tags: Mapping[str, Any] | None = None, nominal: str | None = None) -> None:
        super().charge(event, tags=tags, nominal=nominal)
        self.drawn.append(None)  # a charge for noise drawn earlier: no likelihood of its own (objective perturbation)


class _ReplayContext(AgentContext):
    """An agent context whose releases are the observed ones (a replay): it keeps the noise-free values instead."""

    observed: list[np.ndarray]
    values: list[np.ndarray]

    def release(self, value: np.ndarray, mechanism: Mechanism, sensitivity: Sensitivity, *,
                tags: Mapping[str, Any] | None = None, scale: float | None = None, subtract: bool = False,
                charge: bool = True) -> np.ndarray:
        position = len(self.values)
        if position >= len(self.observed) or np.shape(self.observed[position]) != np.shape(value):
            raise PrivcvxError("the replay on the neighbouring dataset makes other releases than the run: the audit "
                               "needs a program whose releases do not depend on the data in number or shape",
                               agent=self.name, argument="neighbours")
        self.values.append(np.array(value, dtype=float))
        self.releases.append(Release(self.observed[position].copy(), None, 0.0, dict(tags or {})))
        return self.observed[position].copy()


class _NoiseFreeContext(AgentContext):
    """An agent context whose releases add no noise: one run gives the noise-free values (the projection's centres)."""

    def release(self, value: np.ndarray, mechanism: Mechanism, sensitivity: Sensitivity, *,
                tags: Mapping[str, Any] | None = None, scale: float | None = None, subtract: bool = False,
                charge: bool = True) -> np.ndarray:
        self.releases.append(Release(np.array(value, dtype=float), None, 0.0, dict(tags or {})))
        return np.array(value, dtype=float)


class _ConditionalContext(AgentContext):
    """A replay that gives each release's noise-free value given the observed history: every release that leaves
    the agent (charged) returns the observed one, every noise drawn for later use (``charge=False``: objective
    perturbation, the SVT's noise) is left out; ``releases`` keeps the noise-free values (the conditional centres)."""

    observed: list[np.ndarray]

    def release(self, value: np.ndarray, mechanism: Mechanism, sensitivity: Sensitivity, *,
                tags: Mapping[str, Any] | None = None, scale: float | None = None, subtract: bool = False,
                charge: bool = True) -> np.ndarray:
        position = len(self.releases)
        self.releases.append(Release(np.array(value, dtype=float), None, 0.0, dict(tags or {})))
        if not charge or position >= len(self.observed) or np.shape(self.observed[position]) != np.shape(value):
            return np.array(value, dtype=float)  # a noise-free draw, or a history that has left the observed one
        return self.observed[position].copy()


class _Program:
    """The audited agent's program on one dataset, built once (its gradient compiled once) and reset per run."""

    def __init__(self, cls: type[AgentContext], algorithm: Algorithm, problem: DistributedProblem, index: int,
                 topology: Topology, rounds: int, seed: int | str, factor: float,
                 uniforms: _UniformTape | list[np.ndarray] | None = None) -> None:
        """``uniforms``: None (the seed's source), a list (records the uniforms: `_UniformTape`, ``self.tape``) or a
        recording's ``tape`` (replays its uniforms, those of its program's construction first)."""
        base = AgentContext.for_agent(problem, index, seed=seed, topology=topology, rounds=rounds)
        replayed = uniforms.recorded if isinstance(uniforms, _UniformTape) else None
        self.tape = None if uniforms is None else _UniformTape(base.noise, replayed)
        noise = base.noise if self.tape is None else self.tape
        self.context = cls(name=base.name, index=base.index, layout=base.layout, noise=noise,
                           ledger=base.ledger, topology=base.topology, rounds=rounds, diagnostics=False,
                           audit_noise_factor=factor)
        self.program = algorithm.agent_program(problem.agents[index], self.context)
        self.initial = copy.deepcopy(self.program.state_dict())
        self.phases = algorithm.phases

    def run(self, inboxes: Mapping[tuple[int, int], list[Message]], rounds: int) -> AgentContext:
        """The program's start and ``rounds`` rounds with the recorded inboxes (its messages go nowhere), from its
        initial state with an empty ledger; returns its context (the releases, the ledger)."""
        self.context.releases = []
        self.context.ledger = PrivacyLedger(self.context.name)
        self.program.load_state_dict(copy.deepcopy(self.initial))
        self.program.start()
        for t in range(1, rounds + 1):
            for phase in range(self.phases):
                extra = {"phase": phase} if self.phases > 1 else {}
                self.program.step(t, list(inboxes.get((t, phase), [])), **extra)
        return self.context


def public_inbox(algorithm: Algorithm, problem: DistributedProblem, topology: Topology, rounds: int,
                 index: int) -> dict[tuple[int, int], list[Message]]:
    """The messages agent ``index`` receives in each (round, phase) of one run on ``problem`` (integer seed 0):
    the public inbox every audited run is then given, the same under both datasets."""
    contexts = [AgentContext.for_agent(problem, i, seed=0, topology=topology, rounds=rounds)
                for i in range(len(problem.agents))]
    for context in contexts:
        context.diagnostics = False
    programs = [algorithm.agent_program(agent, context) for agent, context in zip(problem.agents, contexts,
                                                                                  strict=True)]
    coordinator = algorithm.coordinator(problem, topology)
    router = Router(topology, problem.names)
    router.post(coordinator.start() if coordinator is not None else [], 0)
    for program in programs:
        router.post(program.start(), 0)
    inboxes: dict[tuple[int, int], list[Message]] = {}
    for t in range(1, rounds + 1):
        for phase in range(algorithm.phases):
            extra = {"phase": phase} if algorithm.phases > 1 else {}
            if coordinator is not None:
                router.post(coordinator.step(t, router.take(SERVER), **extra), t)
            taken = [router.take(name) for name in problem.names]
            inboxes[(t, phase)] = taken[index]
            for program, inbox in zip(programs, taken, strict=True):
                router.post(program.step(t, inbox, **extra), t)
    return inboxes


# ---- the likelihood ratio of one run ----------------------------------------------------------------------------

def _unit_laplace(u: float) -> float:
    """numpy's random_laplace(0, 1) for the uniform u = k 2^-53: log(2u) below 1/2, -log(2 - 2u) above."""
    return -math.log(2.0 - u - u) if u >= 0.5 else math.log(u + u)


def float_reachable(release: float, value: float, scale: float, subtract: bool = False) -> bool:
    """Mironov's test (CCS 2012): is there a double u = k 2^-53 in (0, 1) that the seeded float path maps to
    ``release`` from the noise-free ``value``?

    That path releases value + scale * unit(u) (``subtract``: value - scale * unit(u)) in IEEE double arithmetic
    ([`SeededNoise`][privcvx.privacy.noise.SeededNoise], numpy's Laplace sampler), a monotone function of k (every
    operation is a correctly rounded monotone map), so a binary search over k in [1, 2^53) finds the first k that
    reaches ``release``, and the release is reachable iff that k maps to it exactly.
    """
    sign = -1.0 if subtract else 1.0

    def forward(k: int) -> float:  # non-decreasing in k
        return sign * (value + sign * (scale * _unit_laplace(k * 2.0 ** -53)))

    target = sign * release
    low, high = 1, 2 ** 53 - 1
    if not forward(low) <= target <= forward(high):
        return False
    while low < high:
        middle = (low + high) // 2
        if forward(middle) >= target:
            high = middle
        else:
            low = middle + 1
    return forward(low) == target


def release_log_ratio(observed: np.ndarray, own: np.ndarray, other: np.ndarray,
                      drawn: DrawnRelease) -> tuple[float, float]:
    """log p_other(y) - log p_own(y) for one release y, and its normalizer (the largest |LLR| for Laplace noise,
    mu^2 = ||shift||^2 / sigma^2 for Gaussian noise), in the units of the noise actually drawn."""
    if drawn.kind == "discrete_gaussian":  # integer codes with integer noise of scale sigma
        y, m, m_other, scale = observed, own, other, drawn.scale
    elif drawn.secure:
        grid = calibrate(drawn.kind, drawn.scale, drawn.bound, observed.size)
        y = np.rint(observed / grid.step)
        m, m_other, scale = to_grid(own, grid.step), to_grid(other, grid.step), grid.scale
    else:  # the float path: the continuous densities, after Mironov's test on the coordinates that differ
        y, m, m_other, scale = observed, own, other, drawn.scale
        if drawn.kind == "laplace" and not all(float_reachable(y[i], m_other[i], scale, drawn.subtract)
                                               for i in np.flatnonzero(m != m_other)):
            return -math.inf, float(np.abs(m - m_other).sum() / scale)
    if drawn.kind == "laplace":
        return float((np.abs(y - m).sum() - np.abs(y - m_other).sum()) / scale), float(np.abs(m - m_other).sum()
                                                                                        / scale)
    own_sq, other_sq = float(np.sum((y - m) ** 2)), float(np.sum((y - m_other) ** 2))
    return (own_sq - other_sq) / (2 * scale ** 2), float(np.sum((m - m_other) ** 2)) / scale ** 2


def _rounding(value: np.ndarray) -> float:
    """A bound on the float rounding of a change between two noise-free values of this size, in any norm: the
    audit's replay cannot attribute a change below it to the data (late releases of geometric steps are that small).
    """
    return 16 * value.size * float(np.finfo(float).eps) * max(1.0, float(np.max(np.abs(value), initial=0.0)))


@dataclass
class _Sample:
    """The audited runs on one dataset: per run the LLR towards D', its normalizer, the kinds of noise."""

    llr: list[float] = field(default_factory=list)
    normalizer: list[float] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    attained: float = 0.0
    impossible: int = 0
    ledger: PrivacyLedger | None = None
    releases: int = 0


def _runs(algorithm: Algorithm, pair: NeighbouringPair, topology: Topology, inboxes: Mapping, rounds: int,
          runs: int, factor: float, on_neighbour: bool, seed: int | str) -> _Sample:
    """``runs`` runs of the audited agent on D (or D', ``on_neighbour``), each replayed on the other dataset."""
    own, other = (pair.neighbour, pair.original) if on_neighbour else (pair.original, pair.neighbour)
    sign = -1.0 if on_neighbour else 1.0  # log p_other(y) / p_own(y), turned into log p_D'(y) / p_D(y)
    sample = _Sample()
    recording = _Program(_RecordingContext, algorithm, own, pair.index, topology, rounds, seed, factor, [])
    replaying = _Program(_ReplayContext, algorithm, other, pair.index, topology, rounds, 0, factor, recording.tape)
    for _ in range(runs):
        context = recording.context
        context.drawn = []
        recording.tape.recorded = []
        recording.run(inboxes, rounds)
        observed = [release.value for release in context.releases]
        replay = replaying.context
        replay.observed, replay.values = observed, []
        replaying.tape.replay(recording.tape.recorded)
        replaying.run(inboxes, rounds)
        charged = [i for i, release in enumerate(context.releases) if release.event is not None]
        llr = normalizer = 0.0
        for i in charged:
            drawn = context.drawn[i]
            if drawn is None:
                raise PrivacyError("the audited agent charges for noise it drew earlier (objective perturbation): the "
                                   "likelihood of its releases is not the replay's; pass statistic='projection'",
                                   agent=context.name, argument="statistic")
            ratio, scale = release_log_ratio(observed[i], drawn.value, replay.values[i], drawn)
            change = np.linalg.norm(drawn.value - replay.values[i], ord=1 if drawn.kind == "laplace" else 2)
            sample.attained = max(sample.attained, float(change / (drawn.bound + _rounding(drawn.value))))
            sample.kinds.add("laplace" if drawn.kind == "laplace" else "gaussian")
            llr += ratio
            normalizer += scale
        if not math.isfinite(llr):
            sample.impossible += 1
        sample.llr.append(sign * llr)
        sample.normalizer.append(normalizer)
        if sample.ledger is None:
            sample.ledger = PrivacyLedger.from_dict(context.ledger.to_dict())
            sample.releases = len(charged)
    return sample


def _noise_free(algorithm: Algorithm, problem: DistributedProblem, index: int, topology: Topology,
                inboxes: Mapping, rounds: int) -> list[np.ndarray]:
    """The values of agent ``index``'s releases in one run without noise on ``problem`` (the public inbox)."""
    program = _Program(_NoiseFreeContext, algorithm, problem, index, topology, rounds, 0, 1.0)
    return [release.value for release in program.run(inboxes, rounds).releases]


def _projections(algorithm: Algorithm, pair: NeighbouringPair, topology: Topology, inboxes: Mapping, rounds: int,
                 runs: int, factor: float, on_neighbour: bool, seed: int | str,
                 centres: tuple[list[np.ndarray], list[np.ndarray]]) -> _Sample:
    """``runs`` runs on D (or D'), each reduced to the projection of its releases on their noise-free change:
    sum_k <y_k - c_k(D), c_k(D') - c_k(D)> / ||c(D') - c(D)||, a statistic fixed before any run (black box).

    One round: c = ``centres``, the noise-free values of one run per dataset. More rounds: c_k(D) is the noise-free
    value of release k given the observed releases before it (`_ConditionalContext`, a replay per dataset and
    run), so every round adds its own innovation y_k - c_k(D), whose mean is 0 on D and c_k(D') - c_k(D) on D': for
    Gaussian releases with a data-independent covariance the sum is the LLR's direction over the whole transcript,
    where fixed centres drift from the conditional ones and lose power after round 1."""
    original, neighbour = centres
    change = [other - own for own, other in zip(original, neighbour, strict=True)]
    if not math.sqrt(sum(float(np.sum(c ** 2)) for c in change)) > 0:
        raise PrivacyError("the noise-free releases do not differ between the two datasets: nothing to project on",
                           agent=pair.original.names[pair.index], argument="neighbours")
    sample = _Sample()
    recording = _Program(_RecordingContext, algorithm, pair.neighbour if on_neighbour else pair.original,
                         pair.index, topology, rounds, seed, factor)
    replays = [_Program(_ConditionalContext, algorithm, problem, pair.index, topology, rounds, 0, 1.0)
               for problem in (pair.original, pair.neighbour)] if rounds > 1 else []
    for _ in range(runs):
        context = recording.context
        context.drawn = []
        recording.run(inboxes, rounds)
        observed = [release.value for release in context.releases]
        if replays:
            for replay in replays:
                replay.context.observed = observed
            original, neighbour = ([release.value for release in replay.run(inboxes, rounds).releases]
                                   for replay in replays)
        shapes = [np.shape(y) for y in observed]
        if shapes == [np.shape(c) for c in original] == [np.shape(c) for c in neighbour]:
            change = [other - own for own, other in zip(original, neighbour, strict=True)]
            length = math.sqrt(sum(float(np.sum(c ** 2)) for c in change))
            sample.llr.append(sum(float(np.dot(y - c, d)) for y, c, d in zip(observed, original, change, strict=True))
                              / length if length > 0 else 0.0)
        elif getattr(algorithm, "silent_neighbours", False):
            # A gated agent (IPP-ADMM's SVT) may stay silent where the noise-free run broadcast: silence is an
            # observation too, and the fixed statistic maps it to -inf (a run the test "statistic >= tau" never flags).
            sample.llr.append(-math.inf)
        else:
            raise PrivcvxError("a run makes other releases than the noise-free run: the projection needs a program "
                               "whose releases do not depend on the noise in number or shape", agent=context.name,
                               argument="neighbours")
        sample.kinds |= {"laplace" if drawn.kind == "laplace" else "gaussian" for drawn in context.drawn
                         if drawn is not None and drawn.bound > 0}
        if sample.ledger is None:
            sample.ledger = PrivacyLedger.from_dict(context.ledger.to_dict())
            sample.releases = sum(release.event is not None for release in context.releases)
    sample.attained = math.nan  # the objective's sensitivity is not a release's: no replay measures it here
    return sample


def _clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided (1 - alpha) Clopper-Pearson lower and upper bounds on a binomial rate."""
    lower = float(beta_distribution.ppf(alpha, successes, trials - successes + 1)) if successes > 0 else 0.0
    upper = float(beta_distribution.ppf(1 - alpha, successes + 1, trials - successes)) if successes < trials else 1.0
    return lower, upper


def _rates(negatives: np.ndarray, positives: np.ndarray, thresholds: np.ndarray,
           confidence: float) -> list[tuple[float, float]]:
    """Per threshold tau of the tests "statistic >= tau": (TPR lower bound on D', FPR upper bound on D), the
    2 x len(thresholds) one-sided Clopper-Pearson bounds sharing 1 - ``confidence`` (Bonferroni)."""
    alpha = (1.0 - confidence) / (2 * len(thresholds))
    return [(_clopper_pearson(int(np.sum(positives >= tau)), len(positives), alpha)[0],
             _clopper_pearson(int(np.sum(negatives >= tau)), len(negatives), alpha)[1]) for tau in thresholds]


def epsilon_lower_bound(negatives: np.ndarray, positives: np.ndarray, thresholds: np.ndarray, delta: float,
                        confidence: float) -> float:
    """max over ``thresholds`` of log((TPR_lb - delta) / FPR_ub): (epsilon, delta)-DP implies TPR <= e^epsilon FPR
    + delta for every test (``negatives``: the statistic on D, ``positives``: on D'). Holds with probability
    ``confidence``; 0 when no test beats delta."""
    return max([0.0, *(math.log((tpr - delta) / fpr)
                       for tpr, fpr in _rates(negatives, positives, thresholds, confidence) if tpr > delta)])


def mu_lower_bound(negatives: np.ndarray, positives: np.ndarray, thresholds: np.ndarray, confidence: float) -> float:
    """max over ``thresholds`` of Phi^-1(TPR_lb) - Phi^-1(FPR_ub): mu-GDP (Dong, Roth & Su 2022) implies
    TPR <= Phi(Phi^-1(FPR) + mu) for every test. Holds with probability ``confidence``; 0 when no test has power."""
    return max([0.0, *(float(norm.ppf(tpr) - norm.ppf(fpr))
                       for tpr, fpr in _rates(negatives, positives, thresholds, confidence) if tpr > 0)])


def pure_dp_mu(epsilon: float) -> float:
    """The smallest mu such that every epsilon-DP mechanism is mu-GDP: 2 Phi^-1(e^epsilon / (1 + e^epsilon)).

    An epsilon-DP mechanism is dominated by randomized response (Kairouz, Oh & Viswanath 2015), whose trade-off
    curve is the two segments through (q, q), q = 1 / (1 + e^epsilon). The convex G_mu(alpha) = Phi(Phi^-1(1 -
    alpha) - mu) (Dong, Roth & Su 2022, Def. 2.3) lies below both segments iff G_mu(q) <= q, i.e. iff mu >= this.
    """
    return 2.0 * float(norm.ppf(math.exp(epsilon) / (1.0 + math.exp(epsilon)))) if epsilon < 700 else math.inf


def claimed_mu(ledger: PrivacyLedger) -> float:
    """The mu of a ledger of Gaussian releases: sqrt(sum 2 rho), rho = 1 / (2 multiplier^2) per release (the
    continuous Gaussian's mu-GDP, composed exactly; for the grid's discrete Gaussian, the mu of its charged rho; for
    a ``ZCDPRelease`` with xi = 0, PP-ADMM's objective perturbation of a loss whose Hessian no record moves, its
    rho; for a Poisson-sampled discrete Gaussian at rate 1, Q-DPSGD-1's secure release of the whole sum, its
    discrete Gaussian's). A generic ``PureDP`` entry (IPP-ADMM's sparse vector test) adds `pure_dp_mu` (epsilon)^2:
    GDP composes as sqrt(sum mu^2) (Dong, Roth & Su 2022, Cor. 3.3), so the sum is a valid mu of the whole ledger,
    tighter than its epsilon through RDP."""
    total = 0.0
    for mechanism, count in ledger.entries:
        if mechanism.kind == "zcdp" and mechanism.xi == 0:  # a Gaussian's rho-zCDP (objective perturbation, h = 0)
            total += count * 2.0 * mechanism.rho
            continue
        if mechanism.kind == "pure_dp":  # dominated by randomized response, which is pure_dp_mu-GDP
            total += count * pure_dp_mu(mechanism.epsilon) ** 2
            continue
        sampled = mechanism.kind == "poisson_discrete_gaussian"
        if sampled and mechanism.sampling_rate < 1.0:
            raise PrivacyError(f"a mu claim of a subsampled release needs its amplified curve, got {mechanism!r}",
                               argument="ledger")
        if not sampled and (mechanism.kind not in ("gaussian", "discrete_gaussian") or mechanism.budget is not None):
            raise PrivacyError(f"a mu claim needs Gaussian releases of a fixed multiplier, got {mechanism!r}",
                               argument="ledger")
        total += count / mechanism.noise_multiplier ** 2
    return math.sqrt(total)


def normalized_llr(llr: np.ndarray, normalizer: np.ndarray, kind: str) -> np.ndarray:
    """The LLR normalized so that the thresholds are fixed in advance: LLR / its largest value (Laplace), or its
    z-score under D' (Gaussian: LLR ~ N(mu^2/2, mu^2) with mu^2 the normalizer)."""
    llr, normalizer = np.asarray(llr, dtype=float), np.asarray(normalizer, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "laplace":
            return np.where(normalizer > 0, llr / normalizer, -np.inf)
        return np.where(normalizer > 0, (llr - normalizer / 2) / np.sqrt(normalizer), -np.inf)


def llr_lower_bound(kind: str, negatives: tuple[np.ndarray, np.ndarray], positives: tuple[np.ndarray, np.ndarray],
                    delta: float, confidence: float) -> tuple[str, float]:
    """The scale and the empirical lower bound from the (LLR, normalizer) of the runs on D (``negatives``) and on
    D' (``positives``) of releases with ``kind`` noise: epsilon at ``delta`` (Laplace, `LAPLACE_THRESHOLDS`) or
    mu (Gaussian, `GAUSSIAN_THRESHOLDS`)."""
    statistics = [normalized_llr(*sample, kind) for sample in (negatives, positives)]
    if kind == "laplace":
        return "epsilon", epsilon_lower_bound(*statistics, np.array(LAPLACE_THRESHOLDS), delta, confidence)
    return "mu", mu_lower_bound(*statistics, np.array(GAUSSIAN_THRESHOLDS), confidence)


def _audit(algorithm: Algorithm, pair: NeighbouringPair, topology: Topology, inboxes: Mapping, rounds: int,
           runs: int, factor: float, delta: float, confidence: float, seed: int | str,
           statistic: str) -> tuple[str, float, _Sample, _Sample]:
    """The empirical lower bound of one variant (noise factor ``factor``): its scale ("epsilon" for Laplace
    releases, "mu" for Gaussian ones), the bound, and the two samples."""
    if statistic == "projection":
        return _projection_audit(algorithm, pair, topology, inboxes, rounds, runs, factor, delta, confidence, seed)
    negatives = _runs(algorithm, pair, topology, inboxes, rounds, runs, factor, False, seed)
    positives = _runs(algorithm, pair, topology, inboxes, rounds, runs, factor, True, seed)
    kinds = negatives.kinds | positives.kinds
    if len(kinds) != 1:
        raise PrivacyError(f"the audited agent made releases with noise of kinds {sorted(kinds) or 'none'}: the audit "
                           "needs data-dependent releases of one kind (Laplace or Gaussian)",
                           agent=pair.original.names[pair.index], argument="neighbours")
    (kind,) = kinds
    scale, bound = llr_lower_bound(kind, (negatives.llr, negatives.normalizer), (positives.llr, positives.normalizer),
                                   delta, confidence)
    return scale, bound, negatives, positives


def _projection_audit(algorithm: Algorithm, pair: NeighbouringPair, topology: Topology, inboxes: Mapping,
                      rounds: int, runs: int, factor: float, delta: float, confidence: float,
                      seed: int | str) -> tuple[str, float, _Sample, _Sample]:
    """The black-box variant of `_audit`: the projection of the releases on their noise-free change, z-scored
    with the mean on D' and the pooled standard deviation of a pilot of ``runs // 4`` runs per dataset that the bound
    does not use, so that the thresholds are fixed before the audited runs. For releases y = c(D) + N(0, s^2 I)
    with a data-independent s this is the LLR's z-score. A ledger that `claimed_mu` reads (Gaussian releases and
    generic PureDP entries) is audited on the mu scale (GAUSSIAN_THRESHOLDS); any other (`_claim_scale`) on the
    epsilon scale at ``delta`` (EPSILON_PROJECTION_THRESHOLDS): both bound every test, whatever the noise."""
    centres = (_noise_free(algorithm, pair.original, pair.index, topology, inboxes, rounds),
               _noise_free(algorithm, pair.neighbour, pair.index, topology, inboxes, rounds))
    pilot = max(50, runs // 4)
    samples = [_projections(algorithm, pair, topology, inboxes, rounds, size, factor, on_neighbour, seed, centres)
               for size in (pilot, runs) for on_neighbour in (False, True)]
    (pilot_negatives, pilot_positives), (negatives, positives) = samples[:2], samples[2:]
    pilot = [np.asarray(sample.llr) for sample in (pilot_negatives, pilot_positives)]
    pilot = [values[np.isfinite(values)] for values in pilot]  # silent runs (-inf) do not set the scale
    if min(values.size for values in pilot) < 2:
        raise PrivacyError("the audited agent stayed silent in almost every pilot run: the projection needs a setting "
                           "in which it releases (e.g. a lower SVT threshold)", agent=pair.original.names[pair.index],
                           argument="neighbours")
    spread = math.sqrt(0.5 * (np.var(pilot[0], ddof=1) + np.var(pilot[1], ddof=1)))
    centre = float(np.mean(pilot[1]))
    statistics = [(np.asarray(sample.llr) - centre) / spread for sample in (negatives, positives)]
    if _claim_scale(negatives.ledger) == "mu":  # mu-GDP bounds every test, whatever the statistic's distribution
        return "mu", mu_lower_bound(*statistics, np.array(GAUSSIAN_THRESHOLDS), confidence), negatives, positives
    return "epsilon", epsilon_lower_bound(*statistics, np.array(EPSILON_PROJECTION_THRESHOLDS), delta,
                                          confidence), negatives, positives


def _claim_scale(ledger: PrivacyLedger | None) -> str:
    """"mu" for a ledger that `claimed_mu` reads (Gaussian releases, and generic PureDP entries such as IPP-ADMM's
    sparse vector test), else "epsilon" (its tightest epsilon at delta)."""
    try:
        claimed_mu(ledger if ledger is not None else PrivacyLedger(""))
    except PrivacyError:
        return "epsilon"
    return "mu"


def check_privacy(algorithm: Algorithm, *, neighbours: NeighbouringPair | None = None, runs: int = 1000,
                  rounds: int = 1, confidence: float = 0.95, under_noising: float = 0.75, delta: float | None = None,
                  seed: int | str = "secure", statistic: str = "llr") -> PrivacyAudit:
    """Audit ``algorithm``'s privacy claim empirically (module docstring); raise if the claim is refuted.

    Returns the `PrivacyAudit`. Raises `PrivacyAuditFailure` (an ``AssertionError``) when the lower
    bound exceeds the claim, when the under-noised variant is not caught ("no power"), when the replay finds a
    release that changes by more than its charged sensitivity, or when a release is impossible under the other
    dataset; a ``PrivacyError`` for a non-private algorithm or one for which no neighbouring pair can be built.

    Parameters
    ----------
    algorithm:
        A private algorithm (``algorithm.private``), configured as it will run: few ``rounds`` and a large
        per-release epsilon (1-2) give the audit its power.
    neighbours:
        The neighbouring pair; default `quadratic_pair` on a box, then on R^n, whichever the algorithm
        accepts.
    runs:
        Runs per dataset and per variant (the audit makes 4 x ``runs`` runs, each with a replay).
    rounds:
        Rounds per run; every data-dependent release of the audited agent in them enters the LLR and the claim.
    confidence:
        The confidence of the lower bounds (Bonferroni over the thresholds).
    under_noising:
        The noise factor of the variant that the audit must catch (its power).
    delta:
        The delta of the claim and of the bound; default ``algorithm.accounting_delta``.
    seed:
        The audited runs' noise: "secure" (default, the path users run) or an integer (the seeded float path).
    statistic:
        "llr" (default): the exact log-likelihood ratio by replay. "projection": a black-box statistic, the
        projection of the releases on their noise-free change (`_projection_audit`), for releases whose
        likelihood the replay cannot compute: PP-ADMM's objective perturbation, whose noise is drawn before a solve
        and charged with the broadcast; its audit costs 1.25 x the runs (three times that beyond one round, whose
        centres a replay per dataset conditions on the transcript) and reports no attained ratio (NaN). IPP-ADMM's
        PureDP SVT with zCDP broadcasts is audited on the mu scale (`pure_dp_mu`), and a run of a gated agent that
        stays silent where the noise-free run released gets the statistic -inf.
    """
    if not isinstance(algorithm, Algorithm):
        raise ParameterError(f"must be a privcvx algorithm, got {algorithm!r}", argument="algorithm")
    if not algorithm.private:
        raise PrivacyError(f"{algorithm!r} adds no noise: there is no privacy claim to audit; give it its privacy "
                           "setting", argument="algorithm")
    runs, rounds = check_int(runs, argument="runs"), check_int(rounds, argument="rounds")
    under_noising = check_scalar(under_noising, argument="under_noising", kind=float, low=0.0, high=1.0,
                                 closed="neither")
    confidence = check_scalar(confidence, argument="confidence", kind=float, low=0.0, high=1.0, closed="neither")
    statistic = check_scalar(statistic, argument="statistic", choices=("llr", "projection"))
    pair = neighbours if neighbours is not None else _default_pair(algorithm)
    topology = (pair.topology or algorithm.topology_for(pair.original)).bind(pair.original.names)
    algorithm.require_convexity(pair.original)
    prepared = algorithm.prepare(pair.original, topology, rounds)
    delta = prepared.accounting_delta if delta is None else delta
    inboxes = public_inbox(prepared, pair.original, topology, rounds, pair.index)
    scale, lower, negatives, positives = _audit(prepared, pair, topology, inboxes, rounds, runs, 1.0, delta,
                                                confidence, seed, statistic)
    _, under, *_ = _audit(prepared, pair, topology, inboxes, rounds, runs, under_noising, delta, confidence, seed,
                          statistic)
    ledger = negatives.ledger
    claimed_epsilon = tightest_epsilon(ledger, delta)
    claimed = claimed_epsilon if scale == "epsilon" else claimed_mu(ledger)
    attained = max(negatives.attained, positives.attained)
    impossible = negatives.impossible + positives.impossible
    failures = []
    if lower > claimed:
        failures.append(f"the empirical lower bound {lower:.4f} exceeds the claimed {scale} {claimed:.4f}"
                        + (f" at delta {delta:g}" if scale == "epsilon" else ""))
    if under <= claimed:
        failures.append(f"no power: the {under_noising}x under-noised variant's lower bound {under:.4f} does not "
                        f"exceed the claim {claimed:.4f} (more runs, fewer rounds or a larger per-release epsilon)")
    if attained > 1 + ATTAINED_TOLERANCE:
        failures.append(f"a release changed by {attained:.4f} times the sensitivity it was charged for (replay)")
    if impossible:
        failures.append(f"{impossible} runs made a release impossible under the other dataset (floating-point "
                        "attack)")
    report = PrivacyAudit(repr(algorithm), scale, claimed, claimed_epsilon, delta, lower, under, under_noising,
                          attained, impossible, runs, rounds, negatives.releases, confidence, tuple(failures))
    if failures:
        raise PrivacyAuditFailure(report)
    return report


def _default_pair(algorithm: Algorithm) -> NeighbouringPair:
    """`quadratic_pair` on a box, else on R^n: the first the algorithm accepts; else a PrivacyError."""
    from privcvx.errors import UnsupportedError

    for kind in ("box", "free"):
        pair = quadratic_pair(kind)
        try:
            algorithm.check(pair.original, algorithm.topology_for(pair.original).bind(pair.original.names))
        except (UnsupportedError, PrivacyError):
            continue
        return pair
    raise PrivacyError(f"check_privacy cannot build a neighbouring pair for {type(algorithm).__name__} (it refuses "
                       "the quadratic pair of pc.algorithms.privacy_audit.quadratic_pair): pass neighbours="
                       "NeighbouringPair(D, D', index) with two problems it accepts that differ in one agent's data "
                       "by its declared sensitivity", argument="neighbours")

