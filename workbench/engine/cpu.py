"""W4A16 / W8A16 matmuls on the CPU: torch's own CPU INT4 and INT8 kernels, with bf16 activations.

* :class:`CpuInt4Linear`: ``torch.ops.aten._convert_weight_to_int4pack_for_cpu`` packs the codes once and
  ``torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros)`` computes
  ``y = x @ w_hat.T`` with ``w_hat = (q - 8) * scale + (8 - zero) * scale = (q - zero) * scale`` (the
  tinygemm convention: ``aten/src/ATen/native/cpu/int4mm_kernel.cpp``; gpt-fast's ``WeightOnlyInt4Linear``
  on a CPU calls the same pair). It takes groups of 32, 64, 128 or 256 columns and ``out % 16 == 0``.
* W8A16 per channel: :class:`workbench.engine.int8.Int8Linear` (``torch.ops.aten._weight_int8pack_mm``).
* :class:`FewRows`: the integer kernel for calls of at most ``max_rows`` token rows (decode, verify steps)
  and a dequantized copy of the same weight (``F.linear``) for more (prefill), where the engine keeps one.

Why bf16 only: these kernels are fast with bf16 activations and slow with float32 ones. On the 2-core
AVX-512-BF16 machine of 2026-12-06 (one thread, median of 50 calls, SmolLM2-135M shapes): a 1536 x 576
weight at one row took 58 us (INT4) / 60 us (INT8) against 173 us bf16 and 187 us float32 ``F.linear``; at 8
rows 196 / 208 us against 178 us bf16 (the crossover, hence ``max_rows = 8``); at 64 rows 1.4 ms against
0.29 ms. With float32 activations the same INT4 / INT8 kernels took 781 / 390 us against 72 us dense (a 1536 x 576 weight, one row),
so a float32 engine keeps the dequantized weight (:mod:`workbench.engine.runtime`) and its route table says why.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["CPU_INT4_GROUPS", "CpuInt4Linear", "FewRows", "cpu_int4_can_implement"]

CPU_INT4_GROUPS = (32, 64, 128, 256)  # qGroupSize values _weight_int4pack_mm_for_cpu accepts


def cpu_int4_can_implement(n: int, k: int, group_size: int, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether :class:`CpuInt4Linear` takes an ``[n, k]`` weight in groups of ``group_size`` with ``dtype``
    activations: ``(ok, why)``; ``why`` names the failed condition (torch's own checks in
    ``_convert_weight_to_int4pack_cpu`` / ``_weight_int4pack_mm_cpu``, plus bf16: see the module docstring)."""
    if dtype != torch.bfloat16:
        return False, f"{str(dtype).replace('torch.', '')} activations (the CPU INT4 kernel is fast with bfloat16 only)"
    if group_size not in CPU_INT4_GROUPS:
        return False, f"group {group_size} not in {CPU_INT4_GROUPS}"
    if n % 16 or k % group_size:
        return False, f"out {n} not a multiple of 16 or in {k} not a multiple of the group"
    return True, "ok"


class CpuInt4Linear:
    """``y = x @ w_hat.T`` on the CPU with ``w_hat[o, i] = (q[o, i] - zeros[o, i // g]) * scales[o, i // g]``.

    Args: ``q`` ``[out, in]`` uint8 codes 0..15; ``scales``, ``zeros`` ``[out, in // g]`` (float zeros taken
    as they are: the kernel adds ``(8 - zero) * scale`` per group, exact for any zero); ``dtype`` the
    activation dtype (bfloat16). ``x`` ``[M, in]`` ``dtype`` -> ``[M, out]``.
    Raises ``ValueError`` naming the condition where :func:`cpu_int4_can_implement` refuses the weight."""

    name = "cpu-int4pack"

    def __init__(self, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype):
        n, k = q.shape
        g = k // scales.shape[1]
        ok, why = cpu_int4_can_implement(n, k, g, dtype)
        if not ok:
            raise ValueError(f"{self.name} cannot run a [{n}, {k}] weight: {why}")
        self.out_features, self.in_features, self.group_size, self.dtype = n, k, g, dtype
        self.q, self.scales, self.zeros = q.cpu(), scales.cpu(), zeros.cpu()  # for dequantize()
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.cpu().to(torch.int32), 1)  # [out, in/2]
        s, z = scales.float().cpu(), zeros.float().cpu()
        self.scales_and_zeros = torch.stack((s, (8 - z) * s), -1).transpose(0, 1).contiguous().to(dtype)  # [G, out, 2]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), self.packed, self.group_size,
                                                          self.scales_and_zeros)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``w_hat`` ``[out, in]`` (float32 arithmetic, returned in ``dtype``, default the activation dtype)."""
        g = self.group_size
        w = (self.q.float() - self.zeros.float().repeat_interleave(g, 1)) * self.scales.float().repeat_interleave(g, 1)
        return w.to(dtype or self.dtype)

    def route(self, m: int) -> tuple[str, str]:
        """``(kernel, why)`` for a call of ``m`` rows (the route table's row)."""
        return self.name, getattr(self, "route_why", "")

    def nbytes(self) -> int:
        """Bytes a matmul reads: 4-bit codes plus one scale and one zero per group (activation dtype)."""
        return self.packed.numel() + self.scales_and_zeros.numel() * self.scales_and_zeros.element_size()


class FewRows:
    """``inner(x)`` for calls of at most ``max_rows`` rows, ``F.linear(x, w)`` with ``w`` = ``inner``'s weight
    dequantized once (``[out, in]`` in ``dtype``) for more. ``nbytes`` counts ``inner``'s format (what a decode
    step reads); the copy is held in memory as well."""

    def __init__(self, inner, dtype: torch.dtype, max_rows: int):
        self.inner, self.max_rows = inner, int(max_rows)
        self.w = inner.dequantize(dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) if x.shape[0] <= self.max_rows else F.linear(x, self.w)

    def route(self, m: int) -> tuple[str, str]:
        """``(kernel, why)`` for a call of ``m`` rows: ``inner``'s up to ``max_rows``, the copy above."""
        if m <= self.max_rows:
            return self.inner.route(m)[0], getattr(self, "route_why", "")
        return "dequant", f"{m} rows > cpu_int_max_rows={self.max_rows}: the dequantized copy (F.linear)"

    def nbytes(self) -> int:
        return self.inner.nbytes()
