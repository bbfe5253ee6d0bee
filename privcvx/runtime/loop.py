"""The generic run loop: rounds, routing, the transcript, the history, checkpoints, failures.

For every algorithm the same loop runs, for t = 1..T and for each of the algorithm's phases:

1. the coordinator (if any) steps with the messages addressed to the server;
2. every agent steps with its inbox: the messages addressed to it and the broadcasts of its
   neighbours in the message's round (a message is delivered at its receiver's next step);
3. every message is checked (its receivers must be the sender's neighbours in that round's
   graph) and recorded in the transcript, and the agents' new ledger entries are copied to the
   driver's ledgers.

After the round the monitor computes the public metrics from the round's messages, the
diagnostics (private, for research runs) are gathered if kept, and the history row is
appended; then the checkpoint is written and the stopping rules are checked. A failure raises
[`RunFailed`][privcvx.errors.RunFailed] whose ``.result`` keeps every finished round.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from privcvx.algorithms.base import AgentContext, Algorithm
from privcvx.errors import (
    CheckpointError,
    ConvergenceWarning,
    ParameterError,
    PrivacyError,
    PrivcvxError,
    ReproducibleNoiseWarning,
    RunFailed,
    check_int,
    check_scalar,
)
from privcvx.messages import (
    TRANSCRIPT_MODES,
    Message,
    Router,
    Transcript,
    TranscriptFile,
    encode_messages,
    integer_field,
    make_transcript,
)
from privcvx.privacy.accounting import PrivacyLedger, RunningEpsilon, privacy_table
from privcvx.privacy.mechanisms import mechanism_from_dict
from privcvx.privacy.noise import agent_noise_sources
from privcvx.privacy.sensitivity import holds_no_private_data
from privcvx.problem import DistributedProblem
from privcvx.results import TIMING_COLUMNS, Result
from privcvx.runtime import checkpoint as checkpoints
from privcvx.runtime.backends import DEFAULT_TIMEOUT, Ray, make_backend, sigint_ignored
from privcvx.solver_warnings import local_solve_info
from privcvx.topology import SERVER, Topology, WindowConnectivity


class Divergence:
    """The test for iterates growing without bound, on public values alone (releases only).

    Over two windows of `WINDOW` rounds, the displacements D_0 = w_{t-K} - w_{t-2K} and D_1 = w_t - w_{t-K}
    of the public global vector (each divided by the window's total step when the method's steps are not
    summable, `divergence_step`, e.g. DPDG's c / t^(3/4)). Diverging
    when: they point the same way (cosine >= `ALIGNED`); D_1 is no shorter than D_0 (to `SLACK`);
    ||w|| grows over both windows; w_t - w_{t-K} is above rounding (`FLOOR` max(1, ||w_t||)); each window's
    path is nearly straight (its displacement at least `STRAIGHT` times the length of its round-by-round
    path: noise and methods circling an optimum fail this); and the round does not meet the method's tolerance.
    A run that converges has displacements that shrink (at any linear rate the method has, by (1 - rate)^K per
    window); the differences w_t - w_{t-1} of ADMM on a problem with no optimum tend to a fixed nonzero direction
    instead (Banjac et al. 2019, Sec. 5).

    Also diverging: ||w|| grows by `GROWTH`, or the public residual (the releases' disagreement, or the
    primal residual), once above max(1, ||w||), grows by `RESIDUAL_GROWTH`, over each of the two windows.
    That is an oscillating blow-up (a gradient step too long for the graph), whose displacements alternate and
    whose average may stay put while the agents drift apart. Either sign must hold in `PERSIST`
    consecutive rounds.
    """

    WINDOW = 5
    ALIGNED = 0.99
    STRAIGHT = 0.9
    SLACK = 1e-3
    FLOOR = 1e-6
    GROWTH = 10.0
    RESIDUAL_GROWTH = 4.0
    PERSIST = 15

    def __init__(self) -> None:
        self.streak = 0
        self._keep([], [], [])

    def _keep(self, points: list[np.ndarray], steps: list[float], residuals: list[float]) -> None:
        """The last 2K + 1 rounds' values, each in a deque that drops its oldest when a round is added; the norms of
        the points and of their differences are computed once, when a point is added (`diverging`)."""
        keep = 2 * self.WINDOW + 1
        self.points: deque[np.ndarray] = deque(points, maxlen=keep)
        self.steps: deque[float] = deque(steps, maxlen=keep)
        self.residuals: deque[float] = deque(residuals, maxlen=keep)
        self.norms: deque[float] = deque(map(_norm, self.points), maxlen=keep)  # ||w|| of every kept point
        # ||w_i - w_{i-1}|| between consecutive kept points
        self.moves: deque[float] = deque((_norm(b - a) for a, b in itertools.pairwise(self.points)), maxlen=keep - 1)

    def diverging(self, w: np.ndarray, step: float | None, residual: float = 0.0) -> bool:
        """Record round t's w, its step and its public residual (the disagreement of the releases, or the
        primal residual); whether the last `PERSIST` rounds each showed divergence over their 2K rounds."""
        w = np.array(w, dtype=float)
        if self.points:
            self.moves.append(_norm(w - self.points[-1]))
        self.points.append(w)
        self.norms.append(_norm(w))
        self.steps.append(1.0 if step is None else float(step))
        self.residuals.append(float(residual))
        self.streak = self.streak + 1 if len(self.points) == self.points.maxlen and self._signs() else 0
        return self.streak >= self.PERSIST

    def _signs(self) -> bool:
        """Whether the last 2K + 1 rounds show divergence (class docstring); the norms of the points and of their
        differences are kept from round to round (`diverging`)."""
        k = self.WINDOW
        first, middle, last = self.points[0], self.points[k], self.points[2 * k]
        norms = [self.norms[0], self.norms[k], self.norms[2 * k]]
        residuals = self.residuals[0], self.residuals[k], self.residuals[2 * k]
        # a geometric blow-up, which the directions below miss when it oscillates
        for sizes, growth, floor in ((norms, self.GROWTH, 0.0), (residuals, self.RESIDUAL_GROWTH, max(1.0, norms[2]))):
            if 0.0 < growth * sizes[0] <= sizes[1] and growth * sizes[1] <= sizes[2] and sizes[2] > floor:
                return True
        moves = self.moves
        first_path, second_path = sum(itertools.islice(moves, k)), sum(itertools.islice(moves, k, None))
        old_scale = max(sum(itertools.islice(self.steps, 1, k + 1)), _TINY)
        new_scale = max(sum(itertools.islice(self.steps, k + 1, None)), _TINY)
        before, after = middle - first, last - middle  # the two windows' displacements, each formed once
        before_norm, after_norm = _norm(before), _norm(after)
        if before_norm < self.STRAIGHT * first_path or after_norm < self.STRAIGHT * second_path:
            return False  # not a straight path: noise, or a method circling its optimum
        # the second window surely shrinks (the test of new_norm below is True) when its displacement's norm per step
        # is below the first's by more than the rounding of the norms: decided without old, new and their norms (a
        # converging run's displacements shrink: on digits 76 of the 90 rounds that reach here)
        if self._shrinks(after_norm, before_norm, old_scale, new_scale, self.rounding(first.size)):
            return False
        old, new = before / old_scale, after / new_scale
        old_norm, new_norm = _norm(old), _norm(new)
        if not old_norm > 0.0 or new_norm < (1.0 - self.SLACK) * old_norm:
            return False
        return (float(old @ new) >= self.ALIGNED * old_norm * new_norm and norms[0] < norms[1] < norms[2]
                and after_norm > self.FLOOR * max(1.0, norms[2]))

    def _shrinks(self, after_norm: float, before_norm: float, old_scale: float, new_scale: float,
                 margin: float) -> bool:
        """Whether ``after_norm`` / ``new_scale`` is below (1 - `SLACK`) ``before_norm`` / ``old_scale`` by more than
        ``margin`` either way: then ``new_norm < (1 - SLACK) old_norm`` in `_signs` holds, whatever the rounding of
        new = after / new_scale, old = before / old_scale and their norms (`rounding`). A NaN or an infinity never
        decides (the comparison is False): `_signs` then computes the test itself."""
        return after_norm * (1.0 + margin) / new_scale < (1.0 - margin) * (1.0 - self.SLACK) * before_norm / old_scale

    @staticmethod
    def rounding(size: int) -> float:
        """A relative bound, with room to spare, of the rounding in the norms `_signs` compares: a norm of n
        entries, sqrt(v . v), is within gamma_n + u of the exact one (u = 2^-53, gamma_n = n u / (1 - n u); Higham,
        Accuracy and Stability of Numerical Algorithms, Sec. 3.1), a difference or a division of vectors within u
        per entry, and `_signs` compares a few of them: 1e-6, or 64 n u beyond 1.4e8 entries."""
        return max(1e-6, 64.0 * size * 2.0 ** -53)

    def state_dict(self) -> dict[str, Any]:
        """The last 2K + 1 rounds' values and the streak, for the checkpoint."""
        return {"points": list(self.points), "steps": list(self.steps), "residuals": list(self.residuals),
                "streak": self.streak}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` (the norms are computed again from the points)."""
        self._keep(list(state["points"]), [float(v) for v in state["steps"]], [float(v) for v in state["residuals"]])
        self.streak = int(state["streak"])


#: The smallest normal float, which a window's total step is at least (``np.finfo`` is a call: looked up once).
_TINY = float(np.finfo(float).tiny)


def _norm(v: np.ndarray) -> float:
    """``np.linalg.norm`` of a real vector, bitwise (its definition: sqrt(v . v)), without its wrapper."""
    return math.sqrt(float(v.dot(v)))


class Ergodic:
    """The running (ergodic) sums of the public global vector w^t and of every agent's released shared entries over
    rounds 1..t: post-processing of the messages, which the monitor reads (``result.average()``). The releases' sums
    are one vector, the releases one after the other (one addition a round; split by agent when read)."""

    def __init__(self) -> None:
        self.rounds = 0
        self.w: np.ndarray | None = None
        self.z: np.ndarray | None = None
        self.shapes: list[tuple[int, ...]] = []  # every agent's release's shape, in agent order
        self.kept = True  # whether every round so far had every agent's release

    def add(self, w: np.ndarray, releases: list[np.ndarray] | None, stacked: np.ndarray | None = None) -> None:
        """Add round t's global vector and releases (None: the monitor keeps none, and z is dropped); ``stacked``:
        the releases one after the other, if the monitor has them so (`Monitor.stacked_releases`)."""
        self.rounds += 1
        if self.w is None:
            self.w = np.array(w, dtype=float)
        else:  # in place: the same sums, without a new array per round (the sums are the monitor's own copies)
            self.w += w
        self.kept = self.kept and releases is not None
        if not self.kept:
            self.z = None
            return
        if stacked is None:
            stacked = np.concatenate([np.ravel(z_p) for z_p in releases])
        if self.z is None:
            self.shapes = [np.shape(z_p) for z_p in releases]
            self.z = np.array(stacked, dtype=float)
        else:
            self.z += stacked

    def _split(self, z: np.ndarray) -> list[np.ndarray]:
        """Every agent's part of a vector over the releases one after the other, in its release's shape."""
        ends = np.cumsum([math.prod(shape) for shape in self.shapes]).tolist()
        return [z[end - math.prod(shape):end].reshape(shape) for shape, end in zip(self.shapes, ends, strict=True)]

    def summary(self, problem: DistributedProblem) -> dict[str, Any]:
        """``info["average"]``: the averages over the rounds (lists, for the result file), their consensus residual
        sqrt(sum_p ||A_p w_bar - z_bar_p||^2) when every release is the agent's shared entries, and the problem's
        metrics at w_bar."""
        if not self.rounds or self.w is None:
            return {}
        w = self.w / self.rounds
        out: dict[str, Any] = {"rounds": self.rounds, "w": w.tolist(), "z": None, "metrics": {}}
        if self.z is not None:
            z = self._split(self.z / self.rounds)
            out["z"] = [z_p.tolist() for z_p in z]
            if all(z_p.shape == layout.shared_global.shape for z_p, layout in zip(z, problem.layouts, strict=True)):
                out["metrics"]["consensus_residual"] = math.sqrt(sum(
                    float(((w[layout.shared_global] - z_p) ** 2).sum())
                    for z_p, layout in zip(z, problem.layouts, strict=True)))
        out["metrics"].update({name: float(metric(w)) for name, metric in problem.metrics.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        """The sums so far, for the checkpoint (the releases' sums by agent)."""
        return {"rounds": self.rounds, "w": self.w, "z": None if self.z is None else self._split(self.z),
                "kept": self.kept}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the sums of `state_dict` (copied: `add` adds to them in place)."""
        self.rounds, self.kept = int(state["rounds"]), bool(state["kept"])
        self.w = None if state["w"] is None else np.array(state["w"], dtype=float)
        self.z, self.shapes = None, []
        if state["z"] is not None:
            sums = [np.asarray(z_p, dtype=float) for z_p in state["z"]]
            self.shapes = [z_p.shape for z_p in sums]
            self.z = np.concatenate([z_p.ravel() for z_p in sums])


@dataclass(frozen=True)
class SavedRun:
    """A checkpoint read back (`read_checkpoint`): its state file's state and its logs' records."""

    state: dict[str, Any]
    transcript: list[bytes]
    history: list[bytes]
    next_round: int


def read_checkpoint(path: str | os.PathLike, header: dict[str, Any], rounds: int) -> SavedRun:
    """The checkpoint at ``path`` of the run fingerprinted by ``header``: its state file and its logs, checked
    against the digests the state file records; a checkpoint past ``rounds`` is refused."""
    state = checkpoints.read_state(path, header)
    logs, next_round = state.get("logs"), state.get("next_round")
    if not isinstance(logs, dict) or set(logs) != {"transcript", "history"}:
        raise CheckpointError("the checkpoint's state is damaged: no record of its logs", argument="resume")
    if isinstance(next_round, bool) or not isinstance(next_round, int) or not 1 <= next_round <= rounds + 1:
        raise CheckpointError(f"the checkpoint continues at round {next_round!r}, which a run of rounds={rounds} "
                              "does not have", argument="resume")
    return SavedRun(state=state, next_round=next_round,
                    transcript=checkpoints.read_log(checkpoints.transcript_path(path), logs["transcript"]),
                    history=checkpoints.read_log(checkpoints.history_path(path), logs["history"]))


class Run:
    """One run of an algorithm on a problem: the state the loop advances, and the result it builds."""

    def __init__(self, problem: DistributedProblem, algorithm: Algorithm, topology: Topology, *, rounds: int,
                 seed: int | str | None, diagnostics: bool, transcript: Transcript | None = None) -> None:
        self.problem = problem
        self.algorithm = algorithm
        self.topology = topology
        self.rounds = rounds
        self.seed = seed
        self.keep_diagnostics = bool(diagnostics)
        sources = agent_noise_sources(seed, len(problem.agents))
        self.contexts = [AgentContext(name=layout.name, index=i, layout=layout, noise=source,
                                      ledger=PrivacyLedger(layout.name), topology=topology, rounds=rounds,
                                      diagnostics=self.keep_diagnostics)
                         for i, (layout, source) in enumerate(zip(problem.layouts, sources, strict=True))]
        self.ledgers = [PrivacyLedger(name, reports=False) for name in problem.names]  # the driver's copies
        self.logs: tuple[checkpoints.Log, checkpoints.Log] | None = None  # the checkpoint's transcript and history
        self.committer: checkpoints.Committer | None = None
        self.events: list[tuple[int, Any, int, str | None]] = []  # ledger entries not yet in the history log
        self.mechanisms: dict[tuple, int] = {}  # the history log's mechanisms (by signature), written once, by index
        self.committed: int | None = None  # the next round of the checkpoint's last state file
        self.deferred: tuple[Any, str | os.PathLike, int, list[Message], float] | None = None  # `commit`'s arguments
        self.header = ""  # the checkpoint's header, as JSON text
        self.accounts = self._accounts()
        self.coordinator = algorithm.coordinator(problem, topology)
        self.monitor = algorithm.monitor(problem, topology)
        self.monitor.pair(self.coordinator)
        self.router = Router(topology, problem.names)
        self.connectivity = WindowConnectivity(topology)
        self.transcript = Transcript() if transcript is None else transcript
        self.rows: list[dict[str, Any]] = []
        self.reference: Any = None
        self.divergence = Divergence()
        self.ergodic = Ergodic()
        self.last_metrics: dict[str, float] = {}
        self.last_w = np.zeros(problem.dim)
        self.whole = all(np.array_equal(layout.shared_global, np.arange(problem.dim)) for layout in problem.layouts)
        diagnostic = set(algorithm.diagnostic_columns) if self.keep_diagnostics else set()
        # step times depend on the private data (solver iterations): like the backends' busy_s, only with diagnostics
        dropped = set() if self.keep_diagnostics else set(TIMING_COLUMNS)
        self.columns = [c for c in algorithm.columns
                        if (c in diagnostic or c not in algorithm.diagnostic_columns) and c not in dropped]
        self.kept = frozenset(self.columns)

    # ---- one exchange ---------------------------------------------------------------------------------
    def _accounts(self) -> list[RunningEpsilon] | None:
        if not self.algorithm.private:
            return None
        return [RunningEpsilon(ledger, self.algorithm.accounting_delta) for ledger in self.ledgers]

    def _record(self, replies: list[tuple[list[Message], list[tuple[Any, int]]]], t: int) -> list[Message]:
        sent = []
        for i, (account, ledger, (messages, events)) in enumerate(zip(
                self.accounts or [None] * len(self.ledgers), self.ledgers, replies, strict=True)):
            for mechanism, count, nominal in events:
                (account or ledger).record(mechanism, count, nominal=nominal)
                if self.logs is not None:
                    self.events.append((i, mechanism, count, nominal))
            sent.extend(messages)
        self.router.post(sent, t)
        return sent

    def start(self, backend: Any) -> None:
        """The start messages of the coordinator and the agents (round 0), posted and observed."""
        sent = self.coordinator.start() if self.coordinator is not None else []
        self.router.post(sent, 0)
        sent = sent + self._record(backend.call("start"), 0)
        self.transcript.append(sent)
        self.monitor.observe(0, sent)
        if self.logs is not None:
            self.log(0, None, sent)

    def round(self, backend: Any, t: int) -> list[Message]:
        """Run every phase of round ``t``: coordinator first, then the agents; return the round's messages."""
        sent: list[Message] = []
        for phase in range(self.algorithm.phases):
            if self.coordinator is not None:
                extra = {"phase": phase} if self.algorithm.phases > 1 else {}
                out = self.coordinator.step(t, self.router.take(SERVER), **extra)
                if any(m.sender != SERVER for m in out):
                    raise PrivcvxError("the coordinator may only send messages from the server", argument="messages")
                self.router.post(out, t)
                sent.extend(out)
            inboxes = [self.router.take(name) for name in self.router.names]
            sent.extend(self._record(backend.call_split("step", inboxes, t, phase), t))
        self.transcript.append(sent)
        self.connectivity.add(t)
        return sent

    # ---- the history row ------------------------------------------------------------------------------
    def row(self, backend: Any, t: int, sent: list[Message], elapsed: float) -> tuple[dict[str, Any], str | None]:
        """The history row of round ``t`` and a reason to stop (tolerance or callback), or None."""
        metrics = self.monitor.observe(t, sent)
        w = self.monitor.global_vector()
        row: dict[str, Any] = {"round": t, "epsilon": self.epsilon()}
        if "time_s" in self.columns:
            row["time_s"] = elapsed
        row.update({c: float(v) for c, v in metrics.items() if c in self.kept})
        for column in self.columns:
            if column in row and not math.isfinite(row[column]):
                raise PrivcvxError(f"the public metric {column!r} is {row[column]} in round {t}: the iterates "
                                   "overflowed (check the scale of the data, eta and rho)", argument=column)
        if self.keep_diagnostics and self.algorithm.diagnostic_columns:
            values = backend.call_split("diagnostics", self._slices(w))
            for column, reduce in self.algorithm.diagnostic_columns.items():
                column_values = [value[column] for value in values]
                if not all(map(math.isfinite, column_values)):
                    name, value = next((name, value) for name, value in zip(self.router.names, column_values,
                                                                            strict=True) if not math.isfinite(value))
                    raise PrivcvxError(f"the diagnostic {column!r} is {value} (outside f_p's domain?)",
                                       agent=name, argument="objective" if "objective" in column else column)
                row[column] = float(reduce(column_values))
            if self.reference is not None:
                for column in self.algorithm.objective_columns:
                    row[f"{column}_gap"] = row[column] - self.reference.value
        for name, metric in self.problem.metrics.items():
            row[name] = float(metric(w))
            if not math.isfinite(row[name]):
                raise PrivcvxError(f"the metric returned {row[name]}", argument=f"metrics[{name!r}]")
        missing = [c for c in self.columns if c not in row]
        if missing:
            raise PrivcvxError(f"{type(self.algorithm).__name__} produced no value for the columns {missing}",
                               argument="algorithm")
        self.last_metrics, self.last_w = metrics, w
        self.ergodic.add(w, self.monitor.releases(), self.monitor.stacked_releases())
        residual = metrics.get("disagreement", metrics.get("primal_residual", 0.0))
        step = self.algorithm.divergence_step(metrics)
        if self.divergence.diverging(w, step, residual) and not self.algorithm.converged(metrics, w):
            return row, "diverging"
        return row, self.algorithm.stop_reason(metrics, w)

    def _slices(self, w: np.ndarray) -> list[np.ndarray]:
        """Every agent's slice A_p w of the global vector, for its diagnostics: when every agent holds all of w, one
        read-only view of w for all of them (no copy per agent by indexing)."""
        if self.whole:
            view = w.view()
            view.flags.writeable = False
            return [view] * len(self.problem.layouts)
        return [w[layout.shared_global] for layout in self.problem.layouts]

    def status(self, stop: str) -> str:
        """``result.status`` of a run that ended with ``stop``: "converged" when the last round meets the method's
        tolerance ([`converged`][privcvx.algorithms.base.Algorithm.converged], public metrics only), else "max_rounds"
        (also for a run a callback stopped), or "diverging", "interrupted", "failed"."""
        if stop in ("diverging", "interrupted", "failed"):
            return stop
        if stop == "tolerance" or (self.last_metrics and self.algorithm.converged(self.last_metrics, self.last_w)):
            return "converged"
        return "max_rounds"

    def epsilon(self) -> float:
        """The worst-off agent's cumulative epsilon so far (tightest accountant but PLD, which is slow)."""
        if self.accounts is None:
            return 0.0
        return float(max(account.epsilon() for account in self.accounts))

    # ---- checkpoints --------------------------------------------------------------------------------
    def begin_checkpoint(self, path: str | os.PathLike, resume: str | os.PathLike | None,
                         saved: SavedRun | None, header: dict[str, Any]) -> None:
        """Open the checkpoint's logs: resuming into the same file, cut them to the committed round; else start
        them, with the records of the resumed run (if any). Temporary files of a killed write are removed.
        ``header``: the run's fingerprint, which every round's state file holds (as JSON text, written once)."""
        self.header = json.dumps(header)
        checkpoints.refuse_special(path, "checkpoint")
        checkpoints.remove_temporaries(path)
        same = resume is not None and os.path.abspath(resume) == os.path.abspath(path)
        files = (checkpoints.transcript_path(path), checkpoints.history_path(path))
        if same and saved is not None:
            self.logs = (checkpoints.Log(files[0], saved.state["logs"]["transcript"]),
                         checkpoints.Log(files[1], saved.state["logs"]["history"]))
        else:
            self.logs = (checkpoints.Log(files[0]), checkpoints.Log(files[1]))
            if saved is not None:
                self.logs[0].append(saved.transcript)
                self.logs[1].append(saved.history)
        self.committer = checkpoints.Committer(coalesce=not self.problem.data_local)
        self.committed = None if saved is None else saved.next_round

    def end_checkpoint(self, *, finished: bool = False) -> None:
        """Wait until the last round's checkpoint is on disk (raising its failure), then close the logs.
        ``finished``: the run ended after its last round's `commit` (not by a failure or Ctrl-C inside a round), so
        a last round whose state file `commit` deferred is committed now."""
        if self.committer is None or self.logs is None:
            return
        try:
            if finished and self.deferred is not None:
                self.commit(*self.deferred, deferrable=False)
            self.committer.close()
        finally:
            for log in self.logs:
                log.close()
            self.committer = self.logs = None

    def log(self, t: int, row: dict[str, Any] | None, sent: list[Message]) -> None:
        """Append round ``t``'s messages, history row and ledger entries to the checkpoint's logs. A ledger entry
        names its mechanism by index; a mechanism's first entry defines it (``"mechanisms"``), so that a record's
        size does not grow with the ledger."""
        assert self.logs is not None
        self.logs[0].append([encode_messages(sent)])
        new, events = [], []
        for i, mechanism, count, nominal in self.events:
            signature = mechanism.signature()  # what mechanisms compare and hash by, computed once
            index = self.mechanisms.get(signature)
            if index is None:
                index = self.mechanisms[signature] = len(self.mechanisms)
                new.append(mechanism.to_dict())
            events.append([i, index, count, nominal])
        self.logs[1].append([checkpoints.json_record({"round": t, "row": row, "mechanisms": new, "events": events})])
        self.events = []

    def commit(self, backend: Any, path: str | os.PathLike, t: int, sent: list[Message], elapsed: float, *,
               deferrable: bool = True) -> None:
        """Checkpoint round ``t``: the logs' new records, the hosts' shards (of factory-built agents), then the
        state file, whose rename commits the round (`checkpoints.Committer`: flushed and renamed in the background
        while the next rounds run). With shards, every round is committed, each waiting for the previous round's
        commit, so that shards of older rounds are deleted only once the state file naming newer ones is on disk.
        Without, a round is committed only when the commit thread is ready for it (`checkpoints.Committer.ready`:
        idle, and at most every `checkpoints.COMMIT_INTERVAL` seconds); another round only appends its log records
        (the file on disk lags by at most that and the commit in flight), and ``deferrable=False``
        (`end_checkpoint`) commits it."""
        assert self.logs is not None and self.committer is not None
        shards = not self.committer.coalesce  # factory-built agents (`begin_checkpoint`)
        if shards:
            self.committer.wait()  # the state file of self.committed is on disk
        if self.deferred is None or self.deferred[2] != t:
            self.log(t, self.rows[-1], sent)
        if deferrable and not self.committer.ready():
            self.deferred = (backend, path, t, sent, elapsed)
            self.committer.make_way()
            return
        self.deferred = None
        agents = backend.call("write_shards", t + 1, self.committed) if shards else backend.call("states")
        data = checkpoints.encode_state(self.header, {
            "next_round": t + 1, "elapsed": elapsed, "agents": agents,
            "coordinator": None if self.coordinator is None else self.coordinator.state_dict(),
            "monitor": self.monitor.state_dict(), "router": self._router_state(sent),
            "ergodic": self.ergodic.state_dict(), "divergence": self.divergence.state_dict(),
            "logs": {"transcript": self.logs[0].position, "history": self.logs[1].position}})
        self.committer.submit(self.logs, path, data)
        self.committed = t + 1

    def _router_state(self, sent: list[Message]) -> dict[str, Any]:
        """The router's undelivered messages for the state file; those sent in the round (all of them, in a
        synchronous method) by their index in the round's transcript record (``"sent"``), not again."""
        state = self.router.state_dict()
        index = {id(message): i for i, message in enumerate(sent)}
        sent_as = [index.get(id(message)) for message in state["messages"]]
        return state if None in sent_as else {"receivers": state["receivers"], "sent": sent_as}

    @staticmethod
    def _router_loaded(state: dict[str, Any], saved: SavedRun) -> dict[str, Any]:
        """The inverse of `_router_state` (untrusted: an index out of the last record raises)."""
        if "sent" not in state:
            return state
        sent = checkpoints.read_messages(saved.transcript[-1])
        indices = [integer_field(i) for i in state["sent"]]
        if not all(0 <= i < len(sent) for i in indices):
            raise ValueError("the router names a message its round did not send")
        return {"receivers": state["receivers"], "messages": [sent[i] for i in indices]}

    def load(self, backend: Any, saved: SavedRun) -> tuple[int, float]:
        """Restore a checkpointed run; return the next round and the elapsed time."""
        state = saved.state
        try:
            mechanisms = []
            for record in saved.history:
                entry = checkpoints.read_json_record(record)
                mechanisms += [mechanism_from_dict(mechanism) for mechanism in entry["mechanisms"]]
                for i, index, count, nominal in entry["events"]:
                    if not 0 <= integer_field(index) < len(mechanisms):
                        raise ValueError(f"a ledger entry names mechanism {index} of {len(mechanisms)}")
                    self.ledgers[i].record(mechanisms[index], count, nominal=nominal)
                if entry["row"] is not None:
                    self.rows.append(dict(entry["row"]))
            self.mechanisms = {mechanism.signature(): index for index, mechanism in enumerate(mechanisms)}
            if len(self.rows) != saved.next_round - 1:
                raise ValueError(f"{len(self.rows)} history rows for a checkpoint of round {saved.next_round - 1}")
            if self.coordinator is not None:
                self.coordinator.load_state_dict(state["coordinator"])
            self.monitor.load_state_dict(state["monitor"])
            self.ergodic.load_state_dict(state["ergodic"])
            self.divergence.load_state_dict(state["divergence"])
            self.router.load_state_dict(self._router_loaded(state["router"], saved))
            elapsed = float(state["elapsed"])
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - an untrusted file: whatever fails, the checkpoint is damaged
            raise CheckpointError(f"the checkpoint's state is damaged: {type(exc).__name__}: {exc}",
                                  argument="resume") from None
        ledgers = [ledger.to_dict() for ledger in self.ledgers]
        if not isinstance(state["agents"], list) or len(state["agents"]) != len(ledgers):
            raise CheckpointError("the checkpoint's agent states are damaged", argument="resume")
        if self.problem.data_local:  # the hosts read their shards; the driver holds their digests
            backend.call_split("read_shards", list(zip(state["agents"], ledgers, strict=True)), saved.next_round)
        else:
            backend.call_split("load_states", list(zip(state["agents"], ledgers, strict=True)))
        self.accounts = self._accounts()
        self.transcript.append([message for record in saved.transcript
                                for message in checkpoints.read_messages(record)])
        return saved.next_round, elapsed

    def result(self, backend: Any, stop: str) -> Result:
        """The [`Result`][privcvx.results.Result] of the run so far (also for a run that failed part-way)."""
        reports = backend.call("reports")
        result = self._result(stop, reports, backend.call("outputs", self.released_only))
        result.info.update(local_solve_info(result.agents, reports))  # before summarize: one warning naming agents
        result.info.update(self.algorithm.summarize(reports))
        result.info["hosts"] = backend.call("usage")
        if not self.released_only:  # the whole local vectors: write them back, as cp.Problem.solve does
            self.problem.write_back(result.z)
        return result

    @property
    def released_only(self) -> bool:
        """Whether ``result.z`` holds only what the agents sent: in every private run (a release is all that leaves
        an agent, diagnostics or not) and in every run without diagnostics; else the whole local vectors."""
        return self.algorithm.private or not self.keep_diagnostics

    def lost_result(self) -> Result:
        """The result of a run whose hosts can no longer answer (a worker or an actor was lost): the history, the
        public state and the driver's ledgers; ``z`` is empty and ``info["hosts_lost"]`` is True."""
        result = self._result("failed", None, [])
        result.info["hosts_lost"] = True
        return result

    def _result(self, stop: str, reports: list[dict[str, Any]] | None, z: list[Any]) -> Result:
        gaps = [f"{c}_gap" for c in self.algorithm.objective_columns if c in self.columns] \
            if self.reference is not None else []
        history = pd.DataFrame(self.rows, columns=[*self.columns, *gaps, *self.problem.metrics])
        delta = self.algorithm.accounting_delta
        privacy = None
        if self.algorithm.private:
            table = privacy_table(self.ledgers, delta)
            privacy = table if reports is None else self.algorithm.privacy_report(table, reports)
            public = privacy["agent"].isin([a.name for a in self.problem.agents if holds_no_private_data(a)])
            privacy.loc[public & (privacy["epsilon_basic"] == 0.0), "calibration"] = PUBLIC_CALIBRATION
        diagnostics = [c for c in history.columns if c in self.algorithm.diagnostic_columns or c in gaps]
        info = {"stop": stop, "status": self.status(stop), "rounds": self.rounds,
                "algorithm": repr(self.algorithm), "topology": repr(self.topology),
                "seed": repr(self.seed), "noise": self.contexts[0].noise.path if self.algorithm.private else "none",
                "accounting_delta": delta, "diagnostics": diagnostics, "release_only": self.released_only,
                "layout": self.problem.layout_description(), "average": self.ergodic.summary(self.problem)}
        return Result(w=self.monitor.global_vector(), z=z, history=history, privacy=privacy,
                      reference=self.reference, agents=self.problem.names, info=info, transcript=self.transcript)


#: The privacy table's calibration of an agent that declared ``pc.Sensitivity(l1=0, l2=0)``: it holds no private
#: data, so its releases carry no noise and nothing is charged.
PUBLIC_CALIBRATION = "public (no private data)"


def run(problem: DistributedProblem, algorithm: Algorithm, topology: Topology | None = None, *, rounds: int = 100,
        seed: int | str | None = None, backend: str | Ray = "serial", progress: bool = False,
        callback: Callable[[dict[str, Any]], Any] | None = None, checkpoint: str | os.PathLike | None = None,
        resume: str | os.PathLike | None = None, reference: bool = False, diagnostics: bool = True,
        timeout: float | None = None, transcript: str = "memory",
        transcript_path: str | os.PathLike | None = None) -> Result:
    """Run ``algorithm`` on ``problem`` for ``rounds`` rounds; see `privcvx.DistributedProblem.solve`."""
    rounds = check_int(rounds, argument="rounds")
    diagnostics = check_scalar(diagnostics, argument="diagnostics", kind=bool)
    reference = check_scalar(reference, argument="reference", kind=bool)
    progress = check_scalar(progress, argument="progress", kind=bool)
    timeout = DEFAULT_TIMEOUT if timeout is None else check_scalar(timeout, argument="timeout", kind=float, low=0.0,
                                                                   closed="neither")
    transcript = check_scalar(transcript, argument="transcript", choices=TRANSCRIPT_MODES)
    if transcript_path is not None and (not isinstance(transcript_path, str | os.PathLike)
                                        or not os.fspath(transcript_path)):
        raise ParameterError(f"must be a file path, got {transcript_path!r}", argument="transcript_path")
    if transcript == "none" and (checkpoint is not None or resume is not None):
        raise ParameterError("a checkpoint keeps every message (its transcript file): use transcript='memory' or "
                             "'disk' with checkpoint= or resume=", argument="transcript")
    if not isinstance(algorithm, Algorithm):
        raise ParameterError(f"must be a privcvx algorithm (pc.algorithms.*), got {algorithm!r}", argument="algorithm")
    for argument, path in (("checkpoint", checkpoint), ("resume", resume)):
        if path is not None and (not isinstance(path, str | os.PathLike) or not os.fspath(path)):
            raise ParameterError(f"must be a file path, got {path!r}", argument=argument)
    if problem.data_local and (checkpoint is not None or resume is not None):
        missing = [spec.name for spec in problem.agents if spec.shard is None]
        if missing:
            raise ParameterError(f"a problem of factory-built agents keeps each agent's state on its host: give "
                                 f"every pc.problem.AgentSpec a shard path (missing: {missing[:5]})",
                                 argument="checkpoint" if checkpoint is not None else "resume")
    if callback is not None and not callable(callback):
        raise ParameterError(f"must be callable (row -> bool or None), got {callback!r}", argument="callback")
    if checkpoint is not None and not os.path.isdir(os.path.dirname(os.path.abspath(checkpoint))):
        raise ParameterError(f"the folder of {os.fspath(checkpoint)!r} does not exist", argument="checkpoint")
    topology = algorithm.topology_for(problem) if topology is None else topology
    if not isinstance(topology, Topology):
        raise ParameterError(f"must be a pc.Topology, got {topology!r}", argument="topology")
    topology = topology.bind(problem.names)
    algorithm.require_convexity(problem)
    algorithm = algorithm.prepare(problem, topology, rounds)
    seed = resolve_seed(seed, algorithm.private)
    if checkpoint is not None and algorithm.private and seed == "secure":
        raise PrivacyError("a private run with secure noise cannot be checkpointed: its checkpoint would hold the "
                           "agents' private iterates and could never be resumed (see resume=). Run without "
                           "checkpoint=, or with a secret integer seed (then the checkpoint is as secret as the "
                           "data)", argument="checkpoint")
    if resume is not None and algorithm.private and seed == "secure":
        raise PrivacyError("a private run with secure noise cannot be resumed: the noise of the interrupted round "
                           "cannot be drawn again, and its release may already have been seen, so a new draw would "
                           "release the round twice outside the ledger. Restart the run, or use a secret integer "
                           "seed (its noise stream is in the checkpoint, which is then as secret as the data)",
                           argument="resume")
    header = checkpoints.fingerprint(problem, algorithm, topology, seed, rounds=rounds, diagnostics=diagnostics)
    saved = read_checkpoint(resume, header, rounds) if resume is not None else None
    run_ = Run(problem, algorithm, topology, rounds=rounds, seed=seed, diagnostics=diagnostics,
               transcript=make_transcript(transcript, transcript_path))
    try:
        result = _run_rounds(run_, backend, timeout, saved, checkpoint=checkpoint, resume=resume, header=header,
                             reference=reference, progress=progress, callback=callback)
    finally:
        if isinstance(run_.transcript, TranscriptFile):
            run_.transcript.close()
    if result.status in ("max_rounds", "diverging"):
        last = f"round {len(result.history)}" if len(result.history) else "no round"
        warnings.warn(f"{type(algorithm).__name__} ended {result.status!r} at {last} of {rounds}: "
                      + ("the iterates grow without bound (is the problem bounded below?)"
                         if result.status == "diverging" else
                         "the tolerance is not met; result.w is the last iterate (more rounds, or see "
                         "result.average() and docs/tuning.md)"), ConvergenceWarning, stacklevel=3)
    return result


def _run_rounds(run_: Run, backend: str | Ray, timeout: float, saved: SavedRun | None, *,
                checkpoint: str | os.PathLike | None,
                resume: str | os.PathLike | None, header: dict[str, Any], reference: bool, progress: bool,
                callback: Callable[[dict[str, Any]], Any] | None) -> Result:
    """The rounds of `run` on its backend. Ctrl-C ends the run with status "interrupted" and its history (a
    second Ctrl-C while the result is gathered is ignored); any other failure raises `RunFailed` with it."""
    problem, algorithm, rounds = run_.problem, run_.algorithm, run_.rounds
    shield = contextlib.ExitStack()  # after a Ctrl-C, until the backend is closed: a second one is ignored
    with shield, make_backend(backend, algorithm, problem, run_.contexts, timeout=timeout) as hosts:
        start_round, elapsed = 1, 0.0
        if saved is not None:
            start_round, elapsed = run_.load(hosts, saved)
        if checkpoint is not None:
            run_.begin_checkpoint(checkpoint, resume, saved, header)
        if saved is None:
            run_.start(hosts)
        if reference:
            run_.reference = problem.solve_centralized()
        stop = "rounds"
        bar = _progress(progress, rounds, start_round)
        t0 = time.perf_counter() - elapsed
        try:
            shield.enter_context(frozen_heap())  # until the result is built
            for t in range(start_round, rounds + 1):
                sent = run_.round(hosts, t)
                elapsed = time.perf_counter() - t0
                row, reason = run_.row(hosts, t, sent, elapsed)
                run_.rows.append(row)
                if bar is not None:
                    bar.update(1)
                if checkpoint is not None:
                    run_.commit(hosts, checkpoint, t, sent, elapsed)
                if callback is not None and callback(row) is False:
                    reason = "callback"
                if reason is not None:
                    stop = reason
                    break
            run_.end_checkpoint(finished=True)  # the last round's state file is on disk (a failure is a RunFailed)
        except KeyboardInterrupt:
            shield.enter_context(sigint_ignored())
            stop = "interrupted"
            hosts.interrupted = True
        except Exception as exc:
            shield.enter_context(sigint_ignored())
            failed_round = run_.rows[-1]["round"] + 1 if run_.rows else start_round
            partial = _partial_result(run_, hosts, "failed")
            raise RunFailed(f"the run failed in round {failed_round}: {exc}", cause=exc,
                            result=partial, agent=getattr(exc, "agent", None)) from exc
        finally:
            if bar is not None:
                bar.close()
            with contextlib.suppress(Exception):  # after a failure or Ctrl-C: the last commit that succeeded stays
                run_.end_checkpoint()
        return _partial_result(run_, hosts, stop) if stop == "interrupted" else run_.result(hosts, stop)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The rounds with every object alive before them in the garbage collector's permanent generation
    (``gc.freeze``), moved back to the oldest generation when they end (``gc.unfreeze``).

    A round allocates a few objects per agent that outlive it (its messages, kept by the transcript), so the
    collector's full collections come every so many rounds, at a rate that grows with the number of agents; each
    scanned the whole heap, which the agents' compiled problems make grow with it too: seconds per round grew with
    the square of the number of agents (docs/performance.md, "Scale"). Frozen, the heap of before the run is not
    scanned, and a full collection costs what the run allocated. Nothing is collected less: an object of before the
    run that becomes cyclic garbage is collected after the run. A caller that froze objects itself, or disabled the
    collector, is left as it is."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _partial_result(run_: Run, hosts: Any, stop: str) -> Result:
    """The result of a run that ended early: from the hosts, or, when they cannot answer (a worker or an actor was
    lost, or timed out), from the driver's state alone (`Run.lost_result`)."""
    try:
        return run_.result(hosts, stop)
    except Exception:  # noqa: BLE001 - a lost host cannot report; the run's own failure is what is raised
        result = run_.lost_result()
        result.info.update(stop=stop, status=run_.status(stop))
        return result


def resolve_seed(seed: int | str | None, private: bool) -> int | str | None:
    """The run's seed: None means OS entropy ("secure") under privacy; an integer under privacy warns.

    Without privacy no noise is drawn and None stays None.
    """
    if seed is None:
        return "secure" if private else None
    if private and not isinstance(seed, str):
        warnings.warn(f"seed={seed!r}: the noise of this private run is reproducible by anyone who knows the seed, "
                      "so it protects nothing against them. Use it for research runs only; leave seed=None (OS "
                      "entropy) for a real release", ReproducibleNoiseWarning, stacklevel=4)
    return seed


def _progress(enabled: bool, total: int, start: int) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start - 1, desc="rounds", unit="round")

