"""Quantized-checkpoint tensor layouts <-> the workbench's ``QuantLinear`` integers.

The workbench stores unsigned codes ``q`` in ``[0, 2^b - 1]`` with ``W_hat = (q - z) * s`` per group
of consecutive input features (``workbench.quant.rtn``). Each format's layout, with its source:

* **compressed-tensors** ``pack-quantized`` (llm-compressor; ``compressed_tensors.compressors.
  pack_quantized``): ``weight_packed`` int32 ``[out, ceil(in * b / 32)]`` holding SIGNED codes
  ``q - 2^(b-1)`` offset back by ``pack_to_int32``; ``weight_scale`` ``[out, n_groups]``;
  ``weight_zero_point`` int32 packed along dim 0 (signed ``z - 2^(b-1)``; absent when symmetric,
  where ``z = 2^(b-1)``); ``weight_shape`` ``[2]``. Dequantization is ``(q_s - z_s) * s``
  (``compressed_tensors.quantization.lifecycle.forward.dequantize``). ``int-quantized``: ``weight``
  int8 ``[out, in]`` signed codes. Unpacked with the library's own ``unpack_from_int32``.
* **AutoAWQ GEMM** (``awq/modules/linear/gemm.py`` ``WQLinear_GEMM``): ``qweight`` int32
  ``[in, out / 8]``, ``qzeros`` int32 ``[n_groups, out / 8]``, ``scales`` fp16 ``[n_groups, out]``,
  eight 4-bit values per int32 in the order ``[0, 2, 4, 6, 1, 3, 5, 7]``; ``W = (q - z) * s``.
  Converted to compressed-tensors with the library's ``AutoAWQConverter`` (compressed-tensors 0.19,
  ``entrypoints/convert/converters/autoawq.py``), then read as above.
* **GPTQ** (AutoGPTQ ``auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py`` ``QuantLinear.pack`` /
  ``forward``): ``qweight`` int32
  ``[in * b / 32, out]`` packing ``32 / b`` consecutive INPUT rows per int32, lowest bits first;
  ``qzeros`` int32 ``[n_groups, out * b / 32]`` packing consecutive output columns; ``scales``
  ``[n_groups, out]``; ``g_idx`` int32 ``[in]`` (group of each input feature). The zero-point
  convention depends on ``checkpoint_format``: ``"gptq"`` (v1, AutoGPTQ and every checkpoint
  before GPTQModel's v2) stores ``z - 1`` (``pack``: ``zeros -= 1``) and dequantizes with
  ``z = stored + 1`` element-wise (``forward``: ``zeros = zeros + 1``), so a true zero point of 0 is
  stored as -1 -> nibble ``2^b - 1`` and read back as ``2^b`` (kept here exactly as AutoGPTQ reads it);
  ``"gptq_v2"`` (GPTQModel) stores ``z`` itself (``gptqmodel/utils/model.py``
  ``convert_gptq_v1_to_v2_format_module`` adds ``0x11111111`` per 4-bit int32 to turn v1 into v2).
"""

from __future__ import annotations

import torch

from workbench.quant.qlinear import QuantLinear

__all__ = ["QuantTensors", "from_autoawq", "from_compressed_tensors", "from_gptq", "to_qlinear"]


class QuantTensors(dict):
    """``codes`` uint8 ``[out, in]`` (unsigned), ``scales`` ``[out, n_groups]``, ``zeros`` uint8
    ``[out, n_groups]`` or ``None`` (symmetric: ``2^(b-1)``), ``bits``, ``group_size`` (width, or
    ``None`` for one group per row) and ``declared_group_size`` (the checkpoint's, ``-1`` per channel)."""


def _group_width(in_features: int, n_groups: int, group_size) -> int | None:
    if n_groups == 1:
        return None
    g = int(group_size) if group_size and group_size > 0 else -(-in_features // n_groups)
    if -(-in_features // g) != n_groups:
        raise ValueError(f"{n_groups} scale groups do not match in_features={in_features} with group_size={g}")
    return g


def from_compressed_tensors(t: dict[str, torch.Tensor], args, fmt: str = "pack-quantized") -> QuantTensors:
    """``QuantTensors`` from one module's compressed-tensors tensors (local names ``weight_packed``,
    ``weight_scale``, ``weight_zero_point``, ``weight_shape`` or ``weight`` for ``int-quantized``) and
    its ``compressed_tensors.quantization.QuantizationArgs``.

    Raises ``ValueError`` for what ``QuantLinear`` cannot hold: float types, activation ordering with
    a ``weight_g_idx`` that is not ``i // group_size``, block / tensor-group strategies.
    """
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    b = int(args.num_bits)
    if str(args.type).lower().endswith("float"):
        raise ValueError(f"float weights ({args.type}) are not integer codes; QuantLinear holds INT2-INT8 only")
    strategy = str(getattr(args.strategy, "value", args.strategy))
    if strategy not in ("group", "channel", "tensor"):
        raise ValueError(f"strategy {strategy!r} is not supported (group, channel or tensor)")
    scale = t["weight_scale"]
    if fmt == "pack-quantized":
        shape = torch.Size(int(x) for x in t["weight_shape"])
        signed = unpack_from_int32(t["weight_packed"], b, shape)
    else:
        signed, shape = t["weight"].to(torch.int8), t["weight"].shape
    if scale.ndim == 0 or scale.numel() == 1:
        scale = scale.reshape(1, 1)
    elif scale.ndim == 1:
        scale = scale[:, None]
    off = 1 << (b - 1)
    zeros = None
    if not args.symmetric:
        zp = t["weight_zero_point"]
        if fmt == "pack-quantized" and zp.dtype == torch.int32 and strategy in ("group", "channel"):
            zp = unpack_from_int32(zp, b, torch.Size((shape[0], scale.shape[-1])), packed_dim=0)
        zeros = (zp.reshape(scale.shape).to(torch.int16) + off).to(torch.uint8)
    if "weight_g_idx" in t:
        g_idx = t["weight_g_idx"].long()
        gw = int(args.group_size)
        if not torch.equal(g_idx, torch.arange(shape[1], device=g_idx.device) // gw):
            raise ValueError("activation-ordered groups (weight_g_idx is not i // group_size) are not supported: "
                             "QuantLinear groups consecutive input features; re-export with actorder=None/'weight'")
    codes = (signed.to(torch.int16) + off).to(torch.uint8)
    return QuantTensors(codes=codes, scales=scale, zeros=zeros, bits=b,
                        group_size=_group_width(shape[1], scale.shape[1], args.group_size),
                        declared_group_size=int(args.group_size) if strategy == "group" else -1)


def from_autoawq(qweight: torch.Tensor, qzeros: torch.Tensor | None, scales: torch.Tensor, bits: int = 4,
                 group_size: int = 128, zero_point: bool = True) -> QuantTensors:
    """``QuantTensors`` from one AutoAWQ GEMM layer (``qweight`` int32 ``[in, out/8]``, ``qzeros`` int32
    ``[in/g, out/8]``, ``scales`` ``[in/g, out]``), via compressed-tensors' ``AutoAWQConverter``.
    Raises ``ValueError`` for bits other than 4 (the format's only width)."""
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    from compressed_tensors.quantization import QuantizationArgs

    conv = AutoAWQConverter(bits=bits, group_size=group_size, zero_point=zero_point)
    tensors = {"m.qweight": qweight, "m.scales": scales}
    if qzeros is not None:
        tensors["m.qzeros"] = qzeros
    out = conv.process(tensors)
    args = QuantizationArgs(num_bits=bits, symmetric=not zero_point, strategy="group", group_size=group_size)
    return from_compressed_tensors({k[2:]: v for k, v in out.items()}, args)


def _unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 ``[n * b / 32, m]`` -> ``[n, m]``: value ``i`` of each int32 in bits ``b*i .. b*i+b-1``."""
    per = 32 // bits
    shifts = torch.arange(0, 32, bits, device=packed.device, dtype=torch.int32)
    v = (packed.unsqueeze(1) >> shifts[None, :, None]) & ((1 << bits) - 1)  # [rows, per, m]
    return v.reshape(packed.shape[0] * per, packed.shape[1])


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor | None,
              bits: int, group_size: int, checkpoint_format: str = "gptq") -> QuantTensors:
    """``QuantTensors`` from one GPTQ layer (layout and zero-point conventions in the module docstring).

    ``checkpoint_format``: ``"gptq"`` (v1: stored zero = z - 1) or ``"gptq_v2"``. Symmetric
    checkpoints store zeros too (``2^(b-1)``, i.e. ``0x77777777`` in v1), so zeros are always kept.
    Raises ``ValueError`` for 3-bit packing, an unknown format, or act-order ``g_idx``
    (``desc_act=True``) that is not ``i // group_size``.
    """
    if bits not in (2, 4, 8):
        raise ValueError(f"GPTQ bits={bits}: only 2, 4 and 8 bits pack whole values into int32 (3-bit is not "
                         "supported)")
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise ValueError(f"checkpoint_format={checkpoint_format!r} is unknown; GPTQ uses 'gptq' (v1) or 'gptq_v2'")
    w = _unpack_rows(qweight.to(torch.int32), bits).T  # [out, in]
    z = _unpack_rows(qzeros.to(torch.int32).T, bits).T  # [n_groups, out]
    if checkpoint_format == "gptq":
        z = z + 1  # AutoGPTQ forward: zeros = zeros + 1 (no wrap: a stored -1 reads as 2^b)
    in_f = w.shape[1]
    g = in_f if group_size in (-1, None) else int(group_size)
    if g_idx is not None and not torch.equal(g_idx.long().cpu(), torch.arange(in_f) // g):
        raise ValueError("act-order GPTQ (desc_act=True, g_idx is not i // group_size) is not supported: "
                         "QuantLinear groups consecutive input features; use a desc_act=False checkpoint")
    s = scales.T.contiguous()
    z = z.T.contiguous()
    # a v1 zero of 2^b (stored -1) does not fit the b-bit range: keep it exactly as a float zero point
    z = z.to(s.dtype) if int(z.max()) > (1 << bits) - 1 else z.to(torch.uint8)
    return QuantTensors(codes=w.to(torch.uint8).contiguous(), scales=s, zeros=z, bits=bits,
                        group_size=_group_width(in_f, s.shape[1], g),
                        declared_group_size=-1 if group_size in (-1, None) else int(group_size))


def to_qlinear(qt: QuantTensors, bias: torch.Tensor | None = None, compute_dtype: torch.dtype = torch.float32,
               name: str = ""):
    """A :class:`workbench.quant.QuantLinear` holding ``qt``'s integers (zero points all equal to
    ``2^(b-1)`` become the symmetric layout, which stores none)."""
    zeros = qt["zeros"]
    if zeros is not None and not zeros.is_floating_point() and bool((zeros == 1 << (qt["bits"] - 1)).all()):
        zeros = None  # every zero point is 2^(b-1): the symmetric layout, lossless
    return QuantLinear(qt["codes"], qt["scales"], zeros, qt["bits"], bias=bias, compute_dtype=compute_dtype,
                       name=name, group_width=qt["group_size"])
