"""FP8 (E4M3 weights per channel, activations per token, ``torch._scaled_mm``) against bf16 and W4A16 on the Qwen2-7B
shape with random weights: per layer (qkv, o, gate_up, down) and end to end (decode at batch 1, 16, 64; prefill).

Per layer: one call timed under CUDA-graph replay (:func:`workbench.kernels.timing.cuda_graph_ms`), FP8 both with
its per-token activation quantization (what a decode step pays) and the matmul alone; W4A16 is the engine's INT4
matmul (RTN g128, its default backend). End to end: the engine (:class:`workbench.engine.Engine`) on random
weights in bf16, with ``w4a16=True``, and in bf16 converted by :func:`workbench.engine.fp8.to_fp8` (the fused-GEMV
path off in all three, as ``to_fp8`` needs, plus bf16 with the engine's defaults); decode ms per step (median of
``--steps`` CUDA-graph steps after a 128-token prompt), prefill ms of ``--prefill`` tokens at batch 1.

Run (repository root, CUDA compute capability >= 8.9): ``python -m benchmarks.fp8_speed`` -> ``$OUT/fp8_speed.json``
(date UTC, device, git commit, command, torch version, the timing floor: weight bytes / measured copy bandwidth per
layer, and the noise: the spread of repeated measurements). On the CPU it refuses (exit 2) unless ``--smoke``, which
runs a tiny shape with the FP8 matmul emulated in float32 to test the script (its timings mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPE = "qwen2-7b"
TINY = {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512}


def _provenance(args, argv) -> dict:
    from benchmarks.common import environment

    try:
        commit = subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {**environment(), "git_commit": commit, "command": "python -m benchmarks.fp8_speed " + " ".join(argv),
            "shape": "tiny (smoke)" if args.smoke else SHAPE, "weights": "random (speed only)"}


def _timer(smoke: bool):
    """ms of one ``fn()``: CUDA-graph replay on the GPU; on the CPU smoke run the wall clock of 3 calls' median."""
    if not smoke:
        from workbench.kernels.timing import cuda_graph_ms

        return lambda fn: cuda_graph_ms(fn, inner=20, reps=10)

    def wall(fn):
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    return wall


def per_layer(cfg: dict, rows, dev, dtype, smoke: bool) -> list:
    """One row per (layer, M): ``bf16_ms``, ``fp8_ms`` (quantize + matmul), ``fp8_mm_ms`` (matmul only),
    ``w4a16_ms``, weight bytes of each and the copy-bandwidth floor of the bf16 weight."""
    from workbench.engine.engine import default_w4a16_backend
    from workbench.engine.fp8 import Fp8Linear, quantize_per_token
    from workbench.engine.weights import make_linear

    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    d = h // cfg["num_attention_heads"]
    shapes = {"qkv": ((cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * d, h), "o": (h, h),
              "gate_up": (2 * inter, h), "down": (h, inter)}
    t = _timer(smoke)
    out = []
    g = torch.Generator(device=dev).manual_seed(0)
    for name, (n, k) in shapes.items():
        w = (torch.randn(n, k, generator=g, device=dev) * 0.02).to(dtype)
        fp8 = Fp8Linear(w, dtype, emulate=smoke)
        w4 = make_linear(w, "rtn", dtype, default_w4a16_backend(torch.device(dev)), 128)
        for m in rows:
            x = torch.randn(m, k, generator=g, device=dev).to(dtype)
            q, s = quantize_per_token(x)
            row = {"layer": name, "N": n, "K": k, "M": m, "bf16_ms": t(lambda x=x, w=w: F.linear(x, w)),
                   "fp8_ms": t(lambda x=x, f=fp8: f(x)), "w4a16_ms": t(lambda x=x, f=w4: f(x)),
                   "bf16_bytes": w.numel() * w.element_size(), "fp8_bytes": fp8.nbytes(), "w4a16_bytes": w4.nbytes()}
            if not smoke:
                row["fp8_mm_ms"] = t(lambda q=q, s=s, f=fp8: torch._scaled_mm(q, f.wt, scale_a=s, scale_b=f.s_w_row,
                                                                               out_dtype=dtype))
            row["speedup_fp8_vs_bf16"] = row["bf16_ms"] / row["fp8_ms"]
            row["speedup_w4a16_vs_bf16"] = row["bf16_ms"] / row["w4a16_ms"]
            out.append(row)
    return out


def _decode_ms(eng, batch: int, steps: int) -> list:
    slots = list(range(batch))
    eng.reset()
    tok = eng.extend_batch(slots, torch.randint(100, 400, (batch, 128), device=eng.device), logits="last").argmax(-1, keepdim=True)
    for _ in range(3):  # the first call captures the graph
        tok = eng.extend_batch(slots, tok)[:, -1].argmax(-1, keepdim=True)
    ts = []
    for _ in range(steps):
        if eng.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tok = eng.extend_batch(slots, tok)[:, -1].argmax(-1, keepdim=True)
        if eng.device.type == "cuda":
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def _prefill_ms(eng, n: int) -> list:
    ids = torch.randint(100, 400, (1, n), device=eng.device)
    ts = []
    for i in range(6):
        eng.reset()
        if eng.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        eng.extend_batch([0], ids, logits="last")
        if eng.device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first is a warm-up
            ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def end_to_end(cfg: dict, batches, prefill: int, steps: int, dev, smoke: bool) -> list:
    """One row per (variant, batch): decode ms per step (median, min, max of ``steps``) and prefill ms."""
    from workbench.engine import Engine
    from workbench.engine.fp8 import to_fp8

    out = []
    for variant in ("bf16 (engine defaults)", "bf16", "w4a16", "fp8"):
        eng = Engine.from_config(cfg, max_batch=max(batches), max_seq=max(prefill, 128 + steps + 8) + 8, device=dev,
                                 w4a16=variant == "w4a16")
        if variant != "bf16 (engine defaults)":
            eng.set_fused_gemv(False)
        if variant == "fp8":
            to_fp8(eng.w, emulate=smoke)
        labels = sorted(set(eng.w.labels.values())) or ["dense"]
        pf = _prefill_ms(eng, prefill)
        for b in batches:
            ts = _decode_ms(eng, b, steps)
            out.append({"variant": variant, "batch": b, "decode_ms": statistics.median(ts), "decode_ms_min": min(ts),
                        "decode_ms_max": max(ts), "prefill_tokens": prefill, "prefill_ms": statistics.median(pf),
                        "weight_bytes": eng.weight_bytes(), "runtime": labels})
        del eng
        if dev == "cuda":
            torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU: a tiny shape, FP8 emulated (tests the script only)")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    from workbench.engine.fp8 import fp8_supported

    ok, why = fp8_supported("cuda" if torch.cuda.is_available() else "cpu")
    if not ok and not args.smoke:
        print(f"fp8_speed: {why}. Run it on an H100/H200 (or pass --smoke for a CPU test of the script).", file=sys.stderr)
        return 2
    from benchmarks.common import CONFIGS

    dev = "cpu" if args.smoke else "cuda"
    cfg = TINY if args.smoke else CONFIGS[SHAPE]
    dtype = torch.float32 if args.smoke else torch.bfloat16
    batches = [int(b) for b in args.batches.split(",")]
    res = {"provenance": _provenance(args, argv)}
    t0 = time.perf_counter()
    if not args.smoke:
        from benchmarks.common import measure_floors

        res["floors"] = measure_floors(copy_gib=2.0)
    res["per_layer"] = per_layer(cfg, batches + [args.prefill], dev, dtype, args.smoke)
    res["end_to_end"] = end_to_end(cfg, batches, args.prefill, args.steps, dev, args.smoke)
    res["noise"] = ("decode: min / median / max of the timed steps per row; per layer: median of 10 graph replays "
                    "of 20 calls each")
    res["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fp8_speed.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: res[k] for k in ("per_layer", "end_to_end")}, default=str)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
