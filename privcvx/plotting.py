"""One style vocabulary for every privcvx figure, and the drawing helpers behind them.

* **Colour is the method**: `COLORS` (ObjG, ObjL, OutG, OutL, an OutPert method with the derived
  calibration in a lighter shade of its colour) and the two references, the non-private run (grey) and
  the centralized optimum (black).
* **Line style is the setting**: a method's grid points (e.g. its number of local updates E) in `LINE_STYLES`
  order, solid first, then dashed, dotted, dash-dotted. No other dimension is drawn by line style.
* **Log axes never draw a zero at 1e-300**: `log_values` leaves out values <= 0, and
  `set_scale` keeps a linear axis when the data span less than a decade or are all zero, and writes
  how many zeros were left out in the panel's corner.
* Figures are made with `matplotlib.figure.Figure` (no pyplot state, and never a change of the
  user's matplotlib backend) and saved at `DPI` dots per inch; legends sit outside the panels.

Every drawing function takes the ``ax`` it draws on.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

#: Resolution of every saved figure.
DPI = 150
#: Colour per method; references in grey (non-private) and black (centralized).
COLORS = {"ObjG": "#1f77b4", "ObjL": "#2ca02c", "OutG": "#d62728", "OutL": "#ff7f0e",
          "OutG (derived)": "#f2968f", "OutL (derived)": "#ffbf80", "non-private": "#7f7f7f",
          "centralized": "#000000"}
LINE_STYLES = ("-", "--", ":", "-.")


def color_of(label: str, index: int = 0) -> str:
    """The colour of a free-form label: that of the first method or reference of `COLORS` it names
    (the longest name first, so "OutG (derived)" wins over "OutG"), else matplotlib's ``C<index>``."""
    lowered = label.lower()
    for name in sorted(COLORS, key=len, reverse=True):
        if name.lower() in lowered:
            return COLORS[name]
    return f"C{index % 10}"


def log_values(values: Any) -> np.ndarray:
    """``values`` as floats with every value <= 0 (or not finite) replaced by NaN, which a log axis skips."""
    values = np.asarray(values, dtype=float)
    return np.where(np.isfinite(values) & (values > 0), values, np.nan)


def set_scale(ax: Any, values: Any) -> str:
    """A log y-axis when the positive values span at least a decade, else linear; returns the scale.

    On a log axis, the values <= 0 (which it cannot show) are counted in a note in the panel's corner.
    """
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    positive = values[values > 0]
    if positive.size == 0 or positive.max() < 10 * positive.min():
        ax.set_yscale("linear")
        return "linear"
    ax.set_yscale("log")
    zeros = int(values.size - positive.size)
    if zeros:
        ax.text(0.98, 0.02, f"{zeros} zero value{'s' if zeros > 1 else ''} not drawn", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="#555555")
    return "log"


def draw_curve(ax: Any, rounds: Any, mean: Any, *, label: str, color: str, style: str = "-",
               low: Any = None, high: Any = None, log: bool = True, behind: bool = False) -> None:
    """A line per round (with a min-max band when ``low``/``high`` are given); zeros skipped on log axes.

    ``behind`` draws a reference curve wide and pale under the others, so a method that follows it stays
    visible.
    """
    clean = log_values if log else (lambda v: np.asarray(v, dtype=float))
    ax.plot(rounds, clean(mean), style, color=color, label=label, linewidth=3.0 if behind else 1.4,
            alpha=0.5 if behind else 1.0, zorder=1 if behind else 2)
    if low is not None and high is not None:
        ax.fill_between(rounds, clean(low), clean(high), color=color, alpha=0.15, linewidth=0)


#: The dash patterns of a panel's reference lines, one per reference (``slot``).
REFERENCE_DASHES = ((0, (4, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)))


def reference_line(ax: Any, value: float, label: str = "centralized optimum", slot: int = 0) -> None:
    """A horizontal line at a reference value (black, thin, dashed), drawn after the curves; the ``slot``-th reference
    of the panel takes the ``slot``-th dash pattern of `REFERENCE_DASHES`.

    A value outside the data's range (e.g. an optimum of 1e-21 under curves near 1) would squash them: it
    is written in the panel instead of drawn (the ``slot``-th reference one line further in).
    """
    low, high = ax.get_ylim()
    if low <= value <= high:
        ax.axhline(value, color=COLORS["centralized"], linestyle=REFERENCE_DASHES[slot % len(REFERENCE_DASHES)],
                   linewidth=1.0, label=label)
    else:
        shift = 0.07 * slot
        ax.text(0.02, 0.02 + shift if value < low else 0.98 - shift, f"{label} = {value:.3g} (off the axis)",
                transform=ax.transAxes, ha="left", va="bottom" if value < low else "top", fontsize=7,
                color=COLORS["centralized"])


def new_figure(rows: int, columns: int, *, panel: tuple[float, float] = (3.6, 2.6),
               sharex: bool = True) -> tuple[Any, np.ndarray]:
    """A `Figure` with a ``rows`` x ``columns`` grid of panels of ``panel`` inches."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel[0] * columns, panel[1] * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False, sharex=sharex)
    for ax in axes.flat:
        ax.tick_params(labelsize=8)
        ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    return fig, axes


def figure_legend(fig: Any, axes: Any) -> None:
    """One legend for the whole figure, below the panels (never on the data), without repeated labels."""
    seen: dict[str, Any] = {}
    for ax in np.asarray(axes).flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(len(seen), 6), fontsize=8,
                   frameon=False)


def save(fig: Any, path: str | os.PathLike) -> None:
    """Write ``fig`` to ``path`` at `DPI`."""
    fig.savefig(path, dpi=DPI)
