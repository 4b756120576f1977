"""Fold AWQ's per-input-channel scale out of ``QuantLinear`` so the model holds plain W4A16 layers.

The workbench's AWQ keeps the activation-aware scale ``a`` ``[in]`` inside each layer
(``y = (x / a) @ W_hat^T``, ``QuantLinear.input_scale``); checkpoint formats (compressed-tensors,
AutoAWQ GEMM) have no such field, so ``1 / a`` must move into the layer that produces ``x``, as
AutoAWQ does (``awq/quantize/scale.py``: ``scale_ln_fcs``, ``scale_fc_fc``). Every fold here is exact
in real arithmetic (only float32 rounding changes):

* **RMSNorm -> Linears** (``input_layernorm`` -> ``q/k/v_proj``, ``post_attention_layernorm`` ->
  ``gate/up_proj``): ``x = rms(h) * gamma``, so ``x / a = rms(h) * (gamma / a)``; needs every reader
  of the norm to share ``a`` (the workbench's AWQ searches one ``a`` per shared input) or to be a
  dense Linear (its columns are multiplied by ``a``);
* **Linear rows -> Linear** (``up_proj`` -> ``down_proj``: ``x = act(gate) * up``; ``v_proj`` ->
  ``o_proj``): dividing output row ``o`` of the producer by ``a[o]`` divides its scales row (and bias),
  ``(q - z) * s[o, g] / a[o]``, so the producer stays quantized with the same integers. For
  ``v_proj -> o_proj`` under grouped-query attention, o_proj's input channel ``h * d + j`` comes from
  v_proj's row ``(h // (n_heads / n_kv)) * d + j``: the fold needs ``a`` equal across the query heads
  sharing a KV head. AutoAWQ scales o_proj only when v_proj and o_proj weights have one shape
  (``awq/models/llama.py`` ``get_layers_for_scaling``); the workbench's AWQ searches one anyway.
* **Not foldable** (o_proj under GQA with unequal ``a``): ``unfoldable="dense"`` stores the exact
  effective weight ``W_hat / a`` as a float Linear (reported, costs its dense bytes);
  ``"requantize"`` re-quantizes ``W_hat / a`` with RTN at the layer's bits and groups (not exact;
  the report gives its error); ``"error"`` raises.

A scale of all ones (AWQ chose alpha = 0) needs no fold.
"""

from __future__ import annotations

import copy

import pandas as pd
import torch

from workbench.quant.qlinear import QuantLinear
from workbench.quant.rtn import compute_qparams, quantize_codes

__all__ = ["fold_awq_scales"]

UNFOLDABLE = ("dense", "requantize", "error")


def _has_scale(m) -> bool:
    return isinstance(m, QuantLinear) and m.input_scale.numel() > 0 and not bool((m.input_scale == 1).all())


def _rebuild(q: QuantLinear, scales: torch.Tensor | None = None, bias=None) -> QuantLinear:
    """A copy of ``q`` without ``input_scale`` (and with new ``scales`` / ``bias`` if given)."""
    s = q.scales if scales is None else scales
    b = q.bias if bias is None else bias
    out = QuantLinear(q.codes(), s, None if q.symmetric else q.zeros, q.bits, bias=b, input_scale=None,
                      compute_dtype=q.compute_dtype, name=q.name,
                      group_width=q.group_width if q.group_size > 0 else None)
    return out.to(q.qweight.device)


def _scale_rows(m: torch.nn.Module, r: torch.Tensor) -> torch.nn.Module:
    """``m`` with output row ``o`` divided by ``r[o]`` (``r`` ``[out]``): QuantLinear scales (kept in
    float32 so the division is not rounded to fp16) or a dense weight; bias too."""
    r = r.float()
    bias = None if m.bias is None else torch.nn.Parameter((m.bias.float() / r).to(m.bias.dtype), requires_grad=False)
    if isinstance(m, QuantLinear):
        s = m.scales.float().expand(m.out_features, -1) if m.scales.shape[0] == 1 else m.scales.float()
        keep_a = m.input_scale if m.input_scale.numel() else None
        out = QuantLinear(m.codes(), s / r[:, None], None if m.symmetric else
                          m.zeros.expand(m.out_features, -1).contiguous() if m.zeros.shape[0] == 1 else m.zeros,
                          m.bits, bias=bias, input_scale=keep_a, compute_dtype=m.compute_dtype, name=m.name,
                          group_width=m.group_width if m.group_size > 0 else None)
        return out.to(m.qweight.device)
    new = copy.deepcopy(m)
    with torch.no_grad():
        new.weight.div_(r.to(new.weight.dtype)[:, None])
        if new.bias is not None:
            new.bias.copy_(bias)
    return new


def _unfoldable(q: QuantLinear, how: str, name: str):
    if how == "error":
        raise ValueError(f"{name}: AWQ input_scale cannot be folded into the layer before it (grouped-query "
                         "attention with scales unequal across query heads); pass unfoldable='dense' (exact, "
                         "float weight) or 'requantize' (RTN of W_hat / a, not exact)")
    w = q.effective_weight()
    if how == "dense":
        lin = torch.nn.Linear(q.in_features, q.out_features, bias=q.bias is not None, device=w.device,
                              dtype=q.compute_dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
            if q.bias is not None:
                lin.bias.copy_(q.bias)
        return lin, "dense", 0.0
    g = q.group_size
    s, z = compute_qparams(w, q.bits, g, q.symmetric, q.scales.dtype)
    codes = quantize_codes(w, s, z, q.bits, g if g > 0 else None)
    new = QuantLinear(codes, s, None if q.symmetric else z, q.bits, bias=q.bias, compute_dtype=q.compute_dtype,
                      name=q.name, group_width=g if g > 0 else None).to(w.device)
    err = float((new.effective_weight() - w).norm() / w.norm().clamp(min=1e-12))
    return new, "requantized", err


def _set(root: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, new)


def _fold_into_norm(layer, norm_name: str, readers: list[str], prefix: str, rows: list) -> None:
    mods = {r: layer.get_submodule(r) for r in readers}
    scaled = [r for r, m in mods.items() if _has_scale(m)]
    if not scaled:
        return
    a = mods[scaled[0]].input_scale.float()
    ok = all(torch.equal(mods[r].input_scale.float(), a) for r in scaled) and \
        all(r in scaled or isinstance(m, torch.nn.Linear) for r, m in mods.items())
    if not ok:
        return  # left for the generic unfoldable path
    norm = layer.get_submodule(norm_name)
    with torch.no_grad():
        norm.weight.copy_((norm.weight.float() / a).to(norm.weight.dtype))
    for r, m in mods.items():
        if r in scaled:
            _set(layer, r, _rebuild(m))
        else:  # a dense reader sees x / a now: multiply its columns by a
            with torch.no_grad():
                m.weight.mul_(a.to(m.weight.dtype))
        rows.append({"layer": prefix + r, "fold": "norm", "into": prefix + norm_name, "rel_err": 0.0})


def _fold_into_rows(layer, producer: str, consumer: str, prefix: str, rows: list, head_dim: int | None = None) -> None:
    """Fold ``consumer``'s input scale into ``producer``'s output rows. ``head_dim`` (v -> o): the
    consumer's input channel ``h * head_dim + j`` reads the producer's row ``(h // group) * head_dim + j``."""
    c, p = layer.get_submodule(consumer), layer.get_submodule(producer)
    if not _has_scale(c):
        return
    a = c.input_scale.float()
    if head_dim and a.numel() != p.out_features:
        n_heads, n_kv = a.numel() // head_dim, p.out_features // head_dim
        if n_heads * head_dim != a.numel() or n_kv * head_dim != p.out_features or n_heads % n_kv:
            return
        per = a.view(n_kv, n_heads // n_kv, head_dim)
        if not bool((per == per[:, :1]).all()):
            return  # query heads sharing a KV head were given different scales: not foldable
        a = per[:, 0].reshape(-1)
    if a.numel() != p.out_features:
        return
    _set(layer, producer, _scale_rows(p, a))
    _set(layer, consumer, _rebuild(c))
    rows.append({"layer": prefix + consumer, "fold": "rows", "into": prefix + producer, "rel_err": 0.0})


# readers of each norm and (producer, consumer) pairs in a Llama / Qwen2 / Mistral decoder layer
NORM_READERS = {"input_layernorm": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                "post_attention_layernorm": ("mlp.gate_proj", "mlp.up_proj")}
ROW_PAIRS = (("mlp.up_proj", "mlp.down_proj"), ("self_attn.v_proj", "self_attn.o_proj"))


def fold_awq_scales(qmodel: torch.nn.Module, unfoldable: str = "dense") -> tuple[torch.nn.Module, pd.DataFrame]:
    """A copy of ``qmodel`` in which no ``QuantLinear`` keeps an AWQ ``input_scale`` (module docstring).

    Args:
        qmodel: a model from ``workbench.quant.quantize`` (any method; RTN/GPTQ layers pass unchanged).
        unfoldable: ``"dense"`` | ``"requantize"`` | ``"error"``: what to do with a scale no fold can take.

    Returns:
        ``(model, report)``: ``report`` has one row per scaled layer: ``layer``, ``fold`` (``norm``,
        ``rows``, ``dense``, ``requantized``, ``ones``), ``into`` (the module that absorbed ``1 / a``)
        and ``rel_err`` (relative Frobenius error of the layer's effective weight; 0 for exact folds).

    Raises:
        ValueError: unknown ``unfoldable``, or ``unfoldable="error"`` and a scale that cannot be folded.
    """
    if unfoldable not in UNFOLDABLE:
        raise ValueError(f"unfoldable={unfoldable!r} is unknown; use one of {UNFOLDABLE}")
    model = copy.deepcopy(qmodel)
    rows: list[dict] = []
    cfg = getattr(model, "config", None)
    n_heads = getattr(cfg, "num_attention_heads", None)
    head_dim = getattr(cfg, "head_dim", None) or (cfg.hidden_size // n_heads if n_heads else None)
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    for i, layer in enumerate(layers):
        prefix = f"model.layers.{i}."
        names = {n for n, _ in layer.named_modules()}
        for norm, readers in NORM_READERS.items():
            if norm in names and all(r in names for r in readers):
                _fold_into_norm(layer, norm, list(readers), prefix, rows)
        for producer, consumer in ROW_PAIRS:
            if producer in names and consumer in names:
                hd = head_dim if consumer.endswith("o_proj") else None
                _fold_into_rows(layer, producer, consumer, prefix, rows, hd)
    for name, m in list(model.named_modules()):
        if isinstance(m, QuantLinear) and m.input_scale.numel():
            if _has_scale(m):
                new, kind, err = _unfoldable(m, unfoldable, name)
                rows.append({"layer": name, "fold": kind, "into": name, "rel_err": err})
            else:
                new = _rebuild(m)
                rows.append({"layer": name, "fold": "ones", "into": "", "rel_err": 0.0})
            _set(model, name, new)
    return model, pd.DataFrame(rows, columns=["layer", "fold", "into", "rel_err"])
