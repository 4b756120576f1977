"""One step of the engine's transformer forward over its static KV cache (the maths of
:meth:`workbench.engine.Engine.extend_batch`; the engine keeps slots, lengths and CUDA graphs).

Per layer (Llama/Qwen2 decoder, Touvron et al. 2023, arXiv 2302.13971, sec. 2.2): RMSNorm -> fused
``qkv`` projection (+ bias) -> RoPE on q, k and the KV-cache write -> grouped-query attention over the
slot's cache row -> ``o`` projection + residual -> RMSNorm -> SwiGLU MLP + residual; then the final
RMSNorm and the LM head. Steps of few rows on CUDA run RMSNorm, SwiGLU and the residual adds inside
the matmuls (:mod:`workbench.engine.dispatch`), and ``x`` then carries the residual stream itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.engine.int4 import Int4Linear

__all__ = ["forward"]


@dataclass
class _Step:
    """What every layer of one step shares: the sizes, where each token writes and what it attends to."""

    b: int  # rows (slots) in the step
    t: int  # tokens per row, padding included
    slots: torch.Tensor  # [B] int64 on the device
    wpos: torch.Tensor  # [B*T] int64: cache column each token writes (the scratch column for padding)
    kv_len: int  # cache columns the SDPA path attends over
    prefix: bool  # slots are 0..B-1 (the cache rows can be sliced instead of gathered)
    decode_attn: object  # the decode-attention kernel for small steps, or None (SDPA with ``mask``)
    qpos: torch.Tensor | None  # [B, T] int32: last key column each query sees (kernel path)
    mask: torch.Tensor | None  # [B, 1, G*T, kv_len] additive float mask (SDPA path)
    fused: object  # dispatch.FusedMatmuls in use for this step's row count, or None


def _plan(eng, slots, tokens, n_valid, prefix: bool, kv_len: int | None) -> _Step:
    """Positions, the attention mask (or kernel query positions) and the fused-matmul choice."""
    b, t = tokens.shape
    ar = torch.arange(t, device=eng.device)
    pos = eng._len_dev.index_select(0, slots).unsqueeze(1) + ar  # [B, T]
    wpos = torch.where(ar.unsqueeze(0) < n_valid.unsqueeze(1), pos, eng.scratch).clamp_(max=eng.scratch)
    kv_len = kv_len or eng.s_cache
    decode_attn = eng.decode_attention if t <= eng.graph_max_t else None
    qpos = mask = None
    if decode_attn is not None:
        # query t of row b sees keys s <= qpos[b, t]; padded queries act as the row's last valid
        # one (position 0 if the row is empty), so the kernel reads only columns < len + n_valid
        last_pos = (eng._len_dev.index_select(0, slots) + n_valid - 1).clamp_(min=0)
        qpos = torch.minimum(pos, last_pos.unsqueeze(1)).to(torch.int32)  # [B, T]
    else:
        vis = eng._key_pos[:kv_len].view(1, 1, -1) <= wpos.unsqueeze(-1)  # [B, T, kv_len]
        vis = vis.unsqueeze(1).repeat(1, 1, eng.spec.group, 1)  # [B, 1, G*T, S_cache], row g*T + t
        # additive float mask built once per step (SDPA would convert a bool mask in every layer)
        mask = torch.zeros(vis.shape, dtype=eng.dtype, device=eng.device).masked_fill_(~vis, float("-inf"))
    n = b * t
    fz = eng.fused if eng.fused is not None and eng.fused.min_rows <= n <= eng.fused.max_rows else None
    return _Step(b, t, slots, wpos.reshape(-1), kv_len, prefix, decode_attn, qpos, mask, fz)


def _qkv(eng, st: _Step, li: int, lw, x, residual):
    """RMSNorm, qkv projection, bias, RoPE and the KV-cache write of layer ``li``: queries
    ``[B, KV, G*T, D]`` and the residual stream."""
    s, kc, vc = eng.spec, eng.k_cache[li], eng.v_cache[li]
    if st.fused is not None:  # one launch for one row
        q = st.fused.qkv_rope(lw.wqkv, x, lw.ln1, s.rms_eps, lw.bqkv, eng.cos, eng.sin, st.wpos, st.slots, st.t,
                              kc, vc, s.n_heads, s.n_kv_heads)
        return q, residual
    h, residual = eng.ops.add_rmsnorm(x, residual, lw.ln1, s.rms_eps)
    if eng.kvq is None:
        q = eng.ops.qkv_rope_cache(lw.wqkv(h), lw.bqkv, eng.cos, eng.sin, st.wpos, st.slots, st.t, kc, vc,
                                   s.n_heads, s.n_kv_heads)
    else:  # other KV-cache format: torch RoPE, quantizing write (kv_cache.py)
        q = eng.kvq.qkv_rope_write(li, lw.wqkv(h), lw.bqkv, eng.cos, eng.sin, st.wpos, st.slots, st.t,
                                   s.n_heads, s.n_kv_heads)
    return q, residual


def _attend(eng, st: _Step, li: int, q) -> torch.Tensor:
    """Grouped-query attention of queries ``q`` ``[B, KV, G*T, D]`` over layer ``li``'s cache rows of
    ``st.slots``: ``[B*T, n_heads*D]`` in the compute dtype."""
    s, kc, vc = eng.spec, eng.k_cache[li], eng.v_cache[li]
    scale = 1.0 / math.sqrt(s.head_dim)
    if st.decode_attn is not None:  # written as [B*T, H*D] by the kernel: no permuting copy at T > 1
        return st.decode_attn(q, kc, vc, st.slots, st.qpos, scale, layout="tokens")
    if eng.kvq is not None:  # dequantized keys and values [B, KV, kv_len, D]
        kk, vv = eng.kvq.read(li, st.slots, st.kv_len, st.prefix)
    elif st.prefix:
        kk, vv = kc[:st.b, :, :st.kv_len], vc[:st.b, :, :st.kv_len]
    else:
        kk = kc[:, :, :st.kv_len].index_select(0, st.slots)
        vv = vc[:, :, :st.kv_len].index_select(0, st.slots)
    o = F.scaled_dot_product_attention(q, kk, vv, attn_mask=st.mask, scale=scale)
    o = o.view(st.b, s.n_kv_heads, s.group, st.t, s.head_dim).permute(0, 3, 1, 2, 4)
    return o.reshape(st.b * st.t, s.n_heads * s.head_dim)


def _out_mlp(eng, st: _Step, lw, o, x, residual):
    """``o`` projection (+ bias) and residual, RMSNorm, SwiGLU MLP: the next ``x`` and residual."""
    eps = eng.spec.rms_eps
    if st.fused is not None:
        x = st.fused.linear(lw.wo, o, residual=x)
        return st.fused.mlp(lw.wgu, lw.wd, x, lw.ln2, eps), residual
    x = lw.wo(o)
    if lw.bo is not None:
        x = x + lw.bo
    h, residual = eng.ops.add_rmsnorm(x, residual, lw.ln2, eps)
    if isinstance(lw.wgu, Int4Linear):  # SwiGLU as the INT4 kernel's epilogue where it has one
        return lw.wd(lw.wgu.swiglu(h, eng.ops.silu_mul)), residual
    return lw.wd(eng.ops.silu_mul(lw.wgu(h))), residual


def forward(eng, slots, tokens, n_valid, prefix: bool, last: bool, kv_len: int | None = None) -> torch.Tensor:
    """One step of ``eng`` (an :class:`~workbench.engine.Engine`): ``tokens`` ``[B, T]`` int64 appended to
    ``slots`` ``[B]`` with ``n_valid`` ``[B]`` real tokens each (all on the engine's device). Returns
    float32 logits ``[B, T, vocab]``, or ``[B, vocab]`` at each row's last valid token when ``last``.
    ``kv_len`` (eager only) limits attention to cache columns ``[0, kv_len)``, which must cover every
    valid position (padded rows then see arbitrary but finite values). Advances the device lengths."""
    st = _plan(eng, slots, tokens, n_valid, prefix, kv_len)
    x = eng.w.embed.index_select(0, tokens.reshape(-1))  # [N, hidden]
    residual = None
    for li, lw in enumerate(eng.w.layers):
        q, residual = _qkv(eng, st, li, lw, x, residual)
        x, residual = _out_mlp(eng, st, lw, _attend(eng, st, li, q), x, residual)
    if last and st.t > 1:
        idx = torch.arange(st.b, device=eng.device) * st.t + (n_valid - 1).clamp_(min=0)
        x = x.index_select(0, idx)
        residual = None if st.fused is not None else residual.index_select(0, idx)
    if st.fused is not None:
        out = st.fused.linear(eng.w.lm_head, x, "rmsnorm", eng.w.norm, eng.spec.rms_eps).float()
    else:
        h, _ = eng.ops.add_rmsnorm(x, residual, eng.w.norm, eng.spec.rms_eps)
        out = eng.w.lm_head(h).float()
    eng._len_dev.index_add_(0, slots, n_valid)
    return out if last else out.view(st.b, st.t, -1)
