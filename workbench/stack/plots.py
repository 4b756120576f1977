"""Figures of the stacked study and the KV-cache study: DataFrame in, plotly Figure out, nothing else."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["WATERFALL_STEPS", "plot_goodput_by_deployment", "plot_kv_fidelity", "plot_kv_speed",
           "plot_multiplicative", "plot_waterfall", "plot_whatif"]

# (quantized, speculative, disaggregated) of each waterfall step and its label
WATERFALL_STEPS = (((False, False, False), "baseline"), ((True, False, False), "+ W4A16"),
                   ((True, True, False), "+ spec"), ((True, True, True), "+ P/D"))
_KV_COLORS = {"bfloat16": "#1f77b4", "float16": "#17becf", "fp8_e4m3": "#d62728", "int8": "#2ca02c",
              "float32": "#7f7f7f"}


def _step_values(table: pd.DataFrame, metric: str) -> list[float]:
    vals = []
    for (q, s, p), _ in WATERFALL_STEPS:
        r = table[(table["quantized"] == q) & (table["speculative"] == s) & (table["disaggregated"] == p)
                  & ~table["mixed"].astype(bool)]
        vals.append(float(r[metric].iloc[0]) if len(r) else np.nan)
    return vals


def plot_waterfall(table: pd.DataFrame, metric: str = "decode_tok_s", title: str = "", unit: str = "") -> go.Figure:
    """Waterfall baseline -> + W4A16 -> + spec -> + P/D of one ``metric`` column of
    :func:`workbench.stack.stack_table` (e.g. ``decode_tok_s`` at batch 1, ``goodput_rps`` under load);
    each bar is labelled with the step's factor, the last bar is the combined total."""
    v = _step_values(table, metric)
    deltas = [v[0]] + [b - a for a, b in itertools.pairwise(v)]
    factors = [""] + [f"x{b / a:.2f}" if a and np.isfinite(a) and a > 0 else "" for a, b in itertools.pairwise(v)]
    total = f"x{v[-1] / v[0]:.2f}" if v[0] and v[0] > 0 else ""
    labels = [lab for _, lab in WATERFALL_STEPS] + ["combined"]
    fig = go.Figure(go.Waterfall(x=labels, y=deltas + [v[-1]], measure=["absolute"] + ["relative"] * 3 + ["total"],
                                 text=[f"{v[0]:.3g}"] + factors[1:] + [f"{v[-1]:.3g} ({total})"],
                                 textposition="outside", connector={"line": {"dash": "dot"}}))
    fig.update_layout(title=title or f"{metric}: baseline -> + W4A16 -> + spec -> + P/D", template="plotly_white",
                      yaxis_title=f"{metric}{f' ({unit})' if unit else ''}", showlegend=False)
    return fig


def plot_multiplicative(mult: pd.DataFrame, title: str = "") -> go.Figure:
    """Per metric of :func:`workbench.stack.multiplicativity`: the single gains, their product and the
    combined gain (bars; 1 = no change)."""
    fig = go.Figure()
    for col in ("W4A16 alone", "spec alone", "P/D alone", "product of singles", "combined"):
        fig.add_bar(x=mult["metric"], y=mult[col], name=col, text=[f"x{x:.2f}" for x in mult[col]])
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    fig.update_layout(barmode="group", template="plotly_white", yaxis_title="gain over the baseline (x)",
                      title=title or "Is the effect multiplicative? combined gain vs the product of the single gains")
    return fig


def plot_kv_fidelity(buckets: pd.DataFrame, mark: int | None = 2048, title: str = "") -> go.Figure:
    """KL(p_ref || p_kv) (log axis) and top-1 agreement with its 95% interval per position bucket, one
    trace per KV dtype (:func:`workbench.stack.kv_study.by_bucket`); a dotted line at ``mark``."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean KL vs the full-precision cache (nats)",
                                                        "top-1 agreement"))
    for kd, g in buckets.groupby("kv_dtype", sort=False):
        x = (g["lo"] + g["hi"]) / 2
        color = _KV_COLORS.get(kd)
        fig.add_scatter(x=x, y=g["kl_mean"], mode="lines+markers", name=kd, line={"color": color},
                        text=g["bucket"], row=1, col=1)
        fig.add_scatter(x=x, y=g["top1_agreement"], mode="lines+markers", name=kd, showlegend=False,
                        line={"color": color}, text=g["bucket"], row=1, col=2,
                        error_y={"type": "data", "symmetric": False, "array": g["top1_hi"] - g["top1_agreement"],
                                 "arrayminus": g["top1_agreement"] - g["top1_lo"]})
    for c in (1, 2):
        fig.update_xaxes(type="log", title_text="position in the context (bucket centre)", row=1, col=c)
        if mark:
            fig.add_vline(x=mark, line_dash="dot", line_color="gray", row=1, col=c)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(template="plotly_white", title=title or "KV-cache fidelity by context position")
    return fig


def plot_kv_speed(speed: pd.DataFrame, title: str = "") -> go.Figure:
    """Decode step ms (left) and KV-cache MB of one sequence (right) against the context, per KV dtype
    (:func:`workbench.stack.kv_study.kv_speed`); the reference cache dashed."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode step (ms)", "KV cache of one sequence (MB)"))
    ref_done = False
    for kd, g in speed.groupby("kv_dtype", sort=False):
        color = _KV_COLORS.get(kd)
        fig.add_scatter(x=g["context"], y=g["decode_ms"], mode="lines+markers", name=kd, line={"color": color},
                        row=1, col=1)
        fig.add_scatter(x=g["context"], y=g["kv_mb"], mode="lines+markers", name=kd, showlegend=False,
                        line={"color": color}, row=1, col=2)
        if not ref_done:
            fig.add_scatter(x=g["context"], y=g["ref_decode_ms"], mode="lines", name="reference cache",
                            line={"dash": "dash", "color": "black"}, row=1, col=1)
            fig.add_scatter(x=g["context"], y=g["ref_kv_mb"], mode="lines", showlegend=False,
                            line={"dash": "dash", "color": "black"}, row=1, col=2)
            ref_done = True
    fig.update_xaxes(title_text="cached tokens")
    fig.update_layout(template="plotly_white", title=title or "KV-cache dtype: decode speed and bytes")
    return fig


def plot_whatif(whatif: pd.DataFrame, quantized: bool, title: str = "") -> go.Figure:
    """Heatmap of the predicted batch-1 decode tokens/s over (alpha, k) for one precision
    (:func:`workbench.stack.whatif_batch1`), annotated with the speedup over plain decoding."""
    g = whatif[whatif["quantized"] == quantized]
    piv = g.pivot_table(index="k", columns="alpha", values="decode_tok_s")
    sp = g.pivot_table(index="k", columns="alpha", values="speedup")
    fig = go.Figure(go.Heatmap(z=piv.to_numpy(), x=[f"{a:g}" for a in piv.columns], y=piv.index.astype(str),
                               colorscale="Viridis", colorbar={"title": "tokens/s"},
                               text=[[f"x{v:.2f}" for v in row] for row in sp.to_numpy()], texttemplate="%{text}"))
    fig.update_layout(template="plotly_white", xaxis_title="alpha", yaxis_title="k",
                      title=title or f"what-if: batch-1 decode tokens/s ({'W4A16' if quantized else 'base'} target)")
    return fig


def plot_goodput_by_deployment(load: pd.DataFrame, title: str = "") -> go.Figure:
    """Goodput (req/s meeting every SLO) against the arrival rate, one line per deployment ``label``."""
    fig = go.Figure()
    for label, g in load.sort_values("rate").groupby("label", sort=False):
        dash = "dash" if g["disaggregated"].iloc[0] else "solid"
        fig.add_scatter(x=g["rate"], y=g["goodput_rps"], mode="lines+markers", name=label, line={"dash": dash})
    fig.update_layout(template="plotly_white", xaxis_title="arrival rate (req/s)", yaxis_title="goodput (req/s)",
                      title=title or "Goodput under load, every stacked deployment")
    return fig
