"""Discrete-event serving simulator: colocated, chunked-prefill and disaggregated prefill/decode."""

from workbench.pd.metrics import SLO
from workbench.pd.sim.config import SimConfig
from workbench.pd.sim.core import first_win_rate, goodput_vs_rate, simulate, slo_capacity
from workbench.pd.sim.grid import (
           deployment_grid,
           grid_frames,
           grid_points,
           run_grid_point,
           select_deployments,
           sweep_grid,
)
from workbench.pd.sim.workload import (
           WORKLOAD_PRESETS,
           LengthDist,
           Workload,
           WorkloadConfig,
           generate_workload,
)

__all__ = ["SLO", "WORKLOAD_PRESETS", "LengthDist", "SimConfig", "Workload", "WorkloadConfig", "deployment_grid",
           "first_win_rate", "generate_workload", "goodput_vs_rate", "grid_frames", "grid_points",
           "run_grid_point", "select_deployments", "simulate", "slo_capacity", "sweep_grid"]
