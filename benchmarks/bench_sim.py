"""Simulator throughput: 100,000 requests through each policy on one core (target: <= 10 s each).

Workload: Poisson arrivals, lognormal prompts (median 512, sigma 0.8, 16-4096 tokens) and outputs
(median 128, sigma 0.8, 2-2048 tokens); Llama-3-8B on H200 roofline costs; two GPUs per deployment.
Reports CPU time (``time.process_time``) of ``simulate`` alone and with ``summarize``; one deployment
has a KV cache small enough to queue and preempt.

    python benchmarks/bench_sim.py [--n 100000] [--rate 40]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.metrics import summarize
from workbench.pd.sim import SLO, LengthDist, SimConfig, WorkloadConfig, generate_workload, simulate

TARGET_S = 10.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 40.0, 80.0])
    args = ap.parse_args()
    model, hw = ModelSpec.from_name("llama-3-8b"), HardwareSpec.from_name("h200")
    cost = CostModel.from_roofline(model, hw)
    deployments = {"colocated x2": {"policy": "colocated", "n_instances": 2},
                   "chunked x2": {"policy": "chunked", "n_instances": 2, "chunk_budget": 512},
                   "disaggregated 1P+1D": {"policy": "disaggregated", "n_prefill": 1, "n_decode": 1},
                   "colocated x2, KV 20k tokens": {"policy": "colocated", "n_instances": 2,
                                                   "kv_capacity_tokens": 20_000}}
    rows = []
    for rate in args.rates:
        wl = generate_workload(WorkloadConfig(
            n_requests=args.n, rate=rate, prompt=LengthDist("lognormal", 512, low=16, high=4096, sigma=0.8),
            output=LengthDist("lognormal", 128, low=2, high=2048, sigma=0.8), seed=0))
        for label, kw in deployments.items():
            cfg = SimConfig.for_hardware(model, hw, **kw)
            t0 = time.process_time()
            df = simulate(wl, cfg, cost)
            t_sim = time.process_time() - t0
            s = summarize(df, SLO(400, 40)).iloc[0]
            t_all = time.process_time() - t0
            rows.append({"deployment": label, "rate": rate, "n_requests": args.n, "sim_s": round(t_sim, 2),
                         "sim+summarize_s": round(t_all, 2), "requests_per_s": round(args.n / t_sim),
                         "goodput_rps": round(s.goodput_rps, 2), "preemptions": int(s.preemptions),
                         "pass": t_sim <= TARGET_S})
    out = pd.DataFrame(rows)
    print(out.to_string(index=False))
    print(f"worst: {out['sim_s'].max():.2f} s for {args.n} requests (target <= {TARGET_S} s): "
          f"{'PASS' if out['pass'].all() else 'FAIL'}")


if __name__ == "__main__":
    main()
