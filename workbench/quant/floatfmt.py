"""The low-precision float grids (E4M3, E2M1, E8M0) and their round-to-nearest-even casts, written out.

Sources, per format:

* **E4M3** (FP8): OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, 2023, section 5.1 and table 1:
  1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, ``S.1111.111`` is NaN, so the largest
  normal is ``S.1111.110 = 1.75 * 2^8 = 448``; subnormals ``0.mmm * 2^-6`` (smallest ``2^-9``). Same as
  ``torch.float8_e4m3fn`` and NVIDIA's FP8 E4M3 on Hopper.
* **E2M1** (FP4): OCP Microscaling Formats (MX) Specification v1.0, 2023, section 5.3.3: 1 sign, 2 exponent
  bits (bias 1), 1 mantissa bit, no infinities or NaN; values ``0, 0.5, 1, 1.5, 2, 3, 4, 6``. The element of
  MXFP4 and of NVIDIA's NVFP4 (Blackwell; NVIDIA's "Introducing NVFP4" 2025 and the TensorRT Model Optimizer
  NVFP4 definition: E2M1 values, an E4M3 scale per 16 values, an FP32 scale per tensor).
* **E8M0** (the MX shared scale): OCP MX v1.0 section 5.4.1: 8 exponent bits, bias 127, no sign or
  mantissa, ``0xFF`` is NaN; value ``2^(e - 127)``.

Rounding: OFP8 section 4 ("round to nearest, ties to even"); conversions that overflow saturate to the
largest normal (OFP8's saturating mode, which llm-compressor / compressed-tensors use: they clamp to
``[-max, max]`` before the cast). :func:`round_to_format` is the readable reference; the tests hold it
equal to ``torch``'s ``float8_e4m3fn`` cast and to compressed-tensors' ``cast_to_fp4`` on every grid
midpoint and on random values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["E2M1", "E4M3", "FORMATS", "FloatFormat", "e2m1_codes", "e2m1_values", "e8m0_decode", "e8m0_encode",
           "pack_e2m1", "round_to_format", "unpack_e2m1"]


@dataclass(frozen=True)
class FloatFormat:
    """A sign-exponent-mantissa format without infinities (OFP8 E4M3, MX E2M1).

    ``emin = 1 - bias`` is the exponent of the smallest normal; below it the spacing stays
    ``2^(emin - man_bits)`` (subnormals). ``max`` is the largest finite value (for E4M3 smaller than the
    all-ones pattern, which is NaN)."""

    name: str
    exp_bits: int  # exponent field width
    man_bits: int  # mantissa field width
    bias: int  # exponent bias
    max: float  # largest finite magnitude

    @property
    def emin(self) -> int:
        return 1 - self.bias

    def grid(self) -> torch.Tensor:
        """Every non-negative finite value, ascending, float32 ``[n]`` (E4M3: 127 values, 0 to 448; E2M1: 8)."""
        vals = {0.0}
        for e in range(2 ** self.exp_bits):
            for m in range(2 ** self.man_bits):
                v = (m / 2 ** self.man_bits) * 2.0 ** self.emin if e == 0 else \
                    (1 + m / 2 ** self.man_bits) * 2.0 ** (e - self.bias)
                if v <= self.max:
                    vals.add(v)
        return torch.tensor(sorted(vals), dtype=torch.float32)


E4M3 = FloatFormat("e4m3", exp_bits=4, man_bits=3, bias=7, max=448.0)  # OFP8 table 1
E2M1 = FloatFormat("e2m1", exp_bits=2, man_bits=1, bias=1, max=6.0)  # OCP MX v1.0 table 5
FORMATS = {"e4m3": E4M3, "e2m1": E2M1}


def round_to_format(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """``x`` rounded to the nearest value of ``fmt``, ties to even, saturating at ``+-fmt.max``.

    Args:
        x: any float tensor (computed in float32; NaN stays NaN).
        fmt: :data:`E4M3` or :data:`E2M1`.

    Returns:
        float32 tensor of ``x``'s shape whose values all lie on ``fmt.grid()`` (with sign).

    The maths (OFP8 section 4): for ``|x|`` in the binade ``[2^e, 2^(e+1))`` (``e >= emin``; below, the
    subnormal spacing of ``emin``) the representable values are spaced ``q = 2^(e - man_bits)``, so
    ``round(|x| / q) * q`` with round-half-to-even (``torch.round``) is the nearest-even neighbour; a value
    that rounds up to ``2^(e+1)`` is that binade's first value, still exact. ``|x| / q`` divides by a power of
    two (exact); ``e`` comes from ``torch.frexp`` (exact, unlike ``log2``).
    """
    a = x.float().abs()
    _, e = torch.frexp(a)  # a = m * 2^e with m in [0.5, 1): floor(log2 a) = e - 1
    e = torch.clamp(e - 1, min=fmt.emin)
    q = torch.exp2((e - fmt.man_bits).float())  # spacing of the binade (exact: an integer power of two)
    r = torch.clamp(torch.round(a / q) * q, max=fmt.max)
    return torch.where(torch.isnan(a), a, torch.copysign(r, x.float()))


# -- E2M1 codes (4 bits: sign, 2 exponent, 1 mantissa) ---------------------------------------------------
def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``0..15`` of E2M1 values ``v`` (already on the grid, e.g. from :func:`round_to_format`):
    bit 3 the sign, bits 0-2 the magnitude's index in ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (which is the
    exponent-mantissa bit pattern, OCP MX v1.0 table 5). Raises ``ValueError`` for off-grid values."""
    grid = E2M1.grid().to(v.device)
    a = v.float().abs()
    idx = torch.searchsorted(grid, a.contiguous())
    if bool((idx >= len(grid)).any()) or not torch.equal(grid[idx.clamp(max=len(grid) - 1)], a):
        raise ValueError("e2m1_codes: values off the E2M1 grid; round them with round_to_format(x, E2M1) first")
    return (idx | (torch.signbit(v).long() << 3)).to(torch.uint8)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of uint8 E2M1 codes (inverse of :func:`e2m1_codes`; code 8 is -0.0)."""
    grid = E2M1.grid().to(codes.device)
    c = codes.long()
    mag = grid[c & 7]
    return torch.where((c & 8).bool(), -mag, mag)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """``[rows, cols]`` uint8 codes -> ``[rows, cols / 2]`` uint8, two per byte, the even column in the low
    nibble (compressed-tensors' ``pack_fp4_to_uint8``, vLLM's NVFP4 / MXFP4 layout). Raises ``ValueError``
    for an odd column count."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_e2m1 needs an even number of columns, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_e2m1`: ``[rows, cols / 2]`` uint8 -> ``[rows, cols]`` uint8 codes."""
    return torch.stack([packed & 0x0F, packed >> 4], dim=-1).flatten(-2)


# -- E8M0 (MX shared scale) ---------------------------------------------------------------------------------
def e8m0_encode(exponent: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 of integer exponents ``k`` (the scale ``2^k``): ``k + 127`` clamped to ``0..254``
    (OCP MX v1.0 5.4.1; 255 is NaN and never written)."""
    return torch.clamp(exponent.float() + 127, 0, 254).to(torch.uint8)


def e8m0_decode(code: torch.Tensor) -> torch.Tensor:
    """float32 ``2^(code - 127)`` of uint8 E8M0 codes (code 255: NaN)."""
    v = torch.exp2(code.float() - 127)
    return torch.where(code == 255, torch.full_like(v, float("nan")), v)
