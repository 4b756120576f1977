"""W4A16 GEMM for 17..64 activation rows with one group-deep tensor-core dot per quantization group (Triton).

``out[M, N] = x[M, K] @ w_hat[N, K]^T (+ residual)``, ``w_hat = (q - zero) * scale`` per group of ``G`` columns,
the weights in the layout of :func:`workbench.kernels.int4_layout.pack_int4_gemv` (the same ``qw`` / ``s`` /
``z`` buffers as :mod:`workbench.kernels.rows` and :mod:`workbench.kernels.w4a16_mma`: no second copy).

Why another kernel: at 32-64 rows a decode step's matmuls are no longer bound by the weight bytes alone (Qwen2-7B
gate_up at 64 rows: 17.4 GFLOP, about 26 us at 660 TFLOP/s, against 16 us of INT4 weights), and the two few-row
kernels issue too many instructions per MMA there: :mod:`~workbench.kernels.rows` runs a group as eight 16-deep
dots (one per nibble), each with its own operand conversion and, for wgmma with the A operand in registers, its
own wait; the CUDA kernel of :mod:`~workbench.kernels.w4a16_mma` loads the activations' MMA fragments from L1
for every MMA (``benchmarks/RESULTS.md``, 2026-12-03: about 8 instructions per MMA). Here a group is **one** dot of
depth ``G``:

* the ``[BLOCK_N, G / 8]`` word tile is expanded to ``[BLOCK_N, 8, G / 8]`` nibbles (nibble ``i`` of word ``j`` is
  column ``i * G / 8 + j`` of the group, so the row-major reshape to ``[BLOCK_N, G]`` is the natural column
  order) and turned into bf16 / fp16 ``q - zero`` exactly: ``base + q`` by OR-ing the exponent bits of ``base``
  onto the nibble (Kim et al. 2022, arXiv 2211.10017, sec. 4.1), minus ``base + zero`` (integer zeros,
  ``|zero| < base``);
* ``SWAP`` (swap AB, as Machete / Marlin for small M): the weight tile is the dot's A operand ``[BLOCK_N, G]``, the
  activations ``x^T`` ``[G, M_PAD]`` its B, the accumulator ``[BLOCK_N, M_PAD]``; otherwise ``x`` ``[M_PAD, G]``
  @ ``(q - zero)^T`` ``[G, BLOCK_N]``. Triton picks the MMA (wgmma on sm_90) and stages the operands;
* the group's float32 partial is scaled by the group's scale once (``w_hat`` is never rounded), summed over
  groups; split-K across programs with the serial split-K tickets of :mod:`workbench.kernels.common`;
* epilogue: rounded to x's dtype, then ``+ residual`` rounded again (HF's ``residual + linear(x)`` order).

Correctness: CPU tests through Triton's interpreter (float32 path, ``tests/engine/test_w4a16_dot.py``) and the GPU
check (``benchmarks/check_w4_mma.py``, the ``dot`` rows) against :func:`workbench.kernels.w4a16_mma.reference`.
Where it runs: :meth:`workbench.engine.int4.Int4Linear._route_plain` times it against the MMA kernel and the Triton
GEMM for each weight shape and row class above 16 rows and routes plain calls to the fastest. Measured on the H200
(``benchmarks/results/h200_2026-12-04b/``, Qwen2-7B): the fastest INT4 kernel for o at 64 rows (17.7 us against
19.0 and 29.3), slower than the other two on gate_up and down, and no engine step got faster (batch 64 7.232 ms
against 7.19-7.21 without it); all three stay slower than cuBLAS bf16 at 64 rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import interpret, split_k_locks, use_pdl

ROWS_MAX = 64
GROUPS = (64, 128, 256)  # G / 8 words a row a group must be a power of two (a Triton range)
# exponent bits OR-ed onto a nibble: bf16 2**7 + q, fp16 2**10 + q (exact for q < 2**7 resp. 2**10)
_MAGIC = {torch.bfloat16: (0x4300, 128.0), torch.float16: (0x6400, 1024.0)}


@triton.jit
def _group(acc, w_rows, S, Z, x_ptrs, xm, g, N, rl, sh, G: tl.constexpr, BLOCK_N: tl.constexpr, SWAP: tl.constexpr,
           MAGIC: tl.constexpr, BASE: tl.constexpr, FAST: tl.constexpr):
    """``acc += scale_g * dot(q_g - zero_g, x_g)`` for group ``g`` (one ``G``-deep dot)."""
    WB: tl.constexpr = G // 8
    w = tl.load(w_rows + g * WB)  # [BLOCK_N, WB] int32
    s = tl.load(S + g * N + rl).to(tl.float32)
    z = tl.load(Z + g * N + rl).to(tl.float32)
    nib = (w[:, None, :] >> sh[None, :, None]) & 0xF  # [BLOCK_N, 8, WB]: column i * WB + j
    xt = tl.load(x_ptrs + g * G, mask=xm, other=0.0)
    if FAST:  # base + q by exponent-OR, minus base + zero: q - zero exactly in x's dtype
        dt = xt.dtype
        v = (nib | MAGIC).to(tl.int16).to(dt, bitcast=True)
        a = tl.reshape(v - (z + BASE).to(dt)[:, None, None], [BLOCK_N, G])
        if SWAP:
            part = tl.dot(a, xt)
        else:
            part = tl.dot(xt, tl.trans(a))
    else:  # float32 operands (float32 activations; the interpreter, whose bf16 dot is wrong in Triton 3.6)
        a = tl.reshape(nib.to(tl.float32) - z[:, None, None], [BLOCK_N, G])
        if SWAP:
            part = tl.dot(a, xt.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(xt.to(tl.float32), tl.trans(a), input_precision="ieee")
    if SWAP:
        acc += part * s[:, None]
    else:
        acc += part * s[None, :]
    return acc


@triton.jit(do_not_specialize=["M", "PER", "NG", "SPLIT_K"])
def _dot_kernel(X, QW, S, Z, OUT, RES, P, LOCK, M, N, KW, NG, PER, SPLIT_K, stride_x,
                G: tl.constexpr, BLOCK_N: tl.constexpr, M_PAD: tl.constexpr, SWAP: tl.constexpr,
                HAS_RES: tl.constexpr, EVEN_N: tl.constexpr, PARTIAL: tl.constexpr, MAGIC: tl.constexpr,
                BASE: tl.constexpr, FAST: tl.constexpr, PDL: tl.constexpr, INTERPRET: tl.constexpr):
    WB: tl.constexpr = G // 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    rl = rn if EVEN_N else tl.minimum(rn, N - 1)  # rows past N read row N - 1 (never stored)
    rm = tl.arange(0, M_PAD)
    mmask = rm < M
    jw = tl.arange(0, WB)
    sh = 4 * tl.arange(0, 8)
    kk = tl.arange(0, G)
    w_rows = QW + rl.to(tl.int64)[:, None] * KW + jw[None, :]  # [BLOCK_N, WB]
    if PDL:  # programmatic dependent launch: every read of an activation and every write after the wait
        gdc_launch_dependents()
        gdc_wait()
    if SWAP:
        acc = tl.zeros([BLOCK_N, M_PAD], dtype=tl.float32)
        x_ptrs = X + rm[None, :] * stride_x + kk[:, None]  # [G, M_PAD]
        xm = mmask[None, :]
    else:
        acc = tl.zeros([M_PAD, BLOCK_N], dtype=tl.float32)
        x_ptrs = X + rm[:, None] * stride_x + kk[None, :]  # [M_PAD, G]
        xm = mmask[:, None]
    g0 = pid_k * PER
    g1 = tl.minimum(g0 + PER, NG)
    if INTERPRET:  # Triton 3.6's interpreter cannot take runtime loop bounds under numpy 2
        g = g0
        while g < g1:
            acc = _group(acc, w_rows, S, Z, x_ptrs, xm, g, N, rl, sh, G, BLOCK_N, SWAP, MAGIC, BASE, FAST)
            g += 1
    else:  # a `for` loop, so that Triton software-pipelines the loads (num_stages)
        for g in range(g0, g1):
            acc = _group(acc, w_rows, S, Z, x_ptrs, xm, g, N, rl, sh, G, BLOCK_N, SWAP, MAGIC, BASE, FAST)
    if SWAP:
        offs = rm[None, :] * N + rn[:, None]
        omask = mmask[None, :] & nmask[:, None]
    else:
        offs = rm[:, None] * N + rn[None, :]
        omask = mmask[:, None] & nmask[None, :]
    ety = OUT.dtype.element_ty
    if PARTIAL:  # serial split-K (workbench.kernels.common): the split that draws the last ticket sums
        tl.store(P + pid_k * M * N + offs, acc, mask=omask)
        tl.debug_barrier()
        ticket = tl.atomic_add(LOCK + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            acc = tl.zeros_like(acc)
            sk = 0
            while sk < SPLIT_K:
                acc += tl.load(P + sk * M * N + offs, mask=omask, other=0.0, cache_modifier=".cg")
                sk += 1
            if HAS_RES:
                acc = acc.to(ety).to(tl.float32) + tl.load(RES + offs, mask=omask, other=0.0).to(tl.float32)
            tl.store(OUT + offs, acc.to(ety), mask=omask)
            tl.atomic_xchg(LOCK + pid_n, 0, sem="relaxed", scope="gpu")
    else:
        if HAS_RES:
            acc = acc.to(ety).to(tl.float32) + tl.load(RES + offs, mask=omask, other=0.0).to(tl.float32)
        tl.store(OUT + offs, acc.to(ety), mask=omask)


def supported(n: int, k: int, group: int, dtype: torch.dtype, zeros: torch.Tensor | None = None) -> bool:
    """Whether :func:`gemm` takes this weight: ``group`` in :data:`GROUPS` dividing ``k``, activations bf16 / fp16
    / float32, and (if given) integer ``zeros`` with ``|zero| < base`` (128 for bf16, 1024 for fp16), so that
    ``base + zero`` is exact."""
    if group not in GROUPS or k % group or n < 1 or dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return False
    lim = _MAGIC.get(dtype, (0, 128.0))[1]
    return zeros is None or (bool(torch.equal(zeros, zeros.round())) and float(zeros.abs().max()) < lim)


def m_pad(m: int) -> int:
    """The padded row count of ``m`` rows (a compiled variant per class): 16, 32 or 64."""
    return max(16, triton.next_power_of_2(m))


def key(n: int, k: int, m: int, group: int, dtype: torch.dtype, has_residual: bool) -> tuple:
    """The :data:`_BEST` key of a call: shape, padded rows (:func:`m_pad`), group, dtype, residual epilogue."""
    return (n, k, m_pad(m), group, dtype, bool(has_residual))


# (SWAP, BLOCK_N, SPLIT_K, num_warps, num_stages): what tune() tries
CONFIGS = [(sw, bn, sk, w, st) for sw, bn, w, st in ((True, 64, 4, 4), (True, 128, 4, 3), (False, 128, 4, 3),
                                                     (False, 256, 8, 3)) for sk in (1, 2, 4)]
_BEST: dict = {}


def default_cfg(n: int, k: int, m: int, group: int, sms: int = 132) -> tuple:
    """An untuned configuration: swap AB, 64-row weight tiles, split-K until the grid covers about one wave of
    ``sms`` multiprocessors (at least 4 groups a split), 4 warps, 4 stages."""
    split = 1
    while triton.cdiv(n, 64) * split < sms and k // group // (2 * split) >= 4 and split < 8:
        split *= 2
    return (True, 64, split, 4, 4)


def gemm(x: torch.Tensor, qw: torch.Tensor, s: torch.Tensor, z: torch.Tensor, group: int, n: int,
         residual: torch.Tensor | None = None, cfg: tuple | None = None) -> torch.Tensor:
    """``[M, n] = x @ w_hat.T (+ residual)`` (see the module docstring).

    Args: ``x`` ``[M, K]`` bf16 / fp16 / float32, 1 <= M <= :data:`ROWS_MAX`, row-contiguous; ``qw`` ``[n, K / 8]``
    int32 (:func:`~workbench.kernels.int4_layout.pack_int4_gemv`); ``s``, ``z`` ``[K / G, n]`` in x's dtype
    (integer zeros); ``residual`` ``[M, n]``; ``cfg = (SWAP, BLOCK_N, SPLIT_K, num_warps, num_stages)`` (default:
    tuned for this call's :func:`key`, else :func:`default_cfg`). Returns ``[M, n]`` in x's dtype. Raises
    ``ValueError`` on shapes it does not take (the message names the expected shape)."""
    m, k = x.shape if x.dim() == 2 else (0, 0)
    if x.dim() != 2 or not 1 <= m <= ROWS_MAX:
        raise ValueError(f"x has shape {tuple(x.shape)}; this kernel takes 1..{ROWS_MAX} rows (split larger batches)")
    if group not in GROUPS or k % group or qw.shape != (n, k // 8) or s.shape != (k // group, n) or z.shape != s.shape:
        raise ValueError(f"x {tuple(x.shape)}, qw {tuple(qw.shape)}, s {tuple(s.shape)}, z {tuple(z.shape)}, "
                         f"group={group}: want x [M, K], qw [N, K // 8], s and z [K // G, N], G in {GROUPS} "
                         "dividing K")
    if residual is not None and residual.shape != (m, n):
        raise ValueError(f"residual has shape {tuple(residual.shape)}, want {(m, n)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    swap, block_n, split_k, warps, stages = cfg or _BEST.get(key(n, k, m, group, x.dtype, residual is not None)) \
        or default_cfg(n, k, m, group)
    ng = k // group
    per = triton.cdiv(ng, split_k)
    split_k = triton.cdiv(ng, per)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, block_n), split_k)
    if split_k > 1:
        part = torch.empty(split_k, m, n, dtype=torch.float32, device=x.device)
        lock = split_k_locks(x.device, grid[0])
    else:
        part = lock = out
    fast = x.dtype in _MAGIC and x.device.type == "cuda" and not interpret()
    magic, base = _MAGIC.get(x.dtype, (0, 0.0))
    pdl = use_pdl(x.device)
    _dot_kernel[grid](x, qw, s, z, out, residual if residual is not None else out, part, lock, m, n, qw.shape[1],
                      ng, per, split_k, x.stride(0), G=group, BLOCK_N=block_n, M_PAD=m_pad(m), SWAP=swap,
                      HAS_RES=residual is not None, EVEN_N=n % block_n == 0, PARTIAL=split_k > 1, MAGIC=magic,
                      BASE=base, FAST=fast, PDL=pdl, INTERPRET=interpret(), num_warps=warps, num_stages=stages, launch_pdl=pdl)
    return out


def tune(x, qw, s, z, group: int, n: int, residual=None, cfgs=None, l2_bytes: float = 128e6,
         timings: dict | None = None) -> tuple:
    """Time ``cfgs`` (default :data:`CONFIGS`) for this call under CUDA-graph replay with the weights rotated
    over enough copies that L2 holds none (:func:`workbench.kernels.timing.fastest_config`); cache the fastest
    in :data:`_BEST` under :func:`key` and return it. A configuration more than 1% (relative L2) from
    :func:`workbench.kernels.w4a16_mma.reference` is skipped. Needs CUDA; call outside graph capture. Raises
    ``RuntimeError`` when none runs."""
    from workbench.kernels.timing import fastest_config, weight_copies
    from workbench.kernels.w4a16_mma import reference

    kk = key(n, x.shape[1], x.shape[0], group, x.dtype, residual is not None)
    if kk in _BEST and timings is None:
        return _BEST[kk]
    ws = weight_copies((qw, s, z), l2_bytes)
    ref = reference(x, qw, s, z, group, residual)

    def run(w, cfg):
        return gemm(x, *w, group, n, residual, cfg)

    best = fastest_config(cfgs or CONFIGS, run, ws, ref, timings, f"W4A16 dot GEMM (N={n}, K={x.shape[1]}, "
                          f"M={x.shape[0]})")
    _BEST[kk] = best
    return best
