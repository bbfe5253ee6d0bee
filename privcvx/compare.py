"""`pc.compare`: any methods on one problem, at the same total privacy.

A `Study` names a problem builder, the methods (`Method`: any `privcvx.algorithms` class with its settings and a grid
over its constructor settings, applied with `Algorithm.clone`), the total budgets (epsilon per agent, at the
study's delta), the rounds and the seeds. Each method's noise is calibrated to the total (epsilon, delta) of a whole
run through **its own accountant**, by the method's own total-budget argument (`TOTAL_PRIVACY`, a registry keyed
by algorithm class):

* `LinearizedADMM`: its perturbation with a `pc.Budget(epsilon, delta)` of the template's mechanism (spent over
  T * E local updates; PLD accountant);
* `DPDistributedGradient`: ``epsilon`` (pure epsilon-DP over the run, Theorem 5 of paper 001; delta unused);
* `PRADMM`, `PPADMM`, `IPPADMM`, `QDPSGD`: ``epsilon`` and ``delta`` (zCDP or RDP over the run's T rounds);
* `RandomizedADMM`, `RandomizedDGD`, `DPP2`, `DiaDSP`, `PPDC`: ``epsilon`` and ``delta`` (their Laplace releases'
  ledger over the run, `privcvx.privacy.total_budget`; the random aggregators get a constant rate, the others
  their template's scales multiplied by one factor).

Comparing at the same *total* privacy is the default, because the same per-update epsilon makes extra local updates
look free (docs/results.md). ``budget="per_update"`` runs Algorithm 1 at the same per-update epsilon (the paper's
setting), labelled so in every output. Every run's spent epsilon is read back from its ledger (``epsilon_spent``),
and a run that spent more than its target is refused: equal total privacy is checked, not assumed.

Methods without a total-budget argument (the non-private `ExactADMM`) are refused with a message that says so.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcvx.algorithms import (
    DPP2,
    IPPADMM,
    PPADMM,
    PPDC,
    PRADMM,
    QDPSGD,
    Algorithm,
    DiaDSP,
    DPDistributedGradient,
    LinearizedADMM,
    RandomizedADMM,
    RandomizedDGD,
)
from privcvx.errors import ConvergenceWarning, ParameterError, PrivacyError, ReproducibleNoiseWarning, check_int
from privcvx.privacy.mechanisms import Budget, Gaussian, Laplace, check_delta, check_epsilon
from privcvx.problem import DistributedProblem
from privcvx.topology import Topology

BUDGETS = ("total", "per_update")
#: The columns of runs.csv, in order.
RUN_COLUMNS = ["method", "setting", "budget", "epsilon", "seed", "round", "objective", "relative_gap",
               "epsilon_spent", "distance", "status"]
#: Final-round values summarized over seeds in summary.csv.
VALUE_COLUMNS = ["objective", "relative_gap", "distance", "epsilon_spent"]
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
    budget = Budget(epsilon, delta, mechanism=_mechanism_kind(algorithm))
    return algorithm.clone(privacy=dataclasses.replace(algorithm.privacy, mechanism=budget))


def _linearized_per_update(algorithm: LinearizedADMM, epsilon: float, delta: float) -> Algorithm:
    kind = _mechanism_kind(algorithm)
    mechanism = Gaussian(epsilon, delta) if kind == "gaussian" else Laplace(epsilon)
    return algorithm.clone(privacy=dataclasses.replace(algorithm.privacy, mechanism=mechanism))


Calibrate = Callable[[Any, float, float], Algorithm]
#: How each method takes a total (epsilon, delta) for a whole run: keyed by class (a subclass finds its base's).
TOTAL_PRIVACY: dict[type[Algorithm], Calibrate] = {
    LinearizedADMM: _linearized_total,
    DPDistributedGradient: lambda algorithm, epsilon, delta: algorithm.clone(epsilon=epsilon),
    **{cls: (lambda algorithm, epsilon, delta: algorithm.clone(epsilon=epsilon, delta=delta))
       for cls in (PRADMM, PPADMM, IPPADMM, QDPSGD, DPP2, DiaDSP, PPDC)},
    # the random aggregators' total sets a constant Laplace rate: a template's rate (or schedule) is replaced
    **{cls: (lambda algorithm, epsilon, delta: algorithm.clone(epsilon=epsilon, delta=delta, noise_rate=None))
       for cls in (RandomizedADMM, RandomizedDGD)},
}
#: The per-update epsilon of the paper's setting: only Algorithm 1 has local updates to spend it on.
PER_UPDATE_PRIVACY: dict[type[Algorithm], Calibrate] = {LinearizedADMM: _linearized_per_update}


def _registered(registry: Mapping[type[Algorithm], Calibrate], algorithm: Algorithm, budget: str) -> Calibrate:
    found = next((registry[cls] for cls in type(algorithm).__mro__ if cls in registry), None)
    if found is None:
        known = ", ".join(sorted(cls.__name__ for cls in registry))
        raise PrivacyError(f"{type(algorithm).__name__} cannot be calibrated to a {budget.replace('_', '-')} "
                           f"budget (methods that can: {known}); its noise is set by its own settings",
                           argument="methods")
    return found


@dataclass(frozen=True)
class Method:
    """One method of a study: ``algorithm`` is the template (settings and, for Algorithm 1, its privacy mode);
    ``grid`` maps constructor settings to the values to sweep (every combination, through `Algorithm.clone`)."""

    label: str
    algorithm: Algorithm
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)

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
    default) or per-update (``"per_update"``, Algorithm 1 only, the paper's setting) epsilon, at ``delta``."""

    problem: Callable[[], DistributedProblem]
    methods: Sequence[Method]
    epsilons: Sequence[float]
    delta: float = 1e-5
    rounds: int = 100
    seeds: Sequence[int] = (0,)
    budget: str = "total"
    topology: Topology | None = None

    def __post_init__(self) -> None:
        if self.budget not in BUDGETS:
            raise ParameterError(f"must be one of {BUDGETS}, got {self.budget!r}", argument="budget")
        if not self.methods or not self.epsilons or not self.seeds:
            raise ParameterError("a study needs at least one method, one epsilon and one seed", argument="methods")
        labels = [method.label for method in self.methods]
        if len(set(labels)) != len(labels):
            raise ParameterError(f"method labels must be distinct, got {labels}", argument="methods")
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
    """What `compare` returns (and writes): one row per run and round, the final rounds summarized over seeds, and
    the centralized reference."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    reference: float


def _run(problem: DistributedProblem, study: Study, method: Method, setting: str, algorithm: Algorithm,
         epsilon: float, seed: int, optimum: float, optimum_w: np.ndarray) -> pd.DataFrame:
    ready = study.calibrated(algorithm, epsilon)
    with warnings.catch_warnings():  # research runs: seeded noise on purpose; the status is a column of runs.csv
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = problem.solve(ready, study.topology, rounds=study.rounds, seed=seed, diagnostics=True)
    history = result.history
    objective = history[ready.objective_columns[0]].to_numpy(dtype=float)
    spent = history["epsilon"].to_numpy(dtype=float)
    if study.budget == "total" and spent[-1] > epsilon * (1 + SPENT_TOLERANCE):
        raise PrivacyError(f"{method.label} {setting}: its ledger spent epsilon {spent[-1]:.6g}, over the total "
                           f"{epsilon:g} it was calibrated to", argument="epsilons")
    return pd.DataFrame({"method": method.label, "setting": setting, "budget": study.budget, "epsilon": epsilon,
                         "seed": seed, "round": history["round"].to_numpy(), "objective": objective,
                         "relative_gap": np.abs(objective - optimum) / max(1.0, abs(optimum)),
                         "epsilon_spent": spent,
                         "distance": float(np.linalg.norm(result.w - optimum_w)), "status": result.status})


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
    """Per method, setting and epsilon: the mean, std, min and max over seeds of each final-round value."""
    keys = ["method", "setting", "budget", "epsilon"]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "seeds", "rounds", "converged"])
    return final_round_stats(runs, keys, VALUE_COLUMNS, converged=(
        "status", lambda status: int((status == "converged").sum()))).reset_index()


def compare(study: Study, out: str | Path | None = None) -> Comparison:
    """Run every method, setting, epsilon and seed of ``study`` (with diagnostics: research runs); write runs.csv,
    summary.csv, reference.csv and accuracy.png to ``out`` when given. A run that fails re-raises its error after
    the runs that finished are written."""
    problem = study.problem()
    reference = problem.solve_centralized()
    planned = [(method, setting, algorithm, epsilon, seed) for method in study.methods
               for setting, algorithm in method.variants() for epsilon in study.epsilons for seed in study.seeds]
    for _, _, algorithm, epsilon, _ in planned:  # refuse an uncalibratable method or setting before any run
        study.calibrated(algorithm, epsilon)
    frames: list[pd.DataFrame] = []
    try:
        for plan in planned:
            frames.append(_run(problem, study, *plan, reference.value, reference.w))
    finally:
        comparison = _comparison(frames, float(reference.value))
        if out is not None and frames:
            write(comparison, Path(out))
    return comparison


def _comparison(frames: list[pd.DataFrame], reference: float) -> Comparison:
    runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RUN_COLUMNS)
    return Comparison(runs=runs[RUN_COLUMNS], summary=summarize(runs), reference=reference)


def write(comparison: Comparison, out: Path) -> None:
    """runs.csv, summary.csv, reference.csv and accuracy.png (`plot_accuracy`) in ``out``."""
    from privcvx import plotting

    out.mkdir(parents=True, exist_ok=True)
    comparison.runs.to_csv(out / "runs.csv", index=False)
    comparison.summary.to_csv(out / "summary.csv", index=False)
    pd.DataFrame({"reference": ["centralized"], "objective": [comparison.reference]}).to_csv(
        out / "reference.csv", index=False)
    fig, axes = plotting.new_figure(1, 1)
    plot_accuracy(axes[0][0], comparison.summary)
    plotting.save(fig, out / "accuracy.png")


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
