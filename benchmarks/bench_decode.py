"""Decode and prefill timings: HF eager ``generate`` vs the engine (bf16, W4A16), against floors.

Run alone: ``python benchmarks/bench_decode.py --model qwen2-7b`` (H200); ``run_all.py`` calls the
functions below for every model.

Floors (METHOD.md): decode ms/token >= (weight bytes + KV bytes read) / measured copy bandwidth;
prefill ms >= max(matmul FLOPs / measured bf16 matmul rate, weight bytes / bandwidth).
"""

from __future__ import annotations

import argparse
import gc

import torch

from benchmarks.common import CONFIGS, DEVICE, Recorder, Stopwatch, hf_model, measure_floors, sync, wall_ms
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
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        if t > 0:
            rows.append({"kernel": ev.key[:90], "us_per_step": t / steps, "calls_per_step": ev.count / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows)
    return [{"kernel": "TOTAL", "us_per_step": total, "calls_per_step": sum(r["calls_per_step"] for r in rows)}] + rows[:top]


def decode_floor_ms(eng: Engine, batch: int, ctx: float, bw: float) -> float:
    """(weight bytes + batch * ctx * KV bytes per token) / bandwidth, in ms."""
    return (eng.weight_bytes() + batch * ctx * eng.kv_bytes_per_token()) / bw * 1e3


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
    block = s.n_params()["layers"] - s.n_layers * 2 * s.hidden_size
    flops = 2 * block * t + 2 * s.n_layers * s.n_heads * s.head_dim * t * t + 2 * s.vocab_size * s.hidden_size
    return {"flops": flops, "compute_floor_ms": flops / floors["matmul_flops"] * 1e3,
            "memory_floor_ms": eng.weight_bytes() / floors["copy_bw_Bps"] * 1e3}


def bench_model(name: str, floors: dict, rec: Recorder, backend: str, batches=(1, 8, 32), prompt_len=128,
                n_steps=64, hf_new=32, keep_bf16: bool = False, profile: bool = False):
    """HF eager vs engine bf16 vs engine W4A16 (RTN, g=128) on one random-init config."""
    bw = floors["copy_bw_Bps"]
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
