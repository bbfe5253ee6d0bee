"""Server-side acceleration of consensus ADMM that costs no privacy: over-relaxation and Anderson acceleration.

Both act on the server of Algorithm 1 of Ryu & Kim (*Differentially Private Distributed Convex Optimization*),
i.e. on the global vector w and the duals lambda_p, which the server computes from the agents' released
messages and its own state alone. They are post-processing of the releases (docs/privacy.md).

* `OverRelaxation`: Boyd, Parikh, Chu, Peleato & Eckstein, *Distributed Optimization and Statistical
  Learning via the Alternating Direction Method of Multipliers* (Foundations and Trends in ML, 2011), Sec. 3.4.3.
  In Algorithm 1 the server's averaging (line 5) is ADMM's first block, the agents' step the second; so the
  relaxed quantity is the server's output: agent p is sent alpha A_p w^{t+1} + (1 - alpha) z_p^t (its own last
  release) in place of A_p w^{t+1}, and uses it in its step and its dual update, as the server does in line 8.
* `Anderson`: type-II Anderson acceleration of the server's fixed-point map (w, lambda / rho) ->
  (w', lambda' / rho), with memory m and a safeguard in the spirit of Zhang, O'Donoghue & Boyd, *Globally
  Convergent Type-I Anderson Acceleration for Nonsmooth Fixed-Point Iterations* (SIAM J. Optim., 2020) and
  Fu, Zhang & Boyd, *Anderson Accelerated Douglas-Rachford Splitting* (SIAM J. Sci. Comput., 2020): an
  extrapolated point is kept only if the fixed-point residual it produces is at most ``safeguard`` times the
  residual of the last accepted point; otherwise the server falls back to the plain step it had computed
  from that point, and the memory restarts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcvx.errors import check_int, check_scalar


@dataclass(frozen=True)
class OverRelaxation:
    """Over-relaxation with factor alpha in [1, 2) (alpha = 1: the plain method; Boyd et al. Sec. 3.4.3)."""

    alpha: float = 1.6

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", check_scalar(self.alpha, argument="relaxation", kind=float, low=1.0,
                                                       high=2.0, closed="left"))


def as_relaxation(value: float | OverRelaxation) -> OverRelaxation:
    """``relaxation=``: a number alpha in [1, 2) or an `OverRelaxation`."""
    return value if isinstance(value, OverRelaxation) else OverRelaxation(value)


@dataclass(frozen=True)
class Anderson:
    """Safeguarded type-II Anderson acceleration of the server's (w, lambda/rho) map: the settings.

    memory:
        m, the number of past residual differences in the least-squares problem (>= 1).
    safeguard:
        An extrapolated point is accepted when its fixed-point residual is <= ``safeguard`` times that of
        the last accepted point (> 0; 1 asks for no increase).
    regularization:
        Tikhonov weight of the least-squares problem, relative to ||Delta F||^2 (>= 0).
    """

    memory: int = 5
    safeguard: float = 1.0
    regularization: float = 1e-8

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory", check_int(self.memory, argument="anderson"))
        for name, positive in (("safeguard", True), ("regularization", False)):
            check_scalar(getattr(self, name), argument=f"anderson.{name}", kind=float, low=0.0,
                         closed="right" if positive else "both")


def as_anderson(value: int | Anderson | None) -> Anderson | None:
    """``anderson=``: None (off), a memory m, or an `Anderson`."""
    return value if value is None or isinstance(value, Anderson) else Anderson(value)


class AndersonMixer:
    """The run state of `Anderson`: past points x_i and images g_i = G(x_i), and the safeguard.

    `step` takes the point the server sent (x) and the plain step computed from the agents' answers
    (g = G(x)), and returns the next point to send.
    """

    def __init__(self, settings: Anderson) -> None:
        self.settings = settings
        self.points: list[np.ndarray] = []
        self.images: list[np.ndarray] = []
        self.candidate = False           # whether the point last returned was extrapolated
        self.reference = math.inf         # the fixed-point residual of the last accepted point
        self.fallback: np.ndarray | None = None  # the plain step from the last accepted point
        self.accepted = 0
        self.fallbacks = 0

    def restart(self) -> None:
        """Forget the memory (the metric changed, e.g. rho was adapted)."""
        self.points, self.images, self.candidate = [], [], False

    def step(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The next point: extrapolated from the memory, or the plain step g, or (safeguard) the fallback."""
        residual = float(np.linalg.norm(g - x))
        if self.candidate:
            if not residual <= self.settings.safeguard * self.reference:
                self.fallbacks += 1
                self.restart()
                return self.fallback
            self.accepted += 1
        self.points.append(x)
        self.images.append(g)
        del self.points[:-(self.settings.memory + 1)], self.images[:-(self.settings.memory + 1)]
        self.reference, self.fallback, self.candidate = residual, g, False
        if len(self.points) < 2:
            return g
        residuals = np.stack([b - a for a, b in zip(self.points, self.images, strict=True)], axis=1)
        delta_f = np.diff(residuals, axis=1)
        delta_g = np.diff(np.stack(self.images, axis=1), axis=1)
        gram = delta_f.T @ delta_f
        gram += self.settings.regularization * max(float(np.trace(gram)), 1e-300) * np.eye(gram.shape[0])
        try:
            gamma = np.linalg.solve(gram, delta_f.T @ residuals[:, -1])
        except np.linalg.LinAlgError:
            return g
        extrapolated = g - delta_g @ gamma
        if not np.all(np.isfinite(extrapolated)):
            return g
        self.candidate = True
        return extrapolated

    def state_dict(self) -> dict[str, Any]:
        """The memory and the safeguard's state (checkpoints)."""
        return {"points": self.points, "images": self.images, "candidate": self.candidate,
                "reference": self.reference, "fallback": self.fallback, "accepted": self.accepted,
                "fallbacks": self.fallbacks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state written by `state_dict`."""
        self.points, self.images = list(state["points"]), list(state["images"])
        self.candidate, self.reference, self.fallback = bool(state["candidate"]), state["reference"], state["fallback"]
        self.accepted, self.fallbacks = int(state["accepted"]), int(state["fallbacks"])
