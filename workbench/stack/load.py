"""The stacked deployments under load: cost models from the measured points, simulated goodput.

Deployments at equal GPU count, for each (n_prefill, n_decode) split: every (precision, spec) pair
colocated on ``n_prefill + n_decode`` instances and disaggregated ``n_prefill`` P + ``n_decode`` D,
plus the mixed deployment "base-precision prefill, W4A16 + spec decode" (disaggregated). Arrival
rates are fractions of the baseline's capacity (base precision, no spec, colocated, first split),
its saturation throughput in the simulator; SLOs are ``StackConfig.slo`` or derived from the
baseline (:func:`workbench.stack.serving.derive_slo`), each scaled by ``slo_scales``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from workbench.pd.costmodel import CostModel, PoolCosts
from workbench.pd.metrics import summarize
from workbench.pd.sim import SLO, SimConfig, generate_workload, simulate
from workbench.stack.config import StackConfig, combo_label
from workbench.stack.serving import (
    capacity_rps,
    cost_from_row,
    derive_slo,
    sim_config,
    speculative_cost,
)

__all__ = ["Deployment", "base_label", "deployments", "device_memory_gb", "point_row", "pool_costs",
           "simulate_deployment", "spec_alpha"]

_SHORT = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}


def base_label(points: pd.DataFrame) -> str:
    """``"bf16"`` / ``"fp32"``: the short name of the base precision the points ran in."""
    dt = str(points["compute_dtype"].iloc[0])
    return _SHORT.get(dt, dt)


def point_row(points: pd.DataFrame, quantized: bool, speculative: bool) -> pd.Series:
    """The measured row of one (precision, speculative) point; KeyError naming it when missing."""
    sel = points[(points["quantized"].astype(bool) == quantized) & (points["speculative"].astype(bool) == speculative)]
    if sel.empty:
        raise KeyError(f"no measured point quantized={quantized}, speculative={speculative}; run it first")
    return sel.iloc[-1]


def spec_alpha(points: pd.DataFrame, cfg: StackConfig, quantized: bool) -> float:
    """The alpha a speculative pool runs at: ``cfg.alpha`` (what-if) or the point's measured one."""
    if cfg.alpha is not None:
        return float(cfg.alpha)
    a = float(point_row(points, quantized, True)["alpha"])
    return a if np.isfinite(a) else 0.0


def pool_costs(points: pd.DataFrame, cfg: StackConfig, alpha: float | None = None, k: int | None = None,
               verify_scale: dict | None = None) -> dict:
    """``{(quantized, speculative): CostModel}`` from the measured points. Speculative pools use
    ``alpha`` / ``k`` when given (the what-if grid; the verify line is then scaled by
    ``verify_scale[quantized]``, the batch-1 verify time at that k over the one at ``cfg.k``)."""
    out = {}
    for q in (False, True):
        plain = point_row(points, q, False)
        base = cost_from_row(plain, "cost_", source=f"fit {'W4A16' if q else 'base'}")
        out[(q, False)] = base
        sp = point_row(points, q, True)
        draft = cost_from_row(sp, "draft_cost_", source="draft fit")
        scale = 1.0 if verify_scale is None else verify_scale[q]
        verify = tuple(scale * float(sp[f"verify_v{i}"]) for i in range(3))
        out[(q, True)] = speculative_cost(base, draft, verify, k or cfg.k,
                                          spec_alpha(points, cfg, q) if alpha is None else alpha)
    return out


def device_memory_gb(device) -> float:
    """Memory of one instance: the CUDA device's total, else the host's physical memory (GB)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


@dataclass(frozen=True)
class Deployment:
    """One simulated deployment: its label, the combination it stands for, its sim config and costs."""

    label: str
    quantized: bool
    speculative: bool
    disaggregated: bool
    mixed: bool  # base-precision prefill pool, W4A16 + spec decode pool
    n_prefill: int
    n_decode: int
    sim: SimConfig
    cost: CostModel | PoolCosts  # one model for every instance, or per-pool costs (the mixed deployment)


def _capacity_tokens(row: pd.Series, cfg: StackConfig, mem_gb: float) -> int:
    free = mem_gb * 1e9 * cfg.mem_util - float(row["weight_gb"]) * 1e9
    if free <= 0:
        raise ValueError(f"the weights ({row['weight_gb']:.2f} GB) do not fit in {mem_gb:.1f} GB x mem_util "
                         f"{cfg.mem_util}; raise StackConfig.mem_gb or mem_util")
    need = cfg.workload.prompt.max + cfg.workload.output.max
    return max(int(free // float(row["kv_bytes_per_token"])), need)


def deployments(points: pd.DataFrame, cfg: StackConfig, mem_gb: float, costs: dict | None = None,
                combos=None) -> list[Deployment]:
    """Every deployment of every split (module docstring); ``costs`` from :func:`pool_costs`
    (default: the measured ones); ``combos``: restrict to these ``(quantized, speculative)`` pairs
    (and drop the mixed deployment unless both speculative pairs are kept)."""
    costs = costs or pool_costs(points, cfg)
    base = base_label(points)
    keep = set(combos) if combos is not None else {(q, s) for q in (False, True) for s in (False, True)}
    out = []
    for n_p, n_d in cfg.splits:
        for (q, s), cost in costs.items():
            if (q, s) not in keep:
                continue
            row = point_row(points, q, s)
            kw = {"kv_capacity_tokens": _capacity_tokens(row, cfg, mem_gb),
                  "kv_bytes_per_token": float(row["kv_bytes_per_token"]), "link_gbs": cfg.link_gbs,
                  "link_latency_ms": cfg.link_latency_ms}
            for dis in (False, True):
                sim = sim_config("disaggregated" if dis else "colocated", n_p, n_d, **kw)
                label = combo_label(q, s, dis, base) + (f" {n_p}P+{n_d}D" if dis else f" x{n_p + n_d}")
                out.append(Deployment(label, q, s, dis, False, n_p, n_d, sim, cost))
        if {(False, True), (True, True)} <= keep:
            row = point_row(points, True, True)
            sim = sim_config("disaggregated", n_p, n_d, kv_capacity_tokens=_capacity_tokens(row, cfg, mem_gb),
                             kv_bytes_per_token=float(row["kv_bytes_per_token"]), link_gbs=cfg.link_gbs,
                             link_latency_ms=cfg.link_latency_ms)
            cost = PoolCosts(prefill=costs[(False, True)], decode=costs[(True, True)])
            out.append(Deployment(f"{base} prefill / W4A16 + spec decode {n_p}P+{n_d}D", True, True, True, True,
                                  n_p, n_d, sim, cost))
    return out


def baseline_capacity(points: pd.DataFrame, cfg: StackConfig, mem_gb: float) -> float:
    """Saturation throughput (req/s) of the baseline deployment (base, no spec, colocated, first split)."""
    dep = next(d for d in deployments(points, cfg, mem_gb, combos=[(False, False)]) if not d.disaggregated)
    return capacity_rps(cfg.workload, dep.sim, dep.cost)


def study_slo(points: pd.DataFrame, cfg: StackConfig) -> SLO:
    """``cfg.slo``, or SLOs derived from the baseline's fitted costs."""
    return cfg.slo or derive_slo(pool_costs(points, cfg)[(False, False)], cfg.workload)


def simulate_deployment(dep: Deployment, cfg: StackConfig, rates, slo: SLO) -> pd.DataFrame:
    """Summaries (:func:`workbench.pd.metrics.summarize`) of ``dep`` at every rate (req/s) and every
    SLO scale; columns ``label``, the combination flags, ``n_prefill``, ``n_decode``, ``n_gpus``,
    ``rate``, ``load`` (rate / baseline capacity, from ``cfg.load_fractions``), ``slo_scale``."""
    rows = []
    for frac, rate in zip(cfg.load_fractions, rates):
        df = simulate(generate_workload(replace(cfg.workload, rate=float(rate), seed=cfg.seed)), dep.sim, dep.cost)
        for sc in cfg.slo_scales:
            s = SLO(*(None if v is None else v * sc for v in (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms)))
            summ = summarize(df, s).iloc[0].to_dict()
            rows.append({"label": dep.label, "quantized": dep.quantized, "speculative": dep.speculative,
                         "disaggregated": dep.disaggregated, "mixed": dep.mixed, "n_prefill": dep.n_prefill,
                         "n_decode": dep.n_decode, "n_gpus": dep.sim.n_gpus, "rate": float(rate), "load": frac,
                         "slo_scale": sc} | summ)
    return pd.DataFrame(rows)
