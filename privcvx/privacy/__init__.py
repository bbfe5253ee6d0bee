"""Privacy building blocks: mechanisms (Thm. 4.8), noise sources, and the accountant (Sec. 4.3)."""

from privcvx.privacy.accounting import (
    DEFAULT_LAPLACE_DELTA,
    PRIVACY_COLUMNS,
    PrivacyLedger,
    default_accounting_delta,
    epsilon_report,
    privacy_table,
    tightest_epsilon,
)
from privcvx.privacy.mechanisms import (
    NEIGHBOURING_RELATION,
    PLD_DISCRETIZATION,
    Budget,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    Mechanism,
    PoissonSampledGaussian,
    Sensitivity,
    mechanism_from_dict,
)
from privcvx.privacy.noise import GRID_PATH, SEEDED_PATH, NoiseSource, SecureNoise, SeededNoise, agent_noise_sources
from privcvx.privacy.zcdp import ZCDPAccountant, ZCDPLedger, dp_to_zcdp, ledger_rho, zcdp_to_dp

__all__ = [
    "DEFAULT_LAPLACE_DELTA",
    "NEIGHBOURING_RELATION",
    "PLD_DISCRETIZATION",
    "PRIVACY_COLUMNS",
    "Budget",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "GRID_PATH",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "NoiseSource",
    "PoissonSampledGaussian",
    "PrivacyLedger",
    "SEEDED_PATH",
    "SecureNoise",
    "SeededNoise",
    "Sensitivity",
    "ZCDPAccountant",
    "ZCDPLedger",
    "agent_noise_sources",
    "default_accounting_delta",
    "dp_to_zcdp",
    "epsilon_report",
    "ledger_rho",
    "mechanism_from_dict",
    "privacy_table",
    "tightest_epsilon",
    "zcdp_to_dp",
]
