"""Weight-only quantization: RTN, AWQ, GPTQ into packed ``QuantLinear`` layers, footprint, sweeps.

``quantize(model, QuantConfig(...)) -> (qmodel, per_layer_report)``; ``convert_for_runtime(qmodel)`` ->
the engine on its quantized matmuls; ``footprint(model)`` measures real bytes; ``run_quant_sweep``
measures memory, fidelity, MMLU and speed per config, resumably.
"""

from .config import GRIDS, PRESETS, QuantConfig, quant_grid
from .footprint import footprint
from .qlinear import QuantLinear
from .quantize import quantizable_linears, quantize
from .runtime import convert_for_runtime, runtime_summary
from .speed import SpeedConfig, measure_speed
from .sweep import demo_defaults, run_quant_speed, run_quant_sweep
from .verdict import QuantVerdict, compare_points, takeaways

__all__ = [
           "GRIDS",
           "PRESETS",
           "QuantConfig",
           "QuantLinear",
           "QuantVerdict",
           "SpeedConfig",
           "compare_points",
           "convert_for_runtime",
           "demo_defaults",
           "footprint",
           "measure_speed",
           "quant_grid",
           "quantizable_linears",
           "quantize",
           "run_quant_speed",
           "run_quant_sweep",
           "runtime_summary",
           "takeaways",
]
