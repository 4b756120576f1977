"""Speculative decoding (``acceptance="synthetic"``, the package's device loop), decode batches and the
verify step's cost with the fused GEMVs on and off (``Engine.set_fused_gemv``), then the GPU
correctness checks (``check_engine``; ``check_device_loop``: greedy equality and host synchronizations
per speculative step): a short device run, sections in order of importance, each saved as it finishes.

``results/fused_spec_rows_attempt.json`` is this script's run at commit 8d65384, which also fused
steps of 2..32 rows (a tensor-core Triton kernel, ``gemm_rows``): that kernel was about 2x slower than
cuBLAS (verify 7.8-8.0 vs 4.65-4.74 ms, batch 8 8.46 vs 4.55 ms), so it was reverted; the "fused"
rows of that file for batch > 1 and verify therefore measure the reverted kernel.

Run: ``python3 -m benchmarks.bench_fused_spec`` (~3 min on the H200). Writes ``$OUT/fused_spec.json``.
Target Qwen2-7B and draft Qwen2-0.5B, random init (as in ``benchmarks/run_all.py``).
"""

from __future__ import annotations

from benchmarks.bench_decode import decode_floor_ms, engine_decode_ms_per_token, verify_ms
from benchmarks.bench_spec import bench_spec, check_device_loop
from benchmarks.check_gpu import check_engine
from benchmarks.common import CONFIGS, QWEN2_0_5B, Recorder, environment, hf_config, measure_floors
from benchmarks.run_all import guarded
from workbench.engine import Engine


def main():
    rec = Recorder(name="fused_spec.json")
    rec.put("env", environment())
    floors = measure_floors()
    rec.put("floors", floors)
    target = Engine.from_config(hf_config(CONFIGS["qwen2-7b"]), max_batch=32, max_seq=640)
    draft = Engine.from_config(hf_config({**QWEN2_0_5B, "vocab_size": target.vocab_size}), max_batch=1, max_seq=640)
    rec.put("fused", {"target": target.gemv1 is not None, "draft": draft.gemv1 is not None})
    guarded(rec, "spec", lambda: rec.put("spec", bench_spec(target, draft)))

    def decode():
        rows = []
        for on in (True, False):
            target.set_fused_gemv(on)
            for b in (1, 8, 32):
                ms = engine_decode_ms_per_token(target, b)
                fl = decode_floor_ms(target, b, 128 + 3 + 32, floors["bw_Bps"])
                rows.append({"fused": on, "batch": b, "ms_per_token": ms, "floor_ms": fl, "x_floor": ms / fl})
            for t in (3, 5, 9):
                rows.append({"fused": on, "verify_T": t, "ms": verify_ms(target, t)})
            rec.put("decode_verify", rows)
        target.set_fused_gemv(True)
    guarded(rec, "decode_verify", decode)
    guarded(rec, "check", lambda: rec.put("check", check_engine()))
    guarded(rec, "spec_check", lambda: rec.put("spec_check", check_device_loop()))


if __name__ == "__main__":
    main()
