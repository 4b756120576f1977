"""``convert_for_runtime``: a quantized model -> the engine, on its quantized matmuls.

The two steps of gpt-fast's ``quantize.py`` (``quantize`` writes the integer codes,
``convert_for_runtime`` swaps in the modules that compute with them): :func:`workbench.quant.quantize`
gives ``QuantLinear`` layers (RTN, AWQ or GPTQ; W2-W8, symmetric or asymmetric, any group size, AWQ's
input scale), and this builds :class:`workbench.engine.Engine` from their codes.

How the engine picks a matmul per weight (:mod:`workbench.engine.runtime`; the labels say which):

* W2-W4: on CUDA ``Int4Linear`` with the engine's W4A16 backend (``w4a16_backend``; default
  ``"triton:dequant"``); on the CPU with bf16 activations torch's CPU INT4 kernel for calls of up to
  ``EngineConfig.cpu_int_max_rows`` rows and the weight dequantized once for more, with float32 activations
  the dequantized weight only (the CPU INT kernels are slower than a dense matmul there); a runtime group
  dividing both the quantization group and ``in`` (partial groups, per channel, per tensor are expanded exactly), ``in``
  padded to a multiple of 128 if the backend refuses the shape, ``"dequant"`` as the last resort;
* W5-W8: ``Int8Linear`` (``torch.ops.aten._weight_int8pack_mm`` per channel, dequant for groups; on the CPU
  as W4 above);
* AWQ ``input_scale``: folded into the RMSNorm before q/k/v and gate/up, applied to the activation
  before o_proj and down_proj;
* anything else stays dense (dequantized) with a warning and a ``"dense (why)"`` label.
"""

from __future__ import annotations

import pandas as pd

from workbench.engine import Engine
from workbench.engine.config import EngineConfig

__all__ = ["convert_for_runtime", "runtime_label", "runtime_summary"]


def convert_for_runtime(qmodel, *, max_batch: int = 1, max_seq: int | None = None, dtype=None, device=None,
                        backend: str | None = None, use_graphs: bool | None = None,
                        quant_runtime: str = "auto", config: EngineConfig | None = None) -> Engine:
    """The engine for ``qmodel`` (a Llama / Qwen2 / Mistral HF model whose Linears
    :func:`workbench.quant.quantize` replaced), on its quantized matmuls.

    Args:
        qmodel: the quantized model (left unchanged).
        max_batch, max_seq: KV-cache slots and tokens per slot (``max_seq`` default
            ``min(max_position_embeddings, 2048)``).
        dtype, device: activation dtype and device (default ``config.compute_dtype``, else the model's). On a
            CPU with AVX-512 BF16 pass ``dtype=torch.bfloat16`` (or ``EngineConfig(compute_dtype="bfloat16")``)
            for the INT4 / INT8 kernels to run.
        backend: the INT4 backend (:data:`workbench.engine.int4.BACKENDS`; default per device).
        use_graphs: CUDA graphs for small steps (default: on CUDA).
        quant_runtime: ``"auto"`` (the kernels on CUDA; on the CPU a dequantized copy kept beside them,
            their bytes counted in the quantized format), ``"kernels"`` (from the codes on every call, any
            device) or ``"cached"``; see :func:`workbench.engine.weights.weights_from_hf`.
        config: the :class:`~workbench.engine.config.EngineConfig` (default ``EngineConfig.from_env()``).

    Returns:
        :class:`workbench.engine.Engine` equal to ``Engine.from_hf(qmodel, ...)``; ``engine.w.labels``
        maps each matmul (``"layers.0.qkv"``, ..., ``"lm_head"``) to the runtime that runs it, and
        ``engine.weight_bytes()`` counts the bytes of that runtime format.

    Raises:
        ValueError: an architecture the engine does not support, or a bad backend name.
    """
    return Engine.from_hf(qmodel, max_batch=max_batch, max_seq=max_seq, dtype=dtype, device=device,
                          w4a16_backend=backend, use_graphs=use_graphs, quant_runtime=quant_runtime, config=config)


def runtime_summary(engine: Engine) -> pd.DataFrame:
    """``engine.w.labels`` as a DataFrame: ``matmul`` (``layers.0.qkv``...), ``runtime`` (e.g.
    ``"int4 triton:rows g128"``, ``"int8 int8pack"``, ``"dense"``)."""
    return pd.DataFrame([{"matmul": k, "runtime": v} for k, v in engine.w.labels.items()])


def runtime_label(engine: Engine) -> str:
    """One line for a results column: each distinct runtime label with its count, most frequent first,
    e.g. ``"int4 dequant g64 x120; dense x1"``."""
    if not engine.w.labels:  # a float model: every matmul dense
        return "dense"
    counts = pd.Series(list(engine.w.labels.values())).value_counts()
    return "; ".join(f"{k} x{v}" for k, v in counts.items())
