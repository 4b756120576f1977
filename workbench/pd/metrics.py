"""Serving metrics, per request and in aggregate, with the definitions of ``vllm bench serve``.

Per request: ``ttft_ms`` (arrival -> first output token), ``tpot_ms = (e2e - ttft) / (n_out - 1)``
(NaN when ``n_out == 1``), ``itl_ms`` (gaps between consecutive tokens; measured runs only),
``e2e_ms`` (arrival -> last token).
Aggregate: ``throughput_rps`` = completed / duration, ``output_tok_s``, ITL statistics pooled over all
token gaps (when ``itl_ms`` lists are present), and ``goodput_rps`` = requests
meeting *every* given SLO / duration (``vllm bench serve --goodput``; a request with one output token
has TPOT 0 there, so it passes the TPOT SLO); duration = last finish - first arrival. Percentiles are
``numpy.percentile`` (linear), as vLLM reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from workbench.pd.sim.config import SLO

__all__ = ["PERCENTILES", "RequestStats", "request_metrics", "summarize"]

PERCENTILES = (50, 90, 99)


def request_metrics(arrival_ms, first_ms, finish_ms, n_out) -> dict:
    """``ttft_ms``, ``tpot_ms``, ``e2e_ms`` arrays ``[n]`` float64 from per-request times (ms)."""
    arrival_ms, first_ms, finish_ms = (np.asarray(x, np.float64) for x in (arrival_ms, first_ms, finish_ms))
    n_out = np.asarray(n_out)
    ttft = first_ms - arrival_ms
    e2e = finish_ms - arrival_ms
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (e2e - ttft) / np.maximum(n_out - 1, 1), np.nan)
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e}


@dataclass
class RequestStats:
    """Accumulator for a measured run: ``observe`` one finished request's token timestamps."""

    rows: list = field(default_factory=list)

    def observe(self, req_id: int, arrival_s: float, token_s, prompt_len: int) -> None:
        """``token_s``: wall-clock times (s, same clock as ``arrival_s``) of every output token."""
        tok = np.asarray(token_s, np.float64)
        m = request_metrics([arrival_s * 1e3], [tok[0] * 1e3], [tok[-1] * 1e3], [len(tok)])
        self.rows.append({"req_id": req_id, "arrival_s": arrival_s, "prompt_len": prompt_len,
                          "output_len": len(tok), "ttft_ms": m["ttft_ms"][0], "tpot_ms": m["tpot_ms"][0],
                          "e2e_ms": m["e2e_ms"][0], "itl_ms": list(np.diff(tok) * 1e3),
                          "finish_s": tok[-1]})

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows)
        if len(df):
            df["itl_mean_ms"] = [float(np.mean(x)) if len(x) else np.nan for x in df["itl_ms"]]
        return df.sort_values("req_id").reset_index(drop=True) if len(df) else df


def _good(df: pd.DataFrame, slo: SLO | None) -> np.ndarray:
    good = np.ones(len(df), dtype=bool)
    if slo is None:
        return good
    for col, lim in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)):
        if lim is not None:
            v = df[col].to_numpy(np.float64)
            good &= np.nan_to_num(v, nan=0.0) <= lim
    return good


def _summarize_one(df: pd.DataFrame, slo: SLO | None, percentiles) -> dict:
    if "finish_s" in df:
        end = df["finish_s"].to_numpy(np.float64)
    else:
        end = df["arrival_s"].to_numpy(np.float64) + df["e2e_ms"].to_numpy(np.float64) / 1e3
    dur = float(np.max(end) - df["arrival_s"].min())
    good = _good(df, slo)
    row = {"n_requests": len(df), "duration_s": dur, "throughput_rps": len(df) / dur,
           "output_tok_s": float(df["output_len"].sum()) / dur, "goodput_rps": float(good.sum()) / dur,
           "slo_attainment": float(good.mean())}
    if slo is not None:
        row |= {"slo_ttft_ms": slo.ttft_ms, "slo_tpot_ms": slo.tpot_ms, "slo_e2e_ms": slo.e2e_ms}
    cols = {c: df[c].to_numpy(np.float64) for c in ("ttft_ms", "tpot_ms", "e2e_ms")}
    if "itl_ms" in df:  # pooled over every token gap of every request, as vLLM reports ITL
        gaps = [np.asarray(x, np.float64) for x in df["itl_ms"]]
        cols["itl_ms"] = np.concatenate(gaps) if gaps else np.empty(0)
    for col, v in cols.items():
        v = v[np.isfinite(v)]
        base = col[:-3]
        row[f"mean_{base}_ms"] = float(v.mean()) if v.size else np.nan
        for p in percentiles:
            row[f"p{p}_{base}_ms"] = float(np.percentile(v, p)) if v.size else np.nan
    if "n_preempt" in df:
        row["preemptions"] = int(df["n_preempt"].sum())
    return row


def summarize(df: pd.DataFrame, slo: SLO | None = None, *, by: list[str] | None = None,
              percentiles=PERCENTILES) -> pd.DataFrame:
    """Aggregate per-request rows (from :func:`workbench.pd.sim.simulate` or a measured run) into one
    row per group ``by`` (columns kept): throughput, goodput under ``slo``, mean and percentiles.
    Raises ``ValueError`` if a needed column is missing."""
    need = {"arrival_s", "output_len", "ttft_ms", "tpot_ms", "e2e_ms"}
    if missing := need - set(df.columns):
        raise ValueError(f"summarize: per-request DataFrame lacks columns {sorted(missing)}")
    if not by:
        return pd.DataFrame([_summarize_one(df, slo, percentiles)])
    rows = []
    for key, part in df.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(by, key)) | _summarize_one(part, slo, percentiles))
    return pd.DataFrame(rows)
