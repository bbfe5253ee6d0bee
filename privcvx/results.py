"""Results of a run: final vectors, the per-round history, the privacy table; saving and plots."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcvx.errors import ParameterError
from privcvx.messages import Transcript

#: History columns that are not plotted by default.
UNPLOTTED_COLUMNS = ("round", "time_s", "epsilon", "rho", "eta", "step")
#: History columns of wall-clock time. A round's time depends on the private data (solver iterations, gradient
#: work), so runs with ``diagnostics=False`` leave them out, as the backends leave out the agents' step times.
TIMING_COLUMNS = ("time_s",)


@dataclass
class Result:
    """What ``problem.solve()`` returns.

    ``w`` is the final global vector (the server's, or the average of the agents' last releases for a
    decentralized method), ``z`` each agent's last release: in a private run, or a run with
    ``diagnostics=False`` (``info["release_only"]``), exactly the values the agent last sent; otherwise its
    whole local vector. ``history`` has one row per round (the algorithm's columns, see docs/algorithms.md;
    no `TIMING_COLUMNS` with ``diagnostics=False``), ``privacy`` one row per agent (``None``
    without privacy), ``reference`` the centralized solution when one was computed, ``transcript``
    every message of the run ([`Transcript`][privcvx.messages.Transcript]), and ``info``: how the run ended
    (``info["stop"]``: "rounds", "tolerance", "callback", "diverging", "interrupted" or "failed"; and
    ``info["status"]``, read as `status`), the algorithm and
    topology, and ``info["diagnostics"]``, the history columns computed from private data (not
    protected by DP, research runs only). Algorithm 1 adds, per agent, its local projection's kind and
    solver counters (``info["projection"]``).
    """

    w: np.ndarray
    z: list[np.ndarray]
    history: pd.DataFrame
    privacy: pd.DataFrame | None = None
    reference: Any = None
    agents: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    transcript: Transcript = field(default_factory=Transcript)

    @property
    def status(self) -> str:
        """How the run ended, computed from the public metrics alone (releases only, under privacy):

        * ``"converged"``: the last round meets the method's tolerance (``tol``, or its default when not given;
          [`converged`][privcvx.algorithms.base.Algorithm.converged]);
        * ``"max_rounds"``: the rounds ran out (or a callback stopped the run) before that;
        * ``"diverging"``: the iterates grow without bound, and the run stopped early
          ([`Divergence`][privcvx.runtime.loop.Divergence]);
        * ``"failed"``: the partial result of [`RunFailed`][privcvx.errors.RunFailed]; ``"interrupted"``: Ctrl-C.

        A run that ends "max_rounds" or "diverging" warns with `ConvergenceWarning`.
        """
        return str(self.info.get("status", "max_rounds"))

    def average(self) -> Result:
        """The running (ergodic) average of the released iterates over every round, as a `Result`.

        ``w`` is (1/T) sum_t w^t of the public global vectors, ``z`` each agent's average release (empty when the
        method's monitor keeps no releases), and ``history`` one row (round T) with the metrics of the average:
        ``consensus_residual`` sqrt(sum_p ||A_p w_bar - z_bar_p||^2) when each release is the agent's shared
        entries, and the problem's metrics at w_bar. Computed during the run from each round's messages, the
        values the transcript holds: post-processing, so it costs no privacy (``privacy`` is this run's table).
        The convergence theorems of several papers bound this average, not the last iterate (docs/algorithms.md,
        "Last iterate or average").
        """
        average = self.info.get("average") or {}
        if not average:
            raise ParameterError("this result has no round to average (or was saved before result.average())",
                                 argument="result")
        history = pd.DataFrame([{"round": average["rounds"], **average["metrics"]}])
        z = [np.asarray(z_p, dtype=float) for z_p in average["z"]] if average["z"] is not None else []
        return Result(w=np.asarray(average["w"], dtype=float), z=z, history=history, privacy=self.privacy,
                      reference=self.reference, agents=list(self.agents),
                      info={**self.info, "iterate": "ergodic average", "release_only": True},
                      transcript=self.transcript)

    def summary(self, file: Any = None) -> str:
        """Print (to ``file``, default stdout) and return the run's final metrics and its privacy table, in full.

        The accountants' valid bounds are kept apart from ``epsilon_moments``, the paper's Thm. 4.9 as printed,
        which is not a bound (the erratum in docs/privacy.md).
        """
        lines = [f"{self.info.get('algorithm', 'run')}: {len(self.history)} rounds, status {self.status} (stopped by "
                 f"{self.info.get('stop', '?')}); noise: {self.info.get('noise', 'none')}"]
        if len(self.history):
            last = self.history.iloc[-1]
            diagnostics = set(self.info.get("diagnostics", []))
            for column in self.history.columns:
                if column != "round" and column not in TIMING_COLUMNS:
                    label = " (diagnostic: computed from private data)" if column in diagnostics else ""
                    lines.append(f"  {column:>22} = {float(last[column]):.6g}{label}")
            lines += [f"  {column:>22} = {float(last[column]):.3g}" for column in TIMING_COLUMNS
                      if column in self.history.columns]
        if self.privacy is not None:
            valid = self.privacy.drop(columns=["epsilon_moments"])
            with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
                lines += ["privacy, per agent (valid bounds; each epsilon holds at its delta column):",
                          valid.to_string(index=False),
                          "the paper's Thm. 4.9 as printed, NOT a bound (erratum in docs/privacy.md):",
                          self.privacy[["agent", "epsilon_moments"]].to_string(index=False)]
        text = "\n".join(lines)
        print(text, file=file)
        return text

    def w_of(self, key: Any) -> np.ndarray:
        """The global vector's entries of one shared key, shaped like the key."""
        for name, shape, offset in self.info.get("layout", {}).get("keys", []):
            if name == str(key):
                size = int(np.prod(shape, dtype=int))
                return self.w[offset:offset + size].reshape(shape, order="F")
        raise ParameterError(f"no shared key {key!r} in this result", argument="key")

    def value_of(self, agent: str, variable: Any) -> np.ndarray:
        """The value of one of ``agent``'s variables (a ``cp.Variable`` or its name) in its last release.

        Needs the whole local vectors: a private run, or one with ``diagnostics=False``, keeps only what agents sent.
        """
        name = variable.name() if hasattr(variable, "name") and callable(variable.name) else str(variable)
        if self.info.get("release_only"):
            raise ParameterError("this run kept only what agents sent (a private run, or diagnostics=False): "
                                 "result.z holds their last releases", argument="variable")
        described = self.info.get("layout", {}).get("agents", {})
        if agent not in described:
            raise ParameterError(f"no agent {agent!r} in this result", argument="agent")
        for variable_name, shape, offset in described[agent]:
            if variable_name == name:
                size = int(np.prod(shape, dtype=int))
                return self.z[self.agents.index(agent)][offset:offset + size].reshape(shape, order="F")
        raise ParameterError(f"agent {agent!r} has no variable {name!r}", agent=agent, argument="variable")

    def save(self, path: str | os.PathLike, *, include_seed: bool = False) -> None:
        """Write everything to one ``.npz`` file, owner-only (mode 0600, never through a symlink); floats are
        stored exactly. The seed of a private run regenerates its noise: it is written as ``"withheld"`` unless
        ``include_seed=True``."""
        arrays: dict[str, np.ndarray] = {"w": self.w}
        for i, z in enumerate(self.z):
            arrays[f"z{i}"] = z
        for column in self.history.columns:
            arrays[f"history:{column}"] = self.history[column].to_numpy()
        info = self.info if include_seed is True or self.privacy is None else {**self.info, "seed": "withheld"}
        meta: dict[str, Any] = {"agents": self.agents, "info": info, "history": list(self.history.columns),
                                "z": len(self.z)}
        if self.privacy is not None:
            meta["privacy"] = json.loads(self.privacy.to_json(orient="split", double_precision=15))
            for column in self.privacy.columns:  # numbers bit for bit beside the JSON; text (agent, calibration) in it
                if pd.api.types.is_numeric_dtype(self.privacy[column]):
                    arrays[f"privacy:{column}"] = self.privacy[column].to_numpy()
        if self.reference is not None:
            arrays["reference:w"] = self.reference.w
            meta["reference_value"] = self.reference.value
            meta["reference_status"] = self.reference.status
            for i, z in enumerate(self.reference.z):
                arrays[f"reference:z{i}"] = z
        meta["transcript"], messages = self.transcript.to_arrays()
        arrays.update({f"transcript:{key}": value for key, value in messages.items()})
        arrays["meta"] = np.array(json.dumps(meta, default=str))
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | os.O_CLOEXEC, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                    raise OSError(f"{os.fspath(path)!r} is not a regular file")
                os.fchmod(descriptor, 0o600)
                np.savez(handle, **arrays)
        except OSError as exc:
            raise ParameterError(f"cannot write {os.fspath(path)!r}: {exc}", argument="path") from exc

    def plot(self, columns: tuple[str, ...] | None = None, path: str | os.PathLike | None = None,
             ax: Any = None) -> Any:
        """One panel per history column against the round; returns the figure (saved to ``path`` when given).

        ``columns`` defaults to every metric the algorithm recorded (the settings and the clock left out).
        ``ax``: a sequence of one matplotlib axis per column to draw on (default: a new figure). The style is
        `privcvx.plotting`'s: a log axis where the values span a decade, zeros left out of it and counted
        in the panel, and a signed column (``objective_gap``) drawn as its absolute value; the centralized
        optimum as a reference line on ``objective`` when ``reference=True`` was given; the cumulative epsilon
        spent in the title under privacy. Library code never changes the matplotlib backend.
        """
        from privcvx import plotting

        if columns is None:
            columns = tuple(c for c in self.history.columns if c not in UNPLOTTED_COLUMNS)
        unknown = [c for c in columns if c not in self.history.columns]
        if unknown:
            raise ParameterError(f"no history column {unknown[0]!r}; the history has {list(self.history.columns)}",
                                 argument="columns")
        if ax is None:
            width = min(len(columns), 4)
            fig, grid = plotting.new_figure(-(-len(columns) // width), width)
            axes = list(grid.flat)[:len(columns)]
            for unused in list(grid.flat)[len(columns):]:
                unused.set_visible(False)
        else:
            axes = list(np.atleast_1d(ax))
            if len(axes) != len(columns):
                raise ParameterError(f"needs one axis per column ({len(columns)}), got {len(axes)}", argument="ax")
            fig = axes[0].figure
        rounds = self.history["round"].to_numpy()
        diagnostics = set(self.info.get("diagnostics", []))
        for panel, column in zip(axes, columns, strict=True):
            values = self.history[column].to_numpy(dtype=float)
            signed = bool(np.any(values < 0))  # e.g. objective_gap: its size is what a log axis can show
            values = np.abs(values) if signed else values
            scale = plotting.set_scale(panel, values)
            plotting.draw_curve(panel, rounds, values, label=self.info.get("algorithm", "run"),
                                color=plotting.COLORS["ObjG"], log=scale == "log")
            if column == "objective" and self.reference is not None:
                plotting.reference_line(panel, self.reference.value)
            panel.set_title((f"|{column}|" if signed else column) + (" (diagnostic)" if column in diagnostics else ""),
                            fontsize=9)
            panel.set_xlabel("round", fontsize=8)
        if ax is None:
            spent = self.history["epsilon"].iloc[-1] if "epsilon" in self.history and self.privacy is not None \
                else None
            fig.suptitle(f"{self.info.get('algorithm', 'run')}, {len(rounds)} rounds"
                         + (f", epsilon spent {spent:.3g} (worst agent)" if spent is not None else ""), fontsize=10)
            plotting.figure_legend(fig, axes)
        if path is not None:
            plotting.save(fig, path)
        return fig


def load_result(path: str | os.PathLike) -> Result:
    """Read a result written by `Result.save` (nothing in the file is executed: no pickle)."""
    try:
        return _read_result(path)
    except FileNotFoundError:
        raise ParameterError(f"no result file at {os.fspath(path)!r}", argument="path") from None
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ParameterError(f"{os.fspath(path)!r} is not a result written by Result.save: {exc}",
                             argument="path") from exc


def _read_result(path: str | os.PathLike) -> Result:
    from privcvx.reference import CentralizedSolution

    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        history = pd.DataFrame({c: data[f"history:{c}"] for c in meta["history"]}, columns=meta["history"])
        privacy = None
        if "privacy" in meta:
            privacy = pd.DataFrame(meta["privacy"]["data"], columns=meta["privacy"]["columns"])
            for column in privacy.columns:
                if f"privacy:{column}" in data:
                    privacy[column] = data[f"privacy:{column}"]
        reference = None
        if "reference_value" in meta:
            reference = CentralizedSolution(value=meta["reference_value"], w=data["reference:w"],
                                            z=[data[f"reference:z{i}"] for i in range(meta["z"])],
                                            status=meta["reference_status"])
        prefix = "transcript:"
        transcript = Transcript.from_arrays(meta["transcript"], {key[len(prefix):]: data[key] for key in data.files
                                                                  if key.startswith(prefix)})
        return Result(w=data["w"], z=[data[f"z{i}"] for i in range(meta["z"])], history=history,
                      privacy=privacy, reference=reference, agents=meta["agents"], info=meta["info"],
                      transcript=transcript)
