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
# AWQ and GPTQ calibrate on WikiText-2 **valid**; all fidelity numbers use WikiText-2 **test**.
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
# > (`partial_groups=True`); `down_proj` (1536 inputs) has exact groups.

# %% tags=["parameters"]
import os

MODEL = os.getenv("WB_MODEL", "smollm2-135m")
N_TOKENS = int(os.getenv("WB_N_TOKENS", "2048"))  # WikiText-2 test tokens for KL / top-1 / ppl
SEQ_LEN = int(os.getenv("WB_SEQ_LEN", "256"))  # non-overlapping evaluation windows
FULL = os.getenv("WB_FULL", "0") not in ("", "0", "false", "False")  # full study: 26 points, MMLU
N_QUESTIONS = int(os.getenv("WB_N_QUESTIONS", "10" if FULL else "0"))  # MMLU per subject (10 -> 570 q.)
SUBJECTS = os.getenv("WB_SUBJECTS") or None  # comma-separated MMLU subset, or all 57
# "demo" (10 points, ~12 min on 2 CPU cores), "full" (26 points), "small" (INT3/INT4 only)
GRID = os.getenv("WB_QUANT_GRID", "full" if FULL else "demo")
N_CALIB = int(os.getenv("WB_N_CALIB", "32"))  # AWQ/GPTQ calibration windows of CALIB_LEN tokens
CALIB_LEN = int(os.getenv("WB_CALIB_LEN", "256"))
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU | float32 | bfloat16
if os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False"):  # CI: two RTN configs, few tokens, 2x2 MMLU questions
    N_TOKENS, SEQ_LEN, N_QUESTIONS, GRID = 256, 128, 2, "smoke"
    SUBJECTS = SUBJECTS or "astronomy,marketing"

# %%
import itertools

import pandas as pd
import torch

import workbench.notebook as wbn
from workbench.device import describe, resolve
from workbench.models import load_model, provenance_of
from workbench.quant import QuantConfig, footprint, quantize, run_quant_sweep, takeaways
from workbench.quant import plots as qp
from workbench.quant.widgets import quant_explorer

wbn.setup()
torch.manual_seed(0)
device, dtype = resolve(DEVICE, DTYPE)
print(describe(device, dtype))  # the speed columns' floors: workbench.device.floors_line(device)
model, tok = load_model(MODEL, dtype=dtype, device=device)
wbn.table(pd.Series({**provenance_of(model), **footprint(model)}, name="value"), max_chars=60)

# %% [markdown]
# ## Where the error lands: per-layer weight error
# Relative weight error `‖Ŵ − W‖ / ‖W‖` of every Linear, for per-tensor symmetric INT4 (one scale for
# the whole matrix: outliers stretch the grid) and for INT4 with groups of 32.

# %%
cfg_tensor, cfg_g32 = QuantConfig(bits=4, granularity="per_tensor", symmetric=True), QuantConfig(bits=4, group_size=32)
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
g = {"partial_groups": True, "n_calib_samples": N_CALIB, "calib_seq_len": CALIB_LEN}
grans = [{"granularity": "per_tensor", "symmetric": True}, {"granularity": "per_channel"},
         {"group_size": 128}, {"group_size": 64}, {"group_size": 32}]
configs = [QuantConfig(bits=b, **gr, **g) for b, gr in itertools.product([2, 3, 4, 8], grans)]
configs += [QuantConfig(method=m, bits=b, group_size=128, **g) for m in ("awq", "gptq") for b in (3, 4)]
configs += [QuantConfig(bits=4, group_size=32, zero_point="float")]
if GRID == "small":
    configs = [c for c in configs if c.bits in (3, 4)]
if GRID == "demo":  # one point per question the notebook asks; AWQ and GPTQ at INT4 g128
    keep = {(8, "per_channel", None), (4, "per_tensor", None), (4, "per_channel", None), (4, "group", 128),
            (4, "group", 32), (3, "group", 128), (2, "group", 32)}
    configs = [c for c in configs if (c.method != "rtn" and c.bits == 4) or (c.method == "rtn" and (
        c.bits, c.granularity, c.group_size if c.granularity == "group" else None) in keep)]
if GRID == "smoke":  # two bit widths and two granularities, so each explorer control has two options
    configs = [QuantConfig(bits=4, granularity="per_tensor", symmetric=True), QuantConfig(bits=4, group_size=64),
               QuantConfig(bits=8, group_size=64)]
len(configs)

# %%
name = f"nb01_{MODEL.replace('/', '_')}_{GRID}_{N_TOKENS}t_{N_QUESTIONS}q"
grid = run_quant_sweep(model, tok, configs, n_tokens=N_TOKENS, seq_len=SEQ_LEN, n_questions=N_QUESTIONS,
                       subjects=SUBJECTS.split(",") if SUBJECTS else None, name=name)
cols = ["label", "scheme", "weight_bytes", "bits_per_weight_quantized", "kl_mean", "kl_p95", "top1_agreement",
        "ppl"] + [c for c in ("mmlu_acc", "mmlu_ci_lo", "mmlu_ci_hi") if c in grid]
wbn.table(grid, columns=cols)

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
# Runs only when `N_QUESTIONS > 0` (5-shot; each subject's few-shot prefix is encoded once).

# %%
qp.plot_mmlu_vs_bits(grid) if N_QUESTIONS > 0 else "MMLU skipped: set WB_N_QUESTIONS"

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
