"""The builders' declared sensitivities replayed on their worst-case neighbours (``privcvx.sensitivity_audit``).

    .venv/bin/python bench/bench_builder_audit.py

One row per builder and norm: the relation, the declared bound, the replayed change closest to it (the largest one
for a constant bound), the ratio bound / change and whether it is loose (> 10x, reported). The audits are those of
tests/test_builder_audit.py (``AUDITS``), plus the power-flow audit on case118, federated_logistic's nominal Eq. (31)
bound (a callable: the row is the point where the change comes closest to it) and the functional mechanism at
d = 2 and 5. Deterministic (no noise is drawn). The table is written as markdown (paste into docs/privacy.md,
"Builders audited").
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import privcvx as pc
from powerflow import zonal
from privcvx.sensitivity_audit import BuilderAudit, check_builder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_builder_audit import AUDITS, _fair, _federated  # noqa: E402


def main() -> None:
    audits: list[BuilderAudit] = []
    for audit in dict.fromkeys(a for entries in AUDITS.values() for a in entries):
        audits.append(audit())
    audits.append(check_builder("zonal_problem (case118)", zonal.worst_case_pairs("case118", 3),
                                relation=zonal.RELATION))
    audits += [_federated(sensitivity="paper"), _fair(2), _fair(5)]
    print("| builder | relation | norm | declared bound | largest replayed change | ratio |")
    print("|---|---|---|---|---|---|")
    for result in audits:
        for row in result.norms:
            ratio = f"{row.ratio:.3g}" + (" **loose (> 10x)**" if row.loose else "")
            relation = row.relation.replace("|", "\\|")  # ||x|| in a markdown cell
            print(f"| {row.builder} | {relation} | {row.norm} | {row.declared:.4g} | {row.replayed:.4g} "
                  f"| {ratio} |")


if __name__ == "__main__":
    with warnings.catch_warnings():  # the nominal row is requested on purpose
        warnings.simplefilter("ignore", pc.NominalPrivacyWarning)
        main()
