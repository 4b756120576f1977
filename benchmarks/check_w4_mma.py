"""The CUDA W4A16 MMA kernel (``workbench.kernels.w4a16_mma``) on the GPU: build, correctness, per-layer times side
by side with the other kernels, and engine steps.

(a) ``build``: compile (or load the prebuilt ``WORKBENCH_W4MMA_SO``) and list the compiled variants; seconds taken.
(b) ``check``: ``gemm`` against ``w4a16_mma.reference`` (float32 of the dequantized weight, rounded to bf16; with a
    residual, HF's second rounding) on every layer shape of Qwen2-7B, Llama-3-8B (group 128) and SmolLM2-135M
    (group 64), one group-256 and one fp16 shape, at M = 1, 2, 3, 8, 9, 16, 17, 32, 33, 64 with the default
    configuration, and every compiled configuration on the Qwen2-7B qkv shape at M = 1, 9, 33; the SwiGLU epilogue
    (``act="swiglu"``) on every gate_up shape at those M (default configuration) and with every configuration on
    Qwen2-7B's at M = 1, 9, 33. Outputs are allocated over NaN-filled memory. Pass: relative L2 < 5e-3, max abs <=
    2**-6 max |ref|, >= 80% bit-equal (SwiGLU: 1e-2, 2**-5, 50%: :data:`TOL_SWIGLU`).
(c) ``layers``: per layer matmul and M in 1, 2, 4, 8, 16, 32, 64 (Qwen2-7B and Llama-3-8B shapes, lm_head
    included), us under CUDA-graph replay with the weights rotated over >= 300 MB (L2 holds none): the MMA
    kernel (tuned per call), the dense (bf16) MMA kernel of the same library (tuned), at M = 1 the engine's one-row
    bf16 GEMV (``gemv.gemv``, tuned, no prologue), cuBLAS bf16, torch's tinygemm, the Triton INT4 tensor-core GEMM (``rows.gemm_int4``,
    its default configuration), on gate_up the MMA kernel with its SwiGLU epilogue (``mma_swiglu``) and followed by
    the engine's ``silu_mul`` (``mma_then_silu``), and, at M = 1, the Triton CUDA-core GEMV (tuned); floors = bytes
    / read bandwidth
    (``benchmarks.common.measure_floors``), and the FLOPs term.
(d) ``engine``: decode ms per step at batch 1..64 and verify steps T = 3, 5, 9 of random-init Qwen2-7B (and
    Llama-3-8B at batch 1 / 16 / 64, SmolLM2-135M g64 at batch 1 / 8): bf16, W4A16 RTN with the MMA kernel, and
    W4A16 with the Triton kernels (``int4.MMA = False``); the MMA path with the SwiGLU epilogue off
    (``int4.MMA_SWIGLU``), with plain launches of add_rmsnorm / silu_mul (``fused.SMALL_PDL``), and with an INT4
    lm_head (``_lmhead``); bf16 with cuBLAS for every row count (``weights.DENSE_MMA`` off), Qwen2-7B;
    ``--engine-impls`` picks some; floors as ``bench_decode.decode_floor_ms``.

(e) ``spec``: synthetic-acceptance speculative decoding (``benchmarks.bench_spec``), Qwen2-7B bf16 and W4A16
    targets, Qwen2-0.5B draft, alpha 0.6 / 0.8 / 0.9, k 4 / 8: realized vs theoretical speedup.

Run on the H200: ``python3 -m benchmarks.check_w4_mma --out $OUT/w4mma`` (parts: ``--parts build,check,layers,
engine,spec``; default the first four). Exits 1 if a correctness check fails (after writing the JSON).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.bench_gemv import rotating
from benchmarks.common import CONFIGS, environment, graph_ms, hf_config, measure_floors
from workbench.engine.int4 import quantize_rtn_int4
from workbench.kernels import w4a16_mma as mm
from workbench.kernels.int4_layout import pack_int4_gemv
from workbench.models.random_init import RANDOM_CONFIGS

LAYERS = {  # name: (N, K, group)
    "qwen2-7b": {"qkv": (4608, 3584, 128), "o": (3584, 3584, 128), "gate_up": (37888, 3584, 128),
                 "down": (3584, 18944, 128), "lm_head": (152064, 3584, 128)},
    "llama3-8b": {"qkv": (6144, 4096, 128), "o": (4096, 4096, 128), "gate_up": (28672, 4096, 128),
                  "down": (4096, 14336, 128), "lm_head": (128256, 4096, 128)},
    "smollm2-135m": {"qkv": (960, 576, 64), "o": (576, 576, 64), "gate_up": (3072, 576, 64), "down": (576, 1536, 64)},
}
CHECK_MS = (1, 2, 3, 8, 9, 16, 17, 32, 33, 64)
TIME_MS = (1, 2, 4, 8, 16, 32, 64)
TOL = (5e-3, 2.0**-6, 0.8)
# the SwiGLU epilogue's outputs: silu(gate) * up of the rounded gate and up (one ulp of either moves the product), the
# oracle's exp is torch's, the kernel's __expf
TOL_SWIGLU = (1e-2, 2.0**-5, 0.5)


def weight(n, k, g, dtype, dev, seed=0):
    gen = torch.Generator(device=dev).manual_seed(seed + n + 3 * k)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, device=dev, generator=gen) * 0.02, g)
    return q, pack_int4_gemv(q, g), s.to(dtype).t().contiguous(), z.to(dtype).t().contiguous()


def errors(y, ref, tol=TOL) -> dict:
    y, ref = y.float().flatten(), ref.float().flatten()
    d = (y - ref).abs()
    rel = float(d.norm() / ref.norm().clamp(min=1e-30))
    mx, sc = float(d.max()), float(ref.abs().max())
    eq = float((d == 0).float().mean())
    ok = bool(torch.isfinite(y).all()) and rel < tol[0] and mx <= tol[1] * sc and eq >= tol[2]
    return {"rel_l2": rel, "max_abs": mx, "frac_equal": eq, "pass": ok}


def nan_out(m, n, dtype, dev):
    return torch.full((m, n), float("nan"), dtype=dtype, device=dev)


@torch.no_grad()
def check_configs(cfgs, x, w, g, n, res, act, refs, row, dev) -> list:
    """One row per launch configuration: ``mm.gemm`` with ``cfg`` against its own oracle ``refs[prescaled(cfg)]``
    (``TOL_SWIGLU`` for the SwiGLU epilogue), or the launch error as a failed row."""
    m = x.shape[0]
    n_out = n // 2 if act == "swiglu" else n
    out = []
    for cfg in cfgs:
        r = {**row, "residual": res is not None, "act": act, "cfg": list(cfg)}
        try:
            y = mm.gemm(x, *w, g, n, res, cfg, out=nan_out(m, n_out, x.dtype, dev), act=act)
            out.append({**r, **errors(y, refs[mm.prescaled(cfg)], TOL_SWIGLU if act == "swiglu" else TOL)})
        except RuntimeError as e:
            out.append({**r, "rel_l2": float("nan"), "pass": False, "error": str(e)[:200]})
    return out


def part_check(dev) -> list:
    out = []
    shapes = [(model, name, *v, torch.bfloat16) for model, d in LAYERS.items() for name, v in d.items()
              if name != "lm_head"]
    shapes += [("g256", "4096x4096", 4096, 4096, 256, torch.bfloat16), ("fp16", "qkv", 4608, 3584, 128, torch.float16)]
    for model, name, n, k, g, dt in shapes:
        _q, qw, s, z = weight(n, k, g, dt, dev)
        for m in CHECK_MS:
            x = torch.randn(m, k, device=dev).to(dt)
            for res in ((None, torch.randn(m, n, device=dev).to(dt)) if m in (1, 9) else (None,)):
                y = mm.gemm(x, qw, s, z, g, n, res, out=nan_out(m, n, dt, dev))
                row = {"model": model, "call": name, "N": n, "K": k, "group": g, "dtype": str(dt), "M": m,
                       "residual": res is not None, "cfg": list(mm.default_cfg(n, k, m, g)),
                       **errors(y, mm.reference(x, qw, s, z, g, res))}
                out.append(row)
            if name == "gate_up":  # the SwiGLU epilogue, default configuration
                y = mm.gemm(x, qw, s, z, g, n, act="swiglu", out=nan_out(m, n // 2, dt, dev))
                out.append({"model": model, "call": name, "N": n, "K": k, "group": g, "dtype": str(dt), "M": m,
                            "residual": False, "act": "swiglu", "cfg": list(mm.default_cfg(n, k, m, g)),
                            **errors(y, mm.reference(x, qw, s, z, g, act="swiglu"), TOL_SWIGLU)})
        if model == "qwen2-7b" and name in ("qkv", "gate_up"):  # every configuration (gate_up: SwiGLU epilogue)
            act = "swiglu" if name == "gate_up" else "none"
            for m in (1, 9, 20, 33, 64):  # 20 and 64: the TC kernel's two row tiles full; 33: mostly idle
                x = torch.randn(m, k, device=dev).to(dt)
                refs = {ps: mm.reference(x, qw, s, z, g, prescale=ps, act=act) for ps in (False, True)}
                row = {"model": model, "call": name, "N": n, "K": k, "group": g, "dtype": str(dt), "M": m}
                out += check_configs(mm.configs(n, k, m, g), x, (qw, s, z), g, n, None, act, refs, row, dev)
        if (model, name) in (("smollm2-135m", "down"), ("g256", "4096x4096"), ("fp16", "qkv")):
            # every wide / TC configuration with a residual, at the other group sizes and in fp16 (split-K fixup +
            # residual epilogue; the loop above covers G = 128 bf16 without one)
            for m in (20, 64):
                x = torch.randn(m, k, device=dev).to(dt)
                res = torch.randn(m, n, device=dev).to(dt)
                refs = {ps: mm.reference(x, qw, s, z, g, res, prescale=ps) for ps in (False, True)}
                row = {"model": model, "call": name, "N": n, "K": k, "group": g, "dtype": str(dt), "M": m}
                out += check_configs([c for c in mm.configs(n, k, m, g) if c[2] >= mm.WIDE], x, (qw, s, z), g, n,
                                     res, "none", refs, row, dev)
        torch.cuda.synchronize()
    return out


@torch.no_grad()
def part_layers(dev, floors, models=("qwen2-7b", "llama3-8b"), ms=TIME_MS) -> list:
    from workbench.kernels import fused, gemv, rows, w4a16, w4a16_dot

    bw, rate = floors["bw_Bps"], floors["matmul_flops"]
    out = []
    for model in models:
        for name, (n, k, g) in LAYERS[model].items():
            q, qw, s, z = weight(n, k, g, torch.bfloat16, dev)
            b4 = qw.nbytes + s.nbytes + z.nbytes
            b16 = n * k * 2
            c4 = max(1, -(-300_000_000 // b4))
            c16 = max(1, -(-300_000_000 // b16))
            w16 = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(c16)]
            ours = [(qw, s, z)] + [(qw.clone(), s.clone(), z.clone()) for _ in range(c4 - 1)]
            packed = ((q[:, ::2] << 4) | q[:, 1::2]).contiguous()
            tp = torch.ops.aten._convert_weight_to_int4pack(packed, 8)
            sz = torch.stack((s.t(), (8 - z.t()) * s.t()), dim=-1).transpose(0, 1).contiguous()
            tiny = [(tp, sz)] + [(tp.clone(), sz.clone()) for _ in range(max(0, c4 - 1))]
            del q, packed
            for m in ms:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                fl4 = max(b4 / bw, 2 * m * n * k / rate) * 1e6
                fl16 = max(b16 / bw, 2 * m * n * k / rate) * 1e6
                timings: dict = {}
                cfg = mm.tune(x, qw, s, z, g, n, timings=timings)
                impls = {"mma": ([lambda x, o=o, c=cfg, g=g, n=n: mm.gemm(x, *o, g, n, None, c) for o in ours], fl4),
                         "cublas_bf16": ([lambda x, w=w: F.linear(x, w) for w in w16], fl16),
                         "tinygemm": ([lambda x, p=p, c=c, g=g: torch.ops.aten._weight_int4pack_mm(x, p, g, c)
                                       for p, c in tiny], fl4),
                         "rows_int4": ([lambda x, o=o, g=g, n=n: rows.gemm_int4(x, *o, g, n) for o in ours], fl4)}
                dt: dict = {}
                dcfg = mm.dense_tune(x, w16[0], timings=dt) if mm.dense_supported(n, k, x.dtype) else None
                if dcfg is not None:
                    impls["dense_mma"] = ([lambda x, w=w, c=dcfg: mm.dense_gemm(x, w, None, c) for w in w16], fl16)
                if m == 1:  # the engine's one-row bf16 GEMV (no prologue) beside the few-row kernels
                    gcfg = gemv.tune(x, w16[0])
                    impls["gemv_bf16"] = ([lambda x, w=w, c=gcfg: gemv.gemv(x, w, cfg=c) for w in w16], fl16)
                if name == "gate_up":  # SwiGLU: the MMA kernel's epilogue, against the matmul + the engine's silu_mul
                    impls["mma_swiglu"] = ([lambda x, o=o, c=cfg, g=g, n=n: mm.gemm(x, *o, g, n, None, c, act="swiglu")
                                            for o in ours], fl4)
                    impls["mma_then_silu"] = ([lambda x, o=o, c=cfg, g=g, n=n: fused.silu_mul(mm.gemm(x, *o, g, n, None, c))
                                               for o in ours], fl4)
                if m > 8:  # the group-deep Triton dot GEMM (workbench.kernels.w4a16_dot), tuned
                    try:
                        tcfg = w4a16_dot.tune(x, qw, s, z, g, n)
                        impls["dot"] = ([lambda x, o=o, c=tcfg, g=g, n=n: w4a16_dot.gemm(x, *o, g, n, None, c)
                                         for o in ours], fl4)
                    except Exception as e:  # noqa: BLE001 - keep the other kernels' rows
                        out.append({"model": model, "call": name, "M": m, "impl": "dot", "error": str(e)[:300]})
                        tcfg = None
                if m == 1:
                    cw = w4a16.tune(x, qw, s, z, g, n)
                    impls["gemv_int4"] = ([lambda x, o=o, c=cw, g=g, n=n: w4a16.gemv(x, *o, g, n, c) for o in ours],
                                          fl4)
                for impl, (fns, fl) in impls.items():
                    try:
                        call = rotating(fns)
                        us = graph_ms(lambda call=call, x=x: call(x), inner=max(20, 2 * len(fns))) * 1e3
                        out.append({"model": model, "call": name, "N": n, "K": k, "M": m, "impl": impl, "us": us,
                                    "floor_us": fl, "x_floor": us / fl,
                                    "cfg": (list(cfg) if impl.startswith("mma") else list(dcfg) if impl == "dense_mma"
                                            else list(tcfg) if impl == "dot" else None)})
                    except Exception as e:  # noqa: BLE001 - keep the other kernels' rows
                        out.append({"model": model, "call": name, "M": m, "impl": impl, "error": str(e)[:300]})
                out.append({"model": model, "call": name, "M": m, "impl": "mma_timings",
                            "timings": {",".join(map(str, c)): t for c, t in timings.items()}})
                out.append({"model": model, "call": name, "M": m, "impl": "dense_mma_timings",
                            "timings": {",".join(map(str, c)): t for c, t in dt.items()}})
            del ours, tiny, w16
            gc.collect()
            torch.cuda.empty_cache()
    return out


def part_engine(dev, floors, rec, models=("qwen2-7b", "llama3-8b"), impls=None) -> list:
    """``impls``: the plan's implementations to run (default all). ``w4a16_mma_noswiglu`` / ``w4a16_mma_nosmallpdl``
    are the MMA path with ``int4.MMA_SWIGLU`` / ``fused.SMALL_PDL`` off (the A/B of those switches, same call)."""
    from benchmarks.bench_decode import decode_floor_ms, engine_decode_ms_per_token, verify_ms
    from workbench.engine import Engine, int4, weights
    from workbench.kernels import fused

    bw, rate = floors["bw_Bps"], floors["matmul_flops"]
    prompt, steps = 64, 32
    ctx = prompt + 3 + steps / 2
    plan = [("qwen2-7b", "bf16", {}, (1, 2, 4, 8, 16, 32, 64), (3, 5, 9)),
            ("qwen2-7b", "w4a16_mma", {"w4a16": True}, (1, 2, 4, 8, 16, 32, 64), (3, 5, 9)),
            ("qwen2-7b", "w4a16_triton", {"w4a16": True}, (1, 8, 16, 64), (5, 9)),
            ("qwen2-7b", "w4a16_mma_noswiglu", {"w4a16": True}, (1, 16, 32, 64), (9,)),
            ("qwen2-7b", "w4a16_mma_nosmallpdl", {"w4a16": True}, (1, 8, 16, 32, 64), (3, 9)),
            ("qwen2-7b", "w4a16_mma_lmhead", {"w4a16": True, "quantize_lm_head": True}, (1, 16, 64), ()),
            ("qwen2-7b", "bf16_cublas", {}, (2, 8), (3, 5)),
            ("llama3-8b", "bf16", {}, (1, 16, 64), (9,)),
            ("llama3-8b", "w4a16_mma", {"w4a16": True}, (1, 16, 64), (9,)),
            ("llama3-8b", "w4a16_mma_lmhead", {"w4a16": True, "quantize_lm_head": True}, (1,), ()),
            ("smollm2-135m", "bf16", {}, (1, 8), (5, 9)),
            ("smollm2-135m", "w4a16_mma", {"w4a16": True, "group_size": 64}, (1, 8), (5, 9)),
            ("smollm2-135m", "w4a16_triton", {"w4a16": True, "group_size": 64}, (1, 8), (5, 9))]
    out = []
    for model, impl, kw, batches, ts in plan:
        if model not in models or (impls and impl not in impls):
            continue
        saved = int4.MMA, int4.MMA_SWIGLU, fused.SMALL_PDL, weights.DENSE_MMA
        int4.MMA = impl != "w4a16_triton" and saved[0]
        int4.MMA_SWIGLU = impl != "w4a16_mma_noswiglu" and saved[1]
        fused.SMALL_PDL = impl != "w4a16_mma_nosmallpdl" and saved[2]
        weights.DENSE_MMA = False if impl == "bf16_cublas" else saved[3]
        try:
            t0 = time.time()
            cfg = CONFIGS.get(model) or dict(RANDOM_CONFIGS[model])
            eng = Engine.from_config(hf_config(cfg), max_batch=max(batches), max_seq=prompt + steps + 16, **kw)
            eng.set_fused_gemv(True)
            base = {"model": model, "impl": impl, "build_s": time.time() - t0, "mma_rows_tc": int4.MMA_ROWS_TC,
                    "dense_mma": weights.DENSE_MMA, "dense_mma_rows": list(weights.DENSE_MMA_ROWS),
                    "fused_rows": [eng.fused.min_rows, eng.fused.max_rows] if eng.fused else None,
                    "mma_plain": int4.MMA_PLAIN,  # the measured routes of plain calls above mma_rows_tc (so far)
                    "mma_swiglu": int4.MMA_SWIGLU, "small_pdl": fused.SMALL_PDL,
                    "plain_route": {",".join(map(str, k)): v for k, v in int4._PLAIN_ROUTE.items()}}
            one = None
            for b in batches:
                ms = engine_decode_ms_per_token(eng, b, prompt, steps)
                one = ms if b == 1 else one
                fl = decode_floor_ms(eng, b, ctx, bw, rate)
                out.append({**base, "batch": b, "ms": ms, "floor_ms": fl, "x_floor": ms / fl})
                rec(out)
            for t in ts:
                ms = verify_ms(eng, t, n=20, prompt_len=prompt)
                fl = decode_floor_ms(eng, 1, prompt + t, bw, rate)
                out.append({**base, "verify_T": t, "ms": ms, "floor_ms": fl, "x_floor": ms / fl,
                            "x_decode_b1": ms / one if one else None})
                rec(out)
            # the MMA configurations the engine's calls used, per (N, K, row class, group, dtype, residual)
            out.append({"model": model, "impl": impl, "mma_best": {",".join(map(str, k)): list(v)
                                                                   for k, v in mm._BEST.items()},
                        "dense_route": {",".join(map(str, k)): v for k, v in weights._DENSE_ROUTE.items()},
                        # per captured graph (B, T, prefix, last): the PDL A/B of Engine._pdl_choices
                        "pdl_choice": {",".join(map(str, k)): v for k, v in eng.pdl_choice.items()}})
        except Exception as e:  # noqa: BLE001
            import traceback

            out.append({"model": model, "impl": impl, "error": f"{type(e).__name__}: {e}"[:400],
                        "tb": traceback.format_exc()[-1500:]})
        finally:
            int4.MMA, int4.MMA_SWIGLU, fused.SMALL_PDL, weights.DENSE_MMA = saved
            eng = None
            gc.collect()
            torch.cuda.empty_cache()
    return out


def part_spec(dev, alphas=(0.6, 0.8, 0.9), ks=(4, 8)) -> list:
    """Synthetic-acceptance speculative decoding (``benchmarks.bench_spec``): Qwen2-7B target, bf16 and W4A16
    (RTN g128, the engine's default kernels), Qwen2-0.5B draft (bf16), realized vs theoretical speedup."""
    from benchmarks.bench_spec import bench_spec
    from benchmarks.common import QWEN2_0_5B
    from workbench.engine import Engine

    out = []
    draft = None
    for impl, kw in (("bf16", {}), ("w4a16", {"w4a16": True})):
        try:
            target = Engine.from_config(hf_config(CONFIGS["qwen2-7b"]), max_batch=1, max_seq=640, **kw)
            if draft is None:
                draft = Engine.from_config({**QWEN2_0_5B, "vocab_size": target.vocab_size}, max_batch=1,
                                           max_seq=640)
            out += [{"target": impl, **r} for r in bench_spec(target, draft, alphas=alphas, ks=ks, n_tokens=160)]
        except Exception as e:  # noqa: BLE001
            out.append({"target": impl, "error": f"{type(e).__name__}: {e}"[:400]})
        target = None
        gc.collect()
        torch.cuda.empty_cache()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--parts", default="build,check,layers,engine")
    p.add_argument("--layer-models", default="qwen2-7b,llama3-8b")
    p.add_argument("--engine-models", default="qwen2-7b,llama3-8b")
    p.add_argument("--engine-impls", default="", help="plan implementations to run in part engine (default all)")
    p.add_argument("--layer-ms", default=",".join(map(str, TIME_MS)), help="row counts timed in part layers")
    a = p.parse_args()
    parts = set(a.parts.split(","))
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    res: dict = {"env": environment(), "parts": sorted(parts)}

    def save():
        (out_dir / "check_w4_mma.json").write_text(json.dumps(res, indent=1, default=str))

    t0 = time.time()
    res["available"] = mm.available(dev)
    res["build_s"] = time.time() - t0
    res["why"] = mm.why_unavailable()
    res["variants"] = mm.variants() if res["available"] else []
    save()
    print(f"build/load {res['build_s']:.1f} s, available={res['available']} {res['why'][:300]}", flush=True)
    if not res["available"]:
        return 1
    ok = True
    if "check" in parts:
        t = time.time()
        res["check"] = part_check(dev)
        bad = [r for r in res["check"] if not r["pass"]]
        ok = not bad
        res["check_s"] = time.time() - t
        save()
        print(f"check: {len(res['check'])} cases, {len(bad)} failed ({res['check_s']:.0f} s)", flush=True)
        for r in bad[:20]:
            print("  FAIL", r, flush=True)
        worst = max(res["check"], key=lambda r: r["rel_l2"] if r["rel_l2"] == r["rel_l2"] else 1.0)
        print("  worst rel", worst, flush=True)
        if not ok:  # timing a wrong kernel tells nothing
            return 1
    floors = None
    if parts & {"layers", "engine"}:
        floors = measure_floors()
        res["floors"] = floors
        save()
    if "layers" in parts:
        t = time.time()
        res["layers"] = part_layers(dev, floors, tuple(a.layer_models.split(",")),
                                    tuple(int(v) for v in a.layer_ms.split(",")))
        res["layers_s"] = time.time() - t
        save()
        for r in res["layers"]:
            if "us" in r:
                print(f"  {r['model']:10s} {r['call']:8s} M={r['M']:2d} {r['impl']:12s} {r['us']:8.1f} us "
                      f"x{r['x_floor']:.2f} {r.get('cfg') or ''}", flush=True)
    if "engine" in parts:
        t = time.time()

        def rec(rows):
            res["engine"] = rows
            save()

        res["engine"] = part_engine(dev, floors, rec, tuple(a.engine_models.split(",")),
                                    tuple(v for v in a.engine_impls.split(",") if v))
        res["engine_s"] = time.time() - t
        save()
        for r in res["engine"]:
            if "mma_best" in r:
                continue
            what = f"B={r['batch']}" if "batch" in r else f"T={r.get('verify_T')}"
            print(f"  {r['model']:10s} {r['impl']:13s} {what:5s} {r.get('ms', float('nan')):7.3f} ms "
                  f"x{r.get('x_floor', float('nan')):.2f} {r.get('x_decode_b1') or ''} {r.get('error', '')}",
                  flush=True)
    if "spec" in parts:
        t = time.time()
        res["spec"] = part_spec(dev)
        res["spec_s"] = time.time() - t
        save()
        for r in res["spec"]:
            if "error" in r:
                print("  spec", r, flush=True)
            else:
                print(f"  spec {r['target']:6s} alpha={r['alpha']:.1f} k={r['k']} c={r['c']:.3f} verify={r['verify_cost']:.3f}"
                      f" realized={r['realized_speedup']:.3f} theory={r['theoretical_speedup']:.3f} "
                      f"ratio={r['ratio']:.3f}", flush=True)
    save()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
