"""Prefill/decode study: hardware specs, roofline, fitted cost model, timing profile, serving simulator."""

from workbench.arch import MODEL_PRESETS, ModelSpec
from workbench.pd.costmodel import CostModel, PoolCosts, speculative_decode_cost
from workbench.pd.hardware import PRESETS, HardwareSpec
from workbench.pd.metrics import summarize
from workbench.pd.sim import SLO, LengthDist, SimConfig, Workload, WorkloadConfig, goodput_vs_rate, simulate

__all__ = [
           "MODEL_PRESETS",
           "PRESETS",
           "SLO",
           "CostModel",
           "HardwareSpec",
           "LengthDist",
           "ModelSpec",
           "PoolCosts",
           "SimConfig",
           "Workload",
           "WorkloadConfig",
           "goodput_vs_rate",
           "simulate",
           "speculative_decode_cost",
           "summarize",
]
