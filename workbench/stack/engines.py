"""Engines of one stacked study: the target and the draft in each precision, and their memory.

Every timing of the study goes through :class:`workbench.engine.Engine`. A model is either an HF
``*ForCausalLM`` (real weights: ``Engine.from_hf``) or an HF config (object or dict with
``model_type``: random weights for timing only, ``Engine.from_config``). W4A16 engines: RTN through the
engine's own group-wise INT4 (``w4a16="rtn"``), or AWQ / GPTQ weights from ``workbench.quant.quantize``
that the engine runs on its INT4 kernels.

Memory: on CUDA, :class:`MemoryProbe` reads ``torch.cuda.max_memory_allocated`` around building the
engines and running the request (measured); elsewhere :func:`footprint_bytes` adds up the engines'
tensors (weights, scales, KV cache), a footprint model that the result rows label as such.
"""

from __future__ import annotations

import torch

from workbench.engine import Engine
from workbench.engine.int4 import Int4Linear

__all__ = ["MemoryProbe", "build_engine", "dequantized_copy_bytes", "footprint_bytes", "is_config", "resized"]


def is_config(model) -> bool:
    """True for an HF config (dict or ``PretrainedConfig``) instead of a module: built with random
    weights on the device (``Engine.from_config``), timing only."""
    return isinstance(model, dict) or (not isinstance(model, torch.nn.Module) and hasattr(model, "model_type"))


def _check_groups(model, group_size: int) -> None:
    cfg = model if is_config(model) else model.config
    get = cfg.get if isinstance(cfg, dict) else lambda k, d=None: getattr(cfg, k, d)
    for name in ("hidden_size", "intermediate_size"):
        if int(get(name)) % group_size:
            raise ValueError(f"group_size={group_size} does not divide {name}={get(name)}; pick a power of two "
                             f"that divides it (e.g. 64 for SmolLM2's 576)")


def build_engine(model, quantized: bool, *, quant_method: str = "rtn", group_size: int = 128,
                 max_batch: int = 1, max_seq: int = 256, device=None, dtype=None, seed: int = 0,
                 kv_dtype: str = "auto") -> Engine:
    """The engine of ``model`` (HF module or HF config) in the base precision or W4A16.

    ``quant_method``: ``"rtn"`` (the engine's RTN, asymmetric groups of ``group_size``), or ``"awq"`` /
    ``"gptq"`` (``workbench.quant.quantize`` with ``QuantConfig(method, bits=4, group_size)``; needs
    an engine that runs ``QuantLinear`` layers on INT4 kernels). Raises ValueError when
    ``group_size`` does not divide the model's widths, NotImplementedError for AWQ/GPTQ on an engine
    that would dequantize them (their timing would be the base precision's)."""
    if quantized:
        _check_groups(model, group_size)
    if is_config(model):
        if quantized and quant_method != "rtn":
            raise ValueError("a random-init model has nothing to calibrate AWQ/GPTQ on; use quant_method='rtn'")
        return Engine.from_config(model, max_batch=max_batch, max_seq=max_seq, dtype=dtype, device=device,
                                  w4a16=quantized, group_size=group_size, seed=seed, kv_dtype=kv_dtype)
    if not quantized or quant_method == "rtn":
        return Engine.from_hf(model, max_batch=max_batch, max_seq=max_seq, dtype=dtype, device=device,
                              w4a16="rtn" if quantized else None, group_size=group_size, kv_dtype=kv_dtype)
    from workbench.quant import QuantConfig, quantize

    qmodel, _ = quantize(model, QuantConfig(method=quant_method, bits=4, granularity="group",
                                            group_size=group_size))
    eng = Engine.from_hf(qmodel, max_batch=max_batch, max_seq=max_seq, dtype=dtype, device=device,
                         kv_dtype=kv_dtype)
    if not any(isinstance(m, Int4Linear) for m in eng.w.matmuls()):
        raise NotImplementedError(f"this engine runs {quant_method.upper()} QuantLinear layers dequantized, so a "
                                  "W4A16 timing would be the base precision's; use quant_method='rtn'")
    return eng


def resized(engine: Engine, max_batch: int, max_seq: int) -> Engine:
    """A new engine over ``engine``'s weights (shared, not copied) with a KV cache of ``max_batch``
    slots of ``max_seq`` tokens (for the load profile after a batch-1 run)."""
    return Engine(engine.spec, engine.w, engine.config, max_batch, max_seq, engine.dtype, engine.device,
                  kv_dtype=engine.kv_dtype)


def _tensor_bytes(obj, seen: set) -> int:
    total = 0
    for t in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def _copy(m):
    """The dequantized copy a CPU wrapper (``Dequantized``, ``FewRows``: ``inner`` + ``w``) keeps beside its
    quantized ``inner``, else None."""
    return m.w if hasattr(m, "inner") and isinstance(getattr(m, "w", None), torch.Tensor) else None


def _matmul_bytes(m, seen: set) -> int:
    """A matmul's stored format: ``nbytes()`` for a wrapper around a quantized ``inner`` (its dequantized CPU
    copy left out, see :func:`dequantized_copy_bytes`), else its tensors."""
    if _copy(m) is None:
        return _tensor_bytes(m, seen)
    key = ("inner", id(m.inner))
    if key in seen:
        return 0
    seen.add(key)
    return int(m.nbytes())


def footprint_bytes(engine: Engine) -> int:
    """Bytes of an engine's tensors: weights (each stored tensor once: codes, scales, zeros, every
    backend's packing), norms, biases, embedding, and the KV cache as allocated (``max_batch x
    S_cache`` tokens, scales included). A quantized matmul counts in its quantized format; the
    dequantized copy the engine keeps on the CPU for calls the integer kernels serve slower (float32
    activations, or more rows than ``EngineConfig.cpu_int_max_rows``) is an engine artifact a serving
    deployment does not hold, counted apart by :func:`dequantized_copy_bytes`."""
    seen: set = set()
    w = engine.w
    total = _tensor_bytes(w, seen)
    for lw in w.layers:
        total += _tensor_bytes(lw, seen)
        for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd):
            total += _matmul_bytes(m, seen)
    total += _matmul_bytes(w.lm_head, seen)
    caches = (engine.k_cache, engine.v_cache) if engine.kvq is None else engine.kvq.tensors()
    return total + sum(c.numel() * c.element_size() for c in caches)


def dequantized_copy_bytes(engine: Engine) -> int:
    """Bytes of the dequantized weight copies the engine keeps on the CPU beside quantized matmuls (0 on CUDA,
    and for a float engine); not in :func:`footprint_bytes`."""
    mats = [m for lw in engine.w.layers for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd)] + [engine.w.lm_head]
    copies = {c.data_ptr(): c.numel() * c.element_size() for c in map(_copy, mats) if c is not None}
    return sum(copies.values())


class MemoryProbe:
    """``with MemoryProbe(device) as m: ...`` then ``m.peak_bytes``: on CUDA the peak of
    ``torch.cuda.max_memory_allocated`` inside the block minus the allocation at its start
    (measured); elsewhere None (use :func:`footprint_bytes`)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.peak_bytes: int | None = None
        self._start = 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device) - self._start)
