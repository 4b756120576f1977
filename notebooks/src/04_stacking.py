# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Stacking: W4A16 × speculative decoding × P/D, KV-cache quantization, and a claims ledger
#
# The question users actually ask: *if I stack INT4 weights, speculative decoding and a prefill/decode split
# on my model, what do I get?* This notebook measures all 8 combinations of {base precision, W4A16} ×
# {no spec, spec} × {colocated, disaggregated} on this device through the engine:
#
# * **batch 1**: decode tokens/s and E2E latency of one fixed request (plain and speculative decoding through
#   `workbench.engine`, real draft and real acceptance for a real model), peak memory (measured on CUDA, a
#   footprint model of the engines' tensors on CPU);
# * **under load**: goodput and TTFT/TPOT percentiles from the serving simulator, with step costs fitted to
#   profiles measured *per precision* here (so W4A16 changes the decode costs the simulator uses);
# * **is it multiplicative?** the combined gain next to the product of the single gains.
#
# Then the KV cache in FP8 (e4m3) and INT8 (per-token, per-head scales) against the full-precision cache, by
# context position, and a ledger of published claims, each with the measurement that tests it and a verdict.

# %% tags=["parameters"]
import os

from workbench.stack import demo_defaults

SMOKE = os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False")
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DEMO = demo_defaults(DEVICE)  # the demo sizes on this device (KV context; the claims' quantization rows)
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU
MODEL = os.getenv("WB_MODEL", "smollm2-135m")  # target: load_model spec ("random:qwen2-7b" needs WB_ALPHA)
DRAFT = os.getenv("WB_DRAFT", "layers-4" if SMOKE else "int3")  # make_draft name: int3/4/8 self-draft, layers-N, id
QUANT = os.getenv("WB_QUANT", "rtn")  # W4A16 weights: rtn | awq | gptq
GROUP_SIZE = int(os.getenv("WB_GROUP_SIZE", 64))  # must divide the model's widths (SmolLM2: 576)
K = int(os.getenv("WB_K", 4))  # draft tokens per step
ALPHA = os.getenv("WB_ALPHA", "")  # what-if alpha (synthetic acceptance); empty = the draft's real acceptance
PROMPT_LEN = int(os.getenv("WB_PROMPT_LEN", 32 if SMOKE else 64))  # the fixed request's prompt tokens
GEN_LEN = int(os.getenv("WB_GEN_LEN", 4 if SMOKE else DEMO["gen_len"]))  # ... and its generated tokens (16 on CUDA, 12 on the CPU)
N_REQUESTS = int(os.getenv("WB_N_REQUESTS", 60 if SMOKE else 200))  # per simulated point
SLO_TTFT_MS, SLO_TPOT_MS = os.getenv("WB_SLO_TTFT_MS", ""), os.getenv("WB_SLO_TPOT_MS", "")  # empty: derived
KV_CONTEXT = int(os.getenv("WB_KV_CONTEXT", 128 if SMOKE else 0))  # 0: 1,024 on CPU, the model's limit on CUDA
SEED = int(os.getenv("WB_SEED", 0))

# %%
import time

import pandas as pd
import torch
from IPython.display import display

from workbench.claims import collect_evidence, evaluate
from workbench.claims.evidence import kv_evidence, quant_evidence, spec_cost_evidence, stack_evidence
from workbench.claims.serving import long_prompt_evidence, pd16_evidence, vllm_flags_evidence
from workbench.data import load_text
from workbench.models import is_random, load_model
from workbench.notebook import setup
from workbench.pd import SLO, HardwareSpec
from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import LengthDist, WorkloadConfig
from workbench.quant import QuantConfig, run_quant_sweep
from workbench.spec import make_draft
from workbench.stack import StackConfig, load_note, plots, run_stack
from workbench.stack.kv_study import KVStudyConfig, by_bucket, kv_speed, run_kv_study
from workbench.stack.run import default_clock
from workbench.stack.widgets import load_explorer, whatif_explorer

setup()
torch.set_num_threads(1)
dev = ("cuda" if torch.cuda.is_available() else "cpu") if DEVICE == "auto" else DEVICE
dtype = ("bfloat16" if dev.startswith("cuda") else "float32") if DTYPE == "auto" else DTYPE
clock = default_clock(dev)

# %% [markdown]
# ## 1 · Target, draft, fixed request
#
# The built-in SmolLM2-135M has no smaller sibling offline, so its default draft is the INT3 RTN self-draft
# (`make_draft(model, "int3")`): fewer bits than either target (fp32, W4A16), so it stands apart from both; an INT4
# self-draft would coincide with the W4A16 target (alpha = 1). On a CPU it runs dequantized, so its cost ratio c
# is near 1 and speculative decoding cannot pay here; the what-if panel shows what a cheaper draft would do.

# %%
model, tok = load_model(MODEL, dtype=dtype, device=dev)
trained = not is_random(model)  # fidelity (KV cache, quantization) needs trained weights; timing does not
draft, draft_info = make_draft(model, DRAFT, tok)
text = load_text("wikitext-2", "test")
prompt = tok(text[:20000], add_special_tokens=False)["input_ids"][:PROMPT_LEN]
print(f"{MODEL} on {dev}; draft {draft_info['draft']} ({draft_info['draft_kind']}); prompt of {len(prompt)} tokens")

# %%
profile = (ProfileConfig(prompt_lens=(16, 32, 48), prefill_batches=(1,), decode_batches=(1, 2, 4), context_lens=(32,),
                         repeats=1, warmup=0) if SMOKE else
           ProfileConfig(prompt_lens=(32, 64, 128), prefill_batches=(1,), decode_batches=(1, 2, 4),
                         context_lens=(32, 96), repeats=2, warmup=0))
p_med, o_med = (32, 8) if SMOKE else (64, 32)  # median prompt / output tokens under load (within the profile)
workload = WorkloadConfig(N_REQUESTS, prompt=LengthDist("lognormal", p_med, 8, 4 * p_med, 0.5),
                          output=LengthDist("lognormal", o_med, 2, 4 * o_med, 0.5), seed=SEED)
slo = SLO(float(SLO_TTFT_MS), float(SLO_TPOT_MS)) if SLO_TTFT_MS and SLO_TPOT_MS else None
cfg = StackConfig(target=MODEL, draft=DRAFT, quant_method=QUANT, group_size=GROUP_SIZE, k=K,
                  alpha=float(ALPHA) if ALPHA else None, prompt_len=PROMPT_LEN, gen_len=GEN_LEN, workload=workload,
                  slo=slo, profile=profile, seed=SEED, splits=((1, 1),) if SMOKE else ((1, 1), (1, 2), (2, 1)),
                  load_fractions=(0.5, 1.0) if SMOKE else (0.25, 0.5, 0.75, 1.0, 1.25), table_load=0.5 if SMOKE else 0.75,
                  whatif_alphas=(0.6, 0.8) if SMOKE else (0.5, 0.6, 0.7, 0.8, 0.9),
                  whatif_ks=(K,) if SMOKE else (2, 4, 6))

# %% [markdown]
# ## 2 · The 8 combinations
#
# Every point is saved in the results store (`stack`, `stack_load`, `stack_whatif`); re-running resumes. Batch-1
# P/D rows add the prompt's KV transfer over the link (modelled, `link_gbs`) to the colocated measurement; the
# load columns are the simulator's at `table_load` × the baseline's capacity, at equal GPU count.

# %%
t0 = time.perf_counter()
res = run_stack(model, draft, cfg, prompt, device=dev, clock=clock, name="stack")
print(f"{time.perf_counter() - t0:.0f} s; SLO {res.slo}; baseline capacity {res.capacity_rps:.3g} req/s")
print(load_note(res.load, cfg) or f"the baseline meets the SLOs at {cfg.table_load:g} x capacity")
cols = ["label", "decode_tok_s", "ttft_ms", "e2e_ms", "alpha", "tau", "acceptance", "peak_mem_gb", "mem_source",
        "goodput_rps", "p99_ttft_ms", "p99_tpot_ms", "slo_capacity_rps", "n_gpus", "decode_speedup", "e2e_change"]
res.table[cols].round(3)

# %%
plots.plot_waterfall(res.table, "decode_tok_s", f"{MODEL} on {dev}: batch-1 decode tokens/s", "tokens/s").show()
plots.plot_waterfall(res.table, "goodput_rps", f"goodput under load ({cfg.table_load:g} x baseline capacity, "
                     f"{res.slo})", "req/s").show()
plots.plot_multiplicative(res.multiplicative).show()
res.multiplicative.round(3)

# %% [markdown]
# ## 3 · KV cache: FP8 and INT8 against the full-precision cache, by context position
#
# Teacher-forced WikiText-2, prefilled in chunks; every position's next-token distribution is compared with the
# reference cache's (KL, top-1 agreement with a 95% interval). One decode step per cache is timed at the marked
# contexts. On CPU the quantized caches go through the torch path (dequantize, then SDPA).

# %%
context = KV_CONTEXT or DEMO["kv_context"] or int(model.config.max_position_embeddings)
kv_dtypes = ("bfloat16" if dev == "cpu" else "float16", "fp8_e4m3", "int8")  # vs the compute-dtype cache
kcfg = KVStudyConfig(kv_dtypes, context=context, chunk=64 if SMOKE else 1024, timed=(context // 4, context // 2, context))
if trained:  # (a random-init model has no fidelity to measure)
    kv_rows = run_kv_study(model, tok, kcfg, text=text, clock=clock, name="stack_kv")
    buckets = by_bucket(kv_rows)
    plots.plot_kv_fidelity(buckets, title=f"{MODEL}: KV-cache fidelity by position (context {context})").show()
    plots.plot_kv_speed(kv_speed(kv_rows)).show()
    display(buckets.round(4))

# %% [markdown]
# ## 4 · Claims ledger
#
# Each claim is a record in `workbench/claims/records/*.yaml`: text, source figure, the measurement that tests it
# and the rule that gives the verdict (`workbench/claims/hooks.py`). A small quantization sweep supplies the
# fidelity evidence (logit cosine vs top-1 and perplexity).

# %%
qcfgs = [QuantConfig(method="rtn", bits=4, group_size=64)]
if not SMOKE:
    qcfgs += [QuantConfig.from_name("rtn_int4_tensor_sym"), QuantConfig.from_name("rtn_int8_channel")]
# the ledger reads the fidelity columns; the CPU demo's rows skip MMLU and timing (demo_defaults)
qrows = run_quant_sweep(model, tok, qcfgs, text=text, n_tokens=256 if SMOKE else 512, seq_len=128 if SMOKE else 256,
                        n_questions=None if SMOKE else DEMO["quant_questions"], speed=SMOKE or DEMO["quant_speed"],
                        name="stack_quant", progress=False) if trained else None
hw_here = HardwareSpec.measure(dev, copy_mb=16 if SMOKE else None)  # None: 64 MiB on the CPU, 1 GiB on a GPU

# %%
evidence = collect_evidence(
    stack=stack_evidence(res.table, res.multiplicative, res.points, target=MODEL, device=dev,
                         bandwidth_gbs=hw_here.hbm_gbs),
    spec_costs=spec_cost_evidence(res.points), kv=kv_evidence(buckets) if trained else None,
    quant=quant_evidence(qrows) if trained else None,
    long_prompt=long_prompt_evidence(res.points, cfg, res.mem_gb), pd16=pd16_evidence(res.points, cfg, res.mem_gb),
    vllm_flags=vllm_flags_evidence(), seed=SEED)
ledger = evaluate(evidence)
with pd.option_context("display.max_colwidth", 400):
    display(ledger[["id", "claim", "claimed", "measured", "verdict", "why"]])

# %% [markdown]
# ## 5 · Sliders
#
# Both panels only filter the grids computed above (`continuous_update=False`). The what-if panel predicts batch-1
# speed at any alpha and k from the draft, target and verify step times measured here (Leviathan et al. 2023,
# Theorem 3.8) and simulates the speculative deployments under load.

# %%
display(load_explorer(res.load, load_fraction=cfg.table_load))
display(whatif_explorer(res.whatif, res.whatif_load, alpha=0.7, k=K, load_fraction=cfg.table_load))
