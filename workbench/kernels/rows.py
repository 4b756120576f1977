"""Few-row tensor-core GEMMs (M = 1..64 rows: decode batches, speculative verify steps) for bf16 and INT4 (W4A16)
weights, with the layer's small operations fused in: ``y = f(x) @ W.T (+ residual)``.

``f`` is a prologue of :data:`workbench.kernels.gemv.PROLOGUES`: none, RMSNorm with its weight (Zhang & Sennrich
2019, arXiv 1910.07467, eq. 4) or SwiGLU ``silu(gate) * up`` (Shazeer 2020, arXiv 2002.05202, eq. 6) of
``x = [gate | up]``; the epilogue adds a residual (HF's ``residual + linear(...)`` rounding), or, for one row, adds
the qkv bias, applies RoPE and writes k and v into the KV cache (:func:`workbench.kernels.common.store_row`).

Why these kernels: at M <= 64 a GEMM reads its weights once and is bound by memory (bf16: 2 bytes per weight;
INT4: 0.5 + scales), but cuBLAS's tiles for these shapes launch too few CTAs and tinygemm's INT4 kernel runs on
CUDA cores, so its time grows with M (``benchmarks/RESULTS.md``). Here:

* **swap AB**: the weight tile ``[BLOCK_N, K-step]`` is the MMA's A operand (its N fills the instruction's 64-row
  M), the activations ``x^T`` ``[K-step, M_PAD]`` (``M_PAD`` = 16, 32 or 64) are B; the accumulator is
  ``[BLOCK_N, M_PAD]`` float32 (as in Machete / CUTLASS mixed-input GEMMs for small M);
* **INT4 straight into the MMA operand registers**: with the shuffled layout of
  :func:`workbench.kernels.int4_layout.pack_int4_gemv`, nibble ``i`` of a ``[BLOCK_N, G/8]`` word tile is the
  weight tile of ``G/8`` consecutive columns, so dequantization is elementwise: the word tile goes from global
  to shared memory (software-pipelined copies, ``num_stages``) and from there into the A-operand registers; on
  CUDA one PTX ``prmt`` + ``lop3`` (+ ``shr``) turns two words' nibbles into two bf16 ``2**7 + q`` values at once
  (the exponent-OR trick of Kim et al. 2022, "Who says elephants can't run", arXiv 2211.10017, sec. 4.1, as in
  FasterTransformer and Marlin), and one packed subtraction of ``2**7 + zero`` makes ``q - zero`` exactly
  (integer zeros). The group's ``G/8`` sub-tiles are ``G/8``-deep MMAs into a per-group float32 accumulator, which
  is scaled by the group's scale once (no rounding of ``w_hat`` at all);
* **split-K in one kernel** for matrices with too few column blocks to fill the GPU (the last split sums the
  partials, :mod:`workbench.kernels.common`).

RMSNorm: with one row the kernel computes ``1 / rms`` first and rounds exactly as HF does
(``w_norm * bf16(x / rms)``); with more rows it computes ``bf16(x * w_norm) @ W.T`` and scales each output row by
its ``1 / rms`` at the end (the sums of squares come from the same activation tiles, so no second pass over the
rows), the same function with one rounding fewer than HF.

Launch configurations are timed per call under CUDA-graph replay with cold L2 by :func:`tune` (the benchmarks call
it); a call without a tuned entry uses the one tuned for the same matmul without prologue, else
:func:`default_cfg`. Correctness is tested on the CPU through Triton's interpreter (where the PTX dequantization is
replaced by the same arithmetic in plain Triton, and the PTX itself is emulated by hand) and on the GPU by
``benchmarks/check_rows.py``. Measured on the H200 (``benchmarks/RESULTS.md``, kernels section): the bf16 GEMM
streams 4.0-4.5 TB/s on the large matrices; the INT4 GEMM is bound by instruction issue and MMA latency (2.0-2.3
TB/s of INT4 weights at M = 1, nearly flat to M = 32), and the fused prologues cost more than separate kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import interpret, rope_args, rope_rows, split_k_locks, store_row, use_pdl
from workbench.kernels.gemv import PROLOGUES
from workbench.kernels.timing import fastest_config

ROWS_MAX = 64  # rows up to which these kernels are used (M_PAD <= 64)
# exponent bits OR-ed onto a nibble: bf16 2**7 + q, fp16 2**10 + q (exact for q < 2**7 resp. 2**10)
_MAGIC = {torch.bfloat16: (0x43004300, 128.0), torch.float16: (0x64006400, 1024.0)}


@triton.jit
def _dq_pair(w, X, B: tl.constexpr, MAGIC: tl.constexpr, ASM: tl.constexpr):
    """Nibbles ``2B`` and ``2B + 1`` of every int32 word of ``w`` as values (in X's dtype) ``base + q`` (``MAGIC`` =
    the exponent bits of ``base`` in both halves), or, without ``ASM``, as ``q`` (float32)."""
    if ASM:
        # two words per instance: prmt puts byte B of word 0 into bytes 0-1 and of word 1 into bytes 2-3;
        # lop3 (t & 0x000F000F) | MAGIC keeps the low nibble of each half; shr 4 exposes the high one
        return tl.inline_asm_elementwise(
            asm=f"""{{
            .reg .b32 t;
            prmt.b32 t, $2, $3, {B * 0x1111 + 0x4400};
            lop3.b32 $0, t, 0x000F000F, {MAGIC}, 0xEA;
            shr.u32 t, t, 4;
            lop3.b32 $1, t, 0x000F000F, {MAGIC}, 0xEA;
            }}""",
            constraints="=r,=r,r,r", args=[w], dtype=(X.dtype.element_ty, X.dtype.element_ty), is_pure=True,
            pack=2)
    else:
        lo = ((w >> (8 * B)) & 0xF).to(tl.float32)
        hi = ((w >> (8 * B + 4)) & 0xF).to(tl.float32)
        return lo, hi


@triton.jit
def _x_tile(X, NW, rm, mmask, k0, K, stride_x, ss, inv, BKS: tl.constexpr, PRO: tl.constexpr,
            NORM_PRE: tl.constexpr, EVEN_K: tl.constexpr):
    """The B operand ``f(x)^T`` ``[BKS, M_PAD]`` for columns ``k0 .. k0 + BKS`` in x's dtype, and ``ss``
    ``[BKS, M_PAD]`` (elementwise sums of ``x**2``, reduced over K at the end; RMSNorm without ``NORM_PRE``)
    updated."""
    dt = X.dtype.element_ty
    offs_k = k0 + tl.arange(0, BKS)
    ptr = X + rm[None, :] * stride_x + offs_k[:, None]
    if EVEN_K:
        xm = mmask[None, :]
    else:
        xm = mmask[None, :] & (offs_k < K)[:, None]
    x = tl.load(ptr, mask=xm, other=0.0)
    if PRO == 1:
        xf = x.to(tl.float32)
        if EVEN_K:
            nw = tl.load(NW + offs_k).to(tl.float32)[:, None]
        else:
            nw = tl.load(NW + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)[:, None]
        if NORM_PRE:  # HF: w_norm * bf16(x / rms)
            x = (nw * (xf * inv[None, :]).to(dt).to(tl.float32)).to(dt)
        else:
            ss += xf * xf
            x = (xf * nw).to(dt)
    elif PRO == 2:
        u = tl.load(ptr + K, mask=xm, other=0.0)
        g = x.to(tl.float32)
        # every program recomputes the activations of its K range: fast division (PTX div.full, 2 ulp in
        # float32), far below the bf16 rounding of silu's output that follows
        act = tl.fdiv(g, 1.0 + tl.exp(-g), ieee_rounding=False).to(dt)
        x = (act.to(tl.float32) * u.to(tl.float32)).to(dt)
    return x, ss


@triton.jit
def _mma(a, b, acc, IEEE: tl.constexpr):
    if IEEE:  # float32 operands (and the interpreter, whose bf16 dot is wrong in Triton 3.6): exact products
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _int4_group(QW, S, Z, X, NW, g, rn, nmask, rm, mmask, N, K, KW, stride_x, ss, inv, acc,
                BLOCK_N: tl.constexpr, M_PAD: tl.constexpr, WB: tl.constexpr, PRO: tl.constexpr,
                NORM_PRE: tl.constexpr, EVEN_N: tl.constexpr, MAGIC: tl.constexpr, BASE: tl.constexpr,
                ASM: tl.constexpr, IEEE: tl.constexpr):
    """``acc += scale * sum_i (q_i - zero) @ f(x)_i`` over the 8 sub-tiles of group ``g``."""
    dt = X.dtype.element_ty
    jw = tl.arange(0, WB)
    if EVEN_N:
        w = tl.load(QW + rn.to(tl.int64)[:, None] * KW + g * WB + jw[None, :])
        s = tl.load(S + g * N + rn)
        z = tl.load(Z + g * N + rn)
    else:
        w = tl.load(QW + rn.to(tl.int64)[:, None] * KW + g * WB + jw[None, :], mask=nmask[:, None], other=0)
        s = tl.load(S + g * N + rn, mask=nmask, other=0.0)
        z = tl.load(Z + g * N + rn, mask=nmask, other=0.0)
    if ASM:
        c = (z.to(tl.float32) + BASE).to(dt)[:, None]  # base + zero, exact for integer |zero| < base
    else:
        c = z.to(tl.float32)[:, None]
    part = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
    for b in tl.static_range(4):
        lo, hi = _dq_pair(w, X, b, MAGIC, ASM)
        xl, ss = _x_tile(X, NW, rm, mmask, g * (8 * WB) + (2 * b) * WB, K, stride_x, ss, inv, WB, PRO, NORM_PRE,
                         True)
        part = _mma((lo - c).to(dt), xl, part, IEEE)
        xh, ss = _x_tile(X, NW, rm, mmask, g * (8 * WB) + (2 * b + 1) * WB, K, stride_x, ss, inv, WB, PRO,
                         NORM_PRE, True)
        part = _mma((hi - c).to(dt), xh, part, IEEE)
    return acc + s.to(tl.float32)[:, None] * part, ss


# M, PER, K_END, SPLIT_K change per call: not specialized, so one compiled variant serves every row count of an
# M_PAD class and every split
@triton.jit(do_not_specialize=["M", "PER", "K_END", "SPLIT_K"])
def _rows_kernel(X, W, S, Z, OUT, P, SSB, LOCK, RES, NW, M, N, K, KW, PER, K_END, SPLIT_K, stride_x, eps,
                 BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh, c_ss,
                 QUANT: tl.constexpr, M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PRO: tl.constexpr, NORM_PRE: tl.constexpr, HAS_RES: tl.constexpr, EVEN_N: tl.constexpr,
                 EVEN_K: tl.constexpr, PARTIAL: tl.constexpr, ROPE: tl.constexpr, HAS_BIAS: tl.constexpr,
                 D: tl.constexpr, MAGIC: tl.constexpr, BASE: tl.constexpr, ASM: tl.constexpr, IEEE: tl.constexpr,
                 INTERPRET: tl.constexpr, PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    if ROPE:  # one row; the program's rows are matching dims of both halves of one head
        rn, head, d0 = rope_rows(pid_n, BLOCK_N, D)
    else:
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        head = 0
        d0 = 0
    nmask = rn < N
    rm = tl.arange(0, M_PAD)
    mmask = rm < M
    if PDL:  # programmatic dependent launch: every read of an activation and every write after the wait
        gdc_launch_dependents()
        gdc_wait()
    ss = tl.zeros([BLOCK_K, M_PAD], dtype=tl.float32)
    inv = tl.zeros([M_PAD], dtype=tl.float32)
    if NORM_PRE:  # 1 / rms of each row first (K x 2 bytes per row from L2)
        kk = 0
        while kk < K:
            offs = kk + tl.arange(0, 512)
            xf = tl.load(X + rm[:, None] * stride_x + offs[None, :], mask=mmask[:, None] & (offs < K)[None, :],
                         other=0.0).to(tl.float32)
            inv += tl.sum(xf * xf, axis=1)
            kk += 512
        inv = tl.rsqrt(inv / K + eps)
    acc = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
    k_begin = pid_k * PER  # groups (QUANT; K_END = K // G) or BLOCK_K steps (K_END = cdiv(K, BLOCK_K))
    k_end = tl.minimum(k_begin + PER, K_END)
    if QUANT:  # one group (BLOCK_K = G // 8 words) per step
        if INTERPRET:  # Triton 3.6's interpreter cannot take runtime loop bounds under numpy 2
            g = k_begin
            while g < k_end:
                acc, ss = _int4_group(W, S, Z, X, NW, g, rn, nmask, rm, mmask, N, K, KW, stride_x, ss, inv, acc,
                                      BLOCK_N, M_PAD, BLOCK_K, PRO, NORM_PRE, EVEN_N, MAGIC, BASE, ASM, IEEE)
                g += 1
        else:  # a `for` loop, so that Triton software-pipelines the loads (num_stages)
            for g in range(k_begin, k_end):
                acc, ss = _int4_group(W, S, Z, X, NW, g, rn, nmask, rm, mmask, N, K, KW, stride_x, ss, inv, acc,
                                      BLOCK_N, M_PAD, BLOCK_K, PRO, NORM_PRE, EVEN_N, MAGIC, BASE, ASM, IEEE)
    else:  # BLOCK_K columns per step (steps counted so that the compiler sees aligned column offsets)
        w_rows = W + rn.to(tl.int64)[:, None] * K
        if INTERPRET:
            t = k_begin
            while t < k_end:
                acc, ss = _dense_step(w_rows, nmask, X, NW, t * BLOCK_K, K, stride_x, rm, mmask, ss, inv, acc, BLOCK_K,
                                      PRO, NORM_PRE, EVEN_N, EVEN_K, IEEE)
                t += 1
        else:
            for t in range(k_begin, k_end):
                acc, ss = _dense_step(w_rows, nmask, X, NW, t * BLOCK_K, K, stride_x, rm, mmask, ss, inv, acc, BLOCK_K,
                                      PRO, NORM_PRE, EVEN_N, EVEN_K, IEEE)
    ss1 = tl.sum(ss, axis=0)  # [M_PAD]
    offs = rm[None, :] * N + rn[:, None]  # [BLOCK_N, M_PAD] into the [M, N] output
    omask = mmask[None, :] & nmask[:, None]
    if PARTIAL:
        # split-K: store the float32 partial (and the sums of squares), take a ticket; the last split sums
        tl.store(P + pid_k * M * N + offs, acc, mask=omask)
        if PRO == 1 and not NORM_PRE:
            tl.store(SSB + (pid_k * tl.num_programs(0) + pid_n) * M_PAD + rm, ss1)
        tl.debug_barrier()
        ticket = tl.atomic_add(LOCK + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            acc = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
            ss1 = tl.zeros([M_PAD], dtype=tl.float32)
            sk = 0
            while sk < SPLIT_K:
                acc += tl.load(P + sk * M * N + offs, mask=omask, other=0.0, cache_modifier=".cg")
                if PRO == 1 and not NORM_PRE:
                    ss1 += tl.load(SSB + (sk * tl.num_programs(0) + pid_n) * M_PAD + rm, cache_modifier=".cg")
                sk += 1
            _finish(acc, ss1, K, eps, OUT, RES, offs, omask, rn, rm, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC,
                    n_q_heads, n_kv_heads, c_sb, c_sh, c_ss, head, d0, PRO, NORM_PRE, HAS_RES, ROPE, HAS_BIAS,
                    BLOCK_N, D)
            tl.atomic_xchg(LOCK + pid_n, 0, sem="relaxed", scope="gpu")
    else:
        _finish(acc, ss1, K, eps, OUT, RES, offs, omask, rn, rm, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC,
                n_q_heads, n_kv_heads, c_sb, c_sh, c_ss, head, d0, PRO, NORM_PRE, HAS_RES, ROPE, HAS_BIAS, BLOCK_N, D)


@triton.jit
def _dense_step(w_rows, nmask, X, NW, kk, K, stride_x, rm, mmask, ss, inv, acc, BLOCK_K: tl.constexpr,
                PRO: tl.constexpr, NORM_PRE: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                IEEE: tl.constexpr):
    """``acc += W[rows, kk:kk+BLOCK_K] @ f(x)^T[kk:kk+BLOCK_K]`` (bf16/fp16/fp32 weights)."""
    offs_k = kk + tl.arange(0, BLOCK_K)
    if EVEN_K:
        if EVEN_N:
            w = tl.load(w_rows + offs_k[None, :])
        else:
            w = tl.load(w_rows + offs_k[None, :], mask=nmask[:, None], other=0.0)
    else:
        w = tl.load(w_rows + offs_k[None, :], mask=nmask[:, None] & (offs_k < K)[None, :], other=0.0)
    x, ss = _x_tile(X, NW, rm, mmask, kk, K, stride_x, ss, inv, BLOCK_K, PRO, NORM_PRE, EVEN_K)
    return _mma(w, x, acc, IEEE), ss


@triton.jit
def _finish(acc, ss, K, eps, OUT, RES, offs, omask, rn, rm, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads,
            n_kv_heads, c_sb, c_sh, c_ss, head, d0, PRO: tl.constexpr, NORM_PRE: tl.constexpr,
            HAS_RES: tl.constexpr, ROPE: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
            D: tl.constexpr):
    """The finished ``acc`` ``[BLOCK_N, M_PAD]``: RMSNorm's row scale (if applied at the end), then stored as
    ``[M, N]`` (+ residual), or, with ``ROPE`` (one row), through :func:`store_row`."""
    if PRO == 1 and not NORM_PRE:
        acc = acc * tl.rsqrt(ss / K + eps)[None, :]
    if ROPE:
        y = tl.sum(tl.where(rm[None, :] == 0, acc, 0.0), axis=1)  # the one row, [BLOCK_N]
        store_row(y, OUT, RES, rn, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh,
                  c_ss, head, d0, False, True, HAS_BIAS, BLOCK_N, D)
    else:
        ety = OUT.dtype.element_ty
        if HAS_RES:
            acc = acc.to(ety).to(tl.float32) + tl.load(RES + offs, mask=omask, other=0.0).to(tl.float32)
        tl.store(OUT + offs, acc.to(ety), mask=omask)


def _rows_args(x, m, prologue, norm_weight, residual, k, n):
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue={prologue!r}: choose one of {sorted(PROLOGUES)}")
    xk = 2 * k if prologue == "swiglu" else k
    if x.dim() != 2 or not 1 <= m <= ROWS_MAX or x.shape[1] != xk:
        raise ValueError(f"x has shape {tuple(x.shape)}; these kernels take 1..{ROWS_MAX} rows of {xk} "
                         "(use torch.matmul for more rows)")
    if prologue == "rmsnorm" and (norm_weight is None or norm_weight.numel() != k):
        raise ValueError(f"prologue 'rmsnorm' needs norm_weight of {k} elements")
    if residual is not None and residual.shape != (m, n):
        raise ValueError(f"residual has shape {tuple(residual.shape)}, want {(m, n)}")
    return x if x.stride(1) == 1 else x.contiguous()


def _rope_out(x, n, rope, block_n):
    """The q output ``[1, KV, G, D]`` of a RoPE epilogue, after checking its arguments."""
    if x.shape[0] != 1:
        raise ValueError(f"the RoPE epilogue takes one row, got {x.shape[0]}")
    n_heads, n_kv, d = rope[7], rope[8], rope[5].shape[-1]
    if n != (n_heads + 2 * n_kv) * d or n_kv < 1 or n_heads % n_kv:
        raise ValueError(f"N={n} must be (n_heads + 2 * n_kv) * head_dim with n_heads a multiple of n_kv")
    if block_n > d or d % block_n:
        raise ValueError(f"BLOCK_N={block_n} must divide head_dim={d} for the RoPE epilogue")
    return torch.empty(1, n_kv, n_heads // n_kv, d, dtype=x.dtype, device=x.device)


def _launch(x, w, s, z, n, k, kw, k_end, per, split_k, block_n, block_k, warps, stages, quant, prologue, norm_weight,
            eps, residual, rope):
    m = x.shape[0]
    m_pad = max(16, triton.next_power_of_2(m))
    out = _rope_out(x, n, rope, block_n) if rope is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, block_n), split_k)
    pro = PROLOGUES[prologue]
    norm_pre = pro == 1 and m == 1
    if split_k > 1:
        part = torch.empty(split_k, m, n, dtype=torch.float32, device=x.device)
        ssb = (torch.empty(split_k * grid[0] * m_pad, dtype=torch.float32, device=x.device)
               if pro == 1 and not norm_pre else part)
        lock = split_k_locks(x.device, grid[0])
    else:
        part = ssb = lock = out
    r_args, d, bias = rope_args(x, rope)
    pdl = use_pdl(x.device)
    asm = x.dtype in _MAGIC and x.device.type == "cuda" and not interpret()
    magic, base = _MAGIC.get(x.dtype, (0, 0.0))
    _rows_kernel[grid](x, w, s if s is not None else x, z if z is not None else x, out, part, ssb, lock,
                       residual if residual is not None else out, norm_weight if norm_weight is not None else x,
                       m, n, k, kw, per, k_end, split_k, x.stride(0), eps, *r_args,
                       QUANT=quant, M_PAD=m_pad, BLOCK_N=block_n, BLOCK_K=block_k, PRO=pro, NORM_PRE=norm_pre,
                       HAS_RES=residual is not None, EVEN_N=n % block_n == 0, EVEN_K=k % block_k == 0,
                       PARTIAL=split_k > 1, ROPE=rope is not None, HAS_BIAS=bias is not None, D=d, MAGIC=magic,
                       BASE=base, ASM=asm, IEEE=x.dtype == torch.float32 or interpret(), INTERPRET=interpret(),
                       PDL=pdl, num_warps=warps, num_stages=stages, launch_pdl=pdl)
    return out


def gemm(x: torch.Tensor, w: torch.Tensor, prologue: str = "none", norm_weight: torch.Tensor | None = None,
         eps: float = 1e-6, residual: torch.Tensor | None = None, cfg=None, rope=None) -> torch.Tensor:
    """``[M, N] = f(x) @ w.T (+ residual)`` for bf16/fp16/fp32 weights (see the module docstring).

    Args: ``x`` ``[M, K]`` (``[M, 2K]`` for ``"swiglu"``), 1 <= M <= :data:`ROWS_MAX`, row-contiguous;
    ``w`` ``[N, K]`` contiguous, x's dtype; ``norm_weight`` ``[K]`` (``"rmsnorm"``); ``residual`` ``[M, N]``;
    ``rope = (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv)`` (one row, ``prologue``
    "rmsnorm" as for qkv) returns q ``[1, KV, G, D]`` like :func:`workbench.kernels.gemv.gemv_qkv_rope`;
    ``cfg = (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)`` (default: tuned for this call, else
    :func:`default_cfg`). Returns ``[M, N]`` in x's dtype. Raises ``ValueError`` on shapes it does not take."""
    n, k = w.shape
    m = x.shape[0]
    x = _rows_args(x, m, prologue, norm_weight, residual, k, n)
    if not w.is_contiguous():
        raise ValueError("w must be contiguous ([N, K] row-major, the nn.Linear layout): pass w.contiguous()")
    block_n, block_k, split_k, warps, stages = cfg or _cfg("dense", n, k, m, prologue, residual, rope, x.dtype)
    steps = triton.cdiv(k, block_k)
    per = triton.cdiv(steps, split_k)  # BLOCK_K steps per split
    return _launch(x, w, None, None, n, k, 0, steps, per, triton.cdiv(steps, per), block_n, block_k, warps, stages,
                   False, prologue, norm_weight, eps, residual, rope)


def int4_supported(group: int, zeros: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether :func:`gemm_int4` takes this weight: ``group`` a power of two >= 128 (one group's sub-tile is a
    16-deep MMA step, and its ``group // 8`` words are a Triton range, which must be a power of two), integer
    zeros with ``|zero| < 2**7`` (so ``2**7 + zero`` is exact in bf16), activations bf16, fp16 or float32."""
    return (group % 128 == 0 and not group & (group - 1) and dtype in (torch.bfloat16, torch.float16, torch.float32)
            and bool(torch.equal(zeros, zeros.round())) and float(zeros.abs().max()) < 128)


def gemm_int4(x: torch.Tensor, qw: torch.Tensor, s: torch.Tensor, z: torch.Tensor, group: int, n: int,
              prologue: str = "none", norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
              residual: torch.Tensor | None = None, cfg=None, rope=None) -> torch.Tensor:
    """:func:`gemm` for W4A16 weights ``w_hat = (q - zero) * scale``: ``qw`` ``[N, K // 8]`` int32 from
    :func:`workbench.kernels.int4_layout.pack_int4_gemv`, ``s``/``z`` (scale, zero) ``[K // G, N]`` (see
    :func:`int4_supported`). ``cfg = (BLOCK_N, SPLIT_K, num_warps, num_stages)``. Returns ``[M, n]`` (or q with
    ``rope``) in x's dtype. Raises ``ValueError`` on shapes it does not take."""
    k = qw.shape[1] * 8
    m = x.shape[0]
    x = _rows_args(x, m, prologue, norm_weight, residual, k, n)
    bad_group = group % 128 or group & (group - 1) or k % group
    if bad_group or qw.shape[0] != n or s.shape != (k // group, n) or z.shape != s.shape:
        raise ValueError(f"qw {tuple(qw.shape)}, s {tuple(s.shape)}, z {tuple(z.shape)}, group={group}: want "
                         f"[N, K // 8], [K // G, N] twice and G a power of two >= 128 dividing K")
    block_n, split_k, warps, stages = cfg or _cfg("int4", n, k, m, prologue, residual, rope, x.dtype)
    ng = k // group
    per = triton.cdiv(ng, split_k)  # groups per split
    return _launch(x, qw, s, z, n, k, qw.shape[1], ng, per, triton.cdiv(ng, per), block_n, group // 8, warps,
                   stages, True, prologue, norm_weight, eps, residual, rope)


def _cfg(kind, n, k, m, prologue, residual, rope, dtype) -> tuple:
    """The configuration tuned for this call, else the one tuned for the same matmul without prologue or
    epilogue (if its tile fits a RoPE epilogue), else :func:`default_cfg`."""
    cfg = _BEST.get(_key(kind, n, k, m, prologue, residual is not None, rope, dtype))
    if cfg is None:
        cfg = _BEST.get(_key(kind, n, k, m, "none", False, None, dtype))
        if cfg is not None and rope is not None and rope[5].shape[-1] % cfg[0]:
            cfg = None
    return cfg or default_cfg(n, k, m, kind == "int4", rope)


def _key(kind, n, k, m, prologue, has_res, rope, dtype):
    m_pad = max(16, triton.next_power_of_2(m))
    return (kind, n, k, m_pad, prologue, bool(has_res), None if rope is None else rope[5].shape[-1], dtype)


def default_cfg(n: int, k: int, m: int, quant: bool, rope=None, sms: int = 132) -> tuple:
    """An untuned launch configuration: 64-row tiles, split-K until the grid covers about two waves of ``sms``
    multiprocessors (at least 4 K-steps per split), 4 warps, 4 stages."""
    block_n = 64
    if rope is not None:
        block_n = min(block_n, rope[5].shape[-1])
    steps = k // 128
    split_k = 1
    while triton.cdiv(n, block_n) * split_k < 2 * sms and steps // (2 * split_k) >= 4 and split_k < 8:
        split_k *= 2
    return (block_n, split_k, 4, 4) if quant else (block_n, 128, split_k, 4, 4)


_BEST: dict = {}
# What :func:`tune` tries: INT4 (BLOCK_N, SPLIT_K, num_warps, num_stages), dense (BLOCK_N, BLOCK_K, SPLIT_K,
# num_warps, num_stages); SPLIT_K is a launch argument (1 and > 1 compile two variants)
# (num_warps 2: mma.sync tiles, whose MMAs pipeline; 4 and 8: wgmma, which Triton waits on after each MMA when
# the A operand is in registers)
INT4_CONFIGS = [(bn, sk, w, st) for bn, w, st in ((64, 2, 4), (32, 2, 4), (128, 4, 4), (256, 8, 3))
                for sk in (1, 2, 4, 8)]
DENSE_CONFIGS = [(bn, bk, sk, w, st) for bn, bk, w, st in ((64, 128, 4, 4), (128, 64, 4, 4), (128, 128, 4, 3),
                                                           (256, 64, 8, 3)) for sk in (1, 2, 4, 8)]


def tune(x, w, prologue="none", norm_weight=None, eps=1e-6, residual=None, rope=None, quant=None, configs=None,
         l2_bytes: float = 128e6, timings: dict | None = None):
    """Time ``configs`` for this call under CUDA-graph replay, the weights rotated over enough copies
    (>= ``l2_bytes``) that L2 holds none of them; cache the fastest in :data:`_BEST` (per weight kind, N, K,
    M_PAD, prologue, residual, RoPE) and return it. ``w`` is a dense ``[N, K]`` weight, or with ``quant = (s,
    z, group)`` the packed ``qw`` (default configs :data:`INT4_CONFIGS` / :data:`DENSE_CONFIGS`). A
    configuration whose result differs from the default's by more than 1% is skipped. Needs CUDA; call outside
    graph capture."""
    if quant is None:
        n, k = w.shape
        ws = [(w,)]

        def run(wi, cfg):
            return gemm(x, wi[0], prologue, norm_weight, eps, residual, cfg, rope)
    else:
        s, z, group = quant
        n, k = w.shape[0], w.shape[1] * 8
        ws = [(w, s, z)]

        def run(wi, cfg):
            return gemm_int4(x, wi[0], wi[1], wi[2], group, n, prologue, norm_weight, eps, residual, cfg, rope)
    key = _key("dense" if quant is None else "int4", n, k, x.shape[0], prologue, residual is not None, rope, x.dtype)
    if key in _BEST and timings is None:
        return _BEST[key]
    nbytes = sum(t.nbytes for t in ws[0])
    ws += [tuple(t.clone() for t in ws[0]) for _ in range(min(63, max(0, -(-int(l2_bytes) // nbytes) - 1)))]
    configs = configs or (DENSE_CONFIGS if quant is None else INT4_CONFIGS)
    if rope is not None:
        configs = [c for c in configs if rope[5].shape[-1] % c[0] == 0]
    ref = run(ws[0], default_cfg(n, k, x.shape[0], quant is not None, rope)).float()
    best = fastest_config(configs, run, ws, ref, timings, f"rows GEMM ({key[0]}, N={n}, K={k}, M={x.shape[0]})")
    _BEST[key] = best
    return best
