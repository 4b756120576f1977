"""Simulator error against a real serving loop on the default model (CPU).

Profiles the model through the Engine (the same runner the loop uses), fits a CostModel, serves a
Poisson workload with continuous batching (colocated, prefill first) in real time, and simulates the
same workload with the fitted profile. Afterwards the largest profile points are timed again
(``drift_check``): an error smaller than the machine's speed change says nothing about the simulator
and is flagged. Prints the profile fit, the drift and the errors; writes them to ``--out``.

    nice -n 10 python benchmarks/sim_vs_real.py --n-requests 40 --rate 0.3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from workbench.models import load_model
from workbench.pd import CostModel
from workbench.pd.loop import CPUClock, compare_to_sim, run_serving, sim_config_for
from workbench.pd.profile import ProfileConfig, drift_check, make_runner, run_profile
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-requests", type=int, default=40)
    ap.add_argument("--rate", type=float, default=0.3, help="requests/s")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--output-min", type=int, default=8)
    ap.add_argument("--output-max", type=int, default=24)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--max-prefill-batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: process CPU time + virtual sleeps (robust on a shared machine); wall: real time")
    ap.add_argument("--out", type=Path, default=Path("/tmp/pd_sim_vs_real"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    model, _ = load_model("smollm2-135m")
    max_seq = args.prompt_len + args.output_max + 8
    runner = make_runner(model, args.max_batch, max_seq)
    pcfg = ProfileConfig(prompt_lens=(16, 32, args.prompt_len), prefill_batches=tuple(
        b for b in (1, 2, 4, 8) if b <= args.max_prefill_batch), decode_batches=tuple(
        b for b in (1, 2, 4, 8, 16) if b <= args.max_batch), context_lens=(args.prompt_len, max_seq - 2),
        repeats=5)
    t0 = time.time()
    clk = CPUClock() if args.clock == "cpu" else None
    prof = run_profile(runner, pcfg, clock=clk or time.perf_counter)
    cost = CostModel.fit(prof)
    res = cost.residuals(prof)
    print(f"profile: {len(prof)} points in {time.time() - t0:.0f} s; {cost}")
    print(res[["phase", "batch", "seq_len", "ms", "ms_iqr", "pred_ms", "rel_err"]].round(3).to_string())
    prof.to_csv(args.out / "profile.csv", index=False)

    wl = generate_workload(WorkloadConfig(
        n_requests=args.n_requests, rate=args.rate, prompt=LengthDist("fixed", args.prompt_len),
        output=LengthDist("uniform", low=args.output_min, high=args.output_max), seed=args.seed))
    t0 = time.time()
    kw = {"clock": clk, "sleep": clk.sleep} if clk else {}
    real = run_serving(runner, wl, max_prefill_batch=args.max_prefill_batch, seed=args.seed, **kw)
    print(f"serving: {len(real)} requests in {time.time() - t0:.0f} s")
    real.drop(columns=["itl_ms"]).to_csv(args.out / "real.csv", index=False)
    drift = drift_check(runner, prof, pcfg, clock=clk or time.perf_counter)
    print("drift check (largest profile points, timed again after serving):")
    print(drift.round(3).to_string())
    cmp = compare_to_sim(real, wl, cost, sim_config_for(runner, max_prefill_batch=args.max_prefill_batch),
                         drift=drift)
    print(cmp.round(2).to_string())
    drift.to_csv(args.out / "drift.csv", index=False)
    cmp.to_csv(args.out / "compare.csv", index=False)
    (args.out / "args.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}
                                                   | {"cost": cost.as_dict()}, indent=2))


if __name__ == "__main__":
    main()
