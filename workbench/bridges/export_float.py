"""A float-format model (``workbench.quant.floatquant.quantize_float``) out as a compressed-tensors checkpoint, written
the way llm-compressor writes it after ``oneshot``; and back in.

Export: each :class:`~workbench.quant.floatlinear.FloatQuantLinear` becomes an ``nn.Linear`` holding its dequantized
weight, compressed-tensors' ``apply_quantization_config`` attaches the scheme of that name (``quant_scheme.py``:
``FP8_DYNAMIC``, ``FP8``, ``FP8_BLOCK``, ``W8A8``, ``NVFP4``, ``NVFP4A16``, ``MXFP4``, ``MXFP4A16``) and its
parameters, which are set to the layer's own scales (``weight_scale``, ``weight_global_scale``, ``input_scale``,
``input_global_scale``), and the library's ``ModelCompressor.compress_model`` writes the codes (``float-quantized``
E4M3, ``int-quantized``, ``nvfp4-pack-quantized``, ``mxfp4-pack-quantized``) as llm-compressor's
``save_pretrained`` wrapper does. W8A8's SmoothQuant scales are already folded into the RMSNorm weights saved.

Import: transformers (``AutoModelForCausalLM.from_pretrained`` with compressed-tensors installed) decompresses the
checkpoint and quantizes each Linear's input at run time by the checkpoint's activation arguments.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from workbench.quant.floatlinear import FloatQuantLinear

__all__ = ["export_float_compressed_tensors", "load_float_compressed_tensors"]


def _plain(qmodel) -> tuple[torch.nn.Module, list[str]]:
    """A copy of ``qmodel`` with each FloatQuantLinear replaced by an nn.Linear of its dequantized weight."""
    m = copy.deepcopy(qmodel)
    names = []
    for n, q in list(m.named_modules()):
        if isinstance(q, FloatQuantLinear):
            lin = torch.nn.Linear(q.in_features, q.out_features, bias=q.bias is not None)
            lin.weight.data = q.effective_weight().to(lin.weight.dtype)
            if q.bias is not None:
                lin.bias.data = q.bias.data.clone()
            parent, _, child = n.rpartition(".")
            setattr(m.get_submodule(parent) if parent else m, child, lin)
            names.append(n)
    return m, names


@torch.no_grad()
def export_float_compressed_tensors(qmodel, out_dir: str | Path, tokenizer=None) -> dict:
    """Write ``qmodel`` (from ``quantize_float``) to ``out_dir`` as a compressed-tensors checkpoint.

    Returns ``{"scheme", "format", "n_layers", "files"}``. Raises ``ValueError`` for a model with no
    ``FloatQuantLinear`` (quantize it with ``workbench.quant.floatquant.quantize_float`` first)."""
    from compressed_tensors.compressors.model_compressors.model_compressor import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
        preset_name_to_scheme,
    )

    cfg = getattr(qmodel, "workbench_quant_config", None)
    src = {n: q for n, q in qmodel.named_modules() if isinstance(q, FloatQuantLinear)}
    if not src or cfg is None:
        raise ValueError("the model has no FloatQuantLinear: quantize it with workbench.quant.floatquant.quantize_float")
    m, names = _plain(qmodel)
    scheme = preset_name_to_scheme(cfg.scheme, ["Linear"])
    dense = [n for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear) and n not in src]
    qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(**scheme.model_dump())}, ignore=dense,
                            quantization_status=QuantizationStatus.FROZEN)
    apply_quantization_config(m, qc)
    for n in names:
        lin, q = m.get_submodule(n), src[n]
        pairs = {"weight_scale": q.weight_scale, "weight_global_scale": q.weight_global_scale,
                 "input_scale": q.input_scale, "input_global_scale": q.input_global_scale}
        for attr, t in pairs.items():
            p = getattr(lin, attr, None)
            if p is None or not t.numel():
                continue
            val = t.float()
            if q.weight_kind == "mxfp4" and attr == "weight_scale":
                from workbench.quant.floatfmt import e8m0_decode

                val = e8m0_decode(t)
            p.data = val.reshape(p.shape).to(p.dtype)
        lin.quantization_status = QuantizationStatus.FROZEN
    comp = ModelCompressor.from_pretrained_model(m)
    comp.compress_model(m)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(out)
    comp.update_config(str(out))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    fmt = json.loads((out / "config.json").read_text())["quantization_config"].get("format")
    return {"scheme": cfg.scheme, "format": fmt, "n_layers": len(names), "files": sorted(p.name for p in out.iterdir())}


def load_float_compressed_tensors(folder: str | Path, dtype: torch.dtype = torch.float32):
    """The checkpoint ``folder`` loaded by transformers (compressed-tensors decompresses it; each Linear quantizes
    its input by the checkpoint's activation arguments), on the CPU, every parameter then cast to ``dtype``:
    compressed-tensors 0.19 decompresses NVFP4 / MXFP4 weights to bfloat16 whatever the checkpoint's dtype
    (``unpack_fp4_from_uint8``'s default), so a float32 model holds them rounded once to bfloat16."""
    from compressed_tensors.compressors.model_compressors.model_compressor import ModelCompressor
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    # transformers leaves the Linears compressed behind a first-forward decompression hook; decompress now (the
    # hook's own call, which removes it), then cast what came out in bfloat16
    ModelCompressor.from_pretrained_model(m).decompress_model(m)
    return m.to(dtype).eval()
