"""vLLM's measurements in the workbench's tables: ``vllm bench serve`` results and ``/metrics`` counters.

Two readers, for the release :data:`workbench.bridges.vllm_source.VLLM_VERSION`:

* :func:`read_bench_serve` / :func:`bench_serve_requests`: the JSON that ``vllm bench serve
  --save-result`` writes (``vllm/benchmarks/serve.py``: ``main_async`` writes the setup keys and
  ``json.dump``s them merged with the dict ``benchmark()`` returns; ``benchmark()`` fills
  ``duration, completed, request_throughput, request_goodput, output_throughput, ...`` from
  ``calculate_metrics`` and its nested ``process_one_metric`` writes ``mean_/median_/std_/p99_
  {ttft,tpot,itl,e2el}_ms``; the per-request lists ``ttfts, itls, input_lens, output_lens,
  start_times, errors`` stay only with ``--save-detailed``, ``latencies`` always). Columns are renamed
  to :func:`workbench.pd.metrics.summarize`'s: ``e2el`` -> ``e2e``, ``median_`` -> ``p50_``,
  ``request_goodput`` -> ``goodput_rps``, ...; per-request rows get ``ttft_ms, tpot_ms, itl_ms,
  e2e_ms`` as the simulator's, so ``summarize`` and the P/D plots take both.
* :func:`read_spec_metrics`: the Prometheus text of ``/metrics`` (``SpecDecodingProm`` in
  ``vllm/v1/spec_decode/metrics.py``: counters ``vllm:spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos`` with
  labels ``model_name, engine`` (+ ``position``), exposed with the ``_total`` suffix) into
  :meth:`workbench.spec.metrics.SpecDecodingStats.summary`'s columns: ``tau = 1 + accepted / drafts``
  (vLLM's mean acceptance length, bonus token included), ``draft_acceptance_rate = accepted /
  drafted``, and ``alpha`` where it is identifiable (see the function).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["BENCH_SERVE_ARGS", "SPEC_COUNTERS", "bench_serve_requests", "read_bench_serve", "read_spec_metrics", "spec_metrics_delta"]

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos")

# `vllm bench serve` flags that give files every column here: per-request lists, e2e percentiles, the
# workbench's percentiles (50/90/99) and goodput under the SLOs of workbench.pd.sim.SLO's defaults
BENCH_SERVE_ARGS = ("--save-result", "--save-detailed", "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "50,90,99", "--goodput", "ttft:400", "tpot:40")

_RENAME = {"completed": "n_requests", "failed": "n_failed", "duration": "duration_s",
           "request_throughput": "throughput_rps", "request_goodput": "goodput_rps",
           "output_throughput": "output_tok_s", "total_token_throughput": "total_tok_s",
           "total_input_tokens": "input_tokens", "total_output_tokens": "output_tokens",
           "spec_decode_num_drafts": "num_drafts", "spec_decode_draft_tokens": "num_draft_tokens",
           "spec_decode_accepted_tokens": "num_accepted_tokens", "spec_decode_acceptance_length": "tau",
           "spec_decode_per_position_acceptance_rates": "acceptance_per_pos"}
_PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts",
                "errors", "queue_times", "server_queue_times", "server_ttfts")


def _load(path_or_obj) -> list[dict]:
    """One dict per result: a dict, a list of dicts, or a file (``--append-result`` joins JSON objects
    with newlines). ValueError naming the file, the line and column for a file that is not JSON (a
    truncated run: ``vllm bench serve`` killed while writing)."""
    if isinstance(path_or_obj, dict):
        return [path_or_obj]
    if isinstance(path_or_obj, list):
        return list(path_or_obj)
    text = Path(path_or_obj).read_text()
    dec, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path_or_obj}: not valid JSON at line {e.lineno}, column {e.colno} ({e.msg}); the "
                             "file is truncated or not `vllm bench serve --save-result` output: rerun the "
                             "benchmark") from None
        out.append(obj)
    if not out:
        raise ValueError(f"{path_or_obj}: no JSON result in the file")
    return out


def _summary_row(r: dict) -> dict:
    row = {"source": "vllm"}
    for k, v in r.items():
        if k in _PER_REQUEST or isinstance(v, list) and k != "spec_decode_per_position_acceptance_rates":
            continue
        name = _RENAME.get(k, k)
        if name.endswith("_ms") and "_" in name:  # mean_e2el_ms -> mean_e2e_ms, median_x_ms -> p50_x_ms
            stat, _, metric = name[:-3].partition("_")
            metric = "e2e" if metric == "e2el" else metric
            name = f"{'p50' if stat == 'median' else stat}_{metric}_ms"
        row[name] = v
    if "spec_decode_acceptance_rate" in r:  # vLLM reports a percentage
        row["draft_acceptance_rate"] = r["spec_decode_acceptance_rate"] / 100
        row.pop("spec_decode_acceptance_rate", None)
    return row


def read_bench_serve(path_or_obj) -> pd.DataFrame:
    """Summary rows of ``vllm bench serve --save-result`` output (a path, dict or list of dicts).

    Returns one row per result with :func:`workbench.pd.metrics.summarize`'s column names
    (``n_requests, duration_s, throughput_rps, goodput_rps, output_tok_s, mean_ttft_ms, p50_ttft_ms,
    p99_ttft_ms, ..., mean_e2e_ms``), vLLM's setup keys as they are (``backend, model_id,
    request_rate, max_concurrency, ...``), ``source="vllm"`` and, with speculative decoding,
    ``num_drafts, num_draft_tokens, num_accepted_tokens, tau, draft_acceptance_rate`` (0-1) and
    ``acceptance_per_pos``. ``goodput_rps`` is NaN unless the run had ``--goodput``.
    Raises ``ValueError`` for a file without a JSON object or without vLLM's ``duration`` key.
    """
    rows = []
    for r in _load(path_or_obj):
        if "duration" not in r or "completed" not in r:
            raise ValueError("not a `vllm bench serve --save-result` file: no 'duration'/'completed' keys "
                             f"(keys: {sorted(r)[:8]}...)")
        rows.append(_summary_row(r))
    df = pd.DataFrame(rows)
    if "goodput_rps" in df:
        df["goodput_rps"] = pd.to_numeric(df["goodput_rps"], errors="coerce")
    return df


def bench_serve_requests(path_or_obj) -> pd.DataFrame:
    """Per-request rows of a ``--save-result --save-detailed`` run, in the simulator's columns.

    Columns: ``run`` (index of the result in the file), ``req_id``, ``arrival_s`` (``start_times``
    relative to the first request, s), ``prompt_len``, ``output_len``, ``ttft_ms``, ``tpot_ms``
    (``(e2e - ttft) / (n_out - 1)``, NaN for one token: ``calculate_metrics``'s formula), ``e2e_ms``
    (``latencies``), ``itl_ms`` (list of gaps), ``finish_s``. Failed requests (non-empty ``errors``
    entry) are dropped, as ``calculate_metrics`` drops them. Raises ``ValueError`` naming
    ``--save-detailed`` when the per-request lists are missing.
    """
    frames = []
    for run, r in enumerate(_load(path_or_obj)):
        need = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "start_times")
        if missing := [k for k in need if k not in r]:
            raise ValueError(f"result {run} lacks per-request lists {missing}: rerun `vllm bench serve` with "
                             "--save-result --save-detailed")
        n = len(r["latencies"])
        errors = r.get("errors") or [""] * n
        ok = np.array([not e for e in errors])
        start = np.asarray(r["start_times"], np.float64)
        t0 = start[ok].min() if ok.any() else 0.0
        ttft = np.asarray(r["ttfts"], np.float64) * 1e3
        e2e = np.asarray(r["latencies"], np.float64) * 1e3
        n_out = np.asarray(r["output_lens"])
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(n_out > 1, (e2e - ttft) / np.maximum(n_out - 1, 1), np.nan)
        df = pd.DataFrame({"run": run, "req_id": np.arange(n), "arrival_s": start - t0,
                           "prompt_len": r["input_lens"], "output_len": n_out, "ttft_ms": ttft,
                           "tpot_ms": tpot, "e2e_ms": e2e,
                           "itl_ms": [[x * 1e3 for x in gaps] for gaps in r["itls"]],
                           "finish_s": start - t0 + e2e / 1e3})
        frames.append(df[ok].reset_index(drop=True))
    return pd.concat(frames, ignore_index=True)


def _counters(text: str, model_name: str | None) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    tot = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    created: dict[tuple, float] = {}  # creation time of each counter series (prometheus_client's _created)
    found = False
    for fam in text_string_to_metric_families(text):
        if fam.name.removesuffix("_created") in SPEC_COUNTERS and fam.name.endswith("_created"):
            for s in fam.samples:
                if not model_name or s.labels.get("model_name") == model_name:
                    created[(fam.name, *sorted(s.labels.items()))] = s.value
        if fam.name not in SPEC_COUNTERS:  # counter families; "_created" gauges are read above
            continue
        for s in fam.samples:
            if not s.name.endswith("_total") or (model_name and s.labels.get("model_name") != model_name):
                continue
            found = True
            key = fam.name.removeprefix("vllm:spec_decode_")
            if key == "num_accepted_tokens_per_pos":
                pos = int(s.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
            else:
                tot[key] += s.value
    if not found:
        raise ValueError("no vllm:spec_decode_* counters in this /metrics text"
                         + (f" for model_name={model_name!r}" if model_name else "")
                         + ": was the server started with --speculative-config?")
    k = max(per_pos) + 1 if per_pos else 0
    return tot | {"num_accepted_tokens_per_pos": [per_pos.get(i, 0.0) for i in range(k)], "created": created}


def _spec_row(c: dict) -> dict:
    d, dt, a = (round(c[x]) for x in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
    pos = [round(x) for x in c["num_accepted_tokens_per_pos"]]
    k = len(pos)
    # alpha needs the steps that ended on a rejection; with a fixed k (every step drafted k tokens)
    # a step took the bonus token iff its last position was accepted, so rejections = drafts - pos[k-1]
    fixed_k = k > 0 and dt == d * k
    rej = d - pos[-1] if fixed_k else None
    return {"num_drafts": d, "num_draft_tokens": dt, "num_accepted_tokens": a,
            "num_rejections": rej if rej is not None else np.nan,
            "alpha": a / (a + rej) if rej is not None and a + rej else np.nan,
            "tau": 1 + a / d if d else np.nan, "draft_acceptance_rate": a / dt if dt else np.nan,
            "k": k, "num_accepted_tokens_per_pos": pos,
            "acceptance_per_pos": [p / d for p in pos] if d else []}


def read_spec_metrics(text: str, model_name: str | None = None) -> pd.DataFrame:
    """One row of speculative-decoding counters from vLLM's Prometheus ``/metrics`` text.

    Sums the ``_total`` samples over engines (and over models unless ``model_name``), as ``vllm bench
    serve``'s ``fetch_spec_decode_metrics`` does. Columns (:class:`SpecDecodingStats` names):
    ``num_drafts, num_draft_tokens, num_accepted_tokens, tau, draft_acceptance_rate,
    num_accepted_tokens_per_pos`` (list), ``acceptance_per_pos`` (accepted at i / drafts, vLLM's
    per-position rate), ``k`` (positions seen), and ``num_rejections, alpha``: identifiable only when
    every step drafted ``k`` tokens (``num_draft_tokens == k * num_drafts``); then a step ends on a
    rejection iff position ``k-1`` was not accepted, so ``num_rejections = num_drafts - per_pos[k-1]``
    and ``alpha = accepted / (accepted + rejections)`` (as ``SpecDecodingStats.alpha``); NaN otherwise.
    Raises ``ValueError`` when the text has no ``vllm:spec_decode_*`` counters.
    """
    return pd.DataFrame([_spec_row(_counters(text, model_name))])


def spec_metrics_delta(before: str, after: str, model_name: str | None = None) -> pd.DataFrame:
    """Counters of a window: ``after - before`` (two ``/metrics`` scrapes), as ``vllm bench serve``
    reports its run; same columns as :func:`read_spec_metrics`.

    Raises ``ValueError`` when the server restarted between the scrapes: a counter series was created
    anew (its ``_created`` time changed) or a counter went down. The window's counts from before the
    restart are then lost, so no difference of the two scrapes is the window's (Prometheus'
    ``increase()`` would count from zero at the reset and silently drop them): scrape again after the
    restart and rerun the window."""
    b, a = _counters(before, model_name), _counters(after, model_name)
    moved = sorted(k[0] for k, t in a["created"].items() if k in b["created"] and b["created"][k] != t)
    keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    down = [f"{x} {b[x]:g} -> {a[x]:g}" for x in keys if a[x] < b[x]]
    if moved or down:
        why = f"counters recreated ({', '.join(dict.fromkeys(moved))})" if moved else f"counters went down ({'; '.join(down)})"
        raise ValueError(f"the vLLM server restarted between the two /metrics scrapes: {why}. The counts before the "
                         "restart are lost, so after - before is not the window's; scrape /metrics again after the "
                         "restart (before the run) and rerun the window")
    k = max(len(a["num_accepted_tokens_per_pos"]), len(b["num_accepted_tokens_per_pos"]))
    pad = lambda v: v + [0.0] * (k - len(v))
    diff = {x: a[x] - b[x] for x in keys}
    diff["num_accepted_tokens_per_pos"] = [y - x for x, y in zip(pad(b["num_accepted_tokens_per_pos"]),
                                                                 pad(a["num_accepted_tokens_per_pos"]))]
    return pd.DataFrame([_spec_row(diff)])
