"""Reference quantizers of the float formats (and W8A8 INT8), one readable function per weight or activation rule.

Each rule is the one llm-compressor 0.14 / compressed-tensors 0.19 apply for the scheme of that name
(``compressed_tensors.quantization.quant_scheme``), written out so that it can be read beside its source and
tested against the library bit for bit (``tests/quant/test_floatfmt_llmc.py``):

* scale of a symmetric range (``calculate_qparams``): ``s = amax / (range / 2)`` with ``range = q_max - q_min``:
  ``amax / 448`` for E4M3, ``amax / 6`` for E2M1, ``amax / 127.5`` for INT8 (its range is -128..127); a zero
  scale becomes the scale dtype's epsilon (``_get_dtype_eps``: 0.125 for an E4M3 scale);
* quantize (``_quantize``): ``clamp(x / s, q_min, q_max)`` then the format's round to nearest even
  (:func:`workbench.quant.floatfmt.round_to_format`; ``torch.round`` for INT8); dequantize ``q * s``;
* NVFP4 (NVIDIA, "Introducing NVFP4", 2025; compressed-tensors ``NVFP4``): a float32 global scale
  ``g = 448 * 6 / amax(tensor)`` (``generate_gparam``), per 16 values ``s = e4m3(g * amax16 / 6)`` stored in
  E4M3, applied as ``s / g``;
* MXFP4 (OCP MX v1.0 section 6.3): one E8M0 power of two per 32 values. The spec's shared exponent is
  ``floor(log2(amax32)) - 2`` (2 = emax of E2M1), which clips group maxima in ``[1.5, 2) * 2^k`` to 6 (``rule="ocp"``);
  compressed-tensors (``generate_mx_scales``, after vLLM's ``tests/quantization/reference_mxfp4.py``) first
  rounds ``amax32`` to a power of two, up when its mantissa is >= 1.75 (``rule="llm-compressor"``, the default:
  the exported checkpoints and vLLM's kernels use it).
"""

from __future__ import annotations

import torch

from .floatfmt import (
    E2M1,
    E4M3,
    e2m1_codes,
    e2m1_values,
    e8m0_decode,
    e8m0_encode,
    pack_e2m1,
    round_to_format,
    unpack_e2m1,
)

__all__ = ["MX_RULES", "act_fp8_group", "act_fp8_per_token", "act_fp8_static", "act_int8_per_token", "act_mxfp4",
           "act_nvfp4", "dequantize_weight", "mx_exponent", "nvfp4_global_scale", "weight_fp8", "weight_int8",
           "weight_mxfp4", "weight_nvfp4"]

E4M3_EPS = 0.125  # compressed-tensors _get_dtype_eps(float8_e4m3fn): a zero E4M3 scale is replaced by this
MX_RULES = ("llm-compressor", "ocp")


def _nonzero(s: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``s`` with zeros replaced by ``eps`` (default the float32 epsilon), as ``calculate_qparams`` step 5."""
    return torch.where(s == 0, torch.full_like(s, torch.finfo(s.dtype).eps if eps is None else eps), s)


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """Saturate to +-448, round to E4M3 (nearest even). The fast path is torch's ``float8_e4m3fn`` cast (round to
    nearest even; tests hold it equal to :func:`round_to_format` on every midpoint and on random values)."""
    return torch.clamp(x, -E4M3.max, E4M3.max).to(torch.float8_e4m3fn).float()


def _e2m1(x: torch.Tensor) -> torch.Tensor:
    return round_to_format(torch.clamp(x, -E2M1.max, E2M1.max), E2M1)


# -- weights ---------------------------------------------------------------------------------------------
def weight_fp8(w: torch.Tensor, strategy: str = "channel", block: tuple[int, int] = (128, 128)) -> dict:
    """E4M3 weights with a float32 scale per tensor, per output channel or per ``block`` (DeepSeek-V3's
    128 x 128, llm-compressor ``FP8_BLOCK``; a partial edge block is zero-padded, as ``_process_block``).

    Args: ``w`` ``[out, in]`` float; ``strategy`` ``"tensor" | "channel" | "block"``.
    Returns: ``{"q": float8_e4m3fn [out, in], "scale": float32 [1] | [out, 1] | [ceil(out/bh), ceil(in/bw)]}``,
    ``w ~= q * scale`` (the block's scale broadcast over it).
    Raises: ``ValueError`` for another strategy."""
    w = w.float()
    out_f, in_f = w.shape
    if strategy == "tensor":
        s = _nonzero((w.abs().amax() / E4M3.max).reshape(1))
        return {"q": _e4m3(w / s).to(torch.float8_e4m3fn), "scale": s}
    if strategy == "channel":
        s = _nonzero(w.abs().amax(dim=1, keepdim=True) / E4M3.max)  # [out, 1]
        return {"q": _e4m3(w / s).to(torch.float8_e4m3fn), "scale": s}
    if strategy != "block":
        raise ValueError(f"weight_fp8 strategy={strategy!r}: use 'tensor', 'channel' or 'block'")
    bh, bw = block
    nb_o, nb_i = -(-out_f // bh), -(-in_f // bw)
    wp = torch.nn.functional.pad(w, (0, nb_i * bw - in_f, 0, nb_o * bh - out_f))
    blocks = wp.reshape(nb_o, bh, nb_i, bw)  # [block row, row in block, block col, col in block]
    s = _nonzero(blocks.abs().amax(dim=(1, 3)) / E4M3.max)  # [nb_o, nb_i]
    q = _e4m3(blocks / s[:, None, :, None]).reshape(nb_o * bh, nb_i * bw)[:out_f, :in_f]
    return {"q": q.to(torch.float8_e4m3fn), "scale": s}


def weight_int8(w: torch.Tensor) -> dict:
    """Symmetric INT8 per output channel (llm-compressor ``W8A8``): ``s = amax / 127.5``, ``q = round(clamp(w / s,
    -128, 127))``. Returns ``{"q": int8 [out, in], "scale": float32 [out, 1]}``."""
    w = w.float()
    s = _nonzero(w.abs().amax(dim=1, keepdim=True) / 127.5)
    return {"q": torch.round(torch.clamp(w / s, -128, 127)).to(torch.int8), "scale": s}


def nvfp4_global_scale(amax: torch.Tensor) -> torch.Tensor:
    """float32 ``[1]``: ``448 * 6 / amax`` (the largest E4M3 scale times the largest E2M1 value over the
    tensor's absolute maximum: compressed-tensors ``generate_gparam``); 1 where ``amax`` is 0 or not finite."""
    amax = torch.clamp(amax.float().reshape(1), min=torch.finfo(torch.float32).tiny)
    g = E4M3.max * E2M1.max / amax
    return torch.nan_to_num(g, nan=1.0, posinf=1.0, neginf=1.0)


def weight_nvfp4(w: torch.Tensor, global_scale: torch.Tensor | None = None, group: int = 16) -> dict:
    """NVFP4 weights: E2M1 values, an E4M3 scale per ``group`` (16) consecutive inputs, a float32 global scale.

    Args: ``w`` ``[out, in]`` (``in`` divisible by ``group``); ``global_scale`` float32 ``[1]`` (default
    :func:`nvfp4_global_scale` of ``w``; llm-compressor shares one across q/k/v and across gate/up).
    Returns: ``{"q": uint8 [out, in/2] packed E2M1 codes, "scale": float8_e4m3fn [out, in/group],
    "global_scale": float32 [1]}``; ``w ~= e2m1(q) * scale / global_scale``.
    Raises: ``ValueError`` when ``group`` does not divide ``in``."""
    w = w.float()
    out_f, in_f = w.shape
    if in_f % group:
        raise ValueError(f"NVFP4 needs in_features divisible by {group}; got {in_f} (skip this layer)")
    g = nvfp4_global_scale(w.abs().amax()) if global_scale is None else global_scale.float().reshape(1)
    wg = w.reshape(out_f, in_f // group, group)
    s = _e4m3((wg.abs().amax(dim=-1) / E2M1.max) * g)  # [out, n_groups], on the E4M3 grid
    s = _nonzero(s, E4M3_EPS)
    v = _e2m1(wg / (s / g)[..., None]).reshape(out_f, in_f)
    return {"q": pack_e2m1(e2m1_codes(v)), "scale": s.to(torch.float8_e4m3fn), "global_scale": g}


def mx_exponent(amax: torch.Tensor, rule: str = "llm-compressor", elem_emax: int = 2) -> torch.Tensor:
    """Shared exponent ``k`` (the scale ``2^k``) of MX groups with maxima ``amax`` (float32).

    ``rule="ocp"``: ``floor(log2(amax)) - elem_emax`` (OCP MX v1.0 section 6.3, Algorithm 1);
    ``"llm-compressor"``: ``amax`` first rounded to a power of two, up when its mantissa is >= 1.75
    (compressed-tensors ``round_to_power_2``: adds ``2^21`` to the float32 bits and masks the mantissa), then the
    same. ``elem_emax``: 2 for E2M1. A zero maximum gives the smallest scale (E8M0 code 0).
    Raises ``ValueError`` for an unknown rule."""
    if rule not in MX_RULES:
        raise ValueError(f"MX scale rule {rule!r} is unknown; use one of {MX_RULES}")
    a = amax.float()
    if rule == "llm-compressor":
        bits = a.contiguous().view(torch.int32)
        a = ((bits + (1 << 21)) & ~((1 << 23) - 1)).view(torch.float32)
    _, e = torch.frexp(a)
    k = (e - 1 - elem_emax).float()
    return torch.where(a > 0, k, torch.full_like(k, -127.0))


def weight_mxfp4(w: torch.Tensor, rule: str = "llm-compressor", group: int = 32) -> dict:
    """MXFP4 weights: E2M1 values, an E8M0 scale per ``group`` (32) consecutive inputs (OCP MX v1.0).

    Returns ``{"q": uint8 [out, in/2] packed E2M1 codes, "scale": uint8 [out, in/group] E8M0 codes}``;
    ``w ~= e2m1(q) * 2^(scale - 127)``. Raises ``ValueError`` when ``group`` does not divide ``in``."""
    w = w.float()
    out_f, in_f = w.shape
    if in_f % group:
        raise ValueError(f"MXFP4 needs in_features divisible by {group}; got {in_f} (skip this layer)")
    wg = w.reshape(out_f, in_f // group, group)
    code = e8m0_encode(mx_exponent(wg.abs().amax(dim=-1), rule))
    v = _e2m1(wg / e8m0_decode(code)[..., None]).reshape(out_f, in_f)
    return {"q": pack_e2m1(e2m1_codes(v)), "scale": code}


def dequantize_weight(kind: str, t: dict, shape: tuple[int, int], block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    """float32 ``[out, in]`` weight of the stored tensors ``t`` of ``kind`` (``fp8_tensor``, ``fp8_channel``,
    ``fp8_block`` with its ``block``, ``int8``, ``nvfp4``, ``mxfp4``). Raises ``ValueError`` for another kind."""
    out_f, in_f = shape
    if kind in ("fp8_tensor", "fp8_channel", "int8"):
        return t["q"].float() * t["scale"].float()
    if kind == "fp8_block":
        full = t["scale"].float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:out_f, :in_f]
        return t["q"].float() * full
    v = e2m1_values(unpack_e2m1(t["q"]))
    if kind == "nvfp4":
        s = t["scale"].float() / t["global_scale"].float()
    elif kind == "mxfp4":
        s = e8m0_decode(t["scale"])
    else:
        raise ValueError(f"unknown weight kind {kind!r}")
    return v * s.repeat_interleave(in_f // s.shape[1], 1)


# -- activations (fake quantization: quantize then dequantize, in float32, back in x's dtype) -------------
def act_fp8_per_token(x: torch.Tensor) -> torch.Tensor:
    """E4M3 per token, scale ``amax(token) / 448`` computed at run time (``FP8_DYNAMIC``; ``x`` ``[..., in]``)."""
    xf = x.float()
    s = _nonzero(xf.abs().amax(dim=-1, keepdim=True) / E4M3.max)
    return (_e4m3(xf / s) * s).to(x.dtype)


def act_fp8_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """E4M3 with one calibrated scale per tensor (``FP8``: ``scale = amax(calibration inputs) / 448``)."""
    xf = x.float()
    s = scale.float()
    return (_e4m3(xf / s) * s).to(x.dtype)


def act_fp8_group(x: torch.Tensor, group: int = 128) -> torch.Tensor:
    """E4M3 per token and per ``group`` input columns, dynamic (``FP8_BLOCK``'s activations, DeepSeek-V3's 1 x 128).
    Where ``group`` does not divide ``in`` the last group is narrower, as if ``in`` were zero-padded to a multiple of
    ``group`` (what the weight's 128 x 128 blocks assume; compressed-tensors' ``_process_group`` refuses such a width,
    a block-FP8 kernel needs the padding)."""
    k = x.shape[-1]
    pad = -k % group
    xg = torch.nn.functional.pad(x.float(), (0, pad)).unflatten(-1, ((k + pad) // group, group))
    s = _nonzero(xg.abs().amax(dim=-1, keepdim=True) / E4M3.max)
    return (_e4m3(xg / s) * s).flatten(-2)[..., :k].to(x.dtype)


def act_int8_per_token(x: torch.Tensor) -> torch.Tensor:
    """Symmetric INT8 per token, dynamic (``W8A8``): ``s = amax / 127.5``, ``round(clamp(x / s, -128, 127)) * s``."""
    xf = x.float()
    s = _nonzero(xf.abs().amax(dim=-1, keepdim=True) / 127.5)
    return (torch.round(torch.clamp(xf / s, -128, 127)) * s).to(x.dtype)


def act_nvfp4(x: torch.Tensor, global_scale: torch.Tensor, group: int = 16) -> torch.Tensor:
    """NVFP4 activations: E4M3 scales per token and per 16 inputs computed at run time, under a calibrated
    float32 global scale (``NVFP4``'s ``dynamic="local"``: ``global_scale = 448 * 6 / amax(calibration)``)."""
    g = global_scale.float()
    xg = x.float().unflatten(-1, (x.shape[-1] // group, group))
    s = _nonzero(_e4m3((xg.abs().amax(dim=-1, keepdim=True) / E2M1.max) * g), E4M3_EPS)
    return (_e2m1(xg / (s / g)) * (s / g)).flatten(-2).to(x.dtype)


def act_mxfp4(x: torch.Tensor, rule: str = "llm-compressor", group: int = 32) -> torch.Tensor:
    """MXFP4 activations: an E8M0 scale per token and per 32 inputs, at run time (``MXFP4``)."""
    xg = x.float().unflatten(-1, (x.shape[-1] // group, group))
    s = e8m0_decode(e8m0_encode(mx_exponent(xg.abs().amax(dim=-1, keepdim=True), rule)))
    return (_e2m1(xg / s) * s).flatten(-2).to(x.dtype)
