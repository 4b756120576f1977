"""A workbench-quantized model out as a compressed-tensors checkpoint (llm-compressor's format).

vLLM (``--quantization compressed-tensors``, detected from ``config.json``) and transformers (with
``compressed-tensors`` installed) load the folder this writes. Layout, all written by the
compressed-tensors library itself: each ``QuantLinear`` becomes ``weight_packed`` / ``weight_scale``
/ ``weight_zero_point`` / ``weight_shape`` from ``PackedQuantizationCompressor.compress``
(``pack-quantized``, the format llm-compressor writes for W4A16 and W8A16) and ``config.json``
gets the ``quantization_config`` that ``ModelCompressor.update_config`` writes for a
``QuantizationConfig`` of ``QuantizationScheme`` / ``QuantizationArgs`` groups.

Mapping of the workbench's granularities to ``QuantizationArgs``: groups -> ``strategy="group"``
with ``group_size``; per channel -> ``"channel"``; per tensor -> ``"channel"`` with the one scale
repeated per row (identical values; vLLM's WNA16 kernels take group and channel only). Symmetric ->
``symmetric=True`` and no zero point (the workbench's fixed ``2^(b-1)`` is compressed-tensors' signed
0). AWQ's ``input_scale`` is first folded into the preceding RMSNorm / Linear by
:func:`workbench.bridges.fold.fold_awq_scales`; layers it cannot fold go out as dense weights
(listed in ``ignore``) unless ``unfoldable="requantize"``.

Scales are stored in the checkpoint's dtype (``torch_dtype``; vLLM casts them to the activation
dtype anyway): float16 scales are exact in float32 and float16 checkpoints, and round to bfloat16 in a
bfloat16 checkpoint (the report's ``scale_rel_err`` says by how much).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from workbench.bridges.fold import fold_awq_scales
from workbench.models import PROVENANCE_FILE, provenance_of
from workbench.quant.qlinear import QuantLinear

__all__ = ["export_compressed_tensors", "quantization_args"]


def quantization_args(q: QuantLinear):
    """``compressed_tensors.quantization.QuantizationArgs`` for one layer. Raises ``ValueError`` for
    what the format (or vLLM's kernels) cannot express: float zero points, partial last groups."""
    from compressed_tensors.quantization import QuantizationArgs

    if q.zeros.numel() and q.zeros.is_floating_point():
        raise ValueError(f"{q.name}: float zero points (QuantConfig(zero_point='float')) have no compressed-tensors "
                         "form (its zero points are integers); quantize with zero_point='int'")
    g = q.group_size
    if g > 0 and q.in_features % g:
        raise ValueError(f"{q.name}: group_size={g} does not divide in_features={q.in_features} (partial last "
                         f"group); vLLM needs whole groups: re-quantize with a divisor of {q.in_features} "
                         "(e.g. 32 or 64) or per_channel")
    kw = {"strategy": "group", "group_size": g} if g > 0 else {"strategy": "channel"}
    return QuantizationArgs(num_bits=q.bits, type="int", symmetric=q.symmetric, zp_dtype=torch.int8, **kw)


def _compress(q: QuantLinear, args, dtype: torch.dtype) -> tuple[dict, float]:
    """compressed-tensors tensors of ``q`` (library compressor) and the relative scale rounding error."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization import QuantizationScheme

    s = q.scales.expand(q.out_features, -1) if q.scales.shape[0] == 1 else q.scales
    s_out = s.to(dtype).contiguous()
    err = float(((s_out.float() - s.float()).abs() / s.float().abs().clamp(min=1e-30)).max())
    z = q.zero_points().expand(s.shape).to(torch.int16) - (1 << (q.bits - 1))
    codes = q.codes().to(torch.int16) - (1 << (q.bits - 1))
    w_hat = (codes - z.repeat_interleave(q.group_width, 1)[:, :q.in_features]).float() * \
        s_out.float().repeat_interleave(q.group_width, 1)[:, :q.in_features]
    sd = {"weight": w_hat, "weight_scale": s_out}
    if not q.symmetric:
        sd["weight_zero_point"] = z.to(torch.int8)
    out = PackedQuantizationCompressor.compress(sd, QuantizationScheme(targets=["Linear"], weights=args))
    got = unpack_from_int32(out["weight_packed"], q.bits, torch.Size(int(x) for x in out["weight_shape"]))
    if not torch.equal(got.to(torch.int16), codes):  # the library re-derives the codes from W_hat: check them
        raise RuntimeError(f"{q.name}: compressed-tensors packed other integers than the layer holds")
    if q.bias is not None:
        out["bias"] = q.bias.detach().to(dtype)
    return out, err


def _state_and_config(model: torch.nn.Module, dtype: torch.dtype):
    from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme

    tensors, groups, rows = {}, {}, []
    quantized = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    for name, q in quantized.items():
        args = quantization_args(q)
        packed, err = _compress(q, args, dtype)
        tensors |= {f"{name}.{k}": v.contiguous() for k, v in packed.items()}
        groups.setdefault(args.model_dump_json(), (args, []))[1].append(name)
        rows.append({"layer": name, "w_bits": q.bits, "group_size": q.group_size, "symmetric": q.symmetric,
                     "scale_rel_err": err})
    if not quantized:
        raise ValueError("the model has no QuantLinear layer: quantize it with workbench.quant.quantize first")
    for k, v in model.state_dict().items():
        if k.rsplit(".", 1)[0] not in quantized:
            tensors[k] = v.detach().to(dtype) if v.is_floating_point() else v.detach()
    if getattr(model.config, "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)
    dense = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    one = len(groups) == 1
    schemes = {f"group_{i}": QuantizationScheme(targets=["Linear"] if one else names, weights=args,
                                                format="pack-quantized")
               for i, (args, names) in enumerate(groups.values())}
    qc = QuantizationConfig(config_groups=schemes, ignore=dense, format="pack-quantized",
                            quantization_status="compressed")
    return tensors, qc, pd.DataFrame(rows)


def export_compressed_tensors(qmodel: torch.nn.Module, out_dir: str | Path, tokenizer=None, *,
                              unfoldable: str = "dense", dtype: torch.dtype | None = None) -> pd.DataFrame:
    """Write ``qmodel`` (from ``workbench.quant.quantize``) as a compressed-tensors checkpoint.

    Args:
        qmodel: an HF causal LM whose quantized Linears are ``QuantLinear`` (RTN, AWQ, GPTQ; INT2-INT8).
        out_dir: folder to create (``config.json``, ``model.safetensors``, tokenizer files,
            ``workbench_provenance.json``); an existing folder's files of these names are replaced.
        tokenizer: saved beside the weights when given (vLLM needs it).
        unfoldable: what :func:`fold_awq_scales` does with an AWQ scale it cannot fold
            (``"dense"`` exact, ``"requantize"``, ``"error"``).
        dtype: checkpoint dtype (default: the model's).

    Returns:
        One row per layer: ``layer, w_bits, group_size, symmetric, scale_rel_err`` (rounding of the
        scales to ``dtype``) and ``fold, into, rel_err`` for AWQ layers (see ``fold_awq_scales``).

    Raises:
        ValueError: no QuantLinear, float zero points, a partial last group (vLLM needs whole groups),
            an unfoldable AWQ scale with ``unfoldable="error"``.
    """
    from compressed_tensors.compressors.model_compressors.model_compressor import ModelCompressor
    from safetensors.torch import save_file

    model, folds = fold_awq_scales(qmodel, unfoldable)
    dtype = dtype or next(p for p in model.parameters() if p.is_floating_point()).dtype
    tensors, qc, report = _state_and_config(model, dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = cfg["dtype"] = str(dtype).replace("torch.", "")
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    ModelCompressor(quantization_config=qc).update_config(str(out))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    quant = getattr(qmodel, "workbench_quant_config", None)
    prov = {"exported_from": provenance_of(qmodel), "quant_config": quant.to_row() if quant is not None else None,
            "format": "compressed-tensors pack-quantized", "awq_folds": folds.to_dict("records")}
    (out / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2, default=str))
    return report.merge(folds, on="layer", how="outer")
