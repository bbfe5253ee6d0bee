"""bench/results_tables.py: several compare folders merged run by run (the last folder that has a run wins), and
``--figure``'s drawing of the merged runs as `privcvx compare` draws its figure.png, saved as a palette PNG."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from privcvx.comparison import RUN_COLUMNS, plot_rounds

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import results_tables  # noqa: E402

ROUNDS = 4


def _runs(method: str, seed: int, offset: float) -> pd.DataFrame:
    """One run of ``ROUNDS`` rounds whose values all carry ``offset`` (to tell the folders' copies apart)."""
    rounds = np.arange(1, ROUNDS + 1)
    values = offset + 10.0 / rounds
    return pd.DataFrame({"method": method, "setting": "local_updates=1", "budget": "per_update", "epsilon": 0.1,
                         "seed": seed, "round": rounds, "objective": values, "relative_gap": values,
                         "epsilon_spent": 0.1 * rounds, "distance": values, "status": "max_rounds",
                         "consensus_residual": values, "max_violation": values, "noise_magnitude": values})[RUN_COLUMNS]


def _folder(path: Path, runs: list[pd.DataFrame], references: dict[str, float]) -> Path:
    path.mkdir()
    pd.concat(runs, ignore_index=True).to_csv(path / "runs.csv", index=False)
    pd.DataFrame({"method": list(references), "reference": "centralized",
                  "objective": list(references.values())}).to_csv(path / "reference.csv", index=False)
    return path


def test_merged_figure_is_plot_rounds_of_the_last_folders_runs(tmp_path: Path) -> None:
    """ObjG seed 0 is in both folders: the second's copy (offset 5) is drawn, not the first's (offset 0); the runs
    only one folder has are kept; the reference line is the second folder's (a method's last)."""
    first = _folder(tmp_path / "first", [_runs("ObjG", 0, 0.0), _runs("ObjG", 1, 0.0), _runs("OutG (paper)", 0, 1.0)],
                    {"ObjG": 1.0, "OutG (paper)": 1.0})
    second = _folder(tmp_path / "second", [_runs("ObjG", 0, 5.0)], {"ObjG": 2.0})
    drawn = tmp_path / "figure.png"
    results_tables.figure([first, second], drawn)

    assert results_tables.references([first, second]) == {"centralized": 2.0}
    expected_runs = pd.concat([_runs("ObjG", 1, 0.0), _runs("OutG (paper)", 0, 1.0), _runs("ObjG", 0, 5.0)],
                              ignore_index=True)
    expected = tmp_path / "expected.png"
    plot_rounds(expected_runs, {"centralized": 2.0}, expected)
    image = Image.open(drawn)
    assert image.mode == "P"
    reference = np.asarray(Image.open(expected).convert("RGB").quantize(256).convert("RGB"))
    assert np.array_equal(np.asarray(image.convert("RGB")), reference)

    stale = tmp_path / "stale.png"  # the first folder's copy of ObjG seed 0 draws a different figure
    plot_rounds(pd.concat([_runs("ObjG", 0, 0.0), _runs("ObjG", 1, 0.0), _runs("OutG (paper)", 0, 1.0)]),
                {"centralized": 2.0}, stale)
    assert not np.array_equal(np.asarray(Image.open(stale).convert("RGB").quantize(256).convert("RGB")), reference)
