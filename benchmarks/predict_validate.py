"""AIConfigurator's predictions against what the workbench measures and simulates (issue 46, item 2).

Subcommands (each writes ``<name>.csv`` and ``<name>.json`` under ``--out``; the JSON records date (UTC),
device, git commit, the exact command, and for timings the noise (IQR of the repeats) and floor):

* ``aic``: AIConfigurator's single-step estimates (``workbench.predict.step_costs``) for the Qwen2-7B and
  Llama-3-8B shapes, bf16, decode at batch 1..64 with 512 cached tokens each, prefill of one 512- and one
  2048-token prompt, on h100_sxm and h200_sxm, in vLLM and SGLang. CPU only.
* ``engine``: the workbench engine on this machine's GPU for the same shapes with random weights (bf16):
  :func:`workbench.pd.profile.run_profile` (the serving loop's own step timing) over the same grid. CUDA.
* ``join``: the ratio table engine / AIConfigurator per point, for the system matching the engine's GPU.
* ``sim``: the workbench serving simulator (``workbench.pd.sim``) against AIConfigurator's deployment search
  for the same deployment, workload and SLOs (Llama-3-8B shape, h200_sxm, vLLM tables, 8 GPUs, 512 in / 128
  out, TTFT <= 400 ms, TPOT <= 40 ms): the simulator runs on AIConfigurator's own step costs (a cost model
  fitted to ``step_costs``), so a disagreement is the policy's (scheduling, arrivals), not the kernels';
  the fit's error is reported as the step-cost part. Colocated, chunked and disaggregated (AIConfigurator's
  P:D). CPU only.

    python -m benchmarks.predict_validate aic --out benchmarks/results/2026-12-06_predict
    python -m benchmarks.predict_validate engine --out $OUT                 # on the GPU
    python -m benchmarks.predict_validate join --aic .../aic_steps.csv --engine $OUT/engine_steps.csv --out ...
    python -m benchmarks.predict_validate sim --out benchmarks/results/2026-12-06_predict

AIConfigurator has no CPU systems: the workbench's CPU timings (and vLLM on the CPU) cannot be compared.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SHAPES = ("qwen2-7b", "llama3-8b")
SYSTEMS = ("h100_sxm", "h200_sxm")
ENGINES = ("vllm", "sglang")
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
CONTEXT = 512
PROMPTS = (512, 2048)
_ARGV: list[str] = []  # the arguments main() was called with, recorded as the exact command


def _meta(device: str, **extra) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], check=False,
                                    capture_output=True,
                                    text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "git_commit": commit, "git_dirty": dirty,
            "command": "python -m benchmarks.predict_validate " + " ".join(shlex.quote(a) for a in _ARGV),
            **extra}


def _write(out: Path, name: str, df: pd.DataFrame, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{name}.csv", index=False)
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1, default=str))
    print(f"wrote {out / name}.csv ({len(df)} rows)")


def cmd_aic(args) -> None:
    from workbench.predict import step_costs
    from workbench.predict.aic import aic_version

    frames = [step_costs(shape, system, engine, "bf16", decode_batches=DECODE_BATCHES, context_lens=(CONTEXT,),
                         prompt_lens=PROMPTS).assign(shape=shape)
              for shape in SHAPES for system in SYSTEMS for engine in ENGINES]
    _write(Path(args.out), "aic_steps", pd.concat(frames, ignore_index=True),
           _meta("cpu (AIConfigurator's tables; no timing here)", tool=aic_version()))


def cmd_engine(args) -> None:
    import torch

    from workbench.arch import ModelSpec
    from workbench.models.random_init import build_random_model, hf_config
    from workbench.pd.hardware import HardwareSpec
    from workbench.pd.profile import ProfileConfig, make_runner, run_profile, with_floors

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        raise SystemExit("engine: needs a CUDA GPU (AIConfigurator has no CPU systems); --smoke runs a tiny CPU check")
    dev = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    hw_key = "h200" if "H200" in name else "h100-sxm" if "H100" in name else None
    shapes = SHAPES if not args.smoke else ("smollm2-135m",)
    cfg = ProfileConfig(prompt_lens=PROMPTS if not args.smoke else (16, 32), prefill_batches=(1,),
                        decode_batches=DECODE_BATCHES if not args.smoke else (1, 2),
                        context_lens=(CONTEXT,) if not args.smoke else (16,),
                        repeats=args.repeats, warmup=2)
    frames = []
    for shape in shapes:
        model = build_random_model(shape, dev, torch.bfloat16 if cuda else torch.float32)
        runner = make_runner(model, max_batch=cfg.max_batch, max_seq=cfg.max_seq + 8)
        prof = run_profile(runner, cfg)
        if hw_key:
            prof = with_floors(prof, ModelSpec.from_hf_config(hf_config(shape), name=shape), HardwareSpec.from_name(hw_key))
        frames.append(prof.assign(shape=shape, device=name))
        del runner, model
        if cuda:
            torch.cuda.empty_cache()
    df = pd.concat(frames, ignore_index=True)
    _write(Path(args.out), "engine_steps", df,
           _meta(name, torch=torch.__version__, noise="ms_iqr per row (IQR of the repeats), ms_min; median is ms",
                 floor="floor_ms per row: max(FLOPs / datasheet bf16 rate, bytes / datasheet bandwidth) "
                       f"({hw_key or 'no preset for this device'})", repeats=args.repeats))


def _system_of(device: str) -> str | None:
    return "h200_sxm" if "H200" in device else "h100_sxm" if "H100" in device else None


def cmd_join(args) -> None:
    aic = pd.read_csv(args.aic)
    eng = pd.read_csv(args.engine)
    eng["system"] = eng["device"].map(_system_of)
    keys = ["shape", "system", "phase", "batch", "seq_len"]
    j = eng[keys + ["device", "ms", "ms_iqr"] + [c for c in ("floor_ms",) if c in eng]].merge(
        aic[keys + ["engine", "engine_version", "ms"]].rename(columns={"ms": "aic_ms"}), on=keys)
    j = j.rename(columns={"ms": "engine_ms"})
    j["ratio"] = j["engine_ms"] / j["aic_ms"]  # < 1: the workbench engine is faster than predicted for the engine
    _write(Path(args.out), "engine_vs_aic", j.sort_values(keys[:3] + ["engine", "batch", "seq_len"]),
           _meta(", ".join(sorted(eng["device"].unique())), inputs=[str(args.aic), str(args.engine)],
                 ratio="engine_ms / aic_ms (workbench engine measured / AIConfigurator predicted for that engine)"))


def _explain(row: dict, fit_err: float) -> str:
    """Which step cost or policy explains a simulator-vs-AIConfigurator gap (rules stated in the text)."""
    parts = []
    if fit_err > 0.10:
        parts.append(f"step cost: the linear cost model misses AIConfigurator's steps by up to {fit_err:.0%}")
    if row["sim_ttft_p50_ms"] > 1.5 * row["aic_ttft_ms"]:
        parts.append("policy: TTFT queueing under Poisson arrivals at that rate (AIConfigurator's steady state "
                     "at fixed concurrency has no queue)")
    elif row["sim_ttft_p50_ms"] < row["aic_ttft_ms"] / 1.5:
        parts.append("policy: AIConfigurator's TTFT includes waiting for its context-token budget among "
                     "decode steps; the simulator's prefill runs as soon as it arrives at this rate")
    if abs(row["sim_tpot_p50_ms"] / row["aic_tpot_ms"] - 1) > 0.2:
        parts.append(f"policy: the simulator's running batch at this rate gives TPOT {row['sim_tpot_p50_ms']:.1f} ms "
                     f"against AIConfigurator's {row['aic_tpot_ms']:.1f} ms at concurrency "
                     f"{row['aic_concurrency']:.0f}")
    if row["sim_capacity_rps"] < 0.8 * row["aic_goodput_rps"] or row["sim_capacity_rps"] > 1.25 * row["aic_goodput_rps"]:
        parts.append("goodput: the simulator's SLO capacity (90% of requests within both SLOs, Poisson) is "
                     f"{row['sim_capacity_rps'] / row['aic_goodput_rps']:.2f}x AIConfigurator's steady-state rate")
    return "; ".join(parts) or "agree within the stated bands (TTFT 1.5x, TPOT 20%, goodput 0.8-1.25x)"


def cmd_sim(args) -> None:
    from workbench.arch import ModelSpec
    from workbench.models.random_init import hf_config
    from workbench.pd.costmodel import CostModel
    from workbench.pd.hardware import HardwareSpec
    from workbench.pd.metrics import SLO, summarize
    from workbench.pd.sim import LengthDist, SimConfig, WorkloadConfig, generate_workload, simulate
    from workbench.predict import recommend, step_costs
    from workbench.predict.aic import aic_version

    shape, system, engine, gpus, isl, osl = "llama3-8b", "h200_sxm", "vllm", args.gpus, 512, 128
    slo = SLO(ttft_ms=400.0, tpot_ms=40.0)
    steps = step_costs(shape, system, engine, decode_batches=(1, 8, 32, 64, 128, 256), context_lens=(512, 576, 640),
                       prompt_lens=(256, 512, 1024, 2048), prefill_batches=(1, 2, 4))
    cost = CostModel.fit(steps)
    fit = cost.residuals(steps)
    fit_err = float(fit["rel_err"].abs().max())
    rec = recommend(shape, system, engine, total_gpus=gpus, isl=isl, osl=osl, ttft_ms=slo.ttft_ms, tpot_ms=slo.tpot_ms)
    agg, dis = rec[rec["mode"] == "agg"].iloc[0], rec[rec["mode"] == "disagg"].iloc[0]
    base = SimConfig.for_hardware(ModelSpec.from_hf_config(hf_config(shape), name=shape), HardwareSpec.from_name("h200"))
    n_agg = int(agg["replicas"])
    deployments = {
        "colocated": (SimConfig(**{**_fields(base), "policy": "colocated", "n_instances": n_agg,
                                   "max_batch": int(agg["batch_size"])}), agg),
        "chunked": (SimConfig(**{**_fields(base), "policy": "chunked", "n_instances": n_agg,
                                 "max_batch": int(agg["batch_size"]), "chunk_budget": 2 * isl}), agg),
        "disaggregated": (SimConfig(**{**_fields(base), "policy": "disaggregated",
                                       "n_prefill": int(dis["prefill_workers"]), "n_decode": int(dis["decode_workers"]),
                                       "max_batch": int(dis["batch_size"])}), dis),
    }
    fixed = {"prompt": LengthDist("fixed", isl), "output": LengthDist("fixed", osl)}
    rows, sweeps = [], []
    for policy, (cfg, a) in deployments.items():
        aic_rate = float(a["goodput_rps"]) * cfg.n_gpus / float(a["n_gpus"])  # AIConfigurator's rate on these GPUs
        fracs = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
        caps = []
        for f in fracs:
            wl = generate_workload(WorkloadConfig(n_requests=args.requests, rate=f * aic_rate, seed=0, **fixed))
            s = summarize(simulate(wl, cfg, cost), slo).iloc[0].to_dict()
            sweeps.append({"policy": policy, "label": cfg.label, "rate_frac": f, "rate": f * aic_rate, **s})
            caps.append((f * aic_rate, s["slo_attainment"], s))
        at = next(s for r, _, s in caps if r == aic_rate)
        cap = max([r for r, att, _ in caps if att >= 0.9], default=0.0)
        row = {"policy": policy, "deployment": cfg.label, "n_gpus": cfg.n_gpus, "aic_mode": a["mode"],
               "aic_pd_ratio": a["pd_ratio"], "aic_batch_size": int(a["batch_size"]),
               "aic_concurrency": float(a["concurrency"]), "aic_ttft_ms": float(a["ttft_ms"]),
               "aic_tpot_ms": float(a["tpot_ms"]), "aic_goodput_rps": aic_rate,
               "sim_ttft_p50_ms": at["p50_ttft_ms"], "sim_tpot_p50_ms": at["p50_tpot_ms"],
               "sim_goodput_rps_at_aic_rate": at["goodput_rps"], "sim_attainment_at_aic_rate": at["slo_attainment"],
               "sim_capacity_rps": cap, "sim_capacity_is_lower_bound": cap == max(fracs) * aic_rate,
               "cost_fit_max_rel_err": fit_err}
        row["explanation"] = _explain(row, fit_err)
        rows.append(row)
    meta = _meta("cpu (simulation on AIConfigurator's step costs)", tool=aic_version(), shape=shape, system=system,
                 engine=engine, total_gpus=gpus, workload=f"fixed {isl} in / {osl} out, Poisson, {args.requests} "
                 "requests, seed 0", slo=slo.label, cost_model=cost.as_dict(),
                 capacity="highest swept rate (0.25-3x AIConfigurator's) with >= 90% of requests within both SLOs",
                 goodput="sim goodput_rps as vllm bench serve: good requests / (last finish - first arrival); a "
                         "finite run's drain time keeps it below the arrival rate even at 100% attainment")
    _write(Path(args.out), "sim_vs_aic", pd.DataFrame(rows), meta)
    _write(Path(args.out), "sim_vs_aic_sweep", pd.DataFrame(sweeps), meta)
    _write(Path(args.out), "sim_cost_fit", fit, meta)


def _fields(cfg) -> dict:
    from dataclasses import asdict

    return asdict(cfg)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("aic")
    a.add_argument("--out", required=True)
    e = sub.add_parser("engine")
    e.add_argument("--out", required=True)
    e.add_argument("--repeats", type=int, default=10)
    e.add_argument("--smoke", action="store_true", help="tiny CPU run of the code path (no comparison)")
    j = sub.add_parser("join")
    j.add_argument("--aic", required=True)
    j.add_argument("--engine", required=True)
    j.add_argument("--out", required=True)
    s = sub.add_parser("sim")
    s.add_argument("--out", required=True)
    s.add_argument("--gpus", type=int, default=8)
    s.add_argument("--requests", type=int, default=2000)
    argv = list(sys.argv[1:] if argv is None else argv)
    _ARGV[:] = argv
    args = p.parse_args(argv)
    np.seterr(all="ignore")
    {"aic": cmd_aic, "engine": cmd_engine, "join": cmd_join, "sim": cmd_sim}[args.cmd](args)


if __name__ == "__main__":
    main()
