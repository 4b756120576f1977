"""Decode attention over the static KV cache that reads only each row's valid columns (Triton).

The engine's small steps (decode ``T = 1``, speculative verify ``T = k + 1``) replay CUDA graphs, so
their shapes are fixed at capture. With ``F.scaled_dot_product_attention`` that forces an additive
mask over the whole cache row (``S_cache`` columns) and a cost that grows with ``max_seq`` instead of
the real context. This kernel takes each query token's position from a *device* tensor: one captured
graph serves every length, and a program never loads a K/V column at or beyond its row's length.

Algorithm: split-KV "Flash-Decoding" (Dao, Haziza, Massa, Sizov 2023; the same two-pass idea as vLLM's
paged-attention v2). Grid ``(B, KV, splits)``: program ``(b, h, j)`` takes the ``G*T`` query rows that
share KV head ``h`` (grouped-query attention, Ainslie et al. 2023: K/V loaded once, never repeated),
streams its chunk of columns ``[j*c, (j+1)*c) ∩ [0, n_keys)`` in blocks of ``BLOCK_S`` with the online
softmax of FlashAttention (Dao et al. 2022, alg. 1; fp32 running max ``m``, sum ``l``, accumulator),
and writes ``(acc, m, l)``; a second kernel merges the splits,
``o = sum_j 2^(m_j - M) acc_j / sum_j 2^(m_j - M) l_j`` with ``M = max_j m_j``. The chunk size
``c = ceil(n_keys / splits)`` (rounded up to ``BLOCK_S``) is computed on the device, so short contexts
use few splits and long ones spread over all of them. With one split the first kernel normalises and
writes the output directly.

Masking: query row ``m = g*T + t`` of batch row ``b`` sees key ``s`` iff ``s <= qpos[b, t]`` (causal
within the T new tokens, whose keys are already in the cache). The caller must give every query a
position ``>= 0`` whose keys ``0..qpos`` are finite (the engine clamps padded queries to the row's last
valid position), so every row has at least one visible key and no NaN/inf appears.

:func:`decode_attention_ref` is the plain-torch reference the tests compare to.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from workbench.kernels.common import sm_count, use_pdl

_LOG2E = 1.4426950408889634


@triton.jit
def _attend_block(q, kbase, vbase, qpos, s0, end, sk_s, qk_scale, m_i, l_i, acc,
                  BLOCK_S: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):
    """One online-softmax update over key columns ``[s0, s0 + BLOCK_S) ∩ [0, end)``."""
    dd = tl.arange(0, D)
    cols = s0 + tl.arange(0, BLOCK_S)
    cmask = cols < end
    k = tl.load(kbase + cols[:, None] * sk_s + dd[None, :], mask=cmask[:, None], other=0.0)  # [BLOCK_S, D]
    v = tl.load(vbase + cols[:, None] * sk_s + dd[None, :], mask=cmask[:, None], other=0.0)
    if IEEE:
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        qk = tl.dot(q, tl.trans(k))
    vis = (cols[None, :] <= qpos[:, None]) & cmask[None, :]
    qk = tl.where(vis, qk * qk_scale, float("-inf"))  # log2 domain: scale * log2(e) folded in
    m_new = tl.maximum(m_i, tl.max(qk, axis=1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet stays at 0
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(qk - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if IEEE:
        pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _split_kernel(Q, K, V, SLOTS, QPOS, O, PO, PM, PL,
                  T, M, qk_scale,
                  sq_b, sq_h, sq_m, sk_b, sk_h, sk_s, so_b, so_h, so_g, so_t,
                  NUM_SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr,
                  D: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # programmatic dependent launch: wait for the previous kernel before any read or write
        gdc_launch_dependents()
        gdc_wait()
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    j = tl.program_id(2)
    rows = tl.arange(0, BLOCK_M)
    rmask = rows < M
    dd = tl.arange(0, D)
    qpos = tl.load(QPOS + b * T + rows % T, mask=rmask, other=-1).to(tl.int32)  # [BLOCK_M]
    n_keys = tl.max(qpos, axis=0) + 1  # columns [0, n_keys) cover every query of the row
    chunk = tl.cdiv(tl.cdiv(n_keys, NUM_SPLITS), BLOCK_S) * BLOCK_S
    start = j * chunk
    end = tl.minimum(start + chunk, n_keys)
    slot = tl.load(SLOTS + b).to(tl.int64)
    q = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_m + dd[None, :], mask=rmask[:, None], other=0.0)
    kbase = K + slot * sk_b + h * sk_h
    vbase = V + slot * sk_b + h * sk_h
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if INTERPRET:  # Triton 3.6's interpreter cannot take tensor loop bounds under numpy 2 (__index__)
        s0 = start
        while s0 < end:
            m_i, l_i, acc = _attend_block(q, kbase, vbase, qpos, s0, end, sk_s, qk_scale, m_i, l_i, acc,
                                          BLOCK_S, D, IEEE)
            s0 += BLOCK_S
    else:
        for s0 in range(start, end, BLOCK_S):
            m_i, l_i, acc = _attend_block(q, kbase, vbase, qpos, s0, end, sk_s, qk_scale, m_i, l_i, acc,
                                          BLOCK_S, D, IEEE)
    if NUM_SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # l_i = 0 only in the padding rows >= M
        orow = (rows // T) * so_g + (rows % T) * so_t  # query row g * T + t: head g of the group, token t
        tl.store(O + b * so_b + h * so_h + orow[:, None] + dd[None, :], out.to(O.dtype.element_ty),
                 mask=rmask[:, None])
    else:
        base = ((b * tl.num_programs(1) + h) * NUM_SPLITS + j) * M  # partials [B, KV, splits, M, (D)]
        tl.store(PO + (base + rows[:, None]) * D + dd[None, :], acc, mask=rmask[:, None])
        tl.store(PM + base + rows, m_i, mask=rmask)
        tl.store(PL + base + rows, l_i, mask=rmask)


@triton.jit
def _combine_kernel(PO, PM, PL, O, QPOS, T, KV, M, so_b, so_h, so_g, so_t,
                    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, BLOCK_S: tl.constexpr,
                    T_PAD: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    bh = tl.program_id(0).to(tl.int64)  # b * KV + h
    r = tl.program_id(1).to(tl.int64)  # query row
    b = bh // KV
    tt = tl.arange(0, T_PAD)
    n_keys = tl.max(tl.load(QPOS + b * T + tt, mask=tt < T, other=-1).to(tl.int32), axis=0) + 1
    chunk = tl.cdiv(tl.cdiv(n_keys, NUM_SPLITS), BLOCK_S) * BLOCK_S  # as in _split_kernel
    sp = tl.arange(0, SPLITS_PAD)
    smask = sp < tl.cdiv(n_keys, chunk)  # only splits that saw columns
    dd = tl.arange(0, D)
    idx = (bh * NUM_SPLITS + sp) * M + r  # [SPLITS_PAD]
    m = tl.load(PM + idx, mask=smask, other=float("-inf"))
    l_ = tl.load(PL + idx, mask=smask, other=0.0)
    mx = tl.max(m, axis=0)  # finite: the split holding column 0 always has a visible key
    w = tl.exp2(m - mx)  # splits without a visible key for this row (m = -inf) weigh 0
    acc = tl.load(PO + idx[:, None] * D + dd[None, :], mask=smask[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l_ * w, axis=0)
    tl.store(O + b * so_b + (bh % KV) * so_h + (r // T) * so_g + (r % T) * so_t + dd, out.to(O.dtype.element_ty))


@functools.cache
def _sm_count() -> int:
    return sm_count(torch.cuda.current_device()) if torch.cuda.is_available() else 132  # CPU: an H200's count


def num_splits_for(batch: int, n_kv: int, s_cache: int, block_s: int = 32, target: int | None = None) -> int:
    """Splits per (row, KV head): enough programs to fill the GPU (``target``, default two per SM)
    for small batches, 1 when ``batch * n_kv`` already does; at most 32 (on the H200, Qwen2-7B shapes
    at batch 1: 32 splits 5.3 us vs 64 splits 5.7 us at context 1024, the merge reading fewer partials)."""
    if target is None:
        target = 2 * _sm_count()
    return max(1, min(triton.cdiv(s_cache, block_s), triton.cdiv(target, batch * n_kv), 32))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                     qpos: torch.Tensor, scale: float | None = None, num_splits: int | None = None,
                     block_s: int = 32, num_warps: int = 4, layout: str = "heads") -> torch.Tensor:
    """Attention of the new tokens of ``B`` rows over their cached keys, reading only valid columns.

    Args: ``q`` ``[B, KV, G*T, D]`` (row ``g*T + t`` = query head ``kv*G + g`` of token t, as
    :func:`workbench.engine.ops.qkv_rope_cache` returns it; last dim contiguous); ``k_cache``/``v_cache``
    one layer ``[max_batch, KV, S_cache, D]`` (same strides); ``slots`` ``[B]`` int cache row of each
    batch row; ``qpos`` ``[B, T]`` int (device tensor, contiguous): query token t of row b sees keys
    ``s <= qpos[b, t]`` (must be ``>= 0``). ``scale`` defaults to ``1/sqrt(D)``; ``num_splits`` to
    :func:`num_splits_for`. ``D`` must be a power of two >= 16. Returns, in q's dtype, ``[B, KV, G*T, D]``
    (``layout="heads"``), or with ``layout="tokens"`` the same values as ``[B*T, KV*G*D]`` (row ``b*T + t``,
    columns of query head ``kv*G + g``): the input of the o projection, written in place by the kernels, so that
    a verify step (``T > 1``) needs no permuting copy (a torch kernel between two PDL-launched ones).

    Raises ``ValueError`` for a head_dim that is not a power of two >= 16, a non-contiguous last dim, K/V
    strides that differ, or an unknown ``layout``.
    """
    b, kvh, m, d = q.shape
    t = qpos.shape[1]
    if d & (d - 1) or d < 16:
        raise ValueError(f"head_dim {d} must be a power of two >= 16")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError("q, k_cache, v_cache need a contiguous last dim and k/v the same strides")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    splits = num_splits or num_splits_for(b, kvh, k_cache.shape[2], block_s)
    qpos = qpos.contiguous()
    if layout not in ("heads", "tokens"):
        raise ValueError(f"layout={layout!r}; use 'heads' ([B, KV, G*T, D]) or 'tokens' ([B*T, KV*G*D])")
    if m % t:
        raise ValueError(f"q has {m} rows per KV head, not a multiple of T={t} (qpos [B, T])")
    g = m // t
    if layout == "heads":
        out = torch.empty(b, kvh, m, d, dtype=q.dtype, device=q.device)
        so = (out.stride(0), out.stride(1), t * d, d)  # row g*T + t at (g*T + t) * D
    else:
        out = torch.empty(b * t, kvh * g * d, dtype=q.dtype, device=q.device)
        so = (t * kvh * g * d, g * d, d, kvh * g * d)  # [B, T, KV, G, D]
    if splits > 1:
        po = torch.empty(b, kvh, splits, m, d, dtype=torch.float32, device=q.device)
        pm = torch.empty(b, kvh, splits, m, dtype=torch.float32, device=q.device)
        pl = torch.empty_like(pm)
    else:
        po = pm = pl = out
    block_m = max(16, triton.next_power_of_2(m))
    pdl = use_pdl(q.device)
    _split_kernel[(b, kvh, splits)](
        q, k_cache, v_cache, slots, qpos, out, po, pm, pl, t, m, scale * _LOG2E,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        *so,
        NUM_SPLITS=splits, BLOCK_M=block_m, BLOCK_S=block_s, D=d, IEEE=q.dtype == torch.float32,
        INTERPRET=os.environ.get("TRITON_INTERPRET") == "1", PDL=pdl,
        num_warps=num_warps, launch_pdl=pdl)
    if splits > 1:
        _combine_kernel[(b * kvh, m)](po, pm, pl, out, qpos, t, kvh, m, *so,
                                      NUM_SPLITS=splits, SPLITS_PAD=triton.next_power_of_2(splits),
                                      BLOCK_S=block_s, T_PAD=triton.next_power_of_2(t), D=d, PDL=pdl,
                                      num_warps=1 if d <= 64 else 2, launch_pdl=pdl)
    return out


def decode_attention_ref(q, k_cache, v_cache, slots, qpos, scale: float | None = None) -> torch.Tensor:
    """Plain-torch twin of :func:`decode_attention` (fp32 softmax over keys ``s <= qpos[b, t]``)."""
    b, kvh, m, d = q.shape
    t = qpos.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty(b, kvh, m, d, dtype=torch.float32, device=q.device)
    for i in range(b):
        k = k_cache[int(slots[i])].float()  # [KV, S_cache, D]
        v = v_cache[int(slots[i])].float()
        for r in range(m):
            n = int(qpos[i, r % t]) + 1
            s = torch.einsum("hd,hsd->hs", q[i, :, r].float(), k[:, :n]) * scale  # [KV, n]
            out[i, :, r] = torch.einsum("hs,hsd->hd", s.softmax(-1), v[:, :n])
    return out.to(q.dtype)
