"""Probe (issue 18): does the W4A16 MMA kernel's weight layout limit it at few rows?

The kernel reads :func:`workbench.kernels.int4_layout.pack_int4_gemv`'s row-major words: one warp load of a group is
eight 64-byte pieces, one per row, 1792 bytes apart (K = 3584). Built with ``-DWB_TILED=1`` it reads the same
words from 16-row tiles, ``[N / 16][K / G][16][G / 8]``, so that a warp's load is 512 contiguous bytes. This script
times every configuration of the library named by ``WORKBENCH_W4MMA_SO`` on the Qwen2-7B layer shapes, with the
weights permuted to the tiled order when ``--tiled`` is given (checked against :func:`w4a16_mma.reference` of the
row-major words), and writes the fastest per shape and row count.

Usage (device, repo root): ``WORKBENCH_W4MMA_SO=.build/w4a16_mma_sm90_tiled.so python3 -m benchmarks.probe_w4_layout
--tiled --out $OUT/tiled``; ``--ncu-call gate_up --ncu-m 1 --ncu-cfg 2,3,2,4`` instead launches that call eight times (for ``ncu``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from benchmarks.check_w4_mma import LAYERS, weight
from benchmarks.common import environment
from workbench.kernels import w4a16_mma as mm
from workbench.kernels.timing import fastest_config, weight_copies


def tiled(qw: torch.Tensor, group: int) -> torch.Tensor:
    """``qw`` ``[N, K / 8]`` int32 (row-major) in the kernel's ``WB_TILED`` order, same shape: ``N % 16 == 0``."""
    n, kw = qw.shape
    return qw.view(n // 16, 16, kw // (group // 8), group // 8).transpose(1, 2).contiguous().view(n, kw)


@torch.no_grad()
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--tiled", action="store_true")
    p.add_argument("--model", default="qwen2-7b")
    p.add_argument("--ms", default="1,8,16")
    p.add_argument("--ncu-call", default="")
    p.add_argument("--ncu-m", type=int, default=1)
    p.add_argument("--ncu-cfg", default="2,3,2,4")
    a = p.parse_args()
    dev = torch.device("cuda")
    rows = []
    for name, (n, k, g) in LAYERS[a.model].items():
        if a.ncu_call and name != a.ncu_call:
            continue
        _, qw, s, z = weight(n, k, g, torch.bfloat16, dev)
        w = tiled(qw, g) if a.tiled else qw
        ws = weight_copies((w, s, z))
        for m in ([a.ncu_m] if a.ncu_call else [int(v) for v in a.ms.split(",")]):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ref = mm.reference(x, qw, s, z, g)
            timings: dict = {}
            cfgs = mm.configs(n, k, m, g)
            if a.ncu_call:  # a few launches of one configuration, for the profiler (checked once)
                cfg = tuple(int(v) for v in a.ncu_cfg.split(","))
                err = float((mm.gemm(x, *ws[0], g, n, None, cfg).float() - ref).norm() / ref.norm())
                for i in range(8):
                    mm.gemm(x, *ws[i % len(ws)], g, n, None, cfg)
                torch.cuda.synchronize()
                print("ncu config", cfg, "relative error", err)
                return 0
            best = fastest_config(cfgs, lambda wt, cfg, x=x, g=g, n=n: mm.gemm(x, *wt, g, n, None, cfg), ws, ref, timings)
            b = w.nbytes + s.nbytes + z.nbytes
            us = timings[best] * 1e3
            rows.append({"model": a.model, "call": name, "N": n, "K": k, "M": m, "tiled": a.tiled, "cfg": list(best),
                         "us": us, "bytes": b, "TBps": b / us * 1e-6,
                         "timings": {",".join(map(str, c)): t for c, t in timings.items()}})
            print(f"{name:8s} M={m:2d} tiled={a.tiled} {us:7.1f} us {b / us * 1e-6:5.2f} TB/s {best}", flush=True)
        del ws
        torch.cuda.empty_cache()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe_w4_layout.json").write_text(json.dumps({"env": environment(), "so": os.environ.get(
        "WORKBENCH_W4MMA_SO"), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
