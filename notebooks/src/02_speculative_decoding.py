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
# exactly (the tests check it with a chi-square test over 100,000 samples).
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
# > **On this CPU the times are indicative.** They are CPU time of this process (robust to other jobs),
# > through the same `HFRunner` for plain and speculative decoding. Quantized self-drafts run dequantized
# > weights here, so their `c ≈ 1` and they cannot pay off (theory agrees: `tau / (k + 1) < 1`); they
# > show how alignment falls with bits. The verify forward of `k + 1` tokens also costs more than one
# > decode step on a CPU (`verify_cost` column); on a GPU it costs about the same.

# %% tags=["parameters"]
import os

SMOKE = os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False")
MODEL = os.getenv("WB_MODEL", "smollm2-135m")
N_PROMPTS = int(os.getenv("WB_N_PROMPTS", 2 if SMOKE else 12))  # Spec-Bench, stratified by category
MAX_NEW = int(os.getenv("WB_MAX_NEW", 6 if SMOKE else 24))  # new tokens per prompt
DRAFTS = os.getenv("WB_DRAFTS", "int4,distilled" if SMOKE else "int8,int4,int3,distilled").split(",")
KS = [int(k) for k in os.getenv("WB_KS", "2" if SMOKE else "1,2,4,6").split(",")]
K_POLICY = int(os.getenv("WB_K_POLICY", 2 if SMOKE else 4))  # k for the policy comparison
TEMPS = [float(t) for t in os.getenv("WB_TEMPS", "0,0.7").split(",")]
DISTILL_STEPS = int(os.getenv("WB_DISTILL_STEPS", 5 if SMOKE else 150))
DISTILL_CHARS = int(os.getenv("WB_DISTILL_CHARS", 60_000 if SMOKE else 0))  # 0 = all of WikiText-2 valid
MAX_PROMPT_TOKENS = int(os.getenv("WB_MAX_PROMPT_TOKENS", 128))
SEED = int(os.getenv("WB_SEED", 0))

# %%
import time

import pandas as pd
import torch
from IPython.display import display

from workbench.data import load_prompts, load_text
from workbench.models import load_model
from workbench.notebook import setup
from workbench.spec import SpecConfig, encode_prompts, make_draft, plots, run_spec, summarize_spec, theory
from workbench.spec.widgets import explorer

setup()
torch.set_num_threads(1)
torch.manual_seed(SEED)

# %% [markdown]
# ## Target, prompts and drafts
#
# Drafts: RTN self-drafts (`int8` per channel, `int4`/`int3` groups of 64, through `workbench.quant`) and a
# **distilled** draft: 2 decoder layers (initialised from the target's first and last layers) sharing the
# target's embeddings and head, trained on the target's logits with KL(p‖q) on WikiText-2 valid. Any hub
# pair with one tokenizer works the same way (`make_draft(target, "Qwen/Qwen2.5-0.5B-Instruct", tok)`
# checks the tokenizers).

# %%
target, tok = load_model(MODEL)
prompts = load_prompts("spec-bench", n=N_PROMPTS, seed=SEED)
prompts = encode_prompts(tok, prompts, max_prompt_tokens=MAX_PROMPT_TOKENS)
text = load_text("wikitext-2", "valid")
text = text[:DISTILL_CHARS] if DISTILL_CHARS else text
distill_kw = {"steps": DISTILL_STEPS, "tokenizer": tok, "text": text, "eval_every": max(1, DISTILL_STEPS // 10)}
built = {name: make_draft(target, name, tok, distill_kwargs=distill_kw) for name in DRAFTS}
drafts = {name: model for name, (model, info) in built.items()}
prompts[["prompt_id", "category", "n_prompt"]]

# %% [markdown]
# ### Distillation: KL falls, acceptance rises
# Held-out KL(p‖q) per token (log scale), predicted alpha `Σ min(p, q)` at temperature 1, and how often
# the argmaxes agree (the greedy acceptance rate).

# %%
if "distilled" in built:
    curve = built["distilled"][1]["curve"]
    plots.plot_distill(curve).show()
    display(curve.round(4))

# %% [markdown]
# ## The grid
# Static `k` over `KS`, plus the HF heuristic (+2 after a fully accepted step, −1 otherwise) and the
# confidence policy (stop drafting when the draft's `q(x) < 0.4`) at `K_POLICY`, each at every
# temperature. Everything is computed once; the charts and sliders below only filter it.

# %%
configs = [SpecConfig(k=k, temperature=t, max_new_tokens=MAX_NEW, seed=SEED) for t in TEMPS for k in KS]
configs += [SpecConfig(k=K_POLICY, temperature=t, policy=p, max_new_tokens=MAX_NEW, seed=SEED)
            for t in TEMPS for p in ("heuristic", "confidence")]
configs += [SpecConfig(k=K_POLICY, temperature=t, max_new_tokens=MAX_NEW, seed=SEED)
            for t in TEMPS if K_POLICY not in KS]
t0 = time.perf_counter()
df = run_spec(target, drafts, prompts, configs, clock=time.process_time, progress=not SMOKE)
print(f"{len(df)} runs in {time.perf_counter() - t0:.0f} s")
summary = summarize_spec(df)
cols = ["draft", "temperature", "policy", "k", "n_prompts", "kl_pq", "alpha_pred", "alpha", "alpha_lo",
        "alpha_hi", "tau", "tau_lo", "tau_hi", "tau_theory", "c", "verify_cost", "speedup", "speedup_theory"]
summary[cols].round(3)

# %% [markdown]
# ## Tokens per step and acceptance by position
# Static policy, `k = K_POLICY`, greedy. A step emits between 1 (first draft rejected; the resampled token)
# and `k + 1` tokens (all accepted plus the bonus).

# %%
static_k = df[(df.policy == "static") & (df.k == K_POLICY) & (df.temperature == TEMPS[0])]
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
by_draft[["draft", "temperature", "kl_pq", "kl_qp", "tv", "alpha_pred", "alpha", "alpha_lo", "alpha_hi"]].round(3)

# %% [markdown]
# ## Measured against theory, vs k
# Dashed: `(1 − α^(k+1)) / (1 − α)` and `tau / (k·c + 1)` at each draft's pooled alpha and c; markers:
# measured. Measured speedups fall below the curves where the CPU verify forward costs more than one
# decode step (the theory assumes it costs the same).

# %%
plots.plot_theory_vs_k(summary, "tau", k_max=max(KS) + 2).show()
plots.plot_theory_vs_k(summary, "speedup", k_max=max(KS) + 2).show()

# %% [markdown]
# ## Policies side by side
# Same drafts, `k = K_POLICY` as the static budget, the heuristic's start value and the confidence cap.

# %%
plots.plot_policies(summary[summary.k == K_POLICY]).show()
summary[summary.k == K_POLICY][["draft", "temperature", "policy", "alpha", "tau", "draft_acceptance_rate",
                                "speedup"]].round(3)

# %% [markdown]
# ## Best k for each draft
# `best_k` maximizes `tau / (k·c + 1)` at the measured alpha and c; a best speedup below 1 says: do not
# speculate with this draft on this hardware.

# %%
best = [(r.draft, r.temperature, r.alpha, r.c, *theory.best_k(min(max(r.alpha, 0), 1), r.c))
        for r in by_draft.itertuples()]
pd.DataFrame(best, columns=["draft", "temperature", "alpha", "c", "best_k", "best_speedup"]).round(3)

# %% [markdown]
# ## By Spec-Bench category
# tau per category (static, `k = K_POLICY`): structured tasks (extraction, coding, math) usually accept
# more than open writing.

# %%
by_cat = summarize_spec(df[df.policy == "static"], by=("draft", "temperature", "k", "category"))
by_cat.pivot_table(index=["draft", "temperature", "k"], columns="category", values="tau").round(2)

# %% [markdown]
# ## Sliders
# Pick a draft, k, temperature and policy; the grid above is filtered (`continuous_update=False`).

# %%
display(explorer(df))
