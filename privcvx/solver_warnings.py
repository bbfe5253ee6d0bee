"""CVXPY's solver warnings kept inside a run: counted per agent and reported once, by name.

CVXPY warns "Solution may be inaccurate" (a ``UserWarning``, no agent, no round) on every solve that ends
"optimal_inaccurate". The local steps ([`privcvx.localsolve`][privcvx.localsolve]) and the reference solve silence it
(`quiet_inaccurate`) and count such solves instead; at the end of a run `local_solve_info` collects every agent's
local-solve report into ``result.info["local_solve"]`` (the same for every method), their counts of inaccurate
answers into ``result.info["inaccurate_solves"]``, and raises one `SolverAccuracyWarning` that names the agents.
Under privacy the counters depend on the private data: they are diagnostics, reported only by runs that keep
diagnostics (a run without them reports the kind, the strategy and the number of solves).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from privcvx.errors import SolverAccuracyWarning

#: privcvx's own source folder: a warning points at the first frame outside it (the user's call).
PACKAGE_FOLDER = os.path.dirname(os.path.abspath(__file__))

#: The start of CVXPY's warning on an "optimal_inaccurate" status (cvxpy/problems/problem.py).
INACCURATE_MESSAGE = "Solution may be inaccurate"


@contextmanager
def quiet_inaccurate() -> Iterator[None]:
    """Within the block, CVXPY's "Solution may be inaccurate" warning is not shown (the caller counts the status)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=INACCURATE_MESSAGE, category=UserWarning)
        yield


def local_solve_info(agents: Sequence[str], reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{"local_solve": {agent: report}}`` from the agents' reports (their ``"local_solve"`` entries, taken out of
    them), ``{"inaccurate_solves": {agent: count}}`` for the agents that counted inaccurate answers, and one
    [`SolverAccuracyWarning`][privcvx.errors.SolverAccuracyWarning] naming those."""
    solves = {name: report.pop("local_solve") for name, report in zip(agents, reports, strict=False)
              if isinstance(report, dict) and "local_solve" in report}
    info: dict[str, Any] = {"local_solve": solves} if solves else {}
    counts = {name: int(report["inaccurate"]) for name, report in solves.items() if report.get("inaccurate")}
    if not counts:
        return info
    listed = ", ".join(f"{name} ({count})" for name, count in counts.items())
    warn_at_caller(f"the solver reported inaccurate solutions (optimal_inaccurate) for the local steps of: {listed}; "
                   'result.info["inaccurate_solves"] has the counts')
    return {**info, "inaccurate_solves": counts}


def reference_status_warning(status: str) -> None:
    """A `SolverAccuracyWarning` when the reference solve ended "optimal_inaccurate"."""
    if status == "optimal_inaccurate":
        warn_at_caller("the centralized reference solve is optimal_inaccurate: the gaps measured against it are only "
                       "as accurate as the solver's tolerance")


def warn_at_caller(message: str, category: type[Warning] = SolverAccuracyWarning) -> None:
    """A warning of ``category`` (default `SolverAccuracyWarning`) attributed to the first frame outside privcvx
    (the user's ``solve()`` or ``solve_centralized()`` call), not to a line of privcvx."""
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE_FOLDER + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
