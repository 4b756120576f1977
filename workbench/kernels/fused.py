"""Triton kernels that fuse the small per-layer operations of a Llama/Qwen2 decoder step.

Without fusion one decode layer launches ~45 tiny kernels (RMSNorm alone is ~8), about 2 ms per
token for a 28-layer model even inside a CUDA graph; these three kernels bring the non-GEMM part
down to ~5 launches per layer. Each function has a plain-torch twin in :mod:`workbench.engine.ops`
(same signature, same results up to bf16 rounding) that the CPU path uses and the tests compare to.

Importing this module needs ``triton``; :mod:`workbench.engine.ops` imports it lazily, on CUDA only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import sm_count, use_pdl

# add_rmsnorm and silu_mul launch with programmatic dependent launch where use_pdl allows (as qkv_rope_cache and the
# matmul kernels do) and their grid has at most one program per SM (_small_pdl): their launch overlaps the previous
# kernel's tail, and the next PDL kernel's weight loads overlap theirs. A larger grid launched early holds warp slots
# on every SM while it waits, which the previous kernel's last waves need: on the H200 (benchmarks/results/
# h200_2026-12-03c/call1_engine.json, Qwen2-7B W4A16) PDL on both kernels for every grid took the batch-1 step from
# 2.388 to 2.167 ms but batch 32 (silu_mul: 608 programs of 4 warps after the Triton gate_up GEMM) from 4.781 to
# 4.959; with the one-program-per-SM bound (final_engine.json) batch 1 2.163 vs 2.373 ms off, 8 2.404 vs 2.541,
# 32 4.617 vs 4.752, 64 7.440 vs 7.502. False: plain launches always (benchmarks A/B it).
SMALL_PDL = True


def _small_pdl(device: torch.device, programs: int) -> bool:
    """Launch a small kernel of ``programs`` programs with PDL: :data:`SMALL_PDL`, :func:`use_pdl`, and at most one
    program per SM."""
    if not (SMALL_PDL and use_pdl(device)):
        return False
    return programs <= sm_count(device.index if device.index is not None else torch.cuda.current_device())


@triton.jit
def _add_rmsnorm_kernel(X, R, W, Y, ROUT, n_cols, eps,
                        HAS_RES: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    w = tl.load(W + cols, mask=m, other=0.0)  # (the weight needs no predecessor: before the wait)
    if PDL:  # programmatic dependent launch: wait for the previous kernel before reading x or writing
        gdc_launch_dependents()
        gdc_wait()
    x = tl.load(X + row * n_cols + cols, mask=m, other=0.0)
    if HAS_RES:
        r = tl.load(R + row * n_cols + cols, mask=m, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(ROUT.dtype.element_ty)  # HF: bf16 residual add
        tl.store(ROUT + row * n_cols + cols, x, mask=m)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / n_cols
    y = (xf * tl.rsqrt(var + eps)).to(Y.dtype.element_ty)  # HF casts back before the weight
    tl.store(Y + row * n_cols + cols, (w.to(tl.float32) * y.to(tl.float32)).to(Y.dtype.element_ty), mask=m)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    """Fused ``h = x + residual; y = RMSNorm(h) * weight`` (Zhang & Sennrich 2019, eq. 4).

    Args: ``x``, ``residual`` ``[N, hidden]`` (same dtype, contiguous; residual may be None),
    ``weight`` ``[hidden]``. Returns ``(y, h)``, both ``[N, hidden]`` in x's dtype (``h is x`` when
    residual is None).
    """
    n, h = x.shape
    y = torch.empty_like(x)
    rout = torch.empty_like(x) if residual is not None else x
    block = triton.next_power_of_2(h)
    pdl = _small_pdl(x.device, n)
    _add_rmsnorm_kernel[(n,)](x, residual if residual is not None else x, weight, y, rout, h, eps,
                              HAS_RES=residual is not None, BLOCK=block, PDL=pdl,
                              num_warps=8 if block >= 2048 else 4, launch_pdl=pdl)
    return y, rout


@triton.jit
def _qkv_rope_cache_kernel(QKV, BIAS, COS, SIN, WPOS, SLOTS, QOUT, KC, VC,
                           T, H, KV, G, stride_qkv, c_sb, c_sh, c_ss,
                           HAS_BIAS: tl.constexpr, D: tl.constexpr, HALF: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # programmatic dependent launch: wait for the previous kernel before any read or write
        gdc_launch_dependents()
        gdc_wait()
    n = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    b = n // T
    t = n % T
    pos = tl.load(WPOS + n)
    offs = tl.arange(0, HALF)
    c = tl.load(COS + pos * D + offs)
    s = tl.load(SIN + pos * D + offs)
    if h < H:
        col = h * D
    else:
        col = H * D + (h - H) * D
    x1 = tl.load(QKV + n * stride_qkv + col + offs).to(tl.float32)
    x2 = tl.load(QKV + n * stride_qkv + col + HALF + offs).to(tl.float32)
    if HAS_BIAS:
        x1 = x1 + tl.load(BIAS + col + offs).to(tl.float32)
        x2 = x2 + tl.load(BIAS + col + HALF + offs).to(tl.float32)
    o1 = x1 * c - x2 * s  # rotate_half convention of HF Llama (Su et al. 2021, RoFormer eq. 34)
    o2 = x2 * c + x1 * s
    if h < H:
        kv = h // G
        g = h % G
        dst = QOUT + ((b * KV + kv) * G * T + g * T + t) * D
        tl.store(dst + offs, o1.to(QOUT.dtype.element_ty))
        tl.store(dst + HALF + offs, o2.to(QOUT.dtype.element_ty))
    else:
        kh = h - H
        slot = tl.load(SLOTS + b)
        off = slot * c_sb + kh * c_sh + pos * c_ss
        tl.store(KC + off + offs, o1.to(KC.dtype.element_ty))
        tl.store(KC + off + HALF + offs, o2.to(KC.dtype.element_ty))
        vcol = H * D + KV * D + kh * D
        v1 = tl.load(QKV + n * stride_qkv + vcol + offs).to(tl.float32)
        v2 = tl.load(QKV + n * stride_qkv + vcol + HALF + offs).to(tl.float32)
        if HAS_BIAS:
            v1 = v1 + tl.load(BIAS + vcol + offs).to(tl.float32)
            v2 = v2 + tl.load(BIAS + vcol + HALF + offs).to(tl.float32)
        tl.store(VC + off + offs, v1.to(VC.dtype.element_ty))
        tl.store(VC + off + HALF + offs, v2.to(VC.dtype.element_ty))


def qkv_rope_cache(qkv, bias, cos, sin, wpos, slots, t, k_cache, v_cache, n_heads, n_kv):
    """Bias add + RoPE on q and k + KV-cache write, one launch.

    Args: ``qkv`` ``[N=B*T, (H+2*KV)*D]``; ``bias`` ``[(H+2*KV)*D]`` or None; ``cos``/``sin``
    ``[S_cache, D]`` float32 tables; ``wpos`` ``[N]`` int64 write positions; ``slots`` ``[B]`` int64;
    ``k_cache``/``v_cache`` one layer ``[max_batch, KV, S_cache, D]``. Returns q in grouped layout
    ``[B, KV, G*T, D]`` (row ``g*T + t`` holds head ``kv*G + g`` of token t), ready for SDPA
    without repeating K/V for grouped-query attention (Ainslie et al. 2023).
    """
    n = qkv.shape[0]
    d = k_cache.shape[-1]
    b = slots.shape[0]
    g = n_heads // n_kv
    q = torch.empty(b, n_kv, g * t, d, dtype=qkv.dtype, device=qkv.device)
    _qkv_rope_cache_kernel[(n, n_heads + n_kv)](
        qkv, bias if bias is not None else qkv, cos, sin, wpos, slots, q, k_cache, v_cache,
        t, n_heads, n_kv, g, qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        HAS_BIAS=bias is not None, D=d, HALF=d // 2, PDL=use_pdl(qkv.device), num_warps=1,
        launch_pdl=use_pdl(qkv.device))
    return q


@triton.jit
def _silu_mul_kernel(GU, OUT, inter, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < inter
    gate = tl.load(GU + row * 2 * inter + cols, mask=m, other=0.0).to(tl.float32)
    up = tl.load(GU + row * 2 * inter + inter + cols, mask=m, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(OUT.dtype.element_ty).to(tl.float32)
    tl.store(OUT + row * inter + cols, (act * up).to(OUT.dtype.element_ty), mask=m)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation ``silu(gate) * up`` (Shazeer 2020, eq. 6) of ``gu`` ``[N, 2*I]`` laid out
    ``[gate | up]``; returns ``[N, I]`` in gu's dtype."""
    n, two_i = gu.shape
    inter = two_i // 2
    out = torch.empty(n, inter, dtype=gu.dtype, device=gu.device)
    block = 1024
    pdl = _small_pdl(gu.device, n * triton.cdiv(inter, block))
    _silu_mul_kernel[(n, triton.cdiv(inter, block))](gu, out, inter, BLOCK=block, PDL=pdl, num_warps=4,
                                                     launch_pdl=pdl)
    return out
