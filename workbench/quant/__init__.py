"""Weight-only quantization: RTN, AWQ, GPTQ into packed ``QuantLinear`` layers, footprint.

``quantize(model, QuantConfig(...)) -> (qmodel, per_layer_report)``; ``convert_for_runtime(qmodel)`` ->
the engine on its quantized matmuls; ``footprint(model)`` measures real bytes. The study that measures memory,
fidelity, MMLU and speed per config is :mod:`workbench.studies.quant`.
"""

from .config import GRIDS, PRESETS, QuantConfig, quant_grid
from .footprint import footprint
from .qlinear import QuantLinear
from .quantize import quantizable_linears, quantize
from .runtime import convert_for_runtime, runtime_summary
from .verdict import QuantVerdict, compare_points, takeaways

__all__ = [
           "GRIDS",
           "PRESETS",
           "QuantConfig",
           "QuantLinear",
           "QuantVerdict",
           "compare_points",
           "convert_for_runtime",
           "footprint",
           "quant_grid",
           "quantizable_linears",
           "quantize",
           "runtime_summary",
           "takeaways",
]
