"""Disaggregated prefill and decode (DistServe, Zhong et al. 2024, arXiv 2401.09670; Splitwise,
Patel et al. 2024, arXiv 2311.18677).

``n_prefill`` instances run prefill only (FCFS batches, round-robin routing) and emit the first token;
the prompt's KV cache then crosses the link, ``transfer = prompt * kv_bytes_per_token / link + latency``
(DistServe sec. 4.3), one transfer at a time per prefill instance's link; ``n_decode`` instances
admit arriving KV caches into continuous decode batches (round-robin in arrival order), queueing when
their KV memory is full and preempting (recompute on the decode instance) when it overflows.
"""

from __future__ import annotations

import numpy as np

from workbench.pd.costmodel import CostModel
from workbench.pd.sim.prefill_first import run_prefill_first, run_prefill_only

NAME = "disaggregated"


def run(workload, config, cost: CostModel, record: bool = False) -> dict:
    """Per-request arrays: ``first_ms``, ``finish_ms``, ``n_preempt``, ``n_tokens``, ``instance``
    (decode instance; -1 when the prefill token was the only one), ``prefill_instance``,
    ``kv_ready_ms``; with ``record``, ``token_ms``: every request's token times (ms)."""
    n = len(workload)
    arr = workload.arrival_s * 1e3
    prompt, n_out = workload.prompt_len, workload.output_len
    first = np.full(n, np.nan)
    pinst = np.arange(n) % config.n_prefill
    ready = np.full(n, np.nan)
    for inst in range(config.n_prefill):
        idx = np.flatnonzero(pinst == inst)
        if idx.size == 0:
            continue
        done = np.asarray(run_prefill_only(arr[idx].tolist(), prompt[idx].tolist(), cost,
                                           config.max_prefill_batch, config.max_prefill_tokens))
        first[idx] = done
        xfer = config.transfer_ms(prompt[idx].astype(np.float64))
        link_free, ready_i = 0.0, np.empty(idx.size)
        for q in range(idx.size):  # one transfer at a time on this instance's link
            start = max(done[q], link_free)
            link_free = start + xfer[q] - config.link_latency_ms
            ready_i[q] = start + xfer[q]
        ready[idx] = ready_i
    finish = first.copy()
    npre = np.zeros(n, np.int64)
    ntok = np.ones(n, np.int64)  # the prefill instance's token
    dinst = np.full(n, -1, np.int64)
    go = np.flatnonzero(n_out > 1)
    go = go[np.argsort(ready[go], kind="stable")]
    dinst[go] = np.arange(go.size) % config.n_decode
    token_ms = [[f] for f in first.tolist()] if record else None
    for inst in range(config.n_decode):
        idx = go[dinst[go] == inst]
        if idx.size == 0:
            continue
        _, fn, pre, nt, *toks = run_prefill_first(
            ready[idx].tolist(), prompt[idx].tolist(), n_out[idx].tolist(), [True] * idx.size, cost,
            config.kv_capacity_tokens, config.max_batch, config.max_prefill_tokens,
            config.max_prefill_batch, record)
        finish[idx], npre[idx], ntok[idx] = fn, pre, nt
        for j, q in enumerate(idx.tolist() if record else ()):
            token_ms[q].extend(toks[0][j])
    return {"first_ms": first, "finish_ms": finish, "n_preempt": npre, "n_tokens": ntok,
            "token_ms": token_ms, "instance": dinst, "prefill_instance": pinst, "kv_ready_ms": ready}
