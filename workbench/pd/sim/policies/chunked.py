"""Chunked prefill under a token budget per step (Sarathi-Serve, Agrawal et al. 2024, arXiv 2403.02310).

Every step first gives one token to each running decode, then fills the rest of ``chunk_budget`` with
prefill chunks, FCFS (vLLM ``enable_chunked_prefill``). Decodes never stall behind a whole prompt; a
prompt's last chunk emits its first token. A hybrid step costs :meth:`CostModel.mixed_ms`. KV for a
whole prompt is reserved when its prefill starts; preemption (recompute) takes the most recently
admitted request when a step would overflow the cache.
"""

from __future__ import annotations

import heapq
from collections import deque

from workbench.pd.costmodel import CostModel
from workbench.pd.sim.instance import cum_steps, round_robin, step_ends, steps_until

NAME = "chunked"


def run_chunked(arr, prompt, n_out, cost: CostModel, cap: int, max_batch: int, budget: int,
                record: bool = False):
    """One chunked-prefill instance; lists in, ``(first_ms, finish_ms, n_preempt, n_tokens)`` lists out
    (ms), plus every request's token times with ``record`` (see :func:`run_prefill_first`)."""
    d, e, f = cost.d, cost.e, cost.f
    d2, e2, f2 = cost.floor[3:]
    n = len(arr)
    nan = float("nan")
    first, finish, npre, ntok = [nan] * n, [nan] * n, [0] * n, [0] * n
    G, gj, Gj, fin, done_p = [0] * n, [0] * n, [0] * n, [-1] * n, [0] * n
    pref: list = []  # requests being prefilled, FCFS; each reserved prompt + G tokens of KV
    heap: list = []
    order: list = []  # admission order for LIFO preemption
    waiting: deque = deque()
    t, g, K, R, B, nxt, ndone = 0.0, 0, 0, 0, 0, 0, 0  # K: decoders' KV; R: reserved for prefills
    inpref = [False] * n
    dec_t = [0.0]  # with record: dec_t[g] = end time of the g-th step that decoded
    toks: list = [[] for _ in range(n)] if record else []
    while ndone < n:
        while nxt < n and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if B == 0 and not pref and not waiting:
            t = arr[nxt]
            continue
        while waiting and B + len(pref) < max_batch:  # admit into prefill, reserving the prompt's KV
            i = waiting[0]
            L = prompt[i] + G[i]
            if K + R + L + B + len(pref) + 1 > cap:
                break
            waiting.popleft()
            pref.append(i)
            inpref[i], done_p[i] = True, 0
            R += L
            order.append(i)
        while K + R + B > cap:  # preempt LIFO (recompute)
            v = order.pop()
            if inpref[v]:
                inpref[v] = False
                R -= prompt[v] + G[v]
                pref.remove(v)
            elif fin[v] >= 0:
                Gv = Gj[v] + (g - gj[v])
                K -= prompt[v] + Gv - 1
                B -= 1
                if record:
                    toks[v].extend(dec_t[gj[v] + 1: g + 1])
                G[v], fin[v] = Gv, -1
            else:
                continue
            npre[v] += 1
            waiting.appendleft(v)
        if pref:  # ---- one hybrid step: B decode tokens + prefill chunks -------------------------------
            room, tok, sq, fired = budget - B, 0, 0, []
            for i in pref:
                if room <= 0:
                    break
                L = prompt[i] + G[i]
                m = min(L - done_p[i], room)
                tok += m
                sq += m * (2 * done_p[i] + m)
                done_p[i] += m
                room -= m
                if done_p[i] == L:
                    fired.append(i)
            t += cost.mixed_ms(tok, sq, B, K)
            if B:
                g += 1
                K += B
                if record:
                    dec_t.append(t)
                while heap and heap[0][0] <= g:
                    fg, i = heapq.heappop(heap)
                    if fin[i] != fg:
                        continue
                    if record:
                        toks[i].extend(dec_t[gj[i] + 1: g + 1])
                    fin[i], finish[i], ntok[i] = -1, t, Gj[i] + g - gj[i]
                    ndone += 1
                    B -= 1
                    K -= prompt[i] + n_out[i] - 1
            for i in fired:
                pref.remove(i)
                inpref[i] = False
                L = prompt[i] + G[i]
                R -= L
                G[i] += 1
                if G[i] == 1:
                    first[i] = t
                if record:
                    toks[i].append(t)
                if G[i] >= n_out[i]:
                    finish[i], ntok[i] = t, G[i]
                    ndone += 1
                    continue
                K += L
                B += 1
                gj[i], Gj[i], fin[i] = g, G[i], g + n_out[i] - G[i]
                heapq.heappush(heap, (fin[i], i))
            continue
        if B == 0:
            continue
        # ---- decode-only stretch, advanced in closed form ------------------------------------------
        while fin[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)
        k = min(heap[0][0] - g, (cap - K - R) // B)
        al1, be1, al2, be2 = d + e * B + f * K, f * B, d2 + e2 * B + f2 * K, f2 * B
        if not waiting and nxt < n:
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
            if record:
                toks[i].extend(dec_t[gj[i] + 1: g + 1])
            fin[i], finish[i], ntok[i] = -1, t, Gj[i] + g - gj[i]
            ndone += 1
            B -= 1
            K -= prompt[i] + n_out[i] - 1
    return (first, finish, npre, ntok, toks) if record else (first, finish, npre, ntok)


def run(workload, config, cost: CostModel, record: bool = False) -> dict:
    """Round-robin over ``config.n_instances`` chunked instances; per-request arrays (ms), and with
    ``record`` ``token_ms``: every request's token times."""
    return round_robin(workload, config.n_instances, record, lambda arr, prompt, out_len: run_chunked(
        arr, prompt, out_len, cost, config.kv_capacity_tokens, config.max_batch, config.chunk_budget, record))
