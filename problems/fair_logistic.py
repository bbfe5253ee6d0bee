"""Fair logistic regression under the functional mechanism: PDFC, ADFC and the relaxed FM.

Chapter 5 of J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness" (PhD
dissertation, University of Houston, 2022), after Zhang et al.'s functional mechanism (VLDB 2012). Data: n tuples
(x_i, y_i, z_i) with x_i >= 0, ||x_i||_2 <= 1, y_i in {0, 1} and the protected attribute z_i in {0, 1}.

* The loss (97) f(D, w) = sum_i [log(1 + exp(x_i^T w)) - y_i x_i^T w] and its degree-2 Taylor polynomial at 0
  (102): sum_i [log 2 + (1/2 - y_i) x_i^T w + (1/8)(x_i^T w)^2] = n log 2 + a^T w + w^T M w with the coefficients
  a = sum_i (1/2 - y_i) x_i and M = (1/8) sum_i x_i x_i^T.
* The decision-boundary covariance (100) g(D, w) = c^T w, c = sum_i (z_i - zbar) x_i, and the fairness
  constraint (99) |c^T w| <= tau, or its penalty form (101) + alpha |c^T w|.
* A public ridge (lam/2) n ||w||^2 (lam >= 0) keeps the perturbed problem bounded.

The functional mechanism releases the coefficients theta = (a, M, c) with noise and minimizes the polynomial they
define; everything after the release is post-processing. privcvx perturbs c as a coefficient vector of its own:
the thesis folds |z_i - zbar| into the linear coefficient of each tuple (Lemma 22), but zbar moves with any
change of one tuple, so every tuple's term changes, and |.| is not a polynomial. Under replace-one (n fixed) and
x >= 0, ||x|| <= 1, writing c = sum_i z_i (x_i - xbar):

    ||c(D) - c(D')||_2 <= ||x' - xbar'|| + ||x - xbar|| + ||x' - x|| <= 3 sqrt(2),     ||.||_1 <= 3 sqrt(2 d)

(nonnegative vectors of norm <= 1 are at distance <= sqrt(2)). The Taylor coefficients change by at most the
bounds of Lemma 21 (L1: d + d^2/4) and Lemma 23 (L2: sqrt(d^2/16 + d)). The sensitivity of theta is therefore
Delta_1 = max(Lemma 22's d^2/4 + 3d, Lemma 21 + 3 sqrt(2d)) and Delta_2 = max(Lemma 24's sqrt(d^2/16 + 9d),
sqrt(Lemma 23^2 + 18)): the thesis's numbers whenever they cover the separate c (d >= 5 for L1, d >= 3 for L2).

Methods (noise on theta; x_s = ``attribute`` gets ``ratio`` times the budget on the coefficients involving w_s):

* ``"pdfc"`` (Algorithm 6): Laplace, scale Delta_1/epsilon on Phi_n and Delta_1/(ratio epsilon) on Phi_s.
* ``"adfc"`` (Algorithm 8): Gaussian, sigma_n = s(epsilon, delta) Delta_2 and sigma_s = sigma_n / ratio.
* ``"relaxed"`` (Algorithm 7, the relaxed FM): Gaussian with sigma_n on every coefficient.

Guarantee: the whole release is epsilon-DP (pdfc) or (epsilon, delta)-DP (adfc, relaxed). For the Laplace
groups the privacy loss is at most sum_g epsilon_g Delta_g / Delta_1 <= max_g epsilon_g = epsilon; Gaussian noise
of std sigma_s >= sigma_n is the release at sigma_n plus independent noise (post-processing). The thesis's
epsilon = epsilon_s/d + (d - 1) epsilon_n / d (Theorems 18, 20) is not used: it assumes the sensitivity splits
over the groups in proportion to their attributes. s(epsilon, delta) is the exact analytic Gaussian multiplier
(Balle & Wang 2018, ``dp_accounting.get_sigma_gaussian``); `extended_gaussian_sigma` is the thesis's
Extended Gaussian formula, for comparison.

The solver's answer is projected onto the slab |c^T w| <= tau (post-processing), so the returned model meets the
constraint it was solved with up to the rounding of c^T w in floating point, not only to the solver's tolerance.

PSD repair (post-processing): the noisy M is symmetrized and its negative eigenvalues are set to 0 (the nearest
PSD matrix in Frobenius norm), so the perturbed objective is convex; it reads only the released M.

``epsilon=None`` solves the exact problem (97) + ridge subject to the exact constraint (no mechanism);
``epsilon=math.inf`` runs the mechanism without noise: the Taylor surrogate with the exact coefficients.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import cvxpy as cp
import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.errors import ParameterError, SolverError, check_int, check_scalar, require_positive
from privcvx.privacy.accounting import PrivacyLedger
from privcvx.privacy.mechanisms import Gaussian, Laplace, Mechanism, Sensitivity, check_delta, check_epsilon
from privcvx.privacy.noise import NoiseSource, agent_noise_sources
from privcvx.problem import AgentLayout
from privcvx.runtime.loop import resolve_seed
from privcvx.topology import Topology

Method = Literal["pdfc", "adfc", "relaxed"]
Form = Literal["constraint", "penalty"]
METHODS = ("pdfc", "adfc", "relaxed")
FORMS = ("constraint", "penalty")


def lemma21_l1(d: int) -> float:
    """Lemma 21: the L1 sensitivity of the Taylor coefficients of logistic regression, d^2/4 + d."""
    return d * d / 4.0 + d


def lemma22_l1(d: int) -> float:
    """Lemma 22: the thesis's L1 sensitivity with the fairness term folded in, d^2/4 + 3d."""
    return d * d / 4.0 + 3.0 * d


def lemma23_l2(d: int) -> float:
    """Lemma 23: the L2 sensitivity of the Taylor coefficients of logistic regression, sqrt(d^2/16 + d)."""
    return math.sqrt(d * d / 16.0 + d)


def lemma24_l2(d: int) -> float:
    """Lemma 24: the thesis's L2 sensitivity with the fairness term folded in, sqrt(d^2/16 + 9d)."""
    return math.sqrt(d * d / 16.0 + 9.0 * d)


def coefficient_sensitivity(d: int) -> tuple[float, float]:
    """(Delta_1, Delta_2) of theta = (a, M, c) under replace-one (module docstring): Lemmas 21-24 and c's bound."""
    l1 = max(lemma22_l1(d), lemma21_l1(d) + 3.0 * math.sqrt(2.0 * d))
    l2 = max(lemma24_l2(d), math.sqrt(lemma23_l2(d) ** 2 + 18.0))
    return l1, l2


def extended_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0, *,
                            reading: Literal["valid", "printed"] = "valid") -> float:
    """The thesis's Extended Gaussian sigma (Def. 4, Algorithms 7-8):

    sigma = (sqrt(2) Delta_2 / (2 epsilon)) (sqrt(L) + sqrt(L + epsilon)),

    with L = log(sqrt(2/pi) / delta) (``reading="valid"``, Phan et al.'s extended Gaussian) or
    L = log(sqrt(2 / (pi delta))) (``"printed"``, one reading of the thesis's typesetting). The second is below the
    smallest sigma that gives (epsilon, delta)-DP (the analytic Gaussian) for most epsilon >= 0.5 (measured in
    tests/test_fair_logistic.py), so it is not a valid calibration; the first is above it on the whole grid tested.
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    reading = check_scalar(reading, argument="reading", choices=("valid", "printed"))
    inner = math.sqrt(2.0 / math.pi) / delta if reading == "valid" else math.sqrt(2.0 / (math.pi * delta))
    log_term = math.log(inner)
    return math.sqrt(2.0) * sensitivity / (2.0 * epsilon) * (math.sqrt(log_term) + math.sqrt(log_term + epsilon))


@dataclass(frozen=True)
class Coefficients:
    """theta: the linear Taylor coefficient a, the quadratic M (d x d) and the covariance vector c."""

    a: np.ndarray
    M: np.ndarray
    c: np.ndarray

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray, z: np.ndarray) -> Coefficients:
        """The exact coefficients of (102) and (100) on the data."""
        return cls((0.5 - y) @ X, X.T @ X / 8.0, (z - z.mean()) @ X)

    def flat(self) -> np.ndarray:
        """theta as one vector: a, vec(M) (row-major), c."""
        return np.concatenate([self.a, self.M.ravel(), self.c])

    @classmethod
    def from_flat(cls, theta: np.ndarray, d: int) -> Coefficients:
        """The inverse of `flat`."""
        return cls(theta[:d], theta[d:d + d * d].reshape(d, d), theta[d + d * d:])

    def repaired(self) -> Coefficients:
        """M symmetrized with its negative eigenvalues set to 0 (nearest PSD matrix; post-processing)."""
        values, vectors = np.linalg.eigh((self.M + self.M.T) / 2.0)
        return Coefficients(self.a, (vectors * np.maximum(values, 0.0)) @ vectors.T, self.c)


def attribute_mask(d: int, attribute: int) -> np.ndarray:
    """The entries of theta whose monomial involves w_s (Phi_s): a_s, the row and column s of M, and c_s."""
    mask = Coefficients(np.zeros(d, bool), np.zeros((d, d), bool), np.zeros(d, bool))
    mask.a[attribute] = mask.c[attribute] = True
    mask.M[attribute, :] = mask.M[:, attribute] = True
    return mask.flat()


#: The relation of `coefficient_sensitivity`: one tuple (x, y, z) replaced, n fixed, x >= 0 with ||x|| <= 1.
RELATION = "replace_one: one tuple (x, y, z) replaced, x >= 0, ||x|| <= 1"


def worst_case_coefficients(d: int, tuples: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    """theta = (a, M, c) flattened on neighbouring datasets under `RELATION` (``privcvx.sensitivity_audit``).

    Every dataset of ``tuples`` tuples whose first tuple is any of the extreme tuples and whose other tuples are all
    one extreme tuple, paired with every replacement of its first tuple. The extreme tuples: x in {0, e_1, e_2,
    1/sqrt(d)} (the orthogonal unit vectors at distance sqrt(2) of c's bound, the vector of the largest l1 norm of
    Lemmas 21-22), y and z in {0, 1}.
    """
    d, tuples = check_int(d, argument="d", minimum=2), check_int(tuples, argument="tuples", minimum=2)
    vectors = [np.zeros(d), np.eye(d)[0], np.eye(d)[1], np.full(d, 1.0 / math.sqrt(d))]
    extreme = [(x, y, z) for x in vectors for y in (0.0, 1.0) for z in (0.0, 1.0)]
    pairs = []
    for first, other, replacement in itertools.product(extreme, repeat=3):
        original = [first] + [other] * (tuples - 1)
        thetas = [Coefficients.of(*(np.array(column) for column in zip(*data, strict=True))).flat()
                  for data in (original, [replacement, *original[1:]])]
        pairs.append((thetas[0], thetas[1]))
    return pairs


@dataclass(frozen=True)
class FairModel:
    """The result of `fair_logistic`.

    Attributes
    ----------
    w:
        The model (predict 1 where x^T w > 0).
    problem:
        The solved CVXPY problem (its constraint is the released covariance's).
    coefficients:
        The released (repaired) coefficients, or None for the exact problem (``epsilon=None``).
    covariance:
        |c^T w| with the c the problem used (the released one under privacy): <= tau in the constraint form
        (w is projected onto the slab after the solve).
    epsilon, delta:
        The guarantee of the release (None: no mechanism; inf: no noise).
    ledger:
        The releasing party's ledger: the one charge of the release (None without noise).
    """

    w: np.ndarray
    problem: cp.Problem
    coefficients: Coefficients | None
    covariance: float
    epsilon: float | None
    delta: float
    ledger: PrivacyLedger | None = None


def check_fair_data(X: Any, y: Any, sensitive: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, z) as float arrays, checked: rows nonnegative with norm <= 1, labels and z in {0, 1}."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 2 or not np.all(np.isfinite(X)):
        raise ParameterError(f"must be a finite n x d array with n >= 2, got shape {X.shape}", argument="X")
    if np.any(X < 0) or np.any(np.linalg.norm(X, axis=1) > 1.0 + 1e-12):
        raise ParameterError("every row must be nonnegative with ||x||_2 <= 1 (the sensitivities of Lemmas 21-24 "
                             "rely on it): scale the data first", argument="X")
    arrays = []
    for name, values in (("y", y), ("sensitive", sensitive)):
        values = np.asarray(values, dtype=float)
        if values.shape != (X.shape[0],) or not np.all(np.isin(values, (0.0, 1.0))):
            raise ParameterError(f"must hold n = {X.shape[0]} values in {{0, 1}}", argument=name)
        arrays.append(values)
    return X, arrays[0], arrays[1]


def _onto_slab(w: np.ndarray, c: np.ndarray, tau: float) -> np.ndarray:
    """The Euclidean projection of w onto {|c^T w| <= tau}: removes the solver's constraint violation.

    It reads only w and the (released) c, so it is post-processing; it moves w by the violation / ||c||.
    """
    value, norm = float(c @ w), float(c @ c)
    if abs(value) <= tau or norm == 0.0:
        return w
    return w - (value - math.copysign(tau, value)) / norm * c


def release_context(name: str, noise: NoiseSource, size: int) -> AgentContext:
    """The releasing party's context for a release of ``size`` coefficients: its noise stream and a fresh ledger,
    so that the release goes through privcvx's one release path (`AgentContext.release`) and is charged there."""
    layout = AgentLayout(name, ((size,),), (0,), size, np.arange(size), np.arange(size))
    return AgentContext(name=name, index=0, layout=layout, noise=noise, ledger=PrivacyLedger(name),
                        topology=Topology.star().bind([name]), rounds=1, diagnostics=False)


@functools.lru_cache(maxsize=64)
def coefficient_mechanism(method: str, epsilon: float, delta: float) -> Mechanism:
    """What one release of theta is charged as: ``Laplace(epsilon)`` (pdfc; scale Delta_1 / epsilon) or the
    analytic ``Gaussian(epsilon, delta)`` (adfc, relaxed; sigma = s(epsilon, delta) Delta_2, Balle & Wang 2018).
    Cached: the analytic multiplier is a root search, and the audit makes thousands of releases."""
    return Laplace(epsilon) if method == "pdfc" else Gaussian(epsilon, delta, analytic=True)


def split_group(d: int, method: str, attribute: int | None) -> np.ndarray:
    """The mask of Phi_s, the coefficients that get ``ratio`` times the budget (none for "relaxed" or no
    ``attribute``)."""
    if method == "relaxed" or attribute is None:
        return np.zeros(d + d * d + d, dtype=bool)
    return attribute_mask(d, attribute)


def coefficient_weights(d: int, method: str, attribute: int | None, ratio: float) -> np.ndarray:
    """w with w = ``ratio`` on Phi_s (`split_group`) and 1 elsewhere."""
    return np.where(split_group(d, method, attribute), ratio, 1.0)


def perturb_coefficients(theta: np.ndarray, d: int, method: str, epsilon: float, delta: float, attribute: int | None,
                         ratio: float, context: AgentContext) -> np.ndarray:
    """theta with the method's noise (module docstring): group Phi_s (``attribute``) at ``ratio`` times the budget.

    One release on ``context`` (`release_context`; its ledger records the charge): w * theta (w =
    `coefficient_weights`) with the noise of `coefficient_mechanism` for the sensitivity (Delta_1, Delta_2) of
    `coefficient_sensitivity`, then divided by w (post-processing). Since 0 < w <= 1, ||w * (theta - theta')||_p <=
    ||theta - theta'||_p, so the one charge covers both groups, and Phi_s gets the scale / ``ratio``: Delta_1 /
    (ratio epsilon) (pdfc) or sigma_n / ratio (adfc).
    """
    l1, l2 = coefficient_sensitivity(d)
    weights = coefficient_weights(d, method, attribute, ratio)
    order = np.argsort(~split_group(d, method, attribute), kind="stable")  # Phi_s first, as when drawn per group
    released = np.empty_like(theta, dtype=float)
    released[order] = context.release((weights * theta)[order], coefficient_mechanism(method, epsilon, delta),
                                      Sensitivity(l1=l1, l2=l2), tags={"label": f"functional mechanism ({method})"})
    return released / weights


#: The solvers tried in turn until one reports "optimal": Clarabel, Clarabel with the tight tolerances of
#: privcvx's reference solver (Clarabel's default stopped "inaccurate" on 2 of the 50 exact logistic problems of
#: examples/ding_qdpsgd_fair.py's grid, and the second setting solved both), SCS at 1e-9.
SOLVER_CHAIN: tuple[dict[str, Any], ...] = (
    {"solver": cp.CLARABEL},
    {"solver": cp.CLARABEL, "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
    {"solver": cp.SCS, "eps": 1e-9, "max_iters": 100_000},
)


def _solve(problem: cp.Problem) -> None:
    """Solve with the first solver of `SOLVER_CHAIN` that reaches "optimal", else raise SolverError."""
    statuses = []
    for options in SOLVER_CHAIN:
        try:
            problem.solve(**options)
        except cp.SolverError as error:
            statuses.append(f"{options['solver']}: {error}")
            continue
        if problem.status == cp.OPTIMAL:
            return
        statuses.append(f"{options['solver']}: {problem.status}")
    raise SolverError(f"the fair logistic problem was not solved ({'; '.join(statuses)}); perturbed objectives "
                      "without a ridge can be unbounded: give lam > 0", argument="lam")


def fair_logistic(X: Any, y: Any, sensitive: Any, tau: float, method: Method = "pdfc", epsilon: float | None = None,
                  *, delta: float = 1e-5, attribute: int | None = None, ratio: float = 0.5, form: Form = "constraint",
                  alpha: float = 1.0, lam: float = 1e-3, seed: int | str | None = None) -> FairModel:
    """Fair logistic regression, private by the functional mechanism (see the module docstring).

    Parameters
    ----------
    X, y, sensitive:
        Features (n x d, rows nonnegative with norm <= 1), labels and protected attribute in {0, 1}.
    tau:
        The covariance threshold of (99) (constraint form); ``math.inf``: no constraint (the baseline).
    method:
        "pdfc" (Laplace), "adfc" (Gaussian, split budget) or "relaxed" (Gaussian, one sigma).
    epsilon, delta:
        The release's guarantee; None solves the exact problem, ``math.inf`` the noise-free Taylor surrogate.
    attribute, ratio:
        x_s and the share of the budget its coefficients get (pdfc, adfc; default: no split).
    form, alpha:
        "constraint": |c^T w| <= tau; "penalty": + alpha |c^T w| in the objective (101).
    lam:
        The public ridge (lam/2) n ||w||^2.
    seed:
        The noise, with the rules of ``pc.run`` (`privcvx.runtime.loop.resolve_seed`): None or "secure"
        (default: OS entropy, OpenDP on a grid); an int gives reproducible noise for research runs and warns
        ``ReproducibleNoiseWarning``.
    """
    X, y, z = check_fair_data(X, y, sensitive)
    n, d = X.shape
    tau = math.inf if tau == math.inf else require_positive(tau, argument="tau", allow_zero=True)
    alpha = require_positive(alpha, argument="alpha")
    lam = require_positive(lam, argument="lam", allow_zero=True)
    method = check_scalar(method, argument="method", choices=METHODS)
    form = check_scalar(form, argument="form", choices=FORMS)
    if attribute is not None:  # a column index in [0, d)
        attribute = check_scalar(attribute, argument="attribute", kind=int, low=0, high=d, closed="left")
    ratio = require_positive(ratio, argument="ratio")
    if ratio > 1.0:
        raise ParameterError(f"must lie in (0, 1] (x_s gets at most the whole budget), got {ratio!r}",
                             argument="ratio")
    delta = check_delta(delta)
    exact = Coefficients.of(X, y, z)
    w = cp.Variable(d)
    coefficients: Coefficients | None = None
    ledger: PrivacyLedger | None = None
    if epsilon is None:
        loss = cp.sum(cp.logistic(X @ w)) - (y @ X) @ w
        c = exact.c
    else:
        if epsilon != math.inf:
            epsilon = check_epsilon(epsilon, argument="epsilon")
            context = release_context("fair_logistic", agent_noise_sources(resolve_seed(seed, private=True), 1)[0],
                                      exact.flat().size)
            theta = perturb_coefficients(exact.flat(), d, method, epsilon, delta, attribute, ratio, context)
            ledger = context.ledger
            coefficients = Coefficients.from_flat(theta, d).repaired()
        else:
            coefficients = exact
        loss = coefficients.a @ w + cp.quad_form(w, cp.psd_wrap(coefficients.M))
        c = coefficients.c
    # Scaled for the solver: the objective over n and the constraint over ||c|| (the same minimizer).
    objective = (loss + lam * n / 2.0 * cp.sum_squares(w)) / n
    if form == "penalty":
        problem = cp.Problem(cp.Minimize(objective + alpha / n * cp.abs(c @ w)))
    elif tau == math.inf:  # the unconstrained baseline
        problem = cp.Problem(cp.Minimize(objective))
    else:
        scale = max(float(np.linalg.norm(c)), 1e-12)
        problem = cp.Problem(cp.Minimize(objective), [cp.abs((c / scale) @ w) <= tau / scale])
    _solve(problem)
    model = np.asarray(w.value, dtype=float)
    if form == "constraint":
        model = _onto_slab(model, c, tau)
    approximate = epsilon is not None and epsilon != math.inf and method != "pdfc"
    return FairModel(model, problem, coefficients, float(abs(c @ model)), epsilon,
                     delta if approximate else 0.0, ledger)


def _unit_rows(X: np.ndarray) -> np.ndarray:
    """Min-max scale every column to [0, 1], then every row to unit L2 norm (nonnegative, ||x|| <= 1)."""
    span = X.max(axis=0) - X.min(axis=0)
    X = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms > 0, norms, 1.0)


def breast_cancer_fairness() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An offline STAND-IN with a protected attribute: scikit-learn's breast cancer data (569 x 30).

    z = 1{mean texture > its median} (column 1, then removed from X): a synthetic "protected" attribute correlated
    with the label (-0.44), chosen only so that fairness constraints bind; it is not a real demographic.
    y = 1 for benign. X: the other 29 columns, min-max scaled and each row scaled to unit norm.
    """
    from problems.datasets import load_breast_cancer

    X, y = load_breast_cancer()
    z = (X[:, 1] > np.median(X[:, 1])).astype(float)
    return _unit_rows(np.delete(X, 1, axis=1)), y.astype(float), z


def adult_fairness(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UCI Adult from a local CSV (`problems.datasets.load_adult`) with z = sex (1 = the second category,
    "Male" in the UCI coding), removed from X; y = 1{income > 50K}; the rows rescaled to unit norm."""
    from problems.datasets import ADULT_COLUMNS, load_adult

    X, y = load_adult(path)
    column = ADULT_COLUMNS.index("sex")
    z = (X[:, column] > 0).astype(float)
    return _unit_rows(np.delete(X, column, axis=1)), (y > 0).astype(float), z


def predict(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The labels 1{x^T w > 0} (the model has no intercept, as in the thesis)."""
    return (np.asarray(X) @ np.asarray(w) > 0).astype(float)


def accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """The share of correct labels."""
    return float(np.mean(predict(w, X) == np.asarray(y)))


def error_rate(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """The share of wrong labels, 1 - accuracy."""
    return 1.0 - accuracy(w, X, y)


def risk_difference(w: np.ndarray, X: np.ndarray, sensitive: np.ndarray) -> float:
    """RD = |P(yhat = 1 | z = 1) - P(yhat = 1 | z = 0)| (demographic parity, Sec. 6.1.2)."""
    labels, z = predict(w, X), np.asarray(sensitive)
    if not (np.any(z == 1) and np.any(z == 0)):
        raise ParameterError("both groups z = 0 and z = 1 must be present", argument="sensitive")
    return float(abs(labels[z == 1].mean() - labels[z == 0].mean()))
