"""Simulator vs vLLM side by side: a tidy comparison table and its figure (DataFrame in, Figure out)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["SERVING_METRICS", "SPEC_METRICS", "compare_sim_vllm", "plot_sim_vs_vllm"]

SERVING_METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms",
                   "mean_e2e_ms", "throughput_rps", "goodput_rps")
SPEC_METRICS = ("tau", "draft_acceptance_rate", "alpha")


def compare_sim_vllm(sim: pd.DataFrame, vllm: pd.DataFrame, metrics=SERVING_METRICS + SPEC_METRICS) -> pd.DataFrame:
    """Long table ``metric, sim, vllm, err_pct`` (``100 * (sim - vllm) / vllm``) for the ``metrics``
    present in both one-row summaries (``workbench.pd.metrics.summarize`` or
    ``SpecDecodingStats.summary()`` rows vs :func:`workbench.bridges.vllm_metrics.read_bench_serve` /
    ``read_spec_metrics`` rows). Raises ``ValueError`` when a summary has more than one row or no
    metric is shared."""
    if len(sim) != 1 or len(vllm) != 1:
        raise ValueError(f"compare_sim_vllm takes one-row summaries; got {len(sim)} and {len(vllm)} rows "
                         "(filter one configuration first)")
    rows = []
    for m in metrics:
        if m in sim and m in vllm:
            s, v = float(sim[m].iloc[0]), float(vllm[m].iloc[0])
            if np.isfinite(s) or np.isfinite(v):
                rows.append({"metric": m, "sim": s, "vllm": v, "err_pct": 100 * (s - v) / v if v else np.nan})
    if not rows:
        raise ValueError(f"no metric of {list(metrics)} is in both summaries; sim has {list(sim.columns)[:10]}...")
    return pd.DataFrame(rows)


def plot_sim_vs_vllm(compare: pd.DataFrame, title: str = "") -> go.Figure:
    """Grouped bars, simulator vs vLLM, one panel per unit (ms, req/s, tokens or rates), the
    simulator's error in % above its bars. ``compare`` from :func:`compare_sim_vllm`."""
    units = {"ms": lambda m: m.endswith("_ms"), "req/s": lambda m: m.endswith("_rps"),
             "ratio": lambda m: not (m.endswith(("_ms", "_rps")))}
    panels = [(u, compare[[f(m) for m in compare["metric"]]]) for u, f in units.items()]
    panels = [(u, p) for u, p in panels if len(p)]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[u for u, _ in panels])
    for col, (unit, part) in enumerate(panels, start=1):
        fig.add_bar(x=part["metric"], y=part["vllm"], name="vLLM", marker_color="#7f7f7f", legendgroup="vllm",
                    showlegend=col == 1, row=1, col=col)
        fig.add_bar(x=part["metric"], y=part["sim"], name="simulator", marker_color="#1f77b4", legendgroup="sim",
                    showlegend=col == 1, text=[f"{e:+.0f}%" if np.isfinite(e) else "" for e in part["err_pct"]],
                    textposition="outside", row=1, col=col)
        fig.update_yaxes(title_text=unit, row=1, col=col)
    fig.update_layout(barmode="group", title=title or "Simulator vs vLLM", template="plotly_white")
    return fig
