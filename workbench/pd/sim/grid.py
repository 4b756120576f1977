"""Grids of simulated points (workload x deployment x rate) in the shape the results store resumes:
one JSON-able config per point (:func:`grid_points`), one row per finished point
(:func:`run_grid_point`: the summary, TTFT/TPOT quantiles and good-request batch means as list
columns), and the frames the plots and sliders read (:func:`grid_frames`)::

    points = grid_points(workloads, deployments, rates, cost, slo)
    rows = results.sweep(name, points, partial(run_grid_point, workloads=workloads,
                                               deployments=deployments, cost=cost, slo=slo), provenance=...)
    quantiles, summary = grid_frames(rows, points)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace

import numpy as np
import pandas as pd

from workbench.pd.costmodel import CostModel, PoolCosts
from workbench.pd.metrics import SLO, summarize
from workbench.pd.sim.config import SimConfig
from workbench.pd.sim.core import CONFIG_COLS, simulate
from workbench.pd.sim.workload import generate_workload
from workbench.pd.verdict import good_batch_means

__all__ = ["deployment_grid", "grid_frames", "grid_points", "point_id", "run_grid_point", "select_deployments",
           "sweep_grid"]

_IDENTITY = ("workload", "label", "rate", *CONFIG_COLS, "n_gpus")
_LISTS = ("ttft_q", "tpot_q")


def deployment_grid(base: SimConfig, splits=((1, 1),), chunk_budgets=(512,), link_gbs=(None,)) -> dict:
    """Deployments at equal GPU count: for each ``(n_prefill, n_decode)`` split, colocated and chunked
    (one per chunk budget) with ``n_prefill + n_decode`` instances, and disaggregated (one per link
    bandwidth; ``None`` keeps ``base.link_gbs``). Returns :attr:`SimConfig.label` -> SimConfig; other
    fields from ``base``."""
    configs = []
    for n_p, n_d in splits:
        n = n_p + n_d
        configs.append(replace(base, policy="colocated", n_instances=n))
        configs += [replace(base, policy="chunked", n_instances=n, chunk_budget=cb) for cb in chunk_budgets]
        configs += [replace(base, policy="disaggregated", n_prefill=n_p, n_decode=n_d,
                            link_gbs=base.link_gbs if bw is None else bw) for bw in link_gbs]
    return {c.label: c for c in configs}


def _cost_dict(cost: CostModel | PoolCosts) -> dict:
    pools = PoolCosts.of(cost)
    return {"prefill": pools.prefill.as_dict(), "decode": pools.decode.as_dict()}


def grid_points(workloads: dict, deployments: dict, rates, cost: CostModel | PoolCosts, slo: SLO, *,
                n_quantiles: int = 101, n_batches: int = 30) -> list[dict]:
    """One JSON-able dict per (workload label, deployment label, rate): the labels, the rate and every
    input that determines the point (workload and deployment fields, costs, SLOs, output sizes)."""
    return [{"workload": w, "deployment": d, "rate": float(r), "workload_config": asdict(wc),
             "sim_config": asdict(dc), "cost": _cost_dict(cost), "slo": asdict(slo), "n_quantiles": n_quantiles,
             "n_batches": n_batches}
            for w, wc in workloads.items() for r in rates for d, dc in deployments.items()]


def point_id(point: dict) -> str:
    """SHA-256 (16 hex digits) of a point's sorted JSON: its identity in the rows."""
    return hashlib.sha256(json.dumps(point, sort_keys=True, default=list).encode()).hexdigest()[:16]


def run_grid_point(point: dict, *, workloads: dict, deployments: dict, cost: CostModel | PoolCosts,
                   slo: SLO) -> pd.DataFrame:
    """Simulate one point of :func:`grid_points`; one row: identity columns (``workload``, ``label``,
    ``rate``, the config columns, ``point_id``), the :func:`~workbench.pd.metrics.summarize` columns,
    and lists ``ttft_q`` / ``tpot_q`` (``n_quantiles`` quantiles, ms) and ``good_batches``
    (:func:`~workbench.pd.verdict.good_batch_means`). ``workloads``/``deployments``: label -> config,
    the dicts the points were made from."""
    cfg = deployments[point["deployment"]]
    df = simulate(generate_workload(replace(workloads[point["workload"]], rate=point["rate"])), cfg, cost)
    q = np.linspace(0.0, 1.0, point["n_quantiles"])
    tpot = df["tpot_ms"].to_numpy(np.float64)
    row = {"workload": point["workload"], "label": point["deployment"], "rate": point["rate"],
           **{c: df[c].iloc[0] for c in (*CONFIG_COLS, "n_gpus")}, "point_id": point_id(point)}
    row |= summarize(df, slo).iloc[0].to_dict()
    row |= {"ttft_q": np.nanquantile(df["ttft_ms"].to_numpy(np.float64), q).tolist(),
            "tpot_q": (np.nanquantile(tpot, q) if np.isfinite(tpot).any() else np.full(q.size, np.nan)).tolist(),
            "good_batches": good_batch_means(df, slo, point["n_batches"])}
    return pd.DataFrame([row])


def grid_frames(rows: pd.DataFrame, points: list[dict] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(quantiles, summary)`` from :func:`run_grid_point` rows: ``summary`` one row per point
    (``good_batches`` kept for :func:`~workbench.pd.verdict.compare_deployments`), ``quantiles`` one
    row per (point, ``q``) with ``ttft_ms`` and ``tpot_ms``. With ``points``, only their rows, in
    their order, the last stored row of each (a store returns every run's rows)."""
    if points is not None:
        ids = [point_id(p) for p in points]
        last = rows.drop_duplicates("point_id", keep="last").set_index("point_id")
        if missing := [p for p, i in zip(points, ids) if i not in last.index]:
            raise ValueError(f"{len(missing)} points have no row (first: {missing[0]['deployment']} at "
                             f"{missing[0]['rate']} req/s); run them first")
        rows = last.loc[ids].reset_index()
    summary = rows.drop(columns=[c for c in _LISTS if c in rows]).reset_index(drop=True)
    sizes = rows["ttft_q"].map(len).to_numpy()
    quantiles = rows.loc[np.repeat(rows.index.to_numpy(), sizes), list(_IDENTITY)].reset_index(drop=True)
    quantiles["q"] = np.concatenate([np.linspace(0.0, 1.0, k) for k in sizes])
    quantiles["ttft_ms"] = np.concatenate([np.asarray(x, np.float64) for x in rows["ttft_q"]])
    quantiles["tpot_ms"] = np.concatenate([np.asarray(x, np.float64) for x in rows["tpot_q"]])
    return quantiles, summary


def sweep_grid(workloads: dict, deployments: dict, cost: CostModel | PoolCosts, rates, slo: SLO,
               keep: str = "quantiles", n_quantiles: int = 101) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate every (workload label, deployment label, rate) in memory; returns ``(detail, summary)``
    as :func:`grid_frames` (``keep="quantiles"``), with per-request rows as ``detail``
    (``"requests"``), or an empty ``detail`` (``"none"``). For a grid that resumes, call
    :func:`run_grid_point` through ``workbench.results.sweep``."""
    if keep not in ("quantiles", "requests", "none"):
        raise ValueError(f"keep={keep!r}; choose 'quantiles', 'requests' or 'none'")
    points = grid_points(workloads, deployments, rates, cost, slo, n_quantiles=n_quantiles)
    rows = pd.concat([run_grid_point(p, workloads=workloads, deployments=deployments, cost=cost, slo=slo)
                      for p in points], ignore_index=True)
    quantiles, summary = grid_frames(rows)
    if keep == "quantiles":
        return quantiles, summary
    if keep == "none":
        return pd.DataFrame(), summary
    details = []
    for p in points:
        wl = generate_workload(replace(workloads[p["workload"]], rate=p["rate"]))
        df = simulate(wl, deployments[p["deployment"]], cost)
        df["workload"], df["label"], df["rate"] = p["workload"], p["deployment"], p["rate"]
        details.append(df)
    return pd.concat(details, ignore_index=True), summary


def select_deployments(df: pd.DataFrame, n_prefill: int, n_decode: int, chunk_budget: int,
                       link_gbs: float) -> pd.DataFrame:
    """Rows of a grid frame for one slider setting: colocated and chunked with ``n_prefill + n_decode``
    GPUs (chunked at ``chunk_budget``) and disaggregated ``n_prefill``P + ``n_decode``D at ``link_gbs``."""
    n = n_prefill + n_decode
    pol, gpus = df["policy"], df["n_gpus"]
    keep = ((pol == "colocated") & (gpus == n)) | ((pol == "chunked") & (gpus == n)
                                                  & (df["chunk_budget"] == chunk_budget))
    keep |= ((pol == "disaggregated") & (df["n_prefill"] == n_prefill) & (df["n_decode"] == n_decode)
             & np.isclose(df["link_gbs"], link_gbs))
    return df[keep]
