"""One serving instance's state: its requests and its running decode batch (batch-level events, not
per-token events), shared by every policy's event loop.

Bookkeeping per request ``i``: ``generated[i]`` tokens so far; while it runs its KV cache holds
``prompt + generated - 1`` tokens (the newest token's K/V is written by the next step). A prefill
(or, after a preemption, a *recompute* over ``prompt + generated`` tokens, as vLLM's RECOMPUTE mode)
emits one token. Every decode step emits one token per running sequence and caches one token each.
A request that arrives with its prompt's KV cache (``has_kv``: a disaggregated decode instance)
joins the batch with ``generated = 0`` and ``prompt - 1`` cached tokens: its first decode step
computes the last prompt token and emits the first output token, as vLLM's KV connectors do.

Speed: between events the batch is fixed, so a whole stretch of decode steps is advanced in closed
form (:mod:`workbench.pd.sim.steps`). Plain Python scalars and lists inside the loops; numpy outside.
"""

from __future__ import annotations

import heapq

import numpy as np

from workbench.pd.costmodel import CostModel
from workbench.pd.sim.steps import cum_steps, step_ends, stretch_until

__all__ = ["DecodeBatch", "Requests", "prefill_step_ms", "round_robin"]


class Requests:
    """Per-request state of one instance's requests (local ids ``0..n-1``, arrival order), as lists.

    Inputs: ``arrival`` (ms, sorted), ``prompt`` and ``n_out`` (tokens), ``has_kv`` (prompt KV
    cache arrives with the request). Outputs: ``first`` and ``finish`` (ms; NaN until set),
    ``n_preempt``, ``n_tokens`` (tokens generated, counted step by step), and with ``record`` every
    token's time in ``tokens``. ``n_done`` counts finished requests.
    """

    __slots__ = ("arrival", "finish", "first", "generated", "has_kv", "n_done", "n_out", "n_preempt", "n_tokens",
                 "prompt", "tokens")

    def __init__(self, arrival: list, prompt: list, n_out: list, has_kv: list | None = None, record: bool = False):
        n = len(arrival)
        self.arrival, self.prompt, self.n_out = arrival, prompt, n_out
        self.has_kv = list(has_kv) if has_kv is not None else [False] * n
        self.generated = [0] * n
        nan = float("nan")
        self.first, self.finish = [nan] * n, [nan] * n
        self.n_preempt, self.n_tokens = [0] * n, [0] * n
        self.tokens: list = [[] for _ in range(n)] if record else []
        self.n_done = 0

    def emit(self, i: int, t: float) -> bool:
        """Request ``i`` emits one token at ``t`` outside the decode batch (a prefill's last chunk);
        True when that was its last token (it is then finished)."""
        g = self.generated[i] = self.generated[i] + 1
        if g == 1:
            self.first[i] = t
        if self.tokens:
            self.tokens[i].append(t)
        if g >= self.n_out[i]:
            self.finish[i], self.n_tokens[i] = t, g
            self.n_done += 1
            return True
        return False

    def results(self) -> tuple:
        """``(first_ms, finish_ms, n_preempt, n_tokens)`` lists, plus the token times when recorded."""
        out = (self.first, self.finish, self.n_preempt, self.n_tokens)
        return (*out, self.tokens) if self.tokens else out


def prefill_step_ms(cost: CostModel, tokens: int, attn_sq: int) -> float:
    """A prefill step's time, ms: :meth:`CostModel.prefill_ms` on Python scalars (no numpy in the loop)."""
    a2, b2, c2 = cost.floor[:3]
    return max(cost.a + cost.b * tokens + cost.c * attn_sq, a2 + b2 * tokens + c2 * attn_sq)


class DecodeBatch:
    """The running sequences of one instance (continuous batching: every decode step emits one token
    per sequence), with named state ``step`` (decode steps run so far), ``size`` (sequences running)
    and ``kv_tokens`` (cached tokens they hold).

    A request joining at step ``s`` with ``g`` tokens has ``g + (step - s)`` tokens later and
    finishes at step ``s + n_out - g``; a heap keyed by that step gives the next completion.
    ``finish_step[i] == -1`` means not running (stale heap entries are skipped).
    """

    __slots__ = ("_heap", "awaiting_first", "coef", "finish_step", "join_generated", "join_step", "kv_tokens",
                 "reqs", "size", "step", "step_end")

    def __init__(self, reqs: Requests, cost: CostModel, record: bool = False):
        n = len(reqs.arrival)
        self.reqs = reqs
        self.step = self.size = self.kv_tokens = 0
        self.join_step, self.join_generated, self.finish_step = [0] * n, [0] * n, [-1] * n
        self._heap: list = []
        self.awaiting_first: list = []  # joined with generated == 0: first token at the next step's end
        self.step_end = [0.0] if record else None  # step_end[s] = end time of decode step s
        self.coef = (cost.d, cost.e, cost.f, *cost.floor[3:])

    def join(self, i: int) -> None:
        """Admit request ``i`` (its KV cache: ``prompt + generated - 1`` tokens) into the batch."""
        g = self.reqs.generated[i]
        self.kv_tokens += self.reqs.prompt[i] + g - 1
        self.size += 1
        self.join_step[i], self.join_generated[i] = self.step, g
        end = self.finish_step[i] = self.step + self.reqs.n_out[i] - g
        heapq.heappush(self._heap, (end, i))
        if g == 0:
            self.awaiting_first.append(i)

    def evict(self, i: int) -> None:
        """Preempt running request ``i`` (recompute later): free its KV cache, keep its tokens."""
        g = self.join_generated[i] + self.step - self.join_step[i]
        self.kv_tokens -= self.reqs.prompt[i] + g - 1
        self.size -= 1
        if self.step_end is not None:
            self.reqs.tokens[i].extend(self.step_end[self.join_step[i] + 1: self.step + 1])
        self.reqs.generated[i], self.reqs.has_kv[i], self.finish_step[i] = g, False, -1
        self.reqs.n_preempt[i] += 1

    def advance(self, t: float, max_steps: int, until: float | None = None) -> float:
        """Run decode steps from time ``t`` (ms) until the next completion, at most ``max_steps``
        steps (``size`` must be > 0), stopping early at the step during which time ``until`` (ms)
        falls; the steps are summed in closed form. Returns the end time."""
        heap, fin = self._heap, self.finish_step
        while fin[heap[0][1]] != heap[0][0]:  # drop stale entries (preempted requests)
            heapq.heappop(heap)
        k = min(heap[0][0] - self.step, max_steps)
        d, e, f, d2, e2, f2 = self.coef
        size, kv = self.size, self.kv_tokens
        lines = (d + e * size + f * kv, f * size, d2 + e2 * size + f2 * kv, f2 * size)
        if until is not None:
            k, elapsed = stretch_until(until - t, k, *lines)
        else:
            elapsed = cum_steps(k, *lines)
        if self.awaiting_first:
            self._first_tokens(t + max(lines[0], lines[2]))
        if self.step_end is not None:
            self.step_end.extend(step_ends(t, k, *lines))
        t += elapsed
        self.step += k
        self.kv_tokens += size * k
        if heap[0][0] <= self.step:
            self._complete(t)
        return t

    def tick(self, t: float) -> None:
        """One decode step (part of a hybrid step) that ends at ``t``; ``size`` must be > 0."""
        if self.awaiting_first:
            self._first_tokens(t)
        self.step += 1
        self.kv_tokens += self.size
        if self.step_end is not None:
            self.step_end.append(t)
        if self._heap[0][0] <= self.step:
            self._complete(t)

    def _first_tokens(self, t: float) -> None:
        for i in self.awaiting_first:
            if self.finish_step[i] >= 0 and self.join_step[i] == self.step:
                self.reqs.first[i] = t
        self.awaiting_first.clear()

    def _complete(self, t: float) -> None:
        heap, fin, reqs = self._heap, self.finish_step, self.reqs
        while heap and heap[0][0] <= self.step:
            end, i = heapq.heappop(heap)
            if fin[i] != end:
                continue
            fin[i] = -1
            if self.step_end is not None:
                reqs.tokens[i].extend(self.step_end[self.join_step[i] + 1: self.step + 1])
            reqs.finish[i], reqs.n_tokens[i] = t, self.join_generated[i] + self.step - self.join_step[i]
            reqs.n_done += 1
            self.size -= 1
            self.kv_tokens -= reqs.prompt[i] + reqs.n_out[i] - 1


def round_robin(workload, n_instances: int, record: bool, run_one) -> dict:
    """Route requests round-robin over ``n_instances`` identical instances and gather per-request arrays.

    ``run_one(arrival_ms, prompt_len, output_len)`` (lists for one instance's requests) returns
    :meth:`Requests.results`. Returns ``first_ms``, ``finish_ms`` (ms since t = 0), ``n_preempt``,
    ``n_tokens``, ``instance``, and with ``record`` ``token_ms`` (every request's token times, ms).
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
