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
from workbench.params import env_float, env_str, study_size

SIZE = study_size()  # WB_SIZE: smoke | demo | full; the sizes: workbench.studies.stack.Config.from_name
MODEL = env_str("WB_MODEL", "smollm2-135m")  # target: load_model spec ("random:qwen2-7b" needs WB_ALPHA)
DEVICE = env_str("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = env_str("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU
ENGINE = env_str("WB_ENGINE", "workbench", choices=("workbench", "vllm"))  # vllm: needs `make setup-vllm`
DRAFT = env_str("WB_DRAFT", None)  # make_draft name: int3/4/8 self-draft, layers-N, an id (default: the size's)
QUANT = env_str("WB_QUANT", None, choices=("rtn", "awq", "gptq"))  # W4A16 weights (default rtn)
ALPHA = env_float("WB_ALPHA", None)  # what-if alpha (synthetic acceptance); unset = the draft's real acceptance

# %%
import pandas as pd
from IPython.display import display

import workbench.notebook as wbn
from workbench.models import load_model
from workbench.stack import load_note, plots
from workbench.stack.widgets import load_explorer, whatif_explorer
from workbench.studies import stack

wbn.setup()
cfg = stack.Config.from_name(SIZE, device=DEVICE, dtype=DTYPE, draft=DRAFT, quant=QUANT, alpha=ALPHA)
print(cfg)

# %% [markdown]
# ## 1 · Target, draft, fixed request
#
# The built-in SmolLM2-135M has no smaller sibling offline, so its default draft is the INT3 RTN self-draft
# (`make_draft(model, "int3")`): fewer bits than either target (fp32, W4A16), so it stands apart from both; an INT4
# self-draft would coincide with the W4A16 target (alpha = 1). Whether it pays depends on its measured cost ratio c
# (the table's `c`, from the kernels that ran it here); the what-if panel shows what a cheaper draft would do.

# %%
model, tok = load_model(MODEL, dtype=cfg.dtype, device=cfg.device)
res = stack.run(cfg, model=(model, tok), engine=ENGINE)
st = res.stack
print(f"{MODEL} on {model.device}; draft {cfg.draft}; SLO {st.slo}; baseline capacity {st.capacity_rps:.3g} req/s")
print(load_note(st.load, st.config) or f"the baseline meets the SLOs at {st.config.table_load:g} x capacity")

# %% [markdown]
# ## 2 · The 8 combinations
#
# Every point is saved in the results store (`stack`, `stack_load`, `stack_whatif`); re-running resumes. Batch-1
# P/D rows add the prompt's KV transfer over the link (modelled, `link_gbs`) to the colocated measurement; the
# load columns are the simulator's at `table_load` × the baseline's capacity, at equal GPU count.

# %%
cols = ["label", "decode_tok_s", "ttft_ms", "e2e_ms", "alpha", "tau", "c", "acceptance", "peak_mem_gb", "mem_source",
        "goodput_rps", "p99_ttft_ms", "p99_tpot_ms", "slo_capacity_rps", "n_gpus", "decode_speedup", "e2e_change"]
wbn.table(st.table, columns=cols)

# %%
plots.plot_waterfall(st.table, "decode_tok_s", f"{MODEL} on {model.device}: batch-1 decode tokens/s", "tokens/s").show()
plots.plot_waterfall(st.table, "goodput_rps", f"goodput under load ({st.config.table_load:g} x baseline capacity, "
                     f"{st.slo})", "req/s").show()
plots.plot_multiplicative(st.multiplicative).show()
wbn.table(st.multiplicative)

# %% [markdown]
# ### The same request on vLLM (`WB_ENGINE=vllm`)
# vLLM runs four of the combinations on this build: the base precision and the W4A16 export, each with and without
# speculative decoding. Its drafting is n-gram prompt lookup (vLLM's draft-free method; the workbench rows above use
# the self-draft), so the speculative rows compare deployments, not the same draft. The P/D rows need a KV
# connector the CPU build cannot run. Differences are vLLM minus workbench.

# %%
if res.vllm is not None:
    from workbench.studies.compare import side_by_side

    vl = res.vllm.rename(columns={"decode_tokens_per_s": "decode_tok_s", "mean_ttft_ms": "ttft_ms",
                                  "mean_tpot_ms": "tpot_ms"})
    wb = st.points[["quantized", "speculative", "decode_tok_s", "ttft_ms", "tpot_ms", "alpha"]]
    display(wbn.table(side_by_side({"workbench": wb, "vllm": vl}, on=["quantized", "speculative"],
                                   metrics=["decode_tok_s", "ttft_ms", "tpot_ms", "alpha"])))
else:
    print("engine: the workbench only (WB_ENGINE=vllm adds vLLM's runs of the same request)")

# %% [markdown]
# ### The same 8 combinations on a 7B shape (timing only)
# On a GPU with >= 40 GiB the study also times a published 7B shape with random weights (`cfg.timing_shape`, draft
# `cfg.timing_draft`): its weights' bytes dominate a decode step, as they do for real 7B models. Random weights
# have no acceptance of their own, so the speculative rows use the alpha measured above on the built-in pair
# (`acceptance` says "synthetic").

# %%
tm = res.timing
(plots.plot_waterfall(tm.table, "decode_tok_s", f"{cfg.timing_shape} (random weights, alpha {tm.config.alpha:.2f} "
                      "synthetic): batch-1 decode tokens/s", "tokens/s").show() if tm is not None else
 print(f"no timing shape on {model.device} (a GPU with >= 40 GiB runs random:qwen2-7b here)"))

# %% [markdown]
# ### Measured here beside predicted elsewhere (AIConfigurator)
# Batch-1 decode tokens/s that NVIDIA's AIConfigurator predicts for Qwen2-7B in vLLM on other systems, from its
# measured kernel tables (**predictions**, labelled so), beside the base and W4A16 rows measured above: on the 7B
# timing shape where it ran (same architecture, random weights), else on this notebook's model (a different model:
# read the bars as orders of magnitude only).

# %%
from workbench.predict import INSTALL_HINT, available, batch1_table, plot_batch1
from workbench.studies.pd import PREDICT_SYSTEMS

t = (tm if tm is not None else st).table
m = t[~t["speculative"] & ~t["disaggregated"] & ~t["mixed"]]
measured = pd.DataFrame({"technique": m["quantized"].map({False: "16-bit baseline", True: "INT4 weight-only (W4A16)"}),
                         "tokens_per_s": m["decode_tok_s"],
                         "label": f"measured here ({cfg.timing_shape if tm is not None else MODEL}, {model.device})"})
if available():
    b1 = batch1_table("qwen2-7b", PREDICT_SYSTEMS[:1] if cfg.size == "smoke" else PREDICT_SYSTEMS, "vllm")
    plot_batch1(b1, measured).show()
else:
    print(f"not testable here: AIConfigurator is not installed ({INSTALL_HINT})")

# %% [markdown]
# ## 3 · KV cache: FP8 and INT8 against the full-precision cache, by context position
#
# Teacher-forced WikiText-2, prefilled in chunks; every position's next-token distribution is compared with the
# reference cache's (KL, top-1 agreement with a 95% interval). One decode step per cache is timed at the marked
# contexts. On CPU the quantized caches go through the torch path (dequantize, then SDPA).

# %%
if res.kv is not None:  # (a random-init model has no fidelity to measure)
    context = int(res.kv["hi"].max())
    plots.plot_kv_fidelity(res.kv, title=f"{MODEL}: KV-cache fidelity by position (context {context})").show()
    plots.plot_kv_speed(res.kv_speed).show()
wbn.table(res.kv) if res.kv is not None else "random weights: no KV-cache fidelity"

# %% [markdown]
# ## 4 · Claims ledger
#
# Each claim is a record in `workbench/claims/records/*.yaml`: text, source figure, the measurement that tests it
# and the rule that gives the verdict (`workbench/claims/hooks.py`). A small quantization sweep supplies the
# fidelity evidence (logit cosine vs top-1 and perplexity). A claim the evidence here cannot support says "not
# testable here" and why.

# %%
with pd.option_context("display.max_colwidth", 400):
    display(res.ledger[[c for c in ("id", "claim", "claimed", "measured", "verdict", "basis", "why") if c in res.ledger]])

# %% [markdown]
# ## 5 · Sliders
#
# Both panels only filter the grids computed above (`continuous_update=False`). The what-if panel predicts batch-1
# speed at any alpha and k from the draft, target and verify step times measured here (Leviathan et al. 2023,
# Theorem 3.8) and simulates the speculative deployments under load.

# %%
display(load_explorer(st.load, load_fraction=st.config.table_load))
display(whatif_explorer(st.whatif, st.whatif_load, alpha=0.7, k=cfg.k, load_fraction=st.config.table_load))
