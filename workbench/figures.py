"""Figure hygiene shared by the ``plots`` modules: readable log-axis ticks, a message in place of empty
axes, and reference lines drawn as legend entries (their labels cannot sit on top of each other or
of the data, as ``add_hline`` annotations do). Pure: a figure in, the same figure out."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go

__all__ = ["empty_figure", "hline_trace", "log_ticks", "readable_log_axes"]


def _label(v: float) -> str:
    """A tick label in plain notation: 0.005, 0.5, 2, 50, 2,000, 1e+06 only past a million."""
    if v >= 1e7:
        return f"{v:.0e}"
    return f"{v:,.{max(0, -math.floor(math.log10(v)))}f}" if v < 1 else f"{v:,.0f}"


def log_ticks(values: Iterable[float], max_ticks: int = 12) -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over the positive finite ``values``: the 1-2-5 sequence
    when it gives at most ``max_ticks`` ticks, else 1-3 per decade, else powers of ten only; labels in
    plain notation (``0.5``, not plotly's minor-tick digit ``5``); every digit when the data span too
    little for two such ticks. ([], []) when no value is positive."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return [], []
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    hi = max(hi, lo + 1)
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in mantissas]
        ticks = [t for t in ticks if v.min() / 1.5 <= t <= v.max() * 1.5]
        if len(ticks) <= max_ticks:
            break
    if sum(v.min() <= t <= v.max() for t in ticks) < 2:  # a narrow span: every digit
        ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in range(1, 10)]
        ticks = [t for t in ticks if v.min() / 1.1 <= t <= v.max() * 1.1] or [10.0**lo, 10.0**hi]
    ticks = [float(f"{t:.12g}") for t in ticks]
    return ticks, [_label(t) for t in ticks]


def _axis_values(fig: go.Figure, axis: str) -> dict[str, list[float]]:
    """Every finite value the traces put on each axis of letter ``axis`` ("x" or "y"), keyed by the
    layout name of the axis (``yaxis``, ``yaxis2``...)."""
    out: dict[str, list[float]] = {}
    for t in fig.data:
        ref = getattr(t, f"{axis}axis", None) or axis
        name = f"{axis}axis" + ref[1:]
        vals = getattr(t, axis, None)
        if vals is None:
            continue
        try:
            arr = np.asarray(vals, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            continue
        out.setdefault(name, []).extend(arr[np.isfinite(arr)].tolist())
    return out


def readable_log_axes(fig: go.Figure) -> go.Figure:
    """Give every log axis of ``fig`` explicit ticks from :func:`log_ticks` over the data it shows."""
    for axis in ("x", "y"):
        for name, vals in _axis_values(fig, axis).items():
            ax = fig.layout[name]  # any axis name is valid; an unused one has no type
            if ax.type != "log":
                continue
            ticks, text = log_ticks(vals)
            if ticks:
                ax.update(tickmode="array", tickvals=ticks, ticktext=text)
    return fig


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A figure with no axes and ``message`` in the middle, for a selection that matches no data."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 16})
    fig.update_layout(title=title, xaxis_visible=False, yaxis_visible=False, template="plotly_white",
                      height=300)
    return fig



def hline_trace(fig: go.Figure, y: float, name: str, x: Iterable[float] | None = None, *, dash: str = "dash",
                color: str = "gray", **subplot) -> go.Figure:
    """A horizontal reference line at ``y`` as a legend entry named ``name`` (spanning ``x``'s range,
    default: every x the figure's traces use); ``subplot`` is ``row=, col=`` for subplot figures."""
    xs = [v for t in fig.data for v in (t.x if t.x is not None else []) if v is not None] if x is None else list(x)
    try:
        lo, hi = min(xs), max(xs)
    except (TypeError, ValueError):
        lo, hi = 0, 1
    fig.add_scatter(x=[lo, hi], y=[y, y], mode="lines", name=name, line={"dash": dash, "color": color, "width": 1.5},
                    hoverinfo="name", **subplot)
    return fig
