"""Loads relative to a measured capacity, and the real-vs-simulated summary of a disaggregated run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from workbench.pd.costmodel import CostModel
from workbench.pd.disagg.config import DisaggConfig
from workbench.pd.disagg.run import DisaggRun, compare_runs, sim_config_for, transfer_check
from workbench.pd.metrics import summarize
from workbench.pd.sim import SLO, WorkloadConfig, generate_workload, simulate

__all__ = ["capacity_rps", "load_labels", "summary", "workloads_at_loads"]

COMPARED = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")


def capacity_rps(cost: CostModel, workload: WorkloadConfig, decode_slots: int, shared_device: bool) -> dict:
    """Requests/s a one-prefill, one-decode deployment sustains by ``cost``, from 20,000 draws of the
    workload's lengths: prefill at batch 1, ``1000 / E[prefill_ms(L)]``; decode with every slot busy and
    contexts at prompt + half the output, ``1000 * slots / (decode_ms * E[output])``. ``capacity_rps``:
    the smaller on two devices; ``1 / (1/prefill + 1/decode)`` when both roles share one device (its
    time goes to both). All in requests/s."""
    rng = np.random.default_rng(12345)
    p = workload.prompt.sample(rng, 20000).astype(float)
    o = workload.output.sample(rng, 20000).astype(float)
    prefill = 1e3 / float(np.mean(cost.prefill_ms(p, p * p)))
    step = float(cost.decode_ms(decode_slots, decode_slots * np.mean(p + o / 2)))
    decode = 1e3 * decode_slots / (step * float(np.mean(o)))
    both = 1.0 / (1.0 / prefill + 1.0 / decode) if shared_device else min(prefill, decode)
    return {"prefill_rps": prefill, "decode_rps": decode, "capacity_rps": both}


def load_labels(workloads: dict, loads) -> list[tuple[str, float]]:
    """``(workload name, load)`` of every run of :func:`workloads_at_loads`, in its order."""
    return [(name, float(load)) for name in workloads for load in loads]


def workloads_at_loads(profile: pd.DataFrame, workloads: dict, loads, seconds: float, min_requests: int,
                       decode_slots: int, shared_device: bool, seed: int = 100) -> list:
    """For every workload config (name -> :class:`WorkloadConfig`) and load (fraction of
    :func:`capacity_rps` by the cost model fitted to ``profile``): the workload at ``rate = load *
    capacity`` with about ``seconds`` of arrivals (at least ``min_requests``), seed ``seed + i`` for the
    i-th config (the same requests' lengths at every load of a config). Pass it to
    :func:`workbench.pd.disagg.run_disagg` through ``functools.partial`` (profile measured in the run)."""
    cost = CostModel.fit(profile)
    out = []
    for i, wcfg in enumerate(workloads.values()):
        cap = capacity_rps(cost, wcfg, decode_slots, shared_device)["capacity_rps"]
        for load in loads:
            rate = float(load) * cap
            n = max(int(min_requests), round(rate * seconds))
            out.append(generate_workload(replace(wcfg, rate=rate, n_requests=n, seed=seed + i)))
    return out


def summary(run: DisaggRun, cost: CostModel, config: DisaggConfig, labels: list, slo: SLO | None = None) -> pd.DataFrame:
    """One row per run: ``workload``, ``load`` (from ``labels``), ``rate_rps`` (requests / arrival span),
    real vs simulated mean and p99 TTFT and TPOT (``<metric>_real``, ``_sim``, ``_err_pct`` =
    100 (sim - real) / real), goodput under ``slo`` both ways, and the transfer times: median measured,
    median model (``latency + bytes / bandwidth``), median error and the fraction within 10%. ``slo``
    defaults to :class:`~workbench.pd.sim.SLO`'s defaults."""
    slo = slo or SLO()
    cmp = compare_runs(run, cost, config).set_index(["run", "metric"])
    xfer = transfer_check(run)
    sim_cfg = sim_config_for(run, config)
    rows = []
    for i, (name, load) in enumerate(labels):
        wl = run.workloads[i]
        real = summarize(run.requests[run.requests["run"] == i], slo).iloc[0]
        sim = summarize(simulate(wl, sim_cfg, cost), slo).iloc[0]
        x = xfer[xfer["run"] == i]
        row = {"workload": name, "load": load, "rate_rps": len(wl) / max(float(wl.arrival_s[-1]), 1e-9),
               "n_requests": len(wl)}
        for m in COMPARED:
            c = cmp.loc[(i, m)]
            row |= {f"{m}_real": float(c["real"]), f"{m}_sim": float(c["sim"]), f"{m}_err_pct": float(c["err_pct"])}
        row |= {"goodput_real_rps": float(real["goodput_rps"]), "goodput_sim_rps": float(sim["goodput_rps"]),
                "transfer_ms_median": float(x["transfer_ms"].median()),
                "transfer_model_ms_median": float(x["model_ms"].median()),
                "transfer_err_pct_median": float(x["err_pct"].median()),
                "transfer_within_10pct": float((x["err_pct"].abs() <= 10).mean())}
        rows.append(row)
    return pd.DataFrame(rows)
