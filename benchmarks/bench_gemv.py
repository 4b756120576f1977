"""Few-row matmuls side by side on the Qwen2-7B and Llama-3-8B layer shapes (H200), M = 1, 2, 4, 8, 16, 32, 64.

Per shape and row count: cuBLAS bf16 (``F.linear``), the project's bf16 kernels (the one-row GEMV of
:mod:`workbench.kernels.gemv` at M = 1, the tensor-core GEMM of :mod:`workbench.kernels.rows` at every M), torch's
INT4 tinygemm (``_weight_int4pack_mm``), gemlite 0.6 (if it imports; Qwen2-7B shapes, within a time budget), the
INT4 tensor-core GEMM (:func:`workbench.kernels.rows.gemm_int4`) and, at M = 1, the INT4 CUDA-core GEMV
(:mod:`workbench.kernels.w4a16`). Plain matmuls (no fused prologue or epilogue), RTN INT4 with group 128.

Each timed under CUDA-graph replay with its weights rotated over >= 300 MB of copies so L2 (60 MB) holds none of
them. Reported: us, TB/s (bytes of weights, scales and zeros read / time), the floor ``max(bytes / bw, 2 M N K /
matmul rate)`` with ``bw`` the higher of the measured read and copy bandwidths (``benchmarks.common.measure_floors``),
time / floor, and the relative error ``||y - ref|| / ||ref||`` against ``F.linear`` in float32 of the dequantized
weights (bf16 rows: of the bf16 weights). The project's kernels are tuned per shape and M_PAD class (16, 32, 64)
over ``rows.INT4_CONFIGS`` / ``rows.DENSE_CONFIGS`` (``rows.tune``; the winners stay in ``rows._BEST`` for the
engine runs that follow in the same process).

Run: ``python3 -m benchmarks.bench_gemv`` (writes ``$OUT/bench_gemv.json``); ``run_all --kernels`` calls
:func:`bench` inside the kernels run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F

GROUP = 128
MS = (1, 2, 4, 8, 16, 32, 64)
SHAPES = {  # name: (N, K)
    "qwen2-7b": {"qkv": (4608, 3584), "o": (3584, 3584), "gate_up": (37888, 3584), "down": (3584, 18944),
                 "lm_head": (152064, 3584)},
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                  "lm_head": (128256, 4096)},
}


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def rotating(fns):
    state = [0]

    def call(x):
        f = fns[state[0] % len(fns)]
        state[0] += 1
        return f(x)

    return call


def _rot_ms(fns, x) -> float:
    from benchmarks.common import graph_ms

    call = rotating(fns)
    return graph_ms(lambda: call(x), inner=max(10, 2 * len(fns)), reps=5)


def precompile_jobs(shapes: dict, ms=MS) -> list:
    """Every kernel variant :func:`bench` launches (for ``benchmarks.common.precompile``)."""
    from workbench.kernels import gemv, rows, w4a16

    jobs = []
    for model in shapes.values():
        for n, k in model.values():
            for m in sorted({max(16, 1 << (m - 1).bit_length()) for m in ms}):
                jobs += [("int4", n, k, m, "none", False, 0, c) for c in rows.INT4_CONFIGS]
                jobs += [("dense", n, k, m, "none", False, 0, c) for c in rows.DENSE_CONFIGS]
            jobs += [("gemv", n, k, 1, "none", False, 0, c) for c in gemv.CONFIGS]
            jobs += [("w4gemv", n, k, 1, "none", False, 0, c) for c in w4a16.CONFIGS]
    return jobs


def _gemlite_fns(q, s, z, n, k, copies):
    """gemlite's module for this weight (as ``Int4Linear`` builds it), one per copy; None if it does not import."""
    try:
        from gemlite import DType, GemLiteLinear
    except ImportError:
        return None
    mods = []
    for _ in range(copies):
        mod = GemLiteLinear(4, group_size=GROUP, in_features=k, out_features=n, input_dtype=DType.BF16,
                            output_dtype=DType.BF16)
        mod.pack(q, s, z, None)
        mods.append(mod)
    return [lambda x, mod=mod: mod(x) for mod in mods]


@torch.no_grad()
def bench_shape(model: str, name: str, n: int, k: int, floors: dict, ms=MS, gemlite_until: float = 0.0,
                min_bytes: float = 300e6) -> list:
    """One row per (kernel, M) for the ``[n, k]`` matmul of ``model``."""
    from workbench.engine.int4 import dequantize_int4, quantize_rtn_int4
    from workbench.kernels import gemv, rows, w4a16
    from workbench.kernels.int4_layout import pack_int4_gemv

    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    q, s, z = quantize_rtn_int4(w, GROUP)
    w_hat = dequantize_int4(q, s, z, torch.float32)
    int4_bytes = n * k // 2 + 2 * n * (k // GROUP) * 2  # nibbles + bf16 scale and zero per group
    n4, n16 = max(2, math.ceil(min_bytes / int4_bytes)), max(2, math.ceil(min_bytes / (n * k * 2)))
    dense = [w] + [w.clone() for _ in range(n16 - 1)]
    packed = torch.ops.aten._convert_weight_to_int4pack(((q[:, ::2] << 4) | q[:, 1::2]).contiguous(), 8)
    sz = torch.stack((s, (8 - z) * s), dim=-1).transpose(0, 1).contiguous()
    tiny = [(packed, sz)] + [(packed.clone(), sz.clone()) for _ in range(n4 - 1)]
    qw, s_t, z_t = pack_int4_gemv(q, GROUP), s.t().contiguous(), z.t().contiguous()
    ours = [(qw, s_t, z_t)] + [(qw.clone(), s_t.clone(), z_t.clone()) for _ in range(n4 - 1)]
    glite = _gemlite_fns(q, s, z, n, k, n4) if time.time() < gemlite_until else None
    bw, rate = floors["bw_Bps"], floors["matmul_flops"]
    out = []
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref4, ref16 = F.linear(x.float(), w_hat), F.linear(x.float(), w.float())
        t0 = time.perf_counter()
        c4 = rows.tune(x, qw, quant=(s_t, z_t, GROUP), configs=rows.INT4_CONFIGS)
        c16 = rows.tune(x, w, configs=rows.DENSE_CONFIGS)
        impls = {"cublas_bf16": ([lambda x, d=d: F.linear(x, d) for d in dense], n * k * 2, ref16),
                 "rows_bf16": ([lambda x, d=d, c=c16: rows.gemm(x, d, cfg=c) for d in dense], n * k * 2, ref16),
                 "tinygemm": ([lambda x, p=p, c=c: torch.ops.aten._weight_int4pack_mm(x, p, GROUP, c) for p, c in tiny],
                              int4_bytes, ref4),
                 "rows_int4": ([lambda x, o=o, c=c4: rows.gemm_int4(x, *o, GROUP, n, cfg=c) for o in ours], int4_bytes, ref4)}
        if m == 1:
            cg = gemv.tune(x, w, configs=gemv.CONFIGS)
            cw = w4a16.tune(x, qw, s_t, z_t, GROUP, n, configs=w4a16.CONFIGS)
            impls["gemv_bf16"] = ([lambda x, d=d, c=cg: gemv.gemv(x, d, cfg=c) for d in dense], n * k * 2, ref16)
            impls["gemv_int4"] = ([lambda x, o=o, c=cw: w4a16.gemv(x, *o, GROUP, n, c) for o in ours], int4_bytes, ref4)
        if glite is not None and time.time() < gemlite_until:
            impls["gemlite"] = (glite, int4_bytes, ref4)
        tune_s = time.perf_counter() - t0
        for impl, (fns, nbytes, want) in impls.items():
            try:
                err = rel(fns[0](x), want)
                t = _rot_ms(fns, x)
            except Exception as e:  # noqa: BLE001 - one kernel failing (e.g. gemlite) keeps the others' rows
                out.append({"model": model, "shape": name, "m": m, "impl": impl, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            floor = max(nbytes / bw, 2 * m * n * k / rate) * 1e3
            row = {"model": model, "shape": name, "n": n, "k": k, "m": m, "impl": impl, "us": t * 1e3,
                   "tb_s": nbytes / (t * 1e-3) / 1e12, "floor_us": floor * 1e3, "x_floor": t / floor, "rel_err": err}
            if impl.startswith("rows"):
                row["cfg"] = list(c4 if impl == "rows_int4" else c16)
                row["tune_s"] = tune_s
            out.append(row)
            print(f"{model:9s} {name:7s} {n:6d}x{k:<5d} M={m:<2d} {impl:11s} {row['us']:8.1f} us {row['tb_s']:5.2f} TB/s"
                  f" x{row['x_floor']:.2f} err {err:.4f}", flush=True)
    return out


def bench(floors: dict, models=("qwen2-7b", "llama3-8b"), ms=MS, gemlite_s: float = 45.0, rec=None) -> list:
    """Every shape of ``models``; gemlite runs on the first model's shapes while ``gemlite_s`` seconds last (its
    first call of a shape and row count may autotune)."""
    rows_out = []
    until = time.time() + gemlite_s
    for model in models:
        for name, (n, k) in SHAPES[model].items():
            rows_out += bench_shape(model, name, n, k, floors, ms, until if model == models[0] else 0.0)
            torch.cuda.empty_cache()
            if rec is not None:
                rec.put("kernels", rows_out)
    return rows_out


def summary(rows_out) -> dict:
    """Per model and M: the four block matmuls' summed us per kernel (kernels timed on all four only), and the
    speedup of each over cuBLAS bf16."""
    out, seen = {}, {}
    for r in rows_out:
        if "us" in r and r["shape"] != "lm_head":
            key = f"{r['model']} M={r['m']}"
            d = out.setdefault(key, {})
            d[r["impl"]] = d.get(r["impl"], 0.0) + r["us"]
            seen.setdefault(key, {}).setdefault(r["impl"], set()).add(r["shape"])
    for key, d in out.items():
        for impl in [i for i in d if len(seen[key][i]) < 4]:
            del d[impl]
    for d in out.values():
        base = d.get("cublas_bf16")
        for impl in list(d):
            if base and impl != "cublas_bf16":
                d[f"{impl}_speedup"] = base / d[impl]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(SHAPES))
    ap.add_argument("--m", type=int, nargs="+", default=list(MS))
    ap.add_argument("--shapes", nargs="+", default=None, help="only these matmuls (qkv o gate_up down lm_head)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_gemv.json"))
    a = ap.parse_args()
    from benchmarks.common import environment, measure_floors, precompile

    if a.shapes:
        for m in a.models:
            SHAPES[m] = {k: v for k, v in SHAPES[m].items() if k in a.shapes}
    floors = measure_floors()
    comp = precompile(precompile_jobs({m: SHAPES[m] for m in a.models}, a.m))
    rows_out = bench(floors, a.models, a.m)
    res = {"env": environment(), "floors": floors, "precompile": comp, "rows": rows_out, "block_us": summary(rows_out)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
