"""GPU correctness of the few-row kernels (:mod:`workbench.kernels.rows`) and of the engine's fused steps, compiled,
at full size: every Qwen2-7B / Llama-3-8B layer shape at M = 1, 5, 16, 33, 64 (INT4 and bf16, plain), the
prologue / epilogue variants the engine uses, the one-row RoPE epilogue, and engine steps fused vs unfused vs HF.

Relative errors ``||y - ref|| / ||ref||`` against float32 references on the same bf16 inputs (dequantized weights
for INT4): bf16 output rounding alone gives about 2e-3; a check passes below 1e-2 with finite outputs. Each output
buffer is allocated after filling the allocator's free memory with NaN (``_poison``), so an unwritten element shows.

Run: ``python3 -m benchmarks.check_rows`` (writes ``$OUT/check_rows.json``); ``run_all --kernels`` calls
:func:`check`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.bench_decode import rows_engine_jobs
from benchmarks.bench_gemv import GROUP, SHAPES
from benchmarks.check_gpu import SMALL, rel
from benchmarks.common import Recorder, environment, hf_model
from workbench.engine import Engine, dispatch, ops
from workbench.engine.int4 import dequantize_int4, quantize_rtn_int4
from workbench.kernels import gemv, rows
from workbench.kernels.int4_layout import pack_int4_gemv

TOL = 1e-2


def _poison(nbytes: int = 1 << 30) -> None:
    """Fill ``nbytes`` of freed allocator memory with NaN, so that outputs allocated next start as NaN."""
    torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").fill_(float("nan"))


def _ok(err: float, y: torch.Tensor) -> bool:
    return bool(torch.isfinite(y).all()) and err < TOL


@torch.no_grad()
def check_shapes(ms=(1, 5, 16, 33, 64)) -> list:
    out = []
    for model, shapes in SHAPES.items():
        for name, (n, k) in shapes.items():
            torch.manual_seed(0)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            q, s, z = quantize_rtn_int4(w, GROUP)
            w_hat = dequantize_int4(q, s, z, torch.float32)
            args = (pack_int4_gemv(q, GROUP), s.t().contiguous(), z.t().contiguous(), GROUP, n)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                _poison()
                y4 = rows.gemm_int4(x, *args)
                _poison()
                y16 = rows.gemm(x, w)
                e4, e16 = rel(y4, F.linear(x.float(), w_hat)), rel(y16, F.linear(x.float(), w.float()))
                out.append({"model": model, "shape": name, "m": m, "int4_err": e4, "bf16_err": e16,
                            "ok": _ok(e4, y4) and _ok(e16, y16)})
            del w, q, w_hat, args
            torch.cuda.empty_cache()
    return out


@torch.no_grad()
def check_fusions() -> list:
    """RMSNorm + residual and SwiGLU + residual at M = 1 and 9 (split-K 1 and 4), Qwen2-7B qkv / down shapes."""
    out = []
    for name, (n, k), pro in (("qkv", (4608, 3584), "rmsnorm"), ("down", (3584, 18944), "swiglu")):
        torch.manual_seed(1)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        q, s, z = quantize_rtn_int4(w, GROUP)
        w_hat = dequantize_int4(q, s, z, torch.float32)
        args = (pack_int4_gemv(q, GROUP), s.t().contiguous(), z.t().contiguous(), GROUP, n)
        nw = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5
        for m in (1, 9):
            x = torch.randn(m, 2 * k if pro == "swiglu" else k, device="cuda", dtype=torch.bfloat16)
            r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            for split in (1, 4):
                _poison()
                y4 = rows.gemm_int4(x, *args, pro, nw, 1e-6, r, cfg=(64, split, 4, 4))
                _poison()
                y16 = rows.gemm(x, w, pro, nw, 1e-6, r, cfg=(64, 128, split, 4, 4))
                e4 = rel(y4, gemv.reference(x.float(), w_hat, pro, nw.float(), 1e-6, r.float()))
                e16 = rel(y16, gemv.reference(x.float(), w.float(), pro, nw.float(), 1e-6, r.float()))
                out.append({"shape": name, "prologue": pro, "m": m, "split": split, "int4_err": e4, "bf16_err": e16,
                            "ok": _ok(e4, y4) and _ok(e16, y16)})
    return out


@torch.no_grad()
def check_rope() -> dict:
    """The one-row INT4 qkv + RoPE + KV write (Qwen2-7B: 28 + 2 x 4 heads of 128) vs the matmul then the RoPE
    kernel."""
    h, kv, d, hid = 28, 4, 128, 3584
    n = (h + 2 * kv) * d
    torch.manual_seed(2)
    q, s, z = quantize_rtn_int4(torch.randn(n, hid, device="cuda", dtype=torch.bfloat16) * 0.02, GROUP)
    w_hat = dequantize_int4(q, s, z, torch.bfloat16)
    args = (pack_int4_gemv(q, GROUP), s.t().contiguous(), z.t().contiguous(), GROUP, n)
    x, nw = torch.randn(1, hid, device="cuda", dtype=torch.bfloat16), torch.rand(hid, device="cuda").bfloat16() + 0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1
    ang = torch.rand(64, d // 2, device="cuda") * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos, slots = torch.tensor([37], device="cuda"), torch.tensor([1], device="cuda")
    caches = [torch.zeros(2, kv, 64, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    qkv = gemv.reference(x.float(), w_hat.float(), "rmsnorm", nw.float(), 1e-6).bfloat16()
    q_ref = ops.qkv_rope_cache(qkv, b, cos, sin, wpos, slots, 1, caches[0], caches[1], h, kv)
    out = {}
    for split in (1, 4):
        c2, c3 = caches[2].zero_(), caches[3].zero_()
        q1 = rows.gemm_int4(x, *args, "rmsnorm", nw, 1e-6, cfg=(64, split, 4, 4),
                            rope=(b, cos, sin, wpos, slots, c2, c3, h, kv))
        out[f"split{split}"] = {"q_err": rel(q1, q_ref), "k_err": rel(c2, caches[0]), "v_err": rel(c3, caches[1])}
    out["ok"] = all(max(v.values()) < TOL for v in out.values())
    return out


@torch.no_grad()
def check_engine() -> dict:
    """Small Qwen2 config: bf16 and W4A16 engines, fused vs unfused steps (decode B = 1, verify T = 5, batch 4),
    and bf16 vs HF's forward."""
    torch.manual_seed(0)
    m = hf_model(SMALL)
    for p in m.parameters():
        p.add_(torch.randn_like(p) * 0.02)
    ids = torch.randint(0, 32000, (4, 40), device="cuda")
    ref = m(ids).logits.float()
    out = {}
    for tag, kw in (("bf16", {}), ("w4a16", {"w4a16": "rtn", "w4a16_backend": "triton:tinygemm"})):
        e = Engine.from_hf(m, max_batch=4, max_seq=64, **kw)
        res = {}
        for fused in (True, False):
            e.set_fused_gemv(fused)
            e.reset()
            e.extend_batch([0, 1, 2, 3], ids[:, :32])
            one = e.extend_batch([0], ids[:1, 32:33])
            ver = e.extend_batch([0], ids[:1, 33:38])
            bat = e.extend_batch([1, 2, 3], ids[1:, 32:33])
            res[fused] = torch.cat([one[0], ver[0], bat[:, 0]])
        out[f"{tag}_fused_vs_unfused"] = rel(res[True], res[False])
        want = torch.cat([ref[0, 32:38], ref[1:, 32]])
        out[f"{tag}_fused_vs_hf"] = rel(res[True], want)
    out["ok"] = out["bf16_fused_vs_hf"] < 0.05 and out["bf16_fused_vs_unfused"] < 0.05 and \
        out["w4a16_fused_vs_unfused"] < 0.05
    return out


def jobs(ms=(1, 5, 16, 33, 64)) -> list:
    """The kernel variants :func:`check` launches (``benchmarks.common.precompile`` jobs)."""
    out = []
    for shapes in SHAPES.values():
        for n, k in shapes.values():
            for m in ms:
                out += [("int4", n, k, m, "none", False, 0, rows.default_cfg(n, k, m, True)),
                        ("dense", n, k, m, "none", False, 0, rows.default_cfg(n, k, m, False))]
    for (n, k), pro in (((4608, 3584), "rmsnorm"), ((3584, 18944), "swiglu")):
        for m in (1, 9):
            for split in (1, 4):
                out += [("int4", n, k, m, pro, True, 0, (64, split, 4, 4)),
                        ("dense", n, k, m, pro, True, 0, (64, 128, split, 4, 4))]
    out += [("int4", 36 * 128, 3584, 1, "rmsnorm", False, 128, (64, sk, 4, 4)) for sk in (1, 4)]
    for w4 in (False, True):
        out += rows_engine_jobs(SMALL, (1, 3, 5), w4, False, tuned_one_row=False)
    return out


def check(rec: Recorder | None = None) -> dict:
    """Every check above; ``all_ok`` is True when each passed. The bf16 one-row GEMVs of the engine check run
    untuned (``dispatch.TUNE`` off) to keep the compile time short."""
    dispatch.TUNE = False
    try:
        res = {"fusions": check_fusions(), "rope": check_rope(), "engine": check_engine(), "shapes": check_shapes()}
    finally:
        dispatch.TUNE = True
    res["all_ok"] = (all(r["ok"] for r in res["shapes"] + res["fusions"]) and res["rope"]["ok"]
                     and res["engine"]["ok"])
    if rec is not None:
        rec.put("check_rows", res)
    return res


def main():
    from benchmarks.common import precompile

    rec = Recorder(name="check_rows.json")
    rec.put("env", environment())
    rec.put("precompile", precompile(jobs()))
    check(rec)


if __name__ == "__main__":
    main()
