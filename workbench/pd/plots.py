"""Figures for the prefill/decode study: DataFrame in, plotly Figure out, nothing else."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures import empty_figure, readable_log_axes
from workbench.pd.costmodel import CostModel
from workbench.pd.loop import MIN_DRIFT_PCT

__all__ = ["goodput_note", "plot_cdfs", "plot_decode_profile", "plot_goodput", "plot_prefill_profile",
           "plot_sim_vs_real"]

_COLORS = {"colocated": "#1f77b4", "chunked": "#2ca02c", "disaggregated": "#d62728"}


def plot_prefill_profile(profile: pd.DataFrame, cost: CostModel | None = None, title: str = "") -> go.Figure:
    """Prefill step ms against tokens in the step (one trace per batch size), the roofline floor
    (``floor_ms``, from :func:`workbench.pd.profile.with_floors`) dashed, the fitted cost dotted."""
    df = profile[profile["phase"] == "prefill"].sort_values("n_tokens")
    fig = go.Figure()
    for b, part in df.groupby("batch"):
        fig.add_scatter(x=part["n_tokens"], y=part["ms"], mode="markers+lines", name=f"measured, batch {b}",
                        error_y={"type": "data", "array": part.get("ms_iqr", None), "visible": "ms_iqr" in part})
        if "floor_ms" in part:
            fig.add_scatter(x=part["n_tokens"], y=part["floor_ms"], mode="lines", line={"dash": "dash"},
                            name=f"roofline floor, batch {b}")
        if cost is not None:
            fig.add_scatter(x=part["n_tokens"], y=cost.prefill_ms(part["n_tokens"], part["attn_sq"]),
                            mode="lines", line={"dash": "dot"}, name=f"fit, batch {b}")
    fig.update_layout(title=title or "Prefill step time vs tokens", xaxis_title="prompt tokens in the step (tokens)",
                      yaxis_title="step time (ms)", template="plotly_white")
    return fig


def plot_decode_profile(profile: pd.DataFrame, cost: CostModel | None = None, title: str = "") -> go.Figure:
    """Decode step ms against batch size (one trace per context length), bandwidth floor dashed."""
    df = profile[profile["phase"] == "decode"].sort_values("batch")
    fig = go.Figure()
    for L, part in df.groupby("seq_len"):
        fig.add_scatter(x=part["batch"], y=part["ms"], mode="markers+lines", name=f"measured, context {L}",
                        error_y={"type": "data", "array": part.get("ms_iqr", None), "visible": "ms_iqr" in part})
        if "bandwidth_floor_ms" in part:
            fig.add_scatter(x=part["batch"], y=part["bandwidth_floor_ms"], mode="lines",
                            line={"dash": "dash"}, name=f"bandwidth floor, context {L}")
        if cost is not None:
            fig.add_scatter(x=part["batch"], y=cost.decode_ms(part["batch"], part["kv_tokens"]), mode="lines",
                            line={"dash": "dot"}, name=f"fit, context {L}")
    fig.update_layout(title=title or "Decode step time vs batch", xaxis_title="sequences in the batch (count)",
                      yaxis_title="step time (ms)", template="plotly_white")
    return fig


def _ecdf(v: np.ndarray):
    v = np.sort(v[np.isfinite(v)])
    return v, np.arange(1, v.size + 1) / max(v.size, 1)


def plot_cdfs(requests: pd.DataFrame, *, by: str = "policy", slo=None, title: str = "") -> go.Figure:
    """Side-by-side empirical CDFs of ``ttft_ms`` and ``tpot_ms``, one line per value of ``by``;
    SLO thresholds (an :class:`~workbench.pd.sim.SLO`) as vertical lines. ``requests`` holds one
    row per request, or quantile rows with a ``q`` column (from :func:`workbench.pd.sim.sweep_grid`).
    Log x axes with plain-notation ticks; an empty frame gives a figure that says nothing is selected."""
    if requests.empty:
        return empty_figure("nothing selected: pick at least one policy", title=title or "TTFT and TPOT CDFs")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"))
    for key, part in requests.groupby(by, sort=False):
        color = _COLORS.get(str(part["policy"].iloc[0])) if "policy" in part else None
        for col, metric in ((1, "ttft_ms"), (2, "tpot_ms")):
            if "q" in part:
                x, y = part[metric].to_numpy(np.float64), part["q"].to_numpy(np.float64)
            else:
                x, y = _ecdf(part[metric].to_numpy(np.float64))
            fig.add_scatter(x=x, y=y, mode="lines", name=str(key), legendgroup=str(key), showlegend=col == 1,
                            line={"color": color}, row=1, col=col)
    if slo is not None:
        for col, lim in ((1, slo.ttft_ms), (2, slo.tpot_ms)):
            if lim is not None:
                fig.add_vline(x=lim, line={"dash": "dash", "color": "gray"}, row=1, col=col)
    fig.update_xaxes(title_text="TTFT (ms)", type="log", col=1)
    fig.update_xaxes(title_text="TPOT (ms)", type="log", col=2)
    fig.update_yaxes(title_text="CDF (fraction of requests)", range=[0, 1.02])
    fig.update_layout(title=title or "TTFT and TPOT CDFs", template="plotly_white")
    return readable_log_axes(fig)


def goodput_note(summary: pd.DataFrame) -> str:
    """The goodput definition as the chart states it, with the SLOs of ``summary`` (``slo_*_ms`` columns)."""
    slos = [f"{name} <= {summary[col].iloc[0]:g} ms" for name, col in
            (("TTFT", "slo_ttft_ms"), ("TPOT", "slo_tpot_ms"), ("E2E", "slo_e2e_ms"))
            if col in summary and len(summary) and pd.notna(summary[col].iloc[0])]
    return ("goodput = requests meeting every SLO" + (f" ({', '.join(slos)})" if slos else "")
            + " / (last finish - first arrival), as vllm bench serve --goodput.<br>At 100% attainment it can "
            "still sit below the rate line: that window runs until the last (often the longest) request finishes, and the "
            "sampled arrivals' rate differs from the nominal one.")


def plot_goodput(summary: pd.DataFrame, *, x: str = "rate", title: str = "") -> go.Figure:
    """Goodput (req/s meeting every SLO) and SLO attainment against arrival rate, one line per ``label``
    (from :func:`workbench.pd.sim.goodput_vs_rate`); the ideal goodput = rate as a gray diagonal, and
    the goodput definition (:func:`goodput_note`) as the subtitle. An empty frame gives a figure that
    says nothing is selected."""
    if summary.empty:
        return empty_figure("nothing selected: pick at least one policy", title=title or "Goodput vs request rate")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("goodput", "SLO attainment"))
    for label, part in summary.groupby("label", sort=False):
        part = part.sort_values(x)
        color = _COLORS.get(str(part["policy"].iloc[0])) if "policy" in part else None
        fig.add_scatter(x=part[x], y=part["goodput_rps"], mode="lines+markers", name=str(label),
                        legendgroup=str(label), line={"color": color}, row=1, col=1)
        fig.add_scatter(x=part[x], y=part["slo_attainment"], mode="lines+markers", name=str(label),
                        legendgroup=str(label), showlegend=False, line={"color": color}, row=1, col=2)
    r = np.sort(summary[x].unique())
    fig.add_scatter(x=r, y=r, mode="lines", line={"color": "lightgray", "dash": "dot"}, name="goodput = rate",
                    row=1, col=1)
    fig.update_xaxes(title_text="arrival rate (req/s)")
    fig.update_yaxes(title_text="goodput (req/s)", col=1)
    fig.update_yaxes(title_text="SLO attainment (fraction of requests)", range=[0, 1.02], col=2)
    # the definition as the title's subtitle: above the plots, where it overlaps neither axis titles nor data
    fig.update_layout(title={"text": title or "Goodput vs request rate",
                             "subtitle": {"text": goodput_note(summary), "font": {"size": 11, "color": "#555"}}},
                      template="plotly_white", margin={"t": 120})
    return fig


def plot_sim_vs_real(compare: pd.DataFrame, title: str = "") -> go.Figure:
    """Grouped bars of measured vs simulated metrics (from :func:`workbench.pd.loop.compare_to_sim`),
    error in % as text. With ``drift_pct``/``warning`` columns (a drift check), the machine's speed
    change is named under the title and each error within it is marked "!". With a ``rate`` column (several
    loads) each bar is labelled with its metric and rate."""
    warn = compare["warning"].to_numpy(bool) if "warning" in compare else np.zeros(len(compare), bool)
    text = [f"{e:+.0f}%" + ("!" if w else "") for e, w in zip(compare["err_pct"], warn)]
    x = compare["metric"]
    if "rate" in compare:  # several loads (VLLMEngine.run_pd): one group per metric and rate
        x = [f"{m} @ {r:.3g}/s" for m, r in zip(compare["metric"], compare["rate"])]
    fig = go.Figure()
    fig.add_bar(x=x, y=compare["real"], name="measured")
    fig.add_bar(x=x, y=compare["sim"], name="simulated", text=text, textposition="outside")
    title = title or "Simulator vs real loop"
    if "drift_pct" in compare and compare["drift_pct"].abs().max() >= MIN_DRIFT_PCT:
        moved = compare["drift_pct"].abs().max()
        title += (f"<br><sup>the machine's speed moved by {moved:.0f}% between the profile and a re-measurement "
                  f"after the loop: errors marked ! are within that and say nothing about the simulator</sup>")
    fig.update_layout(barmode="group", title=title, yaxis_title="ms", template="plotly_white")
    return fig
