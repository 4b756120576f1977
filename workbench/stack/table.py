"""The study's tables: the 8 combinations (+ the mixed deployment), multiplicativity, batch-1 what-if.

Batch-1 rows of a disaggregated combination are the colocated measurement plus the KV transfer of
the prompt over the link (``prompt x kv_bytes_per_token / link + latency``, DistServe sec. 4.3,
modelled): the first token reaches the client from the decode instance, so TTFT and E2E latency grow
by it and TPOT does not change. Load columns come from the simulated grid at ``cfg.table_load`` and
SLO scale 1 for the first split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.spec.theory import speedup
from workbench.stack.config import COMBINATIONS, StackConfig, combo_label
from workbench.stack.load import base_label, point_row

__all__ = ["load_note", "multiplicativity", "slo_capacity_by_label", "stack_table", "whatif_batch1"]

_B1 = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tok_s", "alpha", "tau", "c", "acceptance", "spec_timing",
       "peak_mem_gb", "mem_source", "weight_gb")
_LOAD = ("goodput_rps", "slo_attainment", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "rate")


def _transfer_ms(row: pd.Series, cfg: StackConfig) -> float:
    return cfg.prompt_len * float(row["kv_bytes_per_token"]) / (cfg.link_gbs * 1e6) + cfg.link_latency_ms


def slo_capacity_by_label(load: pd.DataFrame, min_attainment: float = 0.9) -> pd.Series:
    """Per deployment ``label``: the highest simulated rate (req/s) with at least ``min_attainment`` of
    requests meeting every SLO at SLO scale 1 (DistServe's goodput, arXiv 2401.09670 sec. 2.1); 0 if none."""
    part = load[np.isclose(load["slo_scale"], 1.0)]
    ok = part[part["slo_attainment"] >= min_attainment]
    return ok.groupby("label")["rate"].max().reindex(part["label"].unique(), fill_value=0.0)


def _load_row(load: pd.DataFrame, cfg: StackConfig, q: bool, s: bool, p: bool, mixed: bool) -> dict:
    n_p, n_d = cfg.splits[0]
    sel = load[(load["quantized"] == q) & (load["speculative"] == s) & (load["disaggregated"] == p)
               & (load["mixed"] == mixed) & (load["n_prefill"] == n_p) & (load["n_decode"] == n_d)]
    if sel.empty:
        return {}
    cap = slo_capacity_by_label(sel).iloc[0]
    at = sel[np.isclose(sel["load"], cfg.table_load) & np.isclose(sel["slo_scale"], 1.0)].iloc[0]
    return {c: at[c] for c in _LOAD} | {"slo_capacity_rps": float(cap), "n_gpus": int(at["n_gpus"])}


def stack_table(points: pd.DataFrame, load: pd.DataFrame, cfg: StackConfig) -> pd.DataFrame:
    """One row per combination in :data:`workbench.stack.config.COMBINATIONS` order, then the mixed
    deployment: ``label``, ``quantized``, ``speculative``, ``disaggregated``, ``mixed``, the batch-1
    columns (``ttft_ms``, ``tpot_ms``, ``e2e_ms``, ``decode_tok_s``, ``alpha``, ``tau``, ``acceptance``,
    ``spec_timing``, ``peak_mem_gb`` per instance with ``mem_source``), the load columns at
    ``cfg.table_load`` (``goodput_rps``, ``slo_attainment``, p50/p99 TTFT and TPOT, ``rate``,
    ``slo_capacity_rps``, ``n_gpus``) and ratios to the baseline: ``decode_speedup``,
    ``e2e_change`` (e2e / baseline - 1), ``mem_ratio``, ``goodput_gain``, ``capacity_gain``."""
    base = base_label(points)
    rows = []
    for q, s, p in COMBINATIONS:
        r = point_row(points, q, s)
        row = {"label": combo_label(q, s, p, base), "quantized": q, "speculative": s, "disaggregated": p,
               "mixed": False} | {c: r.get(c, np.nan) for c in _B1}
        if p:
            x = _transfer_ms(r, cfg)
            row["ttft_ms"] += x
            row["e2e_ms"] += x
        rows.append(row | _load_row(load, cfg, q, s, p, False))
    lo, hi = point_row(points, False, True), point_row(points, True, True)
    n_out = int(hi["n_out"])
    ttft = float(lo["ttft_ms"]) + _transfer_ms(lo, cfg)
    mixed = {"label": f"{base} prefill / W4A16 + spec decode (P/D)", "quantized": True, "speculative": True,
             "disaggregated": True, "mixed": True} | {c: hi.get(c, np.nan) for c in _B1}
    mixed |= {"ttft_ms": ttft, "e2e_ms": ttft + float(hi["tpot_ms"]) * (n_out - 1),
              "peak_mem_gb": max(float(lo["peak_mem_gb"]), float(hi["peak_mem_gb"]))}
    rows.append(mixed | _load_row(load, cfg, True, True, True, True))
    df = pd.DataFrame(rows)
    b = df.iloc[0]
    df["decode_speedup"] = df["decode_tok_s"] / b["decode_tok_s"]
    df["e2e_change"] = df["e2e_ms"] / b["e2e_ms"] - 1.0
    df["mem_ratio"] = df["peak_mem_gb"] / b["peak_mem_gb"]
    for col, out in (("goodput_rps", "goodput_gain"), ("slo_capacity_rps", "capacity_gain")):
        if col in df:
            df[out] = df[col] / b[col] if b[col] > 0 else np.nan
    return df


_METRICS = {"decode_tok_s": ("batch-1 decode tokens/s", False), "e2e_ms": ("batch-1 E2E latency (speedup)", True),
            "goodput_rps": ("goodput at the table's load", False), "slo_capacity_rps": ("SLO capacity", False)}


def multiplicativity(table: pd.DataFrame) -> pd.DataFrame:
    """For each metric: the single-technique gains over the baseline (W4A16 alone, spec alone, P/D
    alone), their product, the combined gain (all three) and ``combined / product`` (1 = exactly
    multiplicative, < 1 = less). Latency counts as a speedup (baseline / combination)."""
    def gain(col, inv, q, s, p):
        r = table[(table["quantized"] == q) & (table["speculative"] == s) & (table["disaggregated"] == p)
                  & ~table["mixed"]].iloc[0]
        v, b = float(r[col]), float(table.iloc[0][col])
        return (b / v if inv else v / b) if b > 0 and v > 0 else np.nan

    rows = []
    for col, (name, inv) in _METRICS.items():
        if col not in table:
            continue
        g = {k: gain(col, inv, *f) for k, f in (("W4A16", (True, False, False)), ("spec", (False, True, False)),
                                                ("P/D", (False, False, True)), ("combined", (True, True, True)))}
        prod = g["W4A16"] * g["spec"] * g["P/D"]
        rows.append({"metric": name, "W4A16 alone": g["W4A16"], "spec alone": g["spec"], "P/D alone": g["P/D"],
                     "product of singles": prod, "combined": g["combined"],
                     "combined / product": g["combined"] / prod if prod > 0 else np.nan})
    return pd.DataFrame(rows)


def whatif_batch1(points: pd.DataFrame, cfg: StackConfig) -> pd.DataFrame:
    """Batch-1 decode tokens/s predicted for every (precision, alpha, k) of the what-if grid:
    plain tokens/s x Leviathan et al. 2023 Theorem 3.8 speedup at alpha, k, the measured c (draft step
    / target step) and the measured verify cost at that k. Columns ``quantized``, ``alpha``, ``k``,
    ``c``, ``verify_cost``, ``speedup``, ``decode_tok_s``, ``plain_tok_s``."""
    rows = []
    for q in (False, True):
        plain, sp = point_row(points, q, False), point_row(points, q, True)
        t_ms = float(sp["target_step_ms_whatif"])
        c = float(sp["draft_step_ms_whatif"]) / t_ms
        for k in cfg.whatif_ks:
            vc = float(sp[f"verify_ms_k{k}"]) / t_ms
            for a in cfg.whatif_alphas:
                s = float(speedup(a, k, c, vc))
                rows.append({"quantized": q, "alpha": a, "k": k, "c": c, "verify_cost": vc, "speedup": s,
                             "plain_tok_s": float(plain["decode_tok_s"]),
                             "decode_tok_s": float(plain["decode_tok_s"]) * s})
    return pd.DataFrame(rows)


def load_note(load: pd.DataFrame, cfg: StackConfig, min_attainment: float = 0.9) -> str:
    """A sentence for the reader when the table's load columns say little, else ``""``.

    ``load``: the simulated grid (:func:`workbench.stack.load.simulate_deployment` rows: ``label``, the combination
    flags, ``n_prefill``, ``n_decode``, ``load``, ``slo_scale``, ``slo_attainment``). Empty when the baseline
    deployment (no W4A16, no speculation, colocated, the first split) meets every SLO for at least
    ``min_attainment`` of requests at ``cfg.table_load`` and SLO scale 1. Otherwise it says the attainment there,
    and the highest load (at SLO scale 1) and the smallest SLO scale (at the table's load) of the precomputed grid
    at which the baseline does meet them, or that no grid point does and which settings to change (the SLOs
    derived from batch-1 costs can be out of reach under load: a GPU's prefill steps stall colocated decodes)."""
    n_p, n_d = cfg.splits[0]
    b = load[~load["quantized"].astype(bool) & ~load["speculative"].astype(bool)
             & ~load["disaggregated"].astype(bool) & ~load["mixed"].astype(bool)
             & (load["n_prefill"] == n_p) & (load["n_decode"] == n_d)]
    at = b[np.isclose(b["load"], cfg.table_load) & np.isclose(b["slo_scale"], 1.0)]
    if at.empty or float(at["slo_attainment"].iloc[0]) >= min_attainment:
        return ""
    msg = (f"At {cfg.table_load:g} x the baseline's capacity the baseline meets the SLOs for "
           f"{float(at['slo_attainment'].iloc[0]):.0%} of requests (target {min_attainment:.0%}).")
    met = b[b["slo_attainment"] >= min_attainment]
    loads = met[np.isclose(met["slo_scale"], 1.0)]["load"]
    scales = met[np.isclose(met["load"], cfg.table_load)]["slo_scale"]
    if loads.empty and scales.empty:
        return msg + (" No precomputed load and SLO scale meets them: set the SLOs (StackConfig.slo; the notebook "
                      "reads WB_SLO_TTFT_MS and WB_SLO_TPOT_MS), lower load_fractions or add larger slo_scales.")
    parts = ([f"up to {loads.max():g} x capacity at SLO scale 1"] if not loads.empty else []) + (
        [f"at SLO scale {scales.min():g} at this load"] if not scales.empty else [])
    return msg + " It meets them " + " and ".join(parts) + ": the load and SLO sliders show those points."
