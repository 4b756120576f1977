"""Plotly figures for quantization sweeps and per-layer reports (DataFrame in, Figure out)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.figures import empty_figure, hline_trace, readable_log_axes

__all__ = [
    "axis_title",
    "plot_group_size_trend",
    "plot_layer_heatmap",
    "plot_memory_vs_bits",
    "plot_metric_vs_bits",
    "plot_mmlu_vs_bits",
    "plot_pareto",
    "plot_speed",
    "series_name",
]

_LAYER_ORDER = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# axis titles with units, by sweep column
AXIS_TITLES = {
    "kl_mean": "KL(p_fp || p_q) mean (nats/token)", "kl_p95": "KL(p_fp || p_q) p95 (nats/token)",
    "top1_agreement": "top-1 agreement (fraction of tokens)", "ppl": "perplexity (WikiText-2 test)",
    "ppl_q": "perplexity (WikiText-2 test)", "cosine": "cosine similarity of logits", "w_bits": "weight bits (w_bits)",
    "mmlu_acc": "MMLU accuracy (fraction correct)", "rel_err": "relative weight error ||W_hat - W|| / ||W||",
    "weight_mse": "weight MSE", "max_abs_err": "max |W_hat - W|",
}


def axis_title(col: str) -> str:
    """The axis title of a sweep column, with its unit (the column name itself when none is known)."""
    return AXIS_TITLES.get(col, col)


def series_name(r) -> str:
    """Legend name of a sweep row: method, granularity (group size) and symmetry, e.g. ``RTN g128 asym``."""
    if r["method"] == "fp":
        return "FP"
    g = int(r["group_size"])
    gran = {0: "tensor", -1: "channel"}.get(g, f"g{g}")
    zp = "sym" if r["symmetric"] else ("asym-fz" if r.get("zero_point", "int") == "float" else "asym")
    return f"{str(r['method']).upper()} {gran} {zp}"


def _q(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df["method"] != "fp"].copy()
    d["series"] = d.apply(series_name, axis=1) if len(d) else pd.Series(dtype=str)
    return d.sort_values(["series", "w_bits"])


def _fp(df: pd.DataFrame):
    fp = df[df["method"] == "fp"]
    return None if fp.empty else fp.iloc[0]


def plot_memory_vs_bits(df: pd.DataFrame) -> go.Figure:
    """Measured weight bytes (MiB, codes + scales + zeros + float rest) against weight bits, one line
    per method/granularity; the FP model as a dashed line. Columns: ``method, w_bits, group_size,
    symmetric, weight_bytes``."""
    fig = go.Figure()
    for name, g in _q(df).groupby("series", sort=True):
        fig.add_trace(go.Scatter(x=g["w_bits"], y=g["weight_bytes"] / 2**20, mode="lines+markers", name=name))
    fp = _fp(df)
    if fp is not None:
        hline_trace(fig, fp["weight_bytes"] / 2**20, f"FP {fp['weight_bytes'] / 2**20:,.0f} MiB")
    fig.update_layout(title="Weight memory vs bits (measured bytes)", xaxis_title=axis_title("w_bits"),
                      yaxis_title="weight memory (MiB)", template="plotly_white")
    return fig


def plot_metric_vs_bits(df: pd.DataFrame, metric: str = "kl_mean", log_y: bool | None = None) -> go.Figure:
    """``metric`` (``kl_mean``, ``kl_p95``, ``top1_agreement``, ``ppl``...) against ``w_bits``, one line per
    method/granularity. KL is drawn on a log axis by default, with ticks in plain notation. A frame
    with no quantized row gives a figure that says so instead of empty axes."""
    if metric not in df:
        raise ValueError(f"column {metric!r} not in the DataFrame; have {sorted(df.columns)}")
    if _q(df).empty:
        return empty_figure("no quantized point selected: pick a method and granularity the grid has",
                            title=f"{metric} vs weight bits")
    fig = go.Figure()
    for name, g in _q(df).groupby("series", sort=True):
        fig.add_trace(go.Scatter(x=g["w_bits"], y=g[metric], mode="lines+markers", name=name))
    fp = _fp(df)
    if fp is not None and metric in ("ppl", "ppl_q"):
        hline_trace(fig, fp[metric], f"FP {fp[metric]:.1f}")
    log_y = metric.startswith("kl") if log_y is None else log_y
    fig.update_layout(title=f"{metric} vs weight bits", xaxis_title=axis_title("w_bits"),
                      yaxis_title=axis_title(metric), yaxis_type="log" if log_y else "linear",
                      template="plotly_white", xaxis_dtick=1)
    return readable_log_axes(fig)


def plot_pareto(df: pd.DataFrame, front: pd.DataFrame, y: str = "kl_mean") -> go.Figure:
    """Memory against quality for every quantized row, integer formats (RTN / AWQ / GPTQ) and float formats
    (FP8, W8A8, NVFP4, MXFP4: rows with a ``format`` column set) as two marker series, and the front (``front``:
    :func:`workbench.quant.floatverdict.pareto_front`, rows no other row beats on both) as a line. x: measured
    weight bytes (MiB); y: ``y`` (log axis for KL; the FP row, at KL 0, is left off a log axis)."""
    for c in ("weight_bytes", y, "label"):
        if c not in df:
            raise ValueError(f"plot_pareto: column {c!r} not in the DataFrame")
    q = df[df["method"] != "fp"]
    if q.empty:
        return empty_figure("no quantized point to place", title="Memory vs quality")
    is_float = q["format"].notna() if "format" in q else pd.Series(False, index=q.index)
    fig = go.Figure()
    for name, part, sym in (("integer (RTN / AWQ / GPTQ)", q[~is_float], "circle"),
                            ("float / W8A8 formats", q[is_float], "diamond")):
        if len(part):
            fig.add_trace(go.Scatter(x=part["weight_bytes"] / 2**20, y=part[y], mode="markers", name=name,
                                     marker={"symbol": sym, "size": 10}, text=part["label"],
                                     hovertemplate="%{text}<br>%{x:,.0f} MiB<br>%{y:.4g}<extra></extra>"))
    f = front[front["method"] != "fp"] if "method" in front else front
    fig.add_trace(go.Scatter(x=f["weight_bytes"] / 2**20, y=f[y], mode="lines+text", name="front",
                             text=f["label"], textposition="top right", line={"dash": "dot"}))
    log_y = y.startswith("kl")
    fig.update_layout(title="Memory vs quality: the front (lower-left is better)", xaxis_title="weight memory (MiB)",
                      yaxis_title=axis_title(y), yaxis_type="log" if log_y else "linear", template="plotly_white")
    return readable_log_axes(fig)


def plot_mmlu_vs_bits(df: pd.DataFrame) -> go.Figure:
    """MMLU accuracy (micro) with its 95% CI against ``w_bits``; FP as a band; chance as a dotted line.
    Points whose CI includes chance are drawn hollow and named so in the hover text (no "drop" can be
    read from them). Columns ``mmlu_acc, mmlu_ci_lo, mmlu_ci_hi`` (and, when present, ``mmlu_chance``,
    ``mmlu_formulation``, ``mmlu_metric``); rows without MMLU are dropped."""
    if "mmlu_acc" not in df:
        raise ValueError("no mmlu_acc column: run the sweep with n_questions > 0")
    d = df.dropna(subset=["mmlu_acc"])
    chance = float(d["mmlu_chance"].iloc[0]) if "mmlu_chance" in d and len(d) else 0.25
    fig = go.Figure()
    for name, g in _q(d).groupby("series", sort=True):
        at_chance = (g["mmlu_ci_lo"] <= chance) & (g["mmlu_ci_hi"] >= chance)
        fig.add_trace(go.Scatter(
            x=g["w_bits"], y=g["mmlu_acc"], mode="lines+markers", name=name,
            marker={"symbol": ["circle-open" if c else "circle" for c in at_chance], "size": 9},
            hovertext=["CI includes chance" if c else "" for c in at_chance],
            error_y={"type": "data", "symmetric": False, "array": g["mmlu_ci_hi"] - g["mmlu_acc"],
                     "arrayminus": g["mmlu_acc"] - g["mmlu_ci_lo"]}))
    fp = _fp(d)
    xs = d["w_bits"].tolist() or [0, 1]
    if fp is not None:  # the FP band and the chance line are legend entries: their labels cannot overlap
        fig.add_scatter(x=[min(xs), max(xs), max(xs), min(xs)], y=[fp["mmlu_ci_lo"]] * 2 + [fp["mmlu_ci_hi"]] * 2,
                        fill="toself", mode="none", fillcolor="rgba(128,128,128,0.15)", hoverinfo="name",
                        name=f"FP {fp['mmlu_acc']:.3f} [{fp['mmlu_ci_lo']:.3f}, {fp['mmlu_ci_hi']:.3f}]")
        hline_trace(fig, fp["mmlu_acc"], "FP accuracy", xs)
    hline_trace(fig, chance, f"chance {chance:.2f} (4 choices)", xs, dash="dot")
    what = ""
    if "mmlu_formulation" in d and len(d):
        what = f" ({d['mmlu_formulation'].iloc[0]}, {d['mmlu_metric'].iloc[0]}, n={int(d['mmlu_n'].iloc[0])})"
    fig.update_layout(title=f"MMLU accuracy vs weight bits, 95% CI{what}; hollow: CI includes chance",
                      xaxis_title=axis_title("w_bits"), yaxis_title=axis_title("mmlu_acc"), template="plotly_white",
                      xaxis_dtick=1)
    return fig


def plot_speed(df: pd.DataFrame) -> go.Figure:
    """Measured decode time per token (``decode_ms_b*`` columns, one bar group per batch size) for
    every point of a sweep, labelled with the device it ran on. Raises ``ValueError`` without speed
    columns (a sweep run with ``speed=False``)."""
    cols = sorted((c for c in df.columns if c.startswith("decode_ms_b")), key=lambda c: int(c[len("decode_ms_b"):]))
    if not cols:
        raise ValueError("no decode_ms_b* column: run the sweep with speed=True")
    fig = go.Figure()
    for c in cols:
        fig.add_trace(go.Bar(x=df["label"], y=df[c], name=f"batch {c[len('decode_ms_b'):]}",
                             hovertext=df.get("runtime")))
    dev = df["speed_device"].iloc[0] if "speed_device" in df and len(df) else "?"
    fig.update_layout(title=f"Decode time per token on the engine ({dev})", barmode="group",
                      xaxis_title="configuration", yaxis_title="decode time per token (ms, per sequence)",
                      template="plotly_white")
    return fig


def plot_layer_heatmap(report: pd.DataFrame, value: str = "rel_err") -> go.Figure:
    """Per-layer error heatmap: rows = Linear type (q_proj ... down_proj), columns = decoder layer index.

    ``report``: :func:`workbench.quant.quantize`'s per-layer report (``layer`` names like
    ``model.layers.3.mlp.down_proj``); ``value``: ``rel_err`` (``||W_hat - W|| / ||W||``),
    ``weight_mse`` or ``max_abs_err``.
    """
    d = report.copy()
    parts = d["layer"].str.extract(r"layers\.(\d+)\.(?:\w+\.)?(\w+)$")
    d["idx"], d["kind"] = pd.to_numeric(parts[0]), parts[1]
    d = d.dropna(subset=["idx"])
    z = d.pivot_table(index="kind", columns="idx", values=value, aggfunc="mean")
    z = z.reindex([k for k in _LAYER_ORDER if k in z.index] + [k for k in z.index if k not in _LAYER_ORDER])
    fig = go.Figure(go.Heatmap(z=z.values, x=[int(c) for c in z.columns], y=list(z.index), colorscale="Viridis",
                               colorbar_title=value))
    fig.update_layout(title=f"Per-layer {axis_title(value)}", xaxis_title="decoder layer (index)",
                      yaxis_title="Linear layer", template="plotly_white")
    return fig


def plot_group_size_trend(df: pd.DataFrame, metric: str = "kl_mean") -> go.Figure:
    """``metric`` against group size (per tensor and per channel drawn at the right) for each
    method/bits/symmetry."""
    d = df[df["method"] != "fp"].copy()
    d["gs_label"] = d["group_size"].map(lambda g: {0: "tensor", -1: "channel"}.get(int(g), str(int(g))))
    d["order"] = d["group_size"].map(lambda g: {0: 1e9, -1: 1e8}.get(int(g), int(g)))
    d["series"] = d.apply(lambda r: f"{str(r['method']).upper()} W{int(r['w_bits'])} "
                                    f"{'sym' if r['symmetric'] else 'asym'}", axis=1)
    fig = go.Figure()
    for name, g in d.sort_values("order").groupby("series", sort=True):
        fig.add_trace(go.Scatter(x=g["gs_label"], y=g[metric], mode="lines+markers", name=name))
    fig.update_layout(title=f"{metric} vs group size", xaxis_title="group size (input features per scale)",
                      yaxis_title=axis_title(metric), yaxis_type="log" if metric.startswith("kl") else "linear",
                      template="plotly_white", xaxis_type="category")
    return readable_log_axes(fig)
