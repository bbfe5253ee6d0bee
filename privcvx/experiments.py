"""Experiment runner: ObjPert against OutPert over a grid of settings (Sec. 6 of the paper).

An `Experiment` is a problem builder plus a grid of `Setting` s (method,
calibration, epsilon, E, seed). `run_experiment` runs every setting with
`privcvx.DistributedProblem.solve` (serially or in a process pool), and writes

* ``runs.csv``: one row per setting and round, columns `RUN_COLUMNS` plus one per problem metric;
* ``summary.csv``: per setting (over seeds) the mean, std, min and max of the final-round values,
  plus the worst W_p violation and the mean noise magnitude over all rounds and seeds;
* ``references.csv``: the non-private run at each E and the centralized optimum (`references`);
* ``figure.png``: one column per epsilon, rows `FIGURE_ROWS` and the problem metrics, with the
  references as lines (`plot`).

Methods (Sec. 6): ObjG / ObjL are ObjPert (Eq. (10)) with the Gaussian / Laplace mechanism
(Thm. 4.8), OutG / OutL are OutPert (Eq. (12)). The calibration of an OutPert method is
``"derived"`` (from the gradient sensitivity through the step's metric, see
`privcvx.privacy.perturbation.derived_output_sensitivity`: valid when the gradient sensitivity is)
or ``"paper"`` (the explicit output sensitivity every agent declares, ``agent.declared.output_sensitivity``, beta
in Sec. 6.1.1; a nominal one warns ``pc.NominalPrivacyWarning``, run only on request). An ObjPert method always
uses the agents' gradient sensitivity (Eqs. (18), (21)).

This module never imports ``powerflow`` or ``problems`` (they depend on privcvx, not the
reverse): the builder is a picklable callable handed in by the caller, e.g. the command line.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import signal
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcvx.compare import final_round_stats
from privcvx.errors import (
    ParameterError,
    PrivacyError,
    ReproducibleNoiseWarning,
    RunFailed,
    check_int,
    require_positive,
)
from privcvx.privacy.mechanisms import Gaussian, Laplace, Mechanism, check_delta, check_epsilon
from privcvx.privacy.perturbation import ObjectivePerturbation, OutputPerturbation, Perturbation
from privcvx.problem import DistributedProblem
from privcvx.runtime.backends import sigint_ignored
from privcvx.schedules import Schedule, inverse_sqrt, paper_rho

#: The columns of runs.csv, in order; problem metrics (e.g. ``test_error``) follow them.
RUN_COLUMNS = ["method", "calibration", "epsilon", "local_updates", "seed", "round", "objective",
               "consensus_residual", "max_violation", "noise_magnitude", "epsilon_spent"]
SETTING_COLUMNS = ["method", "calibration", "epsilon", "local_updates"]
#: Final-round values summarized over seeds in summary.csv.
VALUE_COLUMNS = ["objective", "consensus_residual", "max_violation", "noise_magnitude", "epsilon_spent"]
#: perturbation kind and mechanism of each method of Sec. 6.
METHODS = {"ObjG": ("objective", "gaussian"), "ObjL": ("objective", "laplace"),
           "OutG": ("output", "gaussian"), "OutL": ("output", "laplace")}
CALIBRATIONS = ("paper", "derived")


@dataclass(frozen=True)
class Setting:
    """One run: a method with its calibration, the per-update epsilon, E and the noise seed."""

    method: str
    calibration: str
    epsilon: float
    local_updates: int
    seed: int


@dataclass(frozen=True)
class RhoSpec:
    """rho^t: a constant (Sec. 6.1.1, rho = 100) or the paper's schedule Eq. (73) (Sec. 6.2.1)."""

    constant: float | None = 100.0
    c1: float = 2.0
    c2: float = 5.0
    period: int = 10_000

    def schedule(self, epsilon: float) -> float | Schedule:
        """rho for a run at per-update ``epsilon``; Eq. (73) depends on it through c2 / epsilon."""
        if self.constant is not None:
            return self.constant
        return paper_rho(self.c1, self.c2, epsilon, self.period)


@dataclass
class Experiment:
    """A grid of settings on one problem.

    ``builder(**builder_args)`` returns the ``pc.DistributedProblem``; it must be a module-level
    function so that worker processes can rebuild the problem. ``kind`` ("powerflow" or
    "logistic") names it in the progress bar. ``delta`` is the Gaussian mechanism's delta.
    """

    kind: str
    builder: Callable[..., DistributedProblem]
    builder_args: dict[str, Any]
    settings: list[Setting]
    rounds: int
    delta: float
    rho: RhoSpec = field(default_factory=RhoSpec)
    title: str = ""


def parse_method(text: str) -> tuple[str, str | None]:
    """``"OutG"`` -> ("OutG", None), ``"OutG:derived"`` -> ("OutG", "derived")."""
    name, _, calibration = text.partition(":")
    if name not in METHODS:
        raise ParameterError(f"unknown method {name!r}; expected one of {sorted(METHODS)}",
                             argument="methods")
    if calibration and calibration not in CALIBRATIONS:
        raise ParameterError(f"unknown calibration {calibration!r} in {text!r}; expected {CALIBRATIONS}",
                             argument="methods")
    if calibration == "derived" and METHODS[name][0] == "objective":
        raise ParameterError(f"{text!r}: ObjPert always uses the gradient sensitivity; only OutPert methods "
                             "take a calibration", argument="methods")
    return name, calibration or None


def make_settings(methods: Sequence[str], epsilons: Sequence[float], local_updates: Sequence[int],
                  seeds: int, objective_label: str, output_default: str) -> list[Setting]:
    """The full grid; ObjPert is labelled ``objective_label``, OutPert ``output_default`` unless given."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ParameterError(f"must be an integer >= 1, got {seeds!r}", argument="seeds")
    if not methods or not epsilons or not local_updates:
        raise ParameterError("methods, epsilons and local_updates must each be non-empty",
                             argument="settings")
    for e in local_updates:
        if isinstance(e, bool) or not isinstance(e, int) or e < 1:
            raise ParameterError(f"must be integers >= 1, got {e!r}", argument="local_updates")
    gaussian = [text for text in methods if METHODS[parse_method(text)[0]][1] == "gaussian"]
    if gaussian and max(epsilons) > 1.0:
        raise ParameterError(f"{', '.join(gaussian)} use the classic Gaussian calibration of Thm. 4.8(ii), valid "
                             f"only for a per-update epsilon <= 1, got {max(epsilons)!r}: keep the epsilons <= 1, "
                             "or compare only the Laplace methods (ObjL, OutL) at larger ones", argument="epsilons")
    settings = []
    for text in methods:
        name, calibration = parse_method(text)
        label = objective_label if METHODS[name][0] == "objective" else calibration or output_default
        for epsilon in epsilons:
            for e in local_updates:
                settings.extend(Setting(name, label, float(epsilon), int(e), seed) for seed in range(seeds))
    return settings


def mechanism(kind: str, epsilon: float, delta: float) -> Mechanism:
    """Thm. 4.8: Laplace (epsilon, 0) or Gaussian (epsilon, delta) per local update."""
    return Gaussian(epsilon, delta) if kind == "gaussian" else Laplace(epsilon)


def perturbation(problem: DistributedProblem, setting: Setting, delta: float) -> Perturbation:
    """The privacy argument of ``solve`` for ``setting`` (Sec. 6.1.1 / 6.2.1)."""
    kind, mechanism_kind = METHODS[setting.method]
    noise = mechanism(mechanism_kind, setting.epsilon, delta)
    if kind == "objective":
        return ObjectivePerturbation(noise)
    if setting.calibration == "derived":
        return OutputPerturbation(noise, sensitivity="derived")
    declared = problem.declared
    for name, record in declared.items():
        if record.output_sensitivity is None:
            raise PrivacyError(f"{setting.method} with calibration {setting.calibration!r} needs the agent's "
                               'declared output sensitivity (pc.Declared(output_sensitivity=...)), which it does not '
                               'declare; use "derived"', agent=name, argument="output_sensitivity")
    explicit = {record.output_sensitivity for record in declared.values()}
    if len(explicit) > 1:
        raise PrivacyError(f"{setting.method} with calibration {setting.calibration!r} takes one output sensitivity "
                           f"for every agent; the agents declare {len(explicit)} different ones: use \"derived\"",
                           argument="output_sensitivity")
    return OutputPerturbation(noise, sensitivity=explicit.pop())


def run_setting(problem: DistributedProblem, experiment: Experiment, setting: Setting,
                on_round: Callable[[dict[str, Any]], Any] | None = None) -> tuple[pd.DataFrame, str]:
    """Run one setting; return its rows of runs.csv and how the run ended (``result.info["stop"]``)."""
    # eta and rho are always passed: the paper's eta^t = 1/sqrt(t) (Eq. (26a), Sec. 6.1.1 and 6.2.1),
    # not solve()'s own defaults. These are research runs: integer seeds (reproducible, seeded float noise,
    # so ReproducibleNoiseWarning is expected and silenced) and the diagnostic columns kept.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        result = problem.solve(rounds=experiment.rounds, local_updates=setting.local_updates,
                               rho=experiment.rho.schedule(setting.epsilon), eta=inverse_sqrt(),
                               privacy=perturbation(problem, setting, experiment.delta),
                               seed=setting.seed, callback=on_round, diagnostics=True)
    history = result.history
    metrics = list(problem.metrics)
    rows = pd.DataFrame({"method": setting.method, "calibration": setting.calibration,
                         "epsilon": setting.epsilon, "local_updates": setting.local_updates,
                         "seed": setting.seed, "round": history["round"].to_numpy(),
                         **{c: history[c].to_numpy() for c in VALUE_COLUMNS[:-1]},
                         "epsilon_spent": history["epsilon"].to_numpy(),
                         **{m: history[m].to_numpy() for m in metrics}})
    return rows, str(result.info.get("stop", "rounds"))


# Worker processes build the problem once (the builder may hold closures that do not pickle).
_WORKER: dict[str, Any] = {}


def _init_worker(experiment: Experiment) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent, which terminates the pool
    warnings.filterwarnings("ignore", message="Solution may be inaccurate")
    _WORKER["experiment"] = experiment
    _WORKER["problem"] = experiment.builder(**experiment.builder_args)


def _run_in_worker(setting: Setting) -> tuple[Setting, pd.DataFrame | None, str]:
    try:
        rows, stop = run_setting(_WORKER["problem"], _WORKER["experiment"], setting)
    except RunFailed as exc:
        return setting, None, f"failed: {exc}"
    return setting, rows, stop


@dataclass
class Outcome:
    """What `run_experiment` produced: the tables, the files, and what did not finish."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    files: list[Path]
    failed: list[tuple[Setting, str]]
    interrupted: bool
    completed: int


def validate(experiment: Experiment, workers: int = 1) -> None:
    """Check every setting of ``experiment`` before any run starts; errors name the option.

    The rounds, workers, delta, rho (constant, or c1, c2 and the period of Eq. (73)), and every
    method's mechanism at every epsilon (so an epsilon the Gaussian mechanism cannot calibrate is found
    here, not after the first runs).
    """
    check_int(experiment.rounds, argument="rounds")
    check_int(workers, argument="workers")
    spec = experiment.rho
    if spec.constant is not None:
        require_positive(spec.constant, argument="rho")
    else:
        require_positive(spec.c1, argument="c1")
        require_positive(spec.c2, argument="c2")
        check_int(spec.period, argument="period")
    check_delta(experiment.delta, argument="delta")
    for method, epsilon in {(s.method, s.epsilon) for s in experiment.settings}:
        check_epsilon(epsilon, argument="epsilons")
        mechanism(METHODS[method][1], epsilon, experiment.delta)


def run_experiment(experiment: Experiment, out: str | Path, *, workers: int = 1,
                   progress: bool = True) -> Outcome:
    """Run every setting, then write runs.csv, summary.csv and figure.png to ``out``.

    ``workers > 1`` runs settings in a process pool (settings are independent). A progress
    bar counts finished runs with an ETA; in serial mode a second bar counts rounds. On
    Ctrl-C the finished runs are kept and written, and ``Outcome.interrupted`` is True.
    """
    validate(experiment, workers)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Long runs (large E) first, so that the pool's last runs are short.
    order = sorted(experiment.settings, key=lambda s: -s.local_updates)
    finished: list[pd.DataFrame] = []
    failed: list[tuple[Setting, str]] = []
    interrupted = False
    from tqdm.auto import tqdm

    problem = experiment.builder(**experiment.builder_args)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Solution may be inaccurate")
        refs = references(experiment, problem)
    runs_bar = tqdm(total=len(order), desc=f"{experiment.title or experiment.kind} runs", unit="run",
                    disable=not progress, position=0)
    shield = contextlib.ExitStack()  # after a Ctrl-C, what finished is written even if Ctrl-C comes again
    try:
        if workers == 1:
            interrupted = _run_serial(problem, experiment, order, finished, failed, runs_bar, progress, shield)
        else:
            interrupted = _run_pool(experiment, order, finished, failed, runs_bar, workers, shield)
    finally:
        runs_bar.close()
    with shield:
        return _outputs(experiment, finished, failed, out, refs, interrupted)


def _outputs(experiment: Experiment, finished: list[pd.DataFrame], failed: list[tuple[Setting, str]], out: Path,
             refs: Any, interrupted: bool) -> Outcome:
    """Write runs.csv, summary.csv, the figure and failures.csv of the finished runs."""
    runs = pd.concat(finished, ignore_index=True) if finished else pd.DataFrame(columns=RUN_COLUMNS)
    runs = order_runs(runs)
    summary = summarize(runs)
    files = write_outputs(experiment, runs, summary, out, refs)
    if failed:
        failures = pd.DataFrame([{**s.__dict__, "error": err} for s, err in failed])
        failures.to_csv(out / "failures.csv", index=False)
        files.append(out / "failures.csv")
    return Outcome(runs=runs, summary=summary, files=files, failed=failed, interrupted=interrupted,
                   completed=len(finished))


def _run_serial(problem: DistributedProblem, experiment: Experiment, order: list[Setting],
                finished: list[pd.DataFrame], failed: list[tuple[Setting, str]], runs_bar: Any,
                progress: bool, shield: contextlib.ExitStack) -> bool:
    from tqdm.auto import tqdm

    for setting in order:
        rounds_bar = tqdm(total=experiment.rounds, desc=f"{setting.method} eps={setting.epsilon:g} "
                          f"E={setting.local_updates} seed={setting.seed}", unit="round", leave=False,
                          disable=not progress, position=1)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                rows, stop = run_setting(problem, experiment, setting, on_round=_ticker(rounds_bar))
        except RunFailed as exc:
            failed.append((setting, f"failed: {exc}"))
            continue
        except KeyboardInterrupt:  # raised outside the round loop, e.g. while setting up
            shield.enter_context(sigint_ignored())
            return True
        finally:
            rounds_bar.close()
        if stop == "interrupted":  # solve() caught Ctrl-C: drop the partial run, keep the finished ones
            shield.enter_context(sigint_ignored())
            return True
        finished.append(rows)
        runs_bar.update(1)
    return False


def _ticker(bar: Any) -> Callable[[dict[str, Any]], None]:
    """A ``solve`` callback that advances ``bar`` by one round and never stops the run."""

    def tick(_row: dict[str, Any]) -> None:
        bar.update(1)

    return tick


def _run_pool(experiment: Experiment, order: list[Setting], finished: list[pd.DataFrame],
              failed: list[tuple[Setting, str]], runs_bar: Any, workers: int, shield: contextlib.ExitStack) -> bool:
    pool = multiprocessing.get_context("spawn").Pool(min(workers, len(order)), initializer=_init_worker,
                                                     initargs=(experiment,))
    try:
        for setting, rows, stop in pool.imap_unordered(_run_in_worker, order):
            if rows is None:
                failed.append((setting, stop))
            else:
                finished.append(rows)
            runs_bar.update(1)
    except KeyboardInterrupt:
        shield.enter_context(sigint_ignored())
        pool.terminate()
        pool.join()
        return True
    pool.close()
    pool.join()
    return False


def order_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Sort runs.csv rows by setting, seed and round, with the fixed columns first."""
    if runs.empty:
        return runs
    metrics = [c for c in runs.columns if c not in RUN_COLUMNS]
    method_rank = runs["method"].map({m: i for i, m in enumerate(METHODS)})
    runs = runs.assign(_rank=method_rank).sort_values(["_rank", "calibration", "epsilon", "local_updates",
                                                        "seed", "round"])
    return runs[RUN_COLUMNS + metrics].reset_index(drop=True)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per setting: seeds, rounds, and mean/std/min/max over seeds of each final-round value.

    Also ``max_violation_worst`` (largest violation over all rounds and seeds) and
    ``noise_magnitude_avg`` (Eq. (29) averaged over all rounds and seeds).
    """
    values = VALUE_COLUMNS + [c for c in runs.columns if c not in RUN_COLUMNS]
    if runs.empty:
        return pd.DataFrame(columns=SETTING_COLUMNS + ["seeds", "rounds"])
    summary = final_round_stats(runs, SETTING_COLUMNS, values)
    everything = runs.groupby(SETTING_COLUMNS, sort=False)
    summary = summary.join(everything["max_violation"].max().rename("max_violation_worst"))
    summary = summary.join(everything["noise_magnitude"].mean().rename("noise_magnitude_avg"))
    return summary.reset_index()


def check_claims(summary: pd.DataFrame, tolerance: float = 1e-6) -> list[str]:
    """Two checks of Sec. 6.1.2 on summary.csv, as readable lines.

    (a) ObjPert's releases are feasible: max_violation_worst <= ``tolerance`` in every setting.
    (b) Table 1's order of noise, ObjG > OutG > ObjL > OutL, under the paper's calibration, for
        every (epsilon, E) where all four methods ran (by ``noise_magnitude_avg``).
    """
    lines = []
    objective = summary[summary["method"].isin(["ObjG", "ObjL"])]
    if not objective.empty:
        worst = float(objective["max_violation_worst"].max())
        verdict = "holds" if worst <= tolerance else "DOES NOT HOLD"
        lines.append(f"ObjPert max_violation <= {tolerance:g} in all {len(objective)} settings: {verdict} "
                     f"(worst {worst:.2e})")
    paper = summary[(summary["method"].isin(["ObjG", "ObjL"])) | (summary["calibration"] == "paper")]
    order = ["ObjG", "OutG", "ObjL", "OutL"]
    for (epsilon, e), group in paper.groupby(["epsilon", "local_updates"]):
        noise = group.set_index("method")["noise_magnitude_avg"]
        if not set(order) <= set(noise.index):
            continue
        ok = all(noise[a] > noise[b] for a, b in zip(order, order[1:], strict=False))
        shown = " > ".join(f"{m} {noise[m]:.3g}" for m in sorted(order, key=lambda m: -noise[m]))
        lines.append(f"noise order ObjG > OutG > ObjL > OutL at eps={epsilon:g}, E={e}: "
                     f"{'holds' if ok else 'DOES NOT HOLD'} ({shown})")
    return lines


def write_outputs(experiment: Experiment, runs: pd.DataFrame, summary: pd.DataFrame, out: Path,
                  refs: pd.DataFrame | None = None) -> list[Path]:
    """Write runs.csv, summary.csv, references.csv (when given) and figure.png (when there are runs)."""
    files = [out / "runs.csv", out / "summary.csv"]
    runs.to_csv(files[0], index=False)
    summary.to_csv(files[1], index=False)
    if refs is not None:
        files.append(out / "references.csv")
        refs.to_csv(files[-1], index=False)
    if not runs.empty:
        files.append(out / "figure.png")
        plot(runs, files[-1], title=experiment.title, refs=refs)
    return files


#: Rows of figure.png, top to bottom; problem metrics (e.g. ``test_error``) follow.
FIGURE_ROWS = {"objective": "objective", "max_violation": "max violation of W_p",
               "consensus_residual": "consensus residual", "noise_magnitude": "noise magnitude, Eq. (29)",
               "epsilon_spent": "epsilon spent (worst agent)"}
#: Rows on which the non-private run is drawn, and those with the centralized optimum as a line.
NON_PRIVATE_ROWS = ("objective", "max_violation", "consensus_residual")


def references(experiment: Experiment, problem: DistributedProblem) -> pd.DataFrame:
    """The reference lines of figure.png (``references.csv``).

    * ``non-private``: the run without noise at each E, with the same rounds, eta and rho (rho of Eq. (73)
      at the largest epsilon of the grid, where the schedule depends on epsilon);
    * ``centralized``: the optimum of `DistributedProblem.solve_centralized` (``round`` 0), with the
      problem metrics at w*.
    """
    centralized = problem.solve_centralized()
    rows = [pd.DataFrame({"reference": ["centralized"], "local_updates": [0], "round": [0],
                          "objective": [centralized.value],
                          **{m: [float(metric(centralized.w))] for m, metric in problem.metrics.items()}})]
    epsilon = max(s.epsilon for s in experiment.settings)
    for e in sorted({s.local_updates for s in experiment.settings}):
        history = problem.solve(rounds=experiment.rounds, local_updates=e, rho=experiment.rho.schedule(epsilon),
                                eta=inverse_sqrt()).history
        rows.append(pd.DataFrame({"reference": "non-private", "local_updates": e, "round": history["round"],
                                  **{c: history[c] for c in (*NON_PRIVATE_ROWS, *problem.metrics)}}))
    return pd.concat(rows, ignore_index=True)


def _curve(runs: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per round: mean, min and max over seeds of ``column``."""
    stats = runs.groupby("round")[column].agg(["mean", "min", "max"])
    return stats.index.to_numpy(), stats["mean"].to_numpy(), stats["min"].to_numpy(), stats["max"].to_numpy()


def draw_panel(ax: Any, runs: pd.DataFrame, column: str, refs: pd.DataFrame | None = None) -> None:
    """One panel of figure.png on ``ax``: ``column`` of every method (colour) and E (line style) in ``runs``.

    Lines are means over seeds and bands their min-max range; ``refs`` (from `references`) adds the
    non-private run in grey and the centralized optimum as a black dashed line where they apply.
    """
    from privcvx import plotting

    metric = column not in RUN_COLUMNS  # a problem metric (e.g. test_error): both references apply
    known = refs is not None and column in refs
    non_private = refs[refs["reference"] == "non-private"] if known and (column in NON_PRIVATE_ROWS or metric) \
        else None
    centralized = refs[refs["reference"] == "centralized"] if known and (column == "objective" or metric) else None
    updates = sorted(set(runs["local_updates"]) | (set(non_private["local_updates"]) if non_private is not None
                                                    else set()))
    drawn = [frame[column].to_numpy(dtype=float) for frame in (runs, non_private, centralized) if frame is not None]
    log = plotting.set_scale(ax, np.concatenate(drawn)) == "log"
    for (method, calibration, e), group in runs.groupby(["method", "calibration", "local_updates"], sort=False):
        rounds, mean, low, high = _curve(group, column)
        label = plotting.method_label(method, calibration)
        several = group["seed"].nunique() > 1
        plotting.draw_curve(ax, rounds, mean, label=label, color=plotting.COLORS[label],
                            style=plotting.line_style(e, updates), low=low if several else None,
                            high=high if several else None, log=log)
    if non_private is not None:
        for e, group in non_private.groupby("local_updates"):
            plotting.draw_curve(ax, group["round"], group[column], label="non-private",
                                color=plotting.COLORS["non-private"], style=plotting.line_style(e, updates), log=log,
                                behind=True)
    if centralized is not None:
        plotting.reference_line(ax, float(centralized[column].iloc[0]))


def plot(runs: pd.DataFrame, path: str | Path, title: str = "", refs: pd.DataFrame | None = None) -> None:
    """figure.png: one column per epsilon; rows `FIGURE_ROWS`, then the problem metrics.

    Colour is the method, line style the number of local updates E ([`privcvx.plotting`][privcvx.plotting]); the
    non-private run (grey) and the centralized optimum (black, dashed) are the references; the column
    titles give the per-update epsilon, and the row ``epsilon spent`` the cumulative epsilon of the
    worst agent after each round (the tightest valid accountant; ObjG and OutG spend the same and overlap).
    """
    from privcvx import plotting

    runs = order_runs(runs)
    epsilons = sorted(runs["epsilon"].unique())
    rows = {**FIGURE_ROWS, **{c: c.replace("_", " ") for c in runs.columns if c not in RUN_COLUMNS}}
    fig, axes = plotting.new_figure(len(rows), len(epsilons))
    for j, epsilon in enumerate(epsilons):
        at = runs[runs["epsilon"] == epsilon]
        for i, (column, label) in enumerate(rows.items()):
            draw_panel(axes[i][j], at, column, refs)
            if j == 0:
                axes[i][j].set_ylabel(label, fontsize=8)
        axes[0][j].set_title(f"epsilon = {epsilon:g} per update", fontsize=9)
        axes[-1][j].set_xlabel("round", fontsize=8)
    plotting.figure_legend(fig, axes, sorted(runs["local_updates"].unique()))
    if title:
        fig.suptitle(title, fontsize=10)
    plotting.save(fig, path)


def summary_table(summary: pd.DataFrame, columns: Sequence[str] = ("objective", "consensus_residual",
                                                                   "max_violation_worst",
                                                                   "noise_magnitude_avg")) -> str:
    """A Markdown table of summary.csv: final values as mean +- std over seeds."""
    header = ["method", "calibration", "eps", "E"] + list(columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in summary.iterrows():
        cells = [row["method"], row["calibration"], f"{row['epsilon']:g}", str(int(row["local_updates"]))]
        for column in columns:
            if f"{column}_mean" in row:
                std = row[f"{column}_std"]
                spread = "" if isinstance(std, float) and math.isnan(std) else f" ± {std:.2g}"
                cells.append(f"{row[f'{column}_mean']:.3g}{spread}")
            else:
                cells.append(f"{row[column]:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
