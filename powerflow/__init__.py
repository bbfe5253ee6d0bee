"""Zonal SOC-relaxed power flow from pandapower networks (Sec. 6.1 and Appendix D of the paper).

* `load_case` - a ``pandapower.networks`` case;
* `socopf` - the centralized SOC relaxation (71), load shedding or generation cost;
* `partition` - connected zones with few cut lines;
* `zonal_problem` - the zonal problem (72) as a ``pc.DistributedProblem``;
* `case118_zones` - a stand-in 3-zone partition of case118 (not the paper's);
* `to_net`, `ac_check`, `generation_cost` - a solution as pandapower result tables, ``runpp`` from it, its cost;
* `n_minus_1`, `secure_line_outages`, `with_outage` - outage (N-1) studies of the zonal problem;
* `plot_zones`, `plot_comparison` - a zone map and a voltage / load-shed comparison.
"""

from .contingency import n_minus_1, secure_line_outages, with_outage
from .data import NetworkData, load_case, network_data
from .model import SocModel, SocopfResult, socopf
from .results import AcCheck, ac_check, generation_cost, plot_comparison, plot_zones, to_net
from .zonal import zonal_problem
from .zones import case118_zones, partition

__all__ = ["AcCheck", "NetworkData", "SocModel", "SocopfResult", "ac_check", "case118_zones", "generation_cost",
           "load_case", "n_minus_1", "network_data", "partition", "plot_comparison", "plot_zones",
           "secure_line_outages", "socopf", "to_net", "with_outage", "zonal_problem"]
