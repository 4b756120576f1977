"""Speculative decoding (synthetic acceptance) and decode batches with the fused GEMVs, and the verify
step's cost with them on and off: the short device run that re-measures what the few-row fused GEMM
(:func:`workbench.kernels.gemv.gemm_rows`) changes, in the order of importance (each section is saved
as it finishes): spec table, decode B = 1 / 8 / 32, verify costs fused vs unfused, GPU correctness.

Run: ``python3 -m benchmarks.bench_fused_spec`` (~3 min on the H200). Writes ``$OUT/fused_spec.json``.
Target Qwen2-7B and draft Qwen2-0.5B, random init (as in ``benchmarks/run_all.py``).
"""

from __future__ import annotations

from benchmarks.bench_decode import decode_floor_ms, engine_decode_ms_per_token
from benchmarks.bench_spec import bench_spec, verify_ms
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
    draft = Engine.from_config(hf_config(QWEN2_0_5B), max_batch=1, max_seq=640)
    rec.put("fused", {"target_one_row": target.gemv1 is not None, "target_rows": target.gemv_rows,
                      "draft_rows": draft.gemv_rows})
    guarded(rec, "spec", lambda: rec.put("spec", bench_spec(target, draft)))

    def decode():
        rows = []
        for on in (True, False):
            target.set_fused_gemv(on)
            for b in (1, 8, 32):
                ms = engine_decode_ms_per_token(target, b)
                fl = decode_floor_ms(target, b, 128 + 3 + 32, floors["copy_bw_Bps"])
                rows.append({"fused": on, "batch": b, "ms_per_token": ms, "floor_ms": fl, "x_floor": ms / fl})
            for t in (3, 5, 9):
                rows.append({"fused": on, "verify_T": t, "ms": verify_ms(target, t)})
            rec.put("decode_verify", rows)
        target.set_fused_gemv(True)
    guarded(rec, "decode_verify", decode)
    guarded(rec, "check", lambda: rec.put("check", check_engine()))


if __name__ == "__main__":
    main()
