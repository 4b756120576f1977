"""Notebook explorer over a precomputed quantization grid (sliders only filter a DataFrame)."""

from __future__ import annotations

import pandas as pd

from workbench.notebook import panel, table

from .plots import plot_metric_vs_bits, series_name

__all__ = ["quant_explorer"]

_GRAN_CODE = {"per_tensor": 0, "per_channel": -1}


def quant_explorer(grid: pd.DataFrame, metric: str = "kl_mean"):
    """Dropdowns and a bits slider (method, bits, granularity, group size) over ``grid`` (rows of
    :func:`workbench.quant.run_quant_sweep`). Each change redraws, through
    :func:`workbench.notebook.panel` (headless runs cannot stall on it), the ``metric``-vs-bits chart of
    the chosen series with the chosen point marked, plus that point's row (memory, KL, top-1, ppl).
    Controls with one option are hidden; exported reports show one chart per granularity. Returns a
    :class:`workbench.notebook.Panel` (a ``VBox``). Raises ``ValueError`` if ``grid`` has no quantized rows.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from IPython.display import display

    q = grid[grid["method"] != "fp"]
    if q.empty:
        raise ValueError("grid has no quantized rows; run run_quant_sweep with some configs first")
    method = W.Dropdown(options=sorted(q["method"].unique()), description="method")
    bits = W.SelectionSlider(options=sorted(int(b) for b in q["w_bits"].unique()), description="w_bits",
                             continuous_update=False)
    gran = W.Dropdown(options=sorted(q["granularity"].unique()), description="granularity")
    gs = W.Dropdown(options=sorted(int(g) for g in q.loc[q["group_size"] > 0, "group_size"].unique()) or [128],
                    description="group_size")
    cols = ["label", "w_bits", "bits_per_weight_quantized", "kl_mean", "top1_agreement", "ppl"] + [
        c for c in ("mmlu_acc", "decode_ms_b1", "runtime") if c in grid]  # few columns: the row fits beside the chart

    def show(method, bits, gran, gs):
        code = _GRAN_CODE.get(gran, gs)
        series = q[(q["method"] == method) & (q["group_size"] == code)]
        if series.empty:
            print(f"no grid point for {method} / {gran} / group_size={gs}; pick another combination")
            return
        fig = plot_metric_vs_bits(pd.concat([grid[grid["method"] == "fp"], series]), metric)
        point = series[series["w_bits"] == bits]
        if not point.empty:
            fig.add_trace(go.Scatter(x=point["w_bits"], y=point[metric], mode="markers", name="selected",
                                     marker={"size": 16, "symbol": "circle-open", "line_width": 3}))
            display(table(point.assign(series=point.apply(series_name, axis=1)), columns=["series", *cols[1:]]))
        else:
            print(f"w_bits={bits} was not measured for this series")
        fig.show()

    controls = {"method": method, "bits": bits, "gran": gran, "gs": gs}
    return panel(show, controls, rows=[["method", "gran", "gs"], ["bits"]], vary="gran")
