"""Round-to-nearest (RTN) uniform integer quantization: scales, zero points, codes.

Unified storage convention used by every method here: UNSIGNED codes ``q`` in ``[0, 2^b - 1]`` and
``w_hat = (q - z) * s``, with one ``(s, z)`` per group of ``group_size`` consecutive input features.

* Asymmetric (Jacob et al. 2018, arXiv 1712.05877, eq. 1; the GPTQ reference ``Quantizer`` and
  compressed-tensors ``calculate_qparams``): ``lo = min(min w, 0)``, ``hi = max(max w, 0)``,
  ``s = (hi - lo) / (2^b - 1)``, ``z = clamp(round(-lo / s), 0, 2^b - 1)``.
* Symmetric (compressed-tensors ``calculate_qparams``, the definition behind llm-compressor's
  ``W4A16`` preset): ``s = max|w| / ((2^b - 1) / 2)`` (INT4: ``absmax / 7.5``), signed range
  ``[-2^(b-1), 2^(b-1) - 1]`` stored with the fixed offset ``z = 2^(b-1)`` (not stored).
* Float zero point (``float_zero=True``, asymmetric only; llama.cpp's Q4_1 ``w = d * q + m``):
  ``lo = min w``, ``hi = max w`` (0 not forced into the range), ``s = (hi - lo) / (2^b - 1)``,
  ``z = -lo / s`` kept as a float (stored in ``scale_dtype``), ``q = clamp(round(w / s + z), 0, 2^b-1)``.
  Its grid need not contain 0 exactly, which is why re-quantizing Q4_1-derived weights with it at
  g32 is nearly lossless while the integer-zero grid is not.
* Codes: ``q = clamp(round(w / s) + z, 0, 2^b - 1)`` (``torch.round``: half to even, as
  compressed-tensors). Scales are rounded to ``scale_dtype`` BEFORE the codes are computed, so the
  codes are the nearest ones for the scale actually stored. A zero scale becomes the dtype's eps.

Group sizes (DESIGN.md): ``g > 0`` groups of ``g`` input features, ``-1`` per output channel
(``g = in_features``), ``0`` per tensor (one scale for the whole matrix).
"""

from __future__ import annotations

import torch

__all__ = [
    "DTYPES",
    "compute_qparams",
    "dequantize_codes",
    "expand_groups",
    "fake_quantize",
    "quantize_codes",
    "resolve_group_size",
    "round_codes",
]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def resolve_group_size(group_size: int, in_features: int, layer: str = "", partial: bool = False) -> int:
    """Map DESIGN.md's group-size code to a width along ``in_features`` (0 -> tensor handled apart).

    Raises ``ValueError`` naming ``layer`` when ``group_size`` does not divide ``in_features`` unless
    ``partial`` (then each row has ``ceil(in / g)`` groups, the last one narrower: the count
    compressed-tensors' non-strict ``strategy_cdiv`` gives; llm-compressor 0.14 itself refuses such
    layers unless ``bypass_divisibility_checks=True``).
    """
    if group_size == -1 or group_size == 0:
        return in_features
    if group_size < 1 or (in_features % group_size and not partial):
        raise ValueError(f"layer {layer or '?'}: group_size={group_size} does not divide in_features="
                         f"{in_features}; pick a divisor of {in_features} (e.g. "
                         f"{[d for d in (32, 64, 128, 256) if in_features % d == 0] or [in_features]}) "
                         "or granularity='per_channel', or partial_groups=True (narrower last group)")
    return group_size


def _grouped(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[out, in]`` -> rows to reduce over: ``[out * ceil(in/g), g]``, ``[out, in]`` or ``[1, out*in]``.

    A partial last group is padded by repeating its last column, which changes no min, max or absmax,
    so its parameters are those of the narrower group."""
    in_f = w.shape[1]
    if group_size == 0:
        return w.reshape(1, -1)
    g = in_f if group_size == -1 else group_size
    if in_f % g:
        w = torch.cat([w, w[:, -1:].expand(-1, g - in_f % g)], dim=1)
    return w.reshape(-1, g)


def compute_qparams(w: torch.Tensor, bits: int, group_size: int, symmetric: bool,
                    scale_dtype: torch.dtype = torch.float32,
                    float_zero: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales and zero points for ``w`` ``[out, in]`` (float).

    Returns ``(scales, zeros)``: ``scales`` in ``scale_dtype`` and ``zeros`` ``uint8`` (``scale_dtype``
    with ``float_zero``), both of shape
    ``[out, ceil(in/g)]`` (group), ``[out, 1]`` (per channel, ``group_size=-1``) or ``[1, 1]`` (per tensor,
    ``group_size=0``). Formulas in the module docstring. A ``group_size`` that does not divide ``in``
    gives a narrower last group.
    """
    out_f = w.shape[0]
    rows = _grouped(w.float(), group_size)
    maxq = (1 << bits) - 1
    if symmetric:
        scale = rows.abs().amax(dim=1) / (maxq / 2)
        zero = torch.full_like(scale, float(1 << (bits - 1)))
    elif float_zero:
        lo, hi = rows.amin(dim=1), rows.amax(dim=1)
        scale = (hi - lo) / maxq
    else:
        lo = rows.amin(dim=1).clamp(max=0)
        hi = rows.amax(dim=1).clamp(min=0)
        scale = (hi - lo) / maxq
    eps = torch.finfo(scale_dtype).eps
    scale = torch.where(scale == 0, torch.full_like(scale, eps), scale).to(scale_dtype)
    shape = (1, 1) if group_size == 0 else (out_f, rows.shape[0] // out_f)
    if not symmetric and float_zero:
        return scale.reshape(shape), (-lo / scale.float()).to(scale_dtype).reshape(shape)
    if not symmetric:
        zero = torch.round(-lo / scale.float()).clamp(0, maxq)
    return scale.reshape(shape), zero.to(torch.uint8).reshape(shape)


def expand_groups(t: torch.Tensor, out_f: int, in_f: int, group_size: int | None = None) -> torch.Tensor:
    """Broadcast per-group ``[out or 1, n_groups]`` values to per-weight ``[out, in]``; ``group_size``
    is the group width (default ``in / n_groups``; needed when the last group is partial)."""
    if t.shape[1] == 1:  # one group per row (or per tensor): broadcast, no copy
        return t.float().expand(out_f, in_f)
    g = group_size if group_size and group_size > 0 else in_f // t.shape[1]
    return t.float().repeat_interleave(g, dim=1)[:, :in_f].expand(out_f, in_f)


def quantize_codes(w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
                   group_size: int | None = None) -> torch.Tensor:
    """Codes ``uint8`` ``[out, in]``: ``clamp(round(w / s) + z, 0, 2^b - 1)`` with per-group ``s, z``
    (``group_size``: group width, see :func:`expand_groups`)."""
    out_f, in_f = w.shape
    s = expand_groups(scales, out_f, in_f, group_size)
    z = expand_groups(zeros, out_f, in_f, group_size)
    return round_codes(w.float(), s, z, (1 << bits) - 1, zeros.is_floating_point()).to(torch.uint8)


def round_codes(w: torch.Tensor, s: torch.Tensor, z: torch.Tensor, maxq: int, float_zero: bool) -> torch.Tensor:
    """The rounding rule on float32 tensors of one shape (or broadcastable): ``clamp(round(w / s) + z,
    0, maxq)``, or ``clamp(round(w / s + z), 0, maxq)`` for a float zero point (round after the shift).
    Returns float32 codes (GPTQ calls it per column)."""
    if float_zero:
        return torch.round(w / s + z).clamp_(0, maxq)
    return (torch.round(w / s) + z).clamp_(0, maxq)


def dequantize_codes(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                     dtype: torch.dtype = torch.float32, group_size: int | None = None) -> torch.Tensor:
    """``w_hat = (q - z) * s`` ``[out, in]`` in ``dtype`` from codes ``[out, in]`` and group params."""
    out_f, in_f = q.shape
    s = expand_groups(scales, out_f, in_f, group_size)
    z = expand_groups(zeros, out_f, in_f, group_size)
    return ((q.float() - z) * s).to(dtype)


def fake_quantize(w: torch.Tensor, bits: int, group_size: int, symmetric: bool,
                  scale_dtype: torch.dtype = torch.float32, float_zero: bool = False) -> torch.Tensor:
    """RTN quantize-dequantize of ``w`` ``[out, in]``; returns ``w_hat`` in ``w.dtype``."""
    s, z = compute_qparams(w, bits, group_size, symmetric, scale_dtype, float_zero)
    g = group_size if group_size > 0 else None
    return dequantize_codes(quantize_codes(w, s, z, bits, g), s, z, w.dtype, g)
