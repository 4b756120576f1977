"""The fused one-row W4A16 GEMV (``workbench.kernels.w4a16.gemv_fused``) on the GPU: correctness of each fused variant
on the real matmul shapes, and what it buys end to end at batch 1.

(a) Each call of a decode step (qkv with RMSNorm prologue, alone and with the bias + RoPE + KV-write epilogue; o with
    the residual epilogue; gate_up with RMSNorm; down with SwiGLU + residual) on the SmolLM2-135M shapes (group 64:
    576 in-features) and the Qwen2-7B shapes (group 128), RTN weights, bf16 (float32 in the CPU smoke run), the default launch configuration and a
    split-K one, against ``w4a16.reference`` (dequantized weights, HF's order of operations and roundings; the
    RoPE variant against the reference GEMV then the torch ``ops.qkv_rope_cache``). bf16 passes when the relative
    L2 error is < 5e-3, the max abs error <= 2**-6 * max|ref| and at least 80% of outputs are bit-equal (the GPU
    rounds to nearest on both sides; the CPU tests check the roundings themselves); float32 within 1e-5.
(b) Engine decode ms/token at batch 1 (CUDA graphs, ``bench_decode.engine_decode_ms_per_token``) of random-init
    ``smollm2-135m`` (W4A16 RTN g64) and ``qwen2-7b`` (g128) shaped models: bf16, and W4A16 with the one-row steps
    unfused, fused with the GEMV prologues inside (``dispatch.INT4_GEMV_PROLOGUES`` on, the default) and fused with
    the prologues as their own kernels; plus the relative L2 error of fused vs unfused W4A16 logits over a few steps.

Run on the H200: ``python3 -m benchmarks.check_w4_onerow --out $OUT/check_w4_onerow.json`` (a few minutes at most).
CPU smoke run (tiny shapes, Triton's interpreter): ``TRITON_INTERPRET=1 python -m benchmarks.check_w4_onerow
--smoke``. Exits 1 if any correctness check fails (after writing the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from benchmarks.bench_decode import engine_decode_ms_per_token
from benchmarks.common import environment
from workbench.engine import Engine, dispatch, ops
from workbench.engine.int4 import quantize_rtn_int4
from workbench.kernels import w4a16
from workbench.kernels.int4_layout import pack_int4_gemv
from workbench.models.random_init import RANDOM_CONFIGS

EPS = 1e-6
SPLIT_CFG = (32, 4, 2, 4, 1)  # (BLOCK_N, SPLIT_K, U, num_warps, DEPTH): a split-K launch beside the default


def calls(c: dict, group: int, model: str) -> list:
    """The four INT4 matmuls of one layer of HF config dict ``c``: ``(model, name, N, K, group, prologue,
    residual, rope)`` with ``rope = (n_heads, n_kv, head_dim, bias)`` or None."""
    h, inter, nh, nkv = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = h // nh
    nq = (nh + 2 * nkv) * d
    bias = c.get("model_type") == "qwen2"
    return [(model, "qkv", nq, h, group, "rmsnorm", False, None),
            (model, "qkv+rope", nq, h, group, "rmsnorm", False, (nh, nkv, d, bias)),
            (model, "o", h, nh * d, group, "none", True, None),
            (model, "gate_up", 2 * inter, h, group, "rmsnorm", False, None),
            (model, "down", h, inter, group, "swiglu", True, None)]


# (relative L2, max abs / max |ref|, fraction bit-equal) a result must stay within, per activation dtype
TOLERANCE = {torch.bfloat16: (5e-3, 2.0**-6, 0.8), torch.float32: (1e-5, 1e-5, 0.0)}


def _errors(y: torch.Tensor, ref: torch.Tensor) -> dict:
    rel_tol, max_tol, eq_tol = TOLERANCE[y.dtype]
    y, ref = y.float().flatten(), ref.float().flatten()
    diff = (y - ref).abs()
    rel = float(diff.norm() / ref.norm().clamp(min=1e-30))
    max_abs, scale = float(diff.max()), float(ref.abs().max())
    eq = float((diff == 0).float().mean())
    return {"max_abs": max_abs, "rel_l2": rel, "frac_equal": eq,
            "pass": rel < rel_tol and max_abs <= max_tol * scale + 1e-30 and eq >= eq_tol}


@torch.no_grad()
def check_call(call, dev, dtype) -> list:
    """Every launch configuration of one call against the reference: one result row each."""
    model, name, n, k, g, pro, res, rope = call
    gen = torch.Generator(device=dev).manual_seed(n * 7 + k)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, device=dev, generator=gen) * 0.02, g)
    qw, st, zt = pack_int4_gemv(q, g), s.to(dtype).t().contiguous(), z.to(dtype).t().contiguous()
    del q
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, device=dev, generator=gen).to(dtype)
    nw = (torch.rand(k, device=dev, generator=gen) + 0.5).to(dtype)
    r = torch.randn(1, n, device=dev, generator=gen).to(dtype) if res else None
    ref = w4a16.reference(x, qw, st, zt, g, pro, nw, EPS, r)
    rows = []
    for cfg in (w4a16.DEFAULT, SPLIT_CFG):
        row = {"model": model, "call": name, "N": n, "K": k, "group": g, "prologue": pro, "residual": res,
               "cfg": list(cfg)}
        if rope is None:
            row.update(_errors(w4a16.gemv_fused(x, qw, st, zt, g, n, pro, nw, EPS, r, cfg=cfg), ref))
        else:
            row.update(_check_rope(x, qw, st, zt, g, n, nw, ref, rope, cfg, dev, dtype, gen))
        rows.append(row)
        print(f"{model:14s} {name:9s} N={n:6d} K={k:6d} g={g:3d} cfg={cfg}: max_abs {row['max_abs']:.3g} "
              f"rel {row['rel_l2']:.2e} equal {row['frac_equal']:.3f} {'ok' if row['pass'] else 'FAIL'}", flush=True)
    return rows


def _check_rope(x, qw, st, zt, g, n, nw, qkv_ref, rope, cfg, dev, dtype, gen) -> dict:
    """q and the k / v cache writes of the fused qkv + RoPE call against reference GEMV + ``ops.qkv_rope_cache``;
    the worst of the three."""
    nh, nkv, d, has_bias = rope
    s_cache = 32
    bias = (torch.randn(n, device=dev, generator=gen) * 0.1).to(dtype) if has_bias else None
    ang = torch.rand(s_cache, d // 2, device=dev, generator=gen) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos, slots = torch.tensor([11], device=dev), torch.tensor([1], device=dev)
    caches = [torch.zeros(2, nkv, s_cache, d, device=dev, dtype=dtype) for _ in range(4)]
    q_ref = ops.TORCH_OPS.qkv_rope_cache(qkv_ref, bias, cos, sin, wpos, slots, 1, caches[0], caches[1], nh, nkv)
    q = w4a16.gemv_fused(x, qw, st, zt, g, n, "rmsnorm", nw, EPS,
                         rope=(bias, cos, sin, wpos, slots, caches[2], caches[3], nh, nkv), cfg=cfg)
    errs = [_errors(q, q_ref), _errors(caches[2][1, :, 11], caches[0][1, :, 11]),
            _errors(caches[3][1, :, 11], caches[1][1, :, 11])]
    worst = max(errs, key=lambda e: e["rel_l2"])
    worst["pass"] = all(e["pass"] for e in errs) and bool(caches[2][0].abs().sum() == 0)
    return worst


def _logits(eng, prompt, n: int) -> torch.Tensor:
    """Teacher-forced one-row steps after a prefill: float32 logits ``[n, V]``."""
    eng.reset()
    eng.extend_batch([0], prompt[:, :-n])
    return torch.cat([eng.extend_batch([0], prompt[:, i:i + 1])[:, -1] for i in range(prompt.shape[1] - n,
                                                                                        prompt.shape[1])]).float()


def _set(eng, variant: str) -> list | None:
    """Switch ``eng`` to a one-row variant; returns the fused rows in use."""
    saved = dict(dispatch.INT4_GEMV_PROLOGUES)
    if variant == "fused_sep_prologues":
        dispatch.INT4_GEMV_PROLOGUES = {"rmsnorm": False, "swiglu": False}
    try:
        if variant == "unfused":  # one-row steps unfused, 2..64 rows (dispatch.INT4_ONE_ROW_FUSED False)
            eng.set_fused_gemv(True, min_rows=2)
        else:
            eng.set_fused_gemv(True, min_rows=1)
    finally:
        dispatch.INT4_GEMV_PROLOGUES = saved
    return [eng.fused.min_rows, eng.fused.max_rows] if eng.fused is not None else None


def decode_table(name: str, c: dict, group: int, dev, prompt_len: int, n_steps: int,
                 n_check: int = 4) -> tuple[list, dict]:
    """Decode ms/token at batch 1 for bf16 and the W4A16 one-row variants; and fused-vs-unfused logits error."""
    kw = {"max_batch": 1, "max_seq": prompt_len + n_steps + 16, "device": dev, "use_graphs": dev.type == "cuda"}
    rows = []
    eng = Engine.from_config(c, **kw)
    rows.append({"model": name, "impl": "bf16", "fused_rows": _set(eng, "fused"),
                 "ms": engine_decode_ms_per_token(eng, 1, prompt_len, n_steps)})
    del eng
    _free(dev)
    prompt = torch.randint(100, c["vocab_size"] - 100, (1, 12), device=dev)
    logits = {}
    for variant in ("unfused", "fused", "fused_sep_prologues"):
        # a fresh engine per variant: re-capturing graphs of one engine after a switch tripped an internal assert
        # of torch's caching allocator on the H200 (torch 2.11, "it->second->use_count > 0", at capture_begin)
        eng = Engine.from_config(c, w4a16=True, group_size=group, w4a16_backend="triton:dequant", **kw)
        used = _set(eng, variant)
        logits[variant] = _logits(eng, prompt, n_check)
        rows.append({"model": name, "impl": f"w4a16_g{group}_{variant}", "fused_rows": used,
                     "ms": engine_decode_ms_per_token(eng, 1, prompt_len, n_steps)})
        print(f"{name:14s} {rows[-1]['impl']:32s} fused rows {used}: {rows[-1]['ms']:.3f} ms/token", flush=True)
        del eng
        _free(dev)
    ref = logits["unfused"]
    check = {v: float((logits[v] - ref).norm() / ref.norm()) for v in ("fused", "fused_sep_prologues")}
    took = rows[-2]["fused_rows"] is not None and rows[-2]["fused_rows"][0] == 1
    check["pass"] = all(e < 5e-2 for e in check.values()) and took
    check["one_row_fused_taken"] = took
    return rows, check


def _free(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _smoke_config() -> dict:
    return {"model_type": "llama", "vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 128, "tie_word_embeddings": False}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "check_w4_onerow.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (needs TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if dev.type == "cpu" and (not args.smoke or os.environ.get("TRITON_INTERPRET") != "1"):
        sys.exit("no GPU: run the CPU smoke test as TRITON_INTERPRET=1 python -m benchmarks.check_w4_onerow --smoke")
    # (the interpreter rounds float32 -> bf16 by truncation, the reference to nearest: float32 on the CPU)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if args.smoke:
        small = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2,
                 "num_key_value_heads": 1}
        todo = calls(small, 64, "smoke-g64")[:3] + calls({**small, "model_type": "qwen2"}, 128, "smoke-g128")[1:]
        models = [("smoke-g64", _smoke_config(), 64), ("smoke-g128", _smoke_config(), 128)]
        prompt_len, n_steps, n_check = 8, 1, 2
    else:
        smol, qwen = dict(RANDOM_CONFIGS["smollm2-135m"]), dict(RANDOM_CONFIGS["qwen2-7b"])
        todo = calls(smol, 64, "smollm2-135m") + calls(qwen, 128, "qwen2-7b")
        models = [("smollm2-135m", smol, 64), ("qwen2-7b", qwen, 128)]
        prompt_len, n_steps, n_check = 128, 64, 4
    out = {"env": environment(), "kernels": [], "decode": [], "engine_check": {}}
    for call in todo:
        out["kernels"] += check_call(call, dev, dtype)
        _free(dev)
    for name, c, group in models:
        rows, check = decode_table(name, c, group, dev, prompt_len, n_steps, n_check)
        out["decode"] += rows
        out["engine_check"][name] = check
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"\n{'model':14s} {'impl':32s} {'fused rows':12s} ms/token")
    for r in out["decode"]:
        print(f"{r['model']:14s} {r['impl']:32s} {r['fused_rows']!s:12s} {r['ms']:.3f}")
    print(f"engine fused vs unfused W4A16 logits: {json.dumps(out['engine_check'])}")
    failed = ([f"{r['model']} {r['call']} cfg {r['cfg']}" for r in out["kernels"] if not r["pass"]]
              + [f"{k} engine logits" for k, v in out["engine_check"].items() if not v["pass"]])
    out["pass"] = not failed
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.out}; {'all checks passed' if not failed else f'FAILED: {failed}'}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
