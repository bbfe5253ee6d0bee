"""The power-flow experiment of Sec. 6.1, as the ``privcvx`` command line builds it.

Registered under the entry-point group ``privcvx.builders`` (name ``powerflow``, see pyproject.toml), so
that ``privcvx compare powerflow`` finds it without privcvx importing this package.
"""

from __future__ import annotations

from typing import Any

import privcvx as pc
from privcvx.errors import ParameterError

from .zonal import zonal_problem
from .zones import case118_zones


def build(case: str, zones: str, beta: float, sensitivity: str, zone_seed: int) -> pc.DistributedProblem:
    """The zonal problem (72) of ``case`` (Sec. 6.1); ``zones`` is a count or ``"standin"`` (case118 only)."""
    if zones == "standin":
        if case != "case118":
            raise ParameterError(f'"standin" zones exist only for case118, not {case!r}', argument="zones")
        mapping: Any = case118_zones()
    else:
        mapping = _integer(zones, "zones")
    return zonal_problem(case, mapping, beta=beta, sensitivity=sensitivity, seed=zone_seed)


def _integer(value: Any, argument: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ParameterError(f"expected an integer, got {value!r}", argument=argument) from None
