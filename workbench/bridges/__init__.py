"""Bridges to the field's tools: checkpoints vLLM serves, published quantized models in, lm-eval on any
task, vLLM configurations out and vLLM measurements in.

* :mod:`~workbench.bridges.fold` + :mod:`~workbench.bridges.export` -- AWQ scales folded exactly, then
  a compressed-tensors (llm-compressor) checkpoint that vLLM and transformers load;
* :mod:`~workbench.bridges.imports` + :mod:`~workbench.bridges.formats` -- compressed-tensors, AutoAWQ
  GEMM and GPTQ (v1 / v2) checkpoints into ``QuantLinear`` layers;
* :mod:`~workbench.bridges.lm_eval_model` -- ``lm_eval --model workbench`` (import it, or run the
  ``workbench-lm-eval`` script; not imported here, so lm-eval stays optional);
* :mod:`~workbench.bridges.vllm_source` -- the pinned vLLM release's source, parsed for names;
  :mod:`~workbench.bridges.vllm_config` -- ``vllm serve`` command lines and ``vllm.LLM`` kwargs;
  :mod:`~workbench.bridges.vllm_metrics` -- ``vllm bench serve`` JSON and ``/metrics`` counters in the
  workbench's tables; :mod:`~workbench.bridges.plots` -- simulator vs vLLM;
* ``python -m workbench.bridges {export,import,vllm}`` -- one command per bridge (:mod:`~.cli`).
"""

from workbench.bridges.export import export_compressed_tensors
from workbench.bridges.fold import fold_awq_scales
from workbench.bridges.imports import load_quantized
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
    "export_compressed_tensors",
    "fold_awq_scales",
    "load_quantized",
    "plot_sim_vs_vllm",
    "read_bench_serve",
    "read_spec_metrics",
    "refuse_invented_flags",
    "spec_metrics_delta",
]
