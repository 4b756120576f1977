"""Published quantized checkpoints in: compressed-tensors, AutoAWQ (GEMM) and GPTQ -> ``QuantLinear``.

``load_quantized(spec)`` reads ``config.json``'s ``quantization_config``, builds the architecture on
the meta device (no dense weights are ever materialised), turns every quantized module's tensors into a
:class:`workbench.quant.QuantLinear` (layouts in :mod:`workbench.bridges.formats`) and loads the
rest (embeddings, norms, unquantized layers) as they are. The result is an ordinary HF model whose
Linears are ``QuantLinear``: every study (fidelity, MMLU, the engine) runs on it as on a model from
``workbench.quant.quantize``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.bridges.formats import (
    QuantTensors,
    from_autoawq,
    from_compressed_tensors,
    from_gptq,
    to_qlinear,
)
from workbench.models import _resolve_dtype
from workbench.quant.config import QuantConfig

__all__ = ["checkpoint_format", "load_quantized"]

FORMATS = ("compressed-tensors", "awq", "gptq")


def _local_dir(spec: str) -> Path:
    p = Path(spec).expanduser()
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt",
                                                            "*.jinja", "*.yaml"]))
    except Exception as e:  # noqa: BLE001 - re-raised with the fix named
        raise FileNotFoundError(f"{spec!r} is not a local folder and the hub download failed "
                                f"({type(e).__name__}: {str(e)[:200]}); pass a folder or go online") from None


def checkpoint_format(config: dict) -> str:
    """``compressed-tensors`` | ``awq`` | ``gptq`` from ``config.json``'s ``quantization_config``.
    Raises ``ValueError`` when there is none or it is another method."""
    qc = config.get("quantization_config") or config.get("compression_config")
    if not qc:
        raise ValueError("config.json has no quantization_config: this is not a quantized checkpoint "
                         "(load it with workbench.models.load_model and quantize it with workbench.quant)")
    method = str(qc.get("quant_method", "")).lower()
    if method not in FORMATS:
        raise ValueError(f"quant_method={method!r} is not supported; supported: {FORMATS}")
    return method


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} has no .safetensors file (.bin checkpoints are not read)")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out |= load_file(str(f))
    return out


def _pop_module(tensors: dict, prefix: str) -> dict:
    keys = [k for k in tensors if k.startswith(prefix + ".") and "." not in k[len(prefix) + 1:]]
    return {k[len(prefix) + 1:]: tensors.pop(k) for k in keys}


def _ct_layers(tensors: dict, qc: dict) -> dict[str, tuple[QuantTensors, torch.Tensor | None]]:
    """compressed-tensors: each module takes the scheme of its config group, chosen as
    compressed-tensors' ``apply_quantization_config`` chooses it (``match_targets``: an exact module
    name first, then a regex, then the class name ``Linear``; a later group's identical target
    replaces an earlier one's), so groups of different bit widths import per layer. A module is
    quantized iff it has its tensors; ValueError names the modules no group targets."""
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.utils.match import match_targets

    cfg = QuantizationConfig.model_validate(qc)
    if cfg.format not in ("pack-quantized", "int-quantized", "mixed-precision"):
        raise ValueError(f"compressed-tensors format {cfg.format!r} is not supported (pack-quantized, int-quantized)")
    target_to_group = {t: g for g in cfg.config_groups.values() for t in g.targets}
    linear = torch.nn.Linear(1, 1, bias=False, device="meta")  # every quantized tensor here is a Linear's
    names = sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith((".weight_packed", ".weight_scale"))})
    out, unmatched = {}, []
    for name in names:
        targets = match_targets(name, linear, list(target_to_group))
        if not targets:
            unmatched.append(name)
            continue
        group = target_to_group[targets[0]]
        if group.weights is None:
            continue
        local = _pop_module(tensors, name)
        out[name] = (from_compressed_tensors(local, group.weights, group.format or cfg.format), local.get("bias"))
    if unmatched:
        raise ValueError(f"compressed-tensors: no config group targets {unmatched[:5]} (targets "
                         f"{sorted(target_to_group)}); the checkpoint's quantization_config does not describe them")
    return out


def _awq_layers(tensors: dict, qc: dict) -> dict:
    if str(qc.get("version", "gemm")).lower() != "gemm":
        raise ValueError(f"AutoAWQ version={qc.get('version')!r}: only the GEMM packing is supported")
    out = {}
    for name in sorted(k[:-len(".qweight")] for k in tensors if k.endswith(".qweight")):
        t = _pop_module(tensors, name)
        out[name] = (from_autoawq(t["qweight"], t.get("qzeros"), t["scales"], int(qc.get("bits", 4)),
                                  int(qc.get("group_size", 128)), bool(qc.get("zero_point", True))), t.get("bias"))
    return out


def _gptq_layers(tensors: dict, qc: dict) -> dict:
    fmt = qc.get("checkpoint_format") or "gptq"
    out = {}
    for name in sorted(k[:-len(".qweight")] for k in tensors if k.endswith(".qweight")):
        t = _pop_module(tensors, name)
        out[name] = (from_gptq(t["qweight"], t["qzeros"], t["scales"], t.get("g_idx"), int(qc.get("bits", 4)),
                               int(qc.get("group_size", 128)), fmt), t.get("bias"))
    return out


def _workbench_config(layers: dict, method: str) -> QuantConfig | None:
    """The QuantConfig describing the imported layers (for result rows), if they share one scheme."""
    def sym(qt) -> bool:
        z = qt["zeros"]
        return z is None or (not z.is_floating_point() and bool((z == 1 << (qt["bits"] - 1)).all()))

    kinds = {(qt["bits"], qt["declared_group_size"], sym(qt)) for qt, _ in layers.values()}
    if len(kinds) != 1:
        return None
    bits, g, sym = kinds.pop()
    return QuantConfig(method=method, bits=bits, granularity="group" if g > 0 else "per_channel",
                       group_size=g if g > 0 else 128, partial_groups=True, symmetric=sym, scale_dtype="float32")


def _set(root: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, new)


def _materialise_buffers(model: torch.nn.Module, device) -> None:
    """Rebuild modules whose non-persistent buffers are still on meta (rotary embeddings' inv_freq)."""
    for name, mod in list(model.named_modules()):
        if any(b.is_meta for b in mod.buffers(recurse=False)):
            if not hasattr(mod, "config"):
                raise RuntimeError(f"{name} ({type(mod).__name__}) has buffers the checkpoint does not hold")
            _set(model, name, type(mod)(config=mod.config).to(device))


def load_quantized(spec: str, dtype="float32", device: str = "cpu"):
    """Load a quantized checkpoint (local folder or hub id) with ``QuantLinear`` layers.

    Args:
        spec: a folder with ``config.json`` + ``*.safetensors`` (compressed-tensors as llm-compressor
            writes it, AutoAWQ GEMM, or GPTQ v1/v2), or a hub id such as
            ``"Qwen/Qwen2-7B-Instruct-AWQ"`` (downloaded with ``huggingface_hub``).
        dtype: compute dtype of activations and unquantized weights (scales keep their stored dtype).
        device: where the model is put.

    Returns:
        ``(model, tokenizer)`` (``tokenizer`` is ``None`` for a folder without tokenizer files);
        ``model.workbench_quant_config`` is a :class:`QuantConfig` describing
        the imported scheme (method ``awq``/``gptq``; for compressed-tensors read from llm-compressor's
        ``recipe.yaml``, else ``rtn``)
        and ``workbench.models.provenance_of(model)`` names the checkpoint and its format.

    Raises:
        ValueError: no or an unsupported ``quantization_config``, or a layout QuantLinear cannot hold
            (act-order groups, 3-bit GPTQ, GEMV AWQ, float formats); FileNotFoundError: no checkpoint.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = _resolve_dtype(dtype)
    folder = _local_dir(spec)
    raw = json.loads((folder / "config.json").read_text())
    fmt = checkpoint_format(raw)
    qc = raw.get("quantization_config") or raw.get("compression_config")
    tensors = _read_tensors(folder)
    layers = {"compressed-tensors": _ct_layers, "awq": _awq_layers, "gptq": _gptq_layers}[fmt](tensors, qc)
    if not layers:
        raise ValueError(f"{folder}: quantization_config says {fmt} but no quantized tensors were found")
    cfg = AutoConfig.from_pretrained(folder)
    for attr in ("quantization_config", "compression_config"):
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    for name, (qt, bias) in layers.items():
        _set(model, name, to_qlinear(qt, None if bias is None else bias.to(dtype), dtype, name).to(device))
    state = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in tensors.items()}
    _missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected:
        raise ValueError(f"{folder}: tensors the model does not have: {unexpected[:5]}")
    if getattr(cfg, "tie_word_embeddings", False):
        model.tie_weights()
    _materialise_buffers(model, device)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise ValueError(f"{folder}: the checkpoint lacks {left[:5]}")
    model.eval()
    method = fmt
    if fmt == "compressed-tensors":  # llm-compressor writes its recipe beside the weights
        recipe = (folder / "recipe.yaml").read_text() if (folder / "recipe.yaml").exists() else ""
        method = "gptq" if "GPTQModifier" in recipe else "awq" if "AWQModifier" in recipe else "rtn"
    model.workbench_quant_config = _workbench_config(layers, method)
    src = {"source": "quantized-checkpoint", "format": fmt, "path": str(folder.resolve()), "dtype": str(dtype)[6:]}
    if not Path(spec).expanduser().is_dir():
        src["model_id"] = spec
    model.workbench_provenance = src | {"quantization_config": qc}
    has_tok = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))
    return model, AutoTokenizer.from_pretrained(folder) if has_tok else None
