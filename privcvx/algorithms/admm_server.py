"""The server of Algorithm 1 of Ryu & Kim (paper 004, lines 1-9) and the public monitor of its messages.

The server keeps every agent's last released shared entries and dual lambda_p, computes the global vector w (line 5)
and sends each agent its slice w_p with the round's rho; it updates the duals (line 8) when the releases arrive. The
penalty is a `privcvx.schedules.PenaltyRule`, asked for rho^t and shown the residuals; server-side acceleration is in
`privcvx.acceleration`. `ADMMMonitor` computes the public metrics from the messages alone.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import numpy as np

from privcvx.acceleration import Anderson, AndersonMixer
from privcvx.algorithms.base import Coordinator, Monitor
from privcvx.algorithms.consensus import ConsensusDuals, is_vector, key_groups, read_only
from privcvx.errors import PrivcvxError
from privcvx.messages import Message
from privcvx.problem import DistributedProblem
from privcvx.schedules import PenaltyRule, Residuals
from privcvx.topology import SERVER


class ADMMServer(Coordinator):
    """The server of Algorithm 1 (lines 1-9), generalized to shared keys, with optional server-side
    acceleration (over-relaxation, Anderson, per-key rho; [`privcvx.acceleration`][privcvx.acceleration])."""

    def __init__(self, problem: DistributedProblem, rho: PenaltyRule, relaxation: float = 1.0,
                 anderson: Anderson | None = None) -> None:
        self.layouts = problem.layouts
        self.names = problem.names
        self.multiplicity = problem.multiplicity
        self.dim = problem.dim
        self.groups = key_groups(problem)
        self.rho = copy.deepcopy(rho)  # the rule adapts the run's own copy
        self.relaxation = relaxation
        self.mixer = None if anderson is None else AndersonMixer(anderson)
        self.used: list[np.ndarray] | None = None  # the relaxed vectors the agents were sent, if relaxed
        self.shared = [np.zeros(layout.shared_local.size) for layout in self.layouts]
        self.duals = ConsensusDuals(self.layouts, self.dim)
        self.w = np.zeros(self.dim)
        self.w_previous = self.w
        self.rho_used: float | np.ndarray = math.nan

    def start(self) -> list[Message]:
        return []

    def _released(self, inbox: list[Message]) -> tuple[list[np.ndarray], dict[str, Message]]:
        by_sender = {message.sender: message for message in inbox}
        missing = [name for name in self.names if name not in by_sender]
        if missing:
            raise PrivcvxError(f"the server received nothing from {missing}", agent=missing[0], argument="messages")
        return [by_sender[name]["z"] for name in self.names], by_sender

    def _accelerate(self, w: np.ndarray, sent: np.ndarray, rho: float | np.ndarray) -> np.ndarray:
        """Anderson on x = (w, lambda/rho) -> G(x): the next w; the duals become the mixed ones."""
        if not np.array_equal(rho, self.rho_used):  # the metric changed: the memory no longer applies
            self.mixer.restart()
        copies = self.duals.copies(rho)
        mixed = self.mixer.step(np.concatenate([self.w, sent / copies]),
                                np.concatenate([w, self.duals.flat / copies]))
        self.duals.assign_scaled(mixed[self.dim:], rho)
        return mixed[:self.dim]

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Line 8 on the releases of round t - 1 (or the initial points), then line 5 and the broadcast."""
        released, by_sender = self._released(inbox)
        first = not is_vector(self.rho_used) and math.isnan(self.rho_used)  # the inbox holds the initial points
        sent = self.duals.flat
        if first:
            finite = [float(m["smoothness"]) for m in by_sender.values() if "smoothness" in m.payload]
            self.rho.start(max((v for v in finite if math.isfinite(v) and v > 0), default=1.0), self.groups)
        else:
            totals = self.duals.update(self.w, self.w_previous, released, self.rho_used, self.used,
                                       residuals=self.rho.reads_totals)
            self.rho.observe(Residuals(totals, functools.partial(self.duals.entry_residuals, self.w,
                                                                 self.w_previous, released)))
        self.shared = released
        rho = self.rho.value(t)
        w = self.duals.average(released, rho, self.multiplicity)
        if self.mixer is not None and not first:
            w = self._accelerate(w, sent, rho)
        self.rho_used = rho
        self.w_previous, self.w = self.w, w
        # every agent's slice A_p w (and of a per-key rho; a number as one 0-d array), read-only: agents that hold
        # the same entries share one array (all of them in full consensus)
        slices = self.duals.per_agent(self.w)
        rhos = self.duals.per_agent(rho) if is_vector(rho) else [read_only(np.array(rho, dtype=float))] * len(slices)
        if self.relaxation != 1.0:  # Boyd et al. Sec. 3.4.3: A_p w -> alpha A_p w + (1 - alpha) z_p, in the
            # agent's step and in line 8 (w is ADMM's first block here: the server averages before the agents step)
            self.used = [read_only(self.relaxation * w_p + (1.0 - self.relaxation) * z_p)
                         for w_p, z_p in zip(slices, released, strict=True)]
        messages = []
        for p, (name, w_p, rho_p) in enumerate(zip(self.names, slices, rhos, strict=True)):
            payload = {"w": w_p if self.used is None else self.used[p], "rho": rho_p}
            if self.used is not None:  # the unrelaxed slice, for the public metrics and result.w
                payload["average"] = w_p
            if self.mixer is not None:  # the agent's dual is the server's, mixed from released messages
                payload["lam"] = self.duals.lam[p]
            messages.append(Message.of_arrays(t, SERVER, name, payload))  # float arrays: no checks, by position
        return messages

    def state_dict(self) -> dict[str, Any]:
        return {"shared": self.shared, "lam": self.duals.lam, "w": self.w, "w_previous": self.w_previous,
                "rho_used": self.rho_used, "used": self.used, "rho": self.rho.state_dict(),
                "anderson": None if self.mixer is None else self.mixer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.shared = state["shared"]
        self.duals.assign(state["lam"])
        self.w, self.w_previous, self.rho_used = state["w"], state["w_previous"], state["rho_used"]
        self.used = state["used"]
        self.rho.load_state_dict(state["rho"])
        if self.mixer is not None:
            self.mixer.load_state_dict(state["anderson"])


class ADMMMonitor(Monitor):
    """The public metrics of Algorithm 1 from its messages: residuals, rho and the global vector w.

    The server's messages carry w_p and rho^t, the agents' carry their released shared entries;
    the monitor replays line 8 on them to get the duals, hence the residuals' scales. When the server
    accelerates, its messages also carry the duals lambda_p^{t-1} the agents use, and the monitor starts
    line 8 from those; when it over-relaxes, they carry the relaxed vector the agent uses (``"w"``, which
    line 8 uses) and the slice of w itself (``"average"``). A per-key rho is reported by its mean over the
    entries of w.
    The scales are computed when first read (`privcvx.algorithms.consensus.RoundResiduals`): by ``tol``,
    ``result.status`` (`LinearizedADMM.converged`) and a penalty rule that reads the totals.
    """

    def __init__(self, problem: DistributedProblem) -> None:
        self.released: list[np.ndarray] | None = None
        self.layouts = problem.layouts
        self.names = problem.names
        self.duals = ConsensusDuals(self.layouts, problem.dim)
        self.w = np.zeros(problem.dim)

    def pair(self, coordinator: Coordinator | None) -> None:
        """The server of the run (`ADMMServer`) runs line 8 on the releases of round t at round t + 1, on the inputs
        this monitor replays it on in round t's history row: it takes the monitor's answer when the inputs are
        bitwise the same (`ConsensusDuals.follow`), so line 8 runs once a round, not twice."""
        if isinstance(coordinator, ADMMServer):
            coordinator.duals.follow(self.duals)

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        if t == 0:  # the agents' initial points: no round yet
            return {}
        to_agent, uplink = {}, {}
        for m in messages:
            if m.sender == SERVER:
                to_agent[m.receiver] = m
            elif m.receiver == SERVER:
                uplink[m.sender] = m
        downlink = [to_agent[name] for name in self.names]
        w_previous = self.w
        vector = is_vector(downlink[0]["rho"])
        relaxed = "average" in downlink[0].payload
        # w (and a per-key rho) from the messages' slices (`ConsensusDuals.assemble`: the server's w itself when one
        # slice is all of w, which line 8 then recognizes), never written again: line 8's record keeps it, read-only
        w = read_only(self.duals.assemble([message["average" if relaxed else "w"] for message in downlink], self.w))
        rho = self.duals.assemble([message["rho"] for message in downlink], np.zeros(w.size)) if vector \
            else float(downlink[0]["rho"])
        if "lam" in downlink[0].payload:  # the server accelerates: line 8 starts from the duals it sent
            self.duals.assign([message["lam"] for message in downlink])
        self.w = w
        released = self.released = [uplink[name]["z"] for name in self.names]
        residuals = self.duals.update(w, w_previous, released, rho,
                                      [message["w"] for message in downlink] if relaxed else None)  # a new dict
        residuals["consensus_residual"] = residuals["primal_residual"]  # the scales read when needed
        residuals["rho"] = float(np.add.reduce(rho)) / rho.size if vector else rho  # np.mean's sum, division
        return residuals

    def global_vector(self) -> np.ndarray:
        return self.w.copy()

    def releases(self) -> list[np.ndarray] | None:
        return self.released

    def stacked_releases(self) -> np.ndarray | None:
        """The releases as line 8 stacked them (`ConsensusDuals.stacked`)."""
        return None if self.released is None else self.duals.stacked(self.released)

    def state_dict(self) -> dict[str, Any]:
        return {"lam": self.duals.lam, "w": self.w}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.duals.assign(state["lam"])
        self.w = state["w"]
