"""``run_stack``: the stacked study end to end, resumable through the results store.

Three grids, each a :func:`workbench.results.sweep` when ``name`` is given: the four measured points
(``<name>``: engines, batch-1 request, memory, profiles), the simulated load grid (``<name>_load``:
one point per deployment, every rate and SLO scale) and the what-if load grid (``<name>_whatif``: one
point per (alpha, k), the speculative deployments of the first split at SLO scale 1). The simulated
grids' data identity is a digest of the measured points they are computed from, so new measurements
never reuse old simulations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial

import pandas as pd
import torch

from workbench.models import is_random
from workbench.pd.loop import clock_for
from workbench.pd.sim import SLO
from workbench.stack.config import StackConfig
from workbench.stack.engines import is_config
from workbench.stack.load import (
    baseline_capacity,
    deployments,
    device_memory_gb,
    point_row,
    pool_costs,
    simulate_deployment,
    study_slo,
)
from workbench.stack.points import point_configs, run_point
from workbench.stack.table import multiplicativity, stack_table, whatif_batch1

__all__ = ["StackResult", "default_clock", "run_stack"]


def default_clock(device):
    """The clock of :func:`workbench.pd.loop.clock_for`: this process's CPU time on a CPU (with one torch
    thread, the step's compute, robust to other jobs on a shared machine), wall time on a GPU."""
    return clock_for(device)[0]


@dataclass
class StackResult:
    """Frames of one study: ``points`` (4 measured rows), ``table`` (8 combinations + mixed),
    ``multiplicative``, ``load`` (simulated grid), ``whatif`` (batch-1 alpha x k predictions),
    ``whatif_load`` (simulated alpha x k grid); the ``slo`` at scale 1, the baseline ``capacity_rps``
    and the memory of one instance, ``mem_gb``, the KV capacities were computed from."""

    points: pd.DataFrame
    table: pd.DataFrame
    multiplicative: pd.DataFrame
    load: pd.DataFrame
    whatif: pd.DataFrame
    whatif_load: pd.DataFrame
    slo: SLO
    capacity_rps: float
    mem_gb: float
    config: StackConfig | None = None  # the study these frames come from


def _grid(name, configs, fn, provenance, root, progress) -> pd.DataFrame:
    if name is None:
        return _plain_grid(configs, fn)
    from workbench.results import sweep

    return sweep(name, configs, fn, provenance=provenance, root=root, progress=progress)


def _plain_grid(configs, fn) -> pd.DataFrame:
    frames = []
    for c in configs:
        out = fn(c)
        frames.append(out if isinstance(out, pd.DataFrame) else pd.DataFrame([out]))
    return pd.concat(frames, ignore_index=True)


def _provenance(target, draft, cfg: StackConfig, prompt: list[int], provenance: dict | None) -> dict:
    from workbench.results import collect_provenance, data_digest

    if provenance is not None:
        return provenance
    models = {n: m for n, m in (("target", target), ("draft", draft)) if isinstance(m, torch.nn.Module)}
    return collect_provenance(models or None, seed=cfg.seed, config=cfg.to_row(),
                              data={"prompt": data_digest(torch.tensor(prompt))},
                              random_configs={n: str(m) for n, m in (("target", target), ("draft", draft))
                                              if is_config(m)})


def _derived_provenance(prov: dict, points: pd.DataFrame, extra: dict) -> dict:
    from workbench.results import data_digest

    measured = points.drop(columns=[c for c in ("run_id", "point_key", "config_key") if c in points])
    return prov | {"data": {"points": data_digest(measured.astype(str)), **extra}}


def _load_fn(key: dict, points, cfg, mem_gb, rates, slo) -> pd.DataFrame:
    dep = next(d for d in deployments(points, cfg, mem_gb) if d.label == key["label"])
    return simulate_deployment(dep, cfg, rates, slo)


def _whatif_fn(key: dict, points, cfg, mem_gb, rates, slo) -> pd.DataFrame:
    a, k = float(key["alpha"]), int(key["k"])
    scale = {q: float(point_row(points, q, True)[f"verify_ms_k{k}"]) / float(point_row(points, q, True)[f"verify_ms_k{cfg.k}"])
             for q in (False, True)}
    costs = pool_costs(points, cfg, alpha=a, k=k, verify_scale=scale)
    one = replace(cfg, splits=cfg.splits[:1], slo_scales=(1.0,))
    deps = deployments(points, one, mem_gb, costs=costs, combos=[(False, True), (True, True)])
    return pd.concat([simulate_deployment(d, one, rates, slo) for d in deps], ignore_index=True).assign(alpha=a, k=k)


def run_stack(target, draft, cfg: StackConfig, prompt: list[int], *, device=None, dtype=None,
              clock=time.perf_counter, name: str | None = None, root=None, provenance: dict | None = None,
              progress: bool = False) -> StackResult:
    """Measure and simulate the 8 combinations of ``cfg`` for ``target`` with ``draft``.

    ``target`` / ``draft``: HF ``*ForCausalLM`` modules (real weights; real acceptance unless
    ``cfg.alpha``), or random-init ones (``load_model("random:<shape>")``) or HF configs (random init
    on the device; both timing only and need ``cfg.alpha``). ``prompt``: token ids
    of the fixed request (``cfg.prompt_len`` of them). ``device`` / ``dtype``: where and in what the
    engines run (default: the model's, or CUDA / bf16 when available for configs). ``clock``: seconds
    (``time.perf_counter``; on a shared CPU :class:`workbench.pd.loop.CPUClock`). ``name``: results
    store name (see the module docstring); ``provenance``: default built from the models and the prompt.

    Raises ValueError for a random-init target without ``cfg.alpha``, or a prompt of the wrong length.
    """
    if (is_config(target) or is_random(target)) and cfg.alpha is None:
        raise ValueError("a random-init target has no real acceptance; set StackConfig.alpha (the what-if "
                         "acceptance rate, e.g. the built-in model's measured alpha)")
    if len(prompt) != cfg.prompt_len:
        raise ValueError(f"prompt has {len(prompt)} tokens; StackConfig.prompt_len={cfg.prompt_len}")
    dev = device or (next(target.parameters()).device if isinstance(target, torch.nn.Module)
                     else ("cuda" if torch.cuda.is_available() else "cpu"))
    prov = _provenance(target, draft, cfg, prompt, provenance) if name else None
    dt = str(dtype or "auto")
    fn = partial(run_point, target=target, draft=draft, prompt=list(prompt), cfg=cfg, device=dev, dtype=dtype,
                 clock=clock)
    points = _grid(name, point_configs(cfg, str(dev), dt), fn, prov, root, progress)
    mem_gb = cfg.mem_gb or device_memory_gb(dev)
    slo, cap = study_slo(points, cfg), baseline_capacity(points, cfg, mem_gb)
    rates = [f * cap for f in cfg.load_fractions]
    sim_prov = _derived_provenance(prov, points, {"slo": str(slo)}) if name else None
    labels = [{"label": d.label} for d in deployments(points, cfg, mem_gb)]
    load = _grid(name and f"{name}_load", labels,
                 partial(_load_fn, points=points, cfg=cfg, mem_gb=mem_gb, rates=rates, slo=slo), sim_prov, root, progress)
    keys = [{"alpha": a, "k": k} for a in cfg.whatif_alphas for k in cfg.whatif_ks]
    whatif_load = _grid(name and f"{name}_whatif", keys,
                        partial(_whatif_fn, points=points, cfg=cfg, mem_gb=mem_gb, rates=rates, slo=slo),
                        sim_prov, root, progress)
    table = stack_table(points, load, cfg)
    return StackResult(points, table, multiplicativity(table), load, whatif_batch1(points, cfg), whatif_load,
                       slo, cap, mem_gb, cfg)
