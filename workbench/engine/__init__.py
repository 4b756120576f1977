"""Runners: the single place every timing goes through (see :mod:`workbench.engine.api`).

* :class:`HFRunner` -- Hugging Face reference (correct everywhere, slow on GPU).
* :class:`Engine` -- the fast path (own forward, static KV cache, CUDA graphs, W4A16); CPU fallback.
"""

from workbench.engine.api import BatchRunner, Runner
from workbench.engine.engine import Engine, SlotRunner
from workbench.engine.hf_runner import HFRunner
from workbench.engine.int4 import Int4Linear, dequantize_int4, quantize_rtn_int4, unpack_int4

__all__ = ["BatchRunner", "Engine", "HFRunner", "Int4Linear", "Runner", "SlotRunner", "dequantize_int4",
           "quantize_rtn_int4", "unpack_int4"]
