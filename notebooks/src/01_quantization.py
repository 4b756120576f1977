# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Weight quantization: RTN, AWQ and GPTQ — what each choice costs and buys
#
# Weight-only quantization (`W{bits}A16`) stores each Linear weight as small integers plus a scale (and
# zero point) per group of `group_size` input features, and dequantizes on the fly. This notebook
# quantizes the model with three methods, measures the **real bytes** stored, and the **fidelity** to the
# full-precision (FP) model on held-out WikiText-2 test text: per-token KL(p_fp ‖ p_q) (nats), top-1
# agreement, perplexity, and (optionally) MMLU 5-shot accuracy with 95% CIs.
#
# * **RTN** — round to nearest, per tensor / per channel / per group, symmetric or asymmetric.
# * **AWQ** (Lin et al. 2023, arXiv 2306.00978) — scales salient input channels by `mean|x|^alpha`
#   before RTN, `alpha` searched on calibration activations.
# * **GPTQ** (Frantar et al. 2022, arXiv 2210.17323) — quantizes column by column, spreading each
#   rounding error over the remaining columns with the inverse Hessian `(2 X Xᵀ)⁻¹`.
#
# AWQ and GPTQ calibrate on WikiText-2 **valid**; all fidelity numbers use WikiText-2 **test**. Every point is
# also scored on MMLU and timed on the engine (decode and prefill, peak memory) on the model's device.
#
# > **Read this before the numbers.** The offline default model's weights were dequantized from a 4-bit
# > GGUF (**Q4_1, blocks of 32**: `w = d·q + m`, one fp16 scale `d` and one fp16 minimum `m` per block).
# > Re-quantizing them at INT4 with asymmetric groups of 32 *and a float zero point* (Q4_1's own grid,
# > `zero_point="float"` here) recovers them almost exactly, so that row looks nearly lossless by
# > construction. With the integer zero points of GPTQ / AWQ / compressed-tensors the Q4_1 grid is
# > shifted by up to half a step, and the loss is real. Trends that stay real: per-tensor symmetric INT4
# > versus groups, INT3 and INT2, the effect of group size, and AWQ / GPTQ versus RTN. An online user
# > gets the original bf16 weights, where none of this caveat applies.
# >
# > SmolLM2-135M's hidden size is 576 = 4·128 + 64, so "g128" here uses a narrower last group of 64
# > (`partial_groups=True`, which the grids set); `down_proj` (1536 inputs) has exact groups. The default
# > `QuantConfig()` uses groups of 64, which divide every width of this model; `QuantConfig.from_name("w4a16")`
# > (llm-compressor's W4A16, g128) refuses it and names the fixes.

# %% tags=["parameters"]
from workbench.params import env_int, env_str, study_size

SIZE = study_size()  # WB_SIZE: smoke | demo | full; the sizes: workbench.studies.quant.Config.from_name
MODEL = env_str("WB_MODEL", "smollm2-135m")  # built-in name, HF id, local folder or .gguf
DEVICE = env_str("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = env_str("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU
ENGINE = env_str("WB_ENGINE", "workbench", choices=("workbench", "vllm"))  # vllm: needs `make setup-vllm`
GRID = env_str("WB_QUANT_GRID", None)  # a name in workbench.quant.GRIDS (default: the size's)
N_QUESTIONS = env_int("WB_N_QUESTIONS", None)  # MMLU questions per subject (0: none; default: the size's)
TIMING_SHAPE = env_str("WB_TIMING_SHAPE", None)  # e.g. random:qwen2-7b (GPU; "none" turns the size's off)

# %%
import pandas as pd

import workbench.notebook as wbn
from workbench.models import load_model, provenance_of
from workbench.quant import footprint
from workbench.quant import plots as qp
from workbench.quant.widgets import quant_explorer
from workbench.studies import quant

wbn.setup()
cfg = quant.Config.from_name(SIZE, device=DEVICE, dtype=DTYPE, grid=GRID, n_questions=N_QUESTIONS,
                             timing_shape="" if TIMING_SHAPE == "none" else TIMING_SHAPE)
model, tok = load_model(MODEL, dtype=cfg.dtype, device=cfg.device)
print(cfg)
wbn.table(pd.Series({**provenance_of(model), **footprint(model)}, name="value"), max_chars=60)

# %% [markdown]
# ## The study: one row per configuration, saved point by point
# `quant.run` quantizes the model at every point of the grid, measures it and stores each finished point in the
# results store (`data/results/`): re-running this cell after an interruption computes only what is missing. A
# point is keyed by its config, the weights, the data, the engine and its kernel settings, and the device.

# %%
res = quant.run(cfg, model=(model, tok), engine=ENGINE)
grid = res.grid
cols = ["label", "scheme", "weight_bytes", "bits_per_weight_quantized", "kl_mean", "kl_p95", "top1_agreement", "ppl",
        "mmlu_acc", "mmlu_ci_lo", "mmlu_ci_hi", "mmlu_vs_chance", "decode_ms_b1", "decode_ms_b8",
        f"prefill_ms_{cfg.prefill_tokens}", "peak_mem_bytes"]
wbn.table(grid, columns=[c for c in cols if c in grid])

# %% [markdown]
# ## Where the error lands: per-layer weight error
# Relative weight error `‖Ŵ − W‖ / ‖W‖` of every Linear, for per-tensor symmetric INT4 (one scale for
# the whole matrix: outliers stretch the grid) and for INT4 with groups of 32 (`cfg.layer_configs`).

# %%
for label, rep in res.layers.groupby("config", sort=False):
    qp.plot_layer_heatmap(rep, "rel_err").update_layout(title=f"Per-layer rel_err, {label}").show()
wbn.table(res.layers.groupby("config")[["rel_err", "max_abs_err", "bits_per_weight"]].mean())

# %% [markdown]
# ## Memory against bits
# Measured bytes of every stored tensor: codes packed to `bits` bits each (INT4 two per byte, INT3 eight
# codes in three bytes), fp16 scales, uint8 zero points, and the float parts left (embeddings, norms). The
# embedding matrix (tied to `lm_head`, kept in float) is a floor no weight format removes.

# %%
qp.plot_memory_vs_bits(grid)

# %% [markdown]
# ## Fidelity against bits
# KL(p_fp ‖ p_q) per token (log axis) and top-1 agreement with the FP model, per method and granularity.

# %%
qp.plot_metric_vs_bits(grid, "kl_mean")

# %%
qp.plot_metric_vs_bits(grid, "top1_agreement")

# %%
qp.plot_group_size_trend(grid[grid["method"] == "rtn"], "kl_mean")

# %% [markdown]
# ## MMLU accuracy against bits (95% CIs)
# lm-eval's `mmlu_continuation` formulation by default ("Question: ...\nAnswer:", each choice's text scored
# as a continuation, `acc_norm`): in the letters formulation (`mmlu`) the built-in 135M model is at chance,
# so no quantization drop could show. Chance (0.25) is the dotted line; a point whose CI includes it is
# hollow: nothing can be read from it. On the CPU the demo scores one question from each of 10 subjects
# (CI about ±0.25): the pipeline, not a measurement; on CUDA it scores 570 (`WB_SIZE=full` on the CPU too).

# %%
qp.plot_mmlu_vs_bits(grid) if "mmlu_acc" in grid else "MMLU off: n_questions = 0"

# %% [markdown]
# ## Float formats: FP8, W8A8, NVFP4, MXFP4 beside the integer ones
# The float formats as llm-compressor names them (`FP8_DYNAMIC`: e4m3 weights per channel, activations per token;
# `FP8`: static per-tensor scales; `FP8_BLOCK`: 128x128 blocks; `W8A8` INT8 with SmoothQuant; `NVFP4` / `MXFP4`:
# e2m1 values with fp8 / e8m0 scales, W4A4 and weight-only) are in the same grid (`cfg.float_grid`), their
# activations quantized at every Linear input where the real kernels quantize them, so KL and MMLU are the W8A8 /
# W4A4 numbers. The chart places every point by measured bytes and KL; the dotted line is the front (no other point
# has fewer bytes *and* lower KL). Speed: FP8 runs on `torch._scaled_mm` on CUDA with compute capability >= 8.9
# only (`benchmarks/fp8_speed.py`); on this device the `runtime` column says when no float kernel was timed.

# %%
from workbench.quant.floatverdict import fp8_vs_w4a16, pareto_front

front = pareto_front(grid)
qp.plot_pareto(grid, front)

# %%
try:  # the sentence is computed from the two rows (paired KL interval, MMLU intervals, measured bytes)
    print(fp8_vs_w4a16(grid)["text"])
except ValueError as e:  # a grid without a W4A16 or an FP8 row
    print(f"W4A16 vs FP8: not testable here ({e})")
wbn.table(front, columns=[c for c in ("label", "weight_bytes", "kl_mean", "top1_agreement", "mmlu_acc") if c in front])

# %% [markdown]
# ## Speed on the engine
# Every point runs on the engine on the model's device: decode time per token at batch 1 and 8, prefill time for
# one prompt, and peak memory (measured on CUDA; on the CPU the footprint model: weights + KV cache). The
# `route_table` column says which kernel ran each matmul at each row count (`Engine.route_table()`), `runtime`
# summarises it. The timed engines run in `cfg.speed_dtype` ("auto": bfloat16 on CUDA and on a CPU with native bf16,
# where torch's CPU INT4 / INT8 kernels run; float32 elsewhere, where W4A16 / W8A16 run a dequantized copy and
# cannot be faster). On the CPU the times are this process's CPU time (robust to other jobs on the machine). The
# sentences below are computed from the timings: a difference smaller than the stated tolerance is not read.

# %%
qp.plot_speed(grid) if "decode_ms_b1" in grid else "speed off"

# %%
print("\n".join(quant.speed_takeaways(grid)))
wbn.table(grid, columns=[c for c in ("label", "speed_device", "runtime", "engine_weight_bytes", "peak_mem_bytes",
                                     "mem_source") if c in grid], max_chars=80)

# %% [markdown]
# ## The same runtimes on a 7B shape (timing only)
# On the built-in 135M model a GPU decode step is bound by per-kernel latency, not bytes: each layer's matmuls read
# 0.3-3.5 MB, well under a microsecond at an H100's bandwidth. A published 7B shape with random weights
# (`cfg.timing_shape`, on by default on a GPU with >= 40 GiB) times the same W4A16 runtimes where the weights'
# bytes dominate. Random weights have no quality, so these rows are speed and memory only (`weights` says so).
# `speedup_b*` is the FP row's time over each row's.

# %%
timing = res.timing
(wbn.table(timing, columns=[c for c in ("label", "weights", "decode_ms_b1", "speedup_b1", "decode_ms_b8", "speedup_b8",
                                        f"prefill_ms_{cfg.prefill_tokens}", "engine_weight_bytes", "peak_mem_bytes",
                                        "runtime") if c in timing])
 if timing is not None else f"no timing shape on {cfg.device} (WB_TIMING_SHAPE=random:qwen2-7b on a GPU)")

# %%
qp.plot_speed(timing) if timing is not None else "no timing shape"

# %% [markdown]
# ## Explore the grid
# Pick a method, granularity, group size and bit width: the chart shows that series with the chosen
# point circled and its row below. The sliders only filter the precomputed grid.

# %%
quant_explorer(grid)

# %% [markdown]
# ## What to take away
# Each question the grid can answer, computed from the sweep above (`workbench.quant.takeaways`): the two
# points' KL(p_fp ‖ p_q), their difference with its 95% CI (paired over the same evaluation windows), and a
# winner only when that interval excludes zero. Labels are the configs' own (`QuantConfig.label`).

# %%
verdicts = res.takeaways
print("\n".join(verdicts["verdict"]) if len(verdicts) else "the grid holds no pair of points to compare")
wbn.table(verdicts, columns=["question", "a", "b", "kl_mean_a", "kl_mean_b", "diff", "ci_lo", "ci_hi", "winner"])

# %% [markdown]
# Reading the numbers:
#
# * A row with a float zero point (`asym-fz`) at g32 recovers the offline weights almost exactly only because
#   those weights *are* Q4_1 (g32, float minimum); its integer-zero twin is the honest INT4 number.
# * Memory: the float32 embedding matrix (49152 × 576, tied to `lm_head`) stays unquantized and is most of
#   what is left after INT4 (see the memory chart above).
# * AWQ and GPTQ are calibrated as the reference implementations do: AWQ on full-precision activations,
#   GPTQ true-sequential with group parameters from the lazily updated weights (the variants, and what
#   they measured, are in `benchmarks/RESULTS.md`).
