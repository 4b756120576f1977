"""Per-layer building blocks of the engine forward, in plain torch (CPU path and reference).

The CUDA path swaps in the fused Triton kernels of :mod:`workbench.kernels.fused`, which have the
same signatures; :func:`get_ops` picks the set for a device.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    """``h = x + residual``; ``y = weight * RMSNorm(h)`` as HF ``LlamaRMSNorm`` computes it (float32
    statistics, cast back before the weight). ``x``, ``residual`` ``[N, hidden]``; returns ``(y, h)``.
    Source: Zhang & Sennrich 2019 (arXiv 1910.07467), eq. 4."""
    h = x if residual is None else x + residual
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)
    return weight * y, h


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qkv_rope(qkv, bias, cos, sin, wpos, n_heads: int, n_kv: int, d: int):
    """Bias add + RoPE (Su et al. 2021, RoFormer; HF ``rotate_half`` layout) on a fused qkv projection.

    ``qkv`` ``[N, (H+2*KV)*D]``; ``cos``/``sin`` ``[S_cache, D]`` float32; ``wpos`` ``[N]`` int64 positions.
    Returns ``(q [N, H, D], k [N, KV, D], v [N, KV, D])`` in ``qkv``'s dtype (q and k rotated)."""
    n = qkv.shape[0]
    if bias is not None:
        qkv = qkv + bias
    q = qkv[:, : n_heads * d].view(n, n_heads, d)
    k = qkv[:, n_heads * d: (n_heads + n_kv) * d].view(n, n_kv, d)
    v = qkv[:, (n_heads + n_kv) * d:].view(n, n_kv, d)
    c = cos[wpos].unsqueeze(1).to(qkv.dtype)  # [N, 1, D]
    s = sin[wpos].unsqueeze(1).to(qkv.dtype)
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s, v


def qkv_rope_cache(qkv, bias, cos, sin, wpos, slots, t, k_cache, v_cache, n_heads, n_kv):
    """Bias add + RoPE (Su et al. 2021, RoFormer; HF ``rotate_half`` layout) + KV-cache write.

    ``qkv`` ``[N=B*T, (H+2*KV)*D]``; ``cos``/``sin`` ``[S_cache, D]`` float32; ``wpos`` ``[N]`` int64;
    ``slots`` ``[B]`` int64; ``k_cache``/``v_cache`` ``[max_batch, KV, S_cache, D]`` (written in
    place). Returns q ``[B, KV, G*T, D]`` with row ``g*T + t`` = head ``kv*G + g`` of token t.
    """
    d = k_cache.shape[-1]
    b = slots.shape[0]
    g = n_heads // n_kv
    q, k, v = qkv_rope(qkv, bias, cos, sin, wpos, n_heads, n_kv, d)
    rows = slots.view(b, 1).expand(b, t)
    cols = wpos.view(b, t)
    k_cache[rows, :, cols] = k.view(b, t, n_kv, d).to(k_cache.dtype)
    v_cache[rows, :, cols] = v.reshape(b, t, n_kv, d).to(v_cache.dtype)
    return q.view(b, t, n_kv, g, d).permute(0, 2, 3, 1, 4).reshape(b, n_kv, g * t, d)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """SwiGLU ``silu(gate) * up`` (Shazeer 2020, arXiv 2002.05202, eq. 6); ``gu`` ``[N, 2*I]`` =
    ``[gate | up]`` -> ``[N, I]``."""
    inter = gu.shape[-1] // 2
    return torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]


TORCH_OPS = SimpleNamespace(add_rmsnorm=add_rmsnorm, qkv_rope_cache=qkv_rope_cache, silu_mul=silu_mul,
                            name="torch")


def get_ops(device: torch.device, prefer_triton: bool = True) -> SimpleNamespace:
    """The op set for ``device``: fused Triton kernels on CUDA (if triton imports), else torch."""
    if device.type == "cuda" and prefer_triton:
        try:
            from workbench.kernels import fused
        except ImportError:
            return TORCH_OPS
        return SimpleNamespace(add_rmsnorm=fused.add_rmsnorm, qkv_rope_cache=fused.qkv_rope_cache,
                               silu_mul=fused.silu_mul, name="triton")
    return TORCH_OPS
