"""Simulator throughput: 100,000 requests through each policy on one core (target: < 2 s each).

Workload: the ``chat`` preset (Poisson arrivals, lognormal prompts median 512 and outputs median 128);
Llama-3-8B on H200 roofline costs; two GPUs per deployment, one of them with a KV cache small enough
to queue and preempt. Reports CPU time (``time.process_time``) of ``simulate`` alone and with
``summarize``, the best of ``--repeat`` runs (the CPU may be shared).

    python benchmarks/bench_sim.py [--n 100000] [--rates 10 40 80] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pandas as pd

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.metrics import SLO, summarize
from workbench.pd.sim import SimConfig, WorkloadConfig, generate_workload, simulate

TARGET_S = 2.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 40.0, 80.0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the fastest is reported")
    args = ap.parse_args()
    model, hw = ModelSpec.from_name("llama-3-8b"), HardwareSpec.from_name("h200")
    cost = CostModel.from_roofline(model, hw)
    base = SimConfig.for_hardware(model, hw)
    deployments = [replace(base, policy="colocated", n_instances=2),
                   replace(base, policy="chunked", n_instances=2, chunk_budget=512),
                   replace(base, policy="disaggregated", n_prefill=1, n_decode=1),
                   replace(base, policy="colocated", n_instances=2, kv_capacity_tokens=20_000)]
    rows = []
    for rate in args.rates:
        wl = generate_workload(WorkloadConfig.from_name("chat", n_requests=args.n, rate=rate, seed=0))
        for cfg in deployments:
            t_sim, t_all = [], []
            for _ in range(args.repeat):
                t0 = time.process_time()
                df = simulate(wl, cfg, cost)
                t_sim.append(time.process_time() - t0)
                s = summarize(df, SLO.from_name("chat")).iloc[0]
                t_all.append(time.process_time() - t0)
            rows.append({"deployment": f"{cfg.label}, KV {cfg.kv_capacity_tokens:,} tokens", "rate": rate,
                         "n_requests": args.n, "sim_s": round(min(t_sim), 2), "sim+summarize_s": round(min(t_all), 2),
                         "requests_per_s": round(args.n / min(t_sim)), "goodput_rps": round(s.goodput_rps, 2),
                         "preemptions": int(s.preemptions), "pass": min(t_sim) < TARGET_S})
    out = pd.DataFrame(rows)
    print(out.to_string(index=False))
    print(f"worst: {out['sim_s'].max():.2f} s for {args.n} requests (target < {TARGET_S} s): "
          f"{'PASS' if out['pass'].all() else 'FAIL'}")


if __name__ == "__main__":
    main()
