"""Slider panels over the stacked study's precomputed grids (nothing is measured or simulated on a
slider move; :func:`workbench.notebook.interactive_output` redraws plain figures)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.notebook import interactive_output
from workbench.stack import plots

__all__ = ["load_explorer", "whatif_explorer"]


def _pick(options: list, value):
    return min(options, key=lambda o: abs(o - value)) if value is not None else options[len(options) // 2]


def load_explorer(load: pd.DataFrame, *, load_fraction: float | None = None):
    """A ``VBox``: sliders for the load (arrival rate / baseline capacity), the SLO scale and the P:D
    split over the ``load`` grid of :class:`workbench.stack.StackResult`; below them goodput vs rate
    for every deployment of that split and SLO scale, and a bar chart of goodput and p99 TPOT at the
    chosen load."""
    import ipywidgets as widgets

    fracs = sorted(load["load"].unique().tolist())
    scales = sorted(load["slo_scale"].unique().tolist())
    splits = sorted({(int(p), int(d)) for p, d in load[["n_prefill", "n_decode"]].to_numpy()})
    w = {"frac": widgets.SelectionSlider(options=fracs, value=_pick(fracs, load_fraction), description="load",
                                         continuous_update=False),
         "scale": widgets.SelectionSlider(options=scales, value=_pick(scales, 1.0), description="SLO x",
                                          continuous_update=False),
         "split": widgets.Dropdown(options=[(f"{p}P:{d}D", (p, d)) for p, d in splits], description="P:D split")}

    def draw(frac, scale, split):
        g = load[(load["n_prefill"] == split[0]) & (load["n_decode"] == split[1]) & np.isclose(load["slo_scale"], scale)]
        plots.plot_goodput_by_deployment(g, title=f"goodput vs rate, {split[0]}P:{split[1]}D, SLO x{scale:g}").show()
        at = g[np.isclose(g["load"], frac)].sort_values("goodput_rps")
        fig = go.Figure(go.Bar(y=at["label"], x=at["goodput_rps"], orientation="h",
                                           text=[f"p99 TPOT {t:.3g} ms" for t in at["p99_tpot_ms"]]))
        fig.update_layout(template="plotly_white", xaxis_title="goodput (req/s)",
                          title=f"at load {frac:g} x the baseline's capacity ({at['rate'].iloc[0]:.3g} req/s)")
        fig.show()

    out = interactive_output(draw, w)
    return widgets.VBox([widgets.HBox(list(w.values())), out])


def whatif_explorer(whatif: pd.DataFrame, whatif_load: pd.DataFrame, *, alpha: float | None = None,
                    k: int | None = None, load_fraction: float | None = None):
    """A ``VBox``: sliders for alpha, k and the load over the what-if grids of
    :class:`workbench.stack.StackResult`; below them the predicted batch-1 decode tokens/s of each
    precision (plain and speculative) and the simulated goodput of the speculative deployments."""
    import ipywidgets as widgets

    alphas = sorted(whatif["alpha"].unique().tolist())
    ks = sorted(whatif["k"].unique().tolist())
    fracs = sorted(whatif_load["load"].unique().tolist())
    w = {"alpha": widgets.SelectionSlider(options=alphas, value=_pick(alphas, alpha), description="alpha",
                                          continuous_update=False),
         "k": widgets.SelectionSlider(options=ks, value=_pick(ks, k), description="k", continuous_update=False),
         "frac": widgets.SelectionSlider(options=fracs, value=_pick(fracs, load_fraction), description="load",
                                         continuous_update=False)}

    def draw(alpha, k, frac):
        b1 = whatif[np.isclose(whatif["alpha"], alpha) & (whatif["k"] == k)]
        names = ["W4A16" if q else "base" for q in b1["quantized"]]
        fig = go.Figure()
        fig.add_bar(x=names, y=b1["plain_tok_s"], name="plain decoding")
        fig.add_bar(x=names, y=b1["decode_tok_s"], name="spec (predicted)",
                    text=[f"x{s:.2f}" for s in b1["speedup"]])
        fig.update_layout(barmode="group", template="plotly_white", yaxis_title="batch-1 decode tokens/s",
                          title=f"what-if alpha={alpha:g}, k={k}: batch 1")
        fig.show()
        ld = whatif_load[np.isclose(whatif_load["alpha"], alpha) & (whatif_load["k"] == k)
                         & np.isclose(whatif_load["load"], frac)]
        fig2 = go.Figure(go.Bar(y=ld["label"], x=ld["goodput_rps"], orientation="h"))
        fig2.update_layout(template="plotly_white", xaxis_title="goodput (req/s)",
                           title=f"what-if alpha={alpha:g}, k={k}: goodput at load {frac:g}")
        fig2.show()

    out = interactive_output(draw, w)
    return widgets.VBox([widgets.HBox(list(w.values())), out])
