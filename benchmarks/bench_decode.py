"""Decode and prefill timings: HF eager ``generate`` vs the engine (bf16, W4A16), against floors.

Run alone: ``python benchmarks/bench_decode.py --model qwen2-7b`` (H200); ``run_all.py`` calls the
functions below for every model.

Floors (METHOD.md): decode ms/token >= max((weight bytes + KV bytes read) / bandwidth, matmul FLOPs / measured bf16
matmul rate), with bandwidth the higher of the measured read and copy bandwidths (``floors["bw_Bps"]``,
:func:`benchmarks.common.measure_floors`); prefill ms >= max(matmul FLOPs / rate, weight bytes / bandwidth).

:func:`bench_rows_model` times the few-row steps (decode batches 1..64, verify steps of k + 1 tokens) of the
engine variants whose kernels :mod:`workbench.engine.dispatch` picks (bf16 and W4A16, fused and not).
"""

from __future__ import annotations

import argparse
import gc

import torch

from benchmarks.common import (
    CONFIGS,
    DEVICE,
    Recorder,
    Stopwatch,
    hf_config,
    hf_model,
    measure_floors,
    sync,
    wall_ms,
)
from workbench.engine import Engine


def hf_generate_ms_per_token(model, batch: int, prompt_len: int = 128, n_new: int = 32) -> float:
    """HF eager ``generate`` (greedy, DynamicCache): (time for 1 + n_new tokens - time for 1) / n_new."""
    vocab = model.config.vocab_size
    ids = torch.randint(100, vocab - 100, (batch, prompt_len), device=DEVICE)
    am = torch.ones_like(ids)

    def gen(n):
        model.generate(input_ids=ids, attention_mask=am, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       pad_token_id=0, eos_token_id=None)

    t1 = wall_ms(lambda: gen(1), reps=2, warmup=1)
    tn = wall_ms(lambda: gen(1 + n_new), reps=2, warmup=0)
    return (tn - t1) / n_new


def engine_decode_ms_per_token(eng: Engine, batch: int, prompt_len: int = 128, n_steps: int = 64) -> float:
    """Greedy decode on slots ``0..batch-1`` after an eager prefill: ms per step (one token per row),
    argmax on device, no host sync inside the loop (the host queues ahead of the GPU)."""
    eng.reset()
    slots = list(range(batch))
    ids = torch.randint(100, eng.vocab_size - 100, (batch, prompt_len), device=eng.device)
    tok = eng.extend_batch(slots, ids, logits="last").argmax(-1, keepdim=True)
    for _ in range(3):  # first call captures the graph
        tok = eng.extend_batch(slots, tok)[:, -1].argmax(-1, keepdim=True)
    sw = Stopwatch().start()
    for _ in range(n_steps):
        tok = eng.extend_batch(slots, tok)[:, -1].argmax(-1, keepdim=True)
    return sw.stop() / n_steps


def profile_step(eng: Engine, batch: int = 1, steps: int = 3, top: int = 12) -> list:
    """Per-kernel device time of eager decode steps (torch.profiler), to see where a step's time over
    the floor goes: ``[{"kernel", "us_per_step", "calls_per_step"}]``, largest first."""
    from torch.profiler import ProfilerActivity, profile

    eng.reset()
    slots = list(range(batch))
    tok = eng.extend_batch(slots, torch.randint(100, 1000, (batch, 128), device=eng.device), logits="last")
    tok = tok.argmax(-1, keepdim=True)
    graphs, eng.use_graphs = eng.use_graphs, False
    try:
        eng.extend_batch(slots, tok)
        sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                eng.extend_batch(slots, tok)
            sync()
    finally:
        eng.use_graphs = graphs
    return kernel_table(prof, steps, top)


def kernel_table(prof, steps: int, top: int = 12) -> list:
    """A torch.profiler run of ``steps`` steps as ``[{"kernel", "us_per_step", "calls_per_step"}]``: a TOTAL row,
    then the ``top`` kernels by device time."""
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        if t > 0:
            rows.append({"kernel": ev.key[:90], "us_per_step": t / steps, "calls_per_step": ev.count / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows)
    return [{"kernel": "TOTAL", "us_per_step": total, "calls_per_step": sum(r["calls_per_step"] for r in rows)}] + rows[:top]


def decode_floor_ms(eng: Engine, batch: int, ctx: float, bw: float, flops_rate: float | None = None) -> float:
    """max((weight bytes + batch * ctx * KV bytes per token) / bandwidth, 2 * matmul params * batch / flops_rate)
    in ms (the compute term only with ``flops_rate``; it matters for W4A16 from about 32 rows)."""
    mem = (eng.weight_bytes() + batch * ctx * eng.kv_bytes_per_token()) / bw * 1e3
    if flops_rate is None:
        return mem
    s = eng.spec
    params = s.block_matmul_params + s.vocab * s.hidden
    return max(mem, 2 * params * batch / flops_rate * 1e3)


def verify_ms(eng: Engine, t: int, n: int = 30, prompt_len: int = 64) -> float:
    """ms of one T-token step on slot 0 (graph replay), cache rolled back after each."""
    eng.reset()
    eng.extend_batch([0], torch.randint(100, 1000, (1, prompt_len), device=eng.device), logits="last")
    toks = torch.randint(100, 1000, (1, t), device=eng.device)
    for _ in range(3):
        eng.extend_batch([0], toks)
        eng.truncate_slot(0, prompt_len)
    sw = Stopwatch().start()
    for _ in range(n):
        eng.extend_batch([0], toks)
        eng.truncate_slot(0, prompt_len)
    return sw.stop() / n


def prefill_ms(eng: Engine, t: int) -> float:
    """Eager prefill of ``t`` tokens into slot 0 (logits of the last token only)."""
    ids = torch.randint(100, eng.vocab_size - 100, (1, t), device=eng.device)

    def run():
        eng.reset()
        eng.extend_batch([0], ids, logits="last")

    return wall_ms(run, reps=5, warmup=2)


def prefill_floor_ms(eng: Engine, t: int, floors: dict) -> dict:
    """Compute floor: 2 * (block matmul params) * t + causal attention 2 * 2 * L * H * D * t^2 / 2, plus
    lm_head for one token, over the measured matmul rate; memory floor: weight bytes / bandwidth."""
    s = eng.spec
    block = s.block_matmul_params
    flops = 2 * block * t + 2 * s.n_layers * s.n_heads * s.head_dim * t * t + 2 * s.vocab * s.hidden
    return {"flops": flops, "compute_floor_ms": flops / floors["matmul_flops"] * 1e3,
            "memory_floor_ms": eng.weight_bytes() / floors["bw_Bps"] * 1e3}


def bench_model(name: str, floors: dict, rec: Recorder, backend: str, batches=(1, 8, 32), prompt_len=128,
                n_steps=64, hf_new=32, keep_bf16: bool = False, profile: bool = False):
    """HF eager vs engine bf16 vs engine W4A16 (RTN, g=128) on one random-init config."""
    bw = floors["bw_Bps"]
    max_seq = prompt_len + n_steps + 8
    ctx = prompt_len + 3 + n_steps / 2  # mean cached length over the timed steps
    model = hf_model(CONFIGS[name])
    rows = []

    def add(row):
        row["bf16_floor_ms"] = decode_floor_ms(eng, row["batch"], ctx, bw)  # common yardstick
        if "floor_ms" in row:
            row["x_floor"] = row["ms_per_token"] / row["floor_ms"]
        rows.append(row)
        rec.put(f"decode_{name}", rows)

    eng = Engine.from_hf(model, max_batch=max(batches), max_seq=max_seq)
    for b in batches:
        add({"model": name, "impl": "hf_eager", "batch": b,
             "ms_per_token": hf_generate_ms_per_token(model, b, prompt_len, hf_new)})
    variants = [("engine_bf16", lambda: eng, batches),
                (f"engine_w4a16_{backend}", lambda: Engine.from_hf(
                    model, max_batch=max(batches), max_seq=max_seq, w4a16="rtn", w4a16_backend=backend), batches),
                (f"engine_w4a16_{backend}_lmhead", lambda: Engine.from_hf(
                    model, max_batch=1, max_seq=max_seq, w4a16="rtn", w4a16_backend=backend,
                    quantize_lm_head=True), (1,))]
    for impl, build, bs in variants:
        try:
            e = build()
            for b in bs:
                add({"model": name, "impl": impl, "batch": b, "ms_per_token": engine_decode_ms_per_token(
                    e, b, prompt_len, n_steps), "floor_ms": decode_floor_ms(e, b, ctx, bw),
                    "weight_bytes": e.weight_bytes()})
            if profile and DEVICE == "cuda":
                rec.put(f"profile_{name}_{impl}", profile_step(e, 1))
        except Exception as err:  # noqa: BLE001 - keep the other variants' numbers
            rec.put(f"error_{name}_{impl}", f"{type(err).__name__}: {str(err)[:1000]}")
        e = None
        gc.collect()
        torch.cuda.empty_cache()
    model = None  # the engines keep what they need
    # prefill: a second engine over the same weights with a longer cache
    pre = []
    long = Engine(eng.spec, eng.w, eng.config, 1, 2048 + 16, eng.dtype, eng.device)
    for t in (512, 2048):
        ms = prefill_ms(long, t)
        pre.append({"model": name, "impl": "engine_bf16", "tokens": t, "ms": ms, **prefill_floor_ms(long, t, floors)})
    rec.put(f"prefill_{name}", pre)
    del long
    if not keep_bf16:
        del eng
        gc.collect()
        torch.cuda.empty_cache()
        return None
    return eng


# engine builds: name -> Engine.from_config keyword arguments
ROWS_ENGINES = {"bf16": {}, "w4a16": {"w4a16": True, "w4a16_backend": "triton:tinygemm"},
                "w4a16_lmhead": {"w4a16": True, "w4a16_backend": "triton:tinygemm", "quantize_lm_head": True}}
# (impl, engine, (min_rows, max_rows) of the fused path or None for dispatch.default_rows, INT4 prologues fused,
# decode batches, verify T = k + 1). The 2026-12-01 run (results/kernels_h200.json) measured these under older
# names: engine_bf16_rows was "engine_bf16" (then fused 1..64), engine_bf16 "engine_bf16_cublas_rows",
# engine_w4a16_rows "engine_w4a16_sep" (1..64, prologues separate), engine_w4a16_fusedpro "engine_w4a16".
ALL_M = (1, 2, 4, 8, 16, 32, 64)
ROWS_VARIANTS = {
    "qwen2-7b": [("engine_bf16", "bf16", None, False, ALL_M, (3, 5, 9)),
                 ("engine_bf16_rows", "bf16", (1, 64), False, (2, 16, 64), (5, 9)),
                 ("engine_w4a16", "w4a16", None, False, ALL_M, (3, 5, 9)),
                 ("engine_w4a16_rows", "w4a16", (1, 64), False, (1,), (5,)),
                 ("engine_w4a16_fusedpro", "w4a16", None, True, (4, 16), (5,)),
                 ("engine_w4a16_lmhead", "w4a16_lmhead", None, False, (1, 16), ())],
    "llama3-8b": [("engine_bf16", "bf16", None, False, (1, 16, 64), (9,)),
                  ("engine_w4a16", "w4a16", None, False, (1, 16, 64), (9,))],
}


def rows_engine_jobs(c: dict, ms, w4a16: bool, lm_int4: bool, tuned_one_row: bool = True, sep: bool = False) -> list:
    """The kernel variants an engine of the HF config dict ``c`` compiles for steps of ``ms`` token rows
    (``benchmarks.common.precompile`` jobs), with the configurations it will pick (``rows._BEST`` as tuned so far
    in this process, else defaults; the bf16 one-row GEMVs: every configuration its tuner tries, or the default).
    ``sep``: the INT4 matmuls run without their prologue (``dispatch.INT4_PROLOGUES`` off)."""
    from workbench.kernels import gemv, rows, w4a16

    h, inter, d = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    nq = (c["num_attention_heads"] + 2 * c["num_key_value_heads"]) * d
    calls = [(nq, h, "rmsnorm", False), (h, h, "none", True), (2 * inter, h, "rmsnorm", False),
             (h, inter, "swiglu", True), (c["vocab_size"], h, "rmsnorm", False)]
    jobs = []
    for m in sorted(set(ms)):
        for i, (n, k, pro, res) in enumerate(calls):
            kind = "int4" if (w4a16 and (i < 4 or lm_int4)) else "dense"
            rope_d = d if (i == 0 and m == 1) else 0
            if kind == "int4" and sep:
                pro = "none"
            if kind == "int4" and m == 1:  # the CUDA-core GEMV the engine tunes for one-row steps
                jobs += [("w4gemv", n, k, 1, "none", False, 0, cfg) for cfg in w4a16.CONFIGS]
            if kind == "dense" and m == 1:
                cfgs = gemv.CONFIGS if tuned_one_row else [gemv.DEFAULT]
                jobs += [("gemv", n, k, 1, pro, res, rope_d, cfg) for cfg in cfgs
                         if not rope_d or (cfg[0] >= 2 and d % cfg[0] == 0)]
                continue
            rope = (None,) * 5 + (torch.empty(1, 1, 1, rope_d, device="meta"),) if rope_d else None
            cfg = rows._cfg(kind, n, k, m, pro, True if res else None, rope, torch.bfloat16)
            jobs.append((kind, n, k, m, pro, res, rope_d, cfg))
    return jobs


def rows_model_jobs(name: str, variants=None) -> list:
    """:func:`rows_engine_jobs` for every variant of :func:`bench_rows_model` on ``CONFIGS[name]``."""
    jobs = []
    for _impl, key, _rows, fused_pro, batches, verify_ts in variants or ROWS_VARIANTS[name]:
        kw = ROWS_ENGINES[key]
        jobs += rows_engine_jobs(CONFIGS[name], set(batches) | set(verify_ts) | {64}, bool(kw.get("w4a16")),
                                 bool(kw.get("quantize_lm_head")), sep=not fused_pro)
    return jobs


def bench_rows_model(name: str, floors: dict, rec: Recorder, variants=None, prompt_len: int = 64,
                     n_steps: int = 32) -> list:
    """Decode batches and verify steps of each engine variant on the random-init ``CONFIGS[name]``: one row per
    (impl, batch) with ms per step, the floor (weights + KV at the mean context, or matmul FLOPs, whichever is
    larger) and time / floor; verify rows (batch 1, T = k + 1 tokens) also with their cost in decode steps of the
    same variant. Compile the kernels first (``precompile(rows_model_jobs(name))``) to keep compile time out."""
    from workbench.engine import dispatch

    variants = variants or ROWS_VARIANTS[name]
    bw, rate = floors["bw_Bps"], floors["matmul_flops"]
    ctx = prompt_len + 3 + n_steps / 2
    out = []
    engines: dict = {}
    for impl, key, rng, fused_pro, batches, verify_ts in variants:
        try:
            if key not in engines:
                engines.clear()
                gc.collect()
                torch.cuda.empty_cache()
                mb = max(b for _i, k2, _r, _f, bs, _v in variants if k2 == key for b in bs)
                engines[key] = Engine.from_config(hf_config(CONFIGS[name]), max_batch=mb,
                                                  max_seq=prompt_len + n_steps + 16, **ROWS_ENGINES[key])
            eng = engines[key]
            saved = dispatch.INT4_PROLOGUES
            dispatch.INT4_PROLOGUES = {"rmsnorm": fused_pro, "swiglu": fused_pro}
            lo, hi = rng or (None, None)
            eng.set_fused_gemv(True, max_rows=hi, min_rows=lo)
            dispatch.INT4_PROLOGUES = saved
            base = {"model": name, "impl": impl,
                    "fused_rows": [eng.fused.min_rows, eng.fused.max_rows] if eng.fused else None,
                    "weight_bytes": eng.weight_bytes()}
            one = None
            for b in batches:
                ms = engine_decode_ms_per_token(eng, b, prompt_len, n_steps)
                one = ms if b == 1 else one
                fl = decode_floor_ms(eng, b, ctx, bw, rate)
                out.append({**base, "batch": b, "ms": ms, "floor_ms": fl, "x_floor": ms / fl})
                rec.put(f"rows_{name}", out)
            for t in verify_ts:
                ms = verify_ms(eng, t, n=20, prompt_len=prompt_len)
                fl = decode_floor_ms(eng, 1, prompt_len + t, bw, rate)
                out.append({**base, "verify_T": t, "ms": ms, "floor_ms": fl, "x_floor": ms / fl,
                            "x_decode_b1": ms / one if one else None})
                rec.put(f"rows_{name}", out)
        except Exception as err:  # noqa: BLE001 - keep the other variants' numbers
            import traceback

            rec.put(f"error_rows_{name}_{impl}", f"{type(err).__name__}: {err}"[:500] + traceback.format_exc()[-1500:])
    engines.clear()
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="qwen2-7b", choices=sorted(CONFIGS))
    p.add_argument("--backend", default="gemlite", choices=["gemlite", "tinygemm", "dequant"])
    a = p.parse_args()
    rec = Recorder(name=f"decode_{a.model}.json")
    floors = measure_floors()
    rec.put("floors", floors)
    bench_model(a.model, floors, rec, a.backend)


if __name__ == "__main__":
    main()
