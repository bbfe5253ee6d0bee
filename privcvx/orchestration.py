"""Orchestration: the server and agent roles of Algorithm 1 and the run loop.

Server (lines 1-9): keeps a copy of every agent's dual lambda_p and its last released
shared entries, computes the global vector (line 5), and updates the duals (line 8).

Agent (lines 11-23): keeps its own dual, its last local iterate z_p^{t-1,E+1}, its
noise stream and its privacy ledger. Each round it runs E local updates Eq. (9)/(10)
(or (12)), each from the previous one (line 16), releases the average of the E iterates
(line 20) and updates its dual (line 22) identically to the server.

Only the released shared entries cross the agent boundary towards the server, and only
the agent's slice of w goes back. Diagnostics (f_p at the release, W_p violation, noise
magnitude) are reported alongside for the history; they are not private outputs of the
algorithm and are documented as such.

All state is plain numpy arrays and dicts (``state_dict``), so a run can be checkpointed
and resumed with bitwise-identical results, and agents can live in worker processes.
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from privcvx.errors import ParameterError, PrivacyError, PrivcvxError, RunFailed
from privcvx.gradients import GradientEvaluator
from privcvx.localstep import Projection
from privcvx.privacy.accounting import (
    PrivacyLedger,
    default_accounting_delta,
    privacy_table,
    tightest_epsilon,
)
from privcvx.privacy.noise import NoiseSource, agent_noise_sources
from privcvx.privacy.perturbation import Perturbation
from privcvx.problem import Agent, AgentLayout, DistributedProblem
from privcvx.results import HISTORY_COLUMNS, Result
from privcvx.schedules import ResidualBalancing, Schedule, as_schedule, checked_value, inverse_sqrt
from privcvx.tuning import SmoothStep, estimate_smoothness, is_smooth


@dataclass
class AgentReport:
    """What an agent sends back after a round: the release plus diagnostics."""

    shared: np.ndarray          # the released shared entries of z_p^{t+1} (line 21)
    objective: float            # f_p(z_p^{t+1}): diagnostic
    violation: float            # largest violation of W_p by z_p^{t+1}
    noise_magnitude: float      # sum over e and i of |xi_{p,i}^{t,e}|, this agent's share of Eq. (29)
    epsilon: float              # the agent's cumulative epsilon after this round
    eta: float                  # the step eta_p^t the agent used this round


class AgentRole:
    """Agent p of Algorithm 1 (lines 11-23), with its private data, noise stream and ledger."""

    def __init__(self, agent: Agent, layout: AgentLayout, privacy: Perturbation | None,
                 noise: NoiseSource, accounting_delta: float, smoothness: float | None = None) -> None:
        self.agent = agent
        self.layout = layout
        self.privacy = privacy
        self.noise = noise
        self.accounting_delta = accounting_delta
        self.projection = Projection(agent, layout)
        self.evaluator = GradientEvaluator(agent, layout)
        self.mask = layout.shared_mask
        self.ledger = PrivacyLedger(layout.name)
        # Line 13: z_p^{0,E+1} = z_p^1, the feasible point of W_p closest to the origin.
        self.z = self.projection(np.zeros(layout.dim), np.ones(layout.dim))
        self.lam = np.zeros(layout.shared_local.size)
        self.released = self.z.copy()
        self.declared_smoothness = smoothness
        self._step: Schedule | None = None

    @property
    def smoothness(self) -> float:
        """L_p: declared by the problem builder, else estimated at z_p^1 (nan for a nonsmooth f_p)."""
        if self.declared_smoothness is None:
            smooth = is_smooth(self.agent.objective)
            self.declared_smoothness = estimate_smoothness(self.evaluator, self.z) if smooth else math.nan
        return self.declared_smoothness

    def step_rule(self) -> Schedule:
        """eta="auto": 1/L_p (no privacy), Eq. (25a) under privacy, Eq. (26a) when f_p is nonsmooth."""
        if self._step is None:
            lipschitz = self.smoothness
            epsilon = self.privacy.mechanism.epsilon if self.privacy is not None else math.inf
            if not math.isfinite(lipschitz) or lipschitz <= 0:
                self._step = inverse_sqrt()
            else:
                self._step = SmoothStep(lipschitz, epsilon if math.isfinite(epsilon) else math.inf)
        return self._step

    def initial_shared(self) -> np.ndarray:
        return self.z[self.layout.shared_local].copy()

    def _noise(self, scale: float) -> np.ndarray:
        return scale * self.privacy.mechanism.unit_noise(self.noise, self.layout.dim)

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float, eta: float,
                     warm_start: bool = False) -> tuple[np.ndarray, float]:
        """One local update, Eq. (9) with ObjPert Eq. (10) or OutPert Eq. (12); returns (z^{t,e+1}, sum|xi|)."""
        weights = 1.0 / eta + rho * self.mask
        gradient = self.evaluator.gradient(z)
        if not np.all(np.isfinite(gradient)):
            raise PrivcvxError("the gradient is not finite at the current iterate (check the data, eta and rho)",
                               agent=self.layout.name, argument="gradient")
        xi = None
        if self.privacy is not None:
            sensitivity = (self.privacy.gradient_sensitivity(self.agent, self.layout.split(z))
                           if self.privacy.needs_gradient_sensitivity() else None)
            scale = self.privacy.noise_scale(sensitivity, weights, self.projection.kind != "conic")
            xi = self._noise(scale)
            self.ledger.record(self.privacy.mechanism)
            if self.privacy.kind == "objective":
                gradient = gradient - xi
        linear = z / eta - gradient
        linear[self.layout.shared_local] += rho * w_p + self.lam
        z_next = self.projection(linear / weights, weights, warm_start)
        if xi is not None and self.privacy.kind == "output":
            z_next = z_next + xi
        return z_next, (float(np.abs(xi).sum()) if xi is not None else 0.0)

    def round(self, t: int, w_p: np.ndarray, rho: float, eta: float | None, local_updates: int) -> AgentReport:
        """Lines 15-22: E local updates from the last iterate, release the average, update the dual.

        ``eta=None`` means eta="auto": the agent's own :meth:`step_rule`.
        """
        if eta is None:
            eta = checked_value(self.step_rule(), t, argument="eta")
        z = self.z
        total = np.zeros(self.layout.dim)
        noise = 0.0
        for e in range(local_updates):
            z, magnitude = self.local_update(z, w_p, rho, eta, warm_start=e > 0)
            total += z
            noise += magnitude
        self.z = z
        self.released = total / local_updates
        shared = self.released[self.layout.shared_local]
        self.lam = self.lam + rho * (w_p - shared)
        epsilon = (tightest_epsilon(self.ledger, self.accounting_delta, with_pld=False)
                   if self.privacy is not None else 0.0)
        return AgentReport(shared=shared, objective=self.evaluator.value(self.released),
                           violation=self.projection.violation(self.released), noise_magnitude=noise,
                           epsilon=epsilon, eta=eta)

    def state_dict(self) -> dict[str, Any]:
        return {"z": self.z, "lam": self.lam, "released": self.released,
                "noise": self.noise.get_state(), "ledger": self.ledger.to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.z, self.lam, self.released = state["z"], state["lam"], state["released"]
        self.noise.set_state(state["noise"])
        self.ledger = PrivacyLedger.from_dict(state["ledger"])


class Server:
    """The server of Algorithm 1 (lines 1-9), generalized to shared keys."""

    def __init__(self, problem: DistributedProblem, initial_shared: list[np.ndarray]) -> None:
        self.layouts = problem.layouts
        self.multiplicity = problem.multiplicity
        self.dim = problem.dim
        self.shared = [s.copy() for s in initial_shared]
        self.lam = [np.zeros_like(s) for s in initial_shared]
        self.w = np.zeros(self.dim)
        self.w_previous = self.w

    def global_step(self, rho: float) -> np.ndarray:
        """Line 5: each entry of w is the average of (z_p - lambda_p / rho) over the agents sharing it."""
        total = np.zeros(self.dim)
        for layout, z_p, lam_p in zip(self.layouts, self.shared, self.lam, strict=True):
            np.add.at(total, layout.shared_global, z_p - lam_p / rho)
        self.w_previous, self.w = self.w, total / self.multiplicity
        return self.w

    def dual_step(self, released: list[np.ndarray], rho: float) -> dict[str, float]:
        """Line 8, and the consensus-ADMM residuals of Boyd et al. Secs. 3.3 and 7.1.

        Primal: r = ||A w - z|| over every agent's shared entries. Dual: s = rho ||A (w^{t+1} - w^t)||,
        the change of the global vector seen by every copy. Their relative scales are
        max(||A w||, ||z||) and ||lambda|| (all duals stacked).
        """
        primal_sq = z_sq = w_sq = dual_sq = lam_sq = 0.0
        for p, (layout, z_new) in enumerate(zip(self.layouts, released, strict=True)):
            w_p = self.w[layout.shared_global]
            self.lam[p] = self.lam[p] + rho * (w_p - z_new)
            primal_sq += float(np.sum((w_p - z_new) ** 2))
            z_sq += float(np.sum(z_new ** 2))
            w_sq += float(np.sum(w_p ** 2))
            dual_sq += float(np.sum((w_p - self.w_previous[layout.shared_global]) ** 2))
            lam_sq += float(np.sum(self.lam[p] ** 2))
            self.shared[p] = z_new
        return {"primal_residual": math.sqrt(primal_sq), "dual_residual": rho * math.sqrt(dual_sq),
                "scale_primal": math.sqrt(max(z_sq, w_sq)), "scale_dual": math.sqrt(lam_sq),
                "entries": float(sum(layout.shared_local.size for layout in self.layouts))}

    def state_dict(self) -> dict[str, Any]:
        return {"shared": self.shared, "lam": self.lam, "w": self.w, "w_previous": self.w_previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.shared, self.lam, self.w, self.w_previous = state["shared"], state["lam"], state["w"], state["w_previous"]


@dataclass
class RunConfig:
    """A run's settings, validated once; everything here is picklable."""

    rounds: int
    local_updates: int
    rho: Schedule
    eta: Schedule | None        # None: eta="auto", each agent its own step rule
    privacy: Perturbation | None
    seed: int | str | None
    accounting_delta: float
    tol: tuple[float, float] | None = None


def _check_int(value: Any, *, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"must be an integer >= 1, got {value!r}", argument=argument)
    return int(value)


def make_config(problem: DistributedProblem, *, rounds: int, local_updates: int, rho: Any, eta: Any,
                privacy: Perturbation | None, seed: int | str | None,
                tol: tuple[float, float] | None) -> RunConfig:
    rounds = _check_int(rounds, argument="rounds")
    local_updates = _check_int(local_updates, argument="local_updates")
    rho_schedule = as_schedule(rho, argument="rho")
    eta_schedule = None if isinstance(eta, str) and eta == "auto" else as_schedule(eta, argument="eta")
    if privacy is not None:
        if not isinstance(privacy, Perturbation):
            raise PrivacyError("must be pc.ObjectivePerturbation(...) or pc.OutputPerturbation(...)",
                               argument="privacy")
        privacy = privacy.resolve(rounds * local_updates)
        if privacy.needs_gradient_sensitivity():
            for agent in problem.agents:
                if agent.sensitivity is None:
                    raise PrivacyError("privacy is on but this agent declares no gradient sensitivity",
                                       agent=agent.name, argument="sensitivity")
    if tol is not None:
        if len(tuple(tol)) != 2:
            raise ParameterError(f"must be a pair (abs, rel), got {tol!r}", argument="tol")
        tol = tuple(float(v) for v in tol)
        if any(not math.isfinite(v) or v < 0 for v in tol) or tol == (0.0, 0.0):
            raise ParameterError(f"must be two finite numbers >= 0, not both 0, got {tol!r}", argument="tol")
    delta = default_accounting_delta(privacy.mechanism) if privacy is not None else 0.0
    return RunConfig(rounds=rounds, local_updates=local_updates, rho=rho_schedule, eta=eta_schedule,
                     privacy=privacy, seed=seed, accounting_delta=delta, tol=tol)


def _stop_reason(config: RunConfig, residuals: dict[str, float]) -> str | None:
    """Boyd et al. Sec. 3.3.1: stop when both residuals are below their thresholds."""
    if config.tol is None:
        return None
    eps_abs, eps_rel = config.tol
    root = math.sqrt(residuals["entries"])
    eps_pri = root * eps_abs + eps_rel * residuals["scale_primal"]
    eps_dual = root * eps_abs + eps_rel * residuals["scale_dual"]
    if residuals["primal_residual"] <= eps_pri and residuals["dual_residual"] <= eps_dual:
        return "tolerance"
    return None


def solve(problem: DistributedProblem, *, rounds: int = 100, local_updates: int = 1,
          rho: float | Schedule | str = "adaptive", eta: float | Schedule | str = "auto",
          privacy: Perturbation | None = None, seed: int | str | None = 0, backend: str = "serial",
          progress: bool = False, callback: Callable[[dict[str, Any]], Any] | None = None,
          checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
          tol: tuple[float, float] | None = None, reference: bool = False) -> Result:
    """Run Algorithm 1 on ``problem`` and return a :class:`~privcvx.results.Result`.

    ``eta="auto"`` gives each agent 1/L_p (Eq. (25a) under privacy, Eq. (26a) when f_p is
    nonsmooth; see :mod:`privcvx.tuning`); ``rho="adaptive"`` is residual balancing
    (:class:`~privcvx.schedules.ResidualBalancing`), started at the largest L_p.
    ``tol=(abs, rel)`` stops when both residuals meet Boyd et al.'s thresholds. ``callback(row)`` is called after every
    round with the history row; returning ``False`` stops the run. A run that fails
    part-way raises :class:`~privcvx.errors.RunFailed` whose ``.result`` keeps the history
    up to the failure. ``checkpoint`` writes the whole run state atomically after every
    round; ``resume`` continues from such a file with bitwise-identical results.
    """
    from privcvx.backends import make_backend

    config = make_config(problem, rounds=rounds, local_updates=local_updates, rho=rho, eta=eta,
                         privacy=privacy, seed=seed, tol=tol)
    sources = agent_noise_sources(seed, len(problem.agents))
    runtime = make_backend(backend, problem, config, sources)
    server = Server(problem, runtime.initial_shared())
    if isinstance(config.rho, ResidualBalancing):
        finite = [value for value in runtime.smoothness() if math.isfinite(value) and value > 0]
        config.rho.start(max(finite, default=1.0))
    rows: list[dict[str, Any]] = []
    start_round, elapsed = 1, 0.0
    if resume is not None:
        with open(resume, "rb") as handle:
            state = pickle.load(handle)
        server.load_state_dict(state["server"])
        if isinstance(config.rho, ResidualBalancing):
            config.rho.load_state_dict(state["rho"])
        runtime.load_states(state["agents"])
        rows, start_round, elapsed = state["rows"], state["next_round"], state["elapsed"]
    reference_solution = problem.solve_centralized() if reference else None
    stop = "rounds"
    bar = _progress(progress, config.rounds, start_round)
    t0 = time.perf_counter() - elapsed
    try:
        try:
            for t in range(start_round, config.rounds + 1):
                rho_t = checked_value(config.rho, t, argument="rho")
                eta_t = None if config.eta is None else checked_value(config.eta, t, argument="eta")
                w = server.global_step(rho_t)                                        # line 5
                reports = runtime.round(t, [w[layout.shared_global] for layout in problem.layouts],
                                        rho_t, eta_t)                                # lines 6-7, 15-22
                residuals = server.dual_step([r.shared for r in reports], rho_t)     # line 8
                row = {"round": t,
                       "objective": float(sum(r.objective for r in reports)),
                       "consensus_residual": residuals["primal_residual"],
                       "primal_residual": residuals["primal_residual"],
                       "dual_residual": residuals["dual_residual"],
                       "max_violation": float(max(r.violation for r in reports)),
                       "noise_magnitude": float(sum(r.noise_magnitude for r in reports)),
                       "epsilon": float(max(r.epsilon for r in reports)),
                       "rho": rho_t, "eta": float(min(r.eta for r in reports)),
                       "time_s": time.perf_counter() - t0}
                for name, metric in problem.metrics.items():
                    row[name] = float(metric(w))
                _check_finite(row, reports, problem)
                rows.append(row)
                if isinstance(config.rho, ResidualBalancing):
                    config.rho.observe(residuals)
                if bar is not None:
                    bar.update(1)
                if checkpoint is not None:
                    _write_checkpoint(checkpoint, server, runtime, config, rows, t + 1, row["time_s"])
                reason = _stop_reason(config, residuals)
                if callback is not None and callback(row) is False:
                    reason = "callback"
                if reason is not None:
                    stop = reason
                    break
        except KeyboardInterrupt:
            stop = "interrupted"
        except Exception as exc:
            failed_round = rows[-1]["round"] + 1 if rows else start_round
            raise RunFailed(f"the run failed in round {failed_round}: {exc}", cause=exc,
                            result=_result(problem, config, server, runtime, rows, "failed", reference_solution),
                            agent=getattr(exc, "agent", None)) from exc
        return _result(problem, config, server, runtime, rows, stop, reference_solution)
    finally:
        if bar is not None:
            bar.close()
        runtime.close()


def _check_finite(row: dict[str, Any], reports: list[AgentReport], problem: DistributedProblem) -> None:
    """Refuse to record a NaN or infinite objective or metric: name the agent or the metric."""
    for name, report in zip(problem.names, reports, strict=True):
        if not math.isfinite(report.objective):
            raise PrivcvxError(f"f_p is {report.objective} at the released iterate (outside its domain?)",
                               agent=name, argument="objective")
    for name in problem.metrics:
        if not math.isfinite(row[name]):
            raise PrivcvxError(f"the metric returned {row[name]}", argument=f"metrics[{name!r}]")


def _progress(enabled: bool, total: int, start: int) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start - 1, desc="rounds", unit="round")


def _write_checkpoint(path: str | os.PathLike, server: Server, runtime: Any, config: RunConfig,
                      rows: list[dict[str, Any]], next_round: int, elapsed: float) -> None:
    """Write the whole run state atomically (temporary file, then rename)."""
    state = {"server": server.state_dict(), "agents": runtime.states(), "rows": rows,
             "next_round": next_round, "elapsed": elapsed,
             "rho": config.rho.state_dict() if isinstance(config.rho, ResidualBalancing) else None}
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False) as handle:
        pickle.dump(state, handle)
    os.replace(handle.name, path)


def _result(problem: DistributedProblem, config: RunConfig, server: Server, runtime: Any,
            rows: list[dict[str, Any]], stop: str, reference: Any) -> Result:
    history = pd.DataFrame(rows, columns=[*HISTORY_COLUMNS, *problem.metrics])
    ledgers = runtime.ledgers()
    privacy = privacy_table(ledgers, config.accounting_delta) if config.privacy is not None else None
    return Result(w=server.w.copy(), z=runtime.released(), history=history, privacy=privacy,
                  reference=reference, agents=problem.names,
                  info={"stop": stop, "rounds": config.rounds, "local_updates": config.local_updates,
                        "privacy": repr(config.privacy), "seed": repr(config.seed),
                        "accounting_delta": config.accounting_delta,
                        "projection": runtime.projection_reports()})
