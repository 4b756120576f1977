"""Colocated continuous batching, prefill first (vLLM v0 default scheduler; Yu et al. 2022 Orca).

Each instance runs both phases; whenever a waiting prompt fits, a prefill step runs and every running
decode waits for it (the prefill-decode interference DistServe, arXiv 2401.09670, sec. 2.2, removes).
Requests are routed round-robin over ``config.n_instances`` identical instances.
"""

from __future__ import annotations

from workbench.pd.costmodel import PoolCosts
from workbench.pd.sim.instance import round_robin
from workbench.pd.sim.prefill_first import run_prefill_first

NAME = "colocated"


def run(workload, config, costs: PoolCosts, record: bool = False) -> dict:
    """Per-request arrays: ``first_ms``, ``finish_ms`` (ms since t = 0), ``n_preempt``, ``n_tokens``,
    ``instance``; with ``record``, ``token_ms``: every request's token times (ms). Prefill steps are
    timed with ``costs.prefill``'s terms, decode steps with ``costs.decode``'s (:meth:`PoolCosts.combined`)."""
    cost = costs.combined()
    return round_robin(workload, config.n_instances, record, lambda arr, prompt, out_len: run_prefill_first(
        arr, prompt, out_len, [False] * len(arr), cost, config.kv_capacity_tokens, config.max_batch,
        config.max_prefill_tokens, config.max_prefill_batch, record))
