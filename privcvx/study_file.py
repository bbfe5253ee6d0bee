"""A `pc.compare` study from a TOML file: what ``privcvx compare STUDY.toml`` runs.

    [problem]                        # a builder and its arguments
    builder = "powerflow"            # an entry point of ``privcvx.builders``, or "module:function"
    case = "case14"

    [study]
    epsilons = [0.1, 1.0, 10.0]      # each agent's total epsilon (budget = "total", the default) ...
    budget = "total"                 # ... or "per_update" (Algorithm 1 only: the paper's setting, labelled)
    delta = 1e-6
    rounds = 200
    seeds = 3                        # a count (seeds 0 .. N-1) or a list
    out = "out/compare_case14"       # default out/<file name>

    [[methods]]
    label = "ObjPert"
    algorithm = "LinearizedADMM"     # any class of pc.algorithms
    privacy = { perturbation = "objective", mechanism = "gaussian" }   # Algorithm 1's privacy mode
    settings = { rho = 100.0, eta = { schedule = "inverse_sqrt" } }   # constructor settings
    grid = { local_updates = [1, 5] }                                 # every combination, via Algorithm.clone
    problem = { consensus = "full" }  # builder arguments this method overrides (its own form of the problem)

A setting is a TOML value, or a table: ``{ schedule = NAME, ... }`` is a schedule of `privcvx.schedules`
(`SCHEDULES`); one with an ``epsilon`` argument that the table does not give takes each run's epsilon (Eq. (73)'s
rho^t). ``{ function = "module:function", ... }`` is computed from the built problem (``function(problem, ...)``),
e.g. PR-ADMM's release bounds. ``privacy.sensitivity`` is ``"derived"`` (OutPert's default) or an explicit
``{ l1 = ..., l2 = ..., nominal = "why" }`` (a nominal one warns ``pc.NominalPrivacyWarning``); OutPert's
``privacy.solver_error`` is the certified error e its derived sensitivity allows the computed projection (1e-5).

Every key is checked before anything runs; an error names it (``argument 'methods[2].grid.rho'``).
"""

from __future__ import annotations

import importlib
import inspect
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from privcvx import schedules
from privcvx.algorithms import LinearizedADMM, all_algorithms
from privcvx.comparison import BUDGETS, Derived, Method, Study
from privcvx.errors import ParameterError, PrivcvxError, check_int, check_scalar
from privcvx.privacy.mechanisms import Gaussian, Laplace, Sensitivity, check_delta, check_epsilon
from privcvx.privacy.perturbation import ObjectivePerturbation, OutputPerturbation
from privcvx.problem import DistributedProblem

#: Schedules a setting may name (``{ schedule = NAME, ... }``).
SCHEDULES: dict[str, Callable[..., Any]] = {"inverse_sqrt": schedules.inverse_sqrt, "paper_rho": schedules.paper_rho,
                                            "adaptive": schedules.adaptive, "power": schedules.Power,
                                            "geometric": schedules.Geometric}
STUDY_KEYS = {"epsilons", "budget", "delta", "rounds", "seeds", "out"}
METHOD_KEYS = {"label", "algorithm", "settings", "grid", "privacy", "problem"}
PRIVACY_KEYS = {"perturbation", "mechanism", "sensitivity", "solver_error"}


@dataclass(frozen=True)
class StudyFile:
    """A study read from TOML: the `Study`, where its outputs go, and its problem builder with the arguments."""

    study: Study
    out: Path
    builder: str
    builder_args: dict[str, Any]


def load(path: str | Path, overrides: Mapping[str, Any] | None = None) -> StudyFile:
    """The study of the TOML file ``path``; ``overrides`` replace keys of its ``[study]`` table (the command
    line's --rounds, --seeds, --epsilons, --out)."""
    try:
        with open(path, "rb") as handle:
            config = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ParameterError(f"cannot read {path}: {exc}", argument="config") from None
    if overrides:
        study = config.get("study")
        config["study"] = {**(study if isinstance(study, dict) else {}), **overrides}
    return from_config(config, default_out=Path("out") / Path(path).stem)


def from_config(config: Mapping[str, Any], default_out: Path = Path("out/study")) -> StudyFile:
    """The study a parsed TOML document describes, every key checked."""
    _known(config, {"problem", "study", "methods"}, "")
    problem = _table(config, "problem")
    table = _table(config, "study")
    _known(table, STUDY_KEYS, "study.")
    builder_name, builder, builder_args = _builder(problem)
    delta = check_delta(table.get("delta", 1e-5), argument="study.delta")
    values = {"epsilons": _epsilons(table.get("epsilons")), "delta": delta,
              "rounds": check_int(table.get("rounds", 100), argument="study.rounds"),
              "seeds": _seeds(table.get("seeds", 1)),
              "budget": check_scalar(table.get("budget", "total"), argument="study.budget", choices=BUDGETS)}
    out = table.get("out", str(default_out))
    if not isinstance(out, str) or not out:
        raise ParameterError(f"must be a folder name, got {out!r}", argument="study.out")
    methods = config.get("methods")
    if not isinstance(methods, list) or not methods or not all(isinstance(m, dict) for m in methods):
        raise ParameterError("must be one or more [[methods]] tables", argument="methods")
    read = [_method(entry, f"methods[{i}]", delta, builder) for i, entry in enumerate(methods)]
    overrides = [(f"methods[{i}].problem", method.problem) for i, method in enumerate(read) if method.problem]
    study = Study(problem=partial(_build, builder, builder_args, overrides), **values, methods=read)
    return StudyFile(study=study, out=Path(out), builder=builder_name, builder_args=builder_args)


def problem_builder(name: str, argument: str = "problem.builder") -> Callable[..., DistributedProblem]:
    """The builder ``name``: "module:function", or the one registered under ``name`` in the entry-point group
    ``privcvx.builders`` (``powerflow`` and ``problems`` register theirs; privcvx never imports them)."""
    if not isinstance(name, str) or not name:
        raise ParameterError(f"must name a builder, got {name!r}", argument=argument)
    if ":" in name:
        return _function(name, argument)
    found = [point for point in entry_points(group="privcvx.builders") if point.name == name]
    if not found:
        known = sorted(point.name for point in entry_points(group="privcvx.builders"))
        raise ParameterError(f"no problem builder named {name!r} is installed (entry points 'privcvx.builders': "
                             f"{known}); or give a function as \"module:function\"", argument=argument)
    return found[0].load()


def _function(name: str, argument: str) -> Callable[..., Any]:
    module, _, attribute = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ParameterError(f"cannot load {name!r}: {exc}", argument=argument) from None
    if not callable(found):
        raise ParameterError(f"{name!r} is not a function", argument=argument)
    return found


def _builder(problem: dict[str, Any]) -> tuple[str, Callable[..., DistributedProblem], dict[str, Any]]:
    args = {key: value for key, value in problem.items() if key != "builder"}
    name = problem.get("builder")
    builder = problem_builder(name)
    _accepts(builder, args, "problem.")
    return name, builder, args


def _accepts(function: Callable[..., Any], names: Mapping[str, Any], prefix: str) -> inspect.Signature:
    """Refuse a key that ``function`` takes no argument for, naming it."""
    signature = inspect.signature(function)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        for key in names:
            if key not in signature.parameters:
                known = ", ".join(name for name in signature.parameters if name != "self")
                raise ParameterError(f"unknown key {key!r} (expected one of: {known})", argument=prefix + key)
    return signature


def _method(entry: dict[str, Any], where: str, delta: float, builder: Callable[..., DistributedProblem]) -> Method:
    _known(entry, METHOD_KEYS, where + ".")
    label = entry.get("label")
    if not isinstance(label, str) or not label:
        raise ParameterError(f"must be a non-empty string, got {label!r}", argument=where + ".label")
    classes = dict(all_algorithms())
    cls = classes.get(entry.get("algorithm"))
    if cls is None:
        raise ParameterError(f"must be one of {sorted(classes)}, got {entry.get('algorithm')!r}",
                             argument=where + ".algorithm")
    settings, derived = {}, {}
    for key, value in _table(entry, "settings", where + ".").items():
        _accepts(cls, {key: value}, where + ".settings.")
        converted = _setting(value, f"{where}.settings.{key}")
        (derived if isinstance(converted, _Derived) else settings)[key] = converted
    if "privacy" in entry:
        if not issubclass(cls, LinearizedADMM):
            raise ParameterError(f"{cls.__name__} takes its privacy through its own settings (epsilon, delta, ...), "
                                 "which the study sets; privacy = {...} is Algorithm 1's mode",
                                 argument=where + ".privacy")
        settings["privacy"] = _privacy(_table(entry, "privacy", where + "."), where + ".privacy", delta)
    grid = {}
    for key, values in _table(entry, "grid", where + ".").items():
        _accepts(cls, {key: values}, where + ".grid.")
        if not isinstance(values, list) or not values:
            raise ParameterError(f"must be a non-empty list of values, got {values!r}", argument=f"{where}.grid.{key}")
        grid[key] = [_setting(value, f"{where}.grid.{key}", allow_derived=False) for value in values]
    algorithm = _checked(lambda: cls(**settings), where + ".settings")
    problem = _table(entry, "problem", where + ".")
    _accepts(builder, problem, where + ".problem.")
    method = Method(label, algorithm, grid=grid, derived=derived, problem=problem)
    _checked(method.variants, where + ".grid")
    return method


def _build(builder: Callable[..., DistributedProblem], args: Mapping[str, Any],
           overrides: list[tuple[str, Mapping[str, Any]]], **options: Any) -> DistributedProblem:
    """The study's problem: ``builder`` with the ``[problem]`` arguments and a method's ``problem`` ``options``. A
    refused option is named under the first method that gives it (``overrides``: (TOML key, options) per method)."""
    try:
        return builder(**{**args, **options})
    except PrivcvxError as exc:
        where = "problem"
        if (exc.argument or "").split(".")[0] in options:
            where = next((key for key, given in overrides if given == options), where)
        raise _placed(exc, where) from None


def _checked(build: Callable[[], Any], where: str) -> Any:
    """``build()``, with a privcvx error's argument placed under ``where`` (the TOML key at fault)."""
    try:
        return build()
    except PrivcvxError as exc:
        raise _placed(exc, where) from None


def _placed(exc: PrivcvxError, where: str) -> ParameterError:
    """``exc`` as a `ParameterError` whose argument is placed under the TOML key ``where``."""
    argument = f"{where}.{exc.argument}" if exc.argument else where
    message = str(exc).split(": ", 1)[1] if exc.argument else str(exc)
    return ParameterError(message, argument=argument)


class _Derived:
    """A setting computed for each run (`Method.derived`): from the problem and the run's epsilon."""

    def __init__(self, rule: Derived) -> None:
        self.rule = rule

    def __call__(self, problem: DistributedProblem, epsilon: float) -> Any:
        return self.rule(problem, epsilon)


def _setting(value: Any, where: str, allow_derived: bool = True) -> Any:
    """A constructor setting from TOML: lists become tuples, tables name a schedule or a function (module doc)."""
    if isinstance(value, list):
        return tuple(_setting(item, where, allow_derived=False) for item in value)
    if not isinstance(value, dict):
        return value
    if "schedule" in value:
        name = check_scalar(value["schedule"], argument=where + ".schedule", choices=sorted(SCHEDULES))
        make, args = SCHEDULES[name], {k: v for k, v in value.items() if k != "schedule"}
        signature = _accepts(make, args, where + ".")
        if "epsilon" in signature.parameters and "epsilon" not in args:
            if not allow_derived:
                raise ParameterError("a schedule that follows each run's epsilon cannot be swept; give its "
                                     "epsilon or move it to settings", argument=where)
            _checked(lambda: make(**args), where)
            return _Derived(lambda problem, epsilon: make(**args, epsilon=epsilon))
        return _checked(lambda: make(**args), where)
    if "function" in value:
        if not allow_derived:
            raise ParameterError("a setting computed from the problem cannot be swept", argument=where)
        function = _function(value["function"], where + ".function")
        args = {k: v for k, v in value.items() if k != "function"}
        return _Derived(lambda problem, epsilon: function(problem, **args))
    return value


def _privacy(table: dict[str, Any], where: str, delta: float) -> ObjectivePerturbation | OutputPerturbation:
    """Algorithm 1's privacy mode as a template: the study calibrates its mechanism to each epsilon."""
    _known(table, PRIVACY_KEYS, where + ".")
    kind = check_scalar(table.get("perturbation"), argument=where + ".perturbation", choices=("objective", "output"))
    mechanism = Gaussian(1.0, delta) if check_scalar(table.get("mechanism", "gaussian"), argument=where + ".mechanism",
                                                     choices=("gaussian", "laplace")) == "gaussian" else Laplace(1.0)
    sensitivity = table.get("sensitivity", "derived")
    if kind == "objective":
        for key in ("sensitivity", "solver_error"):
            if key in table:
                raise ParameterError(f"ObjPert always uses the agents' gradient sensitivity; only OutPert takes {key}",
                                     argument=f"{where}.{key}")
        return ObjectivePerturbation(mechanism)
    if isinstance(sensitivity, dict):
        _known(sensitivity, {"l1", "l2", "nominal"}, where + ".sensitivity.")
        sensitivity = _checked(lambda: Sensitivity(**sensitivity), where + ".sensitivity")
    elif sensitivity != "derived":
        raise ParameterError(f'must be "derived" or a table {{ l1, l2, nominal }}, got {sensitivity!r}',
                             argument=where + ".sensitivity")
    errors = {"solver_error": table["solver_error"]} if "solver_error" in table else {}
    return _checked(lambda: OutputPerturbation(mechanism, sensitivity=sensitivity, **errors), where)


def _epsilons(values: Any) -> list[float]:
    if not isinstance(values, list) or not values:
        raise ParameterError(f"must be a non-empty list of numbers, got {values!r}", argument="study.epsilons")
    return [check_epsilon(value, argument="study.epsilons") for value in values]


def _seeds(value: Any) -> list[int]:
    if isinstance(value, list):
        if not value:
            raise ParameterError("must be a count or a non-empty list of seeds", argument="study.seeds")
        return [check_int(seed, argument="study.seeds", minimum=0) for seed in value]
    return list(range(check_int(value, argument="study.seeds")))


def _table(config: Mapping[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    value = config.get(key, {} if prefix else None)
    if not isinstance(value, dict):
        raise ParameterError(f"must be a table, got {value!r}", argument=prefix + key)
    return value


def _known(table: Mapping[str, Any], keys: set[str], prefix: str) -> None:
    for key in table:
        if key not in keys:
            raise ParameterError(f"unknown key {key!r} (expected one of: {', '.join(sorted(keys))})",
                                 argument=prefix + key)


__all__ = ["SCHEDULES", "StudyFile", "from_config", "load", "problem_builder"]
