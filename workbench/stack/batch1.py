"""Batch-1 latency of one fixed request through the engine: plain decoding and speculative decoding.

Definitions (as ``vllm bench serve`` reports them, for one request):

* ``ttft_ms``: start to the first output token (plain: the prefill; speculative: caching the prompt in
  both models plus the first draft-and-verify step);
* ``e2e_ms``: start to the last token; ``tpot_ms = (e2e - ttft) / (n_out - 1)``;
* ``decode_tok_s = 1000 / tpot_ms``: the batch-1 decode rate.

Speculative rows run :func:`workbench.spec.generate.speculative_generate` over engine runners: with
real acceptance (the draft's own, exact rejection sampling) or, for a what-if ``alpha``, with
``acceptance="synthetic"`` where the installed :class:`workbench.spec.SpecConfig` has it. Where it
does not, the row is predicted (``spec_timing="theory"``): Leviathan et al. 2023 (arXiv 2211.17192)
Theorem 3.8 with the draft step, target step and verify step times measured on the engines here.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import fields

import torch

from workbench.spec.config import SpecConfig
from workbench.spec.generate import autoregressive_generate, speculative_generate
from workbench.spec.theory import expected_tokens_per_step, speedup

__all__ = ["has_synthetic_acceptance", "latency_row", "measure_acceptance", "run_batch1", "spec_config", "step_ms",
           "step_times"]


def has_synthetic_acceptance() -> bool:
    """True when :class:`SpecConfig` implements ``acceptance="synthetic"`` (the what-if loop)."""
    return "acceptance" in {f.name for f in fields(SpecConfig)}


def spec_config(k: int, gen_len: int, alpha: float | None, seed: int = 0) -> SpecConfig:
    """Greedy :class:`SpecConfig` with ``k`` drafts per step; ``alpha`` given: synthetic acceptance."""
    kw = {} if alpha is None else {"acceptance": "synthetic", "synthetic_alpha": float(alpha)}
    return SpecConfig(k=k, temperature=0.0, max_new_tokens=gen_len, seed=seed, k_max=max(16, k), **kw)


def latency_row(ttft_s: float, e2e_s: float, n_out: int) -> dict:
    """``ttft_ms``, ``e2e_ms``, ``tpot_ms``, ``decode_tok_s`` of one request with ``n_out`` tokens."""
    tpot = (e2e_s - ttft_s) / max(n_out - 1, 1)
    return {"ttft_ms": 1e3 * ttft_s, "e2e_ms": 1e3 * e2e_s, "tpot_ms": 1e3 * tpot,
            "decode_tok_s": 1.0 / tpot if tpot > 0 else float("nan"), "n_out": n_out}


def step_times(engine, ts, context: int, repeats: int = 3, clock=time.perf_counter) -> dict:
    """Median time (ms) of one ``t``-token step of slot 0 after ``context`` cached tokens, for each
    ``t`` in ``ts`` (random ids; the context is prefilled once and the slot rolled back after each step).
    ``t = 1`` is a decode step, ``t = k + 1`` a verify step. Returns ``{t: ms}``."""
    runner = engine.runner(0)
    g = torch.Generator().manual_seed(0)
    runner.reset()
    if context:
        runner.extend(torch.randint(0, engine.vocab_size, (context,), generator=g))
    out = {}
    for t in ts:
        tok = torch.randint(0, engine.vocab_size, (t,), generator=g)
        runner.extend(tok)  # warm-up (captures the CUDA graph of this step shape)
        runner.truncate(context)
        times = []
        for _ in range(repeats):
            runner.synchronize()
            t0 = clock()
            runner.extend(tok).argmax(-1).tolist()
            runner.synchronize()
            times.append(1e3 * (clock() - t0))
            runner.truncate(context)
        out[t] = statistics.median(times)
    return out


def step_ms(engine, t: int, context: int, repeats: int = 3, clock=time.perf_counter) -> float:
    """Median time (ms) of one ``t``-token step after ``context`` cached tokens (:func:`step_times`)."""
    return step_times(engine, [t], context, repeats, clock)[t]


def _plain(engine, prompt: list[int], gen_len: int, clock) -> dict:
    r = autoregressive_generate(engine.runner(0), prompt, max_new_tokens=gen_len, clock=clock)
    return latency_row(r.prefill_s, r.prefill_s + r.decode_s, len(r.tokens)) | {"tokens": r.tokens}


def _speculative(target, draft, prompt: list[int], cfg: SpecConfig, clock) -> dict:
    r = speculative_generate(target.runner(0), draft.runner(0), prompt, config=cfg, clock=clock)
    st = r.stats
    first = st.draft_times_s[0] + st.target_times_s[0] if st.num_drafts else 0.0
    row = latency_row(r.prefill_s + first, r.prefill_s + r.decode_s, len(r.tokens))
    return row | {"tokens": r.tokens, "alpha": st.alpha, "tau": st.tau, "num_drafts": st.num_drafts,
                  "draft_step_ms": 1e3 * sum(st.draft_times_s) / max(st.num_draft_tokens, 1),
                  "verify_ms": 1e3 * sum(st.target_times_s) / max(st.num_drafts, 1),
                  "spec_loop": getattr(r, "loop", "reference")}


def _median_row(rows: list[dict]) -> dict:
    out = dict(rows[len(rows) // 2])
    for key in ("ttft_ms", "e2e_ms", "tpot_ms", "decode_tok_s"):
        out[key] = statistics.median(r[key] for r in rows)
    return out


def _theory_row(target, draft, plain: dict, prompt_len: int, k: int, alpha: float, clock) -> dict:
    """Speculative latency predicted from measured step times (no synthetic loop installed)."""
    ctx = prompt_len + plain["n_out"] // 2
    tt = step_times(target, [1, k + 1], ctx, clock=clock)
    t_ms, v_ms, d_ms = tt[1], tt[k + 1], step_ms(draft, 1, ctx, clock=clock)
    tau = float(expected_tokens_per_step(alpha, k))
    tpot = (k * d_ms + v_ms) / tau
    ttft = plain["ttft_ms"] + k * d_ms + v_ms - t_ms  # the first step replaces the plain first decode
    e2e = ttft + tpot * (plain["n_out"] - 1)
    return latency_row(ttft / 1e3, e2e / 1e3, plain["n_out"]) | {
        "alpha": alpha, "tau": tau, "draft_step_ms": d_ms, "verify_ms": v_ms, "spec_loop": "none"}


def _warms_up(engine, warmup: bool | None) -> bool:
    """``warmup`` as given, else True off the CPU (graph capture, kernel compilation and tuning happen on first
    use there: on the H200 they made the first timed run of a 135M model 30x slower than steady state)."""
    if warmup is not None:
        return bool(warmup)
    return getattr(getattr(engine, "device", None), "type", "cpu") != "cpu"


def run_batch1(target, draft, prompt: list[int], *, gen_len: int, k: int = 4, alpha: float | None = None,
               repeats: int = 1, seed: int = 0, clock=time.perf_counter, warmup: bool | None = None) -> dict:
    """One row for the fixed request on ``target`` (an :class:`workbench.engine.Engine`), plainly when
    ``draft`` is None, else speculatively with ``draft`` (an Engine over the same vocabulary).

    Columns: ``ttft_ms``, ``e2e_ms``, ``tpot_ms``, ``decode_tok_s``, ``n_out`` (median over
    ``repeats`` runs), ``plain_tpot_ms`` (plain decoding on ``target``, the reference of the speedup);
    speculative rows add ``alpha``, ``tau``, ``draft_step_ms``, ``verify_ms``, ``c`` (draft step /
    plain step), ``verify_cost`` (verify / plain step), ``speedup_theory`` (Leviathan et al. 2023
    Theorem 3.8 at that alpha, c and verify cost), ``spec_timing`` (``"real"``: real acceptance;
    ``"synthetic"``: the what-if loop at ``alpha``; ``"theory"``: predicted from step times) and
    ``acceptance``; with real acceptance ``match_plain``, the fraction of output positions equal to plain
greedy decoding's (1.0 up to float ties between the verify and decode steps). ``tokens``: the
median run's output ids. ``warmup`` (default: off the CPU only, :func:`_warms_up`): one untimed run of each
kind first, with the same prompt and length, so the timed runs see neither graph capture nor kernel
compilation. Raises ValueError for an empty prompt.
    """
    if not prompt:
        raise ValueError("prompt is empty; pass at least one token id")
    warm = _warms_up(target, warmup)
    if warm:
        _plain(target, prompt, gen_len, clock)
    plain = _median_row([_plain(target, prompt, gen_len, clock) for _ in range(repeats)])
    if draft is None:
        return plain | {"plain_tpot_ms": plain["tpot_ms"], "spec_timing": "", "acceptance": ""}
    if alpha is not None and not has_synthetic_acceptance():
        row, timing = _theory_row(target, draft, plain, len(prompt), k, alpha, clock), "theory"
    else:
        cfg = spec_config(k, gen_len, alpha, seed)
        if warm:
            _speculative(target, draft, prompt, cfg, clock)
        row = _median_row([_speculative(target, draft, prompt, cfg, clock) for _ in range(repeats)])
        timing = "real" if alpha is None else "synthetic"
    if timing == "real":  # exact greedy speculative decoding reproduces plain greedy decoding
        pairs = list(zip(row["tokens"], plain["tokens"]))
        row["match_plain"] = sum(a == b for a, b in pairs) / max(len(pairs), 1)
    c, vc = row["draft_step_ms"] / plain["tpot_ms"], row["verify_ms"] / plain["tpot_ms"]
    a = min(max(float(row["alpha"]), 0.0), 1.0) if row["alpha"] == row["alpha"] else 0.0
    return row | {"plain_tpot_ms": plain["tpot_ms"], "c": c, "verify_cost": vc, "spec_timing": timing,
                  "speedup_theory": float(speedup(a, k, c, vc)),
                  "acceptance": "real" if alpha is None else f"synthetic alpha={alpha:g}"}


def measure_acceptance(target, draft, prompts, *, k: int = 4, gen_len: int = 32, clock=time.perf_counter) -> dict:
    """Pooled acceptance of ``draft`` for ``target`` (Engines over one vocabulary), greedy, over
    ``prompts`` (lists of token ids): ``alpha`` (accepted / tested drafts), ``tau`` (bonus included),
    ``n_steps``, ``n_prompts``, ``k`` (SpecDecodingStats of every run merged)."""
    from workbench.spec.metrics import SpecDecodingStats

    stats = SpecDecodingStats()
    cfg = spec_config(k, gen_len, None)
    for p in prompts:
        r = speculative_generate(target.runner(0), draft.runner(0), list(p), config=cfg, clock=clock)
        stats = stats.merge(r.stats)
    return {"alpha": stats.alpha, "tau": stats.tau, "n_steps": stats.num_drafts, "n_prompts": len(prompts), "k": k}
