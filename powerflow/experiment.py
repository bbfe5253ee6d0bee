"""The power-flow problem of Sec. 6.1, as a ``privcvx compare`` study builds it (``builder = "powerflow"``).

Registered under the entry-point group ``privcvx.builders`` (name ``powerflow``, see pyproject.toml), so
that ``privcvx compare`` finds it without privcvx importing this package; its extra figures under
``privcvx.figures``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import privcvx as pc
from privcvx.errors import ParameterError, check_scalar

from .data import load_case
from .zonal import zonal_problem
from .zones import case118_zones


def build(case: str = "case14", zones: str | int = "3", beta: float = 0.01, sensitivity: str = "exact",
          zone_seed: int = 0, consensus: str = "general") -> pc.DistributedProblem:
    """The zonal problem (72) of ``case`` (Sec. 6.1); ``zones`` is a count or ``"standin"`` (case118 only);
    ``consensus="full"`` is its full-consensus form (`powerflow.zonal_problem`)."""
    if zones == "standin":
        if case != "case118":
            raise ParameterError(f'"standin" zones exist only for case118, not {case!r}', argument="zones")
        mapping: Any = case118_zones()
    else:
        mapping = _zone_count(zones)
    return zonal_problem(load_case(case, argument="case"), mapping, beta=beta, sensitivity=sensitivity, seed=zone_seed,
                        consensus=consensus)


def _zone_count(zones: str | int) -> int:
    """A number of zones, given as an integer or as its digits (TOML's ``zones = "3"``, beside ``"standin"``)."""
    if isinstance(zones, str) and zones.strip().isdigit():
        zones = int(zones)
    return check_scalar(zones, argument="zones", kind=int, low=1)  # 2.7 and True are no count (int() took them)


def figures(out: Path, *, epsilon: float, delta: float, rounds: int, budget: str = "per_update", case: str = "case14",
            zones: str | int = "3", beta: float = 0.01, sensitivity: str = "exact", zone_seed: int = 0,
            rho: float = 100.0) -> list[Path]:
    """The power-flow pictures of a ``privcvx compare`` study on this builder (entry-point group
    ``privcvx.figures``).

    ``zones.png``: the zone map (`powerflow.plot_zones`). ``powerflow.png``: voltage per bus and load
    shed per zone (`powerflow.plot_comparison`) for the centralized zonal reference, the non-private
    distributed run with the library's defaults (``problem.solve(rounds=...)``: what a user gets), the non-private
    run with the command's rho and eta^t = 1/sqrt(t) (the paper's settings, slower), and ObjPert and OutPert
    (derived sensitivity) with the Gaussian mechanism at ``epsilon`` per update (``budget="per_update"``) or in
    total over the run (``"total"``), with the study's rounds and the paper's rho and eta. The private runs are
    research runs (seed 0, diagnostics kept: the zones' internal variables are drawn).
    """
    import warnings

    from .data import load_case
    from .results import to_net, write_figures

    problem = build(case, zones, beta, sensitivity, zone_seed)
    net = load_case(case)
    settings = {"rounds": rounds, "rho": rho, "eta": pc.schedules.inverse_sqrt(), "seed": 0}
    per_update = budget == "per_update"
    mechanism = pc.Gaussian(epsilon, delta, analytic=True) if per_update else pc.Budget(epsilon, delta)
    spent = budget.replace("_", " ")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        runs = {"centralized (zonal reference)": problem.solve_centralized(),
                "non-private ADMM, defaults": problem.solve(rounds=rounds),
                f"non-private ADMM, rho={rho:g}, eta=1/sqrt(t)": problem.solve(**settings),
                f"ObjG, eps={epsilon:g} {spent}": problem.solve(privacy=pc.ObjectivePerturbation(mechanism),
                                                                   **settings),
                f"OutG (derived), eps={epsilon:g} {spent}": problem.solve(
                    privacy=pc.OutputPerturbation(mechanism, sensitivity="derived"), **settings)}
    nets = {label: to_net(net, solution, problem=problem) for label, solution in runs.items()}
    out.mkdir(parents=True, exist_ok=True)
    return write_figures(net, problem.info["zones"], nets, (out / "zones.png", out / "powerflow.png"),
                         f"{case}, {zones} zones, {rounds} rounds")
