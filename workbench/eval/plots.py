"""Figures for MMLU results: pure functions, DataFrame in, plotly Figure out.

Every figure draws chance level, and marks each accuracy whose 95% interval includes it (grey bars,
open markers, "CI includes chance" in its label): such a figure is no evidence of anything above
guessing, and a difference between two of them is no evidence of a drop.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.eval.mmlu import CHANCE

__all__ = ["plot_mmlu_by_shots", "plot_mmlu_formulations", "plot_mmlu_subjects"]

AGG = ("micro", "macro")
FLAG = "CI includes chance"
_GREY, _BLUE = "#b0b0b0", "#4c78a8"


def _select(summary: pd.DataFrame, **eq) -> pd.DataFrame:
    s = summary
    for col, v in eq.items():
        if v is not None and col in s:
            s = s[s[col] == v]
    return s


def _chance(s: pd.DataFrame) -> float:
    return float(s["chance"].iloc[0]) if "chance" in s and len(s) else CHANCE


def _includes_chance(s: pd.DataFrame) -> pd.Series:
    if "ci_includes_chance" in s:
        return s["ci_includes_chance"].astype(bool)
    c = _chance(s)
    return (s["ci_lo"] <= c) & (c <= s["ci_hi"])


def _err(s: pd.DataFrame) -> dict:
    return {"type": "data", "symmetric": False, "array": s["ci_hi"] - s["acc"], "arrayminus": s["acc"] - s["ci_lo"]}


def plot_mmlu_subjects(summary: pd.DataFrame, n_shot: int | None = None, title: str | None = None,
                       formulation: str | None = None, metric: str = "acc") -> go.Figure:
    """Per-subject accuracy with 95% CI error bars, sorted; micro, macro and chance lines.

    ``summary``: rows of :func:`workbench.eval.mmlu.summarize_mmlu`; ``n_shot``, ``formulation``,
    ``metric`` pick one run when the frame holds several. Subjects whose interval includes chance
    are grey; the micro/macro labels say so too. Raises ValueError when the selection is empty.
    """
    s = _select(summary, n_shot=n_shot, formulation=formulation, metric=metric)
    if not len(s):
        raise ValueError(f"no summary rows for n_shot={n_shot}, formulation={formulation!r}, metric={metric!r}")
    subj = s[~s["subject"].isin(AGG)].sort_values("acc")
    flag = _includes_chance(subj)
    fig = go.Figure(go.Bar(
        x=subj["subject"].str.replace("_", " "), y=subj["acc"], error_y={**_err(subj), "thickness": 1},
        marker_color=[_GREY if f else _BLUE for f in flag], customdata=subj[["correct", "n"]],
        hovertext=[FLAG if f else "" for f in flag],
        hovertemplate="%{x}<br>acc %{y:.3f} (%{customdata[0]}/%{customdata[1]})<br>%{hovertext}<extra></extra>"))
    # micro's label above its line at the left, macro's below its line at the right, chance's below
    # at the left: apart even when all three lines coincide (a model at chance)
    for name, dash, where in (("micro", "solid", "top left"), ("macro", "dash", "bottom right")):
        row = s[s["subject"] == name]
        if len(row):
            r = row.iloc[0]
            note = f" ({FLAG})" if bool(_includes_chance(row).iloc[0]) else ""
            fig.add_hline(y=r["acc"], line_dash=dash, line_color="firebrick", annotation_position=where,
                          annotation_text=f"{name} {r['acc']:.3f} [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}]{note}")
    c = _chance(s)
    fig.add_hline(y=c, line_dash="dot", line_color="gray", annotation_text=f"chance {c:.2f}",
                  annotation_position="bottom left")
    shots = f"{n_shot}-shot " if n_shot is not None else ""
    what = f"{formulation} " if formulation else ""
    fig.update_layout(title=title or f"MMLU {what}{shots}{metric} per subject (95% Wilson CI; grey: {FLAG})",
                      yaxis_title=metric, yaxis_range=[0, 1], xaxis_tickangle=-60, height=520,
                      margin={"b": 220}, showlegend=False)
    return fig


def plot_mmlu_by_shots(summary: pd.DataFrame, metric: str = "acc") -> go.Figure:
    """Micro and macro accuracy against the number of shots, per formulation, with 95% CIs; open
    markers where the interval includes chance."""
    s = _select(summary, metric=metric)
    fig = go.Figure()
    forms = sorted(s["formulation"].unique()) if "formulation" in s else [None]
    for form in forms:
        for name in AGG:
            g = _select(s[s["subject"] == name], formulation=form).sort_values("n_shot")
            if not len(g):
                continue
            flag = _includes_chance(g)
            label = name if form is None else f"{form} {name}"
            fig.add_trace(go.Scatter(
                x=g["n_shot"], y=g["acc"], mode="lines+markers", name=label, error_y=_err(g),
                line_dash="solid" if name == "micro" else "dash",
                marker={"size": 10, "symbol": ["circle-open" if f else "circle" for f in flag]},
                hovertext=[FLAG if f else "" for f in flag],
                hovertemplate=f"{label}<br>%{{x}}-shot acc %{{y:.3f}}<br>%{{hovertext}}<extra></extra>"))
    c = _chance(s)
    fig.add_hline(y=c, line_dash="dot", line_color="gray", annotation_text=f"chance {c:.2f}",
                  annotation_position="bottom right")
    fig.update_layout(title=f"MMLU {metric} vs number of shots (95% CI; open markers: {FLAG})",
                      xaxis_title="shots", yaxis_title=metric, yaxis_range=[0, 1], xaxis_dtick=1)
    return fig


def plot_mmlu_formulations(summary: pd.DataFrame, n_shot: int | None = None, subject: str = "micro") -> go.Figure:
    """One bar per formulation and metric (``subject`` row, default micro) with its 95% CI and chance
    level; a bar whose interval includes chance is grey and labelled so. Raises ValueError when the
    selection is empty."""
    s = _select(summary[summary["subject"] == subject], n_shot=n_shot)
    if not len(s):
        raise ValueError(f"no {subject!r} rows for n_shot={n_shot}")
    s = s.sort_values([c for c in ("formulation", "metric", "n_shot") if c in s])
    parts = [c for c in ("formulation", "metric", "n_shot") if c in s and (c == "formulation" or s[c].nunique() > 1)]
    x = s[parts].astype(str).agg(" ".join, axis=1) if parts else s["subject"]
    flag = _includes_chance(s)
    fig = go.Figure(go.Bar(x=x, y=s["acc"], error_y=_err(s), marker_color=[_GREY if f else _BLUE for f in flag],
                           text=[f"{a:.3f}" + (f"<br>{FLAG}" if f else "") for a, f in zip(s["acc"], flag)],
                           textposition="outside"))
    c = _chance(s)
    fig.add_hline(y=c, line_dash="dot", line_color="gray", annotation_text=f"chance {c:.2f}",
                  annotation_position="bottom right")
    shots = f", {n_shot}-shot" if n_shot is not None else ""
    fig.update_layout(title=f"MMLU {subject} accuracy by formulation{shots} (95% CI)", yaxis_title="accuracy",
                      yaxis_range=[0, 1], showlegend=False)
    return fig
