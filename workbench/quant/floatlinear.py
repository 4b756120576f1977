"""``FloatQuantLinear``: a Linear whose weight is stored in a float format (E4M3, NVFP4, MXFP4) or INT8, and whose
input is quantized the way the real kernel quantizes it (per token at run time, or with a calibrated scale).

``y = act_quant(x) @ W_hat^T + b``: the quality figures of a W8A8 / W4A4 scheme are those of the kernels
(vLLM's ``CompressedTensorsW8A8Fp8``, ``...W4A4Fp4``: the activation is quantized at every Linear input),
not those of weight-only quantization. The rules are :mod:`workbench.quant.floatref`'s.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import floatref as R

__all__ = ["FloatQuantLinear"]


class FloatQuantLinear(torch.nn.Module):
    """Weight in ``weight_kind`` storage, activation rule ``act_kind`` (``None``: weight-only).

    Buffers (all counted by :func:`workbench.quant.footprint`):

    * ``weight_q``: ``float8_e4m3fn [out, in]`` (FP8 kinds), ``int8 [out, in]`` (``int8``), or ``uint8 [out, in/2]``
      (two E2M1 codes a byte, ``nvfp4`` / ``mxfp4``);
    * ``weight_scale``: float32 ``[1]`` / ``[out, 1]`` / ``[ceil(out/128), ceil(in/128)]`` (FP8 tensor / channel /
      block; INT8 ``[out, 1]``), ``float8_e4m3fn [out, in/16]`` (NVFP4), ``uint8 [out, in/32]`` E8M0 (MXFP4);
    * ``weight_global_scale`` float32 ``[1]`` (NVFP4; else empty);
    * ``input_scale`` float32 ``[1]`` (static FP8: ``amax / 448`` of the calibration inputs; else empty);
    * ``input_global_scale`` float32 ``[1]`` (NVFP4 activations: ``448 * 6 / amax``; else empty).

    The dequantized weight is cached (not a buffer) after the first forward.
    """

    def __init__(self, weight_kind: str, tensors: dict, shape: tuple[int, int], act_kind: str | None,
                 bias: torch.Tensor | None = None, input_scale: torch.Tensor | None = None,
                 input_global_scale: torch.Tensor | None = None, mx_rule: str = "llm-compressor", name: str = ""):
        super().__init__()
        self.out_features, self.in_features = int(shape[0]), int(shape[1])
        self.weight_kind, self.act_kind, self.mx_rule, self.name = weight_kind, act_kind, mx_rule, name
        empty = torch.empty(0, dtype=torch.float32)
        self.register_buffer("weight_q", tensors["q"].contiguous())
        self.register_buffer("weight_scale", tensors["scale"].contiguous())
        self.register_buffer("weight_global_scale", tensors.get("global_scale", empty))
        self.register_buffer("input_scale", empty if input_scale is None else input_scale.float().reshape(1))
        self.register_buffer("input_global_scale",
                             empty if input_global_scale is None else input_global_scale.float().reshape(1))
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
        self._w = None

    def tensors(self) -> dict:
        """The stored weight tensors as :func:`workbench.quant.floatref.dequantize_weight` takes them."""
        t = {"q": self.weight_q, "scale": self.weight_scale}
        if self.weight_global_scale.numel():
            t["global_scale"] = self.weight_global_scale
        return t

    def effective_weight(self) -> torch.Tensor:
        """float32 ``[out, in]``: the dequantized weight (what the layer multiplies the quantized input by)."""
        return R.dequantize_weight(self.weight_kind, self.tensors(), (self.out_features, self.in_features))

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in]`` fake-quantized by this layer's activation rule (unchanged when weight-only)."""
        k = self.act_kind
        if k is None:
            return x
        if k == "fp8_token":
            return R.act_fp8_per_token(x)
        if k == "fp8_static":
            return R.act_fp8_static(x, self.input_scale.to(x.device))
        if k == "fp8_group128":
            return R.act_fp8_group(x, 128)
        if k == "int8_token":
            return R.act_int8_per_token(x)
        if k == "nvfp4":
            return R.act_nvfp4(x, self.input_global_scale.to(x.device))
        if k == "mxfp4":
            return R.act_mxfp4(x, self.mx_rule)
        raise ValueError(f"{self.name}: unknown activation rule {k!r}")

    def storage_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.buffers())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., in] -> [..., out]
        if self._w is None or self._w.device != x.device or self._w.dtype != x.dtype:
            self._w = self.effective_weight().to(x.device, x.dtype)
        return F.linear(self.quantize_input(x), self._w, None if self.bias is None else self.bias.to(x.dtype))

    def _apply(self, fn, recurse=True):  # .to()/.cuda(): rebuild the cached weight on the device
        self._w = None
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, weight={self.weight_kind}, "
                f"act={self.act_kind or 'none'}")
