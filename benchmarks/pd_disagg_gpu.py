"""Disaggregated prefill/decode for real vs the simulator: one prefill process and one decode process on
random-init Qwen2-7B (bf16), the KV cache of each prompt sent between them, at three loads of each of
notebook 03's workloads.

One run (one spawn of the two workers, :func:`workbench.pd.disagg.run_disagg`): profile the prefill
steps on rank 0 and the decode steps on rank 1 (:mod:`workbench.pd.profile`), probe the link (a 1-token
and a ~1 GiB transfer, repeated), then serve every (workload, load) in turn; rates are ``load *
capacity``, capacity from the cost model fitted to that profile. Afterwards the simulator
(:func:`workbench.pd.sim.simulate`, disaggregated policy) serves the same requests with the same cost
model, decode slots and measured link, and each request's transfer time is set against ``latency +
bytes / bandwidth``.

Placement: with two GPUs rank r runs on cuda:r and the KV cache moves over NCCL (NVLink); with one
GPU both ranks share cuda:0 and the link is gloo through host memory (NCCL refuses two ranks on one
GPU): a device-local deployment, which the output states; it checks the code path and the transfer
model, not the simulator's two-GPU predictions (the two roles share one GPU's time).

    python -m benchmarks.pd_disagg_gpu --out $OUT            # one or two GPUs, unchanged
    python -m benchmarks.pd_disagg_gpu --smoke --out /tmp/x  # CPU, tiny model

Writes ``results.json`` (environment, link, cost model, per-run comparison and transfer summary),
``compare.csv``, ``transfers.csv``, ``requests.csv`` and ``profile.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import pandas as pd

from benchmarks.common import CONFIGS, environment
from workbench.pd import CostModel
from workbench.pd.disagg import (
    DisaggConfig,
    capacity_rps,
    compare_runs,
    first_token_agreement,
    load_labels,
    placement,
    run_disagg,
    summary,
    transfer_check,
    workloads_at_loads,
)
from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import SLO, LengthDist, WorkloadConfig

# notebook 03's workloads (WORKLOAD_PRESETS "chat" and "long-prompt")
WORKLOADS = {
    "chat": WorkloadConfig(prompt=LengthDist("lognormal", 512, 16, 4096, 0.8),
                           output=LengthDist("lognormal", 128, 2, 2048, 0.8)),
    "long-prompt": WorkloadConfig(prompt=LengthDist("lognormal", 2048, 64, 8192, 0.5),
                                  output=LengthDist("lognormal", 128, 2, 2048, 0.8)),
}
SMOKE_WORKLOADS = {
    "chat": WorkloadConfig(prompt=LengthDist("lognormal", 24, 4, 64, 0.8), output=LengthDist("lognormal", 6, 2, 16, 0.8)),
    "long-prompt": WorkloadConfig(prompt=LengthDist("lognormal", 64, 16, 96, 0.5),
                                  output=LengthDist("lognormal", 6, 2, 16, 0.8)),
}
TINY = {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024}


def _profile_config(smoke: bool, max_prompt: int, decode_slots: int) -> ProfileConfig:
    if smoke:
        return ProfileConfig(prompt_lens=(8, 32, 96), prefill_batches=(1,), decode_batches=(1, 2, 4),
                             context_lens=(16, 64), repeats=2, warmup=1)
    lens = tuple(n for n in (64, 256, 1024, 2048, 4096, 8192) if n <= max_prompt)
    batches = tuple(b for b in (1, 2, 4, 8, 16, 32, 64) if b <= decode_slots)
    return ProfileConfig(prompt_lens=lens, prefill_batches=(1,), decode_batches=batches,
                         context_lens=(256, 1024, 4096), repeats=5, warmup=1)


def _print_table(df: pd.DataFrame, link: dict) -> None:
    print(f"\nLINK: {link['description']}")
    print(f"  measured: {link['gbs']:.2f} GB/s (largest probe), latency {link['latency_ms']:.3f} ms (1 token)")
    cols = ["workload", "load", "rate_rps", "n_requests"]
    for m in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms"):
        cols += [f"{m}_real", f"{m}_sim", f"{m}_err_pct"]
    cols += ["goodput_real_rps", "goodput_sim_rps", "transfer_ms_median", "transfer_model_ms_median",
             "transfer_err_pct_median", "transfer_within_10pct"]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(df[cols].round(3).to_string(index=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen2-7b", choices=sorted(CONFIGS))
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.6, 0.9], help="fractions of capacity")
    ap.add_argument("--seconds", type=float, default=6.0, help="arrivals per (workload, load), s")
    ap.add_argument("--min-requests", type=int, default=40)
    ap.add_argument("--decode-slots", type=int, default=32)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model, tiny workloads")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    wcfgs = {k: (SMOKE_WORKLOADS if args.smoke else WORKLOADS)[k] for k in args.workloads}
    max_prompt = max(w.prompt.max for w in wcfgs.values())
    max_seq = max(w.prompt.max + w.output.max for w in wcfgs.values())
    slots = 4 if args.smoke else args.decode_slots
    config = DisaggConfig(model=TINY if args.smoke else CONFIGS[args.model], decode_slots=slots, max_seq=max_seq,
                          device="cpu" if args.smoke else "auto",
                          profile=_profile_config(args.smoke, max_prompt, slots), probe_repeats=5)
    shared = placement(config, 0)[0] == placement(config, 1)[0]
    seconds, min_req = (1.0, 6) if args.smoke else (args.seconds, args.min_requests)
    fn = partial(workloads_at_loads, workloads=wcfgs, loads=tuple(args.loads), seconds=seconds,
                 min_requests=min_req, decode_slots=slots, shared_device=shared)
    run = run_disagg(fn, config)
    cost = CostModel.fit(run.profile)
    slo = SLO()
    table = summary(run, cost, config, load_labels(wcfgs, args.loads), slo)
    caps = {name: capacity_rps(cost, w, slots, shared) for name, w in wcfgs.items()}
    link = {k: v for k, v in run.link.items()} | {"device_local": shared}
    result = {"environment": environment(), "model": "tiny" if args.smoke else args.model,
              "config": {"decode_slots": slots, "max_prefill_batch": config.max_prefill_batch,
                         "max_prefill_tokens": config.max_prefill_tokens, "max_seq": max_seq},
              "link": link, "kv_bytes_per_token": run.kv_bytes_per_token, "cost_model": cost.as_dict(),
              "capacity": caps, "capacity_basis": "one shared device" if shared else "two devices",
              "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
              "first_token_agreement": first_token_agreement(run), "runs": table.to_dict("records"),
              "wall_s": time.time() - t_start}
    (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    compare_runs(run, cost, config).to_csv(args.out / "compare.csv", index=False)
    transfer_check(run).to_csv(args.out / "transfers.csv", index=False)
    run.requests.drop(columns=["itl_ms", "token_s", "tokens"]).to_csv(args.out / "requests.csv", index=False)
    run.profile.to_csv(args.out / "profile.csv", index=False)
    _print_table(table, run.link)
    print(f"\nfirst token (decode, after transfer) = prefill's token for {100 * result['first_token_agreement']:.1f}% "
          f"of requests; capacity basis: {result['capacity_basis']}; wall {result['wall_s']:.0f} s; "
          f"results in {args.out}")


if __name__ == "__main__":
    main()
