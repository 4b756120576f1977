"""Serving metrics, per request and in aggregate, with the definitions of ``vllm bench serve``, and
the SLOs that define goodput.

Per request: ``ttft_ms`` (arrival -> first output token), ``tpot_ms = (e2e - ttft) / (n_out - 1)``
(NaN when ``n_out == 1``), ``itl_ms`` (gaps between consecutive tokens; measured runs only),
``e2e_ms`` (arrival -> last token). A request without a TTFT or an E2E latency (NaN) did not finish.

Aggregate (vLLM 0.11.0 ``vllm/benchmarks/serve.py``, ``calculate_metrics``): ``throughput_rps`` =
completed requests / duration, ``output_tok_s``, ITL statistics pooled over all token gaps (when
``itl_ms`` lists are present), and ``goodput_rps`` = good requests / duration, where a request is
*good* when it completed and meets every SLO given, each inclusive (``SLO >= metric``). vLLM builds
its TTFT, TPOT and E2E lists from successful requests only, so an unfinished request meets no SLO;
a completed request with one output token has TPOT 0 there, so it passes a TPOT SLO.
``slo_attainment`` = good / all requests (unfinished ones count as misses). Duration = last finish -
first arrival over completed requests. Percentiles are ``numpy.percentile`` (linear), over completed
requests, as vLLM reports them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from workbench.validate import check_field_types

__all__ = ["PERCENTILES", "SLO", "SLO_PRESETS", "RequestStats", "good_requests", "request_metrics", "summarize"]

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    """Per-request service-level objectives in ms; ``None`` = not checked. A request is *good* when it
    completes and meets every SLO given (``vllm bench serve --goodput ttft:<ms> tpot:<ms> e2el:<ms>``)."""

    ttft_ms: float | None = 400.0  # time to first token
    tpot_ms: float | None = 40.0  # time per output token after the first
    e2e_ms: float | None = None  # end-to-end latency

    def __post_init__(self):
        check_field_types(self)  # numbers or None, not strings or NaN
        for f in ("ttft_ms", "tpot_ms", "e2e_ms"):
            v = getattr(self, f)
            if v is not None and not v > 0:
                raise ValueError(f"SLO.{f}={v!r} must be > 0 ms (or None to skip it)")

    @property
    def label(self) -> str:
        """``"TTFT<=400 ms, TPOT<=40 ms"``: the SLOs checked, for tables and plot titles."""
        parts = [f"{name}<={v:g} ms" for name, v in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms),
                                                      ("E2E", self.e2e_ms)) if v is not None]
        return ", ".join(parts) or "no SLO"

    @classmethod
    def from_name(cls, name: str) -> SLO:
        """A preset from :data:`SLO_PRESETS`; unknown names raise ``ValueError`` with a suggestion."""
        if name not in SLO_PRESETS:
            hint = difflib.get_close_matches(str(name), list(SLO_PRESETS), n=1)
            msg = f"unknown SLO preset {name!r}; choose one of {sorted(SLO_PRESETS)}"
            raise ValueError(msg + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        return SLO_PRESETS[name]


# SLOs for a 7B-class chat service in the manner of DistServe's per-application TTFT/TPOT targets
# (arXiv 2401.09670); the values are this workbench's defaults, not the paper's.
SLO_PRESETS: dict[str, SLO] = {
    "chat": SLO(ttft_ms=400.0, tpot_ms=40.0),  # interactive chat: first token within 0.4 s, 25 tokens/s
    "tight": SLO(ttft_ms=200.0, tpot_ms=15.0),  # a latency-critical service: 0.2 s, about 67 tokens/s
}


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


def good_requests(df: pd.DataFrame, slo: SLO | None) -> np.ndarray:
    """``[n]`` bool: request completed (finite ``ttft_ms`` and ``e2e_ms``) and meets every SLO in
    ``slo`` (inclusive), a completed one-token request counting TPOT 0 (``vllm bench serve``)."""
    ttft, e2e = df["ttft_ms"].to_numpy(np.float64), df["e2e_ms"].to_numpy(np.float64)
    good = np.isfinite(ttft) & np.isfinite(e2e)
    if slo is None:
        return good
    tpot = df["tpot_ms"].to_numpy(np.float64)
    one_token = df["output_len"].to_numpy() <= 1
    tpot = np.where(np.isnan(tpot) & one_token, 0.0, tpot)
    for v, lim in ((ttft, slo.ttft_ms), (tpot, slo.tpot_ms), (e2e, slo.e2e_ms)):
        if lim is not None:
            good &= v <= lim  # NaN compares False: a missing metric fails its SLO
    return good


def _summarize_one(df: pd.DataFrame, slo: SLO | None, percentiles) -> dict:
    done = np.isfinite(df["ttft_ms"].to_numpy(np.float64)) & np.isfinite(df["e2e_ms"].to_numpy(np.float64))
    arrival = df["arrival_s"].to_numpy(np.float64)
    if "finish_s" in df:
        end = df["finish_s"].to_numpy(np.float64)
    else:
        end = arrival + df["e2e_ms"].to_numpy(np.float64) / 1e3
    n_done = int(done.sum())
    dur = float(end[done].max() - arrival[done].min()) if n_done else np.nan
    good = good_requests(df, slo)
    per_s = 1.0 / dur if n_done else 0.0  # no completed request: every rate is 0
    row = {"n_requests": len(df), "n_completed": n_done, "duration_s": dur, "throughput_rps": n_done * per_s,
           "output_tok_s": float(df["output_len"].to_numpy()[done].sum()) * per_s,
           "goodput_rps": float(good.sum()) * per_s, "slo_attainment": float(good.mean())}
    if slo is not None:
        row |= {"slo_ttft_ms": slo.ttft_ms, "slo_tpot_ms": slo.tpot_ms, "slo_e2e_ms": slo.e2e_ms}
    cols = {c: df[c].to_numpy(np.float64)[done] for c in ("ttft_ms", "tpot_ms", "e2e_ms")}
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
