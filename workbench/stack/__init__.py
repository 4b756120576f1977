"""The stacked study: W4A16 x speculative decoding x P/D disaggregation on one target, and KV-cache
quantization fidelity by context position.

``run_stack(target, draft, StackConfig(...), prompt) -> StackResult`` (the 8-combination table, its
multiplicativity, the simulated load grid, the alpha x k what-if grids); :mod:`workbench.stack.plots`
draws them; :mod:`workbench.stack.kv_study` measures the KV cache.
"""

from workbench.stack.config import COMBINATIONS, StackConfig, combo_label
from workbench.stack.run import StackResult, run_stack
from workbench.stack.table import load_note, multiplicativity, stack_table, whatif_batch1

__all__ = ["COMBINATIONS", "StackConfig", "StackResult", "combo_label", "load_note", "multiplicativity",
           "run_stack", "stack_table", "whatif_batch1"]
