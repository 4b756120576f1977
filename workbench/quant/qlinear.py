"""``QuantLinear``: a Linear layer whose weight is stored as packed integer codes + scales + zeros.

Its ``forward`` dequantizes (the correctness path, any device). The engine runs the integers themselves:
:func:`workbench.quant.convert_for_runtime` (``Engine.from_hf``) reads :meth:`QuantLinear.quant_params`
and builds the W4A16 / W8A16 matmuls (:mod:`workbench.engine.runtime`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .packing import pack, unpack
from .rtn import DTYPES, dequantize_codes

__all__ = ["QuantLinear"]


class QuantLinear(torch.nn.Module):
    """Weight-only quantized Linear: ``y = (x / a) @ W_hat^T + b``.

    Storage (buffers, all counted by ``workbench.quant.footprint``):

    * ``qweight`` ``uint8`` ``[out, packed_cols(in, bits)]``: unsigned codes packed to ``bits`` bits each
      (INT8 one per byte, INT4 two, INT2 four, INT3/5/6/7 as a bit stream of 8 codes in ``bits``
      bytes; see ``workbench.quant.packing``);
    * ``scales`` ``[out, ceil(in/g)]`` (group), ``[out, 1]`` (per channel) or ``[1, 1]`` (per tensor), in
      ``scale_dtype``;
    * ``zeros`` ``uint8`` (or ``scale_dtype`` for float zero points), same shape as ``scales``; EMPTY (0 bytes) for symmetric quantization, where the
      zero point is the constant ``2^(bits-1)``;
    * ``input_scale`` ``[in]`` (AWQ only, else empty): the activation-aware per-input-channel scale
      ``a``. AWQ quantizes ``W * a`` and divides the input by ``a``, which is exact in full precision;
      this layer keeps ``a`` inside, and the engine's runtime folds ``1/a`` into the RMSNorm before
      q/k/v and gate/up (as llm-awq's ``apply_scale`` does) or divides the activation.

    ``W_hat = (q - z) * s`` per group. The dequantized weight is cached (not a buffer) after the first
    forward, so repeated forwards cost one matmul; ``clear_cache()`` drops it.
    """

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                 bits: int, bias: torch.Tensor | None = None, input_scale: torch.Tensor | None = None,
                 compute_dtype: torch.dtype = torch.float32, name: str = "", group_width: int | None = None):
        super().__init__()
        out_f, in_f = codes.shape
        self.in_features, self.out_features, self.bits = int(in_f), int(out_f), int(bits)
        self.symmetric = zeros is None
        ng = scales.shape[1]
        # columns per group; the last group may be narrower (partial_groups)
        self.group_width = int(group_width) if group_width and ng > 1 else in_f // ng
        self.name = name
        self.compute_dtype = compute_dtype
        self.register_buffer("qweight", pack(codes, bits))
        self.register_buffer("scales", scales.contiguous())
        empty = torch.empty(0, dtype=torch.uint8, device=codes.device)
        self.register_buffer("zeros", empty if zeros is None else zeros.contiguous())
        a = torch.empty(0, dtype=compute_dtype, device=codes.device) if input_scale is None else input_scale
        self.register_buffer("input_scale", a.to(compute_dtype).contiguous())
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
        self._w = None

    # -- accessors ----------------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """DESIGN.md code: the group width, ``-1`` per channel, ``0`` per tensor."""
        if self.scales.shape[0] == 1 and self.out_features > 1:
            return 0
        return -1 if self.scales.shape[1] == 1 else self.group_width

    def codes(self) -> torch.Tensor:
        """Unsigned integer codes ``uint8`` ``[out, in]``."""
        return unpack(self.qweight, self.bits, self.in_features)

    def zero_points(self) -> torch.Tensor:
        """Zero points ``uint8`` with the shape of ``scales`` (the constant ``2^(bits-1)`` if symmetric)."""
        if self.symmetric:
            return torch.full(self.scales.shape, 1 << (self.bits - 1), dtype=torch.uint8,
                              device=self.scales.device)
        return self.zeros

    def quant_params(self) -> dict:
        """Everything a W4A16 kernel needs, in one layout for every granularity.

        Returns a dict: ``q`` ``uint8`` ``[out, in]`` codes in ``[0, 2^bits - 1]``; ``scales``
        ``[out, ceil(in/g)]`` (per tensor / per channel expanded to ``[out, 1]``); ``zeros`` ``uint8``
        ``[out, ceil(in/g)]``; ``group_size`` ``g`` (``in`` for per tensor / per channel; the last group
        is narrower when ``g`` does not divide ``in``, ``partial_groups=True``); ``bits``;
        ``input_scale`` ``[in]`` or ``None`` (AWQ: compute ``(x / input_scale) @ W_hat^T``).
        ``W_hat[o, i] = (q[o, i] - zeros[o, i // g]) * scales[o, i // g]``.
        """
        s, z = self.scales, self.zero_points()
        if s.shape[0] == 1 and self.out_features > 1:
            s, z = s.expand(self.out_features, -1).contiguous(), z.expand(self.out_features, -1).contiguous()
        return {"q": self.codes(), "scales": s, "zeros": z, "group_size": self.group_width,
                "bits": self.bits, "input_scale": self.input_scale if self.input_scale.numel() else None}

    def dequantize_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``W_hat`` ``[out, in]`` in ``dtype`` (default ``compute_dtype``); the weight the layer applies
        to ``x / input_scale``."""
        return dequantize_codes(self.codes(), self.scales, self.zero_points(), dtype or self.compute_dtype,
                                self.group_width)

    def effective_weight(self) -> torch.Tensor:
        """``W_hat / input_scale`` ``[out, in]`` float32: the weight applied to the raw input ``x``."""
        w = self.dequantize_weight(torch.float32)
        return w / self.input_scale.float() if self.input_scale.numel() else w

    def storage_bytes(self) -> int:
        """Bytes of ``qweight + scales + zeros + input_scale`` (the bias is counted apart)."""
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.zeros, self.input_scale))

    def clear_cache(self) -> None:
        self._w = None

    # -- forward --------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., in] -> [..., out]
        if self._w is None or self._w.device != x.device or self._w.dtype != x.dtype:
            self._w = self.dequantize_weight(x.dtype).to(x.device)
        if self.input_scale.numel():
            x = x / self.input_scale.to(x.dtype)
        return F.linear(x, self._w, None if self.bias is None else self.bias.to(x.dtype))

    def _apply(self, fn, recurse=True):  # .to()/.cuda(): drop the cache so it is rebuilt on the device
        self._w = None
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        g = {0: "per_tensor", -1: "per_channel"}.get(self.group_size, f"group={self.group_size}")
        return (f"in={self.in_features}, out={self.out_features}, bits={self.bits}, {g}, "
                f"{'sym' if self.symmetric else 'asym'}{', awq' if self.input_scale.numel() else ''}")

    @staticmethod
    def scale_dtype(name: str) -> torch.dtype:
        return DTYPES[name]
