"""bf16 one-row GEMV with fused RMSNorm / SwiGLU / residual add (:mod:`workbench.kernels.gemv`) vs what
it replaces (cuBLAS through ``F.linear`` plus the engine's separate Triton kernels), Qwen2-7B shapes,
then the engine's batch-1 decode step with the fused GEMVs on and off (Qwen2-7B, Llama-3-8B).

Per call, timed under CUDA-graph replay with the weights rotated over >= 128 MB of copies so that L2
holds none of them (:func:`workbench.kernels.gemv.tune`); effective TB/s = weight bytes / time.
Floor: weight bytes over the higher of the read and copy bandwidths measured in the same run
(``benchmarks.common.measure_floors``: ``bw_Bps``, ``bw_source``).

Run: ``python3 -m benchmarks.bench_gemv_bf16`` from the repository root (~3 min on the H200). Writes
``$OUT/bench_gemv_bf16.json``.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import torch
import torch.nn.functional as F

from benchmarks.common import CONFIGS, Recorder, environment, graph_ms, hf_model, measure_floors

H, I, QKV, V = 3584, 18944, 4608, 152064  # Qwen2-7B
# name: (N, K, prologue, residual?)
CALLS = {"qkv": (QKV, H, "rmsnorm", False), "o": (H, H, "none", True), "gate_up": (2 * I, H, "rmsnorm", False),
         "down": (H, I, "swiglu", True), "lm_head": (V, H, "rmsnorm", False)}
# Llama-3-8B calls, compiled ahead (the engine tunes them when it is built)
LLAMA = {"l_qkv": (6144, 4096, "rmsnorm", False), "l_o": (4096, 4096, "none", True),
         "l_gate_up": (28672, 4096, "rmsnorm", False), "l_down": (4096, 14336, "swiglu", True),
         "l_lm_head": (128256, 4096, "rmsnorm", False)}


def _inputs(n, k, pro, res, dev="cuda", dt=torch.bfloat16):
    g = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(n, k, device=dev, dtype=dt, generator=g) * 0.02
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, device=dev, dtype=dt, generator=g)
    nw = torch.rand(k, device=dev, dtype=dt, generator=g) + 0.5
    r = torch.randn(1, n, device=dev, dtype=dt, generator=g) if res else None
    return x, w, nw, r


def _compile(jobs):
    """Worker: launch each (call, cfg) once so the kernel lands in Triton's on-disk cache."""
    from workbench.kernels import gemv

    for name, cfg in jobs:
        n, k, pro, res = {**CALLS, **LLAMA}[name]
        x, w, nw, r = _inputs(n, k, pro, res)
        gemv.gemv(x, w, pro, nw, 1e-6, r, cfg)
    torch.cuda.synchronize()
    return len(jobs)


def precompile(procs: int = 12) -> float:
    from workbench.kernels import gemv

    t0 = time.perf_counter()
    jobs = [(name, cfg) for name in {**CALLS, **LLAMA} for cfg in gemv.SEARCH_CONFIGS]
    with mp.get_context("spawn").Pool(procs) as pool:
        pool.map(_compile, [jobs[i::procs] for i in range(procs)])
    return time.perf_counter() - t0


def bench_call(name: str, n: int, k: int, pro: str, res: bool, floors: dict) -> dict:
    """One call: the fused GEMV (tuned over SEARCH_CONFIGS) vs cuBLAS alone and vs the unfused
    sequence it replaces (the engine's add+RMSNorm / SiLU*up kernel, then cuBLAS)."""
    from workbench.kernels import fused, gemv

    x, w, nw, r = _inputs(n, k, pro, res)
    copies = max(1, -(-int(128e6) // w.nbytes))
    ws = [w] + [w.clone() for _ in range(copies - 1)]
    xr = torch.randn_like(x) if pro == "rmsnorm" else None  # the unfused path's add+RMSNorm input

    def rotate(fn):
        state = [0]

        def call():
            wi = ws[state[0] % len(ws)]
            state[0] += 1
            return fn(wi)
        return call

    def unfused(wi):
        if pro == "rmsnorm":
            h, _ = fused.add_rmsnorm(x, xr, nw, 1e-6)
        elif pro == "swiglu":
            h = fused.silu_mul(x)
        else:
            h = x
        return F.linear(h, wi)  # o/down: the residual add lives in the next add+RMSNorm kernel

    inner = max(10, 2 * len(ws))
    x_in = x[:, :k] if pro == "swiglu" else x
    t_cublas = graph_ms(rotate(lambda wi: F.linear(x_in, wi)), inner, 5)
    t_unfused = graph_ms(rotate(unfused), inner, 5)
    timings: dict = {}
    best = gemv.tune(x, w, pro, nw, 1e-6, r, configs=gemv.SEARCH_CONFIGS, timings=timings)
    ref = gemv.reference(x.float(), w.float(), pro, nw.float(), 1e-6, None if r is None else r.float())
    err = float((gemv.gemv(x, w, pro, nw, 1e-6, r).float() - ref).norm() / ref.norm())
    t_fused = timings[best]

    def tbps(t):
        return w.nbytes / (t * 1e-3) / 1e12

    return {"call": name, "N": n, "K": k, "prologue": pro, "residual": res, "weight_MB": w.nbytes / 1e6,
            "floor_us": w.nbytes / floors["bw_Bps"] * 1e6,
            "cublas_us": t_cublas * 1e3, "cublas_TBps": tbps(t_cublas),
            "unfused_us": t_unfused * 1e3, "fused_us": t_fused * 1e3, "fused_TBps": tbps(t_fused),
            "fused_cfg": list(best), "rel_err_vs_fp32": err,
            "all_fused_timings_us": {str(c): round(v * 1e3, 2) for c, v in timings.items()}}


def bench_calls(floors: dict) -> list:
    rows = []
    for name, (n, k, pro, res) in CALLS.items():
        rows.append(bench_call(name, n, k, pro, res, floors))
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows


def bench_engine(name: str, floors: dict) -> list:
    from benchmarks.bench_decode import decode_floor_ms, engine_decode_ms_per_token, profile_step
    from workbench.engine import Engine

    model = hf_model(CONFIGS[name])
    eng = Engine.from_hf(model, max_batch=1, max_seq=208)
    del model
    torch.cuda.empty_cache()
    ctx = 128 + 3 + 32
    rows = []
    from workbench.kernels import common

    # (fused GEMVs, programmatic dependent launch) in an ABBA-like order against drift
    for on, pdl in ((False, False), (True, False), (True, True), (False, True), (True, True), (True, False)):
        common.PDL_ENABLED = pdl
        used = eng.set_fused_gemv(on, max_rows=1)  # drops captured graphs: the next step recaptures with this choice
        ms = engine_decode_ms_per_token(eng, 1)
        fl = decode_floor_ms(eng, 1, ctx, floors["bw_Bps"])
        rows.append({"model": name, "fused_gemv": used, "pdl": pdl, "ms_per_token": ms, "floor_ms": fl,
                     "x_floor": ms / fl})
        print(rows[-1], flush=True)
    common.PDL_ENABLED = True
    # the same 16 one-row steps (teacher-forced tokens) through the captured graphs: fused vs unfused
    # (bf16 rounding differs), and PDL on vs off (must be bit-identical: a race would show here)
    ids = torch.randint(100, 1000, (1, 64), device="cuda")
    outs = {}
    for on, pdl in ((False, True), (True, False), (True, True)):
        common.PDL_ENABLED = pdl
        eng.set_fused_gemv(on, max_rows=1)
        eng.reset()
        eng.extend_batch([0], ids[:, :48])
        outs[(on, pdl)] = torch.cat([eng.extend_batch([0], ids[:, i:i + 1]).float() for i in range(48, 64)])
    common.PDL_ENABLED = True
    a, b, c = outs[(False, True)], outs[(True, False)], outs[(True, True)]
    rows.append({"model": name, "steps_logits_rel_diff_fused_vs_unfused": float((c - a).norm() / a.norm()),
                 "argmax_agree_fused_vs_unfused": float((c.argmax(-1) == a.argmax(-1)).float().mean()),
                 "steps_logits_maxabs_pdl_on_vs_off": float((c - b).abs().max())})
    eng.set_fused_gemv(True)
    rows.append({"model": name, "profile_fused": profile_step(eng, 1, top=14)})
    print(rows[-2:], flush=True)
    return rows


def main():
    rec = Recorder(name="bench_gemv_bf16.json")
    rec.put("env", environment())
    floors = measure_floors()
    rec.put("floors", floors)
    rec.put("precompile_s", precompile())
    rec.put("calls", bench_calls(floors))
    for name in ("qwen2-7b", "llama3-8b"):
        rec.put(f"engine_{name}", bench_engine(name, floors))


if __name__ == "__main__":
    main()
