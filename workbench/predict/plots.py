"""Figures of predictions beside measurements: pure functions, DataFrame in, plotly Figure out."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["plot_batch1", "plot_steps"]


def plot_steps(pred: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = "") -> go.Figure:
    """Left: decode step ms against batch; right: prefill step ms against prompt tokens. One line per
    ``label`` of ``pred`` (:func:`~workbench.predict.estimate.step_costs` /
    :func:`~workbench.predict.tables.steps_table` rows); ``measured`` (a
    :func:`workbench.pd.profile.run_profile` frame, optionally with a ``label`` column, default
    "measured here") drawn dashed on the same axes."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode step", "prefill step (batch 1)"))
    frames = [(pred, "solid")]
    if measured is not None and len(measured):
        m = measured if "label" in measured else measured.assign(label="measured here")
        frames.append((m, "dash"))
    for df, dash in frames:
        for label, part in df.groupby("label", sort=False):
            dec = part[part["phase"] == "decode"].sort_values("batch")
            pre = part[(part["phase"] == "prefill") & (part["batch"] == 1)].sort_values("seq_len")
            fig.add_scatter(x=dec["batch"], y=dec["ms"], mode="lines+markers", name=str(label), legendgroup=str(label),
                            line={"dash": dash}, row=1, col=1)
            fig.add_scatter(x=pre["seq_len"], y=pre["ms"], mode="lines+markers", name=str(label),
                            legendgroup=str(label), showlegend=False, line={"dash": dash}, row=1, col=2)
    fig.update_xaxes(title_text="sequences in the decode step", type="log", row=1, col=1)
    fig.update_xaxes(title_text="prompt tokens", row=1, col=2)
    fig.update_yaxes(title_text="ms per step", row=1, col=1)
    fig.update_layout(title=title or "Step times: predicted (AIConfigurator) and measured", height=420)
    return fig


def plot_batch1(pred: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = "") -> go.Figure:
    """Grouped bars of batch-1 decode tokens/s per ``technique``, one bar group per ``label``
    (:func:`~workbench.predict.tables.batch1_table` rows); ``measured`` rows (columns ``technique``,
    ``tokens_per_s`` and optionally ``label``, default "measured here") as one more group."""
    frames = [pred]
    if measured is not None and len(measured):
        frames.append(measured if "label" in measured else measured.assign(label="measured here"))
    df = pd.concat(frames, ignore_index=True)
    fig = go.Figure()
    for label, part in df.groupby("label", sort=False):
        fig.add_bar(x=part["technique"], y=part["tokens_per_s"], name=str(label),
                    text=[f"{v:.0f}" for v in part["tokens_per_s"]], textposition="outside")
    fig.update_layout(barmode="group", title=title or "Batch-1 decode tokens/s: predicted and measured",
                      yaxis_title="tokens/s (batch 1)", height=420)
    return fig
