"""Triton W4A16 GEMV for decode (M <= 4 rows): ``y = x @ w_hat.T``, ``w_hat = (q - zero) * scale``
group-wise (group ``G`` along K, a power of two >= 32), fp32 accumulation.

Weight layout: :func:`workbench.kernels.int4_layout.pack_int4_gemv` (``qw`` ``[N, K // 8]`` int32, shuffled
within each group; ``s`` and ``z``, scale and zero, ``[K // G, N]``).

Kernel: one program = ``BLOCK_N`` rows x a range of groups (split-K), ``U`` groups per loop step; the
tile is ``[U, BLOCK_N, G // 8]`` words (this dimension order makes Triton give each thread 16 B of a
group's words for several rows, so the per-column work on ``x`` is shared by those rows). The weights,
scales and zeros of the next ``DEPTH`` steps are loaded before the current step is computed.

* nibble -> float without an int->float conversion (I2F is a quarter-rate instruction): OR the nibble,
  left in place at bit ``p`` <= 16, with the exponent of ``2**(23 - p)``; the float is then exactly
  ``2**(23 - p) + q`` (nibbles 5..7 come from ``w >> 12``). Subtracting ``c_p = zero + 2**(23 - p)``
  (one per row, group and ``p``) gives ``q - zero`` exactly for integer zeros: one LOP3 + one FADD per
  weight (``INT_ZERO=False``, for non-integer zeros, subtracts the zero separately).
* ``part += (q - zero) * x`` elementwise (one FFMA per weight and row of ``x``); per group
  ``acc += scale * part``; the reduction over K happens once, at the end.
* split-K in one kernel: each split stores an fp32 partial ``[SPLIT_K, M, N]`` and takes a ticket; the last
  split sums the partials into the output (:mod:`workbench.kernels.common`, one stream at a time).

Measured on the H200 (CUDA-graph replay, weights not in L2; ``benchmarks/bench_gemv.py``): at M = 1
faster than tinygemm on the large matrices (gate_up 32.8 vs 38.7 us, down 21.3 vs 24.4, lm_head 116.5
vs 145.1) and on par on the small ones (qkv 8.4 vs 8.3, o 7.0 vs 6.4); about 4.3 instructions per weight
at M = 1, so still 1.0-2.5 TB/s, well short of copy bandwidth. At M = 4 slower than tinygemm.

Launch configurations ``(BLOCK_N, SPLIT_K, U, num_warps[, DEPTH])`` are timed per ``(N, K, M)`` under
CUDA-graph replay (:func:`tune`, outside capture) and cached in :data:`_BEST`.

The legacy entry :func:`w4a16_gemv` (unshuffled :func:`~workbench.kernels.int4_layout.pack_int4_words`
layout, ``zero*scale`` operand) runs the same kernel with ``SHUFFLED=False``."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import rope_args, rope_rows, split_k_locks, store_row, use_pdl
from workbench.kernels.gemv import reference as _bf16_reference
from workbench.kernels.int4_layout import unpack_int4_gemv
from workbench.kernels.timing import fastest_config, weight_copies


@triton.jit
def _nib(w, MASK: tl.constexpr, magic):
    """The nibble of ``w`` under ``MASK`` (left in place) as the float ``2**e + q`` (``magic`` = bits of
    2**e). ``magic`` is a runtime value so that ``(w & MASK) | magic`` compiles to one LOP3 (two
    immediates do not fit one instruction)."""
    return ((w & MASK) | magic).to(tl.float32, bitcast=True)


@triton.jit
def _ldx(ptr, mask, EVEN_K: tl.constexpr):
    if EVEN_K:
        v = tl.load(ptr)
    else:
        v = tl.load(ptr, mask=mask, other=0.0)
    return v.to(tl.float32)


@triton.jit
def _clamp(g, g_last, EVEN_K: tl.constexpr):
    """Prefetch group index: an even split never reads past its last step (the tile would lie past the
    end of the last row); uneven splits mask instead."""
    if EVEN_K:
        return tl.minimum(g, g_last)
    else:
        return g


@triton.jit
def _x8(xb, xm, WB: tl.constexpr, SHUFFLED: tl.constexpr, EVEN_K: tl.constexpr):
    """The activations of one row for the 8 nibbles of a step (raw dtype), ``[U, 1, WB]`` each."""
    if SHUFFLED:
        st: tl.constexpr = WB
    else:
        st: tl.constexpr = 1
    if EVEN_K:
        return (tl.load(xb), tl.load(xb + st), tl.load(xb + 2 * st), tl.load(xb + 3 * st), tl.load(xb + 4 * st),
                tl.load(xb + 5 * st), tl.load(xb + 6 * st), tl.load(xb + 7 * st))
    else:
        return (tl.load(xb, mask=xm, other=0.0), tl.load(xb + st, mask=xm, other=0.0),
                tl.load(xb + 2 * st, mask=xm, other=0.0), tl.load(xb + 3 * st, mask=xm, other=0.0),
                tl.load(xb + 4 * st, mask=xm, other=0.0), tl.load(xb + 5 * st, mask=xm, other=0.0),
                tl.load(xb + 6 * st, mask=xm, other=0.0), tl.load(xb + 7 * st, mask=xm, other=0.0))


@triton.jit
def _ldr(ptr, mask, EVEN_K: tl.constexpr):
    if EVEN_K:
        return tl.load(ptr)
    else:
        return tl.load(ptr, mask=mask, other=0.0)


@triton.jit
def _xf(X, NW, offs, mask, inv, KX, PRO: tl.constexpr, EVEN_K: tl.constexpr):
    """``f(x)[offs]`` of the one-row prologue as float32, rounded to X's dtype where HF rounds (as
    :func:`workbench.kernels.gemv._prologue`): RMSNorm ``bf16(nw * bf16(x * inv))``, SwiGLU
    ``bf16(bf16(silu(gate)) * up)`` with ``up`` at ``X + KX``."""
    dt = X.dtype.element_ty
    x = _ldr(X + offs, mask, EVEN_K)
    if PRO == 1:
        nw = _ldr(NW + offs, mask, EVEN_K)
        y = (x.to(tl.float32) * inv).to(dt)
        x = (nw.to(tl.float32) * y.to(tl.float32)).to(dt)
    else:
        u = _ldr(X + KX + offs, mask, EVEN_K)
        g = x.to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(dt)
        x = (act.to(tl.float32) * u.to(tl.float32)).to(dt)
    return x.to(tl.float32)


@triton.jit
def _x8f(X, NW, offs, xm, inv, KX, WB: tl.constexpr, PRO: tl.constexpr, EVEN_K: tl.constexpr):
    """:func:`_x8` (shuffled layout) through the prologue ``PRO`` (float32)."""
    return (_xf(X, NW, offs, xm, inv, KX, PRO, EVEN_K), _xf(X, NW, offs + WB, xm, inv, KX, PRO, EVEN_K),
            _xf(X, NW, offs + 2 * WB, xm, inv, KX, PRO, EVEN_K), _xf(X, NW, offs + 3 * WB, xm, inv, KX, PRO, EVEN_K),
            _xf(X, NW, offs + 4 * WB, xm, inv, KX, PRO, EVEN_K), _xf(X, NW, offs + 5 * WB, xm, inv, KX, PRO, EVEN_K),
            _xf(X, NW, offs + 6 * WB, xm, inv, KX, PRO, EVEN_K), _xf(X, NW, offs + 7 * WB, xm, inv, KX, PRO, EVEN_K))


@triton.jit
def _step_load(w_ptrs, S, Z, sz_offs, g, N, NG, u3, u2, n3, n2, WB: tl.constexpr, EVEN_K: tl.constexpr,
               EVEN_N: tl.constexpr):
    """One loop step's operands: the weight tile ``[U, BLOCK_N, WB]`` at group ``g`` and the scales and
    zeros ``[U, BLOCK_N]``; groups >= NG (uneven split) and rows >= N are masked."""
    if EVEN_K:
        if EVEN_N:
            w = tl.load(w_ptrs + g * WB)
            s = tl.load(S + g * N + sz_offs)
            z = tl.load(Z + g * N + sz_offs)
        else:
            w = tl.load(w_ptrs + g * WB, mask=n3 < N, other=0)
            s = tl.load(S + g * N + sz_offs, mask=n2 < N, other=0.0)
            z = tl.load(Z + g * N + sz_offs, mask=n2 < N, other=0.0)
    else:
        wm = (g + u3) < NG
        cm = (g + u2) < NG
        if not EVEN_N:
            wm = wm & (n3 < N)
            cm = cm & (n2 < N)
        w = tl.load(w_ptrs + g * WB, mask=wm, other=0)
        s = tl.load(S + g * N + sz_offs, mask=cm, other=0.0)
        z = tl.load(Z + g * N + sz_offs, mask=cm, other=0.0)
    return w, s, z


@triton.jit
def _w4_gemv_kernel(X, QW, S, Z, OUT, P, LOCK, N, KW, NG, PER, SPLIT_K, stride_x, mg23, mg19, mg15, mg11, mg7,
                    RES, NW, eps, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh, c_ss,
                    M: tl.constexpr, BLOCK_N: tl.constexpr, U: tl.constexpr, WB: tl.constexpr,
                    EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, PARTIAL: tl.constexpr, SHUFFLED: tl.constexpr,
                    INT_ZERO: tl.constexpr, DEPTH: tl.constexpr, PDL: tl.constexpr, PRO: tl.constexpr = 0,
                    HAS_RES: tl.constexpr = False, ROPE: tl.constexpr = False, HAS_BIAS: tl.constexpr = False,
                    D: tl.constexpr = 2, KFULL: tl.constexpr = 1):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    G: tl.constexpr = WB * 8
    # one-row fusions (M = 1, shuffled layout): the prologue PRO (1 RMSNorm, 2 SwiGLU), then store_row's
    # epilogue (+ residual, or qkv bias + RoPE + KV write); with none of them the kernel is the plain GEMV
    EPI: tl.constexpr = HAS_RES or ROPE
    if ROPE:  # rows: matching dims of both halves of one head (common.rope_rows)
        rn, head, d0 = rope_rows(pid_n, BLOCK_N, D)
    else:
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        head = 0
        d0 = 0
    # tile [U, BLOCK_N, WB]: group step, row, word. With this dimension order Triton's coalescing puts
    # 4 threads x 16 B along a group's words, then threads along the groups, then along rows, so a thread
    # holds several rows of the same columns (per-column work on x is shared by those rows).
    u3 = tl.arange(0, U)[:, None, None]
    n3 = rn[None, :, None]
    j3 = tl.arange(0, WB)[None, None, :]
    w_ptrs = QW + n3.to(tl.int64) * KW + u3 * WB + j3
    # scales/zeros are loaded 2-D ([U, BLOCK_N]) and expanded: a 3-D load would be a layout anchor of its
    # own and Triton would then convert every dequantized tile to that layout
    sz_offs = tl.arange(0, U)[:, None] * N + rn[None, :]  # [U, BLOCK_N]
    n2 = rn[None, :]
    u2 = tl.arange(0, U)[:, None]
    if SHUFFLED:
        x_offs = u3 * G + j3  # + i * WB for nibble i
    else:
        x_offs = u3 * G + j3 * 8  # + i
    acc0 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
    acc1 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
    acc2 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
    acc3 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
    g_begin = pid_k * PER
    g_last = g_begin + PER - U  # the last step's first group
    # software pipeline in registers: the weights, scales and zeros of the next DEPTH steps are loaded
    # before the current step is computed
    w, s_raw, z_raw = _step_load(w_ptrs, S, Z, sz_offs, g_begin, N, NG, u3, u2, n3, n2, WB, EVEN_K, EVEN_N)
    if DEPTH >= 2:
        w1, s1, z1 = _step_load(w_ptrs, S, Z, sz_offs, _clamp(g_begin + U, g_last, EVEN_K), N, NG, u3, u2, n3, n2,
                                WB, EVEN_K, EVEN_N)
    else:
        w1, s1, z1 = w, s_raw, z_raw
    if PDL:  # programmatic dependent launch: the first weight steps (no kernel writes them) are loaded
        gdc_launch_dependents()  # before waiting for the previous kernel; x and every write after
        gdc_wait()
    inv = 0.0
    if PRO == 1:  # RMSNorm statistic over the whole row (every program; K elements from L2), as gemv.py
        kf = tl.arange(0, KFULL)
        xf = tl.load(X + kf, mask=kf < KW * 8, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / (KW * 8) + eps)
    it = 0
    while it < PER:  # a while loop: `range` over a runtime bound fails in the interpreter under numpy 2
        g = g_begin + it
        it += U
        # (an even split's last steps reload their own tiles, which are cached; otherwise groups past NG
        # are masked)
        wn, sn, zn = _step_load(w_ptrs, S, Z, sz_offs, _clamp(g + DEPTH * U, g_last, EVEN_K), N, NG, u3, u2, n3,
                                n2, WB, EVEN_K, EVEN_N)
        # x is loaded in the step that uses it (L1/L2-resident; carrying it through the loop made Triton
        # convert its layout through shared memory every step)
        if PRO == 0:
            x0, x1, x2, x3, x4, x5, x6, x7 = _x8(X + g * G + x_offs, (g + u3) < NG, WB, SHUFFLED, EVEN_K)
        else:
            x0, x1, x2, x3, x4, x5, x6, x7 = _x8f(X, NW, g * G + x_offs, (g + u3) < NG, inv, KW * 8, WB, PRO,
                                                  EVEN_K)
        s = s_raw.to(tl.float32)[:, :, None]
        z = z_raw.to(tl.float32)[:, :, None]
        if INT_ZERO:
            c0 = z + 8388608.0  # 2**23
            c1 = z + 524288.0  # 2**19
            c2 = z + 32768.0  # 2**15
            c3 = z + 2048.0  # 2**11
            c4 = z + 128.0  # 2**7
        else:
            c0 = 8388608.0
            c1 = 524288.0
            c2 = 32768.0
            c3 = 2048.0
            c4 = 128.0
        wh = w >> 12  # nibbles 5..7 at bits 8..19
        xb = X + g * G + x_offs
        xm = (g + u3) < NG
        part0 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
        part1 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
        part2 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
        part3 = tl.zeros([U, BLOCK_N, WB], dtype=tl.float32)
        for i in tl.static_range(8):
            if i == 0:
                d = _nib(w, 0xF, mg23) - c0
                xv = x0
            elif i == 1:
                d = _nib(w, 0xF0, mg19) - c1
                xv = x1
            elif i == 2:
                d = _nib(w, 0xF00, mg15) - c2
                xv = x2
            elif i == 3:
                d = _nib(w, 0xF000, mg11) - c3
                xv = x3
            elif i == 4:
                d = _nib(w, 0xF0000, mg7) - c4
                xv = x4
            elif i == 5:
                d = _nib(wh, 0xF00, mg15) - c2
                xv = x5
            elif i == 6:
                d = _nib(wh, 0xF000, mg11) - c3
                xv = x6
            else:
                d = _nib(wh, 0xF0000, mg7) - c4
                xv = x7
            if not INT_ZERO:
                d = d - z
            if SHUFFLED:
                xo = xb + i * WB
            else:
                xo = xb + i
            part0 += d * xv.to(tl.float32)
            if M > 1:
                part1 += d * _ldx(xo + stride_x, xm, EVEN_K)
            if M > 2:
                part2 += d * _ldx(xo + 2 * stride_x, xm, EVEN_K)
            if M > 3:
                part3 += d * _ldx(xo + 3 * stride_x, xm, EVEN_K)
        acc0 += s * part0
        if M > 1:
            acc1 += s * part1
        if M > 2:
            acc2 += s * part2
        if M > 3:
            acc3 += s * part3
        if DEPTH >= 2:
            w, s_raw, z_raw = w1, s1, z1
            w1, s1, z1 = wn, sn, zn
        else:
            w, s_raw, z_raw = wn, sn, zn

    ety = OUT.dtype.element_ty
    omask = rn < N
    y0 = tl.sum(tl.sum(acc0, 2), 0)
    y1 = tl.sum(tl.sum(acc1, 2), 0)
    y2 = tl.sum(tl.sum(acc2, 2), 0)
    y3 = tl.sum(tl.sum(acc3, 2), 0)
    if PARTIAL:
        # split-K without a second kernel: store the fp32 partial, take a ticket; the split that arrives
        # last sums all partials (read from L2) into OUT and resets the counter for the next launch
        # (the CUTLASS serial split-K semaphore pattern: barrier, then one release/acquire atomic)
        pp = P + pid_k * M * N + rn
        tl.store(pp, y0, mask=omask)
        if M > 1:
            tl.store(pp + N, y1, mask=omask)
        if M > 2:
            tl.store(pp + 2 * N, y2, mask=omask)
        if M > 3:
            tl.store(pp + 3 * N, y3, mask=omask)
        tl.debug_barrier()
        ticket = tl.atomic_add(LOCK + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            t0 = tl.zeros([BLOCK_N], dtype=tl.float32)
            t1 = tl.zeros([BLOCK_N], dtype=tl.float32)
            t2 = tl.zeros([BLOCK_N], dtype=tl.float32)
            t3 = tl.zeros([BLOCK_N], dtype=tl.float32)
            sk = 0
            while sk < SPLIT_K:
                q = P + sk * M * N + rn
                t0 += tl.load(q, mask=omask, other=0.0, cache_modifier=".cg")
                if M > 1:
                    t1 += tl.load(q + N, mask=omask, other=0.0, cache_modifier=".cg")
                if M > 2:
                    t2 += tl.load(q + 2 * N, mask=omask, other=0.0, cache_modifier=".cg")
                if M > 3:
                    t3 += tl.load(q + 3 * N, mask=omask, other=0.0, cache_modifier=".cg")
                sk += 1
            if EPI:
                store_row(t0, OUT, RES, rn, omask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads,
                          c_sb, c_sh, c_ss, head, d0, HAS_RES, ROPE, HAS_BIAS, BLOCK_N, D)
            else:
                _store_rows(OUT + rn, N, t0, t1, t2, t3, omask, M, ety)
            tl.atomic_xchg(LOCK + pid_n, 0, sem="relaxed", scope="gpu")
    elif EPI:
        store_row(y0, OUT, RES, rn, omask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads,
                  c_sb, c_sh, c_ss, head, d0, HAS_RES, ROPE, HAS_BIAS, BLOCK_N, D)
    else:
        _store_rows(OUT + rn, N, y0, y1, y2, y3, omask, M, ety)


@triton.jit
def _store_rows(ptr, N, y0, y1, y2, y3, mask, M: tl.constexpr, ety: tl.constexpr):
    tl.store(ptr, y0.to(ety), mask=mask)
    if M > 1:
        tl.store(ptr + N, y1.to(ety), mask=mask)
    if M > 2:
        tl.store(ptr + 2 * N, y2.to(ety), mask=mask)
    if M > 3:
        tl.store(ptr + 3 * N, y3.to(ety), mask=mask)


_MAGIC = (0x4B000000, 0x49000000, 0x47000000, 0x45000000, 0x43000000)  # float bits of 2**23, 2**19, .., 2**7


def _launch(x, qw, s, z, group: int, n: int, cfg, shuffled: bool, int_zero: bool, pro: int = 0, norm_weight=None,
            eps: float = 1e-6, residual=None, rope=None, out=None):
    m, k = x.shape[0], qw.shape[1] * 8
    if not 1 <= m <= 4:
        raise ValueError(f"the W4A16 GEMV takes 1..4 rows, got {m}")
    if x.stride(1) != 1:
        x = x.contiguous()
    block_n, split_k, u, warps, *rest = cfg or DEFAULT
    depth = rest[0] if rest else 1
    ng = k // group
    per = triton.cdiv(triton.cdiv(ng, split_k), u) * u  # groups per split, a multiple of U
    split_k = triton.cdiv(ng, per)  # no empty splits
    out = torch.empty(m, n, dtype=x.dtype, device=x.device) if out is None else out
    grid = (triton.cdiv(n, block_n), split_k)
    pdl = use_pdl(x.device)
    if split_k > 1:
        part = torch.empty(split_k, m, n, dtype=torch.float32, device=x.device)
        lock = split_k_locks(x.device, grid[0])
    else:
        part = lock = out
    r_args, d, bias = rope_args(x, rope)
    _w4_gemv_kernel[grid](x, qw, s, z, out, part, lock, n, k // 8, ng, per, split_k, x.stride(0), *_MAGIC,
                          residual if residual is not None else out, norm_weight if norm_weight is not None else x,
                          eps, *r_args, M=m, BLOCK_N=block_n, U=u, WB=group // 8, EVEN_N=n % block_n == 0,
                          EVEN_K=per * split_k == ng, PARTIAL=split_k > 1, SHUFFLED=shuffled, INT_ZERO=int_zero,
                          DEPTH=depth, PDL=pdl, PRO=pro, HAS_RES=residual is not None, ROPE=rope is not None,
                          HAS_BIAS=bias is not None, D=d, KFULL=triton.next_power_of_2(k) if pro == 1 else 1,
                          num_warps=warps, launch_pdl=pdl)
    return out


def gemv(x, qw, s, z, group: int, n: int, cfg=None, int_zero: bool = True):
    """``y = x @ w_hat.T`` for ``x`` ``[M, K]`` (M in 1..4, bf16/fp16/fp32) with ``qw`` from
    :func:`~workbench.kernels.int4_layout.pack_int4_gemv`, ``s``/``z`` ``[K // G, N]`` (scale, zero; any float dtype). ``int_zero``:
    the zeros are integers (exact fast path); pass False otherwise. ``cfg = (BLOCK_N, SPLIT_K, U, num_warps)``.
    Returns ``[M, n]`` in x's dtype."""
    return _launch(x, qw, s, z, group, n, cfg, True, int_zero)


PROLOGUES = {"none": 0, "rmsnorm": 1, "swiglu": 2}  # as workbench.kernels.gemv.PROLOGUES


def gemv_fused(x, qw, s, z, group: int, n: int, prologue: str = "none", norm_weight=None, eps: float = 1e-6,
               residual=None, rope=None, cfg=None, int_zero: bool = True) -> torch.Tensor:
    """One-row ``f(x) @ w_hat.T (+ residual)``, or with ``rope`` the qkv projection with its bias, RoPE and
    KV-cache write, in one launch: the W4A16 counterpart of :func:`workbench.kernels.gemv.gemv` /
    :func:`~workbench.kernels.gemv.gemv_qkv_rope`, with the same prologues and roundings (HF order; see
    :mod:`workbench.kernels.gemv`): ``"rmsnorm"`` ``w_norm * bf16(x * rsqrt(mean(x^2) + eps))`` with the
    statistic in float32 over the whole row (each program reads it), ``"swiglu"`` ``silu(gate) * up`` of ``x =
    [gate | up]``; the product is rounded to x's dtype, then ``residual`` added (the last split of a split-K
    launch adds it). The weight loop is that of :func:`gemv`.

    Args: ``x`` ``[1, K]`` (``[1, 2K]`` for "swiglu"), bf16/fp16/fp32; ``qw``, ``s``, ``z``, ``group``, ``n``,
    ``cfg``, ``int_zero`` as :func:`gemv`; ``norm_weight`` ``[K]`` ("rmsnorm"); ``residual`` ``[1, n]`` or None;
    ``rope = (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv)`` as
    :func:`~workbench.kernels.gemv.gemv_qkv_rope` (prologue "rmsnorm", or "none" for an input normalized
    already; no residual; ``BLOCK_N`` is cut to a power of two dividing ``head_dim``). Returns ``[1, n]`` in x's dtype, or q ``[1, KV, G, D]`` with ``rope``.
    Raises ``ValueError`` on shapes or arguments it does not take."""
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue={prologue!r}: choose one of {sorted(PROLOGUES)}")
    k = qw.shape[1] * 8
    xk = 2 * k if prologue == "swiglu" else k
    if x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != xk:
        raise ValueError(f"x has shape {tuple(x.shape)}; the fused W4A16 GEMV takes one row of {xk} "
                         "(gemv takes up to 4 rows without fusions)")
    if prologue == "rmsnorm" and (norm_weight is None or norm_weight.numel() != k):
        raise ValueError(f"prologue 'rmsnorm' needs norm_weight of {k} elements")
    if residual is not None and (residual.numel() != n or rope is not None):
        raise ValueError(f"residual must have N={n} elements and cannot be combined with rope")
    cfg = tuple(cfg or DEFAULT)
    out = None
    if rope is not None:
        d, n_heads, n_kv = rope[5].shape[-1], rope[7], rope[8]
        if prologue == "swiglu" or n != (n_heads + 2 * n_kv) * d or n_kv < 1 or n_heads % n_kv or d % 4:
            raise ValueError(f"rope: want prologue 'rmsnorm' or 'none', n = (n_heads + 2 * n_kv) * head_dim = "
                             f"{(n_heads + 2 * n_kv) * d} (got {n}), n_heads a multiple of n_kv, head_dim % 4 == 0")
        cfg = (min(cfg[0], d & -d), *cfg[1:])  # a program's rows lie inside one head
        out = torch.empty(1, n_kv, n_heads // n_kv, d, dtype=x.dtype, device=x.device)
    y = _launch(x.contiguous(), qw, s, z, group, n, cfg, True, int_zero, PROLOGUES[prologue], norm_weight, eps,
                residual, rope, out)
    return y


def reference(x, qw, s, z, group: int, prologue: str = "none", norm_weight=None, eps: float = 1e-6,
              residual=None) -> torch.Tensor:
    """:func:`gemv_fused` (without ``rope``) in plain torch: the weight unpacked and dequantized in float32
    (``(q - zero) * scale``), then :func:`workbench.kernels.gemv.reference` (HF's order of operations and
    roundings). The tests' oracle; for ``rope`` compose with :func:`workbench.engine.ops.qkv_rope_cache`."""
    q = unpack_int4_gemv(qw, group).float()
    w_hat = (q - z.float().t().repeat_interleave(group, 1)) * s.float().t().repeat_interleave(group, 1)
    return _bf16_reference(x, w_hat, prologue, norm_weight, eps, residual)


def w4a16_gemv(x, qw, s, zs, group: int, n: int, cfg=None):
    """Legacy entry: ``qw`` from :func:`~workbench.kernels.int4_layout.pack_int4_words`, ``s`` and ``zs = zero * scale`` ``[K // G, N]``;
    the integer zero is recovered as ``round(zs / s)``."""
    z = torch.round(zs.float() / s.float())
    return _launch(x, qw, s, z, group, n, cfg, False, True)


# (BLOCK_N, SPLIT_K, U, num_warps, DEPTH): SPLIT_K is a launch argument (no extra compilation); a thread
# holds BLOCK_N * U * 4 / (32 * num_warps) rows of 4 words per step.
TILES = ((8, 4, 4, 2), (16, 4, 4, 1), (16, 4, 4, 2), (32, 4, 4, 1), (32, 2, 4, 1), (32, 2, 4, 2))
SEARCH_CONFIGS = [(bn, sk, u, w, d) for (bn, u, w, d) in TILES for sk in (1, 2, 4, 7)]  # benchmarks/bench_gemv.py
# What :func:`tune` tries by default: the configurations that won (or came within ~3%) on the H200 for the
# Qwen2-7B shapes at M = 1 and 4 in the full search above (benchmarks/bench_gemv.py); fewer configurations
# keep the first-use compile time of an engine short.
CONFIGS = [(16, 1, 4, 4, 1), (16, 1, 4, 4, 2), (32, 1, 4, 4, 1), (32, 1, 2, 4, 2), (32, 2, 2, 4, 1),
           (32, 4, 2, 4, 1), (32, 7, 2, 4, 2), (32, 7, 4, 4, 1)]
# Tiles whose one step covers a narrow weight's whole K range (or its split), tried besides CONFIGS: with DEPTH 1
# every weight word of a program is loaded before the kernel waits for its predecessor (programmatic dependent
# launch), so a small matmul (SmolLM2-135M: K = 576 / 1536, group 64) has no DRAM round trip after the wait.
# Kept only where a thread holds at most WORDS_MAX words of a step (the larger tiles spill on wide groups).
# Kept: the tiles within 8% of the best of any call in the two H200 probes (benchmarks/results/h200_2026-12-01d/
# probe_first_b40cf31/ and probe/; each tile is a compilation per call variant). (16, 1, 16, 4, 1) won every 135M
# call in the first, 30-45% under the best of CONFIGS (qkv 2.51 vs 4.12 us); in the second down took (8, 1, 32, 8, 1),
# 3.46 vs 4.29 us, and (8, 1, 16, 4, 1) came within 4% on the others; (32, 3, 4, 4, 1) won Qwen2-7B's o_proj.
PREFETCH_CONFIGS = [(16, 1, 16, 4, 1), (8, 1, 16, 4, 1), (8, 1, 32, 8, 1), (16, 1, 32, 4, 1), (32, 3, 4, 4, 1)]
WORDS_MAX = 32
DEFAULT = (16, 1, 4, 4, 2)  # used when a call is captured before its shape was tuned
_BEST: dict = {}


def _words_per_thread(cfg, group: int) -> int:
    block_n, _, u, warps, *_ = cfg
    return block_n * u * (group // 8) // (32 * warps)


def default_configs(k: int, group: int) -> list:
    """What :func:`tune` and :func:`tune_fused` try for a weight of ``k`` in-features: :data:`CONFIGS`, plus the
    :data:`PREFETCH_CONFIGS` whose step is no wider than the weight's K range (rounded up to a power of two of
    groups), whose steps over all splits (``U * SPLIT_K`` groups) cover at least a quarter of it (so a wide weight,
    e.g. Qwen2-7B's down_proj at K = 18,944, gets none: nothing to prefetch whole) and whose tile fits
    :data:`WORDS_MAX` words a thread."""
    ng = max(1, k // group)
    extra = [c for c in PREFETCH_CONFIGS if c[2] <= triton.next_power_of_2(ng) and 4 * c[1] * c[2] >= ng
             and _words_per_thread(c, group) <= WORDS_MAX]
    return CONFIGS + [c for c in extra if c not in CONFIGS]


def gemv_key(n: int, k: int, m: int, group: int, int_zero: bool, dtype: torch.dtype) -> tuple:
    """The :data:`_BEST` key of a plain :func:`gemv` call of ``m`` rows: the shape, the group size, the zero-point
    path and the activation dtype (a tile tuned for one group size may not fit another)."""
    return (n, k, m, group, bool(int_zero), dtype)


def tune(x, qw, s, z, group: int, n: int, int_zero: bool = True, configs=None, l2_bytes: float = 128e6,
         timings: dict | None = None):
    """Time every configuration in ``configs`` (default :func:`default_configs`) for this shape under CUDA-graph
    replay, with the weights rotated over enough copies (>= ``l2_bytes``) that L2 holds none of them, as
    in a decode step; cache the fastest in :data:`_BEST` under :func:`gemv_key` and return it. Call outside
    graph capture. ``timings`` (optional dict) receives ``{cfg: ms}``. Raises ``RuntimeError`` when no
    configuration compiles and gives the reference result (:func:`workbench.kernels.timing.fastest_config`)."""
    key = gemv_key(n, x.shape[1], x.shape[0], group, int_zero, x.dtype)
    if key in _BEST and timings is None:
        return _BEST[key]
    ws = weight_copies((qw, s, z), l2_bytes)
    ref = gemv(x, qw, s, z, group, n, (32, 1, 2, 4, 1), int_zero).float()  # the unsplit path, for a check
    best = fastest_config(configs or default_configs(x.shape[1], group),
                          lambda w, cfg: gemv(x, *w, group, n, cfg, int_zero), ws, ref,
                          timings, f"W4A16 GEMV (N={n}, K={x.shape[1]}, M={x.shape[0]})")
    _BEST[key] = best
    return best


def fused_key(n: int, k: int, group: int, int_zero: bool, dtype: torch.dtype, prologue: str, has_residual: bool,
              rope) -> tuple:
    """The :data:`_BEST` key of a one-row :func:`gemv_fused` call: :func:`gemv_key`'s fields and the fusions
    (``rope``: the rope tuple or None; its head_dim is part of the key)."""
    return ("fused", n, k, group, bool(int_zero), dtype, prologue, bool(has_residual),
            None if rope is None else int(rope[5].shape[-1]))


def tune_fused(x, qw, s, z, group: int, n: int, prologue: str = "none", norm_weight=None, eps: float = 1e-6,
               residual=None, rope=None, int_zero: bool = True, configs=None, l2_bytes: float = 128e6,
               timings: dict | None = None):
    """:func:`tune` for the one-row fused call itself (``gemv_fused`` with this prologue, residual and RoPE
    epilogue; arguments as there): the prologue's work per program (the RMSNorm statistic over the whole row,
    SiLU) and the epilogue change which tile is fastest, as the bf16 GEMV's tuner
    (:func:`workbench.kernels.gemv.tune`) times its fused calls. The RoPE variant writes the same k / v values
    into the caches' ``wpos`` column on every timed call (the engine tunes with its scratch column,
    :func:`workbench.engine.dispatch.build`); only q is checked against the reference, the k / v writes go through
    the same epilogue for every configuration. Cached in :data:`_BEST` under :func:`fused_key`; returns the
    configuration. Call outside graph capture; needs CUDA (or the interpreter, with ``timing.cuda_graph_ms``
    replaced). Raises ``RuntimeError`` when no configuration compiles and gives the reference result."""
    k = qw.shape[1] * 8
    key = fused_key(n, k, group, int_zero, x.dtype, prologue, residual is not None, rope)
    if key in _BEST and timings is None:
        return _BEST[key]
    ws = weight_copies((qw, s, z), l2_bytes)

    def run(w, cfg):
        return gemv_fused(x, *w, group, n, prologue, norm_weight, eps, residual, rope, cfg, int_zero)
    ref = run(ws[0], (32, 1, 2, 4, 1)).float()
    best = fastest_config(configs or default_configs(k, group), run, ws, ref, timings,
                          f"fused W4A16 GEMV (N={n}, K={k}, {prologue}{', residual' if residual is not None else ''}"
                          f"{', rope' if rope is not None else ''})")
    _BEST[key] = best
    return best
