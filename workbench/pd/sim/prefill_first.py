"""Event loops of prefill-first instances: colocated (vLLM v0 default scheduler; Yu et al. 2022 Orca),
disaggregated decode instances (requests arrive with their prompt's KV cache), and prefill-only
instances (disaggregated prefill).
"""

from __future__ import annotations

from collections import deque

from workbench.pd.costmodel import CostModel
from workbench.pd.sim.instance import DecodeBatch, Requests, prefill_step_ms

__all__ = ["run_prefill_first", "run_prefill_only"]

NONE = ([], 0, 0, False)  # nothing admitted, not blocked


def run_prefill_only(arr, prompt, cost: CostModel, max_prefill_batch: int, max_prefill_tokens: int) -> list:
    """A prefill instance: FCFS batches of the waiting prompts, up to ``max_prefill_batch`` prompts
    and ``max_prefill_tokens`` tokens (the head always runs). ``arr`` sorted, ms. Returns each
    request's prefill end time (ms), in input order."""
    n, t, head = len(arr), 0.0, 0
    done = [0.0] * n
    while head < n:
        t = max(t, arr[head])
        end, tokens, attn_sq = head, 0, 0
        while end < n and arr[end] <= t and end - head < max_prefill_batch:
            if end > head and tokens + prompt[end] > max_prefill_tokens:
                break
            tokens += prompt[end]
            attn_sq += prompt[end] * prompt[end]
            end += 1
        t += prefill_step_ms(cost, tokens, attn_sq)
        for q in range(head, end):
            done[q] = t
        head = end
    return done


def run_prefill_first(arr, prompt, n_out, has_kv, cost: CostModel, cap: int, max_batch: int,
                      max_prefill_tokens: int, max_prefill_batch: int, record: bool = False) -> tuple:
    """One prefill-first instance: a prefill step runs whenever the FCFS head of the waiting queue
    fits (KV ``cap`` tokens, ``max_batch`` sequences); otherwise all running sequences decode. When
    the next decode step would overflow ``cap``, the most recently admitted sequence is preempted and
    recomputed later. ``has_kv`` requests skip the prefill and join the batch directly.

    Inputs are per-request Python lists (``arr`` sorted, ms). Returns :meth:`Requests.results`:
    ``(first_ms, finish_ms, n_preempt, n_tokens)`` lists, plus every request's token times with
    ``record`` (for ITL, at some cost in speed).
    """
    reqs = Requests(arr, prompt, n_out, has_kv, record)
    batch = DecodeBatch(reqs, cost, record)
    limits = (cap, max_batch, max_prefill_tokens, max_prefill_batch)
    waiting: deque = deque()  # FCFS
    admitted: list = []  # admission order: LIFO preemption victims (stale entries skipped)
    n, t, nxt = len(arr), 0.0, 0
    while reqs.n_done < n:
        while nxt < n and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if batch.size == 0 and not waiting:
            t = arr[nxt]
            continue
        prefill, tokens, attn_sq, blocked = _admit(reqs, batch, waiting, admitted, limits) if waiting else NONE
        if prefill:
            t += prefill_step_ms(cost, tokens, attn_sq)
            for i in prefill:
                if not reqs.emit(i, t):
                    reqs.has_kv[i] = True
                    batch.join(i)
                    admitted.append(i)
            continue
        if batch.size == 0:  # head blocked with nothing running: excluded by simulate's validation
            raise RuntimeError("request does not fit an empty instance; check kv_capacity_tokens")
        if batch.kv_tokens + batch.size > cap:
            _preempt(batch, waiting, admitted, cap)
            if batch.size == 0:
                continue
        # decode until the next completion or KV-full step, or the step during which a request arrives
        until = arr[nxt] if not waiting and not blocked and nxt < n else None
        t = batch.advance(t, (cap - batch.kv_tokens) // batch.size, until)
    return reqs.results()


def _admit(reqs: Requests, batch: DecodeBatch, waiting: deque, admitted: list, limits: tuple) -> tuple:
    """FCFS admission from the head of ``waiting``: requests with KV join ``batch`` directly; the
    others form one prefill step. Returns ``(prefill ids, tokens, attn_sq, blocked)``; ``blocked``:
    the head does not fit the KV cache now."""
    cap, max_batch, max_tokens, max_prompts = limits
    prefill, tokens, attn_sq = [], 0, 0
    while waiting and batch.size + len(prefill) < max_batch:
        i = waiting[0]
        if reqs.has_kv[i]:
            if prefill:
                break
            if batch.kv_tokens + reqs.prompt[i] + reqs.generated[i] - 1 + batch.size + 1 > cap:
                return prefill, tokens, attn_sq, True
            waiting.popleft()
            batch.join(i)
            admitted.append(i)
            continue
        length = reqs.prompt[i] + reqs.generated[i]
        if prefill and (tokens + length > max_tokens or len(prefill) >= max_prompts):
            break
        if batch.kv_tokens + tokens + length + batch.size + len(prefill) + 1 > cap:
            return prefill, tokens, attn_sq, True
        waiting.popleft()
        prefill.append(i)
        tokens += length
        attn_sq += length * length
    return prefill, tokens, attn_sq, False


def _preempt(batch: DecodeBatch, waiting: deque, admitted: list, cap: int) -> None:
    """Preempt the most recently admitted running sequences (recompute) until one decode step fits."""
    while batch.kv_tokens + batch.size > cap:
        victim = admitted.pop()
        if batch.finish_step[victim] < 0:
            continue
        batch.evict(victim)
        waiting.appendleft(victim)
