"""FP8 Linear for the engine: E4M3 weights with per-channel scales, activations quantized per token at run time,
the product on ``torch._scaled_mm`` (FP8 tensor cores; CUDA compute capability >= 8.9: Ada, Hopper, Blackwell).

The scheme is llm-compressor's ``FP8_DYNAMIC`` (the weight rule of
:func:`workbench.quant.floatref.weight_fp8` ``"channel"``, the activation rule of
:func:`workbench.quant.floatref.act_fp8_per_token`), run as vLLM's ``Fp8LinearOp`` runs it with per-token
activation scales: ``y = (q_x @ q_w^T) * s_x[m] * s_w[n]``, the two scale vectors applied in the matmul's epilogue
(``torch._scaled_mm(scale_a=[M, 1], scale_b=[1, N])``, "row-wise" scaling). Every op is a plain tensor op on
fixed shapes, so the whole matmul (quantization included) is captured in the engine's CUDA graphs.

Hook into the engine (a call on a built engine; the runtime conversion does not apply it):
``to_fp8(engine.w)`` replaces each decoder layer's dense matmuls (qkv, o, gate_up, down) by :class:`Fp8Linear`
and relabels them; call it before the first step (before graphs are captured), with the fused-GEMV path off
(``engine.set_fused_gemv(False)``: those kernels read the bf16 weight directly). ``lm_head`` stays bf16 (as
llm-compressor's ``ignore=["lm_head"]``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["FP8_MIN_CAPABILITY", "Fp8Linear", "fp8_supported", "quantize_per_token", "to_fp8"]

FP8_MIN_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.x, 12.x)
E4M3_MAX = 448.0  # OFP8 E4M3 largest normal
MIN_SCALE = 1.0 / (E4M3_MAX * 512.0)  # vLLM's per-token scale floor (scaled_fp8_quant): an all-zero row stays finite


def fp8_supported(device) -> tuple[bool, str]:
    """``(ok, why)``: whether ``torch._scaled_mm`` runs FP8 on ``device`` (CUDA, capability >= 8.9)."""
    d = torch.device(device)
    if d.type != "cuda" or not torch.cuda.is_available():
        return False, f"no FP8 matmul on {d.type}: torch._scaled_mm needs a CUDA GPU of compute capability >= 8.9"
    cc = torch.cuda.get_device_capability(d)
    if cc < FP8_MIN_CAPABILITY:
        return False, f"compute capability {cc[0]}.{cc[1]} < 8.9: no FP8 tensor cores on {torch.cuda.get_device_name(d)}"
    return True, ""


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` ``[M, K]`` -> ``(q float8_e4m3fn [M, K], s float32 [M, 1])`` with ``x ~= q * s``, ``s = amax(row) / 448``
    (floored at :data:`MIN_SCALE`); round to nearest even by torch's float8 cast after clamping to +-448."""
    s = (x.abs().amax(dim=-1, keepdim=True).float() / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (x.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, s


class Fp8Linear:
    """``y = x @ W^T`` with ``W ~= q_w * s_w`` (E4M3 ``[N, K]``, float32 ``s_w [N]``) and ``x`` quantized per token.

    Args:
        w: ``[N, K]`` float weight to quantize (per output channel, ``s_w = amax(row) / 448``), or ``None`` with
            ``q_w`` / ``s_w`` given.
        out_dtype: output dtype (the engine's, bfloat16).
        emulate: compute in float32 from the dequantized operands (any device; the reference the tests use);
            ``False`` runs ``torch._scaled_mm`` and needs :func:`fp8_supported`.
    Raises ``ValueError`` on a device without FP8 (naming why) when not emulating, or K / N not multiples of 16
    (``torch._scaled_mm``'s requirement)."""

    def __init__(self, w: torch.Tensor | None, out_dtype=torch.bfloat16, emulate: bool = False,
                 q_w: torch.Tensor | None = None, s_w: torch.Tensor | None = None):
        if w is not None:
            wf = w.float()
            s_w = (wf.abs().amax(dim=1) / E4M3_MAX).clamp(min=torch.finfo(torch.float32).eps)
            q_w = (wf / s_w[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        n, k = q_w.shape
        if not emulate:
            ok, why = fp8_supported(q_w.device)
            if not ok:
                raise ValueError(f"Fp8Linear: {why}; pass emulate=True for the float32 reference")
            if n % 16 or k % 16:
                raise ValueError(f"Fp8Linear: torch._scaled_mm needs N and K multiples of 16, got [{n}, {k}]")
        self.q_w, self.s_w, self.out_dtype, self.emulate = q_w.contiguous(), s_w.float().contiguous(), out_dtype, emulate
        self.wt = self.q_w.t()  # [K, N] column-major, as _scaled_mm takes its second operand
        self.s_w_row = self.s_w.reshape(1, n)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K] -> [..., N]
        lead, k = x.shape[:-1], x.shape[-1]
        q_x, s_x = quantize_per_token(x.reshape(-1, k))
        if self.emulate:
            y = F.linear(q_x.float() * s_x, self.q_w.float() * self.s_w[:, None])
        else:
            y = torch._scaled_mm(q_x, self.wt, scale_a=s_x, scale_b=self.s_w_row, out_dtype=self.out_dtype)
        return y.to(self.out_dtype).reshape(*lead, self.q_w.shape[0])

    def nbytes(self) -> int:
        return self.q_w.numel() + 4 * self.s_w.numel()


def to_fp8(weights, emulate: bool = False) -> dict:
    """Replace, in place, each decoder layer's dense matmuls of ``weights`` (:class:`workbench.engine.weights.
    ModelWeights`) by :class:`Fp8Linear` (quantized from their bf16 weight) and label them
    ``"fp8 e4m3 per-channel x per-token (torch._scaled_mm)"``. Returns the new labels. Raises ``ValueError`` where a
    matmul is not dense (already quantized) or the device has no FP8 (unless ``emulate``)."""
    from workbench.engine.weights import Dense

    label = "fp8 e4m3 per-channel x per-token " + ("(emulated, float32)" if emulate else "(torch._scaled_mm)")
    for i, lw in enumerate(weights.layers):
        for attr, key in (("wqkv", "qkv"), ("wo", "o"), ("wgu", "gate_up"), ("wd", "down")):
            m = getattr(lw, attr)
            if not isinstance(m, Dense):
                raise ValueError(  # noqa: TRY004 - a wrong engine build, named with its fixf"layers.{i}.{key} is {type(m).__name__}, not a dense weight: build the engine in "
                                 "bf16 (no w4a16) before to_fp8")
            setattr(lw, attr, Fp8Linear(m.w, m.w.dtype, emulate))
            weights.labels[f"layers.{i}.{key}"] = label
    return weights.labels
