"""Runners: the single place every timing goes through (see :mod:`workbench.engine.api`).

* :class:`HFRunner` -- Hugging Face reference (correct everywhere, slow on GPU).
* :class:`Engine` -- the fast path (own forward, static KV cache, CUDA graphs, W4A16); CPU fallback.
* :class:`EngineConfig` -- the kernels it may choose (``WORKBENCH_DISABLED_KERNELS``); which it chose:
  ``Engine.route_table()`` / ``Engine.route_key()`` (:mod:`workbench.engine.routing`).
"""

from workbench.engine.api import BatchRunner, Runner
from workbench.engine.config import EngineConfig
from workbench.engine.engine import Engine, SlotRunner
from workbench.engine.hf_runner import HFRunner
from workbench.engine.int4 import Int4Linear, dequantize_int4, quantize_rtn_int4, unpack_int4


def fast_runner(model, max_seq: int = 2048) -> Runner:
    """Single-sequence runner on the fast path for ``model``: ``Engine.from_hf(model, max_batch=1,
    max_seq).runner(0)`` for Llama / Qwen2 / Mistral-family models (quantized ``QuantLinear`` layers
    included, on the quantized matmuls of :mod:`workbench.engine.runtime`), else the :class:`HFRunner`
    reference. ``max_seq``: longest sequence
    (prompt + generated + draft tokens) the KV cache must hold."""
    try:
        return Engine.from_hf(model, max_batch=1, max_seq=max_seq).runner(0)
    except (ValueError, NotImplementedError, AttributeError, KeyError):
        return HFRunner(model)


__all__ = [
    "BatchRunner",
    "Engine",
    "EngineConfig",
    "HFRunner",
    "Int4Linear",
    "Runner",
    "SlotRunner",
    "dequantize_int4",
    "fast_runner",
    "quantize_rtn_int4",
    "unpack_int4",
]
