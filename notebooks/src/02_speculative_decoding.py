# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Speculative decoding: will this draft pay off for this target?
#
# A cheap **draft** model proposes `k` tokens; the **target** scores them all in one forward and keeps each
# draft token `x ~ q` with probability `min(1, p(x)/q(x))`; at the first rejection it resamples from
# `norm(max(0, p − q))`, and when all `k` pass it adds a **bonus** token from `p` (Leviathan et al. 2023,
# arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318). The output follows the target's distribution
# exactly (the tests check it with chi-square tests, the bonus token included).
#
# Terms, as vLLM counts them — published figures often mix the first two up:
#
# * **alpha** (acceptance rate): P(a tested draft token is accepted); predicted by `Σ min(p, q)` along the
#   target's own trajectory.
# * **draft_acceptance_rate**: accepted / drafted tokens (tokens after a rejection are never tested).
# * **tau** (mean acceptance length): tokens emitted per target forward, **bonus token included**.
#   Theory: `tau = (1 − alpha^(k+1)) / (1 − alpha)`; speedup `= tau / (k·c + 1)` with `c` = draft step
#   cost / target step cost.
#
# > **Where it runs.** The study runs where the model is: `WB_DEVICE=auto` takes CUDA when present. Every
# > timing goes through the engine (`workbench.engine.Engine`: static KV cache; on CUDA, CUDA graphs for the
# > draft steps and the `k + 1`-token verify step) and the device-resident speculative loop
# > (`workbench.spec.fast`: draft tokens sampled and fed back on the device, one host synchronization per
# > step), the same code on the CPU and the GPU (`loop` column). On a CPU the times are indicative: CPU time
# > of this process (robust to other jobs); the quantized self-drafts run dequantized weights, so their
# > `c ≈ 1` and they cannot pay off there (theory agrees: `tau / (k + 1) < 1`); they show how alignment
# > falls with bits, and the verify forward of `k + 1` tokens costs more than one decode step
# > (`verify_cost` column). On a GPU the verify step costs about one decode step.

# %% tags=["parameters"]
import os

from workbench.spec import demo_grid

SMOKE = os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False")
MODEL = os.getenv("WB_MODEL", "smollm2-135m")
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto: CUDA when present, else CPU
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto: bfloat16 on CUDA, float32 on CPU
FULL = os.getenv("WB_FULL", "0") not in ("", "0", "false", "False")  # full study: the "full" grid
# a name in workbench.spec.SPEC_GRIDS; default "demo" on CUDA, "demo_cpu" on the CPU (k 1 and 4, 3 prompts, 8 tokens)
GRID = os.getenv("WB_SPEC_GRID", "smoke" if SMOKE else "full" if FULL else demo_grid(DEVICE))
N_PROMPTS = os.getenv("WB_N_PROMPTS")  # each of these, when set, overrides the grid's value
MAX_NEW = os.getenv("WB_MAX_NEW")
KS = os.getenv("WB_KS")  # comma list, e.g. "1,2,4"
DRAFTS = os.getenv("WB_DRAFTS")  # comma list of make_draft names, e.g. "int4,distilled"
DISTILL_STEPS = os.getenv("WB_DISTILL_STEPS")
PROMPTS_PER_POINT = int(os.getenv("WB_PROMPTS_PER_POINT", 4))  # results-store point size (resume grain)

# %%
import time

import torch
from IPython.display import display

from workbench.data import load_prompts, load_text
from workbench.models import load_model
from workbench.notebook import setup, table
from workbench.spec import SpecGrid, encode_prompts, make_draft, plots, run_spec_sweep, summarize_spec, theory
from workbench.spec.widgets import explorer

setup()

# %% [markdown]
# ## Target, prompts and drafts
#
# The grid is the named preset `GRID` (`SpecGrid.from_name`; `benchmarks/spec_table.py` uses the same
# presets). Drafts: RTN self-drafts (`int8` per channel, `int4`/`int3` groups of 64, through `workbench.quant`)
# and a **distilled** draft: 2 decoder layers (initialised from the target's first and last layers) sharing
# the target's embeddings and head, trained on the target's logits with KL(p‖q) on WikiText-2 valid. Any hub
# pair with one tokenizer works the same way (`make_draft(target, "Qwen/Qwen2.5-0.5B-Instruct", tok)`
# checks the tokenizers).

# %%
grid = SpecGrid.from_name(GRID, n_prompts=int(N_PROMPTS) if N_PROMPTS else None,
                          max_new_tokens=int(MAX_NEW) if MAX_NEW else None,
                          ks=tuple(int(k) for k in KS.split(",")) if KS else None,
                          drafts=tuple(DRAFTS.split(",")) if DRAFTS else None,
                          distill_steps=int(DISTILL_STEPS) if DISTILL_STEPS else None)
print(grid)

# %%
device = ("cuda" if torch.cuda.is_available() else "cpu") if DEVICE == "auto" else DEVICE
dtype = ("bfloat16" if device.startswith("cuda") else "float32") if DTYPE == "auto" else DTYPE
clock = time.perf_counter if device.startswith("cuda") else time.process_time  # wall on GPU, CPU time on CPU
target, tok = load_model(MODEL, dtype=dtype, device=device)
prompts = load_prompts("spec-bench", n=grid.n_prompts, seed=grid.seed)
prompts = encode_prompts(tok, prompts, max_prompt_tokens=grid.max_prompt_tokens)
text = load_text("wikitext-2", "valid")
text = text[: grid.distill_chars] if grid.distill_chars else text
distill_kw = {"steps": grid.distill_steps, "tokenizer": tok, "text": text, "seed": grid.seed,
              "eval_every": max(1, grid.distill_steps // 10)}
built = {name: make_draft(target, name, tok, distill_kwargs=distill_kw) for name in grid.drafts}
print(f"target {MODEL} on {device} ({dtype}); grid {GRID}: {len(grid.configs())} configs x {len(built)} drafts "
      f"x {len(prompts)} prompts")
table(prompts, columns=["prompt_id", "category", "n_prompt"])

# %% [markdown]
# ### Distillation: KL falls, acceptance rises
# Held-out KL(p‖q) per token (log scale), predicted alpha `Σ min(p, q)` at temperature 1, and how often
# the argmaxes agree (the greedy acceptance rate).

# %%
if "distilled" in built:
    curve = built["distilled"][1]["curve"]
    plots.plot_distill(curve).show()
    display(table(curve))

# %% [markdown]
# ## The grid
# Static `k` over the grid's `ks`, plus the HF heuristic (+2 after a fully accepted step, −1 otherwise) and the
# confidence policy (stop drafting when the draft's `q(x) < 0.4`) at `k_policy`, each at every temperature.
# Everything is computed once and stored point by point in the results store (`data/results/`): re-running
# this cell after an interruption computes only the missing points. The charts and sliders below only filter it.

# %%
name = f"nb02_{MODEL.replace('/', '_')}_{GRID}_{device.replace(':', '')}_{dtype}"
t0 = time.perf_counter()
df = run_spec_sweep(target, built, prompts, grid.configs(), name=name, prompts_per_point=PROMPTS_PER_POINT,
                    clock=clock, seed=grid.seed)
print(f"{len(df)} runs ({time.perf_counter() - t0:.0f} s now); loop: {sorted(df.loop.unique())}, device {device}")
summary = summarize_spec(df)
cols = ["draft", "temperature", "policy", "k", "n_prompts", "kl_pq", "alpha_pred", "alpha", "alpha_lo",
        "alpha_hi", "tau", "tau_lo", "tau_hi", "tau_theory", "c", "verify_cost", "speedup", "speedup_theory"]
table(summary, columns=cols)

# %% [markdown]
# ## Tokens per step and acceptance by position
# Static policy, `k = k_policy`, greedy. A step emits between 1 (first draft rejected; the resampled token)
# and `k + 1` tokens (all accepted plus the bonus).

# %%
static_k = df[(df.policy == "static") & (df.k == grid.k_policy) & (df.temperature == grid.temperatures[0])]
static_k = static_k if len(static_k) else df[df.policy == "static"]
plots.plot_tokens_per_step(static_k).show()
plots.plot_acceptance_per_pos(static_k).show()

# %% [markdown]
# ## Alignment predicts acceptance
# Each point is a draft at one temperature (pooled over prompts and k; 95% CI from a bootstrap over
# prompts). Right: measured alpha against `Σ min(p, q)` measured on the target's own plain-decoding
# trajectory — the diagonal is Leviathan et al.'s Corollary 3.6.

# %%
by_draft = summarize_spec(df[df.policy == "static"], by=("draft", "temperature"))
plots.plot_kl_alpha(by_draft).show()
table(by_draft, columns=["draft", "temperature", "kl_pq", "kl_qp", "tv", "alpha_pred", "alpha", "alpha_lo", "alpha_hi"])

# %% [markdown]
# ## Measured against theory, vs k
# Dashed: `(1 − α^(k+1)) / (1 − α)` and `tau / (k·c + 1)` at each draft's pooled alpha and c; markers:
# measured. Measured speedups fall below the curves where the CPU verify forward costs more than one
# decode step (the theory assumes it costs the same).

# %%
plots.plot_theory_vs_k(summary, "tau", k_max=max(grid.ks) + 2).show()
plots.plot_theory_vs_k(summary, "speedup", k_max=max(grid.ks) + 2).show()

# %% [markdown]
# ## Policies side by side
# Same drafts, `k = k_policy` as the static budget, the heuristic's start value and the confidence cap.

# %%
plots.plot_policies(summary[summary.k == grid.k_policy]).show()
table(summary[summary.k == grid.k_policy], columns=["draft", "temperature", "policy", "alpha", "tau",
                                                   "draft_acceptance_rate", "speedup"])

# %% [markdown]
# ## Best k for each draft
# `best_k` maximizes `tau / (k·c + 1)` at the measured alpha and c; a best speedup below 1 says: do not
# speculate with this draft on this hardware.

# %%
table(theory.best_k_table(by_draft))

# %% [markdown]
# ## By Spec-Bench category
# tau per category (static policy, every k). Structured tasks (extraction, coding, math) often accept more
# than open writing; whether they do here, read off the table: each cell rests on the few prompts of its
# category in this grid (see `n_prompts` above), so small differences between columns mean nothing.

# %%
by_cat = summarize_spec(df[df.policy == "static"], by=("draft", "temperature", "k", "category"))
table(by_cat.pivot_table(index=["draft", "temperature", "k"], columns="category", values="tau"))

# %% [markdown]
# ## Sliders
# Pick a draft, k, temperature and policy; the grid above is filtered (`continuous_update=False`).

# %%
display(explorer(df))
