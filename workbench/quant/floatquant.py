"""``quantize_float(model, FloatConfig)``: every Linear -> :class:`FloatQuantLinear` in FP8 / NVFP4 / MXFP4 / W8A8.

Steps, in llm-compressor's order (``oneshot`` with ``SmoothQuantModifier`` then ``QuantizationModifier``):

1. W8A8 only: SmoothQuant smoothing (:func:`smooth_model`) from per-channel activation ranges captured on the
   calibration windows, folded into the RMSNorms and the q/k/v and gate/up weights;
2. static activation parameters (FP8's per-tensor input scale, NVFP4's input global scale) from the absolute
   maximum of each Linear's input over the calibration windows (llm-compressor's ``static_minmax`` observer); here
   observed on the full-precision (smoothed) model in one pass, where llm-compressor's sequential pipeline
   observes each layer after the earlier layers were quantized, so these scales are close to, not equal to, its;
3. weights with :mod:`workbench.quant.floatref`'s rules; NVFP4's global scale shared by q/k/v and by gate/up
   (llm-compressor's fused observers: the largest ``amax`` of the group), as vLLM's fused matmuls need.
"""

from __future__ import annotations

import copy

import pandas as pd
import torch

from . import floatref as R
from .calib import calibration_ids
from .floatconfig import FloatConfig
from .floatlinear import FloatQuantLinear
from .quantize import _set_module, _skipped

__all__ = ["FUSED_GROUPS", "quantize_float", "smooth_model"]

FUSED_GROUPS = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("mlp.gate_proj", "mlp.up_proj"))
# SmoothQuant's smooth -> balance layers (llm-compressor DEFAULT_SMOOTHQUANT_MAPPINGS for Llama / Qwen2 / Mistral)
SMOOTH_MAPPINGS = (("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                   ("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj")))
MIN_SMOOTHING_SCALE = 1e-5  # llm-compressor MINIMUM_SMOOTHING_SCALE


def _calib_ids(cfg: FloatConfig, calib, tok) -> torch.Tensor:
    if isinstance(calib, torch.Tensor):
        if calib.ndim != 2 or calib.numel() == 0:
            raise ValueError(f"calib token ids must be [n_samples, seq_len]; got shape {tuple(calib.shape)}")
        return calib.long()
    if tok is None:
        raise ValueError(f"scheme {cfg.scheme} calibrates: pass calib= token ids [n_samples, seq_len], or text (or "
                         "None for WikiText-2 valid) with tok=")
    return calibration_ids(tok, calib, cfg.n_calib_samples, cfg.calib_seq_len, cfg.seed)


@torch.no_grad()
def _observe(model, ids: torch.Tensor, modules: dict[str, torch.nn.Module], per_channel: bool, output: bool = False,
             chunk: int = 4) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Run ``model`` on ``ids`` ``[n, T]`` and return ``{name: (min, max)}`` of each module's input (``output``:
    its output), per channel ``[features]`` or over the whole tensor (scalars)."""
    stats: dict = {}

    def hook(name):
        def fn(_m, args, out):
            x = (out if output else args[0]).detach().float().reshape(-1, (out if output else args[0]).shape[-1])
            lo, hi = (x.amin(0), x.amax(0)) if per_channel else (x.amin(), x.amax())
            if name in stats:
                lo, hi = torch.minimum(stats[name][0], lo), torch.maximum(stats[name][1], hi)
            stats[name] = (lo, hi)
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in modules.items()]
    try:
        dev = next(model.parameters()).device
        for i in range(0, ids.shape[0], chunk):
            model(input_ids=ids[i:i + chunk].to(dev), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return stats


@torch.no_grad()
def smooth_model(model, ids: torch.Tensor, alpha: float = 0.5) -> pd.DataFrame:
    """SmoothQuant (Xiao et al. 2023, eq. 4) applied in place to a Llama-like ``model`` from calibration ids
    ``[n, T]``: per input channel ``s = range(X)^alpha / (2 max|W|)^(1 - alpha)`` (llm-compressor
    ``_calculate_smoothing_scales``; ``range = max - min`` of the RMSNorm output, ``max|W|`` over the Linears it
    feeds), ``s >= 1e-5``; the RMSNorm weight is divided by ``s`` and each Linear's columns multiplied by it (exact
    in real arithmetic). Returns one row per smoothed norm: ``layer``, ``s_min``, ``s_max``.
    Raises ``ValueError`` for a model without ``model.layers``."""
    from .calib import decoder_layers

    layers = decoder_layers(model)
    norms = {f"{i}.{sm}": layers[i].get_submodule(sm) for i in range(len(layers)) for sm, _ in SMOOTH_MAPPINGS}
    stats = _observe(model, ids, norms, per_channel=True, output=True)
    rows = []
    for i, layer in enumerate(layers):
        for sm, balance in SMOOTH_MAPPINGS:
            lo, hi = stats[f"{i}.{sm}"]
            act = hi - lo
            lins = [layer.get_submodule(b) for b in balance]
            wmax = 2.0 * torch.cat([lin.weight.abs().amax(dim=0, keepdim=True) for lin in lins]).amax(dim=0)
            s = act.pow(alpha) / wmax.pow(1 - alpha)
            s = torch.where(wmax > 0, s, act).clamp(min=MIN_SMOOTHING_SCALE)
            for lin in lins:
                lin.weight.mul_(s.to(lin.weight.dtype).view(1, -1))
            norm = layer.get_submodule(sm)
            norm.weight.div_(s.to(norm.weight.dtype))
            rows.append({"layer": f"model.layers.{i}.{sm}", "s_min": float(s.min()), "s_max": float(s.max())})
    return pd.DataFrame(rows)


def _weight(cfg: FloatConfig, w: torch.Tensor, gscale: torch.Tensor | None) -> dict:
    k = cfg.weight_kind
    if k.startswith("fp8_"):
        return R.weight_fp8(w, k[4:])
    if k == "int8":
        return R.weight_int8(w)
    if k == "nvfp4":
        return R.weight_nvfp4(w, gscale)
    return R.weight_mxfp4(w, cfg.mx_scale_rule)


def _fused_global_scales(lins: dict[str, torch.nn.Linear]) -> dict[str, torch.Tensor]:
    """NVFP4 weight global scales: one per Linear, shared across each layer's q/k/v and gate/up (the largest amax)."""
    out = {n: R.nvfp4_global_scale(m.weight.detach().abs().amax()) for n, m in lins.items()}
    for n in lins:
        for group in FUSED_GROUPS:
            if n.endswith("." + group[0]):
                names = [n[: -len(group[0])] + g for g in group]
                if all(x in lins for x in names):
                    amax = torch.stack([lins[x].weight.detach().abs().amax() for x in names]).amax()
                    for x in names:
                        out[x] = R.nvfp4_global_scale(amax)
    return out


@torch.no_grad()
def quantize_float(model: torch.nn.Module, config: FloatConfig, calib=None, *, tok=None) -> tuple[torch.nn.Module,
                                                                                                  pd.DataFrame]:
    """Quantize a copy of ``model`` to ``config.scheme`` (weights and, unless ``...A16``, activations).

    Args:
        model: a Llama-like causal LM (left untouched).
        config: :class:`FloatConfig`.
        calib: calibration token ids ``[n, T]`` int64, or text / ``None`` (WikiText-2 valid) with ``tok``; used by
            ``FP8`` (static input scales), ``NVFP4`` (input global scale) and ``W8A8`` (SmoothQuant).
        tok: the tokenizer, for text calibration.

    Returns:
        ``(qmodel, report)``: every ``nn.Linear`` outside ``config.skip`` replaced by :class:`FloatQuantLinear`;
        ``report`` one row per layer: ``layer, out_features, in_features, scheme, weight_mse, rel_err`` (of the
        dequantized weight against the (smoothed) original), ``bits_per_weight`` (stored bits, scales included).

    Raises:
        ValueError: no Linear to quantize; a layer whose width the scheme's group (NVFP4 16, MXFP4 32) does not
            divide (names the layer and ``skip`` as the fix); missing calibration data. (FP8_BLOCK pads a partial
            128-block with zeros, weights and activations.)
    """
    qmodel = copy.deepcopy(model).eval()
    lins = {n: m for n, m in qmodel.named_modules() if isinstance(m, torch.nn.Linear) and not _skipped(n, config.skip)}
    if not lins:
        raise ValueError(f"no torch.nn.Linear outside skip={config.skip} to quantize in {type(model).__name__}")
    group = {"nvfp4": 16, "mxfp4": 32}.get(config.weight_kind, 1)
    for n, m in lins.items():
        if m.in_features % group:
            raise ValueError(f"{n}: in_features={m.in_features} is not divisible by {config.scheme}'s group of {group}; "
                             f"add it to FloatConfig.skip")
    ids = _calib_ids(config, calib, tok) if config.needs_calibration else None
    if config.scheme == "W8A8":
        smooth_model(qmodel, ids, config.smoothing_strength)
    act_stats = _observe(qmodel, ids, lins, per_channel=False) if config.act_kind in ("fp8_static", "nvfp4") else {}
    gscales = _fused_global_scales(lins) if config.weight_kind == "nvfp4" else {}
    rows = []
    for n, lin in lins.items():
        w = lin.weight.detach().float()
        t = _weight(config, w, gscales.get(n))
        kw = {}
        if n in act_stats:
            amax = torch.maximum(act_stats[n][0].abs(), act_stats[n][1].abs())
            if config.act_kind == "fp8_static":
                kw["input_scale"] = R._nonzero((amax / R.E4M3.max).reshape(1))
            else:
                kw["input_global_scale"] = R.nvfp4_global_scale(amax)
        q = FloatQuantLinear(config.weight_kind, t, tuple(w.shape), config.act_kind, bias=lin.bias,
                             mx_rule=config.mx_scale_rule, name=n, **kw)
        err = q.effective_weight() - w
        rows.append({"layer": n, "out_features": lin.out_features, "in_features": lin.in_features,
                     "scheme": config.scheme, "weight_mse": float(err.pow(2).mean()),
                     "rel_err": float(err.norm() / w.norm().clamp(min=1e-30)),
                     "bits_per_weight": 8 * q.storage_bytes() / w.numel()})
        _set_module(qmodel, n, q)
    qmodel.workbench_quant_config = config
    return qmodel, pd.DataFrame(rows)
