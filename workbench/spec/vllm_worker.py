"""Run a batch of prompts through ``vllm.LLM`` with speculative decoding and write what vLLM counted (JSON).

A standalone script for the vLLM environment (``.venv-vllm``; the workbench's own environment never imports
vllm): ``.venv-vllm/bin/python workbench/spec/vllm_worker.py IN.json OUT.json``. It imports nothing from the
workbench. IN: ``{"model", "prompts": [[ids]...], "max_tokens", "temperature", "top_p", "seed", "seeds" (one per
prompt), "speculative_config"
(dict or null), "max_model_len", "dtype", "memory_fraction" (``gpu_memory_utilization``: on the CPU build
the fraction of host memory vLLM reserves, KV cache included; default 0.1), "llm_kwargs": {...}}``. OUT: per prompt the output token ids and
vLLM's per-request counters (``RequestOutput.outputs[0].spec_decode_metrics.to_dict()`` with
``per_request_spec_decode_metrics="detailed"``: the per-step ``per_step_drafted`` / ``per_step_accepted``
arrays, vLLM 0.32 ``v1/metrics/stats.py`` ``RequestSpecDecodeMetrics``), the engine-wide counters of
``LLM.get_metrics()`` (``vllm:spec_decode_num_drafts``, ``_num_draft_tokens``, ``_num_accepted_tokens``,
``_num_accepted_tokens_per_pos``), vLLM's version and the wall times.
"""

import json
import sys
import time


def _metrics(llm) -> dict:
    """The ``vllm:spec_decode_*`` counters of ``LLM.get_metrics()`` (per-position ones as a list)."""
    out = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        if hasattr(m, "values"):  # a Vector: one value per position
            out[m.name] = [float(v) for v in m.values]
        elif hasattr(m, "value"):
            out[m.name] = float(m.value)
    return out


def main(argv) -> None:
    from vllm import LLM, SamplingParams, __version__
    from vllm.inputs import TokensPrompt

    with open(argv[1]) as f:
        spec = json.load(f)
    t0 = time.time()
    kwargs = dict(model=spec["model"], dtype=spec.get("dtype", "bfloat16"), enforce_eager=True,
                  max_model_len=spec.get("max_model_len", 2048), seed=spec.get("seed", 0),
                  disable_log_stats=False, gpu_memory_utilization=spec.get("memory_fraction", 0.1),
                  **spec.get("llm_kwargs", {}))
    if spec.get("speculative_config"):
        kwargs["speculative_config"] = spec["speculative_config"]
        kwargs["per_request_spec_decode_metrics"] = "detailed"
    llm = LLM(**kwargs)
    load_s = time.time() - t0
    seeds = spec.get("seeds") or [spec.get("seed", 0)] * len(spec["prompts"])
    sps = [SamplingParams(max_tokens=spec["max_tokens"], temperature=spec.get("temperature", 0.0),
                          top_p=spec.get("top_p", 1.0), seed=s, ignore_eos=True) for s in seeds]
    t0 = time.time()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in spec["prompts"]], sps, use_tqdm=False)
    gen_s = time.time() - t0
    rows = []
    for o in outs:
        c = o.outputs[0]
        sdm = c.spec_decode_metrics.to_dict() if getattr(c, "spec_decode_metrics", None) is not None else None
        rows.append({"prompt_ids": list(o.prompt_token_ids), "token_ids": list(c.token_ids),
                     "finish_reason": c.finish_reason, "spec_decode_metrics": sdm,
                     "num_cached_tokens": getattr(o, "num_cached_tokens", None)})
    res = {"vllm_version": __version__, "load_s": load_s, "generate_s": gen_s, "outputs": rows,
           "metrics": _metrics(llm), "llm_kwargs": {k: v for k, v in kwargs.items() if k != "model"},
           "model": spec["model"]}
    with open(argv[2], "w") as f:
        json.dump(res, f)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main(sys.argv)
