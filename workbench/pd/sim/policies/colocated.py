"""Colocated continuous batching, prefill first (vLLM v0 default scheduler; Yu et al. 2022 Orca).

Each instance runs both phases; whenever a waiting prompt fits, a prefill step runs and every running
decode waits for it (the prefill-decode interference DistServe, arXiv 2401.09670, sec. 2.2, removes).
Requests are routed round-robin over ``config.n_instances`` identical instances.
"""

from __future__ import annotations

import numpy as np

from workbench.pd.costmodel import CostModel
from workbench.pd.sim.instance import run_prefill_first

NAME = "colocated"


def run(workload, config, cost: CostModel, record: bool = False) -> dict:
    """Per-request arrays: ``first_ms``, ``finish_ms`` (ms since t = 0), ``n_preempt``, ``n_tokens``,
    ``instance``; with ``record``, ``token_ms``: every request's token times (ms)."""
    n = len(workload)
    arr = workload.arrival_s * 1e3
    out = {k: np.full(n, np.nan) for k in ("first_ms", "finish_ms")}
    out["n_preempt"], out["instance"] = np.zeros(n, np.int64), np.arange(n) % config.n_instances
    out["n_tokens"] = np.zeros(n, np.int64)
    out["token_ms"] = [None] * n if record else None
    for inst in range(config.n_instances):
        idx = np.flatnonzero(out["instance"] == inst)
        if idx.size == 0:
            continue
        fi, fn, npre, ntok, *toks = run_prefill_first(
            arr[idx].tolist(), workload.prompt_len[idx].tolist(), workload.output_len[idx].tolist(),
            [False] * idx.size, cost, config.kv_capacity_tokens, config.max_batch,
            config.max_prefill_tokens, config.max_prefill_batch, record)
        for j, q in enumerate(idx.tolist() if record else ()):
            out["token_ms"][q] = toks[0][j]
        out["first_ms"][idx], out["finish_ms"][idx], out["n_preempt"][idx] = fi, fn, npre
        out["n_tokens"][idx] = ntok
    return out
