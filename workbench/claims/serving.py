"""Serving evidence for the claims ledger, from the stacked study's measured cost models.

* :func:`long_prompt_evidence`: SLO capacity of every stacked deployment on a long-prompt workload
  (is "bf16 prefill, W4A16 + spec decode" the best?);
* :func:`pd16_evidence`: 16 requests at once on colocated and disaggregated deployments (TTFT,
  TPOT, throughput), the setting of the P/D speedup claim;
* :func:`vllm_flags_evidence`: which of the claimed vLLM flags the pinned vLLM release accepts
  (through ``workbench.bridges`` when it is installed and the vLLM source is cached);
* :func:`sim_validation`: a simulator policy's error against a real serving run, from the comparison
  file ``benchmarks/sim_vs_real.py`` writes (the ledger judges simulated claims only on checked policies).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.pd.sim import LengthDist, simulate
from workbench.stack.config import StackConfig
from workbench.stack.load import baseline_capacity, deployments, simulate_deployment, study_slo
from workbench.stack.table import slo_capacity_by_label

__all__ = ["ARTICLE_VLLM_FLAGS", "long_prompt_evidence", "pd16_evidence", "sim_validation", "vllm_flags_evidence"]

ARTICLE_VLLM_FLAGS = ("--speculative-draft-tokens", "--enable-prefill-preemption", "--speculative-metrics")


def _scaled(d: LengthDist, f: float) -> LengthDist:
    return replace(d, value=max(1, int(d.value * f)), low=max(1, int(d.low * f)), high=max(1, int(d.high * f)),
                   values=tuple(max(1, int(v * f)) for v in d.values))


def long_prompt_evidence(points: pd.DataFrame, cfg: StackConfig, mem_gb: float, prompt_scale: float = 8.0,
                         fractions=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0)) -> dict:
    """SLO capacity (req/s at >= 90% SLO attainment, on a rate grid of ``fractions`` x the baseline's
    capacity) of every deployment of the first split when prompts are ``prompt_scale`` x longer than
    the study's workload. SLOs: ``cfg.slo`` or derived from the baseline on the long prompts."""
    wl = replace(cfg.workload, prompt=_scaled(cfg.workload.prompt, prompt_scale))
    long_cfg = replace(cfg, workload=wl, splits=cfg.splits[:1], slo_scales=(1.0,), load_fractions=tuple(fractions),
                       table_load=fractions[0])
    slo = study_slo(points, long_cfg)
    cap = baseline_capacity(points, long_cfg, mem_gb)
    rates = [f * cap for f in fractions]
    deps = deployments(points, long_cfg, mem_gb)
    grid = pd.concat([simulate_deployment(d, long_cfg, rates, slo) for d in deps], ignore_index=True)
    by = slo_capacity_by_label(grid)
    mixed = next(d.label for d in deps if d.mixed)
    return {"capacity_rps": {k: float(v) for k, v in by.items()}, "best": str(by.idxmax()), "mixed": mixed,
            "prompt_median": int(wl.prompt.value), "slo": str(slo),
            "policies": sorted({d.sim.policy for d in deps})}


def pd16_evidence(points: pd.DataFrame, cfg: StackConfig, mem_gb: float, n: int = 16) -> dict:
    """``n`` requests arriving together (the study's workload lengths, fixed at their medians) on the
    baseline precision: colocated x1, colocated x2 and disaggregated 1P+1D. Per deployment:
    ``ttft_ms`` and ``tpot_ms`` (means) and ``throughput_rps`` (n / makespan); ratios of the
    disaggregated deployment to colocated x2 (equal GPUs) and to colocated x1; the simulator
    ``policies`` used."""
    wl = replace(cfg.workload, n_requests=n, rate=1e6, prompt=LengthDist("fixed", int(cfg.workload.prompt.value)),
                 output=LengthDist("fixed", int(cfg.workload.output.value)))
    one = replace(cfg, splits=((1, 1),))
    deps = {("dis" if d.disaggregated else "col"): d for d in deployments(points, one, mem_gb, combos=[(False, False)])}
    out = {}
    for key, dep in (("colocated x2", deps["col"]), ("disaggregated 1P+1D", deps["dis"]),
                     ("colocated x1", replace(deps["col"], sim=replace(deps["col"].sim, n_instances=1)))):
        df = simulate(wl, dep.sim, dep.cost)
        out[key] = {"ttft_ms": float(df["ttft_ms"].mean()), "tpot_ms": float(np.nanmean(df["tpot_ms"])),
                    "throughput_rps": float(n / (df["finish_s"].max() - df["arrival_s"].min()))}
    dis, c2, c1 = out["disaggregated 1P+1D"], out["colocated x2"], out["colocated x1"]
    return out | {"throughput_ratio_equal_gpus": dis["throughput_rps"] / c2["throughput_rps"],
                  "throughput_ratio_vs_one_gpu": dis["throughput_rps"] / c1["throughput_rps"],
                  "tpot_ratio": dis["tpot_ms"] / c2["tpot_ms"], "ttft_ratio": dis["ttft_ms"] / c2["ttft_ms"],
                  "n_requests": n, "prompt": int(wl.prompt.value), "output": int(wl.output.value),
                  "policies": sorted({d.sim.policy for d in deps.values()})}


def vllm_flags_evidence(flags=ARTICLE_VLLM_FLAGS) -> dict | None:
    """``{"version", "unknown", "accepted"}``: the flags the pinned vLLM release's ``vllm serve`` lacks,
    read from its source by ``workbench.bridges.VllmSource``; None when the bridges package is not
    installed or the source is not cached (``WORKBENCH_VLLM_SOURCE`` or a previous
    ``VllmSource.fetch()``): fetching it downloads a 336 MB wheel, which a notebook does not do."""
    try:
        from workbench import bridges
    except ImportError:
        return None
    from workbench.models import cache_dir

    cached = (cache_dir() / "vllm" / bridges.VLLM_VERSION / "SOURCE.json").exists()
    if not cached and not os.environ.get("WORKBENCH_VLLM_SOURCE"):
        return None
    try:
        src = bridges.VllmSource.fetch()
    except bridges.VllmSourceUnavailable:
        return None
    unknown = src.unknown_flags(list(flags))
    return {"version": src.release, "unknown": unknown, "accepted": [f for f in flags if f not in unknown]}


def sim_validation(compare_csv: str | Path, policy: str = "colocated") -> dict:
    """``{policy: (max_rel_err_mean, max_rel_err_p99, source_file)}`` from a simulator-vs-real
    comparison (``compare.csv`` of ``benchmarks/sim_vs_real.py``, rows of
    :func:`workbench.pd.loop.compare_to_sim`: ``metric``, ``err_pct`` and, with a drift check,
    ``drift_pct`` and ``warning``). The errors are fractions, the largest over TTFT, TPOT and E2E of the
    mean rows and of the p99 rows; where ``warning`` is set (the machine's speed moved more than the
    error) the row's error is taken as its drift, since the comparison cannot resolve anything
    smaller. A file with a ``rate`` column (several loads, ``VLLMEngine.run_pd``'s ``compare.csv``) gives the
    largest error over its loads. Raises ValueError naming the file when it lacks those rows or columns."""
    path = Path(compare_csv)
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"{path}: cannot read a simulator comparison ({e}); write one with "
                         "benchmarks/sim_vs_real.py") from None
    if not {"metric", "err_pct"} <= set(df.columns):
        raise ValueError(f"{path}: needs columns metric, err_pct (benchmarks/sim_vs_real.py's compare.csv); has "
                         f"{list(df.columns)}")
    err = df["err_pct"].abs()
    if "warning" in df and "drift_pct" in df:
        flagged = df["warning"].astype(str).str.lower() == "true"
        err = err.where(~flagged, np.maximum(err, df["drift_pct"].abs()))
    out = []
    n_loads = df["rate"].nunique() if "rate" in df else 1
    for stat in ("mean", "p99"):
        rows = df["metric"].isin([f"{stat}_{m}_ms" for m in ("ttft", "tpot", "e2e")])
        if rows.sum() != 3 * n_loads:
            raise ValueError(f"{path}: needs the {stat} TTFT, TPOT and E2E rows (of each rate); has "
                             f"{df['metric'].tolist()}")
        out.append(float(err[rows].max()) / 100)
    return {policy: (out[0], out[1], str(path))}
