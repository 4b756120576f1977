"""Slider explorer over a precomputed ``run_spec`` grid: sliders only filter, nothing is recomputed."""

from __future__ import annotations

import pandas as pd

from workbench.notebook import panel
from workbench.spec.plots import plot_acceptance_per_pos, plot_tokens_per_step
from workbench.spec.run import summarize_spec


def explorer(df: pd.DataFrame):
    """``ipywidgets`` box: draft, k, temperature and policy selectors (``continuous_update=False``)
    redrawing the tokens-per-step histogram, the per-position acceptance and the pooled metrics of the
    matching ``run_spec`` rows (:func:`workbench.notebook.panel` redrawing plain figures, DESIGN.md;
    controls with one option hidden; exported reports show one set of charts per draft). Returns a
    :class:`workbench.notebook.Panel` (a ``VBox``)."""
    import ipywidgets as w
    from IPython.display import display

    def options(col):
        return sorted(df[col].unique().tolist())

    controls = {
        "draft": w.Dropdown(options=options("draft"), description="draft"),
        "k": w.SelectionSlider(options=options("k"), description="k", continuous_update=False),
        "temperature": w.SelectionSlider(options=options("temperature"), description="temperature",
                                         continuous_update=False),
        "policy": w.Dropdown(options=options("policy"), description="policy"),
    }

    def show(draft, k, temperature, policy):
        sel = df[(df.draft == draft) & (df.k == k) & (df.temperature == temperature) & (df.policy == policy)]
        if sel.empty:
            print(f"no runs for draft={draft}, k={k}, T={temperature}, policy={policy} in the grid; "
                  f"available (k, policy): {sorted(set(zip(df.k, df.policy)))}")
            return
        s = summarize_spec(sel).iloc[0]
        print(f"alpha {s.alpha:.3f} [{s.alpha_lo:.3f}, {s.alpha_hi:.3f}]  predicted {s.alpha_pred:.3f}  "
              f"tau {s.tau:.2f} [{s.tau_lo:.2f}, {s.tau_hi:.2f}]  c {s.c:.2f}  speedup {s.speedup:.2f} "
              f"(theory {s.speedup_theory:.2f})")
        display(plot_tokens_per_step(sel))
        display(plot_acceptance_per_pos(sel))

    return panel(show, controls, vary="draft")


__all__ = ["explorer"]
