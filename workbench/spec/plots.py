"""Figures for the speculative-decoding study: each takes a DataFrame and returns a plotly Figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures import empty_figure, hline_trace, readable_log_axes
from workbench.spec.theory import expected_tokens_per_step, speedup


def plot_tokens_per_step(df: pd.DataFrame, color: str = "draft") -> go.Figure:
    """Histogram of tokens emitted per verification step (``run_spec`` rows, list column
    ``tokens_per_step``), as the share of steps, one bar group per ``color`` value. No rows: a figure
    that says so."""
    if df.empty:
        return empty_figure("no runs selected", title="Tokens per step")
    fig = go.Figure()
    for name, g in df.groupby(color, sort=True):
        counts = pd.Series(np.concatenate([np.asarray(x) for x in g["tokens_per_step"]])).value_counts(normalize=True)
        counts = counts.sort_index()
        fig.add_bar(x=counts.index, y=counts.values, name=str(name))
    fig.update_layout(title="Tokens per step (accepted drafts + 1 bonus/resampled)", barmode="group",
                      xaxis_title="tokens emitted in a step (tokens)", yaxis_title="share of steps (fraction)",
                      xaxis_dtick=1)
    return fig


def plot_acceptance_per_pos(df: pd.DataFrame, color: str = "draft") -> go.Figure:
    """Per-position acceptance: accepted at position i / steps that drafted position i, pooled over
    ``run_spec`` rows (list columns ``accepted_per_pos``, ``drafted_per_pos``). With the static policy
    every step drafts every position and this is vLLM's per-position acceptance rate (accepted at i /
    num_drafts); with variable k it is conditional on drafting i. No rows: a figure that says so."""
    if df.empty:
        return empty_figure("no runs selected", title="Acceptance by draft position")
    fig = go.Figure()
    for name, g in df.groupby(color, sort=True):
        n = max(len(x) for x in g["accepted_per_pos"])
        acc, dr = np.zeros(n), np.zeros(n)
        for a, d in zip(g["accepted_per_pos"], g["drafted_per_pos"]):
            acc[: len(a)] += a
            dr[: len(d)] += d
        fig.add_scatter(x=np.arange(1, n + 1), y=acc / np.maximum(dr, 1), mode="lines+markers", name=str(name))
    fig.update_layout(title="Acceptance by draft position", xaxis_title="draft position (1 = first draft token)",
                      yaxis_title="P(accepted | drafted) (fraction)", yaxis_range=[0, 1.02], xaxis_dtick=1)
    return fig


def plot_kl_alpha(summary: pd.DataFrame) -> go.Figure:
    """Left: measured alpha against KL(p || q) per draft; right: measured against predicted alpha
    (sum min(p, q) along the target's trajectory), diagonal = perfect prediction. Error bars: 95% CI."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("alpha vs KL(p||q)", "measured vs predicted alpha"))
    for (draft, temp), g in summary.groupby(["draft", "temperature"], sort=True):
        err = {"type": "data", "symmetric": False, "array": g.alpha_hi - g.alpha, "arrayminus": g.alpha - g.alpha_lo}
        label = f"{draft} T={temp:g}"
        fig.add_scatter(x=g.kl_pq, y=g.alpha, error_y=err, mode="markers", name=label, legendgroup=label,
                        row=1, col=1)
        fig.add_scatter(x=g.alpha_pred, y=g.alpha, error_y=err, mode="markers", name=label, legendgroup=label,
                        showlegend=False, row=1, col=2)
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "gray"}, name="y = x",
                    row=1, col=2)
    fig.update_xaxes(title_text="KL(p||q) per token [nats]", row=1, col=1)
    fig.update_xaxes(title_text="predicted alpha = E[sum min(p, q)]", range=[0, 1.02], row=1, col=2)
    fig.update_yaxes(title_text="measured alpha", range=[0, 1.02])
    return fig


def pooled_alpha_c(g: pd.DataFrame) -> tuple[float, float]:
    """``(alpha, c)`` of several ``summarize_spec`` rows taken together.

    alpha = sum(n_accepted) / sum(n_tested): accepted tested draft tokens over tested draft tokens,
    the definition of :func:`workbench.spec.run.summarize_spec` and of ``SpecDecodingStats.alpha``,
    and the maximum-likelihood estimate of alpha under Leviathan et al. 2023's i.i.d. model (each
    step contributes its accepted tokens as successes and its rejection, if any, as one failure).
    Averaging the rows' alphas weighted by steps instead (as this plot once did) under-weights rows of
    large k, which test more tokens per step. vLLM pools by tokens, not by steps, too: its draft
    acceptance rate is accepted / drafted tokens (``v1/spec_decode/metrics.py``).
    c = the rows' c weighted by draft tokens (total draft time / draft tokens / plain decode step
    time when the rows share the plain decode step time). Raises ``ValueError`` without the count
    columns (re-run ``summarize_spec``)."""
    missing = {"n_tested", "n_accepted", "n_draft_tokens"} - set(g.columns)
    if missing:
        raise ValueError(f"summary lacks the count columns {sorted(missing)}; build it with summarize_spec")
    alpha = float(np.clip(g.n_accepted.sum() / max(g.n_tested.sum(), 1), 0, 1))
    c = float((g.c * g.n_draft_tokens).sum() / max(g.n_draft_tokens.sum(), 1))
    return alpha, c


def plot_theory_vs_k(summary: pd.DataFrame, metric: str = "tau", k_max: int = 10) -> go.Figure:
    """Measured ``tau`` (with 95% CI) or realized ``speedup`` per k (static policy rows of
    ``summarize_spec``) against Leviathan et al. 2023's curves (Eq. 1, Theorem 3.8) at each draft's
    pooled alpha and c (:func:`pooled_alpha_c`: alpha over tested tokens, as ``summarize_spec``)."""
    if metric not in ("tau", "speedup"):
        raise ValueError(f"metric={metric!r} must be 'tau' or 'speedup'")
    s = summary[summary.policy == "static"]
    fig = go.Figure()
    ks = np.arange(1, k_max + 1)
    for i, ((draft, temp), g) in enumerate(s.groupby(["draft", "temperature"], sort=True)):
        color = f"hsl({(i * 67) % 360},60%,45%)"
        label = f"{draft} T={temp:g}"
        alpha, c = pooled_alpha_c(g)
        curve = expected_tokens_per_step(alpha, ks) if metric == "tau" else speedup(alpha, ks, c)
        fig.add_scatter(x=ks, y=curve, mode="lines", line={"color": color, "dash": "dash"},
                        name=f"{label} theory (alpha={alpha:.2f}, c={c:.2f})", legendgroup=label)
        err = {"type": "data", "symmetric": False, "array": g.tau_hi - g.tau, "arrayminus": g.tau - g.tau_lo} \
            if metric == "tau" else None
        fig.add_scatter(x=g.k, y=g[metric], error_y=err, mode="markers", marker={"color": color, "size": 9},
                        name=f"{label} measured", legendgroup=label)
    if metric == "speedup":  # a legend entry, not an annotation: no label on top of the data
        hline_trace(fig, 1.0, "plain decoding (speedup 1)", ks, dash="dot")
    fig.update_layout(title=f"{'Mean acceptance length tau' if metric == 'tau' else 'Speedup'} vs k",
                      xaxis_title="k (draft tokens per step)",
                      yaxis_title="tau [tokens/step]" if metric == "tau" else "speedup (x plain decoding)")
    return fig


def plot_policies(summary: pd.DataFrame) -> go.Figure:
    """tau and realized speedup per policy (static / heuristic / confidence), one bar group per draft."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tau [tokens/step]", "speedup"))
    fig.update_yaxes(title_text="tau (tokens/step)", col=1)
    fig.update_yaxes(title_text="speedup (x plain decoding)", col=2)
    for policy, g in summary.groupby("policy", sort=True):
        x = g.draft + " T=" + g.temperature.map("{:g}".format)
        fig.add_bar(x=x, y=g.tau, name=policy, legendgroup=policy, row=1, col=1,
                    error_y={"type": "data", "symmetric": False, "array": g.tau_hi - g.tau, "arrayminus": g.tau - g.tau_lo})
        fig.add_bar(x=x, y=g.speedup, name=policy, legendgroup=policy, showlegend=False, row=1, col=2)
    fig.update_layout(title="Draft-length policies side by side", barmode="group")
    return fig


def plot_distill(curve: pd.DataFrame) -> go.Figure:
    """Distillation curve from ``distill_draft``: held-out KL(p||q) falling, predicted alpha rising."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=curve.step, y=curve.kl, mode="lines+markers", name="KL(p||q) held out [nats]")
    fig.add_scatter(x=curve.step, y=curve.alpha_pred, mode="lines+markers", name="predicted alpha (T=1)",
                    secondary_y=True)
    if "greedy_match" in curve:
        fig.add_scatter(x=curve.step, y=curve.greedy_match, mode="lines+markers", name="greedy match",
                        secondary_y=True)
    fig.update_layout(title="Draft distillation", xaxis_title="training step")
    fig.update_yaxes(title_text="KL [nats/token]", type="log", secondary_y=False)
    fig.update_yaxes(title_text="alpha, greedy match (fraction)", range=[0, 1], secondary_y=True)
    return readable_log_axes(fig)


__all__ = [
    "plot_acceptance_per_pos",
    "plot_distill",
    "plot_kl_alpha",
    "plot_policies",
    "plot_theory_vs_k",
    "plot_tokens_per_step",
    "pooled_alpha_c",
]
