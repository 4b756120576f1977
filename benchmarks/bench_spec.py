"""Speculative decoding on the engine: realized vs theoretical speedup, through the package's loop.

Every run is ``workbench.spec.speculative_generate`` on two ``Engine`` slot runners, so it takes the
device-resident loop of ``workbench.spec.fast`` (draft steps and the verify step replay CUDA graphs,
draft tokens stay on the GPU, one host synchronization per step, KV rollback by ``truncate``).

Random-init models (the 7B/0.5B shapes of ``benchmarks.common``) make no real draft: two random
models agree on almost nothing. For them the acceptance test is the named what-if
``acceptance="synthetic"`` (``SpecConfig``): each tested draft token is accepted with probability
alpha, independently, until the first rejection (vLLM ``rejection_sample_method="synthetic"``), the
recovered and bonus tokens are drawn as in the exact rule. Every row says ``acceptance``; synthetic
rows measure what a draft of that alpha would buy on this hardware, not what a real draft does
(``benchmarks/spec_table.py`` runs real drafts with ``acceptance="rejection"``).

Theory (Leviathan et al. 2023, arXiv 2211.17192, Eq. 1 and Theorem 3.8; ``workbench.spec.theory``):
expected tokens per step ``(1 - alpha^(k+1)) / (1 - alpha)``, cost per step ``k c + 1`` target-step
units, speedup ``(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))`` with ``c`` = draft step / target step.
"""

from __future__ import annotations

import time
import warnings

import torch

from benchmarks.bench_decode import engine_decode_ms_per_token, verify_ms
from workbench.engine import Engine
from workbench.spec import SpecConfig, autoregressive_generate, speculative_generate
from workbench.spec.theory import expected_tokens_per_step, speedup


def spec_run(target: Engine, draft: Engine, config: SpecConfig, prompt_len: int = 64, seed: int = 0) -> dict:
    """One speculative generation on slot 0 of both engines after a warm-up generation (which
    captures the draft graphs for T = 1, 2 and the verify graph for T = k + 1). Returns wall ``ms`` of
    the decoding loop, ``tokens``, ``steps``, the measured ``alpha``, ``tau`` and the ``loop`` that ran.
    Raises ``ValueError`` when the engines' vocabularies differ (build the draft with the target's)."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(100, 1000, (prompt_len,), generator=g).tolist()
    t_run, d_run = target.runner(0), draft.runner(0)
    warm = SpecConfig(**{**config.to_row(), "max_new_tokens": 3 * (config.k + 1)})
    speculative_generate(t_run, d_run, prompt, config=warm, clock=time.perf_counter)
    out = speculative_generate(t_run, d_run, prompt, config=config, clock=time.perf_counter)
    st = out.stats
    n = max(st.num_drafts, 1)
    # where a step's wall time goes (device events around the drafts and around verify + rejection; the rest is
    # the gap between steps: the host reading the accepted count and issuing the next draft step)
    draft_s, target_s = sum(st.draft_times_s), sum(st.target_times_s)
    return {"ms": out.decode_s * 1e3, "tokens": len(out.tokens), "steps": st.num_drafts, "alpha": st.alpha,
            "tau": st.tau, "loop": out.loop, "draft_ms_per_step": draft_s / n * 1e3,
            "verify_ms_per_step": target_s / n * 1e3,
            "between_ms_per_step": (out.decode_s - draft_s - target_s) / n * 1e3}


def bench_spec(target: Engine, draft: Engine, alphas=(0.6, 0.8, 0.9), ks=(2, 4, 6, 8), n_tokens: int = 400,
               acceptance: str = "synthetic", temperature: float = 0.0) -> list:
    """One row per (alpha, k) with ``acceptance="synthetic"`` (per k with ``"rejection"``: alpha is then
    measured): realized and theoretical speedups over plain engine decoding, column ``acceptance``.

    ``target``/``draft``: engines with one vocabulary and ``max_seq`` >= 64 + n_tokens + k + 2."""
    t_ms = engine_decode_ms_per_token(target, 1, 64, 64)
    d_ms = engine_decode_ms_per_token(draft, 1, 64, 64)
    c = d_ms / t_ms
    rows = []
    for k in ks:
        v = verify_ms(target, k + 1) / t_ms
        for alpha in (alphas if acceptance == "synthetic" else (None,)):
            cfg = SpecConfig(k=k, temperature=temperature, max_new_tokens=n_tokens, acceptance=acceptance,
                             synthetic_alpha=alpha)
            r = spec_run(target, draft, cfg)
            a = alpha if alpha is not None else min(max(r["alpha"], 0.0), 1.0)
            realized = t_ms * r["tokens"] / r["ms"]
            theory = speedup(a, k, c)
            rows.append({"acceptance": acceptance, "alpha": a, "alpha_measured": r["alpha"], "k": k, "c": c,
                         "target_ms": t_ms, "draft_ms": d_ms, "verify_cost": v, "tau": r["tau"],
                         "ratio_at_realized_tau": realized / (r["tau"] / (k * c + 1)),
                         "tau_expected": expected_tokens_per_step(a, k), "loop": r["loop"],
                         **{f: r[f] for f in ("draft_ms_per_step", "verify_ms_per_step", "between_ms_per_step")},
                         "spec_ms_per_token": r["ms"] / r["tokens"], "realized_speedup": realized,
                         "theoretical_speedup": theory, "ratio": realized / theory,
                         "theory_with_verify_cost": speedup(a, k, c, v)})
    return rows


def check_device_loop(n_new: int = 64, k: int = 4, device: str = "cuda") -> dict:
    """GPU check of the device loop on two random float32 engines (hidden 256, 4 and 2 layers, one
    vocabulary): greedy speculative tokens against plain greedy decoding through the same target
    engine (``greedy_equal``, and the length of the equal prefix), the loop that ran, and the host
    synchronizations per speculative step counted by ``torch.cuda.set_sync_debug_mode("warn")``
    (the design has one per step; the confidence policy adds one per draft token; CUDA only)."""
    cfg = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2}
    target = Engine.from_config(cfg, max_seq=256, dtype=torch.float32, device=device, seed=1)
    draft = Engine.from_config({**cfg, "num_hidden_layers": 2}, max_seq=256, dtype=torch.float32, device=device,
                               seed=2)
    prompt = torch.randint(0, 4096, (32,), generator=torch.Generator().manual_seed(0)).tolist()
    plain = autoregressive_generate(target.runner(0), prompt, max_new_tokens=n_new).tokens
    spec = speculative_generate(target.runner(0), draft.runner(0), prompt, k=k, max_new_tokens=n_new)
    prefix = next((i for i, (a, b) in enumerate(zip(plain, spec.tokens)) if a != b), min(len(plain), len(spec.tokens)))
    out = {"greedy_equal": spec.tokens == plain, "equal_prefix": prefix, "n_new": n_new, "loop": spec.loop}
    for temperature in (0.0, 1.0) if target.device.type == "cuda" else ():
        speculative_generate(target.runner(0), draft.runner(0), prompt, k=k, temperature=temperature, max_new_tokens=8)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                res = speculative_generate(target.runner(0), draft.runner(0), prompt, k=k, temperature=temperature,
                                           max_new_tokens=n_new)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [str(w.message)[:120] for w in caught if "synchroniz" in str(w.message)]
        out[f"T{temperature:g}"] = {"steps": res.stats.num_drafts, "syncs": len(syncs),
                                    "syncs_per_step": len(syncs) / max(res.stats.num_drafts, 1),
                                    "first_syncs": syncs[:3]}
    return out
