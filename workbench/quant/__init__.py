"""Weight-only quantization: RTN, AWQ, GPTQ into packed ``QuantLinear`` layers, footprint, sweeps.

``quantize(model, QuantConfig(...)) -> (qmodel, per_layer_report)``; ``footprint(model)`` measures real
bytes; ``run_quant_sweep`` measures fidelity (and optionally MMLU) per config, resumably.
"""

from .config import PRESETS, QuantConfig
from .footprint import footprint, kv_bytes_per_token
from .qlinear import QuantLinear
from .quantize import quantizable_linears, quantize
from .sweep import run_quant_sweep
from .verdict import QuantVerdict, compare_points, takeaways

__all__ = [
           "PRESETS",
           "QuantConfig",
           "QuantLinear",
           "QuantVerdict",
           "compare_points",
           "footprint",
           "kv_bytes_per_token",
           "quantizable_linears",
           "quantize",
           "run_quant_sweep",
           "takeaways",
]
