"""Storage layouts of INT4 (W4A16) weights for the Triton kernels, and their inverses.

``q`` ``[N, K]`` (values 0..15, one per weight, ``w_hat = (q - zero) * scale`` per group of ``G`` columns) is
packed eight nibbles to an int32 word.

* :func:`pack_int4_gemv` -- the layout of the INT4 GEMV (:mod:`workbench.kernels.w4a16`) and of the
  tensor-core GEMM (:mod:`workbench.kernels.rows`): within group ``b`` of a row, nibble ``i`` (bits ``4i ..
  4i+3``) of word ``j`` holds element ``k = b*G + i*(G//8) + j``. A row's words are contiguous along K (16-byte
  loads). For a fixed nibble ``i`` the words ``j = 0 .. G/8 - 1`` hold the ``G/8`` consecutive columns
  ``b*G + i*G/8 + j``: the GEMV then reads contiguous activations per nibble, and the GEMM turns nibble ``i`` of
  a ``[BLOCK_N, G/8]`` word tile into the ``[BLOCK_N, G/8]`` weight tile of those columns with elementwise
  operations only (``G/8 = 16`` for ``G = 128``: one tensor-core K step), so the words can be loaded straight
  into the matrix-operand register layout. This is the idea of Marlin's pre-shuffled weights (Frantar et al.
  2024, arXiv 2408.11743, sec. 4) in a form Triton can express.
* :func:`pack_int4_words` -- the unshuffled layout (element ``8j + i`` in nibble ``i`` of word ``j``), kept for
  the legacy entry :func:`workbench.kernels.w4a16.w4a16_gemv`.
"""

from __future__ import annotations

import torch


def _words(q: torch.Tensor) -> torch.Tensor:
    """``[..., 8]`` nibbles (int64) -> ``[...]`` int32 words, nibble ``i`` in bits ``4i .. 4i+3``."""
    words = (q << (4 * torch.arange(8, device=q.device, dtype=torch.int64))).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_int4_gemv(q: torch.Tensor, group: int) -> torch.Tensor:
    """``q`` ``[N, K]`` uint8 (0..15) -> ``[N, K // 8]`` int32 in the shuffled layout above: nibble ``i`` of
    word ``j`` of group ``b`` is element ``b*group + i*(group // 8) + j``. Raises ``ValueError`` unless
    ``group`` is a multiple of 8 dividing K."""
    n, k = q.shape
    if group % 8 or k % group:
        raise ValueError(f"group={group} must be a multiple of 8 dividing K={k}")
    wb = group // 8
    q = q.to(torch.int64).view(n, k // group, 8, wb).transpose(2, 3)  # [N, NG, WB, 8]: (j, i)
    return _words(q).reshape(n, k // 8)


def unpack_int4_gemv(qw: torch.Tensor, group: int) -> torch.Tensor:
    """Inverse of :func:`pack_int4_gemv`: ``[N, K // 8]`` int32 -> ``[N, K]`` uint8."""
    n, kw = qw.shape
    wb = group // 8
    nib = (qw.to(torch.int64).unsqueeze(-1) >> (4 * torch.arange(8, device=qw.device))) & 0xF  # [N, KW, 8]
    return nib.view(n, kw // wb, wb, 8).transpose(2, 3).reshape(n, kw * 8).to(torch.uint8)


def pack_int4_words(q: torch.Tensor) -> torch.Tensor:
    """Unshuffled layout: ``q`` ``[N, K]`` uint8 -> ``[N, K // 8]`` int32, element ``8j + i`` in bits
    ``4i .. 4i+3`` of word ``j``."""
    n, k = q.shape
    return _words(q.to(torch.int64).view(n, k // 8, 8))
