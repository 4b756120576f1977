"""``simulate`` one deployment on one workload; ``goodput_vs_rate`` sweeps rates; ``first_win_rate``
and ``slo_capacity`` read the results (grids of deployments: :mod:`workbench.pd.sim.grid`)."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pandas as pd

from workbench.pd.costmodel import CostModel, PoolCosts
from workbench.pd.metrics import SLO, request_metrics, summarize
from workbench.pd.sim.config import SimConfig
from workbench.pd.sim.policies import get_policy
from workbench.pd.sim.workload import Workload, WorkloadConfig, generate_workload

__all__ = ["CONFIG_COLS", "first_win_rate", "goodput_vs_rate", "simulate", "slo_capacity"]

CONFIG_COLS = ("policy", "n_instances", "n_prefill", "n_decode", "chunk_budget", "link_gbs",
                "kv_capacity_tokens")


def simulate(workload: Workload | WorkloadConfig, config: SimConfig, cost: CostModel | PoolCosts, *,
             record_itl: bool = False) -> pd.DataFrame:
    """Serve ``workload`` with ``config`` and step times from ``cost``; one row per request.

    ``cost``: one :class:`CostModel` for every instance, or :class:`PoolCosts` (a prefill pool's and a
    decode pool's, e.g. measured at different precisions, or a speculative decode pool from
    :func:`~workbench.pd.costmodel.speculative_decode_cost`).

    Columns: ``req_id``, ``arrival_s``, ``prompt_len``, ``output_len``, ``ttft_ms``, ``tpot_ms``,
    ``e2e_ms``, ``first_token_s``, ``finish_s``, ``n_preempt``, ``n_tokens`` (generated, counted by the
    simulator), ``instance``, ``n_gpus`` and the config fields in ``CONFIG_COLS``; disaggregated runs
    add ``prefill_instance``, ``prefill_done_s`` and ``kv_ready_s``. Times are simulated (s or ms from
    t = 0) and client-side: a disaggregated request's first token is the decode instance's (see
    :mod:`workbench.pd.sim.policies.disaggregated`). Deterministic: the same inputs give the same frame.
    Raises ``ValueError`` when a request cannot fit an empty instance's KV cache
    (``prompt + output > kv_capacity_tokens``).
    """
    if isinstance(workload, WorkloadConfig):
        workload = generate_workload(workload)
    need = int(np.max(workload.prompt_len + workload.output_len))
    if need > config.kv_capacity_tokens:
        raise ValueError(f"SimConfig.kv_capacity_tokens={config.kv_capacity_tokens} is too small for one "
                         f"request of {need} tokens (prompt + output); raise it to >= {need}")
    out = get_policy(config.policy)(workload, config, PoolCosts.of(cost), record_itl)
    m = request_metrics(workload.arrival_s * 1e3, out["first_ms"], out["finish_ms"], workload.output_len)
    df = pd.DataFrame({"req_id": np.arange(len(workload)), "arrival_s": workload.arrival_s,
                       "prompt_len": workload.prompt_len, "output_len": workload.output_len, **m,
                       "first_token_s": out["first_ms"] / 1e3, "finish_s": out["finish_ms"] / 1e3,
                       "n_preempt": out["n_preempt"], "n_tokens": out["n_tokens"],
                       "instance": out["instance"]})
    for key in ("prefill_done_ms", "kv_ready_ms"):  # disaggregated: the prefill side's times
        if key in out:
            df[key.replace("_ms", "_s")] = out[key] / 1e3
    if "prefill_instance" in out:
        df["prefill_instance"] = out["prefill_instance"]
    if record_itl:
        df["itl_ms"] = [np.diff(np.asarray(x, np.float64)) for x in out["token_ms"]]
        df["itl_max_ms"] = [float(x.max()) if x.size else np.nan for x in df["itl_ms"]]
    cfg = asdict(config)
    for c in CONFIG_COLS:
        df[c] = cfg[c]
    df["n_gpus"] = config.n_gpus
    return df


def goodput_vs_rate(workload: WorkloadConfig, configs: dict[str, SimConfig], cost: CostModel | PoolCosts,
                    rates, slo: SLO) -> pd.DataFrame:
    """Summaries (see :func:`workbench.pd.metrics.summarize`) for every deployment in ``configs``
    (label -> SimConfig) at every arrival rate (req/s, all GPUs together); columns ``label``, ``rate``
    first. The same seed is used at every rate (common random numbers)."""
    rows = []
    for r in rates:
        wl = generate_workload(replace(workload, rate=float(r)))
        for label, cfg in configs.items():
            s = summarize(simulate(wl, cfg, cost), slo)
            s.insert(0, "rate", float(r))
            s.insert(0, "label", label)
            s["policy"], s["n_gpus"] = cfg.policy, cfg.n_gpus
            rows.append(s)
    return pd.concat(rows, ignore_index=True)


def first_win_rate(summary: pd.DataFrame, baseline: str, challenger: str, *, margin: float = 0.02,
                   min_attainment: float = 0.9):
    """Lowest ``rate`` at which ``challenger`` (a ``label``) has goodput more than ``margin`` (relative)
    above ``baseline``'s while still meeting the SLOs for at least ``min_attainment`` of its requests
    (beyond that both are overloaded and a "win" means nothing); ``None`` if it never does. A fixed
    margin with no uncertainty: for a conclusion, use :func:`workbench.pd.verdict.compare_deployments`."""
    a = summary[summary["label"] == baseline].set_index("rate")
    b = summary[summary["label"] == challenger].set_index("rate")
    for r in sorted(set(a.index) & set(b.index)):
        if (b.loc[r, "slo_attainment"] >= min_attainment
                and b.loc[r, "goodput_rps"] > a.loc[r, "goodput_rps"] * (1 + margin)):
            return r
    return None


def slo_capacity(summary: pd.DataFrame, min_attainment: float = 0.9) -> pd.DataFrame:
    """Per ``label``: the highest swept ``rate`` at which at least ``min_attainment`` of requests meet
    every SLO (DistServe's goodput, arXiv 2401.09670 sec. 2.1), also divided by ``n_gpus``."""
    rows = []
    for label, part in summary.groupby("label", sort=False):
        ok = part[part["slo_attainment"] >= min_attainment]
        cap = float(ok["rate"].max()) if len(ok) else 0.0
        n = int(part["n_gpus"].iloc[0]) if "n_gpus" in part else 1
        rows.append({"label": label, "n_gpus": n, "max_rate_at_slo": cap, "per_gpu": cap / n})
    return pd.DataFrame(rows)
