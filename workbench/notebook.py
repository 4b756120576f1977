"""Notebook set-up: one call that makes plotly figures render in JupyterLab and in exported HTML, and
a slider-panel helper that headless runners (nbconvert, nbmake) execute without stalling."""

from __future__ import annotations

import io
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["interactive_output", "record_outputs", "setup", "smoke"]


def setup(renderer: str = "plotly_mimetype+notebook") -> None:
    """Set the plotly default renderer.

    plotly >= 6.1 renders only ``plotly_mimetype`` inside a kernel, which nbconvert's HTML export drops;
    ``+notebook`` also embeds plotly.js (about 5 MB), so an exported report is self-contained offline.
    Override with ``$WORKBENCH_PLOTLY_RENDERER`` (e.g. ``plotly_mimetype+notebook_connected`` for
    small reports that load plotly.js from its CDN).
    """
    import plotly.io as pio

    pio.renderers.default = os.environ.get("WORKBENCH_PLOTLY_RENDERER", renderer)


def smoke() -> bool:
    """True when ``$WB_SMOKE`` is set (CI runs notebooks at smoke sizes)."""
    return os.environ.get("WB_SMOKE", "0") not in ("", "0", "false", "False")


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


def interactive_output(f: Callable[..., Any], controls: dict[str, Any]):
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
    import ipywidgets as widgets

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
