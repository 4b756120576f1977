"""W8A16 (weight-only INT8) matmul for the engine: ``y = x @ w_hat.T``, ``w_hat = (q - zero) * scale``.

Codes ``q`` are unsigned ``[0, 2^bits - 1]`` as :class:`workbench.quant.QuantLinear` stores them
(``bits`` 5..8 here; W2-W4 run on :class:`workbench.engine.int4.Int4Linear`), one ``(scale, zero)``
per row (per channel / per tensor) or per group of input columns.

Backends:

* ``"int8pack"`` (one group per row) -- ``torch.ops.aten._weight_int8pack_mm(x, v, s)`` = ``(x @ v.T) * s``
  with signed ``v`` ``int8``, the same op on CPU and CUDA (gpt-fast's ``WeightOnlyInt8Linear`` stores
  the same ``int8`` weight and per-row scale). Integer zero points that keep ``q - zero`` inside
  ``[-128, 127]`` (every symmetric scheme, any W5-W7) are folded into ``v = q - zero``; otherwise
  ``v = q - 128`` and the offset is applied after the matmul:
  ``y = (x @ v.T) * s - (sum_k x_k) * (zero - 128) * s``.
* ``"dequant"`` -- ``F.linear(x, w_hat)`` with ``w_hat`` rebuilt from the ``int8`` codes on every call
  (groups, and the reference for the above). No fused grouped INT8 kernel exists here yet; on CUDA it
  reads the codes and writes a dense weight each call, so it saves memory, not time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BACKENDS = ("int8pack", "dequant")

__all__ = ["BACKENDS", "Int8Linear"]


class Int8Linear:
    """``y = x @ w_hat.T`` for one weight of 5-8-bit codes.

    Args: ``q`` ``[out, in]`` uint8 codes; ``scales``, ``zeros`` ``[out, n_groups]`` (``n_groups`` 1:
    per channel; groups of ``in // n_groups`` columns otherwise); ``dtype`` the activation dtype;
    ``backend`` ``"int8pack"`` (needs one group per row), ``"dequant"`` or ``None`` (int8pack where
    it applies, else dequant). ``x`` ``[N, in]`` -> ``[N, out]`` in ``x.dtype``.
    Raises ValueError for bad shapes or an unknown / inapplicable backend.
    """

    def __init__(self, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype,
                 backend: str | None = None, device=None):
        device = torch.device(device) if device is not None else q.device
        out_f, in_f = q.shape
        ng = scales.shape[1]
        if q.dtype != torch.uint8 or scales.shape != zeros.shape or scales.shape[0] != out_f or in_f % ng:
            raise ValueError(f"q {tuple(q.shape)} {q.dtype}, scales {tuple(scales.shape)}, zeros {tuple(zeros.shape)}: "
                             "need uint8 [out, in] and [out, in // group_size]")
        backend = backend or ("int8pack" if ng == 1 else "dequant")
        if backend not in BACKENDS or (backend == "int8pack" and ng != 1):
            raise ValueError(f"backend={backend!r}: use 'dequant', or 'int8pack' for one group per row "
                             f"(this weight has {ng} groups)")
        self.out_features, self.in_features, self.group_size = out_f, in_f, in_f // ng
        self.backend, self.dtype = backend, dtype
        qi = q.to(device=device, dtype=torch.int16)
        z = zeros.to(device=device, dtype=torch.float32)
        self.scales = scales.to(device=device, dtype=dtype).contiguous()  # [out, G]
        self.offset = None  # [out] (zero - 128) * scale, when the zero point stays outside v
        if backend == "dequant":
            self.v = (qi - 128).to(torch.int8).contiguous()  # [out, in]; w_hat = (v + 128 - z) * s
            self.zeros = (z - 128).to(dtype).contiguous()  # [out, G]
            return
        zi = z.round()
        fits = bool(torch.equal(zi, z)) and int((qi - zi.to(torch.int16)).min()) >= -128 and \
            int((qi - zi.to(torch.int16)).max()) <= 127
        if fits:
            self.v = (qi - zi.to(torch.int16)).to(torch.int8).contiguous()
        else:
            self.v = (qi - 128).to(torch.int8).contiguous()
            self.offset = ((z[:, 0] - 128) * scales[:, 0].to(device).float()).to(dtype)
        self.scale_vec = self.scales[:, 0].contiguous()  # [out]

    def nbytes(self) -> int:
        """Bytes a matmul reads: the ``int8`` weight, the scales, and zero points / offsets if any."""
        extra = [t for t in (self.offset, getattr(self, "zeros", None)) if t is not None]
        return self.v.numel() + sum(t.numel() * t.element_size() for t in [self.scales, *extra])

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``w_hat`` ``[out, in]`` (float32 arithmetic, returned in ``dtype``, default the activation dtype)."""
        s = self.scales.float().repeat_interleave(self.group_size, dim=1)
        if self.backend == "dequant":
            z = self.zeros.float().repeat_interleave(self.group_size, dim=1)
            w = (self.v.float() - z) * s
        else:
            w = self.v.float() * s
            if self.offset is not None:
                w = w - self.offset.float()[:, None]
        return w.to(dtype or self.dtype)

    def route(self, m: int) -> tuple[str, str]:
        """``(kernel, why)`` for a call of ``m`` rows (the route table's row)."""
        why = getattr(self, "route_why", "")
        if self.backend == "dequant":
            return "dequant", why or f"groups of {self.group_size} (int8pack takes one scale per row); per call"
        return "int8pack", why

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "dequant":
            return F.linear(x, self.dequantize(x.dtype))
        y = torch.ops.aten._weight_int8pack_mm(x.contiguous(), self.v, self.scale_vec.to(x.dtype))
        if self.offset is not None:
            y = y - x.sum(-1, keepdim=True) * self.offset.to(x.dtype)
        return y
