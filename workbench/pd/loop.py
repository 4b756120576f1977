"""A real serving loop: continuous batching, prefill first, over a :class:`BatchRunner`, fed by a
workload in wall-clock time; and the simulator's prediction for the same workload, side by side.

The loop is the colocated policy of :mod:`workbench.pd.sim.policies.colocated` run for real: at every
step boundary, if a request is waiting and a slot is free, one prefill step runs over the waiting
prompts (FCFS, up to ``max_prefill_batch``); otherwise every running sequence decodes one token
(greedy; EOS ignored, so each request produces exactly its ``output_len`` tokens). One slot per
request, so the KV capacity is ``max_batch`` slots of ``max_seq`` tokens and nothing is preempted.
"""

from __future__ import annotations

import gc
import time
from collections import deque

import numpy as np
import pandas as pd
import torch

from workbench.device import CPUClock, clock_for
from workbench.pd.costmodel import CostModel
from workbench.pd.metrics import RequestStats, summarize
from workbench.pd.profile import extend
from workbench.pd.sim import SimConfig, Workload, simulate

__all__ = ["MIN_DRIFT_PCT", "CPUClock", "clock_for", "compare_to_sim", "run_serving",
           "sim_config_for"]

MIN_DRIFT_PCT = 1.0  # a speed change below 1% is within a profile point's repeat-to-repeat spread


def run_serving(runner, workload: Workload, *, max_prefill_batch: int = 4, seed: int = 0,
                clock=time.perf_counter, sleep=time.sleep, warmup: bool = True) -> pd.DataFrame:
    """Serve ``workload`` on ``runner`` in real time; one row per request with measured ``ttft_ms``,
    ``tpot_ms``, ``e2e_ms``, ``itl_ms`` (list), ``itl_mean_ms``, ``arrival_s``, ``finish_s``.

    ``clock``/``sleep``: wall time by default; a :class:`CPUClock` ``c`` (``clock=c, sleep=c.sleep``)
    on a shared CPU. Prompts are random token ids (seeded; step time does not depend on them).
    ``warmup``: run every step shape once first (see :func:`_warm_up`), so no CUDA graph capture or
    first-call cost lands inside a timed step. The GC is paused while serving. Raises
    ``ValueError`` when a request does not fit one slot (``prompt + output > runner.max_seq``).
    """
    if int(np.max(workload.prompt_len + workload.output_len)) > runner.max_seq:
        raise ValueError(f"a request needs more than runner.max_seq={runner.max_seq} tokens; "
                         "build the runner with a larger max_seq")
    if warmup:
        _warm_up(runner, int(np.max(workload.prompt_len)), max_prefill_batch)
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collector pauses inside timed steps (as vLLM freezes the GC while serving)
    try:
        return _serve(runner, workload, max_prefill_batch, seed, clock, sleep)
    finally:
        if gc_was_enabled:
            gc.enable()


def _warm_up(runner, prompt_len: int, max_prefill_batch: int) -> None:
    """Run every step shape the loop will use once, untimed: prefill ``[b, prompt_len]`` for each
    prefill batch size, decode ``[b, 1]`` for each batch size over in-order and scattered slots (an
    Engine captures its CUDA graph for each on first use). Leaves every slot empty."""
    for b in range(1, min(max_prefill_batch, runner.max_batch) + 1):
        slots = torch.arange(b)
        for s in range(b):
            runner.truncate_slot(s, 0)
        extend(runner, slots, torch.zeros(b, prompt_len, dtype=torch.int64)).argmax(-1).tolist()
    for b in range(1, runner.max_batch + 1):
        for slots in (torch.arange(b), torch.arange(b).flip(0)):
            for s in range(b):
                runner.truncate_slot(s, 0)
            extend(runner, slots, torch.zeros(b, 1, dtype=torch.int64)).argmax(-1).tolist()
    for s in range(runner.max_batch):
        runner.truncate_slot(s, 0)
    runner.synchronize()


def _serve(runner, workload: Workload, max_prefill_batch: int, seed: int, clock, sleep) -> pd.DataFrame:
    n = len(workload)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, runner.vocab_size, (int(L),), generator=g) for L in workload.prompt_len]
    arr = workload.arrival_s.tolist()
    n_out = workload.output_len.tolist()
    stats = RequestStats()
    free = list(range(runner.max_batch))[::-1]
    running: dict[int, int] = {}  # slot -> request
    last_tok: dict[int, int] = {}  # slot -> newest token id
    times: list[list[float]] = [[] for _ in range(n)]
    waiting: deque = deque()
    nxt, done = 0, 0
    t0 = clock()
    while done < n:
        now = clock() - t0 + 1e-9  # tolerance: after sleep(dt), clock() - t0 may round just below
        while nxt < n and arr[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if waiting and free:  # ---- prefill step (prefill first)
            batch = []
            while waiting and free and len(batch) < max_prefill_batch:
                batch.append((free.pop(), waiting.popleft()))
            slots = torch.tensor([s for s, _ in batch])
            lens = torch.tensor([len(prompts[r]) for _, r in batch])
            tok = torch.zeros(len(batch), int(lens.max()), dtype=torch.int64)
            for j, (_, r) in enumerate(batch):
                tok[j, : lens[j]] = prompts[r]
            for s, _ in batch:
                runner.truncate_slot(s, 0)
            logits = extend(runner, slots, tok, lens)
            runner.synchronize()
            t = clock() - t0
            nxt_tok = logits.argmax(-1).tolist()
            for j, (s, r) in enumerate(batch):
                times[r].append(t)
                running[s], last_tok[s] = r, nxt_tok[j]
        elif running:  # ---- decode step
            slots_l = sorted(running)
            slots = torch.tensor(slots_l)
            tok = torch.tensor([[last_tok[s]] for s in slots_l])
            logits = extend(runner, slots, tok)
            runner.synchronize()
            t = clock() - t0
            nxt_tok = logits.argmax(-1).tolist()
            for j, s in enumerate(slots_l):
                times[running[s]].append(t)
                last_tok[s] = nxt_tok[j]
        else:
            sleep(max(0.0, arr[nxt] - (clock() - t0)))
            continue
        for s in [s for s, r in running.items() if len(times[r]) >= n_out[r]]:
            r = running.pop(s)
            stats.observe(r, arr[r], times[r], int(workload.prompt_len[r]))
            free.append(s)
            done += 1
    return stats.to_frame()


def sim_config_for(runner, *, max_prefill_batch: int = 4) -> SimConfig:
    """The :class:`SimConfig` of the loop above: colocated, one instance, ``max_batch`` = slots,
    ``max_prefill_batch`` as given, KV capacity ``max_batch * max_seq`` (never binding)."""
    return SimConfig(policy="colocated", n_instances=1, max_batch=runner.max_batch,
                     max_prefill_batch=max_prefill_batch, max_prefill_tokens=runner.max_batch * runner.max_seq,
                     kv_capacity_tokens=runner.max_batch * runner.max_seq)


def compare_to_sim(measured: pd.DataFrame, workload: Workload, cost: CostModel, config: SimConfig,
                   drift: pd.DataFrame | None = None, client_overhead_ms: float = 0.0) -> pd.DataFrame:
    """Simulate ``workload`` under ``config`` with ``cost`` and compare to ``measured`` (from
    :func:`run_serving`): one row per metric (mean and p50/p90/p99 of TTFT, TPOT, E2E) with
    ``real``, ``sim`` and ``err_pct = 100 (sim - real) / real``.

    ``drift`` (from :func:`workbench.pd.profile.drift_check`, run after the loop): the machine's
    speed change since the profile the cost model was fitted to, per phase. Adds ``drift_pct`` (the
    prefill point's for TTFT, the decode point's for TPOT, the larger in size for E2E) and
    ``warning``: True where ``|drift_pct| > |err_pct|``, i.e. the machine moved more than the error
    shown, so that error says nothing about the simulator (changes below :data:`MIN_DRIFT_PCT` are
    timing noise and never warn).

    ``client_overhead_ms``: time a measured request spends outside the engine (HTTP, an API server's processing;
    :func:`workbench.pd.server.client_overhead_ms`), added to every simulated TTFT and E2E.
    """
    simulated = simulate(workload, config, cost)
    if client_overhead_ms:
        simulated["ttft_ms"] += client_overhead_ms
        simulated["e2e_ms"] += client_overhead_ms
    sim = summarize(simulated).iloc[0]
    real = summarize(measured).iloc[0]
    rows = []
    for m in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p50", "p90", "p99"):
            k = f"{stat}_{m}_ms"
            rows.append({"metric": k, "real": real[k], "sim": sim[k], "err_pct": 100 * (sim[k] / real[k] - 1)})
    out = pd.DataFrame(rows)
    if drift is not None:
        by_phase = dict(zip(drift["phase"], drift["drift_pct"]))
        both = max(by_phase.values(), key=abs)
        phase_drift = {"ttft": by_phase["prefill"], "tpot": by_phase["decode"], "e2e": both}
        out["drift_pct"] = [phase_drift[k.split("_")[1]] for k in out["metric"]]
        moved = out["drift_pct"].abs()
        out["warning"] = (moved > out["err_pct"].abs()) & (moved >= MIN_DRIFT_PCT)
    return out
