# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Prefill/decode: timing profile, roofline, and a serving simulator
#
# Whether splitting prefill and decode onto separate instances pays off depends on the model, the
# hardware, the load and the SLOs. This notebook
#
# 1. **profiles** the default model on this machine (prefill ms vs tokens, decode ms vs batch) through the
#    `workbench.engine` runner, against the roofline floors of the hardware measured on the spot, and fits
#    the cost model `prefill = a + b·tokens + c·ΣL²`, `decode = d + e·batch + f·kv_tokens`;
# 2. runs a **real continuous-batching loop** on a Poisson workload and sets the simulator's prediction beside it;
# 3. **projects a 7B-class model on an H200** from the roofline: TTFT/TPOT CDFs and goodput vs request rate
#    for colocated (vLLM prefill-first), chunked prefill (Sarathi-Serve, arXiv 2403.02310) and
#    disaggregated P/D (DistServe arXiv 2401.09670, Splitwise arXiv 2311.18677), at equal GPU count.
#
# Goodput counts completed requests meeting *every* SLO, per second (`vllm bench serve --goodput`); capacity
# is the highest rate at which ≥ 90% of requests meet them (DistServe). Defaults: the `chat` SLO preset,
# TTFT ≤ 400 ms and TPOT ≤ 40 ms. Behind a P/D split the client's first token comes from the decode
# instance, after the KV transfer and the decode admission (as with vLLM's P/D proxies), so that is the TTFT here.

# %% tags=["parameters"]
from workbench.params import env_flag, env_str, study_size

SIZE = study_size()  # WB_SIZE: smoke | demo | full; the sizes: workbench.studies.pd.Config.from_name
MODEL = env_str("WB_MODEL", "smollm2-135m")  # profiled on this machine
DEVICE = env_str("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = env_str("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU
ENGINE = env_str("WB_ENGINE", "workbench", choices=("workbench", "vllm"))  # vllm: needs `make setup-vllm`
PRESET_MODEL = env_str("WB_PRESET_MODEL", "qwen2-7b")  # the projected model: qwen2-7b | llama-3-8b
PRESET_HW = env_str("WB_PRESET_HW", "h200")  # a100-80g | h100-sxm | h200 | l40s | rtx-4090
REAL_LOOP = env_flag("WB_RUN_REAL_LOOP", True)  # run the real serving loop against the simulator

# %%
from IPython.display import display

import workbench.notebook as wbn
from workbench.models import load_model
from workbench.pd import plots
from workbench.pd.sim import select_deployments
from workbench.pd.widgets import policy_explorer
from workbench.studies import pd as pd_study

wbn.setup()
cfg = pd_study.Config.from_name(SIZE, device=DEVICE, dtype=DTYPE, preset_model=PRESET_MODEL, preset_hw=PRESET_HW,
                                real_loop=REAL_LOOP)
print(cfg)

# %% [markdown]
# ## 1 · Profile on this machine
#
# Memory bandwidth and matmul rate are measured now (`HardwareSpec.measure`). Step times on the CPU are CPU time
# of this process (`CPUClock`), so other jobs on a shared machine do not inflate them; on a GPU, wall time with
# the device synchronized (`clock_for`).

# %%
model, tok = load_model(MODEL, dtype=cfg.dtype, device=cfg.device)
res = pd_study.run(cfg, model=(model, tok), engine=ENGINE)
hw_here, profile, cost_here = res.hardware, res.profile, res.cost
print(hw_here.name, f"{hw_here.hbm_gbs:.1f} GB/s, {hw_here.matmul_flops / 1e9:.1f} GFLOP/s ({hw_here.flops_dtype} matmul)")
display(wbn.fields(cost_here))

# %%
plots.plot_prefill_profile(profile, cost_here, title=f"{MODEL} prefill on {hw_here.name}").show()
plots.plot_decode_profile(profile, cost_here, title=f"{MODEL} decode on {hw_here.name}").show()

# %%
wbn.table(res.residuals, columns=["phase", "batch", "seq_len", "ms", "pred_ms", "rel_err", "floor_ms"])

# %% [markdown]
# ## 2 · Real loop vs simulator
#
# Continuous batching, prefill first, on the same runner; a Poisson workload with fixed prompts. The simulator
# gets the fitted profile and the same arrivals and lengths. Error = sim / real − 1. Afterwards the largest
# prefill and decode points of the profile are timed again: where the machine's speed moved by more than an
# error, that error is flagged (`warning`, and `!` on the chart), since it then says nothing about the simulator.
#
# With `WB_ENGINE=vllm` the real engine is a vLLM server (`.venv-vllm`): it is profiled over HTTP, the cost model
# is fitted to that profile, and the simulator runs vLLM's own scheduler as its policy (chunked prefill under
# `--max-num-batched-tokens`, `--max-num-seqs`) on the same Poisson requests at three loads, from light to the
# simulated saturation rate (`VLLMEngine.run_pd`).

# %%
if res.sim_vs_real is not None:
    real_name = "the vLLM server" if ENGINE == "vllm" else "real loop"
    plots.plot_sim_vs_real(res.sim_vs_real, title=f"{MODEL}: simulator vs {real_name} ({len(res.real)} requests)").show()
    display(wbn.table(res.drift), wbn.table(res.sim_vs_real))

# %% [markdown]
# ## 3 · Projection: a 7B-class model on an H200, from the roofline
#
# Costs are the roofline lower bounds (`CostModel.from_roofline`; peak FLOP/s and HBM bandwidth from the
# datasheet), KV capacity = 90% of memory minus weights. Deployments are compared at equal GPU count:
# colocated ×N and chunked ×N against disaggregated N_p P + N_d D with N = N_p + N_d. Every point is stored
# as it finishes (`workbench.results.sweep`), so a re-run only simulates what is missing.

# %%
proj = res.projection
spec7b, hw, base, slo = proj["spec"], proj["hw"], proj["base"], proj["slo"]
summary, quantiles = res.summary, res.quantiles
print(proj["cost"].source, f"| KV capacity {base.kv_capacity_tokens:,} tokens per GPU |", slo.label)
print(f"{len(summary)} simulated points, {len(res.deployments)} deployments")

# %%
w0, r0 = next(iter(proj["workloads"])), cfg.rates[len(cfg.rates) // 2]
sel = select_deployments(summary[summary["workload"] == w0], 1, 1, 512, base.link_gbs)
plots.plot_goodput(sel, title=f"{spec7b.name} on {hw.name}, {w0}: goodput at TTFT<={slo.ttft_ms:g} ms, "
                   f"TPOT<={slo.tpot_ms:g} ms").show()
q_sel = select_deployments(quantiles[(quantiles["workload"] == w0) & (quantiles["rate"] == r0)],
                           1, 1, 512, base.link_gbs)
plots.plot_cdfs(q_sel, by="label", slo=slo, title=f"CDFs at {r0:g} req/s, 2 GPUs").show()

# %% [markdown]
# The verdict compares the two deployments on the same requests: the difference in the share of requests that
# meet the SLOs, with a 95% confidence interval from batch means; "beats" only where the interval excludes zero,
# the gap is at least 1 point and the winner meets the SLOs for ≥ 90% of requests, otherwise "no difference".

# %%
print(f"{w0}: {res.verdict.text}")
display(wbn.table(res.verdict.table), wbn.table(res.capacity))
wbn.table(sel.sort_values(["rate", "label"]), columns=["label", "rate", "goodput_rps", "slo_attainment", "p99_ttft_ms",
                                                       "p99_tpot_ms", "preemptions"])

# %% [markdown]
# ### Sliders
#
# Every setting is simulated above; the sliders only filter the grid (`continuous_update=False`).

# %%
display(policy_explorer(summary, quantiles, slo, rate=r0, link_gbs=base.link_gbs))

# %% [markdown]
# ## 4 · Predicted for hardware that is not here (AIConfigurator)
# The projection above comes from the roofline of `PRESET_HW`. NVIDIA's AIConfigurator ships kernel tables measured
# on real systems in vLLM / SGLang / TRT-LLM; `pd_study.predictions` asks it about the same model, SLO and (median)
# request lengths on 2 GPUs, aggregated and disaggregated (the P:D split it would pick). Pick a system: its rows sit
# beside this study's simulated capacity. These are **predictions** from another tool's tables, not measurements;
# `benchmarks/results/2026-12-06_predict/` compares them with the workbench's own measurements on an H100.

# %%
from workbench.predict import INSTALL_HINT, available

if available():
    systems = pd_study.PREDICT_SYSTEMS[:1] if cfg.size == "smoke" else pd_study.PREDICT_SYSTEMS
    pred = pd_study.predictions(cfg, res, systems)
    cols = ["label", "mode", "chosen", "isl", "osl", "ttft_ms", "tpot_ms", "goodput_rps", "tokens_per_s_per_gpu",
            "pd_ratio", "note"]
    display(wbn.panel(lambda system: wbn.table(pred[pred["system"] == system], columns=cols),
                      {"system": wbn.widgets.Dropdown(options=list(systems), description="system")}, vary="system"))
    display(wbn.table(res.capacity))
else:
    print(f"not testable here: AIConfigurator is not installed ({INSTALL_HINT})")
