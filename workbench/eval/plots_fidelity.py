"""Plotly figures for fidelity results (:func:`workbench.eval.fidelity.run_fidelity` rows)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures import readable_log_axes

__all__ = ["plot_fidelity_bars", "plot_kl_vs_memory"]


def plot_fidelity_bars(df: pd.DataFrame, label: str = "label") -> go.Figure:
    """Side-by-side bars per model variant: KL mean with its p95 as a marker (nats/token, log axis) and
    top-1 agreement. Columns: ``label`` (variant name), ``kl_mean``, ``kl_p95``, ``top1_agreement``."""
    for c in (label, "kl_mean", "kl_p95", "top1_agreement"):
        if c not in df:
            raise ValueError(f"column {c!r} missing; pass run_fidelity rows with a {label!r} column")
    d = df[df["kl_mean"] > 0] if (df["kl_mean"] > 0).any() else df
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KL(p_fp || p_q) per token", "top-1 agreement"))
    fig.add_trace(go.Bar(x=d[label], y=d["kl_mean"], name="KL mean"), row=1, col=1)
    fig.add_trace(go.Scatter(x=d[label], y=d["kl_p95"], mode="markers", name="KL p95",
                             marker_symbol="line-ew-open", marker_size=18), row=1, col=1)
    fig.add_trace(go.Bar(x=d[label], y=d["top1_agreement"], name="top-1 agreement"), row=1, col=2)
    fig.update_yaxes(type="log", title_text="nats/token", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="fraction of tokens", row=1, col=2)
    fig.update_layout(title="Fidelity to the full-precision model", template="plotly_white")
    return readable_log_axes(fig)


def plot_kl_vs_memory(df: pd.DataFrame, label: str = "label") -> go.Figure:
    """Trade-off scatter: measured weight memory (MiB) against KL mean (log), one point per variant.
    Columns: ``weight_bytes``, ``kl_mean``, ``label``."""
    d = df[df["kl_mean"] > 0]
    fig = go.Figure(go.Scatter(x=d["weight_bytes"] / 2**20, y=d["kl_mean"], mode="markers+text", text=d[label],
                               textposition="top center"))
    fig.update_layout(title="Memory vs fidelity", xaxis_title="weight memory (MiB)",
                      yaxis_title="KL mean (nats/token)", yaxis_type="log", template="plotly_white")
    return readable_log_axes(fig)
