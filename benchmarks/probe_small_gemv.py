"""Why is the W4A16 decode step of a small model slower than its bf16 step? Per-call kernel times and a profile.

For each one-row call of a decode step (qkv with the RMSNorm prologue, o with the residual epilogue, gate_up with
RMSNorm, down with SwiGLU + residual) of the SmolLM2-135M shapes (INT4 group 64) and the Qwen2-7B shapes (group
128), random weights, bf16:

* bf16: the engine's fused GEMV (``workbench.kernels.gemv``) over its tuner's configurations plus whole-K tiles
  (``BF16_EXTRA``), timed by ``gemv.tune`` (CUDA-graph replay, weights rotated past L2; for Qwen2-7B three of its
  configurations only, to save compile time);
* W4A16: the fused INT4 GEMV (``workbench.kernels.w4a16.gemv_fused``) over :func:`w4a16.default_configs` (which
  adds the whole-K prefetch tiles), timed by ``w4a16.tune_fused``; and the configuration the plain GEMV's tuner
  picks (what the engine launched before ``w4a16.tune_fused``), timed on the fused call.

Then the per-kernel device time of eager decode steps of both engines (``bench_decode.profile_step``) for the
135M model. Run on the H200: ``python3 -m benchmarks.probe_small_gemv --out $OUT/probe/probe_small_gemv.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch

from benchmarks.bench_decode import profile_step
from benchmarks.check_w4_onerow import EPS, calls
from benchmarks.common import environment
from workbench.engine import Engine
from workbench.engine.int4 import quantize_rtn_int4
from workbench.kernels import gemv, w4a16
from workbench.kernels.int4_layout import pack_int4_gemv
from workbench.models.random_init import RANDOM_CONFIGS

BF16_EXTRA = [(8, 1024, 1, 4, 1), (16, 1024, 1, 4, 1), (16, 1024, 1, 8, 1), (32, 1024, 1, 8, 1), (16, 1024, 2, 8, 1)]


def _best(timings: dict) -> tuple:
    ok = {c: t for c, t in timings.items() if not math.isnan(t)}
    c = min(ok, key=ok.get)
    return list(c), ok[c] * 1e3


@torch.no_grad()
def probe_call(call, dev, bf16: bool = True) -> dict:
    model, name, n, k, g, pro, res, _ = call
    gen = torch.Generator(device=dev).manual_seed(n + k)
    w = (torch.randn(n, k, device=dev, generator=gen) * 0.02).to(torch.bfloat16)
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, device=dev, generator=gen).to(torch.bfloat16)
    nw = (torch.rand(k, device=dev, generator=gen) + 0.5).to(torch.bfloat16)
    r = torch.randn(1, n, device=dev, generator=gen).to(torch.bfloat16) if res else None
    t_bf = {}
    if bf16:
        gemv.tune(x, w, pro, nw, EPS, r, configs=gemv.CONFIGS + BF16_EXTRA, timings=t_bf)
    else:  # the default configurations only
        gemv.tune(x, w, pro, nw, EPS, r, configs=gemv.CONFIGS[:3], timings=t_bf)
    q, s, z = quantize_rtn_int4(w.float(), g)
    qw, st, zt = pack_int4_gemv(q, g), s.to(torch.bfloat16).t().contiguous(), z.to(torch.bfloat16).t().contiguous()
    del q, w
    t_w4 = {}
    w4a16.tune_fused(x, qw, st, zt, g, n, pro, nw, EPS, r, timings=t_w4)
    plain = w4a16.tune(x[:, :k], qw, st, zt, g, n)  # the plain GEMV's choice (what the engine used before)
    t_plain = {}
    saved = dict(w4a16._BEST)  # timing the plain choice must not replace the fused call's own entry
    w4a16.tune_fused(x, qw, st, zt, g, n, pro, nw, EPS, r, configs=[plain], timings=t_plain)
    w4a16._BEST.clear()
    w4a16._BEST.update(saved)
    bf_cfg, bf_us = _best(t_bf)
    w4_cfg, w4_us = _best(t_w4)
    row = {"model": model, "call": name, "N": n, "K": k, "group": g, "prologue": pro, "residual": res,
           "bf16_us": bf_us, "bf16_cfg": bf_cfg, "bf16_default_set_us": _best({c: t for c, t in t_bf.items()
                                                                             if c in gemv.CONFIGS})[1],
           "w4_us": w4_us, "w4_cfg": w4_cfg, "w4_plain_cfg": list(plain), "w4_plain_cfg_us": _best(t_plain)[1],
           "w4_timings_us": {str(list(c)): t * 1e3 for c, t in t_w4.items()},
           "bf16_timings_us": {str(list(c)): t * 1e3 for c, t in t_bf.items()}}
    print(f"{model:14s} {name:8s} N={n:6d} K={k:6d}: bf16 {bf_us:7.2f} us {bf_cfg} (its default set "
          f"{row['bf16_default_set_us']:.2f}) | W4A16 fused-tuned {w4_us:7.2f} us {w4_cfg}, plain-tuned "
          f"{row['w4_plain_cfg_us']:.2f} us {list(plain)}", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "probe_small_gemv.json"))
    ap.add_argument("--no-qwen", action="store_true", help="the 135M shapes only")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    smol, qwen = dict(RANDOM_CONFIGS["smollm2-135m"]), dict(RANDOM_CONFIGS["qwen2-7b"])
    todo = [c for c in calls(smol, 64, "smollm2-135m") if c[1] != "qkv+rope"]
    if not args.no_qwen:
        todo += [c for c in calls(qwen, 128, "qwen2-7b") if c[1] != "qkv+rope"]
    out = {"env": environment(), "calls": [], "profile": {}}
    for c in todo:
        out["calls"].append(probe_call(c, dev, bf16=c[0] == "smollm2-135m"))
        torch.cuda.empty_cache()
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    kw = {"max_batch": 1, "max_seq": 256, "device": dev}
    for label, extra in (("bf16", {}), ("w4a16_g64", {"w4a16": True, "group_size": 64,
                                                       "w4a16_backend": "triton:dequant"})):
        eng = Engine.from_config(smol, **kw, **extra)
        eng.set_fused_gemv(True, min_rows=1)
        out["profile"][label] = profile_step(eng, 1, steps=3, top=16)
        print(f"\nprofile {label} (eager step, us per step):")
        for r in out["profile"][label]:
            print(f"  {r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kernel']}")
        del eng
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
