"""Dequantize a packed W4A16 weight to a dense one on the device: the prefill path of the Triton INT4 backend.

``w_hat[n, k] = (q[n, k] - zero[g, n]) * scale[g, n]`` with ``g = k // G``, computed in float32 and rounded once
to the output dtype: the values of :func:`workbench.engine.int4.dequantize_int4`, read from the shuffled words of
:func:`workbench.kernels.int4_layout.pack_int4_gemv` (nibble ``i`` of word ``j`` of group ``b`` is column
``b*G + i*(G//8) + j``) and the transposed ``[K // G, N]`` scales and zeros the INT4 kernels use, so the
engine keeps one copy of the weight (4 bits each) and no unpacked codes.

Why: a prefill step has hundreds of token rows and is bound by compute; a dense bf16 GEMM (cuBLAS) runs it at
the tensor cores' rate while the INT4 kernels written for few rows do not (their time grows with the rows).
Dequantizing first costs one pass over the weight (0.5 byte read and 2 bytes written per weight, then the GEMM
reads the 2 bytes as the bf16 model's would), about 19 GB for a 7B model: a few ms per prefill step at HBM
bandwidth. The same trade as ``"dequant"`` and as vLLM's exllama/Marlin paths for large batches (dequantize in
tiles, then a dense MMA), done here a whole matrix at a time; the dense copy is transient (one matmul's weight).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _dequant_kernel(QW, S, Z, OUT, N, KW, WB: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    """One program: ``BLOCK_R`` rows x ``BLOCK_W`` words of ``QW`` ``[N, KW]`` -> ``8 * BLOCK_W`` columns."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (r < N)[:, None] & (w < KW)[None, :]
    words = tl.load(QW + r.to(tl.int64)[:, None] * KW + w[None, :], mask=mask, other=0)
    g, j = w // WB, w % WB
    sz = g[None, :] * N + r[:, None]  # [BLOCK_R, BLOCK_W] into the [K // G, N] scales and zeros
    s = tl.load(S + sz, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(Z + sz, mask=mask, other=0.0).to(tl.float32)
    row = OUT + r.to(tl.int64)[:, None] * (KW * 8)
    col = g * (8 * WB) + j  # column of nibble 0; nibble i is i * WB further
    for i in tl.static_range(8):
        q = ((words >> (4 * i)) & 0xF).to(tl.float32)  # arithmetic shift, then the low 4 bits: any sign
        tl.store(row + (col + i * WB)[None, :], ((q - z) * s).to(OUT.dtype.element_ty), mask=mask)


def dequantize_packed(qw: torch.Tensor, s: torch.Tensor, z: torch.Tensor, group: int,
                      dtype: torch.dtype | None = None) -> torch.Tensor:
    """``qw`` ``[N, K // 8]`` int32 (:func:`~workbench.kernels.int4_layout.pack_int4_gemv` layout), ``s`` / ``z``
    (scale, zero) ``[K // G, N]`` -> ``w_hat`` ``[N, K]`` in ``dtype`` (default ``s.dtype``), equal to
    :func:`workbench.engine.int4.dequantize_int4` of the unpacked codes. Raises ``ValueError`` on shapes that do
    not match or a group that is not a multiple of 8 dividing K."""
    n, kw = qw.shape
    k = kw * 8
    if qw.dtype != torch.int32 or group % 8 or k % group or s.shape != (k // group, n) or z.shape != s.shape:
        raise ValueError(f"qw {tuple(qw.shape)} {qw.dtype}, s {tuple(s.shape)}, z {tuple(z.shape)}, group={group}: "
                         "want int32 [N, K // 8], [K // G, N] twice and G a multiple of 8 dividing K")
    out = torch.empty(n, k, dtype=dtype or s.dtype, device=qw.device)
    wb = group // 8
    block_r, block_w = 16, 64  # words of any group width: each word finds its group's scale and zero
    grid = (triton.cdiv(n, block_r), triton.cdiv(kw, block_w))
    _dequant_kernel[grid](qw, s, z, out, n, kw, WB=wb, BLOCK_R=block_r, BLOCK_W=block_w, num_warps=4)
    return out
