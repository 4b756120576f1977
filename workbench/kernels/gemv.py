"""Triton bf16 GEMV for one-row decode steps (M = 1), with the layer's small operations fused in.

``y = f(x) @ W.T (+ residual)`` for ``W`` ``[N, K]`` (row-major, the ``nn.Linear`` layout) where the
prologue ``f`` is one of

* ``"none"``: ``f(x) = x``, ``x`` ``[1, K]``;
* ``"rmsnorm"``: ``f(x) = w_norm * RMSNorm(x)`` with HF ``LlamaRMSNorm`` rounding (float32 statistics
  over the whole row, cast to the activation dtype, then times the weight; Zhang & Sennrich 2019,
  arXiv 1910.07467, eq. 4), ``x`` ``[1, K]``. Every program reads the whole row (``K`` x 2 bytes, from
  L2) to compute the statistic; this replaces a separate RMSNorm kernel and its launch gap;
* ``"swiglu"``: ``f(gu) = silu(gate) * up`` (Shazeer 2020, arXiv 2002.05202, eq. 6) of ``gu``
  ``[1, 2K]`` = ``[gate | up]``, rounded like HF (``silu`` output cast, then the product cast);

and the epilogue optionally adds ``residual`` ``[1, N]`` after rounding the product to the output dtype
(HF's ``hidden = residual + o_proj(...)``), so the kernel writes the next residual stream directly.

Why: the cuBLAS kernels torch picks for these shapes at M = 1 on the H200 launch too few CTAs for 132 SMs
(gate_up 99 tiles of 384 rows, qkv 72, o 56 + a split-K reduce kernel) and the non-GEMM kernels of a
layer (two add+RMSNorm, SiLU*up, split-K reduces) cost 10 us per layer plus their launch gaps
(``benchmarks/RESULTS.md``, round 2 profile). Here one program = ``BLOCK_N`` rows x ``PER`` columns
(split-K), the loop streams ``[BLOCK_N, BLOCK_K]`` tiles, accumulates in float32 elementwise and reduces
once at the end; split-K partials are summed by the last split to arrive (device ticket,
:mod:`workbench.kernels.common`), so there is no second kernel. Launch configurations are timed per
shape under CUDA-graph replay with cold L2 (:func:`tune`).

The split-K ticket counters are one buffer per device, shared with the other kernels
(:func:`workbench.kernels.common.split_k_locks`): one stream at a time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import interpret, rope_args, rope_rows, split_k_locks, store_row, use_pdl
from workbench.kernels.timing import fastest_config

PROLOGUES = {"none": 0, "rmsnorm": 1, "swiglu": 2}


@triton.jit
def _prologue(X, NW, offs_k, kmask, K, inv, PRO: tl.constexpr, EVEN_K: tl.constexpr):
    """The activations ``f(x)[offs_k]`` as float32 (rounded to X's dtype where HF rounds)."""
    dt = X.dtype.element_ty
    if EVEN_K:
        x = tl.load(X + offs_k)
    else:
        x = tl.load(X + offs_k, mask=kmask, other=0.0)
    if PRO == 1:
        if EVEN_K:
            nw = tl.load(NW + offs_k)
        else:
            nw = tl.load(NW + offs_k, mask=kmask, other=0.0)
        y = (x.to(tl.float32) * inv).to(dt)
        x = (nw.to(tl.float32) * y.to(tl.float32)).to(dt)
    elif PRO == 2:
        if EVEN_K:
            u = tl.load(X + K + offs_k)
        else:
            u = tl.load(X + K + offs_k, mask=kmask, other=0.0)
        g = x.to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(dt)
        x = (act.to(tl.float32) * u.to(tl.float32)).to(dt)
    return x.to(tl.float32)


@triton.jit
def _load_w(w_rows, nmask, kk, K, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr):
    """The weight tile ``W[rows, kk:kk+BLOCK_K]`` (masked past N and K)."""
    offs_k = kk + tl.arange(0, BLOCK_K)
    if EVEN_K:
        if EVEN_N:
            return tl.load(w_rows + offs_k[None, :])
        return tl.load(w_rows + offs_k[None, :], mask=nmask[:, None], other=0.0)
    return tl.load(w_rows + offs_k[None, :], mask=nmask[:, None] & (offs_k < K)[None, :], other=0.0)


@triton.jit
def _fma(w, X, NW, kk, K, inv, acc, BLOCK_K: tl.constexpr, PRO: tl.constexpr, EVEN_K: tl.constexpr):
    """``acc += w * f(x)[kk:kk+BLOCK_K]`` (float32, elementwise)."""
    offs_k = kk + tl.arange(0, BLOCK_K)
    x = _prologue(X, NW, offs_k, offs_k < K, K, inv, PRO, EVEN_K)
    return acc + w.to(tl.float32) * x[None, :]


@triton.jit
def _gemv_kernel(X, W, OUT, P, LOCK, RES, NW, N, K, PER, SPLIT_K, eps,
                 BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh, c_ss,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, KFULL: tl.constexpr, PRO: tl.constexpr,
                 HAS_RES: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, PARTIAL: tl.constexpr,
                 INTERPRET: tl.constexpr, PDL: tl.constexpr, ROPE: tl.constexpr, HAS_BIAS: tl.constexpr,
                 D: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    if ROPE:  # rows: matching dims of both halves of one head (common.rope_rows)
        rn, head, d0 = rope_rows(pid_n, BLOCK_N, D)
    else:
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        head = 0
        d0 = 0
    nmask = rn < N
    w_rows = W + rn.to(tl.int64)[:, None] * K
    k_begin = pid_k * PER
    # programmatic dependent launch (Hopper): this grid may start while the previous kernel finishes;
    # the first weight tile (which no kernel writes) is loaded before waiting for it, every read of an
    # activation and every write comes after the wait
    w0 = _load_w(w_rows, nmask, k_begin, K, BLOCK_K, EVEN_N, EVEN_K)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    inv = 0.0
    if PRO == 1:
        # RMSNorm statistic over the whole row (every program; K x 2 bytes from L2)
        kf = tl.arange(0, KFULL)
        xf = tl.load(X + kf, mask=kf < K, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / K + eps)
    acc = _fma(w0, X, NW, k_begin, K, inv, tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32), BLOCK_K, PRO, EVEN_K)
    if INTERPRET:  # Triton 3.6's interpreter cannot take runtime loop bounds under numpy 2 (__index__)
        kk = k_begin + BLOCK_K
        while kk < k_begin + PER:
            acc = _fma(_load_w(w_rows, nmask, kk, K, BLOCK_K, EVEN_N, EVEN_K), X, NW, kk, K, inv, acc, BLOCK_K,
                       PRO, EVEN_K)
            kk += BLOCK_K
    else:  # a `for` loop, so that Triton software-pipelines the weight loads (num_stages)
        for kk in range(k_begin + BLOCK_K, k_begin + PER, BLOCK_K):
            acc = _fma(_load_w(w_rows, nmask, kk, K, BLOCK_K, EVEN_N, EVEN_K), X, NW, kk, K, inv, acc, BLOCK_K,
                       PRO, EVEN_K)
    y = tl.sum(acc, axis=1)
    if PARTIAL:
        # split-K in one kernel: store the float32 partial, take a ticket; the last split sums them
        tl.store(P + pid_k * N + rn, y, mask=nmask)
        tl.debug_barrier()
        ticket = tl.atomic_add(LOCK + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            t = tl.zeros([BLOCK_N], dtype=tl.float32)
            sk = 0
            while sk < SPLIT_K:
                t += tl.load(P + sk * N + rn, mask=nmask, other=0.0, cache_modifier=".cg")
                sk += 1
            store_row(t, OUT, RES, rn, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads,
                      c_sb, c_sh, c_ss, head, d0, HAS_RES, ROPE, HAS_BIAS, BLOCK_N, D)
            tl.atomic_xchg(LOCK + pid_n, 0, sem="relaxed", scope="gpu")
    else:
        store_row(y, OUT, RES, rn, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads,
                  c_sb, c_sh, c_ss, head, d0, HAS_RES, ROPE, HAS_BIAS, BLOCK_N, D)


def gemv(x: torch.Tensor, w: torch.Tensor, prologue: str = "none", norm_weight: torch.Tensor | None = None,
         eps: float = 1e-6, residual: torch.Tensor | None = None, cfg=None) -> torch.Tensor:
    """``[1, N] = f(x) @ w.T (+ residual)`` (see the module docstring for ``f``).

    Args: ``x`` ``[1, K]`` (``[1, 2K]`` for ``"swiglu"``), bf16/fp16/fp32, contiguous; ``w`` ``[N, K]``
    same dtype, contiguous; ``norm_weight`` ``[K]`` (``"rmsnorm"`` only); ``residual`` ``[1, N]`` or None;
    ``cfg = (BLOCK_N, BLOCK_K, SPLIT_K, num_warps[, num_stages])`` (default: the tuned one for this shape, else
    :data:`DEFAULT`). Returns ``[1, N]`` in x's dtype. Raises ``ValueError`` on shapes it does not take
    (more than one row, K mismatch, unknown prologue)."""
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue={prologue!r}: choose one of {sorted(PROLOGUES)}")
    n, k = w.shape
    xk = 2 * k if prologue == "swiglu" else k
    if x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != xk:
        raise ValueError(f"x has shape {tuple(x.shape)}; this GEMV takes one row of {xk} "
                         f"(use torch.matmul for more rows)")
    if prologue == "rmsnorm" and (norm_weight is None or norm_weight.numel() != k):
        raise ValueError(f"prologue 'rmsnorm' needs norm_weight of {k} elements")
    if residual is not None and residual.numel() != n:
        raise ValueError(f"residual has {residual.numel()} elements, want N={n}")
    if not w.is_contiguous():
        raise ValueError("w must be contiguous ([N, K] row-major, the nn.Linear layout): pass w.contiguous()")
    x = x.contiguous()
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    _launch(x, w, out, norm_weight, eps, residual, PROLOGUES[prologue],
            cfg or _BEST.get(_key(n, k, prologue, residual is not None, x.dtype), DEFAULT))
    return out


def _launch(x, w, out, norm_weight, eps, residual, pro: int, cfg, rope=None):
    n, k = w.shape
    block_n, block_k, split_k, warps, *rest = cfg
    stages = rest[0] if rest else 1
    pdl = use_pdl(x.device)
    steps = triton.cdiv(k, block_k)
    per = triton.cdiv(steps, split_k) * block_k  # columns per split, a multiple of BLOCK_K
    split_k = triton.cdiv(k, per)  # no empty splits
    grid = (triton.cdiv(n, block_n), split_k)
    if split_k > 1:
        part = torch.empty(split_k, n, dtype=torch.float32, device=x.device)
        lock = split_k_locks(x.device, grid[0])
    else:
        part = lock = out
    r_args, d, bias = rope_args(x, rope)
    _gemv_kernel[grid](x, w, out, part, lock, residual if residual is not None else out,
                       norm_weight if norm_weight is not None else x, n, k, per, split_k, eps, *r_args,
                       BLOCK_N=block_n, BLOCK_K=block_k, KFULL=triton.next_power_of_2(k),
                       PRO=pro, HAS_RES=residual is not None, EVEN_N=n % block_n == 0,
                       EVEN_K=k % block_k == 0 and per * split_k == k, PARTIAL=split_k > 1,
                       INTERPRET=interpret(), PDL=pdl, ROPE=rope is not None, HAS_BIAS=bias is not None, D=d,
                       num_warps=warps, num_stages=stages, launch_pdl=pdl)


def gemv_qkv_rope(x, w, norm_weight, eps, bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads: int, n_kv: int,
                  cfg=None) -> torch.Tensor:
    """One token's attention input in one launch: ``qkv = RMSNorm(x) @ w.T + bias``, RoPE on q and k
    (HF ``rotate_half`` layout), k and v written into the caches; the fused form of ``gemv(...,
    "rmsnorm")`` followed by :func:`workbench.kernels.fused.qkv_rope_cache` for ``B = T = 1``.

    Args: ``x`` ``[1, hidden]``; ``w`` ``[(H + 2*KV) * D, hidden]``; ``norm_weight`` ``[hidden]``;
    ``bias`` ``[(H + 2*KV) * D]`` or None; ``cos``/``sin`` ``[S_cache, D]`` float32; ``wpos`` ``[1]`` int64
    (write position); ``slots`` ``[1]`` int64; ``k_cache``/``v_cache`` one layer ``[max_batch, KV,
    S_cache, D]`` (written in place). Returns q ``[1, KV, G, D]`` (G = H // KV), as ``qkv_rope_cache``.
    ``cfg``: as :func:`gemv`, with ``BLOCK_N`` an even divisor of D. Raises ``ValueError`` otherwise."""
    n, k = w.shape
    d = k_cache.shape[-1]
    if x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != k or n != (n_heads + 2 * n_kv) * d:
        raise ValueError(f"x {tuple(x.shape)}, w {tuple(w.shape)}: want one row of {k} and "
                         f"(n_heads + 2 * n_kv) * head_dim = {(n_heads + 2 * n_kv) * d} rows")
    if not w.is_contiguous():
        raise ValueError("w must be contiguous ([N, K] row-major, the nn.Linear layout): pass w.contiguous()")
    if n_kv < 1 or n_heads % n_kv:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv={n_kv}")
    cfg = cfg or _BEST.get(_key(n, k, f"rmsnorm+rope{d}", False, x.dtype)) or _rope_cfg(DEFAULT, d)
    bn = cfg[0]
    if bn < 2 or bn & (bn - 1) or d % bn:
        raise ValueError(f"BLOCK_N={bn} must be a power of two >= 2 dividing head_dim={d}")
    q = torch.empty(1, n_kv, n_heads // n_kv, d, dtype=x.dtype, device=x.device)
    _launch(x.contiguous(), w, q, norm_weight, eps, None, PROLOGUES["rmsnorm"], cfg,
            (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv))
    return q


def _rope_cfg(cfg, d: int):
    """``cfg`` with BLOCK_N cut to the largest power of two dividing ``d`` (the rows of one program must
    lie inside one head)."""
    return (min(cfg[0], d & -d), *cfg[1:])


def reference(x, w, prologue="none", norm_weight=None, eps=1e-6, residual=None) -> torch.Tensor:
    """The same function in plain torch, HF's order of operations and roundings (norm/activation in x's
    dtype, matmul accumulated in float32 and rounded once, then the residual added in x's dtype); the
    tests' oracle and the benchmarks' error reference (run in float32)."""
    if prologue == "rmsnorm":
        xf = x.float()
        x = norm_weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    elif prologue == "swiglu":
        k = x.shape[-1] // 2
        x = torch.nn.functional.silu(x[:, :k]) * x[:, k:]
    y = (x.float() @ w.float().t()).to(x.dtype)  # float32 accumulation, one rounding (as cuBLAS)
    return y if residual is None else residual.view_as(y) + y


# (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages); SPLIT_K is a launch argument (no extra compilation)
TILES = ((4, 512, 4), (8, 256, 4), (8, 512, 4), (16, 256, 4), (16, 512, 8), (32, 256, 8))
SEARCH_CONFIGS = [(bn, bk, sk, nw, st) for bn, bk, nw in TILES for sk in (1, 2, 4) for st in (1, 2, 3)]
# What :func:`tune` tries by default (an engine tunes its five calls when it is built): the winners, and
# those within ~2%, of the full search over SEARCH_CONFIGS on the H200 for the Qwen2-7B calls
# (benchmarks/bench_gemv_bf16.py; num_stages changed nothing measurable, so 1), plus small-tile split-K
# variants for narrow models; fewer configurations keep the first build's compile time short.
CONFIGS = [(4, 512, 1, 4, 1), (8, 512, 1, 4, 1), (16, 512, 1, 8, 1), (16, 256, 1, 4, 1), (32, 256, 1, 8, 1),
           (8, 512, 2, 4, 1), (16, 256, 2, 4, 1), (16, 256, 4, 4, 1), (8, 256, 4, 4, 1), (4, 512, 4, 4, 1)]
# Tiles whose one or two steps cover the whole K range of a narrow weight, tried besides CONFIGS where BLOCK_K lies
# in [K / 2, next_pow2(K)] (:func:`default_configs`): the first step's weights are loaded before the kernel waits
# for its predecessor (programmatic dependent launch). On the H200 (benchmarks/results/h200_2026-12-01d/
# probe_first_b40cf31/) they took the SmolLM2-135M calls from 1.79-2.82 us (CONFIGS) to 1.47-2.74 us.
# Kept: those within 8% of the best in either probe (.../probe/ too; no 2048-column tile was).
WIDE_CONFIGS = [(8, 1024, 1, 4, 1), (16, 1024, 1, 8, 1), (16, 1024, 2, 8, 1)]
DEFAULT = (8, 512, 1, 4, 1)
_BEST: dict = {}


def default_configs(k: int) -> list:
    """What :func:`tune` tries for a weight of ``k`` in-features: :data:`CONFIGS` plus the :data:`WIDE_CONFIGS`
    with ``k / 2 <= BLOCK_K <= next_pow2(k)``."""
    wide = [c for c in WIDE_CONFIGS if k / 2 <= c[1] <= triton.next_power_of_2(k)]
    return CONFIGS + [c for c in wide if c not in CONFIGS]


def _key(n, k, prologue, has_res, dtype):
    return (n, k, prologue, bool(has_res), dtype)


def tune(x, w, prologue="none", norm_weight=None, eps=1e-6, residual=None, configs=None,
         l2_bytes: float = 128e6, timings: dict | None = None, rope: tuple | None = None):
    """Time ``configs`` (default :func:`default_configs`) for this call under CUDA-graph replay with the weight
    rotated over enough copies (>= ``l2_bytes``) that L2 holds none of it; cache the fastest in
    :data:`_BEST` and return it. Variants whose result differs from the unsplit default by more than
    1% (norm) are skipped. ``rope = (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv)``
    tunes :func:`gemv_qkv_rope` instead (``prologue`` is then "rmsnorm"). Call outside graph capture;
    needs CUDA."""
    n, k = w.shape
    key = _key(n, k, f"rmsnorm+rope{rope[5].shape[-1]}" if rope else prologue, residual is not None, x.dtype)
    if key in _BEST and timings is None:
        return _BEST[key]
    copies = min(64, max(1, -(-int(l2_bytes) // w.nbytes)))  # (small models: L2 may then hold them)
    ws = [w] + [w.clone() for _ in range(copies - 1)]
    configs = configs or default_configs(k)
    if rope is not None:
        d = rope[5].shape[-1]
        configs = [c for c in configs if c[0] >= 2 and not c[0] & (c[0] - 1) and d % c[0] == 0]

        def run(wi, cfg):
            return gemv_qkv_rope(x, wi, norm_weight, eps, *rope, cfg=cfg)
        ref = run(w, _rope_cfg(DEFAULT, d)).float()
    else:
        def run(wi, cfg):
            return gemv(x, wi, prologue, norm_weight, eps, residual, cfg)
        ref = run(w, DEFAULT).float()
    best = fastest_config(configs, run, ws, ref, timings, f"bf16 GEMV (N={n}, K={k}, {key[2]})")
    _BEST[key] = best
    return best
