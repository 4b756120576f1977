"""Figures for MMLU results: pure functions, DataFrame in, plotly Figure out."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

__all__ = ["plot_mmlu_by_shots", "plot_mmlu_subjects"]

CHANCE = 0.25  # four choices


def plot_mmlu_subjects(summary: pd.DataFrame, n_shot: int | None = None, title: str | None = None) -> go.Figure:
    """Per-subject accuracy with 95% CI error bars, sorted, with micro, macro and chance lines.

    ``summary``: rows of :func:`workbench.eval.mmlu.summarize_mmlu`; ``n_shot`` picks one run when
    the frame holds several.
    """
    s = summary if n_shot is None or "n_shot" not in summary else summary[summary["n_shot"] == n_shot]
    subj = s[~s["subject"].isin(["micro", "macro"])].sort_values("acc")
    fig = go.Figure(go.Bar(
        x=subj["subject"].str.replace("_", " "), y=subj["acc"],
        error_y={"type": "data", "symmetric": False, "array": subj["ci_hi"] - subj["acc"],
                     "arrayminus": subj["acc"] - subj["ci_lo"], "thickness": 1},
        customdata=subj[["correct", "n"]], hovertemplate="%{x}<br>acc %{y:.3f} (%{customdata[0]}/%{customdata[1]})<extra></extra>",
        name="subject"))
    for name, dash in (("micro", "solid"), ("macro", "dash")):
        row = s[s["subject"] == name]
        if len(row):
            r = row.iloc[0]
            fig.add_hline(y=r["acc"], line_dash=dash, line_color="firebrick",
                          annotation_text=f"{name} {r['acc']:.3f} [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}]",
                          annotation_position="top left")
    fig.add_hline(y=CHANCE, line_dash="dot", line_color="gray", annotation_text="chance 0.25",
                  annotation_position="bottom right")
    shots = f"{n_shot}-shot " if n_shot is not None else ""
    fig.update_layout(title=title or f"MMLU {shots}accuracy per subject (95% Wilson CI)", yaxis_title="accuracy",
                      yaxis_range=[0, 1], xaxis_tickangle=-60, height=520, margin={"b": 220}, showlegend=False)
    return fig


def plot_mmlu_by_shots(summary: pd.DataFrame) -> go.Figure:
    """Micro and macro accuracy against the number of shots, with 95% CIs."""
    fig = go.Figure()
    for name in ("micro", "macro"):
        s = summary[summary["subject"] == name].sort_values("n_shot")
        fig.add_trace(go.Scatter(x=s["n_shot"], y=s["acc"], mode="lines+markers", name=name,
                                 error_y={"type": "data", "symmetric": False, "array": s["ci_hi"] - s["acc"],
                                              "arrayminus": s["acc"] - s["ci_lo"]}))
    fig.add_hline(y=CHANCE, line_dash="dot", line_color="gray", annotation_text="chance")
    fig.update_layout(title="MMLU accuracy vs number of shots (95% CI)", xaxis_title="shots",
                      yaxis_title="accuracy", yaxis_range=[0, 1], xaxis_dtick=1)
    return fig
