"""The ``privcvx`` command line: `pc.compare` studies from TOML files.

    privcvx compare STUDY.toml [--out DIR] [--rounds T] [--seeds N] [--epsilons E ...] [--budget B] [--no-progress]
    privcvx demo

A study file names a problem builder, methods, a grid of settings, seeds, rounds and the privacy budget (see
[`privcvx.study_file`][privcvx.study_file] and docs/cli.md). Each comparison writes runs.csv, summary.csv,
reference.csv, accuracy.png and figure.png to its output folder ([`privcvx.comparison`][privcvx.comparison]); the
paper-004 comparisons are the presets examples/case14.toml, case14_paper.toml, case118.toml, digits.toml and
digits_tight.toml. Dependency direction: ``powerflow`` and ``problems`` import privcvx, never the reverse: their
builders are found through the entry-point group ``privcvx.builders``, and extra figures through
``privcvx.figures`` (`figure_hook`).

Exit status: 0 when every run finished, 1 when some failed (failures.csv), 2 on a bad study or option (nothing run),
130 after Ctrl-C (the finished runs are written). A method that does not run on the study's problem is refused before
any run, with its reason (refused.csv and the printed table), and the others run (status 0).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from privcvx.comparison import BUDGETS, Comparison, compare
from privcvx.errors import ConvergenceWarning, ParameterError, PrivcvxError
from privcvx.study_file import load
from privcvx.version import __version__

#: The presets that ``privcvx demo`` runs, small (examples/ of the source tree).
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEMO = {"rounds": 30, "seeds": [0], "epsilons": [0.1, 1.0]}


def figure_hook(builder: str) -> Callable[..., list[Path]] | None:
    """Extra figures registered for the builder ``builder`` in the entry-point group ``privcvx.figures``, if any."""
    found = [point for point in entry_points(group="privcvx.figures") if point.name == builder]
    return found[0].load() if found else None


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: ...)", except for flags (``--no-progress``'s default is its opposite), options without a
    default, and help that states its own default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def make_parser() -> argparse.ArgumentParser:
    """The argument parser of ``privcvx``."""
    parser = argparse.ArgumentParser(prog="privcvx", description="Differentially private distributed convex "
                                     "optimization: compare methods at the same privacy.",
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"privcvx {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="the case14 and digits presets, small (about 45 s on 2 cores)",
                               formatter_class=DefaultsHelpFormatter)
    demo.add_argument("--out", default="out/demo", help="output folder")
    demo.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bars")
    run = commands.add_parser("compare", help="run the study of a TOML file (see examples/)",
                              formatter_class=DefaultsHelpFormatter)
    run.add_argument("study", help="TOML file: [problem], [study] and [[methods]] (docs/cli.md)")
    run.add_argument("--out", default=None, help="output folder (default: the study's out, else out/<file name>)")
    run.add_argument("--rounds", type=int, default=None, help="replace the study's rounds")
    run.add_argument("--seeds", type=int, default=None, help="replace the study's seeds by 0..N-1")
    run.add_argument("--epsilons", type=float, nargs="+", default=None, help="replace the study's epsilons")
    run.add_argument("--budget", choices=BUDGETS, default=None,
                     help="replace the study's budget: each run's total epsilon, or per update (labelled)")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bars")
    return parser


def overrides(options: argparse.Namespace) -> dict[str, Any]:
    """The ``[study]`` keys that the command line replaces."""
    given = {"out": options.out, "rounds": options.rounds, "seeds": options.seeds, "epsilons": options.epsilons,
             "budget": options.budget}
    return {key: value for key, value in given.items() if value is not None}


def run_study(path: str | Path, changes: dict[str, Any], progress: bool) -> int:
    """Run the study of ``path``; print the table and where the files are. Returns the exit status."""
    spec = load(path, changes)
    _check_writable(spec.out)
    start = time.perf_counter()
    comparison = compare(spec.study, spec.out, progress=progress, keep_going=True)
    if comparison.interrupted:  # what finished is written; a second Ctrl-C must not end the report in a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    finished = comparison.runs.groupby(["method", "setting", "epsilon", "seed"]).ngroups
    print(f"{path}: {finished} of {comparison.planned} runs finished in {time.perf_counter() - start:.0f} s "
          f"({spec.study.budget.replace('_', '-')} epsilon)")
    if not comparison.summary.empty or comparison.refused:
        print(summary_table(comparison))
    files = sorted(p for p in spec.out.iterdir() if p.suffix in (".csv", ".png")) if finished else []
    hook = figure_hook(spec.builder) if finished and not comparison.interrupted else None
    if hook is not None:
        study = spec.study
        with warnings.catch_warnings():  # the illustrative runs of the extra figures end when the study's rounds do
            warnings.simplefilter("ignore", ConvergenceWarning)
            files += hook(spec.out, epsilon=max(study.epsilons), delta=study.delta, rounds=study.rounds,
                          budget=study.budget, **spec.builder_args)
    for file in dict.fromkeys(files):
        print(f"  wrote {file}")
    for method, setting, reason in comparison.refused:
        print(f"  method {f'{method} {setting}'.strip()} refused (not run): {reason}", file=sys.stderr)
    for method, setting, epsilon, seed, error in comparison.failed:
        print(f"  run {method} {setting} eps={epsilon:g} seed={seed} failed: {error}", file=sys.stderr)
    if comparison.interrupted:
        print("interrupted: the runs that finished are written above", file=sys.stderr)
        return 130
    return 1 if comparison.failed else 0


def summary_table(comparison: Comparison) -> str:
    """A Markdown table of the final rounds: per method, setting and epsilon, the mean (min-max) over seeds; then the
    refused method settings with their reasons."""
    summary = comparison.summary
    several = summary["seeds"].max() > 1
    lines = ["| method | setting | epsilon | relative gap | objective | epsilon spent (max) | converged |",
             "|---|---|---|---|---|---|---|"]
    for _, row in summary.iterrows():
        spread = f" ({row['relative_gap_min']:.3g}–{row['relative_gap_max']:.3g})" if several else ""
        lines.append(f"| {row['method']} | {row['setting']} | {row['epsilon']:g} | {row['relative_gap_mean']:.3g}"
                     f"{spread} | {row['objective_mean']:.5g} | {row['epsilon_spent_max']:.4g} | "
                     f"{row['converged']}/{row['seeds']} |")
    lines += [f"| {method} | {setting} | | refused: {reason} | | | |" for method, setting, reason in comparison.refused]
    return "\n".join(lines)


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
    """The case14 and digits presets at 30 rounds, one seed and per-update epsilons 0.1 and 1."""
    root = Path(options.out)
    status = 0
    for name in ("case14", "digits"):
        preset = EXAMPLES / f"{name}.toml"
        if not preset.is_file():
            raise ParameterError(f"the demo runs {preset}, which is missing: run it from a source tree of privcvx",
                                 argument="demo")
        status = max(status, run_study(preset, {**DEMO, "out": str(root / name)}, options.progress))
        if status == 130:
            return status
    print(f"figures: {root / 'case14' / 'figure.png'} and {root / 'digits' / 'figure.png'}")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privcvx`` command."""
    options = make_parser().parse_args(argv)
    # Ctrl-C (or kill -INT) must stop a run cleanly even when the shell started us with SIGINT ignored,
    # as it does for background jobs: the runner then keeps and writes the finished runs.
    # The caller's handler comes back on return (``main`` called in a process that goes on, as a test or a notebook
    # does: an ignored SIGINT left behind is inherited by every process it starts, whose Ctrl-C then does nothing).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if options.command == "demo":
            return demo(options)
        return run_study(options.study, overrides(options), options.progress)
    except PrivcvxError as exc:
        print(f"privcvx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any run finished (loading a network, the reference solves)
        print("privcvx: interrupted before any run finished; nothing was written", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
