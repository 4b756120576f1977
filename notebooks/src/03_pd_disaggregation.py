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
import os

from workbench.pd.loop import demo_loop_requests

SMOKE = os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False")
MODEL = os.getenv("WB_MODEL", "smollm2-135m")  # profiled on this machine
N_REQUESTS = int(os.getenv("WB_N_REQUESTS", 300 if SMOKE else 3000))  # per simulated point
RATES = [float(r) for r in os.getenv("WB_RATES", "10,40,80" if SMOKE else
                                     "5,10,20,30,40,50,60,70,80,90,100,120").split(",")]  # req/s
PRESET_MODEL = os.getenv("WB_PRESET_MODEL", "qwen2-7b")  # qwen2-7b | llama-3-8b
PRESET_HW = os.getenv("WB_PRESET_HW", "h200")  # a100-80g | h100-sxm | h200 | l40s | rtx-4090
SLO_TTFT_MS = float(os.getenv("WB_SLO_TTFT_MS", 400))  # the "chat" SLO preset
SLO_TPOT_MS = float(os.getenv("WB_SLO_TPOT_MS", 40))
WORKLOADS = os.getenv("WB_WORKLOADS", "chat" if SMOKE else "chat,long-prompt").split(",")  # WORKLOAD_PRESETS
RUN_REAL_LOOP = os.getenv("WB_RUN_REAL_LOOP", "1") == "1"
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
# real-loop requests; the demo: 24 on CUDA, 12 on the CPU
LOOP_REQUESTS = int(os.getenv("WB_LOOP_REQUESTS", 4 if SMOKE else demo_loop_requests(DEVICE)))
LOOP_RATE = float(os.getenv("WB_LOOP_RATE", 0.3))  # req/s on the CPU
SEED = int(os.getenv("WB_SEED", 0))
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU | float32 | bfloat16
THREADS = int(os.getenv("WB_THREADS", 1))  # torch threads; 1 makes this process's CPU time the step's compute

# %%
from dataclasses import asdict, replace
from functools import partial

import torch
from IPython.display import display

from workbench import results
from workbench.device import describe, resolve
from workbench.models import load_model
from workbench.notebook import fields, setup, table
from workbench.pd import CostModel, HardwareSpec, ModelSpec, plots
from workbench.pd.loop import clock_for, compare_to_sim, run_serving, sim_config_for
from workbench.pd.profile import ProfileConfig, drift_check, make_runner, run_profile, with_floors
from workbench.pd.sim import (
    SLO,
    LengthDist,
    SimConfig,
    WorkloadConfig,
    deployment_grid,
    generate_workload,
    grid_frames,
    grid_points,
    run_grid_point,
    select_deployments,
    slo_capacity,
)
from workbench.pd.verdict import compare_deployments
from workbench.pd.widgets import policy_explorer

setup()
torch.set_num_threads(THREADS)
device, dtype = resolve(DEVICE, DTYPE)
print(describe(device, dtype))

# %% [markdown]
# ## 1 · Profile on this machine
#
# Memory bandwidth and matmul rate are measured now (`HardwareSpec.measure`). Step times on the CPU are CPU time
# of this process (`CPUClock`), so other jobs on a shared machine do not inflate them; on a GPU, wall time with
# the device synchronized (`clock_for`).

# %%
model, tok = load_model(MODEL, dtype=dtype, device=device)
hw_here = HardwareSpec.measure(device, copy_mb=16 if SMOKE else None)  # None: 64 MiB on the CPU, 1 GiB on a GPU
spec_here = ModelSpec.from_hf_config(model.config, name=MODEL,
                                     bytes_per_param=next(model.parameters()).element_size(),
                                     bytes_per_kv=next(model.parameters()).element_size())
pcfg = (ProfileConfig(prompt_lens=(8, 32), prefill_batches=(1, 2), decode_batches=(1, 2, 4),
                      context_lens=(16,), repeats=2) if SMOKE else ProfileConfig.for_device(device))  # CPU: 3 repeats
runner = make_runner(model, max_batch=max(pcfg.max_batch, 8), max_seq=pcfg.max_seq + 64)
clock, sleep = clock_for(device)
profile = with_floors(run_profile(runner, pcfg, clock=clock), spec_here, hw_here)
cost_here = CostModel.fit(profile)
print(hw_here.name, f"{hw_here.hbm_gbs:.1f} GB/s, {hw_here.matmul_flops / 1e9:.1f} GFLOP/s ({hw_here.flops_dtype} matmul)")
display(fields(cost_here))

# %%
plots.plot_prefill_profile(profile, cost_here, title=f"{MODEL} prefill on {hw_here.name}").show()
plots.plot_decode_profile(profile, cost_here, title=f"{MODEL} decode on {hw_here.name}").show()

# %%
table(cost_here.residuals(profile), columns=["phase", "batch", "seq_len", "ms", "pred_ms", "rel_err", "floor_ms"])

# %% [markdown]
# ## 2 · Real loop vs simulator
#
# Continuous batching, prefill first, on the same runner; a Poisson workload with fixed prompts. The simulator
# gets the fitted profile and the same arrivals and lengths. Error = sim / real − 1. Afterwards the largest
# prefill and decode points of the profile are timed again: where the machine's speed moved by more than an
# error, that error is flagged (`warning`, and `!` on the chart), since it then says nothing about the simulator.

# %%
if RUN_REAL_LOOP:
    wl_real = generate_workload(WorkloadConfig(
        n_requests=LOOP_REQUESTS, rate=LOOP_RATE, prompt=LengthDist("fixed", 32 if SMOKE else 64),
        output=LengthDist("uniform", low=4, high=8 if SMOKE else 24), seed=SEED))
    real = run_serving(runner, wl_real, max_prefill_batch=2, clock=clock, sleep=sleep)
    drift = drift_check(runner, profile, pcfg, clock=clock)
    cmp = compare_to_sim(real, wl_real, cost_here, sim_config_for(runner, max_prefill_batch=2), drift=drift)
    plots.plot_sim_vs_real(cmp, title=f"{MODEL}: simulator vs real loop ({len(real)} requests)").show()
    display(table(drift), table(cmp))

# %% [markdown]
# ## 3 · Projection: a 7B-class model on an H200, from the roofline
#
# Costs are the roofline lower bounds (`CostModel.from_roofline`; peak FLOP/s and HBM bandwidth from the
# datasheet), KV capacity = 90% of memory minus weights. Deployments are compared at equal GPU count:
# colocated ×N and chunked ×N against disaggregated N_p P + N_d D with N = N_p + N_d. Every point is stored
# as it finishes (`workbench.results.sweep`), so a re-run only simulates what is missing.

# %%
spec7b, hw = ModelSpec.from_name(PRESET_MODEL), HardwareSpec.from_name(PRESET_HW)
cost7b = CostModel.from_roofline(spec7b, hw)
slo = SLO(ttft_ms=SLO_TTFT_MS, tpot_ms=SLO_TPOT_MS)
base = SimConfig.for_hardware(spec7b, hw)
workloads = {w.label: w for w in (WorkloadConfig.from_name(n, n_requests=N_REQUESTS, seed=SEED) for n in WORKLOADS)}
print(cost7b.source, f"| KV capacity {base.kv_capacity_tokens:,} tokens per GPU |", slo.label)

# %%
grid = deployment_grid(base, splits=((1, 1),) if SMOKE else ((1, 1), (1, 2), (2, 1), (1, 3)),
                       chunk_budgets=(512,) if SMOKE else (256, 512, 2048),
                       link_gbs=(None,) if SMOKE else (25.0, base.link_gbs))
points = grid_points(workloads, grid, RATES, cost7b, slo)
prov = results.collect_provenance(None, seed=SEED, data={"workloads": {k: asdict(w) for k, w in workloads.items()}})
rows = results.sweep(f"pd_grid_{PRESET_MODEL}_{PRESET_HW}", points, partial(
    run_grid_point, workloads=workloads, deployments=grid, cost=cost7b, slo=slo), provenance=prov)
quantiles, summary = grid_frames(rows, points)
print(f"{len(summary)} simulated points, {len(grid)} deployments")

# %%
w0, r0 = next(iter(workloads)), RATES[len(RATES) // 2]
sel = select_deployments(summary[summary["workload"] == w0], 1, 1, 512, base.link_gbs)
plots.plot_goodput(sel, title=f"{spec7b.name} on {hw.name}, {w0}: goodput at TTFT<={SLO_TTFT_MS:g} ms, "
                   f"TPOT<={SLO_TPOT_MS:g} ms").show()
q_sel = select_deployments(quantiles[(quantiles["workload"] == w0) & (quantiles["rate"] == r0)],
                           1, 1, 512, base.link_gbs)
plots.plot_cdfs(q_sel, by="label", slo=slo, title=f"CDFs at {r0:g} req/s, 2 GPUs").show()

# %% [markdown]
# The verdict compares the two deployments on the same requests: the difference in the share of requests that
# meet the SLOs, with a 95% confidence interval from batch means; "beats" only where the interval excludes zero,
# the gap is at least 1 point and the winner meets the SLOs for ≥ 90% of requests, otherwise "no difference".

# %%
colocated = replace(base, policy="colocated", n_instances=2).label
disaggregated = replace(base, policy="disaggregated", n_prefill=1, n_decode=1).label
verdict = compare_deployments(summary[summary["workload"] == w0], colocated, disaggregated)
print(f"{w0}: {verdict.text}")
display(table(verdict.table), table(slo_capacity(summary[summary["workload"] == w0])))
cols = ["label", "rate", "goodput_rps", "slo_attainment", "p99_ttft_ms", "p99_tpot_ms", "preemptions"]
table(sel.sort_values(["rate", "label"]), columns=cols)

# %% [markdown]
# ### Sliders
#
# Every setting is simulated above; the sliders only filter the grid (`continuous_update=False`).

# %%
display(policy_explorer(summary, quantiles, slo, rate=r0, link_gbs=base.link_gbs))
