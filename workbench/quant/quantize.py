"""``quantize(model, config, calib)``: replace Linear layers by ``QuantLinear`` with RTN, AWQ or GPTQ.

Calibrated methods run decoder layer by decoder layer (see :mod:`workbench.quant.calib` for which
activations each layer is calibrated on): GPTQ on the partly quantized model, sub-group by
sub-group with ``true_sequential``; AWQ on the full-precision model's activations by default.
"""

from __future__ import annotations

import copy

import pandas as pd
import torch

from .awq import awq_search
from .calib import calibration_ids, capture_layer0_inputs, capture_linear_inputs, decoder_layers, run_layer
from .config import QuantConfig
from .gptq import gptq_quantize, hessian_update
from .qlinear import QuantLinear
from .rtn import DTYPES, compute_qparams, quantize_codes, resolve_group_size

__all__ = ["SEQUENTIAL", "quantizable_linears", "quantize", "sequential_groups"]


def _skipped(name: str, skip: tuple[str, ...]) -> bool:
    return any(name == s or name.endswith("." + s) for s in skip)


def quantizable_linears(model: torch.nn.Module, config: QuantConfig) -> dict[str, torch.nn.Linear]:
    """``{name: Linear}`` that ``config`` quantizes (all ``nn.Linear`` not matched by ``config.skip``).

    Raises ``ValueError`` naming the first layer whose ``in_features`` the group size does not divide.
    """
    out = {n: m for n, m in model.named_modules()
           if isinstance(m, torch.nn.Linear) and not _skipped(n, config.skip)}
    for n, m in out.items():
        resolve_group_size(config.group_size_code, m.in_features, n, config.partial_groups)
    return out


def _nothing_to_quantize(model: torch.nn.Module, config: QuantConfig) -> str:
    """The error for a model in which ``config`` finds no ``nn.Linear`` to quantize: its architecture,
    the modules holding its 2-D weights instead (GPT-2's ``Conv1D``) and what to pass."""
    arch = type(model).__name__
    mt = getattr(getattr(model, "config", None), "model_type", None)
    others: dict[str, int] = {}
    for _, m in model.named_modules():
        w = getattr(m, "weight", None)
        if isinstance(w, torch.Tensor) and w.ndim == 2 and not isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            others[type(m).__name__] = others.get(type(m).__name__, 0) + 1
    held = ", ".join(f"{n} x{c}" for n, c in others.items()) or "none"
    return (f"{arch} (model_type {mt!r}): no torch.nn.Linear to quantize outside skip={config.skip}, so 0 layers "
            f"would be quantized; its other 2-D weights are in {held}. RTN, AWQ and GPTQ here quantize nn.Linear "
            "layers: use a Llama-family model (llama, qwen2, mistral), or convert those modules to nn.Linear; "
            "the layers quantized are every nn.Linear whose name is not in QuantConfig.skip (skip=() quantizes "
            "lm_head too)")


def _gw(cfg: QuantConfig) -> int | None:
    """Group width for code/dequant helpers (``None`` for per-tensor / per-channel)."""
    return cfg.group_size if cfg.granularity == "group" else None


def _fz(cfg: QuantConfig) -> bool:
    return cfg.zero_point == "float" and not cfg.symmetric


def _make_qlinear(name, lin, codes, scales, zeros, cfg, input_scale=None) -> QuantLinear:
    return QuantLinear(codes, scales, None if cfg.symmetric else zeros, cfg.bits, bias=lin.bias,
                       input_scale=input_scale, compute_dtype=lin.weight.dtype, name=name, group_width=_gw(cfg))


def _report_row(name: str, lin: torch.nn.Linear, ql: QuantLinear, cfg: QuantConfig, **extra) -> dict:
    w = lin.weight.detach().float()
    err = ql.effective_weight() - w
    return {"layer": name, "out_features": ql.out_features, "in_features": ql.in_features,
            "method": cfg.method, "w_bits": cfg.bits, "group_size": cfg.group_size_code,
            "symmetric": cfg.symmetric, "weight_mse": float((err ** 2).mean()),
            "max_abs_err": float(err.abs().max()),
            "rel_err": float(err.norm() / w.norm().clamp(min=1e-12)),
            "bits_per_weight": 8 * ql.storage_bytes() / (ql.out_features * ql.in_features), **extra}


def _rtn_layer(name, lin, cfg) -> QuantLinear:
    sdt = DTYPES[cfg.scale_dtype]
    s, z = compute_qparams(lin.weight.detach(), cfg.bits, cfg.group_size_code, cfg.symmetric, sdt, _fz(cfg))
    return _make_qlinear(name, lin, quantize_codes(lin.weight.detach(), s, z, cfg.bits, _gw(cfg)), s, z, cfg)


def _set_module(root: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, new)


# GPTQ true-sequential sub-groups of a Llama-like decoder layer, in the order they run (the GPTQ
# reference llama.py ``--true-sequential``; AutoGPTQ / GPTQModel ``inside_layer_modules``)
SEQUENTIAL = (("q_proj", "k_proj", "v_proj"), ("o_proj",), ("gate_proj", "up_proj"), ("down_proj",))


def sequential_groups(names, true_sequential: bool = True) -> list[list[str]]:
    """Split a decoder layer's Linear names (``"self_attn.q_proj"``...) into GPTQ quantization
    sub-groups: :data:`SEQUENTIAL` order with ``true_sequential`` (Linears of other names form one
    last group), else one group of all."""
    names = list(names)
    if not true_sequential:
        return [names]
    groups = [[n for n in names if n.rsplit(".", 1)[-1] in kinds] for kinds in SEQUENTIAL]
    rest = [n for n in names if not any(n in g for g in groups)]
    return [g for g in groups + [rest] if g]


@torch.no_grad()
def _gptq_layer(layer, prefix: str, inputs, lins: dict[str, torch.nn.Linear], cfg: QuantConfig):
    """GPTQ one decoder layer: per sub-group, capture the Hessians on the partly quantized layer,
    quantize, swap in the ``QuantLinear``s. Returns ``({name: (QuantLinear, extra)}, next inputs)``
    with the next inputs computed by the quantized layer (as the GPTQ reference propagates)."""
    sdt = DTYPES[cfg.scale_dtype]
    result = {}
    for names in sequential_groups(lins, cfg.true_sequential):
        if not names:
            continue
        stats = {n: [None, 0] for n in names}

        def observe(n, x, stats=stats):
            stats[n][0], stats[n][1] = hessian_update(stats[n][0], x, stats[n][1])

        capture_linear_inputs(layer, inputs, {n: lins[n] for n in names}, observe, full=False)
        for batch in _shared_hessian_batches(names, stats, cfg):
            w = torch.cat([lins[n].weight for n in batch]) if len(batch) > 1 else lins[batch[0]].weight
            codes, s, z = gptq_quantize(w, stats[batch[0]][0], cfg.bits, cfg.group_size_code, cfg.symmetric,
                                        sdt, cfg.gptq_damp, cfg.gptq_block, cfg.act_order, _fz(cfg),
                                        cfg.static_groups)
            rows = [lins[n].out_features for n in batch]
            # each Linear its own tensors (no views into the stacked result: an export must not see shared storage)
            parts = [[p.clone() for p in t.split(rows)] if len(batch) > 1 else [t] for t in (codes, s, z)]
            for n, c_n, s_n, z_n in zip(batch, *parts):
                ql = _make_qlinear(prefix + n, lins[n], c_n, s_n, z_n, cfg)
                result[n] = (ql, {})
                _set_module(layer, n, ql)
    return result, run_layer(layer, inputs)


STACK_SHARED_HESSIAN = True  # GPTQ: one column loop for the Linears of a sub-group that read the same input


def _shared_hessian_batches(names: list[str], stats: dict, cfg: QuantConfig) -> list[list[str]]:
    """``names`` split into runs of Linears whose Hessians are bit-identical (q/k/v, gate/up: the same input), so
    that GPTQ quantizes each run as one matrix, their rows stacked. GPTQ's updates act on each row of ``W``
    separately (Frantar et al. 2022, Algorithm 1: every step is ``W[:, j] -= E[:, i] * U[i, j]``, row by row), and
    its group parameters are per row, so the stacked run gives each Linear the codes it gets alone (up to float
    summation order in the block updates) with one column loop instead of one per Linear: the loop's small kernels
    dominate on a GPU (Qwen2-7B: 29,696 columns a layer instead of 44,032). Per-tensor parameters (one scale per
    matrix) are not per row, so those Linears stay apart, as every Linear with :data:`STACK_SHARED_HESSIAN` off."""
    if not STACK_SHARED_HESSIAN or cfg.group_size_code == 0:
        return [[n] for n in names]
    runs: list[list[str]] = []
    for n in names:
        if runs and torch.equal(stats[runs[-1][0]][0], stats[n][0]):
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


@torch.no_grad()
def _awq_layer(layer, prefix: str, inputs, lins: dict[str, torch.nn.Linear], cfg: QuantConfig):
    """AWQ one decoder layer: one pass captures every Linear's input (and the full-precision layer
    output), Linears that read the same tensor (q/k/v; gate/up) share one scale search. Returns
    ``({name: (QuantLinear, extra)}, next inputs)``: the full-precision output (``awq_inputs="fp"``,
    llm-awq / AutoAWQ) or the quantized layer's (``"quantized"``)."""
    sdt = DTYPES[cfg.scale_dtype]
    X: dict[str, list] = {n: [] for n in lins}
    first: dict[str, torch.Tensor] = {}

    def observe(n, x):
        first.setdefault(n, x)  # kept alive, so id() identifies the shared input tensor
        X[n].append(x.reshape(-1, x.shape[-1]).float())

    fp_out = capture_linear_inputs(layer, inputs, lins, observe, full=True)
    groups: dict[int, list[str]] = {}
    for n in lins:
        groups.setdefault(id(first[n]), []).append(n)
    gen = torch.Generator().manual_seed(cfg.seed)
    result = {}
    for names in groups.values():
        Xg = torch.cat(X[names[0]])
        x_mean = Xg.abs().mean(0)
        if Xg.shape[0] > cfg.awq_max_tokens:
            Xg = Xg[torch.randperm(Xg.shape[0], generator=gen)[:cfg.awq_max_tokens]]
        ws = [lins[n].weight.detach() for n in names]
        s, alpha, losses = awq_search(Xg, ws, cfg.bits, cfg.group_size_code, cfg.symmetric, sdt,
                                      cfg.awq_grid, x_mean, _fz(cfg))
        for n in names:
            w = lins[n].weight.detach().float() * s
            qs, qz = compute_qparams(w, cfg.bits, cfg.group_size_code, cfg.symmetric, sdt, _fz(cfg))
            codes = quantize_codes(w, qs, qz, cfg.bits, _gw(cfg))
            ql = _make_qlinear(prefix + n, lins[n], codes, qs, qz, cfg, input_scale=s)
            result[n] = (ql, {"awq_alpha": alpha, "awq_group": "+".join(x.rsplit(".", 1)[-1] for x in names),
                              "awq_loss_rtn": losses[0], "awq_loss": min(losses)})
    for n, (ql, _) in result.items():
        _set_module(layer, n, ql)
    return result, fp_out if cfg.awq_inputs == "fp" else run_layer(layer, inputs)


def quantize(model: torch.nn.Module, config: QuantConfig, calib=None, *, tok=None,
             progress: bool = False) -> tuple[torch.nn.Module, pd.DataFrame]:
    """Quantize a copy of ``model``'s Linear weights (weight-only, ``W{bits}A16``).

    Args:
        model: a causal LM (left untouched: the work happens on ``copy.deepcopy(model)``).
        config: :class:`QuantConfig`.
        calib: AWQ/GPTQ calibration data: token ids ``[n_samples, seq_len]`` (int64), a text string
            (needs ``tok``), or ``None`` for WikiText-2 valid (needs ``tok``). Ignored by RTN.
        tok: tokenizer for text calibration.

    Returns:
        ``(qmodel, report)``: ``qmodel`` has every non-skipped ``nn.Linear`` replaced by
        :class:`QuantLinear`; ``report`` has one row per layer: ``layer, out_features, in_features,
        method, w_bits, group_size, symmetric, weight_mse, max_abs_err, rel_err`` (of the effective
        weight ``W_hat / input_scale`` vs ``W``), ``bits_per_weight`` (real storage bits of codes +
        scales + zeros + AWQ scale per weight), and for AWQ ``awq_alpha, awq_loss_rtn, awq_loss``.
        Linears outside the decoder stack that are not skipped are quantized with RTN under AWQ/GPTQ
        (column ``calibrated`` says which).

    Raises:
        ValueError: a group size that does not divide a layer's ``in_features`` (names the layer);
            empty calibration text; no calibration source; a model without a decoder stack for AWQ/GPTQ;
            a model with no ``nn.Linear`` outside ``config.skip`` (names the architecture, its matmul
            modules and the fix).
    """
    lins = quantizable_linears(model, config)
    if not lins:
        raise ValueError(_nothing_to_quantize(model, config))
    qmodel = copy.deepcopy(model)
    qmodel.eval()
    lins = quantizable_linears(qmodel, config)
    rows, done = [], set()
    if config.method in ("awq", "gptq"):
        if isinstance(calib, torch.Tensor):
            ids = calib.long()
            if ids.ndim != 2 or ids.numel() == 0:
                raise ValueError(f"calib token ids must be [n_samples, seq_len]; got shape {tuple(ids.shape)}")
        else:
            if tok is None:
                raise ValueError(f"method={config.method!r} needs calibration data: pass calib= token ids "
                                 "[n_samples, seq_len], or text (or None for WikiText-2 valid) with tok=")
            ids = calibration_ids(tok, calib, config.n_calib_samples, config.calib_seq_len, config.seed)
        layers = decoder_layers(qmodel)
        base = next(n for n, m in qmodel.named_modules() if m is layers)
        inputs = capture_layer0_inputs(qmodel, ids)
        it = range(len(layers))
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=f"{config.method.upper()} layers")
        for i in it:
            prefix = f"{base}.{i}."
            mine = {n[len(prefix):]: m for n, m in lins.items() if n.startswith(prefix)}
            step = _gptq_layer if config.method == "gptq" else _awq_layer
            quantized, inputs = step(layers[i], prefix, inputs, mine, config)
            for n, (ql, extra) in quantized.items():
                rows.append(_report_row(prefix + n, mine[n], ql, config, calibrated=True, **extra))
                done.add(prefix + n)
    for name, lin in lins.items():
        if name not in done:
            ql = _rtn_layer(name, lin, config)
            rows.append(_report_row(name, lin, ql, config, calibrated=False))
            _set_module(qmodel, name, ql)
    qmodel.workbench_quant_config = config
    return qmodel, pd.DataFrame(rows)
