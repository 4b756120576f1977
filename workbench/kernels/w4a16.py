"""Triton W4A16 GEMV for decode (M <= 4 rows): ``y = x @ w_hat.T`` with group-wise INT4 weights.

Layout: ``qw`` ``[N, K // 8]`` int32, word ``j`` of row ``n`` holds elements ``8j .. 8j+7`` (element
``8j + i`` in bits ``4i .. 4i+3``); ``s`` and ``zs = zero * scale`` ``[K // G, N]`` float32.
Per group: ``sum_k w_hat[n, k] x[k] = s[n] * sum_k q[n, k] x[k] - zs[n] * sum_k x[k]``, so the inner
loop only converts and multiplies the 4-bit values (one FMA per weight).

Split-K: each of ``SPLIT_K`` programs along axis 1 handles a range of groups and writes an fp32
partial to ``[SPLIT_K, M, N]``; a second kernel sums them into bf16. ``SPLIT_K == 1`` stores directly.
The launch configuration is chosen per ``(N, K, M)`` by timing (:func:`tune`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _w4_gemv_kernel(X, QW, S, ZS, OUT, P, N, K, N_GROUPS: tl.constexpr, PER: tl.constexpr, M: tl.constexpr, BLOCK_N: tl.constexpr,
                    SPLIT_K: tl.constexpr, GROUP: tl.constexpr, GPI: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    W8: tl.constexpr = GROUP // 8
    n_offs = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n_offs < N
    j = tl.arange(0, W8)
    m_offs = tl.arange(0, M)
    g0 = pid_k * PER
    kw = K // 8
    acc = tl.zeros([M, BLOCK_N], dtype=tl.float32)
    for gb in range(0, PER, GPI):
        for gg in tl.static_range(GPI):
            g = g0 + gb + gg
            ok = g < N_GROUPS
            qw = tl.load(QW + n_offs[:, None].to(tl.int64) * kw + g * W8 + j[None, :],
                         mask=nmask[:, None] & ok, other=0)  # [BLOCK_N, W8]
            s = tl.load(S + g * N + n_offs, mask=nmask & ok, other=0.0)
            zs = tl.load(ZS + g * N + n_offs, mask=nmask & ok, other=0.0)
            part = tl.zeros([M, BLOCK_N], dtype=tl.float32)
            xsum = tl.zeros([M], dtype=tl.float32)
            for i in tl.static_range(8):
                xi = tl.load(X + m_offs[:, None] * K + g * GROUP + j[None, :] * 8 + i,
                             mask=ok, other=0.0).to(tl.float32)  # [M, W8]
                wi = ((qw >> (4 * i)) & 15).to(tl.float32)  # [BLOCK_N, W8]
                part += tl.sum(wi[None, :, :] * xi[:, None, :], axis=2)
                xsum += tl.sum(xi, axis=1)
            acc += s[None, :] * part - zs[None, :] * xsum[:, None]
    if SPLIT_K == 1:
        tl.store(OUT + m_offs[:, None] * N + n_offs[None, :], acc.to(OUT.dtype.element_ty), mask=nmask[None, :])
    else:
        tl.store(P + (pid_k * M + m_offs[:, None]) * N + n_offs[None, :], acc, mask=nmask[None, :])


@triton.jit
def _sum_splits_kernel(P, OUT, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for sk in tl.static_range(SPLIT_K):
        acc += tl.load(P + sk * MN + offs, mask=mask, other=0.0)
    tl.store(OUT + offs, acc.to(OUT.dtype.element_ty), mask=mask)


def pack_int4_words(q: torch.Tensor) -> torch.Tensor:
    """``q`` ``[N, K]`` uint8 (0..15) -> ``[N, K // 8]`` int32, element ``8j + i`` in bits ``4i..4i+3``."""
    n, k = q.shape
    q = q.to(torch.int32).view(n, k // 8, 8)
    shifts = (torch.arange(8, device=q.device, dtype=torch.int32) * 4)
    return (q << shifts).sum(-1, dtype=torch.int32)


def w4a16_gemv(x, qw, s, zs, group: int, n: int, cfg=(64, 4, 1, 4)):
    """``x`` ``[M, K]`` bf16/fp16 (M in 1..4, padded to a power of two internally) -> ``[M, n]``.
    ``cfg = (BLOCK_N, SPLIT_K, GPI, num_warps)``."""
    m, k = x.shape
    mp = triton.next_power_of_2(m)
    if mp != m:
        x = torch.cat([x, x.new_zeros(mp - m, k)])
    block_n, split_k, gpi, warps = cfg
    out = torch.empty(mp, n, dtype=x.dtype, device=x.device)
    p = torch.empty(split_k, mp, n, dtype=torch.float32, device=x.device) if split_k > 1 else out
    grid = (triton.cdiv(n, block_n), split_k)
    n_groups = k // group
    per = triton.cdiv(n_groups, split_k * gpi) * gpi  # groups per split, a multiple of GPI
    _w4_gemv_kernel[grid](x.contiguous(), qw, s, zs, out, p, n, k, N_GROUPS=n_groups, PER=per, M=mp, BLOCK_N=block_n, SPLIT_K=split_k,
                          GROUP=group, GPI=gpi, num_warps=warps)
    if split_k > 1:
        _sum_splits_kernel[(triton.cdiv(mp * n, 1024),)](p, out, mp * n, SPLIT_K=split_k, BLOCK=1024, num_warps=4)
    return out[:m]


CONFIGS = [(bn, sk, gpi, 4) for bn in (64, 32, 128) for sk in (1, 2, 4) for gpi in (1, 2)]  # (BLOCK_N, SPLIT_K, GPI, warps)
_BEST: dict = {}


def _graph_ms(fn, inner: int = 10) -> float:
    """ms per call of ``fn`` replayed from a CUDA graph of ``inner`` calls (median of 5 replays)."""
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    return sorted(ts)[2]


def tune(x, qw, s, zs, group: int, n: int):
    """Time every configuration in :data:`CONFIGS` for this shape (graph replay, so launch gaps are
    those of a decode graph) and cache the fastest; returns it. Call outside graph capture."""
    key = (n, x.shape[1], triton.next_power_of_2(x.shape[0]))
    if key in _BEST:
        return _BEST[key]
    best, best_t = CONFIGS[0], float("inf")
    for cfg in CONFIGS:
        try:
            t = _graph_ms(lambda cfg=cfg: w4a16_gemv(x, qw, s, zs, group, n, cfg))
        except Exception:  # noqa: BLE001, S112 - a configuration that fails to compile or launch is skipped
            continue
        if t < best_t:
            best, best_t = cfg, t
    _BEST[key] = best
    return best
