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
# > step), the same code on the CPU and the GPU (`loop` column). On a CPU the times are CPU time of this
# > process (robust to other jobs). Whether a draft can pay off here is measured, not assumed: `c` is its
# > step cost against the target's on this device and kernel route, `verify_cost` what the `k + 1`-token
# > verify step costs in decode steps, and the best-k table below gives the best speedup the measured alpha
# > and c allow (below 1: do not speculate with this draft here).

# %% tags=["parameters"]
from workbench.params import env_list, env_str, study_size

SIZE = study_size()  # WB_SIZE: smoke | demo | full; the sizes: workbench.studies.spec.Config.from_name
MODEL = env_str("WB_MODEL", "smollm2-135m")  # the target
DEVICE = env_str("WB_DEVICE", "auto")  # auto: CUDA when present, else CPU
DTYPE = env_str("WB_DTYPE", "auto")  # auto: bfloat16 on CUDA, float32 on CPU
ENGINE = env_str("WB_ENGINE", "workbench", choices=("workbench", "vllm"))  # vllm: needs `make setup-vllm`
GRID = env_str("WB_SPEC_GRID", None)  # a name in workbench.spec.SPEC_GRIDS (default: the size's)
DRAFTS = env_list("WB_DRAFTS", None)  # make_draft names, e.g. int4,distilled,ngram (default: the grid's)
KS = env_list("WB_KS", None, int)  # static k values, e.g. 1,2,4 (default: the grid's)

# %%
import workbench.notebook as wbn
from workbench.models import load_model
from workbench.spec import plots
from workbench.spec.widgets import explorer
from workbench.studies import spec

wbn.setup()
cfg = spec.Config.from_name(SIZE, device=DEVICE, dtype=DTYPE, grid=GRID, drafts=DRAFTS, ks=KS)
print(cfg, cfg.spec_grid(), sep="\n")

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
target, tok = load_model(MODEL, dtype=cfg.dtype, device=cfg.device)
res = spec.run(cfg, model=(target, tok), engine=ENGINE)
df, summary, grid = res.runs, res.summary, cfg.spec_grid()
print(f"target {MODEL} on {target.device}; {len(df)} runs; loop: {sorted(df.loop.unique())}")
wbn.table(summary, columns=["draft", "temperature", "policy", "k", "n_prompts", "kl_pq", "alpha_pred", "alpha",
                            "alpha_lo", "alpha_hi", "tau", "tau_lo", "tau_hi", "tau_theory", "c", "verify_cost",
                            "speedup", "speedup_theory"])

# %% [markdown]
# ### Distillation: KL falls, acceptance rises
# Held-out KL(p‖q) per token (log scale), predicted alpha `Σ min(p, q)` at temperature 1, and how often
# the argmaxes agree (the greedy acceptance rate).

# %%
if res.distill is not None:
    plots.plot_distill(res.distill).show()
wbn.table(res.distill) if res.distill is not None else "no distilled draft in this grid"

# %% [markdown]
# ## The grid
# Static `k` over the grid's `ks`, plus the HF heuristic (+2 after a fully accepted step, −1 otherwise) and the
# confidence policy (stop drafting when the draft's `q(x) < 0.4`) at `k_policy`, each at every temperature.
# `spec.run` (above) computed everything once and stored it point by point in the results store (`data/results/`):
# re-running computes only the missing points. The charts and sliders below only filter it.

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
by_draft = res.by_draft
plots.plot_kl_alpha(by_draft).show()
wbn.table(by_draft, columns=["draft", "temperature", "kl_pq", "kl_qp", "tv", "alpha_pred", "alpha", "alpha_lo", "alpha_hi"])

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
wbn.table(summary[summary.k == grid.k_policy], columns=["draft", "temperature", "policy", "alpha", "tau",
                                                   "draft_acceptance_rate", "speedup"])

# %% [markdown]
# ## Best k for each draft
# `best_k` maximizes `tau / (k·c + 1)` at the measured alpha and c; a best speedup below 1 says: do not
# speculate with this draft on this hardware.

# %%
wbn.table(res.best_k)

# %% [markdown]
# ## By Spec-Bench category
# tau per category (static policy, every k). Structured tasks (extraction, coding, math) often accept more
# than open writing; whether they do here, read off the table: each cell rests on the few prompts of its
# category in this grid (see `n_prompts` above), so small differences between columns mean nothing.

# %%
wbn.table(res.by_category.pivot_table(index=["draft", "temperature", "k"], columns="category", values="tau"))

# %% [markdown]
# ## Sliders
# Pick a draft, k, temperature and policy; the grid above is filtered (`continuous_update=False`).

# %%
explorer(df)
