"""Figures: drawn on the user's axes, zeros never drawn at 1e-300 on log axes, references, no backend switch."""

from __future__ import annotations

import ast
from pathlib import Path

import cvxpy as cp
import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

import privcvx as pc
from privcvx import plotting

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def result():
    x, y = cp.Variable(2), cp.Variable(2)
    agents = [pc.Agent(cp.sum_squares(x - 1), [x >= 0], shared=x, name="a"),
              pc.Agent(cp.sum_squares(y), [y <= 3], shared=y, name="b")]
    return pc.DistributedProblem(agents).solve(rounds=40, reference=True)


def test_result_plot_draws_on_the_given_axes_with_the_reference(result):
    backend = matplotlib.get_backend()
    fig = Figure()
    axes = fig.subplots(1, 3)
    assert result.plot(columns=("objective", "consensus_residual", "max_violation"), ax=axes) is fig
    assert matplotlib.get_backend() == backend  # library code never switches the backend
    objective = axes[0]
    lines = objective.get_lines()
    assert [line.get_label() for line in lines] == [result.info["algorithm"], "centralized optimum"]
    assert np.allclose(lines[1].get_ydata(), result.reference.value)
    # max_violation is 0 throughout (ADMM releases its projections): a linear axis, not a line at 1e-300.
    assert axes[2].get_yscale() == "linear"
    assert np.array_equal(axes[2].get_lines()[0].get_ydata(), result.history["max_violation"].to_numpy())
    with pytest.raises(pc.errors.ParameterError, match="one axis per column"):
        result.plot(columns=("objective",), ax=axes)
    with pytest.raises(pc.errors.ParameterError, match="no history column 'nope'"):
        result.plot(columns=("nope",))


def test_zeros_are_left_out_of_log_axes_and_counted(result):
    ax = Figure().subplots()
    values = np.array([1.0, 1e-3, 0.0, 1e-6, 0.0])
    assert plotting.set_scale(ax, values) == "log"
    plotting.draw_curve(ax, np.arange(5), values, label="run", color="C0")
    drawn = np.asarray(ax.get_lines()[0].get_ydata(), dtype=float)
    assert np.all(np.isnan(drawn[values == 0])) and np.array_equal(drawn[values > 0], values[values > 0])
    assert ax.texts[0].get_text() == "2 zero values not drawn"
    assert plotting.set_scale(Figure().subplots(), np.zeros(4)) == "linear"
    # A signed column (objective_gap = objective - optimum) is drawn as its size, and says so.
    ax = Figure().subplots()
    result.plot(columns=("objective_gap",), ax=[ax])
    gap = result.history["objective_gap"].to_numpy()
    assert np.any(gap < 0) and ax.get_title() == "|objective_gap| (diagnostic)"
    assert np.array_equal(np.asarray(ax.get_lines()[0].get_ydata(), dtype=float)[gap != 0], np.abs(gap[gap != 0]))


def test_a_reference_far_below_the_data_is_written_not_drawn():
    ax = Figure().subplots()
    plotting.set_scale(ax, [1.0, 100.0])
    plotting.draw_curve(ax, [1, 2], [1.0, 100.0], label="ObjG", color=plotting.COLORS["ObjG"])
    plotting.reference_line(ax, 1e-21)
    assert len(ax.get_lines()) == 1 and "1e-21 (off the axis)" in ax.texts[0].get_text()
    assert plotting.color_of("OutG (derived), eps=1") == plotting.COLORS["OutG (derived)"]
    assert plotting.color_of("non-private ADMM") == plotting.COLORS["non-private"]


def test_saved_figures_are_150_dpi(result, tmp_path):
    result.plot(path=tmp_path / "run.png")
    with Image.open(tmp_path / "run.png") as image:
        assert np.allclose(image.info["dpi"], (plotting.DPI, plotting.DPI), atol=0.5)


def test_library_code_never_calls_matplotlib_use():
    offenders = []
    for package in ("privcvx", "problems", "powerflow"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use" \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "matplotlib":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
