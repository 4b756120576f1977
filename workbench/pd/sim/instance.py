"""Event loops of one serving instance (batch-level steps, not per-token events).

Bookkeeping per request ``i``: ``G`` tokens generated so far; while it runs its KV cache holds
``prompt + G - 1`` tokens (the newest token's K/V is written by the next step). A prefill (or, after a
preemption, a *recompute* over ``prompt + G`` tokens, as vLLM's RECOMPUTE mode) emits one token.
Every decode step emits one token per running sequence and adds one cached token each.

Speed: between events (an arrival to admit, a completion, the KV cache filling up) every decode step
has the same batch and a KV total growing by ``batch`` per step, so the step times are
``max(alpha1 + beta1 j, alpha2 + beta2 j)`` and ``k`` steps are advanced in closed form (:func:`cum_steps`).
Plain Python scalars and lists inside the loop; numpy only outside.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from workbench.pd.costmodel import CostModel

__all__ = ["cum_steps", "run_prefill_first", "run_prefill_only", "step_ends", "steps_until"]


def _seg(p: int, q: int, a: float, b: float) -> float:
    """sum_{j=p}^{q-1} (a + b j)."""
    return (q - p) * a + b * (q * (q - 1) - p * (p - 1)) * 0.5


def cum_steps(k: int, a1: float, b1: float, a2: float, b2: float) -> float:
    """sum_{j=0}^{k-1} max(a1 + b1 j, a2 + b2 j): time of ``k`` decode steps, ms."""
    db, da = b2 - b1, a2 - a1
    if db == 0.0:
        return _seg(0, k, a1, b1) if da <= 0 else _seg(0, k, a2, b2)
    js = -da / db  # crossing point of the two lines
    if db > 0:  # line 2 on top for j > js
        m = min(max(math.floor(js) + 1, 0), k)
        return _seg(0, m, a1, b1) + _seg(m, k, a2, b2)
    m = min(max(math.ceil(js), 0), k)  # line 2 on top for j < js
    return _seg(0, m, a2, b2) + _seg(m, k, a1, b1)


def steps_until(dt: float, kmax: int, a1: float, b1: float, a2: float, b2: float) -> int:
    """Smallest ``k`` in [1, kmax] with ``cum_steps(k) >= dt`` (``kmax`` if none): the step during
    which an event ``dt`` ms ahead happens."""
    if cum_steps(kmax, a1, b1, a2, b2) < dt:
        return kmax
    lo, hi = 1, kmax
    if b1 > 0:  # line 1 alone is a lower envelope: its quadratic root bounds k from above
        root = (-(a1 - 0.5 * b1) + math.sqrt((a1 - 0.5 * b1) ** 2 + 2.0 * b1 * dt)) / b1
        hi = min(kmax, max(1, math.ceil(root) + 1))
    elif a1 > 0:
        hi = min(kmax, max(1, math.ceil(dt / a1) + 1))
    while lo < hi:
        mid = (lo + hi) // 2
        if cum_steps(mid, a1, b1, a2, b2) >= dt:
            hi = mid
        else:
            lo = mid + 1
    return lo


def step_ends(t0: float, k: int, a1: float, b1: float, a2: float, b2: float) -> list:
    """End times of ``k`` decode steps starting at ``t0`` (for token timestamps; numpy, one call)."""
    j = np.arange(k, dtype=np.float64)
    return (t0 + np.cumsum(np.maximum(a1 + b1 * j, a2 + b2 * j))).tolist()


def run_prefill_only(arr, prompt, cost: CostModel, max_prefill_batch: int, max_prefill_tokens: int):
    """A prefill instance (disaggregated): FCFS, batches of waiting prompts up to the limits.
    Returns the list of first-token times (ms) in input order. ``arr`` sorted, ms."""
    a, b, c = cost.a, cost.b, cost.c
    a2, b2, c2 = cost.floor[:3]
    n, t, i = len(arr), 0.0, 0
    done = [0.0] * n
    while i < n:
        t = max(t, arr[i])
        j, tok, sq = i, 0, 0
        while j < n and arr[j] <= t and j - i < max_prefill_batch:
            L = prompt[j]
            if j > i and tok + L > max_prefill_tokens:
                break
            tok += L
            sq += L * L
            j += 1
        t += max(a + b * tok + c * sq, a2 + b2 * tok + c2 * sq)
        for q in range(i, j):
            done[q] = t
        i = j
    return done


def run_prefill_first(arr, prompt, n_out, has_kv, cost: CostModel, cap: int, max_batch: int,
                      max_prefill_tokens: int, max_prefill_batch: int, record: bool = False):
    """A colocated instance with prefill-first continuous batching (vLLM v0 default scheduler), also
    used for disaggregated decode instances (requests arrive with ``has_kv`` True: their prompt's KV
    cache and first token came from a prefill instance).

    A prefill step runs whenever the FCFS head of the waiting queue fits (KV ``cap`` tokens,
    ``max_batch`` sequences); otherwise all running sequences decode. When the next decode step
    would overflow ``cap``, the most recently admitted sequence is preempted and recomputed later.
    Inputs are per-request Python lists (``arr`` sorted, ms). Returns ``(first_ms, finish_ms,
    n_preempt, n_tokens)`` lists: ``n_tokens`` counts the tokens generated, step by step; ``first_ms``
    is NaN for ``has_kv`` requests (their first token was made elsewhere). With ``record`` a fifth
    item lists every request's token times (ms; for ITL), at some cost in speed.
    """
    a, b, c, d, e, f = cost.a, cost.b, cost.c, cost.d, cost.e, cost.f
    a2, b2, c2, d2, e2, f2 = cost.floor
    n = len(arr)
    nan = float("nan")
    first, finish, npre, ntok = [nan] * n, [nan] * n, [0] * n, [0] * n
    G = [1 if h else 0 for h in has_kv]  # tokens generated
    kv = list(has_kv)  # prompt KV present (arrived with it) -> no prefill needed
    gj = [0] * n  # decode-step counter at join
    Gj = [0] * n  # G at join
    fin = [-1] * n  # counter value at which the request finishes (-1: not running)
    heap: list = []
    order: list = []  # admission order (LIFO preemption victims); stale entries skipped
    waiting: deque = deque()
    t, g, K, B, nxt, ndone = 0.0, 0, 0, 0, 0, 0
    dec_t = [0.0]  # with record: dec_t[g] = end time of decode step g
    toks: list = [[] for _ in range(n)] if record else []
    while ndone < n:
        while nxt < n and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if B == 0 and not waiting:
            t = arr[nxt]
            continue
        # ---- admission: KV-ready requests join directly; the others form one prefill step -------------
        pre, tok, sq, blocked = [], 0, 0, False
        while waiting and B + len(pre) < max_batch:
            i = waiting[0]
            if kv[i]:
                if pre:
                    break
                need = prompt[i] + G[i] - 1
                if K + need + B + 1 > cap:
                    blocked = True
                    break
                waiting.popleft()
                K += need
                B += 1
                gj[i], Gj[i], fin[i] = g, G[i], g + n_out[i] - G[i]
                heapq.heappush(heap, (fin[i], i))
                order.append(i)
                continue
            L = prompt[i] + G[i]
            if pre and (tok + L > max_prefill_tokens or len(pre) >= max_prefill_batch):
                break
            if K + tok + L + B + len(pre) + 1 > cap:
                blocked = True
                break
            waiting.popleft()
            pre.append(i)
            tok += L
            sq += L * L
        if pre:
            t += max(a + b * tok + c * sq, a2 + b2 * tok + c2 * sq)
            for i in pre:
                G[i] += 1
                if G[i] == 1:
                    first[i] = t
                if record:
                    toks[i].append(t)
                if G[i] >= n_out[i]:
                    finish[i], ntok[i] = t, G[i]
                    ndone += 1
                    continue
                kv[i] = True
                K += prompt[i] + G[i] - 1
                B += 1
                gj[i], Gj[i], fin[i] = g, G[i], g + n_out[i] - G[i]
                heapq.heappush(heap, (fin[i], i))
                order.append(i)
            continue
        if B == 0:  # head blocked with nothing running cannot happen (validated: every request fits)
            raise RuntimeError("request does not fit an empty instance; check kv_capacity_tokens")
        # ---- preempt (LIFO, recompute) until one decode step fits ------------------------------------
        while K + B > cap:
            v = order.pop()
            if fin[v] < 0:
                continue
            Gv = Gj[v] + (g - gj[v])
            K -= prompt[v] + Gv - 1
            B -= 1
            if record:
                toks[v].extend(dec_t[gj[v] + 1: g + 1])
            G[v], kv[v], fin[v] = Gv, False, -1
            npre[v] += 1
            waiting.appendleft(v)
        if B == 0:
            continue
        # ---- advance k decode steps in closed form ------------------------------------------------
        while fin[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)
        k = min(heap[0][0] - g, (cap - K) // B)
        al1, be1, al2, be2 = d + e * B + f * K, f * B, d2 + e2 * B + f2 * K, f2 * B
        if not waiting and not blocked and nxt < n:
            k = steps_until(arr[nxt] - t, k, al1, be1, al2, be2)
        if record:
            dec_t.extend(step_ends(t, k, al1, be1, al2, be2))
        t += cum_steps(k, al1, be1, al2, be2)
        g += k
        K += B * k
        while heap and heap[0][0] <= g:
            fg, i = heapq.heappop(heap)
            if fin[i] != fg:
                continue
            fin[i] = -1
            if record:
                toks[i].extend(dec_t[gj[i] + 1: g + 1])
            finish[i], ntok[i] = t, Gj[i] + g - gj[i]
            ndone += 1
            B -= 1
            K -= prompt[i] + n_out[i] - 1
    return (first, finish, npre, ntok, toks) if record else (first, finish, npre, ntok)


def round_robin(workload, n_instances: int, record: bool, run_one) -> dict:
    """Route requests round-robin over ``n_instances`` identical instances and gather per-request arrays.

    ``run_one(arrival_ms, prompt_len, output_len)`` (lists for one instance's requests) returns
    ``(first, finish, n_preempt, n_tokens[, token_times])`` as the instance loops here do. Returns
    ``first_ms``, ``finish_ms`` (ms since t = 0), ``n_preempt``, ``n_tokens``, ``instance``, and with
    ``record`` ``token_ms`` (every request's token times, ms).
    """
    n = len(workload)
    arr = workload.arrival_s * 1e3
    out = {k: np.full(n, np.nan) for k in ("first_ms", "finish_ms")}
    out["n_preempt"], out["instance"] = np.zeros(n, np.int64), np.arange(n) % n_instances
    out["n_tokens"] = np.zeros(n, np.int64)
    out["token_ms"] = [None] * n if record else None
    for inst in range(n_instances):
        idx = np.flatnonzero(out["instance"] == inst)
        if idx.size == 0:
            continue
        fi, fn, npre, ntok, *toks = run_one(arr[idx].tolist(), workload.prompt_len[idx].tolist(),
                                            workload.output_len[idx].tolist())
        for j, q in enumerate(idx.tolist() if record else ()):
            out["token_ms"][q] = toks[0][j]
        out["first_ms"][idx], out["finish_ms"][idx], out["n_preempt"][idx] = fi, fn, npre
        out["n_tokens"][idx] = ntok
    return out
