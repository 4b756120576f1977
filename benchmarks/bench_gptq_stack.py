"""GPTQ with the Linears of one input stacked into one column loop (``quantize.STACK_SHARED_HESSIAN``) against one
loop per Linear: quantization time and whether the quantized weights differ.

``python -m benchmarks.bench_gptq_stack --out results/<dir>/gptq_stack.json [--device cuda --dtype bfloat16]``: the
built-in model (or ``--model``), preset ``gptq_int4_g128`` (partial groups), 4 x 128 calibration tokens, each
variant twice in alternation; wall and process CPU time per run, and the fraction of bit-equal effective weights
per Linear.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

import torch

from benchmarks.common import environment, sync
from workbench.models import load_model
from workbench.quant import QuantConfig, quantize


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="gptq_stack.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    qz = importlib.import_module("workbench.quant.quantize")
    model, tok = load_model(a.model, dtype=a.dtype, device=a.device)
    cfg = QuantConfig.from_name("gptq_int4_g128", partial_groups=True, n_calib_samples=4, calib_seq_len=128)
    runs, models = [], {}
    for stack in (True, False, True, False):
        qz.STACK_SHARED_HESSIAN = stack
        sync()
        t, w = time.process_time(), time.perf_counter()
        models[stack] = quantize(model, cfg, tok=tok)[0]
        sync()
        runs.append({"stacked": stack, "wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - t})
        print(runs[-1], flush=True)
    qz.STACK_SHARED_HESSIAN = True
    equal = {n: float((a_.effective_weight() == b_.effective_weight()).float().mean())
             for (n, a_), (_, b_) in zip(models[True].named_modules(), models[False].named_modules())
             if hasattr(a_, "effective_weight")}
    out = {"env": environment(), "model": a.model, "device": a.device, "dtype": a.dtype, "threads": a.threads,
           "config": cfg.label, "runs": runs, "frac_equal_min": min(equal.values()),
           "frac_equal_mean": sum(equal.values()) / len(equal), "n_linears": len(equal)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: v for k, v in out.items() if k != "env"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
