"""The ``privcvx`` command line: ObjPert against OutPert on power flow and federated learning.

    privcvx demo
    privcvx compare powerflow --case case14 --zones 3 --epsilons 0.05 0.1 0.5 1 --local-updates 1 5 \\
                              --rounds 100 --seeds 5 --out DIR
    privcvx compare logistic --dataset digits --agents 10 --split iid --out DIR
    privcvx run CONFIG.toml

Each comparison writes runs.csv, summary.csv and figure.png to its output folder (see
[`privcvx.experiments`][privcvx.experiments]). Dependency direction: ``powerflow`` and ``problems`` import
privcvx, never the reverse: their problem builders are found through the entry-point group
``privcvx.builders`` (`problem_builder`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from privcvx import __version__
from privcvx.errors import ParameterError, PrivcvxError
from privcvx.experiments import Experiment, RhoSpec, check_claims, make_settings, run_experiment, validate
from privcvx.problem import DistributedProblem

POWERFLOW_METHODS = ["ObjG", "ObjL", "OutG", "OutL"]
LOGISTIC_METHODS = ["ObjG", "OutG:derived"]
PAPER_EPSILONS = [0.05, 0.1, 0.5, 1.0]


def problem_builder(kind: str) -> Callable[..., DistributedProblem]:
    """The builder registered for ``kind`` in the entry-point group ``privcvx.builders``.

    ``powerflow`` and ``problems`` register theirs (pyproject.toml); privcvx never imports them.
    """
    found = [point for point in entry_points(group="privcvx.builders") if point.name == kind]
    if not found:
        raise ParameterError(f"no problem builder named {kind!r} is installed (entry points "
                             "'privcvx.builders'); install privcvx with its powerflow and problems packages",
                             argument="compare")
    return found[0].load()


def figure_hook(kind: str) -> Callable[..., list[Path]] | None:
    """Extra figures registered for ``kind`` in the entry-point group ``privcvx.figures``, if any."""
    found = [point for point in entry_points(group="privcvx.figures") if point.name == kind]
    return found[0].load() if found else None


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: ...)", except for flags (``--no-progress``'s default is its opposite), options without a
    default, and help that states its own default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _common_options(parser: argparse.ArgumentParser, *, methods: list[str], rounds: int, seeds: int,
                    delta: float) -> None:
    parser.add_argument("--epsilons", type=float, nargs="+", default=PAPER_EPSILONS,
                        help="per-update epsilon of each mechanism (Thm. 4.8)")
    parser.add_argument("--local-updates", type=int, nargs="+", default=[1, 5], help="values of E")
    parser.add_argument("--rounds", type=int, default=rounds, help="ADMM rounds T")
    parser.add_argument("--seeds", type=int, default=seeds, help="noise seeds 0..N-1 per setting")
    parser.add_argument("--delta", type=float, default=delta, help="delta of the Gaussian mechanism")
    parser.add_argument("--methods", nargs="+", default=methods,
                        help="ObjG ObjL OutG OutL; OutPert takes :derived (the default) or :paper (nominal, "
                             "e.g. OutG:paper)")
    parser.add_argument("--workers", type=int, default=1, help="processes; runs are independent")
    parser.add_argument("--out", default=None, help="output folder (default out/<case or dataset>)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bars")


def make_parser() -> argparse.ArgumentParser:
    """The argument parser of ``privcvx``."""
    parser = argparse.ArgumentParser(prog="privcvx", description="Differentially private distributed convex "
                                     "optimization: ObjPert against OutPert (Ryu & Kim, Sec. 6).",
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"privcvx {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="small comparison on case14 and digits (under a minute with 2 workers)",
                               formatter_class=DefaultsHelpFormatter)
    demo.add_argument("--out", default="out/demo", help="output folder")
    demo.add_argument("--workers", type=int, default=2, help="processes")
    demo.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bars")
    compare = commands.add_parser("compare", help="run a comparison")
    compare = compare.add_subparsers(dest="problem", required=True)

    power = compare.add_parser("powerflow", help="Sec. 6.1: zonal power flow, Figures 3 and 4",
                               formatter_class=DefaultsHelpFormatter)
    power.add_argument("--case", default="case14", help="a pandapower.networks case name")
    power.add_argument("--zones", default="3", help='number of zones, or "standin" (case118)')
    power.add_argument("--zone-seed", type=int, default=0, help="seed of the zone partition")
    power.add_argument("--beta", type=float, default=0.01, help="load adjacency beta (p.u.), Sec. 6.1.1")
    power.add_argument("--sensitivity", default="exact", choices=["exact", "paper"],
                       help="gradient sensitivity of the zones: exact (valid) or paper (2 beta, nominal)")
    power.add_argument("--rho", type=float, default=100.0, help="constant rho (Sec. 6.1.1)")
    _common_options(power, methods=POWERFLOW_METHODS, rounds=100, seeds=5, delta=1e-2)

    logistic = compare.add_parser("logistic", help="Sec. 6.2: federated logistic regression, Figures 5 and 6",
                                  formatter_class=DefaultsHelpFormatter)
    logistic.add_argument("--dataset", default="digits", choices=["digits", "breast_cancer", "mnist"],
                          help="data set (digits and breast_cancer ship with scikit-learn)")
    logistic.add_argument("--data-path", default=None, help="folder of the MNIST IDX files")
    logistic.add_argument("--agents", type=int, default=10, help="number of agents")
    logistic.add_argument("--split", default="iid", choices=["iid", "dirichlet"],
                          help="how the training rows are shared among the agents")
    logistic.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration (non-IID split)")
    logistic.add_argument("--bound", type=float, default=0.1, help="u of W_p = [-u, u] (Sec. 6.2.1)")
    logistic.add_argument("--test-fraction", type=float, default=0.25, help="share of the rows held out for test")
    logistic.add_argument("--data-seed", type=int, default=0,
                          help="seed of the train/test split and the shares")
    logistic.add_argument("--sensitivity", default="worst_case", choices=["worst_case", "paper"],
                          help="gradient sensitivity: worst_case (valid) or paper (Eq. (31) at the iterate, nominal)")
    logistic.add_argument("--c1", type=float, default=2.0, help="c1 of Eq. (73)")
    logistic.add_argument("--c2", type=float, default=5.0, help="c2 of Eq. (73)")
    logistic.add_argument("--period", type=int, default=10_000, help="T_c of Eq. (73)")
    _common_options(logistic, methods=LOGISTIC_METHODS, rounds=100, seeds=3, delta=1e-6)

    run = commands.add_parser("run", help="run the comparison described by a TOML file (see examples/)")
    run.add_argument("config", help="TOML file: compare = powerflow|logistic, plus option names as keys")
    return parser


def powerflow_experiment(options: argparse.Namespace) -> Experiment:
    """Sec. 6.1.1's setting: rho = 100, eta = 1/sqrt(t), delta = 1e-2, beta = 0.01.

    Valid by default: the zones' exact gradient sensitivity and OutPert's derived output sensitivity. The paper's
    nominal constants (``--sensitivity paper``, ``OutG:paper``) run only when asked for, with a
    ``pc.NominalPrivacyWarning``."""
    settings = make_settings(options.methods, options.epsilons, options.local_updates, options.seeds,
                             objective_label=options.sensitivity, output_default="derived")
    args = {"case": options.case, "zones": str(options.zones), "beta": options.beta,
            "sensitivity": options.sensitivity, "zone_seed": options.zone_seed}
    return Experiment(kind="powerflow", builder=problem_builder("powerflow"), builder_args=args, settings=settings,
                      rounds=options.rounds, delta=options.delta, rho=RhoSpec(constant=options.rho),
                      title=f"{options.case}, {options.zones} zones")


def logistic_experiment(options: argparse.Namespace) -> Experiment:
    """Sec. 6.2.1's setting with rho^t from Eq. (73) and eta = 1/sqrt(t)."""
    settings = make_settings(options.methods, options.epsilons, options.local_updates, options.seeds,
                             objective_label=options.sensitivity, output_default="derived")
    args = {"dataset": options.dataset, "data_path": options.data_path, "agents": options.agents,
            "split": options.split, "alpha": options.alpha, "bound": options.bound,
            "test_fraction": options.test_fraction, "data_seed": options.data_seed,
            "sensitivity": options.sensitivity}
    return Experiment(kind="logistic", builder=problem_builder("logistic"), builder_args=args, settings=settings,
                      rounds=options.rounds, delta=options.delta,
                      rho=RhoSpec(constant=None, c1=options.c1, c2=options.c2, period=options.period),
                      title=f"{options.dataset}, {options.agents} agents, {options.split}")


def make_experiment(options: argparse.Namespace) -> Experiment:
    """The experiment of ``compare <problem>``, every option checked (before any run or network load)."""
    experiment = (powerflow_experiment if options.problem == "powerflow" else logistic_experiment)(options)
    validate(experiment, options.workers)
    return experiment


def compare(options: argparse.Namespace) -> int:
    """Run one comparison; print the checks and where the files are. Returns the exit status."""
    experiment = make_experiment(options)
    out = Path(options.out) if options.out else Path("out") / (options.case if options.problem == "powerflow"
                                                                else options.dataset)
    _check_writable(out)
    start = time.perf_counter()
    outcome = run_experiment(experiment, out, workers=options.workers, progress=options.progress)
    if outcome.interrupted:  # what finished is written; a second Ctrl-C must not end the report in a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elapsed = time.perf_counter() - start
    print(f"{experiment.title}: {outcome.completed} of {len(experiment.settings)} runs finished "
          f"in {elapsed:.0f} s")
    for line in check_claims(outcome.summary):
        print("  " + line)
    files = list(outcome.files)
    hook = figure_hook(options.problem) if options.problem == "powerflow" and not outcome.interrupted else None
    if hook is not None:
        files += hook(out, case=options.case, zones=str(options.zones), beta=options.beta,
                      sensitivity=options.sensitivity, zone_seed=options.zone_seed, epsilon=max(options.epsilons),
                      delta=options.delta, rounds=options.rounds, rho=options.rho)
    for path in files:
        print(f"  wrote {path}")
    for setting, error in outcome.failed:
        print(f"  run {setting} {error}", file=sys.stderr)
    if outcome.interrupted:
        print("interrupted: the runs that finished are written above", file=sys.stderr)
        return 130
    return 1 if outcome.failed else 0


def _check_writable(out: Path) -> None:
    """Create ``out`` and write a probe file in it, or raise ParameterError naming ``out``."""
    probe = out / ".privcvx-write-test"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ParameterError(f"cannot write the outputs to {str(out)!r}: {exc.strerror or exc}",
                             argument="out") from None


def demo(options: argparse.Namespace) -> int:
    """A small default comparison on case14 and digits (the paper's settings, fewer rounds and epsilons)."""
    parser = make_parser()
    root = Path(options.out)
    common = ["--epsilons", "0.1", "1", "--local-updates", "1", "5", "--rounds", "30", "--seeds", "1",
              "--workers", str(options.workers)] + ([] if options.progress else ["--no-progress"])
    status = 0
    for argv in (["compare", "powerflow", "--case", "case14", "--out", str(root / "case14"), *common],
                 ["compare", "logistic", "--dataset", "digits", "--out", str(root / "digits"), *common]):
        status = max(status, compare(parser.parse_args(argv)))
        if status == 130:
            return status
    print(f"figures: {root / 'case14' / 'figure.png'} and {root / 'digits' / 'figure.png'}")
    return status


def run_config(path: str) -> int:
    """``privcvx run CONFIG.toml``: keys are the option names of ``compare <problem>`` (- or _)."""
    return compare(config_options(path))


def config_options(path: str) -> argparse.Namespace:
    """The options of ``compare <problem>`` that a TOML file describes, each value checked as on the command line."""
    try:
        with open(path, "rb") as handle:
            config = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ParameterError(f"cannot read {path}: {exc}", argument="config") from None
    problem = config.pop("compare", None)
    if problem not in ("powerflow", "logistic"):
        raise ParameterError(f'{path} must set compare = "powerflow" or "logistic", got {problem!r}',
                             argument="compare")
    parser = make_parser()
    options = parser.parse_args(["compare", problem])
    actions = {action.dest: action for action in _subparser(parser, "compare", problem)._actions}
    for key, value in config.items():
        name = key.replace("-", "_")
        if name == "no_progress":  # the command line's --no-progress, in either spelling
            value = not _config_value(actions["progress"], value, key)
            name = "progress"
        if name in ("command", "problem", "help") or name not in actions:
            raise ParameterError(f"{path}: unknown key {key!r} for compare {problem}", argument=key)
        setattr(options, name, _config_value(actions[name], value, key))
    return options


def _subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    """The subparser reached by the command words ``names``."""
    for name in names:
        choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        parser = choices[name]
    return parser


def _config_value(action: argparse.Action, value: Any, key: str) -> Any:
    """A TOML value checked and converted as the command-line option ``action`` would do it."""
    if isinstance(action, argparse._StoreFalseAction | argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise ParameterError(f"must be true or false, got {value!r}", argument=key)
        return value
    many = action.nargs in ("+", "*")
    items = value if many and isinstance(value, list) else [value]
    if many and not items or not many and isinstance(value, list | dict):
        raise ParameterError(f"must be {'a non-empty list' if many else 'a single value'}, got {value!r}",
                             argument=key)
    converted = []
    for item in items:
        numeric = action.type in (int, float)
        if isinstance(item, bool | dict | list) or (numeric and not isinstance(item, int | float)) \
                or (action.type is int and isinstance(item, float)):
            kind = {int: "an integer", float: "a number"}.get(action.type, "a string")
            raise ParameterError(f"must be {kind}, got {item!r}", argument=key)
        item = action.type(item) if action.type is not None else str(item)
        if action.choices is not None and item not in action.choices:
            raise ParameterError(f"must be one of {list(action.choices)}, got {item!r}", argument=key)
        converted.append(item)
    return converted if many else converted[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privcvx`` command."""
    options = make_parser().parse_args(argv)
    # Ctrl-C (or kill -INT) must stop a run cleanly even when the shell started us with SIGINT ignored,
    # as it does for background jobs: the runner then keeps and writes the finished runs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if options.command == "demo":
            return demo(options)
        if options.command == "run":
            return run_config(options.config)
        return compare(options)
    except PrivcvxError as exc:
        print(f"privcvx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any run finished (loading a network, the reference solves)
        print("privcvx: interrupted before any run finished; nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
