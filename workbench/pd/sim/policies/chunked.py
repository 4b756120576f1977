"""Chunked prefill under a token budget per step (Sarathi-Serve, Agrawal et al. 2024, arXiv 2403.02310).

Every step first gives one token to each running decode, then fills the rest of ``chunk_budget`` with
prefill chunks, FCFS (vLLM ``enable_chunked_prefill``). Decodes never stall behind a whole prompt; a
prompt's last chunk emits its first token. A hybrid step costs :meth:`CostModel.mixed_ms`. KV for a
whole prompt is reserved when its prefill starts; preemption (recompute) takes the most recently
admitted request when a step would overflow the cache.
"""

from __future__ import annotations

from collections import deque

from workbench.pd.costmodel import CostModel, PoolCosts
from workbench.pd.sim.instance import DecodeBatch, Requests, round_robin

NAME = "chunked"


class Prefills:
    """Prompts being prefilled, FCFS: ``queue``, per request ``progress`` (prompt tokens done) and
    ``active`` flags, and ``reserved`` (KV tokens held for their whole prompts)."""

    __slots__ = ("active", "progress", "queue", "reserved")

    def __init__(self, n: int):
        self.queue: list = []
        self.progress, self.active = [0] * n, [False] * n
        self.reserved = 0


def run_chunked(arr, prompt, n_out, cost: CostModel, cap: int, max_batch: int, budget: int,
                record: bool = False) -> tuple:
    """One chunked-prefill instance; lists in (``arr`` sorted, ms), :meth:`Requests.results` out
    (see :func:`workbench.pd.sim.prefill_first.run_prefill_first`)."""
    reqs = Requests(arr, prompt, n_out, None, record)
    batch = DecodeBatch(reqs, cost, record)
    prefills = Prefills(len(arr))
    mixed_ms = cost.mixed_step()  # CostModel.mixed_ms with its coefficients bound
    waiting: deque = deque()  # FCFS
    admitted: list = []  # admission order into prefill: LIFO preemption victims
    n, t, nxt = len(arr), 0.0, 0
    while reqs.n_done < n:
        while nxt < n and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if batch.size == 0 and not prefills.queue and not waiting:
            t = arr[nxt]
            continue
        if waiting:
            _admit(reqs, batch, prefills, waiting, admitted, cap, max_batch)
        if batch.kv_tokens + prefills.reserved + batch.size > cap:
            _preempt(reqs, batch, prefills, waiting, admitted, cap)
        if prefills.queue:
            t = _hybrid_step(reqs, batch, prefills, mixed_ms, budget, t)
            continue
        if batch.size == 0:
            continue
        # decode until the next completion or KV-full step, or the step during which a request arrives
        until = arr[nxt] if not waiting and nxt < n else None
        t = batch.advance(t, (cap - batch.kv_tokens - prefills.reserved) // batch.size, until)
    return reqs.results()


def _admit(reqs, batch, prefills: Prefills, waiting: deque, admitted: list, cap: int, max_batch: int) -> None:
    """Move waiting requests into prefill, FCFS, reserving each whole prompt's KV cache."""
    while waiting and batch.size + len(prefills.queue) < max_batch:
        i = waiting[0]
        length = reqs.prompt[i] + reqs.generated[i]
        if batch.kv_tokens + prefills.reserved + length + batch.size + len(prefills.queue) + 1 > cap:
            break
        waiting.popleft()
        prefills.queue.append(i)
        prefills.active[i], prefills.progress[i] = True, 0
        prefills.reserved += length
        admitted.append(i)


def _preempt(reqs, batch, prefills: Prefills, waiting: deque, admitted: list, cap: int) -> None:
    """Preempt (recompute) the most recently admitted requests, prefilling or decoding, until a step fits."""
    while batch.kv_tokens + prefills.reserved + batch.size > cap:
        victim = admitted.pop()
        if prefills.active[victim]:
            prefills.active[victim] = False
            prefills.reserved -= reqs.prompt[victim] + reqs.generated[victim]
            prefills.queue.remove(victim)
            reqs.n_preempt[victim] += 1
        elif batch.finish_step[victim] >= 0:
            batch.evict(victim)
        else:
            continue
        waiting.appendleft(victim)


def _hybrid_step(reqs, batch, prefills: Prefills, mixed_ms, budget: int, t: float) -> float:
    """One step: a token for every running sequence, then prefill chunks up to ``budget`` tokens;
    a prompt whose last chunk ran emits its first token and joins the batch; ``mixed_ms`` times it
    (:meth:`CostModel.mixed_step`). Returns the end time."""
    size, prompt, generated, progress = batch.size, reqs.prompt, reqs.generated, prefills.progress
    room, tokens, attn_sq, finished = budget - size, 0, 0, []
    for i in prefills.queue:
        if room <= 0:
            break
        length = prompt[i] + generated[i]
        done = progress[i]
        m = min(room, length - done)
        tokens += m
        attn_sq += m * (2 * done + m)  # the chunk's query-key pairs, twice (CostModel docs)
        progress[i] = done + m
        room -= m
        if done + m == length:
            finished.append(i)
    t += mixed_ms(tokens, attn_sq, size, batch.kv_tokens)
    if size:
        batch.tick(t)
    for i in finished:
        prefills.queue.remove(i)
        prefills.active[i] = False
        prefills.reserved -= reqs.prompt[i] + reqs.generated[i]
        if not reqs.emit(i, t):
            batch.join(i)
    return t


def run(workload, config, costs: PoolCosts, record: bool = False) -> dict:
    """Round-robin over ``config.n_instances`` chunked instances; per-request arrays (ms), and with
    ``record`` ``token_ms``: every request's token times. A hybrid step's prefill terms come from
    ``costs.prefill``, its decode terms from ``costs.decode`` (:meth:`PoolCosts.combined`)."""
    cost = costs.combined()
    return round_robin(workload, config.n_instances, record, lambda arr, prompt, out_len: run_chunked(
        arr, prompt, out_len, cost, config.kv_capacity_tokens, config.max_batch, config.chunk_budget, record))
