"""Disaggregated prefill and decode (DistServe, Zhong et al. 2024, arXiv 2401.09670; Splitwise,
Patel et al. 2024, arXiv 2311.18677), with the request path of vLLM's P/D proxies.

A request goes through three stages; the client's first token comes from the decode side:

1. **prefill** on one of ``n_prefill`` instances (FCFS batches, round-robin routing), timed with the
   prefill pool's cost model. The prefill instance emits one token that the client never sees: vLLM's
   proxies send the prefill request with ``max_tokens=1`` and stream the client's response from the
   decode instance (``benchmarks/disagg_benchmarks/disagg_prefill_proxy_server.py``;
   ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` for the NixlConnector);
2. **KV transfer** of the prompt's cache over the prefill instance's link, one transfer at a time:
   ``prompt * kv_bytes_per_token / link_gbs + link_latency`` (DistServe sec. 4.3; link bandwidth and
   latency from :class:`~workbench.pd.hardware.HardwareSpec` through ``SimConfig.for_hardware``). The
   transfer starts when the prefill ends (a push, as ``P2pNcclConnector``; ``NixlConnector`` pulls
   after decode admission instead, which moves the same transfer time behind the admission wait);
3. **decode** on one of ``n_decode`` instances (round-robin in KV-arrival order), timed with the
   decode pool's cost model: the request waits for admission (a free sequence slot and KV memory),
   joins the continuous batch at a step boundary with ``prompt - 1`` cached tokens, and its first
   decode step recomputes the last prompt token and emits the **first token**: vLLM's scheduler sets
   ``num_computed_tokens = num_tokens - 1`` when remote KV has arrived (``Scheduler.
   _update_waiting_for_remote_kv``; ``P2pNcclConnector`` loads ``prompt - 1`` tokens). Every output
   token, the first included, is generated there; a preempted request is recomputed there.

So TTFT = prefill queue + prefill + transfer + admission wait + one decode step, and TPOT/ITL are the
decode instance's. ``prefill_done_ms`` (the prefill-side token, the TTFT of the older convention) and
``kv_ready_ms`` are returned too.
"""

from __future__ import annotations

import numpy as np

from workbench.pd.costmodel import PoolCosts
from workbench.pd.sim.prefill_first import run_prefill_first, run_prefill_only

NAME = "disaggregated"


def prefill_pool(workload, config, costs: PoolCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(prefill_instance, prefill_done_ms, kv_ready_ms)`` per request: round-robin prefill
    instances, each prefill's end, and its KV cache's arrival at the decode side."""
    n = len(workload)
    arr, prompt = workload.arrival_s * 1e3, workload.prompt_len
    instance = np.arange(n) % config.n_prefill
    done, ready = np.full(n, np.nan), np.full(n, np.nan)
    for inst in range(config.n_prefill):
        idx = np.flatnonzero(instance == inst)
        if idx.size == 0:
            continue
        done_i = run_prefill_only(arr[idx].tolist(), prompt[idx].tolist(), costs.prefill,
                                  config.max_prefill_batch, config.max_prefill_tokens)
        xfer = config.transfer_ms(prompt[idx].astype(np.float64)).tolist()
        link_free, ready_i = 0.0, []
        for end, x in zip(done_i, xfer):  # one transfer at a time on this instance's link
            start = max(end, link_free)
            link_free = start + x - config.link_latency_ms  # latency overlaps the next transfer
            ready_i.append(start + x)
        done[idx], ready[idx] = done_i, ready_i
    return instance, done, ready


def run(workload, config, costs: PoolCosts, record: bool = False) -> dict:
    """Per-request arrays: ``first_ms`` and ``finish_ms`` (client-side, from the decode instance),
    ``n_preempt``, ``n_tokens``, ``instance`` (decode instance), ``prefill_instance``,
    ``prefill_done_ms``, ``kv_ready_ms``; with ``record``, ``token_ms``: every token's time (ms)."""
    n = len(workload)
    pinst, prefill_done, ready = prefill_pool(workload, config, costs)
    prompt, n_out = workload.prompt_len, workload.output_len
    out = {k: np.full(n, np.nan) for k in ("first_ms", "finish_ms")}
    out |= {"n_preempt": np.zeros(n, np.int64), "n_tokens": np.zeros(n, np.int64),
            "instance": np.zeros(n, np.int64), "token_ms": [None] * n if record else None,
            "prefill_instance": pinst, "prefill_done_ms": prefill_done, "kv_ready_ms": ready}
    by_ready = np.argsort(ready, kind="stable")
    out["instance"][by_ready] = np.arange(n) % config.n_decode
    for inst in range(config.n_decode):
        idx = by_ready[out["instance"][by_ready] == inst]
        if idx.size == 0:
            continue
        first, finish, npre, ntok, *toks = run_prefill_first(
            ready[idx].tolist(), prompt[idx].tolist(), n_out[idx].tolist(), [True] * idx.size, costs.decode,
            config.kv_capacity_tokens, config.max_batch, config.max_prefill_tokens,
            config.max_prefill_batch, record)
        out["first_ms"][idx], out["finish_ms"][idx], out["n_preempt"][idx], out["n_tokens"][idx] = (
            first, finish, npre, ntok)
        for j, q in enumerate(idx.tolist() if record else ()):
            out["token_ms"][q] = toks[0][j]
    return out
