"""The accountants of random local aggregators (Xiao, Ye & Devadas, "Local Differential Privacy in
Decentralized Optimization"): worst case, ex post (data dependent) and the expected amplification.

A released coordinate is y = m + Delta with Delta ~ Lap(0, beta) in the paper's *rate*
parameterization (density (beta/2) exp(-beta |Delta|), scale 1/beta), whose mean m is uniform on an
interval tau = [lo, hi] that the agent's private randomness draws (Theorem 2.2). A neighbouring
function shifts the interval by t with |t| <= s = alpha_k B_inf (alpha_k = 1/D_i for the ADMM,
eta_k for gradient descent). Per agent, round and coordinate:

* `worst_case_epsilon`: alpha_k beta_k B_inf, the bound for any mean (fixed parameters);
* `ex_post_epsilon`: Eq. (10), the log-ratio of the likelihoods of the released y under tau and
  tau + t, maximized over t = +-s (Appendix D), in closed form (Appendix C) with log1p/expm1;
  it is never above the worst case;
* `expected_amplification`: gamma of Eq. (11), by numerical integration. It is **approximate**:
  (11) is not a strict upper bound on E[eps]/(alpha beta B_inf) (it is up to ~0.4% below it, see
  docs/ldp.md), so it is reported for comparison and never used for accounting;
* `basic_composition` (Theorem 2.2) and `advanced_composition` (footnote 1, after
  Kairouz, Oh & Viswanath) of per-step epsilons.

The ex-post epsilon is computed from the agent's *private* interval (its gradient enters the
interval's position): it is the agent's own account of what its releases cost, as in the paper's
Fig. 2, and publishing it may itself leak (the paper does not discuss this).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import integrate

from privcvx.errors import PrivacyError, require_positive
from privcvx.privacy.mechanisms import Laplace, Sensitivity
from privcvx.privacy.sensitivity import solver_allowance

if TYPE_CHECKING:
    from privcvx.algorithms.base import AgentContext


def worst_case_epsilon(alpha: float, beta: float, b_inf: float) -> float:
    """alpha_k beta_k B_inf: the per-coordinate loss of one release with any (or a fixed) mean (Theorem 2.2)."""
    return (require_positive(alpha, argument="alpha") * require_positive(beta, argument="beta")
            * require_positive(b_inf, argument="b_inf", allow_zero=True))


def _log_window(lo: np.ndarray, hi: np.ndarray, y: np.ndarray, beta: float) -> np.ndarray:
    """log(beta J) with J = int_lo^hi exp(-beta |y - m|) dm, for lo < hi (Appendix C, closed form).

    Each case is written so that no two nearly equal exponentials are subtracted:
    y <= lo: beta J = e^{-u} (1 - e^{-w}); y >= hi: beta J = e^{-v} (1 - e^{-w});
    inside: beta J = (1 - e^{-(y-lo) beta}) + (1 - e^{-(hi-y) beta}); w = beta (hi - lo).
    """
    width = beta * (hi - lo)
    below = beta * (lo - y)   # > 0 when y is left of the interval
    above = beta * (y - hi)   # > 0 when y is right of it
    outside = np.log(-np.expm1(-width))
    inside = np.log(-np.expm1(-beta * np.maximum(y - lo, 0.0)) - np.expm1(-beta * np.maximum(hi - y, 0.0)))
    return np.where(below >= 0, -below + outside, np.where(above >= 0, -above + outside, inside))


def ex_post_epsilon(y: np.ndarray, lo: np.ndarray, hi: np.ndarray, beta: float, shift: float) -> np.ndarray:
    """Eq. (10) per coordinate: max over t in {-shift, +shift} of |log J(tau; y) - log J(tau + t; y)|.

    ``y`` is the released value, ``[lo, hi]`` the interval of its mean (in either order), ``beta`` the
    Laplace rate and ``shift`` = alpha_k B_inf. A degenerate interval (a fixed mean) gives the worst case
    beta * shift exactly. Vectorized over coordinates.
    """
    beta = require_positive(beta, argument="beta")
    shift = require_positive(shift, argument="shift", allow_zero=True)
    y, a, b = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise PrivacyError("the released values and the interval must be finite", argument="y")
    degenerate = hi - lo <= 0.0
    hi_safe = np.where(degenerate, lo + 1.0, hi)  # placeholder width where the closed form is not used
    base = _log_window(lo, hi_safe, y, beta)
    worst = np.zeros(np.broadcast(y, lo).shape)
    for t in (-shift, shift):
        worst = np.maximum(worst, np.abs(base - _log_window(lo + t, hi_safe + t, y, beta)))
    # Rounding can put the closed form a few ulps above the bound it never exceeds in exact arithmetic.
    return np.where(degenerate, beta * shift, np.minimum(worst, beta * shift))


def _inner(x: float, lower: float, upper: float, beta: float) -> float:
    """int_lower^upper exp(-beta |x - y|) dy (the inner integral of Eq. (11), in closed form)."""
    return float(np.exp(_log_window(np.array(lower), np.array(upper), np.array(x), beta))) / beta


def expected_amplification(omega: float, beta: float, shift: float) -> float:
    """gamma of Eq. (11) (approximate: not a strict bound, see the module docstring).

    gamma = log{ e^{beta s} [1 - 2 I_1] + 2 I_2 } / (beta s) with s = alpha_k B_inf,
    I_1 = int_0^{(omega-s)/2} int_0^omega Phi, I_2 = int_0^{(omega-s)/2} int_{-s}^{omega-s} Phi,
    Phi(x, y) = beta/(2 omega) exp(-beta |x - y|). Requires omega > s (else gamma = 1 is returned,
    the worst case). The outer integrals are computed by adaptive quadrature.
    """
    omega = require_positive(omega, argument="omega")
    beta = require_positive(beta, argument="beta")
    shift = require_positive(shift, argument="shift")
    if omega <= shift:
        return 1.0
    half = (omega - shift) / 2.0
    scale = beta / (2.0 * omega)
    options = {"epsabs": 1e-14, "epsrel": 1e-12, "limit": 200}
    first = scale * integrate.quad(lambda x: _inner(x, 0.0, omega, beta), 0.0, half, **options)[0]
    second = scale * integrate.quad(lambda x: _inner(x, -shift, omega - shift, beta), 0.0, half, **options)[0]
    return math.log(math.exp(beta * shift) * (1.0 - 2.0 * first) + 2.0 * second) / (beta * shift)


def basic_composition(epsilons: np.ndarray) -> float:
    """sum_k sum_l eps_l^k: pure-LDP composition of Theorem 2.2."""
    return float(np.sum(np.asarray(epsilons, dtype=float)))


def advanced_composition(epsilons: np.ndarray, delta: float) -> float:
    """Footnote 1: sum eps (e^eps - 1)/(e^eps + 1) + sqrt(-2 log(delta) sum eps^2), at ``delta`` in (0, 1)."""
    delta = require_positive(delta, argument="delta")
    if delta >= 1.0:
        raise PrivacyError(f"must lie in (0, 1), got {delta!r}", argument="delta")
    eps = np.asarray(epsilons, dtype=float).ravel()
    return float(np.sum(eps * np.tanh(eps / 2.0)) + math.sqrt(-2.0 * math.log(delta) * np.sum(eps * eps)))


class ExPostAccount:
    """One agent's per-round, per-coordinate worst-case and ex-post epsilons (kept inside the agent)."""

    def __init__(self) -> None:
        self.worst: list[np.ndarray] = []
        self.ex_post: list[np.ndarray] = []

    def record(self, y: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, beta: float, shift: float,
               worst: float | None = None) -> None:
        """One release y with mean uniform on [lo, hi] (``lo=None``: the mean's law is not a uniform interval,
        e.g. after a projection, and only the worst case is claimed). ``worst`` overrides the per-coordinate
        worst case beta * shift (a grid release's own epsilon per coordinate)."""
        worst = np.full(np.shape(y), beta * shift if worst is None else worst)
        self.worst.append(worst)
        self.ex_post.append(worst.copy() if lo is None else ex_post_epsilon(y, lo, hi, beta, shift))

    def per_round(self) -> tuple[np.ndarray, np.ndarray]:
        """(worst, ex_post): arrays of shape (releases, d)."""
        if not self.worst:
            return np.zeros((0, 0)), np.zeros((0, 0))
        return np.stack(self.worst), np.stack(self.ex_post)

    def state_dict(self) -> dict:
        """The account so far, for checkpoints."""
        return {"worst": list(self.worst), "ex_post": list(self.ex_post)}

    def load_state_dict(self, state: dict) -> None:
        """Restore an account written by `state_dict`."""
        self.worst, self.ex_post = list(state["worst"]), list(state["ex_post"])


#: The columns `with_ex_post` adds to a run's privacy table.
EX_POST_COLUMNS = ("epsilon_worst_case", "epsilon_ex_post", "epsilon_ex_post_advanced", "ex_post_ratio")


def projected_release_sensitivity(dim: int, shift: float, solver_error: float = 0.0, *,
                                  agent: str | None = None) -> float:
    """The l1 sensitivity of Proj_C[v] for a public convex set C when a neighbouring function moves v by at most
    ``shift`` per coordinate: d * shift + 2 sqrt(d) e, with e = ``solver_error`` the l2 bound on the distance from a
    computed projection to the exact one (0 for R^d and boxes, whose projections are closed forms).

    On R^d or a box the projection is a clip per coordinate, so each coordinate moves by at most ``shift``. On any
    other convex set the Euclidean projection is non-expansive in l2: ||Pi(v) - Pi(v')||_1 <= sqrt(d) ||v - v'||_2
    <= d ||v - v'||_inf = d * shift, and two computed answers add 2 e in l2, hence 2 sqrt(d) e in l1. The same bound
    as Theorem 2.2's worst case summed over the coordinates. A zero ``shift`` (no private data: the solver sees the
    same input on both datasets) stays 0; an infinite e (an answer that cannot be certified) is refused."""
    if shift == 0.0:
        return 0.0
    return dim * shift + solver_allowance(dim, solver_error, agent).l1


def laplace_release(context: AgentContext, account: ExPostAccount, mean: np.ndarray, beta: float, shift: float,
                    interval: tuple[np.ndarray, np.ndarray] | None, solver_error: float = 0.0) -> np.ndarray:
    """Release ``mean`` = Proj_C[v] + Lap(0, beta) per coordinate (rate beta: scale 1/beta) through the agent's release
    path, where a neighbouring function moves v by at most ``shift`` = alpha_k B_inf per coordinate.

    The vector's L1 sensitivity is `projected_release_sensitivity`: d * shift on any convex set (+ 2 sqrt(d) e for a
    projection computed within ``solver_error`` e, in l2), so the ledger records a Laplace release with epsilon
    d alpha_k beta_k B_inf (+ 2 sqrt(d) beta_k e): the worst case of Theorem 2.2 summed over the coordinates.
    ``interval`` is the agent's private interval of the mean (Term A uniform on it, R^d only), or None when the mean's
    law is not uniform on it, after a projection: then the ex-post account claims the worst case, the vector's charge
    spread evenly over the coordinates (on a set that is not a box the per-coordinate values are not separate
    guarantees, only their sum is). A grid release of the secure path is accounted with the grid mechanism's own
    epsilon (noise calibrated to the rounding-inflated sensitivity), in the ledger and, per coordinate, in both
    columns of the ex-post account.
    """
    d = mean.size
    sensitivity = projected_release_sensitivity(d, shift, solver_error, agent=context.name)
    value = context.release(mean, Laplace(sensitivity * beta), Sensitivity(l1=sensitivity), scale=1.0 / beta)
    event = context.last_release.event
    if event is None or event.kind == "laplace":
        lo, hi = interval if interval is not None else (None, None)
        account.record(value, lo, hi, beta, shift, worst=None if interval is not None else beta * sensitivity / d)
    else:  # the grid's discrete Laplace: its own epsilon, spread over the coordinates
        account.record(value, None, None, beta, shift, worst=event.epsilon / d)
    return value


def ex_post_summary(reports: list[dict]) -> dict:
    """``info["ex_post"]``: per agent, the per-round sums over coordinates of its worst-case and ex-post epsilons
    (nothing when the run kept no diagnostics: the agents then send no account)."""
    if not all("ex_post_account" in report for report in reports):
        return {}
    return {"ex_post": [{"worst": report["ex_post_account"][0].sum(axis=1),
                         "ex_post": report["ex_post_account"][1].sum(axis=1)} for report in reports]}


def with_ex_post(table: pd.DataFrame, reports: list[dict], delta: float) -> pd.DataFrame:
    """The run's privacy table with the worst-case and the ex-post epsilon side by side, per agent.

    ``reports[i]["ex_post_account"]`` is agent i's (worst, ex_post) per round and coordinate. Basic composition
    (Theorem 2.2) for both; footnote 1's advanced composition of the ex-post epsilons at ``delta``;
    ``ex_post_ratio`` = ex post / worst case. A run without diagnostics gets the table unchanged.
    """
    if not all("ex_post_account" in report for report in reports):
        return table
    table = table.copy()
    worst_totals, ex_post_totals, advanced = [], [], []
    for report in reports:
        worst, ex_post = report["ex_post_account"]
        worst_totals.append(basic_composition(worst))
        ex_post_totals.append(basic_composition(ex_post))
        advanced.append(advanced_composition(ex_post, delta) if ex_post.size else 0.0)
    table["epsilon_worst_case"] = worst_totals
    table["epsilon_ex_post"] = ex_post_totals
    table["epsilon_ex_post_advanced"] = advanced
    table["ex_post_ratio"] = [e / w if w > 0 else math.nan for e, w in zip(ex_post_totals, worst_totals, strict=True)]
    return table
