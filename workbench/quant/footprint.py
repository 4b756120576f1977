"""Measured memory: bytes of the stored weights, and KV-cache bytes per token."""

from __future__ import annotations

import torch

from workbench.arch import ModelSpec, kv_bytes_per_token

from .floatlinear import FloatQuantLinear
from .qlinear import QuantLinear

_QUANTIZED = (QuantLinear, FloatQuantLinear)  # integer codes, and the float formats (E4M3, NVFP4, MXFP4, W8A8)

__all__ = ["footprint"]


def _kv_bytes_per_token(config, dtype_bytes: int | None = None) -> int:
    """:func:`workbench.arch.kv_bytes_per_token` of an HF ``config``'s shapes, at ``dtype_bytes``
    per element (default: the config's ``dtype`` size; float32, 4, when it names none)."""
    spec = ModelSpec.from_hf_config(config)
    if dtype_bytes is None:
        dt = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        if isinstance(dt, str):
            dt = getattr(torch, dt.replace("torch.", ""), torch.float32)
        dtype_bytes = torch.empty(0, dtype=dt).element_size()
    return kv_bytes_per_token(spec.n_layers, spec.n_kv_heads, spec.head_dim, int(dtype_bytes))


def _key(t: torch.Tensor):
    return (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape))


def footprint(model: torch.nn.Module, kv_dtype_bytes: int | None = None) -> dict:
    """Real storage bytes of a model's tensors (each shared / tied tensor counted once).

    Returns a dict:

    * ``weight_bytes``: all parameters and buffers (``numel * element_size`` of the actual tensors:
      packed codes, scales, zeros, AWQ input scales, and every float parameter left, e.g. embeddings);
    * ``quant_bytes``: the part stored in ``QuantLinear`` / ``FloatQuantLinear`` layers (codes + scales + zeros + input
      scale; float codes, their scales and global scales);
    * ``linear_fp_bytes``: float weights of plain ``nn.Linear`` layers (e.g. a skipped ``lm_head``,
      0 when it is tied to the embeddings, which are counted under ``other_bytes``);
    * ``other_bytes``: everything else (embeddings, norms, biases, non-persistent buffers such as
      rotary ``inv_freq``);
    * ``n_quant_layers``, ``n_weights_quantized`` (weights represented by codes),
      ``bits_per_weight_quantized`` (``8 * quant_bytes / n_weights_quantized``);
    * ``kv_bytes_per_token`` (from ``model.config``, see :func:`workbench.arch.kv_bytes_per_token`; ``None`` if the
      model has no config).
    """
    seen: set = set()
    quant = lin = other = n_q = n_ql = 0
    owner = {}
    for mname, mod in model.named_modules():
        for t in list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False)):
            owner.setdefault(_key(t), (mod, t))
    for key, (mod, t) in owner.items():
        if key in seen:
            continue
        seen.add(key)
        b = t.numel() * t.element_size()
        if isinstance(mod, _QUANTIZED) and t is not mod.bias:
            quant += b
        elif isinstance(mod, torch.nn.Linear) and t is mod.weight:
            lin += b
        else:
            other += b
    for mod in model.modules():
        if isinstance(mod, _QUANTIZED):
            n_ql += 1
            n_q += mod.in_features * mod.out_features
    cfg = getattr(model, "config", None)
    return {"weight_bytes": quant + lin + other, "quant_bytes": quant, "linear_fp_bytes": lin,
            "other_bytes": other, "n_quant_layers": n_ql, "n_weights_quantized": n_q,
            "bits_per_weight_quantized": 8 * quant / n_q if n_q else float("nan"),
            "kv_bytes_per_token": _kv_bytes_per_token(cfg, kv_dtype_bytes) if cfg is not None else None}
