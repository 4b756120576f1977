"""Notebook set-up: one plotly renderer for live use (the exported report gets its own, in
:mod:`workbench.report`), slider panels that headless runners (nbconvert, nbmake) execute without
stalling and that carry a static small-multiples view for exported reports, and table formatting."""

from __future__ import annotations

import html
import io
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

__all__ = ["Panel", "fields", "fmt_number", "interactive_output", "panel", "record_outputs", "setup",
           "table"]

LIVE_RENDERER = "plotly_mimetype"


def setup(renderer: str = LIVE_RENDERER) -> None:
    """Set the plotly default renderer for live use.

    ``plotly_mimetype`` stores only the figure's JSON in the notebook: JupyterLab (through the
    ``jupyterlab-plotly`` extension that ships inside the plotly wheel), Notebook 7 and VS Code draw it,
    every figure draws the same whichever cell ran first, and a saved notebook holds no copy of
    plotly.js (``+notebook`` puts its 4.6 MB in the first figure's output, so a figure of a re-run cell
    goes blank in an HTML export once that output is gone). An exported report
    (:func:`workbench.report.export_html`, ``make reports``) inlines plotly.js once in the page and
    turns each figure's JSON into a drawn figure, so it works offline. Override with
    ``$WORKBENCH_PLOTLY_RENDERER``.
    """
    import plotly.io as pio

    pio.renderers.default = os.environ.get("WORKBENCH_PLOTLY_RENDERER", renderer)


class _Stream(io.TextIOBase):
    """A ``sys.stdout``/``sys.stderr`` stand-in that appends ``stream`` outputs to a shared list."""

    def __init__(self, outputs: list[dict], name: str):
        self.outputs, self.name = outputs, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            last = self.outputs[-1] if self.outputs else None
            if last is not None and last["output_type"] == "stream" and last["name"] == self.name:
                last["text"] += text
            else:
                self.outputs.append({"output_type": "stream", "name": self.name, "text": text})
        return len(text)


def record_outputs(f: Callable[..., Any], *args, **kwargs) -> tuple[dict, ...]:
    """Call ``f(*args, **kwargs)`` and return what it printed and displayed as nbformat outputs
    (``stream`` and ``display_data`` dicts, in the order they were produced), without publishing
    anything. ``clear_output()`` inside ``f`` drops what was recorded so far. Exceptions propagate.

    Needs an IPython shell (the kernel's, or ``InteractiveShell.instance()``) for ``display``."""
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.getipython import get_ipython

    outputs: list[dict] = []

    class Recorder(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
            outputs.append({"output_type": "display_data", "data": dict(data), "metadata": dict(metadata or {})})

        def clear_output(self, wait=False):
            outputs.clear()

    shell = get_ipython()
    saved = sys.stdout, sys.stderr, getattr(shell, "display_pub", None)
    try:
        sys.stdout, sys.stderr = _Stream(outputs, "stdout"), _Stream(outputs, "stderr")
        if shell is not None:
            shell.display_pub = Recorder(shell=shell)
        f(*args, **kwargs)
    finally:
        sys.stdout, sys.stderr = saved[0], saved[1]
        if shell is not None:
            shell.display_pub = saved[2]
    return tuple(outputs)


def interactive_output(f: Callable[..., Any], controls: dict[str, Any]) -> widgets.Output:
    """Drop-in for ``ipywidgets.interactive_output(f, controls)``: an ``Output`` widget that shows what
    ``f(**{name: control.value})`` prints and displays, redrawn whenever a control's value changes.

    The difference: ``f`` runs under :func:`record_outputs` and the result is *set* as the widget's
    state (``Output.outputs``), instead of being printed inside ``with out:``. A headless runner
    (nbclient, under ``nbconvert --execute`` and nbmake) mimics the front end of an ``Output`` widget
    used as a context manager: for every output captured that way it sends a ``comm_msg`` on the shell
    channel while it waits on that same zmq.asyncio socket for the cell's ``execute_reply``, and
    jupyter_client sends it through a blocking shadow of the socket. When the reply arrives just then,
    that send consumes the socket's edge-triggered wake-up behind pyzmq's back: the reply sits in the
    socket, the poll on it never fires, and the cell never finishes although the kernel is idle
    (jupyter/nbclient#312, jupyter/nbconvert#2029). Setting the state sends nothing back on the shell
    channel, so the cell cannot stall.

    The first draw runs now and raises as ``f`` does; an error in a later redraw (a slider move) is
    shown in the widget as a traceback."""
    out = widgets.Output()

    def draw(change=None) -> None:
        kwargs = {name: c.value for name, c in controls.items()}
        if change is None:
            out.outputs = record_outputs(f, **kwargs)
            return
        try:
            out.outputs = record_outputs(f, **kwargs)
        except Exception as e:  # noqa: BLE001 - a redraw runs in a comm handler: show the error in place
            out.outputs = ({"output_type": "error", "ename": type(e).__name__, "evalue": str(e),
                            "traceback": "".join(traceback.format_exception(e)).splitlines()},)

    draw()  # raises here, before any control is wired, if the first draw fails
    for c in controls.values():
        c.observe(draw, "value")
    return out


# ---- slider panels with a static view for exported reports ----------------------------------------------

class Panel(widgets.VBox):
    """A ``VBox`` of control rows above the figure area, whose displayed bundle also carries a static
    ``text/html`` view (small multiples over one control, drawn when the panel was built).

    JupyterLab draws the live widget (its renderer ranks above ``text/html``); the exported report
    (:func:`workbench.report.export_html`) has no kernel to answer the controls, so it shows the static
    view instead. ``static_html`` is that view ("" for none)."""

    def __init__(self, children: Sequence[Any] = (), static_html: str = "", **kwargs):
        super().__init__(children=list(children), **kwargs)
        self.static_html = static_html

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        if self.static_html and isinstance(data, dict):
            data["text/html"] = self.static_html
        return data


def _options(control) -> list[tuple[str, Any]]:
    """(label, value) pairs a selection control offers, or [] for free-valued controls."""
    labels, values = getattr(control, "_options_labels", None), getattr(control, "_options_values", None)
    if labels is None or isinstance(control, widgets.SelectMultiple):
        return []
    return list(zip(labels, values))


def outputs_html(outputs: Sequence[dict], *, height: int | None = None) -> str:
    """nbformat outputs as static HTML: plotly figures as ``<div>`` + ``Plotly.newPlot`` (plotly.js must be
    on the page: :func:`workbench.report.export_html` inlines it once), ``text/html`` as is, images
    inline, text in ``<pre>``. ``height`` (px) caps each figure's height, for small multiples."""
    import plotly.graph_objects as go
    import plotly.io as pio

    parts = []
    for o in outputs:
        kind = o.get("output_type")
        if kind == "stream":
            parts.append(f"<pre>{html.escape(o.get('text', ''))}</pre>")
        elif kind == "error":
            parts.append(f"<pre>{html.escape(o.get('ename', ''))}: {html.escape(o.get('evalue', ''))}</pre>")
        elif kind in ("display_data", "execute_result"):
            data = o.get("data", {})
            if "application/vnd.plotly.v1+json" in data:
                fig = go.Figure(data["application/vnd.plotly.v1+json"], skip_invalid=True)
                h = min(fig.layout.height or 450, height or 10**6)  # plotly's own default height is 450 px
                parts.append(pio.to_html(fig.update_layout(height=h), include_plotlyjs=False, full_html=False,
                                         default_width="100%", default_height=f"{h}px",
                                         config={"responsive": True}))
            elif "text/html" in data:
                parts.append("".join(data["text/html"]))
            elif "image/png" in data:
                parts.append(f'<img src="data:image/png;base64,{data["image/png"]}">')
            elif "text/plain" in data:
                parts.append(f"<pre>{html.escape(''.join(data['text/plain']))}</pre>")
    return "\n".join(parts)


def small_multiples_html(f: Callable[..., Any], controls: dict[str, Any], vary: str | None = None,
                         *, max_multiples: int = 12, height: int | None = None) -> str:
    """Static HTML of ``f`` drawn once for each option of ``controls[vary]`` (at most ``max_multiples``),
    the other controls at their current values, laid out as a grid of captioned cells; with ``vary``
    None, one cell at the current values. Raises ``KeyError`` for a ``vary`` not in ``controls``."""
    current = {name: c.value for name, c in controls.items()}
    opts = _options(controls[vary])[:max_multiples] if vary is not None else []
    cells = [(f"{getattr(controls[vary], 'description', vary) or vary} = {label}", {**current, vary: value})
             for label, value in opts] or [("", current)]
    fixed = ", ".join(f"{getattr(c, 'description', n) or n} = {_label_of(c)}" for n, c in controls.items()
                      if n != vary and len(cells) > 1)
    body = []
    for caption, kwargs in cells:
        try:
            inner = outputs_html(record_outputs(f, **kwargs), height=height)
        except Exception as e:  # noqa: BLE001 - one failing option must not lose the others
            inner = f"<pre>{html.escape(type(e).__name__)}: {html.escape(str(e))}</pre>"
        body.append(f'<div class="wb-multiple"><div class="wb-caption">{html.escape(caption)}</div>{inner}</div>')
    what = (f"one chart per {html.escape(cells[0][0].split(' = ')[0])}" if len(cells) > 1 else "the default setting")
    note = f"; {html.escape(fixed)}" if fixed else ""
    return (f'<div class="wb-static-panel"><p><em>Static view of a slider panel ({what}{note}); '
            "open the notebook to move the controls.</em></p>"
            '<div style="display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:8px">'
            + "".join(body) + "</div></div>")


def _label_of(control) -> str:
    for label, value in _options(control):
        if value == control.value:
            return label
    v = control.value
    return ", ".join(map(str, v)) if isinstance(v, tuple) else str(v)


def panel(f: Callable[..., Any], controls: dict[str, Any], rows: Sequence[Sequence[str]] | None = None, *,
          vary: str | None = None, max_multiples: int = 12) -> Panel:
    """A slider panel: ``controls`` laid out in ``rows`` (lists of control names; default one row), above
    :func:`interactive_output` of ``f``, plus the static view :func:`small_multiples_html` over
    ``vary`` for exported reports. Controls with fewer than two options are hidden (they cannot change
    anything). Returns a :class:`Panel` (a ``VBox``: one ``HBox`` per row, then the ``Output``)."""
    out = interactive_output(f, controls)
    rows = [list(controls)] if rows is None else [list(r) for r in rows]
    for c in controls.values():
        if 0 < len(_options(c)) < 2 or (isinstance(c, widgets.SelectMultiple) and len(c.options) < 2):
            c.layout.display = "none"
    static = small_multiples_html(f, controls, vary, max_multiples=max_multiples)
    return Panel([widgets.HBox([controls[n] for n in row]) for row in rows] + [out], static_html=static)


# ---- tables ---------------------------------------------------------------------------------------------

def fmt_number(v: Any, sig: int = 3) -> str:
    """``v`` in fixed notation with ``sig`` significant digits (never ``3.94e+01``): ``39.4``, ``0.00340``,
    ``2,143,567``; integers with thousands separators; NaN as ``""``; anything else as ``str``."""
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu"):
        return f"{int(v):,}"
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(x):
        return ""
    if math.isinf(x) or x == 0:
        return str(x) if math.isinf(x) else "0"
    decimals = min(max(sig - 1 - math.floor(math.log10(abs(x))), 0), 8)
    return f"{x:,.{decimals}f}"


def _interval_columns(cols: Sequence[str], c: str) -> tuple[str, str] | None:
    """The (lo, hi) columns of ``c``'s confidence interval among ``cols``: ``c_lo``/``c_hi``,
    ``X_ci_lo``/``X_ci_hi`` for ``c = X_acc``, or ``ci_lo``/``ci_hi`` for ``c`` = ``acc`` or ``diff``."""
    cands = [(f"{c}_lo", f"{c}_hi")]
    if c.endswith("_acc"):
        cands.append((f"{c[:-4]}_ci_lo", f"{c[:-4]}_ci_hi"))
    if c in ("acc", "diff"):
        cands.append(("ci_lo", "ci_hi"))
    return next(((lo, hi) for lo, hi in cands if lo in cols and hi in cols), None)


def _merge_intervals(df, sig: int):
    """``df`` with each value and its interval columns merged into one text column ``"c [95% CI]"``."""
    import pandas as pd

    out, used = {}, set()
    for c in df.columns:
        if c in used:
            continue
        pair = _interval_columns(list(df.columns), str(c))
        if pair is None:
            out[c] = df[c]
            continue
        used.update(pair)
        out[f"{c} [95% CI]"] = [f"{fmt_number(v, sig)} [{fmt_number(lo, sig)}, {fmt_number(hi, sig)}]"
                                for v, lo, hi in zip(df[c], df[pair[0]], df[pair[1]])]
    return pd.DataFrame({k: list(v) for k, v in out.items()}, index=df.index)


def table(df, *, sig: int = 3, max_chars: int = 28, index: bool | None = None, columns: Sequence[str] | None = None,
          cis: bool = True):
    """A ``pandas`` Styler for notebook display: numbers in fixed notation with ``sig`` significant digits
    (:func:`fmt_number`), text cells cut to ``max_chars`` (the full text on hover), headers with
    ``_`` shown as spaces so they wrap at word breaks, no index unless it is meaningful (``index``
    None: shown when it is not a plain 0..n-1 range), compact cells. ``columns`` picks and orders;
    with ``cis`` a value and its interval columns (``x``, ``x_lo``, ``x_hi``; ``mmlu_acc``,
    ``mmlu_ci_lo``, ``mmlu_ci_hi``; ``acc``, ``ci_lo``, ``ci_hi``) become one ``x [95% CI]`` column."""
    import pandas as pd

    if isinstance(df, pd.Series):
        df = df.to_frame()
    d = _merge_intervals(df if columns is None else df[[c for c in columns if c in df]], sig) if cis else (
        df if columns is None else df[[c for c in columns if c in df]])
    show_index = index if index is not None else not isinstance(d.index, pd.RangeIndex)

    def cell(v):
        if isinstance(v, str):
            if len(v) <= max_chars:
                return html.escape(v)
            return f'<span title="{html.escape(v)}">{html.escape(v[: max_chars - 1])}…</span>'
        return fmt_number(v, sig)

    st = d.style.format(cell).format_index(lambda c: html.escape(str(c).replace("_", " ")), axis=1)
    if not show_index:
        st = st.hide(axis="index")
    return st.set_table_styles([
        {"selector": "th", "props": "white-space: normal; max-width: 9em; font-size: 0.9em; text-align: right"},
        {"selector": "td", "props": "white-space: nowrap; padding: 2px 6px; text-align: right"},
    ])


def _field_notes(cls) -> dict[str, str]:
    """The trailing ``# comment`` of each dataclass field in ``cls``'s source (house style: one per field)."""
    import inspect
    import re

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#\s*(.+)$", src, re.MULTILINE)}


def fields(obj, *, sig: int = 4):
    """A config or model dataclass as a readable table: one row per field with its value (numbers in fixed
    notation, :func:`fmt_number`; tuples element by element) and the comment its class gives the field.
    Raises ``TypeError`` for a non-dataclass."""
    import dataclasses

    import pandas as pd

    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"fields() takes a dataclass instance, got {type(obj).__name__}")
    notes = _field_notes(type(obj))
    rows = []
    for fl in dataclasses.fields(obj):
        v = getattr(obj, fl.name)
        shown = ", ".join(fmt_number(x, sig) for x in v) if isinstance(v, (tuple, list)) else fmt_number(v, sig)
        rows.append({"field": fl.name, "value": html.escape(shown), "meaning": html.escape(notes.get(fl.name, ""))})
    return pd.DataFrame(rows).style.hide(axis="index").set_table_styles(
        [{"selector": "td", "props": "text-align: left; padding: 2px 8px"}])
