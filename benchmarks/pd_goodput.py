"""Goodput at fixed SLOs for colocated, chunked-prefill and disaggregated serving of a 7B-class model
on an H200, at equal GPU count (2, 3, 4 GPUs), across request rates; and the rate at which
disaggregation starts to win.

Costs: the roofline (``CostModel.from_roofline``, datasheet peaks) and, with ``--profile``, a cost
model fitted to a measured GPU profile (``benchmarks/pd_gpu.py``'s profiles.csv, model qwen2-7b).
Rates are swept per GPU (total rate = per-GPU rate x GPUs). Goodput as ``vllm bench serve --goodput``;
capacity as DistServe: the highest rate with >= 90% of requests meeting every SLO.

    python benchmarks/pd_goodput.py [--profile /path/profiles.csv] [--n 20000]

Every simulated point (costs, GPU count, rate, deployment) is saved in the results store
(``pd_goodput_<model>_<hw>``) as it finishes; a re-run skips the points already there and recomputes
those whose workload, deployment, cost model or SLOs changed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pandas as pd

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.metrics import summarize
from workbench.pd.sim import (
    SLO,
    LengthDist,
    SimConfig,
    WorkloadConfig,
    first_win_rate,
    generate_workload,
    simulate,
    slo_capacity,
)
from workbench.results import collect_provenance, data_digest, sweep


def deployments(spec, hw) -> dict:
    """GPU count -> {label: SimConfig}."""
    def c(**kw):
        return SimConfig.for_hardware(spec, hw, **kw)

    return {
        2: {"colocated x2": c(policy="colocated", n_instances=2), "chunked x2": c(policy="chunked", n_instances=2),
            "chunked x2 (2048)": c(policy="chunked", n_instances=2, chunk_budget=2048),
            "disagg 1P+1D": c(policy="disaggregated", n_prefill=1, n_decode=1)},
        3: {"colocated x3": c(policy="colocated", n_instances=3), "chunked x3": c(policy="chunked", n_instances=3),
            "disagg 2P+1D": c(policy="disaggregated", n_prefill=2, n_decode=1),
            "disagg 1P+2D": c(policy="disaggregated", n_prefill=1, n_decode=2)},
        4: {"colocated x4": c(policy="colocated", n_instances=4), "chunked x4": c(policy="chunked", n_instances=4),
            "disagg 3P+1D": c(policy="disaggregated", n_prefill=3, n_decode=1),
            "disagg 2P+2D": c(policy="disaggregated", n_prefill=2, n_decode=2)},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2-7b")
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--profile", default=None, help="profiles.csv from benchmarks/pd_gpu.py")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--per-gpu-rates", type=float, nargs="+", default=list(np.arange(5, 81, 5)))
    ap.add_argument("--slos", nargs="+", default=["400,40", "200,15"], help="TTFT_ms,TPOT_ms pairs")
    args = ap.parse_args()
    spec, hw = ModelSpec.from_name(args.model), HardwareSpec.from_name(args.hw)
    costs = {"roofline": CostModel.from_roofline(spec, hw)}
    if args.profile:
        prof = pd.read_csv(args.profile)
        prof = prof[(prof["model"] == args.model) & (prof["hw_floor"] == "measured")]
        costs["measured H200 profile (Engine)"] = CostModel.fit(prof)
    wl = WorkloadConfig(n_requests=args.n, prompt=LengthDist("lognormal", 512, 16, 4096, 0.8),
                        output=LengthDist("lognormal", 128, 2, 2048, 0.8), seed=0)
    slos = [SLO(*(float(x) for x in s.split(","))) for s in args.slos]
    print(f"{spec.name} on {hw.name}; KV capacity {SimConfig.for_hardware(spec, hw).kv_capacity_tokens:,} "
          f"tokens/GPU; Poisson arrivals; prompt lognormal(median 512, sigma 0.8, 16..4096), output "
          f"lognormal(median 128, sigma 0.8, 2..2048); {args.n} requests per point")
    prov = collect_provenance(config={k: str(v) for k, v in vars(args).items()},
                              data={"profile": data_digest(prof) if args.profile else None})
    grid, workloads = deployments(spec, hw), {}  # workloads: total rate -> requests, generated once per rate

    def point(c: dict) -> pd.DataFrame:
        rate = c["per_gpu_rate"] * c["n_gpus"]
        if rate not in workloads:
            workloads[rate] = generate_workload(replace(wl, rate=rate))
        df = simulate(workloads[rate], grid[c["n_gpus"]][c["label"]], costs[c["costs"]])
        rows = []
        for slo in slos:
            s = summarize(df, slo)
            s["label"], s["rate"], s["per_gpu_rate"], s["n_gpus"] = c["label"], rate, c["per_gpu_rate"], c["n_gpus"]
            s["slo"] = f"TTFT<={slo.ttft_ms:g} ms, TPOT<={slo.tpot_ms:g} ms"
            rows.append(s)
        return pd.concat(rows, ignore_index=True)

    for cname, cost in costs.items():
        print(f"\n=== costs: {cname}: {cost}")
        for n_gpu, deps in grid.items():
            points = [{"costs": cname, "cost": cost.as_dict(), "n_gpus": n_gpu, "per_gpu_rate": float(pg),
                       "label": label, "deployment": cfg, "workload": wl, "slos": slos}
                      for pg in args.per_gpu_rates for label, cfg in deps.items()]
            res_all = sweep(f"pd_goodput_{args.model}_{args.hw}", points, point, provenance=prov)
            for slo_name, res in res_all.groupby("slo", sort=False):
                print(f"\n--- {n_gpu} GPUs, SLO {slo_name}: goodput req/s (rows: per-GPU rate)")
                print(res.pivot(index="per_gpu_rate", columns="label", values="goodput_rps").round(1).to_string())
                cap = slo_capacity(res)
                print("capacity (>= 90% attainment): " + ", ".join(
                    f"{r.label} {r.max_rate_at_slo:g} req/s ({r.per_gpu:g}/GPU)" for r in cap.itertuples()))
                for d in [lab for lab in deps if lab.startswith("disagg")]:
                    for base in [lab for lab in deps if not lab.startswith("disagg")]:
                        print(f"  {d} beats {base} from {first_win_rate(res, base, d)} req/s")


if __name__ == "__main__":
    main()
