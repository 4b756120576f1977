"""Roofline lower-bound times of prefill and decode steps on a :class:`HardwareSpec`, from the FLOPs
and bytes a :class:`workbench.arch.ModelSpec` counts (its module docstring gives the counting).

Time bound: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)`` (Williams et al. 2009, "Roofline").
"""

from __future__ import annotations

from workbench.arch import ModelSpec
from workbench.pd.hardware import HardwareSpec

__all__ = ["decode_time_ms", "prefill_time_ms"]


def prefill_time_ms(model: ModelSpec, hw: HardwareSpec, lengths) -> float:
    """Roofline prefill time, ms: ``max(FLOPs / matmul_flops, weight_bytes / hbm)`` for one step."""
    return 1e3 * max(model.prefill_flops(lengths) / hw.matmul_flops, model.weight_bytes / (hw.hbm_gbs * 1e9))


def decode_time_ms(model: ModelSpec, hw: HardwareSpec, batch: int, kv_tokens: float) -> float:
    """Roofline decode step time, ms: ``max(FLOPs / matmul_flops, bytes / hbm)``."""
    return 1e3 * max(model.decode_flops(batch, kv_tokens) / hw.matmul_flops,
                     model.decode_bytes(batch, kv_tokens) / (hw.hbm_gbs * 1e9))
