"""Where an engine decode step's time goes, per kernel (torch.profiler over eager steps,
``benchmarks.bench_decode.profile_step``), for random-init Qwen2-7B: bf16, W4A16 with the CUDA MMA kernel and W4A16
with the Triton kernels (``int4.MMA = False``), at the batches of ``--batches``.

Run on the H200: ``python3 -m benchmarks.profile_engine_step --out $OUT/profile``; writes ``profile_engine_step.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch

from benchmarks.bench_decode import kernel_table, profile_step
from benchmarks.common import CONFIGS, hf_config
from workbench.engine import Engine, int4


def profile_verify(eng, t: int, steps: int = 3, top: int = 25) -> list:
    """:func:`benchmarks.bench_decode.profile_step` for a verify step: ``t`` tokens on slot 0 after a 64-token
    prompt, eager, the cache rolled back after each step."""
    from torch.profiler import ProfilerActivity, profile

    eng.reset()
    eng.extend_batch([0], torch.randint(100, 1000, (1, 64), device=eng.device), logits="last")
    toks = torch.randint(100, 1000, (1, t), device=eng.device)
    graphs, eng.use_graphs = eng.use_graphs, False
    try:
        eng.extend_batch([0], toks)
        eng.truncate_slot(0, 64)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                eng.extend_batch([0], toks)
                eng.truncate_slot(0, 64)
            torch.cuda.synchronize()
    finally:
        eng.use_graphs = graphs
    return kernel_table(prof, steps, top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--model", default="qwen2-7b")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--impls", default="bf16,w4a16_mma,w4a16_triton")
    p.add_argument("--verify-t", default="", help="also profile verify steps of these T (batch 1), e.g. 5")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {}
    batches = [int(b) for b in a.batches.split(",")]
    for impl in a.impls.split(","):
        saved = int4.MMA
        int4.MMA = impl != "w4a16_triton" and saved
        try:
            eng = Engine.from_config(hf_config(CONFIGS[a.model]), max_batch=max(batches), max_seq=256,
                                     w4a16=impl != "bf16")
            eng.set_fused_gemv(True)
            for b in batches:
                eng.extend_batch(list(range(b)), torch.randint(100, 1000, (b, 16), device=eng.device))
                res[f"{impl}_b{b}"] = profile_step(eng, b, steps=3, top=25)
                tot = res[f"{impl}_b{b}"][0]
                print(f"{impl} B={b}: {tot['us_per_step']:.0f} us, {tot['calls_per_step']:.0f} kernels", flush=True)
                for r in res[f"{impl}_b{b}"][1:12]:
                    print(f"   {r['us_per_step']:8.1f} us {r['calls_per_step']:5.0f}x  {r['kernel'][:80]}", flush=True)
            for t in (int(v) for v in a.verify_t.split(",") if v):
                res[f"{impl}_verify_t{t}"] = profile_verify(eng, t)
                tot = res[f"{impl}_verify_t{t}"][0]
                print(f"{impl} verify T={t}: {tot['us_per_step']:.0f} us, {tot['calls_per_step']:.0f} kernels", flush=True)
                for r in res[f"{impl}_verify_t{t}"][1:14]:
                    print(f"   {r['us_per_step']:8.1f} us {r['calls_per_step']:5.0f}x  {r['kernel'][:80]}", flush=True)
        finally:
            int4.MMA = saved
            eng = None
            gc.collect()
            torch.cuda.empty_cache()
        (out / "profile_engine_step.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
