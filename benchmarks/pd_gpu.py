"""Profile, roofline check and simulator-vs-real loop on a GPU (run on the H200 device machine).

For each model shape (SmolLM2-135M, the default model; Qwen2-7B, the 7B-class preset), with random
bf16 weights (step time does not depend on the values) in the fast Engine (static KV cache, CUDA
graphs for decode): measure the GPU now (``HardwareSpec.measure``), profile prefill and decode,
fit a CostModel, then serve Poisson workloads with the real continuous-batching loop (wall clock)
and compare to the simulator. Writes hw.json, profiles.csv, compare.csv, real.csv under --out.

    python benchmarks/pd_gpu.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import LlamaConfig, Qwen2Config

from workbench.engine import Engine
from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.loop import compare_to_sim, run_serving, sim_config_for
from workbench.pd.profile import ProfileConfig, run_profile, with_floors
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload

SHAPES = {
    "smollm2-135m": (LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                 num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                                 tie_word_embeddings=True, rope_theta=100000.0, max_position_embeddings=8192),
                     "smollm2-135m"),
    "qwen2-7b": (Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False,
                             rope_theta=1e6, max_position_embeddings=32768), "qwen2-7b"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="+", default=list(SHAPES))
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-seq", type=int, default=1152)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny grid and workload (a dry run on CPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    big = not args.quick
    hw = HardwareSpec.measure(args.device, copy_mb=2048 if big else 16, matmul_n=8192 if big else 256,
                              repeats=10 if big else 2)
    print(hw, flush=True)
    (args.out / "hw.json").write_text(json.dumps({"name": hw.name, "hbm_gbs": hw.hbm_gbs,
                                                  "matmul_flops": hw.matmul_flops, "flops_dtype": hw.flops_dtype,
                                                  "mem_gb": hw.mem_gb}, indent=2))
    h200 = HardwareSpec.from_name("h200")
    profs, cmps, reals = [], [], []
    for name in args.models:
        cfg, preset = SHAPES[name]
        t0 = time.time()
        eng = Engine.from_config(cfg, max_batch=args.max_batch, max_seq=args.max_seq, dtype=torch.bfloat16,
                                 device=args.device)
        spec = ModelSpec.from_name(preset)
        spec = ModelSpec(**{**spec.__dict__, "bytes_per_param": 2.0, "bytes_per_kv": 2.0})
        pcfg = ProfileConfig(prompt_lens=(64, 128, 256, 512, 1024), prefill_batches=(1, 2, 4),
                             decode_batches=(1, 2, 4, 8, 16, 32), context_lens=(128, 512, 1024), repeats=10,
                             warmup=2) if big else ProfileConfig((16, 32, 64), (1, 2), (1, 2), (16, 64), 2, 1)
        prof = run_profile(eng, pcfg)
        cost = CostModel.fit(prof)
        for label, h in (("measured", hw), ("datasheet", h200)):
            p = with_floors(prof, spec, h)
            p["model"], p["hw_floor"] = name, label
            profs.append(cost.residuals(p))
        print(f"{name}: profile in {time.time() - t0:.0f} s; {cost}", flush=True)
        print(cost.residuals(with_floors(prof, spec, hw))[["phase", "batch", "seq_len", "ms", "pred_ms", "rel_err",
                                                           "floor_ms"]].round(3).to_string(), flush=True)
        step = float(cost.decode_ms(8, 8 * 512))
        pre = float(cost.prefill_ms(512, 512**2))
        for load in (0.3, 0.7):  # prefill + decode work per second, as a fraction of one GPU
            per_req = pre + 48 * step / 8  # ms: prefill + 48 decode tokens at batch ~8
            rate = load * 1e3 / per_req
            wl = generate_workload(WorkloadConfig(
                n_requests=200 if big else 4, rate=rate, prompt=LengthDist("fixed", 512 if big else 32),
                output=LengthDist("uniform", low=16 if big else 2, high=80 if big else 6), seed=1))
            t0 = time.time()
            real = run_serving(eng, wl, max_prefill_batch=4, seed=1)
            cmp = compare_to_sim(real, wl, cost, sim_config_for(eng, max_prefill_batch=4))
            cmp["model"], cmp["rate"], cmp["load"] = name, rate, load
            real["model"], real["rate"] = name, rate
            cmps.append(cmp)
            reals.append(real.drop(columns=["itl_ms"]))
            print(f"{name} rate {rate:.1f} req/s: {len(real)} requests in {time.time() - t0:.0f} s", flush=True)
            print(cmp.round(2).to_string(), flush=True)
        del eng
        torch.cuda.empty_cache()
    pd.concat(profs).to_csv(args.out / "profiles.csv", index=False)
    pd.concat(cmps).to_csv(args.out / "compare.csv", index=False)
    pd.concat(reals).to_csv(args.out / "real.csv", index=False)


if __name__ == "__main__":
    main()
