"""Bridges to the field's tools: vLLM configurations out, vLLM measurements in (more in later modules).

* :mod:`~workbench.bridges.vllm_source` -- the pinned vLLM release's source, parsed for flag, field
  and metric names;
* :mod:`~workbench.bridges.vllm_config` -- :class:`VllmDeployment`: ``vllm serve`` command lines and
  ``vllm.LLM(...)`` kwargs for a deployment chosen in the notebooks;
* :mod:`~workbench.bridges.vllm_metrics` -- ``vllm bench serve`` JSON and ``/metrics`` counters read
  into the workbench's tables; :mod:`~workbench.bridges.plots` -- simulator vs vLLM.
"""

from workbench.bridges.plots import compare_sim_vllm, plot_sim_vs_vllm
from workbench.bridges.vllm_config import ARTICLE_FLAGS, VllmDeployment, refuse_invented_flags
from workbench.bridges.vllm_metrics import (
    bench_serve_requests,
    read_bench_serve,
    read_spec_metrics,
    spec_metrics_delta,
)
from workbench.bridges.vllm_source import VLLM_VERSION, VllmSource, VllmSourceUnavailable

__all__ = [
    "ARTICLE_FLAGS",
    "VLLM_VERSION",
    "VllmDeployment",
    "VllmSource",
    "VllmSourceUnavailable",
    "bench_serve_requests",
    "compare_sim_vllm",
    "plot_sim_vs_vllm",
    "read_bench_serve",
    "read_spec_metrics",
    "refuse_invented_flags",
    "spec_metrics_delta",
]
