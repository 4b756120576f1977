"""Every H200 benchmark in one call: floors, GPU correctness, INT4 kernel choice, decode and prefill
(Qwen2-7B, Llama-3-8B), synthetic speculative decoding; prints a short table, writes
``$OUT/results.json`` (section by section, so a timeout keeps what finished).

    python -m benchmarks.run_all [--skip spec,llama3-8b] [--backend auto|gemlite|tinygemm]
    python -m benchmarks.run_all --kernels [--skip gemv,rows,spec,llama3-8b]   # the few-row kernels run

``--kernels``: floors (copy, read, matmul), ``check_rows`` (GPU correctness of the few-row kernels), the side by
side per-shape matmul benchmark (``bench_gemv``, which tunes the kernels), then per model the engine's decode
batches 1..64 and verify steps (``bench_decode.bench_rows_model``) and synthetic speculative decoding.

Needs a CUDA GPU, and gemlite for its backend (carried as a wheel, see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

from benchmarks.bench_decode import bench_model
from benchmarks.bench_spec import bench_spec
from benchmarks.check_gpu import bench_int4, check_engine, choose_backend
from benchmarks.common import CONFIGS, QWEN2_0_5B, Recorder, environment, hf_config, measure_floors
from workbench.engine import Engine


def _load_gemlite_config() -> None:
    """gemlite ships tuned configs per GPU; the H200 has the H100's SMs, so use h100.json."""
    try:
        import os

        import gemlite

        path = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
        gemlite.load_config(path)
    except ImportError:
        pass


def guarded(rec: Recorder, key: str, fn):
    """Run one section; record its traceback instead of losing the sections after it."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a failed section is reported in results.json and the log
        import traceback

        rec.put(f"error_{key}", traceback.format_exc()[-3000:])
        return None


def table(rec: Recorder) -> str:
    lines = []
    for key, rows in rec.data.items():
        if key.startswith("decode_"):
            for r in rows:
                lines.append(f"{key[7:]:10s} {r['impl']:28s} B={r['batch']:<3d} {r['ms_per_token']:8.2f} ms/tok"
                             + (f"  floor {r['floor_ms']:.2f}  x{r['x_floor']:.2f}" if "floor_ms" in r else ""))
        if key.startswith("prefill_"):
            for r in rows:
                lines.append(f"{key[8:]:10s} prefill T={r['tokens']:<5d} {r['ms']:8.2f} ms  compute floor "
                             f"{r['compute_floor_ms']:.2f}  x{r['ms'] / max(r['compute_floor_ms'], r['memory_floor_ms']):.2f}")
        if key == "spec":
            for r in rows:
                lines.append(f"spec ({r.get('acceptance', 'synthetic')}) a={r['alpha']} k={r['k']} c={r['c']:.3f} "
                             f"realized {r['realized_speedup']:.2f} "
                             f"theory {r['theoretical_speedup']:.2f} ratio {r['ratio']:.3f} tau {r['tau']:.2f}")
    return "\n".join(lines)


def _tiny_kernels() -> None:
    """Shrink the kernels run to a smoke test of the scripts (small shapes, few configurations, tiny models)."""
    import benchmarks.bench_decode as D
    import benchmarks.bench_gemv as G
    import benchmarks.check_rows as R
    from workbench.kernels import rows

    G.SHAPES.clear()
    G.SHAPES["tiny"] = {"a": (1024, 1024), "b": (512, 2048)}
    R.SHAPES = G.SHAPES
    G.MS = (1, 5, 33)
    rows.INT4_CONFIGS[:] = rows.INT4_CONFIGS[:2]
    rows.DENSE_CONFIGS[:] = rows.DENSE_CONFIGS[:2]
    for name in D.ROWS_VARIANTS:
        D.ROWS_VARIANTS[name] = [("engine_bf16", "bf16", None, False, (1, 5), (3,)),
                                 ("engine_w4a16", "w4a16", None, False, (1, 5), (3,)),
                                 ("engine_w4a16_fusedpro", "w4a16", (1, 64), True, (1, 5), ())]


def kernels_run(rec: Recorder, skip: set, models=("qwen2-7b", "llama3-8b"), tiny: bool = False) -> None:
    """The few-row kernels: floors, correctness, per-shape side by side (tunes the kernels), engine steps, spec
    (see the module docstring); each section guarded, results saved as they come."""
    from benchmarks import bench_gemv
    from benchmarks.bench_decode import bench_rows_model, rows_engine_jobs, rows_model_jobs
    from benchmarks.check_rows import check
    from benchmarks.check_rows import jobs as check_jobs
    from benchmarks.common import precompile

    if tiny:
        _tiny_kernels()
    floors = guarded(rec, "floors", lambda: measure_floors(read=not tiny)) or measure_floors(read=False)
    rec.put("floors", floors)
    models = [m for m in models if m not in skip]
    gemv_models = list(bench_gemv.SHAPES) if tiny else models
    if "check" not in skip:
        guarded(rec, "check_rows", lambda: (rec.put("precompile_check", precompile(check_jobs(bench_gemv.MS))),
                                            check(rec)))
    if "gemv" not in skip:
        def gemv_section():
            shapes = {m: bench_gemv.SHAPES[m] for m in gemv_models}
            rec.put("precompile_gemv", precompile(bench_gemv.precompile_jobs(shapes, bench_gemv.MS)))
            out = bench_gemv.bench(floors, gemv_models, bench_gemv.MS, gemlite_s=20.0, rec=rec)
            rec.put("kernels_block_us", bench_gemv.summary(out))
        guarded(rec, "gemv", gemv_section)
    if "rows" not in skip:
        draft = rows_engine_jobs(QWEN2_0_5B, (1, 2), False, False, tuned_one_row=False)  # the spec draft's
        guarded(rec, "precompile_rows", lambda: rec.put("precompile_rows", precompile(
            [j for m in models for j in rows_model_jobs(m)] + draft)))
    for i, m in enumerate(models):
        if "rows" not in skip:
            guarded(rec, f"rows_{m}", lambda m=m: bench_rows_model(m, floors, rec))
        if i == 0 and "spec" not in skip and "qwen2-7b" in models:  # after the first model: spec, then the rest
            guarded(rec, "spec", lambda: rec.put("spec", _spec()))


def _spec() -> list:
    """Synthetic-acceptance speculative decoding, Qwen2-7B target (its one-row GEMVs tuned by the engine run
    before) and Qwen2-0.5B draft (default GEMV configurations, to keep compile time out of the run)."""
    from workbench.engine import dispatch

    target = Engine.from_config(hf_config(CONFIGS["qwen2-7b"]), max_batch=1, max_seq=640)
    dispatch.TUNE = False
    try:
        draft = Engine.from_config(hf_config(QWEN2_0_5B), max_batch=1, max_seq=640)
    finally:
        dispatch.TUNE = True
    return bench_spec(target, draft, ks=(4,), n_tokens=160)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--skip", default="", help="comma list of: check,int4,qwen2-7b,llama3-8b,spec (with --kernels: "
                   "check,gemv,rows,spec,qwen2-7b,llama3-8b)")
    p.add_argument("--kernels", action="store_true", help="the few-row kernels run instead of the full one")
    p.add_argument("--backend", default="auto")
    p.add_argument("--tiny", action="store_true", help="tiny configs: a CPU smoke run of the scripts")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    draft_cfg = QWEN2_0_5B
    if a.tiny:
        import benchmarks.common as C

        small = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "vocab_size": 2048}
        for name in C.CONFIGS:
            C.CONFIGS[name] = {**C.CONFIGS[name], **small}
        draft_cfg = {**QWEN2_0_5B, **small, "num_hidden_layers": 1}
        skip.add("int4")
    t0 = time.time()
    rec = Recorder()
    rec.put("env", environment())
    _load_gemlite_config()
    if a.kernels:
        if a.tiny:
            import benchmarks.common as C

            for name in C.CONFIGS:
                C.CONFIGS[name] = {**C.CONFIGS[name], "hidden_size": 256, "intermediate_size": 512,
                                   "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                                   "vocab_size": 2048}
        kernels_run(rec, skip, tiny=a.tiny)
        rec.put("wall_s", time.time() - t0)
        return
    floors = measure_floors()
    rec.put("floors", floors)
    if "check" not in skip:
        guarded(rec, "check", lambda: rec.put("check", check_engine()))
    backend = "gemlite" if a.backend == "auto" else a.backend
    rows = None if "int4" in skip else guarded(rec, "int4", bench_int4)
    if rows:
        rec.put("int4_kernels", rows)
        if a.backend == "auto":
            backend, speedups = choose_backend(rows)
            rec.put("int4_choice", {"backend": backend, "block_speedup_vs_bf16_m1": speedups})
    target = None
    if "qwen2-7b" not in skip:
        eng = guarded(rec, "qwen2-7b", lambda: bench_model("qwen2-7b", floors, rec, backend,
                                                            keep_bf16="spec" not in skip, profile=True))
        if eng is not None:
            target = Engine(eng.spec, eng.w, eng.config, 1, 640, eng.dtype, eng.device)
            del eng
    if target is not None:
        gc.collect()
        torch.cuda.empty_cache()
        # the draft speaks the target's vocabulary (Qwen2-7B pads it to 152064, the 0.5B to 151936)
        draft = Engine.from_config({**draft_cfg, "vocab_size": target.vocab_size}, max_batch=1, max_seq=640)
        guarded(rec, "spec", lambda: rec.put("spec", bench_spec(target, draft)))
        del target, draft
        gc.collect()
        torch.cuda.empty_cache()
    if "llama3-8b" not in skip:
        guarded(rec, "llama3-8b", lambda: bench_model("llama3-8b", floors, rec, backend))
    rec.put("wall_s", time.time() - t0)
    print(table(rec))


if __name__ == "__main__":
    main()
