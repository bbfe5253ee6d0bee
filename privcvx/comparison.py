"""`pc.compare`: any methods on one problem, at the same total privacy.

A `Study` names a problem builder, the methods (`Method`: any `privcvx.algorithms` class with its settings and a grid
over its constructor settings, applied with `Algorithm.clone`), the total budgets (epsilon per agent, at the
study's delta), the rounds and the seeds. Each method's noise is calibrated to the total (epsilon, delta) of a whole
run through **its own accountant**, by the method's own total-budget argument (`TOTAL_PRIVACY`, a registry keyed
by algorithm class):

* `LinearizedADMM`: its perturbation with a `pc.Budget(epsilon, delta)` of the template's mechanism (spent over
  T * E local updates; PLD accountant);
* `PRADMM`, `PPADMM`, `IPPADMM`, `QDPSGD`: ``epsilon`` and ``delta`` (zCDP or RDP over the run's T rounds);
* `RandomizedADMM`, `RandomizedDGD`, `DPDistributedGradient`, `DPP2`, `DiaDSP`, `PPDC`: ``epsilon`` and ``delta``
  (their Laplace releases' ledger over the run, `privcvx.privacy.total_budget`; the random aggregators get a
  constant rate, the others their template's scales multiplied by one factor: DPDG's schedule of Theorem 5).

Comparing at the same *total* privacy is the default, because the same per-update epsilon makes extra local updates
look free (docs/results.md). ``budget="per_update"`` runs Algorithm 1 at the same per-update epsilon (the paper's
setting), labelled so in every output. Every run's spent epsilon is read back from its ledger (``epsilon_spent``),
and a run that spent more than its target is refused: equal total privacy is checked, not assumed.

Methods without a total-budget argument (the non-private `ExactADMM`) are refused with a message that says so. A
method that does not run on the study's problem (its ``check`` raises `UnsupportedError`, e.g. a full-consensus method
on general-form zones) stops the study before any run, or with ``keep_going`` is left out and reported as refused, with
the reason (``Comparison.refused``, refused.csv): it draws no noise and releases nothing.

`compare` writes runs.csv, summary.csv, reference.csv, accuracy.png (final accuracy against epsilon) and figure.png
(every round, with the centralized optimum as a reference line). ``privcvx compare STUDY.toml`` is the same tool
from a TOML file (`privcvx.study_file`); the paper-004 comparisons are its presets in examples/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcvx import algorithms as methods
from privcvx.algorithms import Algorithm, ExactADMM, LinearizedADMM
from privcvx.errors import (
    ConvergenceWarning,
    ParameterError,
    PrivacyError,
    ReproducibleNoiseWarning,
    RunFailed,
    UnsupportedError,
    check_int,
    check_scalar,
)
from privcvx.privacy.mechanisms import Budget, Gaussian, Laplace, check_delta, check_epsilon
from privcvx.problem import DistributedProblem
from privcvx.runtime.backends import sigint_ignored
from privcvx.topology import Topology

BUDGETS = ("total", "per_update")
#: The columns of runs.csv, in order.
RUN_COLUMNS = ["method", "setting", "budget", "epsilon", "seed", "round", "objective", "relative_gap",
               "epsilon_spent", "distance", "status"]
#: Final-round values summarized over seeds in summary.csv; `DIAGNOSTIC_COLUMNS` and the problem's metrics follow.
VALUE_COLUMNS = ["objective", "relative_gap", "distance", "epsilon_spent"]
#: History columns copied to runs.csv (after `RUN_COLUMNS`) when a method reports them.
DIAGNOSTIC_COLUMNS = ("consensus_residual", "max_violation", "noise_magnitude")
#: Slack of the check that a run spent at most its target (the accountants' own discretization).
SPENT_TOLERANCE = 1e-6


def _mechanism_kind(algorithm: LinearizedADMM) -> str:
    privacy = algorithm.privacy
    if privacy is None:
        raise PrivacyError("LinearizedADMM in a study needs its privacy mode as a template, e.g. "
                           "privacy=pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5)); the study sets its budget",
                           argument="privacy")
    mechanism = privacy.mechanism
    return mechanism.mechanism if isinstance(mechanism, Budget) else (
        "laplace" if isinstance(mechanism, Laplace) else "gaussian")


def _linearized_total(algorithm: LinearizedADMM, epsilon: float, delta: float) -> Algorithm:
    # The ledger composes Laplace releases by RDP, not by PLD: a PLD calibration of a Laplace budget is overspent by
    # the ledger's reckoning (total 0.05 over 20 updates at delta 1e-2: ledger 0.0757), so Laplace is calibrated by
    # the ledger's accountant. The Gaussian's PLD is the ledger's.
    kind = _mechanism_kind(algorithm)
    budget = Budget(epsilon, delta, mechanism=kind, accountant="rdp" if kind == "laplace" else "pld")
    return algorithm.clone(privacy=dataclasses.replace(algorithm.privacy, mechanism=budget))


def _linearized_per_update(algorithm: LinearizedADMM, epsilon: float, delta: float) -> Algorithm:
    kind = _mechanism_kind(algorithm)
    mechanism = Gaussian(epsilon, delta) if kind == "gaussian" else Laplace(epsilon)
    return algorithm.clone(privacy=dataclasses.replace(algorithm.privacy, mechanism=mechanism))


Calibrate = Callable[[Any, float, float], Algorithm]
#: How each method takes a total (epsilon, delta) for a whole run: keyed by class (a subclass finds its base's).
TOTAL_PRIVACY: dict[type[Algorithm], Calibrate | None] = {
    LinearizedADMM: _linearized_total,
    ExactADMM: None,  # non-private: it has no noise to calibrate (a subclass of LinearizedADMM, refused by name)
    **{cls: (lambda algorithm, epsilon, delta: algorithm.clone(epsilon=epsilon, delta=delta))
       for cls in (methods.PRADMM, methods.PPADMM, methods.IPPADMM, methods.QDPSGD, methods.DPP2, methods.DiaDSP,
                   methods.PPDC, methods.DPDistributedGradient)},
    # the random aggregators' total sets a constant Laplace rate: a template's rate (or schedule) is replaced
    **{cls: (lambda algorithm, epsilon, delta: algorithm.clone(epsilon=epsilon, delta=delta, noise_rate=None))
       for cls in (methods.RandomizedADMM, methods.RandomizedDGD)},
}
#: The per-update epsilon of the paper's setting: only Algorithm 1 has local updates to spend it on.
PER_UPDATE_PRIVACY: dict[type[Algorithm], Calibrate | None] = {LinearizedADMM: _linearized_per_update,
                                                                ExactADMM: None}


def _registered(registry: Mapping[type[Algorithm], Calibrate | None], algorithm: Algorithm,
                budget: str) -> Calibrate:
    found = next((registry[cls] for cls in type(algorithm).__mro__ if cls in registry), None)
    if found is None:
        known = ", ".join(sorted(cls.__name__ for cls, calibrate in registry.items() if calibrate is not None))
        raise PrivacyError(f"{type(algorithm).__name__} cannot be calibrated to a {budget.replace('_', '-')} "
                           f"budget (methods that can: {known}); its noise is set by its own settings",
                           argument="methods")
    return found


#: A constructor setting computed for each run from the built problem and the run's epsilon.
Derived = Callable[[DistributedProblem, float], Any]


@dataclass(frozen=True)
class Method:
    """One method of a study: ``algorithm`` is the template (settings and, for Algorithm 1, its privacy mode);
    ``grid`` maps constructor settings to the values to sweep (every combination, through `Algorithm.clone`);
    ``derived`` maps settings to functions of the problem and the run's epsilon (e.g. Eq. (73)'s rho^t, whose c2 /
    epsilon term depends on the budget), applied with `Algorithm.clone` before the noise is calibrated; ``problem``
    are the study's problem builder arguments this method overrides (e.g. ``{"consensus": "full"}``, the same problem
    in the full-consensus form a method needs), so its problem, reference and relative gap are its own."""

    label: str
    algorithm: Algorithm
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    derived: Mapping[str, Derived] = field(default_factory=dict)
    problem: Mapping[str, Any] = field(default_factory=dict)

    def for_run(self, algorithm: Algorithm, problem: DistributedProblem, epsilon: float) -> Algorithm:
        """``algorithm`` (a variant) with the `derived` settings of ``problem`` at ``epsilon``."""
        if not self.derived:
            return algorithm
        return algorithm.clone(**{name: rule(problem, epsilon) for name, rule in self.derived.items()})

    def variants(self) -> list[tuple[str, Algorithm]]:
        """``(setting label, algorithm)`` for every point of the grid ("" without a grid)."""
        names = sorted(self.grid)
        out = []
        for values in itertools.product(*(self.grid[name] for name in names)):
            changes = dict(zip(names, values, strict=True))
            label = " ".join(f"{name}={value}" for name, value in changes.items())
            out.append((label, self.algorithm.clone(**changes) if changes else self.algorithm))
        return out


@dataclass(frozen=True)
class Study:
    """Methods on one problem at the same privacy: ``epsilons`` are each agent's total (``budget="total"``, the
    default) or per-update (``"per_update"``, Algorithm 1 only, the paper's setting) epsilon, at ``delta``.
    ``problem(**method.problem)`` builds a method's problem (`Method.problem`)."""

    problem: Callable[..., DistributedProblem]
    methods: Sequence[Method]
    epsilons: Sequence[float]
    delta: float = 1e-5
    rounds: int = 100
    seeds: Sequence[int] = (0,)
    budget: str = "total"
    topology: Topology | None = None

    def __post_init__(self) -> None:
        check_scalar(self.budget, argument="budget", choices=BUDGETS)
        if not self.methods or not self.epsilons or not self.seeds:
            raise ParameterError("a study needs at least one method, one epsilon and one seed", argument="methods")
        labels = [method.label for method in self.methods]
        if len(set(labels)) != len(labels):
            raise ParameterError(f"method labels must be distinct, got {labels}", argument="methods")
        for method in self.methods:
            if not isinstance(method.problem, Mapping) or not all(isinstance(key, str) for key in method.problem):
                raise ParameterError(f"method {method.label!r}: problem must map the builder's argument names to "
                                     f"values, got {method.problem!r}", argument="methods")
            if method.problem:
                try:
                    inspect.signature(self.problem).bind_partial(**method.problem)
                except (TypeError, ValueError):
                    raise ParameterError(f"method {method.label!r}: the study's problem builder takes no arguments "
                                         f"{sorted(method.problem)}", argument="methods") from None
        for epsilon in self.epsilons:
            check_epsilon(epsilon)
        check_delta(self.delta)
        check_int(self.rounds, argument="rounds")
        for seed in self.seeds:
            check_int(seed, argument="seeds", minimum=0)

    def calibrated(self, algorithm: Algorithm, epsilon: float) -> Algorithm:
        """``algorithm`` with its noise set for ``epsilon`` (total or per update, as ``budget`` says)."""
        registry = TOTAL_PRIVACY if self.budget == "total" else PER_UPDATE_PRIVACY
        return _registered(registry, algorithm, self.budget)(algorithm, epsilon, self.delta)


@dataclass
class Comparison:
    """What `compare` returns (and writes): one row per run and round, the final rounds summarized over seeds, the
    centralized reference (of the study's own problem, or of the first method's when every method overrides it:
    `Method.problem`), each method's own reference (``references``: the optimum of the problem its overrides build,
    by label), the runs that failed (``(method, setting, epsilon, seed, error)``, only with
    ``keep_going``), the method settings refused before any run (``(method, setting, reason)``, only with
    ``keep_going``) and whether Ctrl-C stopped the study (the finished runs are kept)."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    reference: float
    failed: list[tuple[str, str, float, int, str]] = field(default_factory=list)
    interrupted: bool = False
    planned: int = 0  # how many runs the study has (finished, failed or not started; refused ones are not counted)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    references: dict[str, float] = field(default_factory=dict)
    #: reference.csv's ``reference`` column per method label: "centralized", with the method's overrides if any.
    reference_names: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """One run of a study: a method's variant (``setting`` labels its grid point) at one epsilon and seed."""

    method: Method
    setting: str
    algorithm: Algorithm
    epsilon: float
    seed: int

    def ready(self, study: Study, problem: DistributedProblem) -> Algorithm:
        """The algorithm of this run: derived settings applied, noise calibrated to the study's budget."""
        return study.calibrated(self.method.for_run(self.algorithm, problem, self.epsilon), self.epsilon)


def _run(problem: DistributedProblem, study: Study, plan: Plan, optimum: float, optimum_w: np.ndarray,
         on_round: Callable[[dict[str, Any]], Any] | None = None) -> pd.DataFrame | None:
    """runs.csv's rows of one run, or None when Ctrl-C stopped it (its rounds are dropped)."""
    method, setting, epsilon, seed = plan.method, plan.setting, plan.epsilon, plan.seed
    ready = plan.ready(study, problem)
    with warnings.catch_warnings():  # research runs: seeded noise on purpose; the status is a column of runs.csv
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message="Solution may be inaccurate")
        result = problem.solve(ready, study.topology, rounds=study.rounds, seed=seed, diagnostics=True,
                               callback=on_round)
    if result.status == "interrupted":
        return None
    history = result.history
    objective = history[ready.objective_columns[0]].to_numpy(dtype=float)
    spent = history["epsilon"].to_numpy(dtype=float)
    if study.budget == "total" and spent[-1] > epsilon * (1 + SPENT_TOLERANCE):
        raise PrivacyError(f"{method.label} {setting}: its ledger spent epsilon {spent[-1]:.6g}, over the total "
                           f"{epsilon:g} it was calibrated to", argument="epsilons")
    extra = [c for c in (*DIAGNOSTIC_COLUMNS, *problem.metrics) if c in history]
    return pd.DataFrame({"method": method.label, "setting": setting, "budget": study.budget, "epsilon": epsilon,
                         "seed": seed, "round": history["round"].to_numpy(), "objective": objective,
                         "relative_gap": np.abs(objective - optimum) / max(1.0, abs(optimum)),
                         "epsilon_spent": spent,
                         "distance": float(np.linalg.norm(result.w - optimum_w)), "status": result.status,
                         **{c: history[c].to_numpy(dtype=float) for c in extra}})


def final_round_stats(runs: pd.DataFrame, keys: Sequence[str], values: Sequence[str],
                      **aggregations: tuple[str, Any]) -> pd.DataFrame:
    """Per group of ``keys`` (indexed by them), from each seed's final round: ``seeds``, ``rounds``, the named
    ``aggregations`` (as ``DataFrame.agg`` takes them), and the mean, std, min and max over seeds of each of ``values``
    (columns ``<value>_<stat>``)."""
    last = runs.loc[runs.groupby([*keys, "seed"])["round"].idxmax()]
    grouped = last.groupby(list(keys), sort=False)
    summary = grouped.agg(seeds=("seed", "nunique"), rounds=("round", "max"), **aggregations)
    for column in values:
        stats = grouped[column].agg(["mean", "std", "min", "max"])
        summary = summary.join(stats.rename(columns=lambda s, c=column: f"{c}_{s}"))
    return summary


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method, setting and epsilon: the mean, std, min and max over seeds of each final-round value (those of
    `VALUE_COLUMNS`, then the diagnostics and metrics runs.csv has)."""
    keys = ["method", "setting", "budget", "epsilon"]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "seeds", "rounds", "converged"])
    extra = [c for c in runs.columns if c not in RUN_COLUMNS]
    return final_round_stats(runs, keys, [*VALUE_COLUMNS, *extra], converged=(
        "status", lambda status: int((status == "converged").sum()))).reset_index()


@contextlib.contextmanager
def _each_warning_once() -> Iterator[None]:
    """Show each warning (category and message) once per study: every run re-calibrates from its method's template
    (a nominal sensitivity warns at each), and each run's `warnings.catch_warnings` resets Python's own
    once-per-location registry."""
    shown: set[tuple[type[Warning], str]] = set()
    with warnings.catch_warnings():
        show = warnings.showwarning

        def once(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if (category, str(message)) not in shown:
                shown.add((category, str(message)))
                show(message, category, *args, **kwargs)

        warnings.showwarning = once
        yield


@_each_warning_once()
def compare(study: Study, out: str | Path | None = None, *, progress: bool = False,
            keep_going: bool = False) -> Comparison:
    """Run every method, setting, epsilon and seed of ``study`` (with diagnostics: research runs); write runs.csv,
    summary.csv, reference.csv, accuracy.png and figure.png to ``out`` when given.

    Every run is calibrated before the first starts, so a method or epsilon that cannot be calibrated is refused at
    once. A method setting that does not run on the problem (`UnsupportedError` from its ``check``) is refused at once
    too, or with ``keep_going`` left out and listed in ``Comparison.refused`` (and refused.csv). A run that fails
    (`RunFailed`) re-raises after the finished runs are written, or with ``keep_going`` is listed in
    ``Comparison.failed`` (and failures.csv) while the others go on. Ctrl-C keeps and writes the finished runs
    (``Comparison.interrupted``); a second Ctrl-C is ignored while they are written. ``progress`` shows a bar of runs
    and one of the current run's rounds.
    """
    from tqdm.auto import tqdm

    # (options, problem, reference) per distinct Method.problem, compared by value (a value may be a table or list)
    problems: list[tuple[Mapping[str, Any], DistributedProblem, Any]] = []
    for method in study.methods:
        if _built_for(problems, method.problem) is None:
            built = study.problem(**method.problem)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                problems.append((method.problem, built, built.solve_centralized()))

    def problem_of_method(method: Method) -> tuple[DistributedProblem, Any]:
        found = _built_for(problems, method.problem)
        assert found is not None  # every method's problem was built above
        return found

    def problem_of(plan: Plan) -> tuple[DistributedProblem, Any]:
        return problem_of_method(plan.method)

    reference = (_built_for(problems, {}) or problems[0][1:])[1]
    plans = [Plan(method, setting, algorithm, epsilon, seed) for method in study.methods
             for setting, algorithm in method.variants() for epsilon in study.epsilons for seed in study.seeds]
    refused = _refused(study, problem_of, plans, keep_going)
    plans = [plan for plan in plans if (plan.method.label, plan.setting) not in refused]
    frames: list[pd.DataFrame] = []
    failed: list[tuple[str, str, float, int, str]] = []
    interrupted = False
    shield = contextlib.ExitStack()  # after a Ctrl-C, what finished is written even if Ctrl-C comes again
    runs_bar = tqdm(total=len(plans), desc="runs", unit="run", disable=not progress, position=0)
    try:
        for plan in plans:
            rounds_bar = tqdm(total=study.rounds, desc=f"{plan.method.label} {plan.setting} eps={plan.epsilon:g} "
                              f"seed={plan.seed}".replace("  ", " "), unit="round", leave=False,
                              disable=not progress, position=1)
            problem, own_reference = problem_of(plan)
            try:
                rows = _run(problem, study, plan, own_reference.value, own_reference.w,
                            on_round=lambda _row, bar=rounds_bar: bar.update(1))
            except RunFailed as exc:
                if not keep_going:
                    raise
                failed.append((plan.method.label, plan.setting, plan.epsilon, plan.seed, str(exc)))
                continue
            finally:
                rounds_bar.close()
            if rows is None:  # solve() caught Ctrl-C: drop the partial run, keep the finished ones
                raise KeyboardInterrupt
            frames.append(rows)
            runs_bar.update(1)
    except KeyboardInterrupt:
        shield.enter_context(sigint_ignored())
        interrupted = True
    finally:
        runs_bar.close()
        with shield:
            comparison = _comparison(frames, float(reference.value), failed, interrupted, len(plans))
            comparison.refused = [(method, setting, reason) for (method, setting), reason in refused.items()]
            for method in study.methods:
                comparison.references[method.label] = float(problem_of_method(method)[1].value)
                comparison.reference_names[method.label] = _reference_name(method.problem)
            if out is not None and (frames or failed or refused):
                write(comparison, Path(out))
    return comparison


def _reference_name(options: Mapping[str, Any]) -> str:
    """reference.csv's name of the centralized optimum of the problem built with ``options`` (a method's
    overrides)."""
    overrides = ", ".join(f"{key}={value!r}" for key, value in options.items())
    return f"centralized ({overrides})" if overrides else "centralized"


def _built_for(problems: list[tuple[Mapping[str, Any], DistributedProblem, Any]],
               options: Mapping[str, Any]) -> tuple[DistributedProblem, Any] | None:
    """The (problem, reference) built for builder arguments equal to ``options``, or None."""
    for built_options, problem, reference in problems:
        if built_options.keys() == options.keys() and all(
                _equal(built_options[key], options[key]) for key in options):
            return problem, reference
    return None


def _equal(a: Any, b: Any) -> bool:
    """Whether two builder arguments are the same (the same object, or equal; False where == has no truth value,
    e.g. two arrays or pandapower nets)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _refused(study: Study, problem_of: Callable[[Plan], tuple[DistributedProblem, Any]], plans: list[Plan],
             keep_going: bool) -> dict[tuple[str, str], str]:
    """Calibrate and check every run before any starts (an uncalibratable method raises); the reason of each method
    setting the problem does not suit (`UnsupportedError`), by (label, setting), which raises unless ``keep_going``
    (and raises when it leaves nothing to run)."""
    refused: dict[tuple[str, str], UnsupportedError] = {}
    for plan in plans:
        key = (plan.method.label, plan.setting)
        if key in refused:
            continue
        problem = problem_of(plan)[0]
        ready = plan.ready(study, problem)
        try:
            ready.check(problem, (study.topology or ready.topology_for(problem)).bind(problem.names))
        except UnsupportedError as exc:
            if not keep_going:
                raise
            refused[key] = exc
    if refused and len(refused) == len({(plan.method.label, plan.setting) for plan in plans}):
        raise next(iter(refused.values()))
    return {key: str(exc) for key, exc in refused.items()}


def _comparison(frames: list[pd.DataFrame], reference: float, failed: list[tuple[str, str, float, int, str]],
                interrupted: bool, planned: int) -> Comparison:
    runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RUN_COLUMNS)
    extra = [c for c in runs.columns if c not in RUN_COLUMNS]
    return Comparison(runs=runs[RUN_COLUMNS + extra], summary=summarize(runs), reference=reference, failed=failed,
                      interrupted=interrupted, planned=planned)


def write(comparison: Comparison, out: Path) -> list[Path]:
    """runs.csv, summary.csv, reference.csv, accuracy.png (`plot_accuracy`), figure.png (`plot_rounds`), and
    failures.csv when runs failed, refused.csv when methods were refused (an earlier one is removed otherwise), in
    ``out``; returns the paths written."""
    from privcvx import plotting

    out.mkdir(parents=True, exist_ok=True)
    files = [out / name for name in ("runs.csv", "summary.csv", "reference.csv")]
    comparison.runs.to_csv(files[0], index=False)
    comparison.summary.to_csv(files[1], index=False)
    pd.DataFrame({"method": list(comparison.references), "reference": list(comparison.reference_names.values()),
                  "objective": list(comparison.references.values())}).to_csv(files[2], index=False)
    for name, rows, columns in (("failures.csv", comparison.failed, ["method", "setting", "epsilon", "seed", "error"]),
                                ("refused.csv", comparison.refused, ["method", "setting", "reason"])):
        if rows:
            files.append(out / name)
            pd.DataFrame(rows, columns=columns).to_csv(files[-1], index=False)
        else:  # an earlier study's list in the same folder would be read as this one's
            (out / name).unlink(missing_ok=True)
    if comparison.runs.empty:
        return files
    fig, axes = plotting.new_figure(1, 1)
    plot_accuracy(axes[0][0], comparison.summary)
    files.append(out / "accuracy.png")
    plotting.save(fig, files[-1])
    files.append(out / "figure.png")
    plot_rounds(comparison.runs, {comparison.reference_names[label]: value
                                  for label, value in comparison.references.items()}, files[-1])
    return files


def plot_accuracy(ax: Any, summary: pd.DataFrame, column: str = "relative_gap") -> None:
    """Final ``column`` (mean over seeds, min-max bars) against epsilon, one line per method and setting, on
    ``ax``; the x label says whether epsilon is each run's total or its per-update value."""
    for (method, setting), group in summary.groupby(["method", "setting"], sort=False):
        group = group.sort_values("epsilon")
        mean = group[f"{column}_mean"].to_numpy()
        low, high = mean - group[f"{column}_min"].to_numpy(), group[f"{column}_max"].to_numpy() - mean
        ax.errorbar(group["epsilon"], mean, yerr=[low, high], marker="o", capsize=3,
                    label=f"{method} {setting}".strip())
    ax.set_xscale("log")
    ax.set_yscale("log")
    budget = summary["budget"].iloc[0] if len(summary) else "total"
    ax.set_xlabel("epsilon per agent, " + ("total over the run" if budget == "total" else "per local update"))
    ax.set_ylabel(column.replace("_", " "))
    ax.legend(fontsize=7)


#: Rows of figure.png, top to bottom, when runs.csv has them; the problem's metrics follow.
ROUND_ROWS = {"objective": "objective", "relative_gap": "relative gap", "epsilon_spent": "epsilon spent",
              "max_violation": "max violation of W_p", "consensus_residual": "consensus residual",
              "noise_magnitude": "noise magnitude, Eq. (29)"}


def plot_rounds(runs: pd.DataFrame, references: Mapping[str, float], path: str | Path) -> None:
    """figure.png: one column per epsilon, one row per value of `ROUND_ROWS` (then the metrics) against the round;
    one colour per method and setting (mean over seeds, min-max band), and each centralized optimum of
    ``references`` (name: value; one per problem the methods' overrides build) as a dashed reference line on the
    objective row. The column titles say whether epsilon is a total or a per-update one."""
    from privcvx import plotting

    known = set(RUN_COLUMNS) | set(ROUND_ROWS)
    rows = {c: label for c, label in ROUND_ROWS.items() if c in runs and runs[c].notna().any()}
    rows.update({c: c.replace("_", " ") for c in runs.columns if c not in known})
    epsilons = sorted(runs["epsilon"].unique())
    methods = list(dict.fromkeys(runs["method"]))
    curves = list(dict.fromkeys(zip(runs["method"], runs["setting"], strict=True)))
    budget = "total" if runs["budget"].iloc[0] == "total" else "per update"
    fig, axes = plotting.new_figure(len(rows), len(epsilons))
    for j, epsilon in enumerate(epsilons):
        at = runs[runs["epsilon"] == epsilon]
        for i, (column, label) in enumerate(rows.items()):
            ax = axes[i][j]
            log = plotting.set_scale(ax, at[column].to_numpy(dtype=float)) == "log"
            for method, setting in curves:
                group = at[(at["method"] == method) & (at["setting"] == setting)]
                if group.empty or group[column].isna().all():
                    continue
                stats = group.groupby("round")[column].agg(["mean", "min", "max"])
                several = group["seed"].nunique() > 1
                settings = [s for m, s in curves if m == method]
                plotting.draw_curve(ax, stats.index, stats["mean"], label=f"{method} {setting}".strip(),
                                    color=plotting.color_of(method, methods.index(method)),
                                    style=plotting.LINE_STYLES[settings.index(setting) % len(plotting.LINE_STYLES)],
                                    low=stats["min"] if several else None, high=stats["max"] if several else None,
                                    log=log)
            if column == "objective":
                for slot, (name, value) in enumerate(references.items()):
                    plotting.reference_line(ax, value, "centralized optimum" + name.removeprefix("centralized"), slot)
            if j == 0:
                ax.set_ylabel(label, fontsize=8)
        axes[0][j].set_title(f"epsilon = {epsilon:g} {budget}", fontsize=9)
        axes[-1][j].set_xlabel("round", fontsize=8)
    plotting.figure_legend(fig, axes)
    plotting.save(fig, path)
