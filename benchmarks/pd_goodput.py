"""Goodput at fixed SLOs for colocated, chunked-prefill and disaggregated serving of a 7B-class model
on an H200, at equal GPU count (2, 3, 4 GPUs), across request rates; capacity per deployment and
the verdict of every disaggregated deployment against every other one, with its 95% CI.

A simulator run (this runs on any CPU): step costs from the roofline (``CostModel.from_roofline``,
datasheet peaks) and, with ``--profile``, from a cost model fitted to a measured H200 profile
(``benchmarks/pd_gpu.py``'s profiles.csv). Workload: the ``chat`` preset (``WorkloadConfig.from_name``);
rates swept per GPU (total = per-GPU rate x GPUs), the same seed at every rate. Goodput as
``vllm bench serve --goodput``; a disaggregated request's TTFT is the decode instance's first token
(after the KV transfer and the decode admission); capacity as DistServe: the highest rate with >= 90%
of requests meeting every SLO. Writes every summary row and verdict to ``--json``. Every simulated
point is saved in the results store (``pd_goodput_<model>_<hw>``) as it finishes; a re-run skips the
points already there and recomputes those whose costs, workload, deployment or SLOs changed.

    python benchmarks/pd_goodput.py --profile benchmarks/results/pd_gpu/profiles.csv --n 20000 \
        --json benchmarks/results/pd_goodput_qwen2-7b_h200_sim.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from workbench import results
from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.metrics import SLO, summarize
from workbench.pd.sim import SimConfig, WorkloadConfig, generate_workload, simulate, slo_capacity
from workbench.pd.verdict import compare_deployments, good_batch_means

SPLITS = {2: [(1, 1)], 3: [(2, 1), (1, 2)], 4: [(3, 1), (2, 2)]}  # (n_prefill, n_decode) per GPU count


def deployments(spec: ModelSpec, hw: HardwareSpec) -> dict[int, list[SimConfig]]:
    """GPU count -> deployments: colocated, chunked (budget 512; 2048 too at 2 GPUs), disaggregated splits."""
    base = SimConfig.for_hardware(spec, hw)
    out = {}
    for n, splits in SPLITS.items():
        budgets = (512, 2048) if n == 2 else (512,)
        out[n] = ([replace(base, policy="colocated", n_instances=n)]
                  + [replace(base, policy="chunked", n_instances=n, chunk_budget=b) for b in budgets]
                  + [replace(base, policy="disaggregated", n_prefill=p, n_decode=d) for p, d in splits])
    return out


def run_points(wl: WorkloadConfig, deps: list[SimConfig], cost, cname: str, per_gpu_rates, slos, n_gpu: int,
               provenance: dict, store: str) -> pd.DataFrame:
    """Simulate every (per-GPU rate, deployment) point through ``workbench.results.sweep``: each point is
    stored as it finishes (keyed by costs, GPU count, rate, deployment, workload and SLOs), so a re-run
    skips the points already there and recomputes those whose inputs changed."""
    by_label = {c.label: c for c in deps}
    workloads: dict = {}  # total rate -> requests, generated once per rate (same seed at every rate)
    points = [{"costs": cname, "cost": cost.as_dict(), "n_gpus": n_gpu, "per_gpu_rate": float(pg),
               "deployment": d.label, "sim": repr(d), "workload": repr(wl), "slos": [s.label for s in slos]}
              for pg in per_gpu_rates for d in deps]

    def point(c: dict) -> pd.DataFrame:
        rate = c["per_gpu_rate"] * n_gpu
        if rate not in workloads:
            workloads[rate] = generate_workload(replace(wl, rate=rate))
        cfg = by_label[c["deployment"]]
        df = simulate(workloads[rate], cfg, cost)
        rows = []
        for slo in slos:
            s = summarize(df, slo).iloc[0].to_dict()
            rows.append({"label": cfg.label, "policy": cfg.policy, "n_gpus": n_gpu, "rate": rate,
                         "per_gpu_rate": c["per_gpu_rate"], "slo": slo.label, **s,
                         "good_batches": list(good_batch_means(df, slo))})
        return pd.DataFrame(rows)

    out = results.sweep(store, points, point, provenance=provenance, progress=False)
    return out.drop(columns=[c for c in results.STORE_COLUMNS if c in out])


def report(res: pd.DataFrame, deps: list[SimConfig], n_gpu: int) -> list[dict]:
    """Print the goodput table, capacities and verdicts of one (costs, GPU count, SLO); return the verdicts."""
    print(f"\n--- {n_gpu} GPUs, SLO {res['slo'].iloc[0]}: goodput req/s (SLO attainment %), rows: per-GPU rate")
    good = res.pivot(index="per_gpu_rate", columns="label", values="goodput_rps")
    att = res.pivot(index="per_gpu_rate", columns="label", values="slo_attainment")
    print(good.round(1).astype(str).add(" (").add((100 * att).round(1).astype(str)).add(")").to_string())
    cap = slo_capacity(res)
    print("capacity (>= 90% attainment): " + ", ".join(
        f"{r.label} {r.max_rate_at_slo:g} req/s ({r.per_gpu:g}/GPU)" for r in cap.itertuples()))
    verdicts = []
    for d in [c.label for c in deps if c.policy == "disaggregated"]:
        for b in [c.label for c in deps if c.policy != "disaggregated"]:
            v = compare_deployments(res, b, d)
            print("  " + v.text)
            verdicts.append({"n_gpus": n_gpu, "slo": res["slo"].iloc[0], "baseline": b, "challenger": d,
                             "winner": v.winner, "rate": v.rate, "diff": v.diff, "ci": list(v.ci), "text": v.text})
    return verdicts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2-7b")
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--profile", default=None, help="profiles.csv from benchmarks/pd_gpu.py")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--per-gpu-rates", type=float, nargs="+", default=list(np.arange(5, 81, 5)))
    ap.add_argument("--slos", nargs="+", default=["chat", "tight"], help="SLO presets (SLO.from_name)")
    ap.add_argument("--workload", default="chat", help="workload preset (WorkloadConfig.from_name)")
    ap.add_argument("--json", type=Path, default=None, help="write every row and verdict here")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    spec, hw = ModelSpec.from_name(args.model), HardwareSpec.from_name(args.hw)
    costs = {"roofline": CostModel.from_roofline(spec, hw)}
    if args.profile:
        prof = pd.read_csv(args.profile)
        prof = prof[(prof["model"] == args.model) & (prof["hw_floor"] == "measured")]
        costs["measured H200 profile (Engine)"] = CostModel.fit(prof)
    wl = WorkloadConfig.from_name(args.workload, n_requests=args.n, seed=0)
    slos = [SLO.from_name(s) for s in args.slos]
    print(f"# git {commit[:7]}; {spec.name} on {hw.name} (simulated on a CPU, {platform.machine()}); KV capacity "
          f"{SimConfig.for_hardware(spec, hw).kv_capacity_tokens:,} tokens/GPU; Poisson arrivals; workload "
          f"{wl.label} (lognormal medians, prompt sigma {wl.prompt.sigma} in {wl.prompt.low}..{wl.prompt.high}, "
          f"output sigma {wl.output.sigma} in {wl.output.low}..{wl.output.high}); {args.n} requests per point")
    prov = results.collect_provenance(config={k: str(v) for k, v in vars(args).items()},
                                      data={"profile": results.data_digest(prof) if args.profile else None})
    rows, verdicts = [], []
    for cname, cost in costs.items():
        print(f"\n=== costs: {cname}: {cost}")
        for n_gpu, deps in deployments(spec, hw).items():
            res_all = run_points(wl, deps, cost, cname, args.per_gpu_rates, slos, n_gpu, prov,
                                 f"pd_goodput_{args.model}_{args.hw}")
            for _, res in res_all.groupby("slo", sort=False):
                verdicts += [v | {"costs": cname} for v in report(res, deps, n_gpu)]
            rows.append(res_all.assign(costs=cname))
    if args.json:
        meta = vars(args) | {"json": str(args.json), "git_commit": commit, "host": platform.node(),
                             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                             "costs": {k: c.as_dict() for k, c in costs.items()}}
        out = pd.concat(rows, ignore_index=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": out.to_dict(orient="records"), "verdicts": verdicts},
                                        default=float))


if __name__ == "__main__":
    main()
