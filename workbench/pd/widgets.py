"""Slider panel over a precomputed simulation grid (:func:`workbench.notebook.panel` redrawing plain
figures; the sliders only filter, nothing is simulated on a slider move)."""

from __future__ import annotations

import pandas as pd

from workbench.notebook import panel
from workbench.pd import plots
from workbench.pd.sim.grid import select_deployments

__all__ = ["policy_explorer"]


def pick(options: list, value):
    """``value`` if it is one of ``options``, else the first option."""
    return value if value in options else options[0]


def policy_explorer(summary: pd.DataFrame, quantiles: pd.DataFrame, slo=None, *, rate=None,
                    chunk_budget: int = 512, link_gbs: float | None = None):
    """A ``VBox``: sliders for workload (lengths), arrival rate, policies shown, P:D split, chunk budget
    and link bandwidth, over ``summary`` / ``quantiles`` from :func:`workbench.pd.sim.sweep_grid`;
    below them the goodput-vs-rate figure and the TTFT/TPOT CDFs at the chosen rate. Drawn through
    :func:`workbench.notebook.panel` (headless runs cannot stall on it); controls with one option are
    hidden, and an exported report shows the figures at each rate. Returns a
    :class:`workbench.notebook.Panel` (a ``VBox``: two rows of controls, then the figures)."""
    import ipywidgets as widgets

    rates = sorted(summary["rate"].unique().tolist())
    dis = summary[summary["policy"] == "disaggregated"]
    splits = sorted({(int(p), int(d)) for p, d in dis[["n_prefill", "n_decode"]].to_numpy()})
    budgets = sorted(summary.loc[summary["policy"] == "chunked", "chunk_budget"].unique().tolist())
    links = sorted(dis["link_gbs"].unique().tolist())
    policies = ("colocated", "chunked", "disaggregated")
    w = {
        "workload": widgets.Dropdown(options=list(summary["workload"].unique()), description="lengths"),
        "rate": widgets.SelectionSlider(options=rates, value=pick(rates, rate), description="rate req/s",
                                        continuous_update=False),
        "policies": widgets.SelectMultiple(options=policies, value=policies, description="policy"),
        "split": widgets.Dropdown(options=[(f"{p}P:{d}D", (p, d)) for p, d in splits], description="P:D split"),
        "budget": widgets.Dropdown(options=budgets, value=pick(budgets, chunk_budget), description="chunk budget"),
        "link": widgets.Dropdown(options=links, value=pick(links, link_gbs), description="link GB/s"),
    }

    def draw(workload, rate, policies, split, budget, link):
        s = summary[(summary["workload"] == workload) & summary["policy"].isin(policies)]
        q = quantiles[(quantiles["workload"] == workload) & (quantiles["rate"] == rate)
                      & quantiles["policy"].isin(policies)]
        n = split[0] + split[1]
        plots.plot_goodput(select_deployments(s, *split, budget, link),
                           title=f"goodput vs rate, {n} GPUs, {workload}").show()
        plots.plot_cdfs(select_deployments(q, *split, budget, link), by="label", slo=slo,
                        title=f"TTFT and TPOT CDFs at {rate:g} req/s").show()

    names = list(w)
    return panel(draw, w, rows=[names[:3], names[3:]], vary="rate")
