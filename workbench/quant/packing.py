"""Bit packing of unsigned integer codes into ``uint8`` storage.

Layout (little-end first, along the last axis, i.e. along ``in_features``):

* 8 bits: one code per byte;
* 4 bits: two codes per byte, code ``2j`` in the low nibble and ``2j+1`` in the high nibble
  (the byte order of AutoGPTQ/compressed-tensors ``pack_to_int32`` read 8 bits at a time);
* 2 bits: four codes per byte, code ``4j+i`` in bits ``2i..2i+1``;
* 3, 5, 6, 7 bits: a bit stream, eight codes in ``b`` bytes: the 8 codes of a chunk form the integer
  ``v = sum_i q_i << (b * i)`` stored little-endian in ``b`` bytes (rows padded to a multiple of 8
  codes). For ``b = 4`` and ``b = 2`` this is exactly the nibble / crumb layout above, so every width
  costs ``b`` bits per weight (plus padding).

All functions are pure and exact: ``unpack(pack(q, b), b, n) == q`` for codes in ``[0, 2^b - 1]``.
"""

from __future__ import annotations

import torch

__all__ = ["codes_per_byte", "pack", "packed_cols", "unpack"]


def codes_per_byte(bits: int) -> int:
    """Whole codes per byte: 2 for INT4, 4 for INT2, 1 for INT8; 0 for bit-stream widths (3, 5, 6, 7)."""
    if not 2 <= bits <= 8:
        raise ValueError(f"bits={bits} is outside 2-8")
    return {8: 1, 4: 2, 2: 4}.get(bits, 0)


def packed_cols(n: int, bits: int) -> int:
    """Bytes per row for ``n`` codes of ``bits`` bits (rounded up; bit streams round to 8 codes)."""
    k = codes_per_byte(bits)
    return (n + k - 1) // k if k else (n + 7) // 8 * bits


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack codes ``q`` ``[..., n]`` (any int dtype, values in ``[0, 2^bits - 1]``) into ``uint8``
    ``[..., ceil(n / codes_per_byte)]``.

    Raises ``ValueError`` when a code is out of range.
    """
    if q.numel() and (int(q.min()) < 0 or int(q.max()) > (1 << bits) - 1):
        raise ValueError(f"codes must lie in [0, {(1 << bits) - 1}] for {bits}-bit packing; "
                         f"got [{int(q.min())}, {int(q.max())}]")
    k = codes_per_byte(bits)
    q = q.to(torch.uint8)
    if k == 1:
        return q.contiguous()
    if k == 0:
        return _pack_stream(q, bits)
    n = q.shape[-1]
    pad = (-n) % k
    if pad:
        q = torch.nn.functional.pad(q, (0, pad))
    q = q.reshape(*q.shape[:-1], -1, k)
    out = torch.zeros(q.shape[:-1], dtype=torch.uint8, device=q.device)
    for i in range(k):
        out |= q[..., i] << (bits * i)
    return out


def unpack(p: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack`: ``uint8`` ``[..., m]`` -> codes ``uint8`` ``[..., n]``."""
    k = codes_per_byte(bits)
    if k == 1:
        return p[..., :n]
    if k == 0:
        return _unpack_stream(p, bits, n)
    mask = (1 << bits) - 1
    parts = [(p >> (bits * i)) & mask for i in range(k)]
    return torch.stack(parts, dim=-1).reshape(*p.shape[:-1], -1)[..., :n]


def _pack_stream(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Eight ``bits``-wide codes -> ``bits`` bytes (little-endian int64 ``sum q_i << bits*i``)."""
    pad = (-q.shape[-1]) % 8
    if pad:
        q = torch.nn.functional.pad(q, (0, pad))
    q = q.to(torch.int64).reshape(*q.shape[:-1], -1, 8)
    v = torch.zeros(q.shape[:-1], dtype=torch.int64, device=q.device)
    for i in range(8):
        v |= q[..., i] << (bits * i)
    out = torch.stack([(v >> (8 * j)) & 0xFF for j in range(bits)], dim=-1)
    return out.reshape(*out.shape[:-2], -1).to(torch.uint8)


def _unpack_stream(p: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    b = p.to(torch.int64).reshape(*p.shape[:-1], -1, bits)
    v = torch.zeros(b.shape[:-1], dtype=torch.int64, device=p.device)
    for j in range(bits):
        v |= b[..., j] << (8 * j)
    mask = (1 << bits) - 1
    q = torch.stack([(v >> (bits * i)) & mask for i in range(8)], dim=-1)
    return q.reshape(*q.shape[:-2], -1)[..., :n].to(torch.uint8)
