"""Zonal SOC-relaxed power flow from pandapower networks (Sec. 6.1 and Appendix D of the paper).

* :func:`load_case` - a ``pandapower.networks`` case;
* :func:`socopf` - the centralized SOC relaxation (71), load shedding or generation cost;
* :func:`partition` - connected zones with few cut lines;
* :func:`zonal_problem` - the zonal problem (72) as a ``pc.DistributedProblem``;
* :func:`case118_zones` - a stand-in 3-zone partition of case118 (not the paper's);
* :func:`to_net`, :func:`ac_check` - a solution as pandapower result tables, and ``runpp`` from it;
* :func:`plot_zones`, :func:`plot_comparison` - a zone map and a voltage / load-shed comparison.
"""

from .data import NetworkData, load_case, network_data
from .model import SocModel, SocopfResult, socopf
from .results import AcCheck, ac_check, plot_comparison, plot_zones, to_net
from .zonal import zonal_problem
from .zones import case118_zones, partition

__all__ = ["AcCheck", "NetworkData", "SocModel", "SocopfResult", "ac_check", "case118_zones", "load_case",
           "network_data", "partition", "plot_comparison", "plot_zones", "socopf", "to_net", "zonal_problem"]
