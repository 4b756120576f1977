"""Notebook set-up: one call that makes plotly figures render in JupyterLab and in exported HTML."""

from __future__ import annotations

import os

__all__ = ["setup", "smoke"]


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
