"""Speculative decoding with synthetic acceptance: realized vs theoretical speedup on the engine.

Each draft token is accepted with a fixed probability alpha, independently, until the first
rejection (vLLM's synthetic rejection sampler), so no trained draft/target pair is needed; the
draft and target still run their real forwards (draft: k decode steps; target: one verify step of
k + 1 tokens), their KV caches are rolled back exactly as in a real run.

Theory (Leviathan et al. 2023, arXiv 2211.17192, eq. 1 and Theorem 3.8): expected tokens per step
``(1 - alpha^(k+1)) / (1 - alpha)``, cost per step ``k c + 1`` target-step units, so the speedup is
``(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))`` with ``c`` = draft step time / target step time.
"""

from __future__ import annotations

import random

import torch

from benchmarks.bench_decode import engine_decode_ms_per_token, verify_ms
from benchmarks.common import Stopwatch
from workbench.engine import Engine


def theoretical_speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    """``(1 - alpha^(k+1)) / ((1 - alpha)(k c + verify_cost))`` (Leviathan et al. 2023, Thm 3.8)."""
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + verify_cost))


def synthetic_spec_ms(target: Engine, draft: Engine, alpha: float, k: int, n_tokens: int = 192,
                      prompt_len: int = 64, seed: int = 0) -> dict:
    """Run speculative decoding on slot 0 of both engines until ``n_tokens`` are emitted.

    Invariant: both caches hold the committed sequence except its last token ``last``. A step: the
    draft feeds its pending tokens (1, or 2 after a fully accepted step) and proposes d_1..d_k
    greedily (k forwards); the target verifies ``[last, d_1..d_k]`` in one forward; n ~ accepted
    count; the target's argmax after the n-th accepted token is the bonus token; both caches are
    truncated to the committed prefix. Returns wall ms, tokens, steps.
    """
    rng = random.Random(seed)
    dev = target.device
    vocab = min(target.vocab_size, draft.vocab_size)  # Qwen2-7B pads to 152064, 0.5B to 151936
    target.reset()
    draft.reset()
    prompt = torch.randint(100, 1000, (1, prompt_len), device=dev)
    target.extend_batch([0], prompt[:, :-1], logits="last")
    draft.extend_batch([0], prompt[:, :-1], logits="last")
    base = prompt_len - 1  # committed tokens in both caches
    last = prompt[:, -1:]  # [1, 1]
    pending = last
    emitted = steps = 0

    def run_steps(n_tok: int) -> tuple[int, int]:
        nonlocal base, last, pending
        em = st = 0
        while em < n_tok:
            drafts = []
            inp = pending
            for _ in range(k):
                tok = draft.extend_batch([0], inp)[:, -1].argmax(-1, keepdim=True)  # [1, 1]
                drafts.append(tok)
                inp = tok
            logits = target.extend_batch([0], torch.cat([last] + drafts, dim=1))  # [1, k+1, V]
            n = 0
            while n < k and rng.random() < alpha:
                n += 1
            bonus = logits[:, n, :vocab].argmax(-1, keepdim=True)  # a token both models embed
            target.truncate_slot(0, base + 1 + n)
            if n < k:
                draft.truncate_slot(0, base + 1 + n)
                pending = bonus
            else:  # the draft never fed d_k: feed it with the bonus next step
                pending = torch.cat([drafts[-1], bonus], dim=1)
            base += 1 + n
            last = bonus
            em += n + 1
            st += 1
        return em, st

    run_steps(3 * (k + 1))  # warm-up: captures the draft (T=1, 2) and verify (T=k+1) graphs
    sw = Stopwatch().start()
    emitted, steps = run_steps(n_tokens)
    ms = sw.stop()
    return {"ms": ms, "tokens": emitted, "steps": steps}


def bench_spec(target: Engine, draft: Engine, alphas=(0.6, 0.8, 0.9), ks=(2, 4, 6, 8), n_tokens=400) -> list:
    """One row per (alpha, k): realized and theoretical speedups over plain engine decoding."""
    t_ms = engine_decode_ms_per_token(target, 1, 64, 64)
    d_ms = engine_decode_ms_per_token(draft, 1, 64, 64)
    c = d_ms / t_ms
    rows = []
    for k in ks:
        v = verify_ms(target, k + 1) / t_ms
        for alpha in alphas:
            r = synthetic_spec_ms(target, draft, alpha, k, n_tokens)
            realized = t_ms * r["tokens"] / r["ms"]
            theory = theoretical_speedup(alpha, k, c)
            tau = r["tokens"] / r["steps"]
            rows.append({"alpha": alpha, "k": k, "c": c, "target_ms": t_ms, "draft_ms": d_ms,
                         "verify_cost": v, "tau": tau, "ratio_at_realized_tau": realized / (tau / (k * c + 1)),
                         "tau_expected": (1 - alpha ** (k + 1)) / (1 - alpha),
                         "spec_ms_per_token": r["ms"] / r["tokens"], "realized_speedup": realized,
                         "theoretical_speedup": theory, "ratio": realized / theory,
                         "theory_with_verify_cost": theoretical_speedup(alpha, k, c, v)})
    return rows
