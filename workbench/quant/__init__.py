"""Weight-only quantization: RTN, AWQ, GPTQ into packed ``QuantLinear`` layers, footprint, sweeps.

``quantize(model, QuantConfig(...)) -> (qmodel, per_layer_report)``; ``footprint(model)`` measures real
bytes; ``run_quant_sweep`` measures fidelity (and optionally MMLU) per config, resumably.
"""

from .config import GRIDS, PRESETS, QuantConfig, quant_grid
from .footprint import footprint, kv_bytes_per_token
from .qlinear import QuantLinear
from .quantize import quantizable_linears, quantize
from .sweep import run_quant_sweep

__all__ = [
           "GRIDS",
           "PRESETS",
           "QuantConfig",
           "QuantLinear",
           "footprint",
           "kv_bytes_per_token",
           "quantizable_linears",
           "quant_grid",
           "quantize",
           "run_quant_sweep",
]
