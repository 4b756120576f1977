"""Disaggregated prefill/decode served for real: a prefill process and a decode process on the fast
Engine, the prompt's KV cache sent between them over ``torch.distributed`` (NCCL on two GPUs, gloo
otherwise), with the workloads, request records and metrics of :mod:`workbench.pd.loop`."""

from workbench.pd.disagg.config import NCCL_ENV, DisaggConfig, placement
from workbench.pd.disagg.run import (
           DisaggRun,
           compare_runs,
           first_token_agreement,
           run_disagg,
           sim_config_for,
           transfer_check,
)
from workbench.pd.disagg.study import capacity_rps, load_labels, summary, workloads_at_loads

__all__ = ["NCCL_ENV", "DisaggConfig", "DisaggRun", "capacity_rps", "compare_runs", "first_token_agreement",
           "load_labels", "placement", "run_disagg", "sim_config_for", "summary", "transfer_check",
           "workloads_at_loads"]
