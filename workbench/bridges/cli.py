"""``python -m workbench.bridges``: one command per bridge.

* ``export``: quantize a model with a ``QuantConfig`` preset and write a compressed-tensors checkpoint,
  then print the ``vllm serve`` command for it;
* ``import``: load a quantized checkpoint (folder or hub id: compressed-tensors, AutoAWQ, GPTQ) into
  ``QuantLinear`` layers and print its footprint and a greedy completion;
* ``vllm``: print the ``vllm serve`` command lines and ``vllm.LLM(...)`` kwargs of a deployment.

(lm-eval has its own script: ``workbench-lm-eval``, see :mod:`workbench.bridges.lm_eval_cli`.)
"""

from __future__ import annotations

import argparse
import json

__all__ = ["main"]


def _kv(pairs: list[str]) -> dict:
    """``["group_size=64", "symmetric=true"]`` -> ``{"group_size": 64, "symmetric": True}``."""
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep:
            raise SystemExit(f"--set {p!r}: use FIELD=VALUE, e.g. --set group_size=64")
        try:
            out[k] = json.loads(v.lower() if v.lower() in ("true", "false") else v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _export(a) -> None:
    import torch

    from workbench.bridges.export import export_compressed_tensors
    from workbench.bridges.vllm_config import VllmDeployment
    from workbench.models import load_model
    from workbench.quant import QuantConfig, quantize

    model, tok = load_model(a.model, dtype=a.dtype)
    cfg = QuantConfig.from_name(a.quant, **_kv(a.set))
    q, _ = quantize(model, cfg, tok=tok, progress=True)
    out_dtype = getattr(torch, a.out_dtype) if a.out_dtype else None
    report = export_compressed_tensors(q, a.out, tok, unfoldable=a.unfoldable, dtype=out_dtype)
    if "fold" in report:
        print("AWQ scale folds:", report["fold"].value_counts().to_dict())
    print(f"wrote {a.out} ({cfg.label}); serve it with:\n  {VllmDeployment(a.out).serve_commands()[0]}")


def _import(a) -> None:
    import torch

    from workbench.bridges.imports import load_quantized
    from workbench.quant import footprint

    model, tok = load_quantized(a.checkpoint, dtype=a.dtype, device=a.device)
    fp = footprint(model)
    qc = model.workbench_quant_config
    print(f"{a.checkpoint}: {fp['n_quant_layers']} QuantLinear layers, {qc.label if qc else 'mixed schemes'}, "
          f"{fp['weight_bytes'] / 1e9:.2f} GB, {fp['bits_per_weight_quantized']:.2f} bits/weight quantized")
    if tok is not None and a.prompt:
        ids = tok(a.prompt, return_tensors="pt").input_ids.to(a.device)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=a.max_new_tokens, do_sample=False)
        print(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))


def _vllm(a) -> None:
    from workbench.bridges.vllm_config import VllmDeployment
    from workbench.pd.sim.config import SimConfig
    from workbench.spec.config import SpecConfig

    sim = None
    if a.policy:
        n_p, _, n_d = (a.pd or "1:1").partition(":")
        sim = SimConfig(policy=a.policy, n_prefill=int(n_p), n_decode=int(n_d or 1), max_batch=a.max_num_seqs,
                        chunk_budget=a.max_num_batched_tokens, max_prefill_tokens=a.max_num_batched_tokens)
    spec = SpecConfig(k=a.k, temperature=a.temperature) if a.draft else None
    dep = VllmDeployment.from_workbench(a.model, sim=sim, spec=spec, draft_model=a.draft,
                                        kv_cache_dtype=a.kv_cache_dtype, extra_args=tuple(a.extra or ()))
    print("\n".join(dep.serve_commands()))
    for inst in dep.instances():
        role = inst["role"] if dep.disaggregated else "serve"
        print(f"# vllm.LLM(**{dep.llm_kwargs(role)!r})" + (f"  ({role})" if dep.disaggregated else ""))
        if not dep.disaggregated:
            break


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m workbench.bridges", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="quantize and write a compressed-tensors checkpoint")
    e.add_argument("--model", default="smollm2-135m")
    e.add_argument("--quant", default="awq_int4_g128", help="QuantConfig preset")
    e.add_argument("--set", nargs="*", help="QuantConfig field overrides, e.g. group_size=64")
    e.add_argument("--out", required=True)
    e.add_argument("--dtype", default="float32", help="dtype the model is loaded and quantized in")
    e.add_argument("--out-dtype", choices=("float32", "bfloat16", "float16"),
                   help="checkpoint dtype (default: --dtype; scales round to it, see export_compressed_tensors)")
    e.add_argument("--unfoldable", default="dense", choices=("dense", "requantize", "error"))
    i = sub.add_parser("import", help="load a quantized checkpoint into QuantLinear layers")
    i.add_argument("checkpoint")
    i.add_argument("--dtype", default="bfloat16")
    i.add_argument("--device", default="cpu")
    i.add_argument("--prompt", default="The capital of France is")
    i.add_argument("--max-new-tokens", type=int, default=16)
    v = sub.add_parser("vllm", help="print vllm serve command lines and vllm.LLM kwargs")
    v.add_argument("--model", required=True)
    v.add_argument("--policy", choices=("colocated", "chunked", "disaggregated"))
    v.add_argument("--pd", help="prefill:decode instances, e.g. 1:2 (disaggregated)")
    v.add_argument("--max-num-seqs", type=int, default=256)
    v.add_argument("--max-num-batched-tokens", type=int, default=8192)
    v.add_argument("--draft")
    v.add_argument("--k", type=int, default=4)
    v.add_argument("--temperature", type=float, default=0.0)
    v.add_argument("--kv-cache-dtype", default="auto")
    v.add_argument("--extra", nargs=argparse.REMAINDER, help="more vllm serve flags, passed through")
    a = p.parse_args(argv)
    {"export": _export, "import": _import, "vllm": _vllm}[a.cmd](a)
