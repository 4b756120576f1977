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
import os

from workbench.quant import demo_defaults

MODEL = os.getenv("WB_MODEL", "smollm2-135m")
DEMO = demo_defaults(os.getenv("WB_DEVICE", "auto"))  # device ("auto": CUDA when present) and the demo sizes for it
DEVICE = DEMO["device"]
DTYPE = os.getenv("WB_DTYPE", DEMO["dtype"])  # bfloat16 on CUDA, float32 on the CPU
FULL = os.getenv("WB_FULL", "0") not in ("", "0", "false", "False")  # full study: 26 points, more data
GRID = os.getenv("WB_QUANT_GRID", "full" if FULL else DEMO["grid"])  # a name in workbench.quant.GRIDS
N_TOKENS = int(os.getenv("WB_N_TOKENS", 4096 if FULL else DEMO["n_tokens"]))  # WikiText-2 test tokens: KL, top-1, ppl
SEQ_LEN = int(os.getenv("WB_SEQ_LEN", "256"))  # non-overlapping evaluation windows
N_QUESTIONS = int(os.getenv("WB_N_QUESTIONS", 10 if FULL else DEMO["n_questions"]))  # MMLU per subject (0: none)
FORMULATION = os.getenv("WB_MMLU_FORMULATION", "mmlu_continuation")  # lm-eval's cloze task (acc_norm) or "mmlu"
N_SHOT = int(os.getenv("WB_N_SHOT", "0"))  # MMLU exemplars (lm-eval's mmlu_continuation default: 0)
# comma-separated MMLU subjects; default all 57 (the CPU demo: 10 of them)
SUBJECTS = os.getenv("WB_SUBJECTS") or (None if FULL or not DEMO["subjects"] else ",".join(DEMO["subjects"]))
N_CALIB = int(os.getenv("WB_N_CALIB", 32 if FULL else DEMO["n_calib_samples"]))  # AWQ/GPTQ calibration windows
CALIB_LEN = int(os.getenv("WB_CALIB_LEN", 256 if FULL else DEMO["calib_seq_len"]))  # tokens per window
AWQ_TOKENS = int(os.getenv("WB_AWQ_TOKENS", 2048 if FULL else DEMO["awq_max_tokens"]))  # AWQ scores scales on these
SPEED = os.getenv("WB_SPEED", "1") not in ("", "0", "false", "False")  # time every point on the engine
PREFILL = int(os.getenv("WB_PREFILL_TOKENS", "512"))  # prompt length of the timed prefill
# a random-init published shape ("random:qwen2-7b") on which the W4A16 runtimes are timed too (speed only; "" off)
TIMING_SHAPE = os.getenv("WB_TIMING_SHAPE", "")
if os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False"):  # CI: two RTN configs, few tokens, 2x2 MMLU questions
    N_TOKENS, SEQ_LEN, N_QUESTIONS, GRID, PREFILL = 256, 128, 2, "smoke", 64
    SUBJECTS = os.getenv("WB_SUBJECTS") or "astronomy,marketing"

# %%
import pandas as pd
import torch

import workbench.notebook as wbn
from workbench.device import describe, resolve
from workbench.models import load_model, provenance_of
from workbench.quant import (
    QuantConfig,
    SpeedConfig,
    footprint,
    quant_grid,
    quantize,
    run_quant_speed,
    run_quant_sweep,
    takeaways,
)
from workbench.quant import plots as qp
from workbench.quant.widgets import quant_explorer

wbn.setup()
torch.manual_seed(0)
device, dtype = resolve(DEVICE, DTYPE)
print(describe(device, dtype))
model, tok = load_model(MODEL, dtype=dtype, device=device)
print(f"grid {GRID!r}, {N_TOKENS} eval tokens, MMLU {N_QUESTIONS}/subject "
      f"({FORMULATION}, {N_SHOT}-shot), calibration {N_CALIB} x {CALIB_LEN} tokens")
wbn.table(pd.Series({**provenance_of(model), **footprint(model)}, name="value"), max_chars=60)

# %% [markdown]
# ## Where the error lands: per-layer weight error
# Relative weight error `‖Ŵ − W‖ / ‖W‖` of every Linear, for per-tensor symmetric INT4 (one scale for
# the whole matrix: outliers stretch the grid) and for INT4 with groups of 32.

# %%
cfg_tensor, cfg_g32 = QuantConfig.from_name("rtn_int4_tensor_sym"), QuantConfig.from_name("rtn_int4_g32")
rep_tensor, rep_g32 = quantize(model, cfg_tensor)[1], quantize(model, cfg_g32)[1]
qp.plot_layer_heatmap(rep_tensor, "rel_err").update_layout(title=f"Per-layer rel_err, {cfg_tensor.label}")

# %%
qp.plot_layer_heatmap(rep_g32, "rel_err").update_layout(title=f"Per-layer rel_err, {cfg_g32.label}")

# %%
wbn.table(pd.concat([rep_tensor.assign(config=cfg_tensor.label), rep_g32.assign(config=cfg_g32.label)]).groupby(
    "config")[["rel_err", "max_abs_err", "bits_per_weight"]].mean())

# %% [markdown]
# ## The sweep: one row per configuration, saved point by point
# `run_quant_sweep` stores each finished point in the results store (`data/results/`); re-running this
# cell after an interruption skips the points already there.

# %%
configs = quant_grid(GRID, n_calib_samples=N_CALIB, calib_seq_len=CALIB_LEN, awq_max_tokens=AWQ_TOKENS)
[c.label for c in configs]  # named presets (workbench.quant.GRIDS)

# %%
name = f"nb01_{MODEL.replace('/', '_')}_{DEVICE.replace(':', '')}_{DTYPE}_{GRID}_{N_TOKENS}t_{N_QUESTIONS}q"
grid = run_quant_sweep(model, tok, configs, n_tokens=N_TOKENS, seq_len=SEQ_LEN, n_questions=N_QUESTIONS,
                       n_shot=N_SHOT, formulation=FORMULATION, subjects=SUBJECTS.split(",") if SUBJECTS else None,
                       speed=SpeedConfig.for_device(DEVICE, prefill_tokens=PREFILL) if SPEED else False, name=name)
cols = ["label", "scheme", "weight_bytes", "bits_per_weight_quantized", "kl_mean", "kl_p95", "top1_agreement", "ppl",
        "mmlu_acc", "mmlu_ci_lo", "mmlu_ci_hi", "mmlu_vs_chance", "decode_ms_b1", "decode_ms_b8",
        f"prefill_ms_{PREFILL}", "peak_mem_bytes"]
wbn.table(grid, columns=[c for c in cols if c in grid])

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
# (CI about ±0.25): the pipeline, not a measurement; on CUDA it scores 570 (`WB_FULL=1` on the CPU too).

# %%
qp.plot_mmlu_vs_bits(grid) if "mmlu_acc" in grid else "MMLU off: N_QUESTIONS = 0"

# %% [markdown]
# ## Speed on the engine
# Every point runs on the engine on the model's device: INT4 (and INT2/INT3) weights on the W4A16
# kernels, INT8 on torch's `_weight_int8pack_mm`, AWQ's scales folded into the RMSNorm
# (`workbench.quant.convert_for_runtime`; the `runtime` column says which matmul ran each weight).
# Decode time per token at batch 1 and 8, prefill time for one prompt, and peak memory (measured on
# CUDA; on the CPU the footprint model: weights + KV cache). On the CPU the timings are this process's
# CPU time (other processes share the cores) and the INT4 path dequantizes per call, so it shows
# memory, not the speed a GPU kernel gets.

# %%
qp.plot_speed(grid) if "decode_ms_b1" in grid else "speed off: WB_SPEED=0"

# %%
grid[[c for c in ("label", "speed_device", "runtime", "engine_weight_bytes", "peak_mem_bytes", "mem_source")
      if c in grid]]

# %% [markdown]
# ## The same runtimes on a 7B shape (timing only)
# On the built-in model a decode step is bound by per-kernel latency, not bytes: each layer's matmuls read 0.3-3.5 MB,
# well under a microsecond at an H200's bandwidth, and costs 1.5-4 µs to run, so W4A16's fourfold fewer bytes
# buy little there and its dequantization costs a little (`benchmarks/RESULTS.md`, "Why W4A16 does not win on the
# 135M model"). A published 7B shape with random weights (`WB_TIMING_SHAPE=random:qwen2-7b`; about 35 GB of GPU
# memory at a time: the model, the quantized copy and its engine; about 4 minutes on an H200, most of it GPTQ)
# times the same three W4A16 runtimes where the weights' bytes dominate. Random weights have no quality, so
# `run_quant_speed` measures speed and memory only (AWQ and GPTQ calibrate on a few windows: their format, not
# their rounding, sets the speed). `speedup_b*` is the FP row's time over each row's. `peak_mem_bytes` counts
# what the engine allocated: the FP engine uses the model's own single-module weights, so it reads
# `engine_weight_bytes` but holds less new memory than that.

# %%
if TIMING_SHAPE:
    tmodel, ttok = load_model(TIMING_SHAPE, dtype=dtype, device=device)
    timing = run_quant_speed(tmodel, ttok, quant_grid("timing", n_calib_samples=4, calib_seq_len=128,
                                                      awq_max_tokens=512, awq_grid=4),
                             speed=SpeedConfig.for_device(DEVICE, prefill_tokens=PREFILL),
                             name=f"nb01_speed_{TIMING_SHAPE.replace(':', '_')}_{DEVICE.replace(':', '')}_{DTYPE}")
    del tmodel
    torch.cuda.empty_cache() if device.type == "cuda" else None
else:
    timing = None
    print("timing shape off: set WB_TIMING_SHAPE=random:qwen2-7b to time these runtimes on a 7B layout "
          "(speed only, random weights; CUDA)")

# %%
(wbn.table(timing, columns=[c for c in ("label", "weights", "decode_ms_b1", "speedup_b1", "decode_ms_b8", "speedup_b8",
                                        f"prefill_ms_{PREFILL}", "engine_weight_bytes", "peak_mem_bytes", "runtime")
                            if c in timing]) if timing is not None else "no timing shape (WB_TIMING_SHAPE)")

# %%
qp.plot_speed(timing) if timing is not None else "no timing shape (WB_TIMING_SHAPE)"

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
verdicts = takeaways(grid)
print("\n".join(verdicts["verdict"]) if len(verdicts) else "the grid holds no pair of points to compare")
wbn.table(verdicts, columns=["question", "a", "b", "kl_mean_a", "kl_mean_b", "diff", "ci_lo", "ci_hi", "winner"])

# %% [markdown]
# Reading the numbers:
#
# * A row with a float zero point (`asym-fz`) at g32 recovers the offline weights almost exactly only because
#   those weights *are* Q4_1 (g32, float minimum); its integer-zero twin is the honest INT4 number.
# * Memory: the float32 embedding matrix (49152 × 576, tied to `lm_head`) stays unquantized and is most of
#   what is left after INT4 (see the memory chart above).
# * Speed: on the CPU every point decodes at about the dense speed (the runtime keeps each quantized
#   weight dequantized once there: no CPU INT4 / INT8 matmul beats a dense one); the speed columns
#   compare kernels on CUDA, where INT4 weights run on the W4A16 kernels.
# * AWQ and GPTQ are calibrated as the reference implementations do: AWQ on full-precision activations,
#   GPTQ true-sequential with group parameters from the lazily updated weights (the variants, and what
#   they measured, are in `benchmarks/RESULTS.md`).
