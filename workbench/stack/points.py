"""One measured point of the stacked study: a (precision, speculative) pair on the study device.

A point builds its engines (the target in its precision, and the draft when speculative: in the base
precision, or also W4A16 with ``StackConfig.quantize_draft``), runs the fixed
request at batch 1 (:func:`workbench.stack.batch1.run_batch1`), records peak memory, and profiles the
engines for the simulator: the target's prefill and decode lines (plain points), or the draft's lines,
the target's verify line (``k + 1``-token steps) and the batch-1 verify step of every what-if ``k``
(speculative points). Disaggregation needs no measurement of its own: its batch-1 rows add the KV
transfer to the colocated ones and its load rows come from the simulator.
"""

from __future__ import annotations

import gc
import time

import torch

from workbench.stack.batch1 import run_batch1, step_ms, step_times
from workbench.stack.config import StackConfig
from workbench.stack.engines import (
    MemoryProbe,
    build_engine,
    dequantized_copy_bytes,
    footprint_bytes,
    resized,
)
from workbench.stack.serving import cost_to_row, fit_line, profile_costs, profile_verify

__all__ = ["POINT_FIELDS", "point_configs", "run_point"]

# StackConfig fields a measured point depends on (its key in the results store)
POINT_FIELDS = ("target", "draft", "quant_method", "group_size", "quantize_draft", "k", "alpha", "prompt_len",
                "gen_len", "repeats", "profile", "whatif_ks", "seed")


def point_configs(cfg: StackConfig, device: str, dtype: str) -> list[dict]:
    """The four measured points of ``cfg`` (plain first), each a JSON-able dict: ``quantized``,
    ``speculative``, the :data:`POINT_FIELDS` of ``cfg`` and the device / dtype."""
    row = cfg.to_row()
    common = {f: row[f] for f in POINT_FIELDS} | {"device": device, "dtype": dtype}
    return [{"quantized": q, "speculative": s, **common} for s in (False, True) for q in (False, True)]


def _engines(target, draft, cfg: StackConfig, quantized: bool, speculative: bool, device, dtype):
    kw = {"quant_method": cfg.quant_method, "group_size": cfg.group_size, "max_batch": 1,
          "max_seq": cfg.max_seq, "device": device, "dtype": dtype, "seed": cfg.seed}
    t = build_engine(target, quantized, **kw)
    d = build_engine(draft, quantized and cfg.quantize_draft, **(kw | {"seed": cfg.seed + 1})) if speculative else None
    return t, d


def _profile(t_eng, d_eng, cfg: StackConfig, clock) -> dict:
    pc = cfg.profile
    big = resized(t_eng, pc.max_batch, max(pc.max_seq, max(pc.context_lens) + max(cfg.whatif_ks) + 2))
    out: dict = {}
    if d_eng is None:
        cost, _ = profile_costs(big, pc, clock)
        return cost_to_row(cost, "cost_")
    d_big = resized(d_eng, pc.max_batch, pc.max_seq)
    out |= cost_to_row(profile_costs(d_big, pc, clock)[0], "draft_cost_")
    ver = profile_verify(big, cfg.k, pc.decode_batches, pc.context_lens, pc.repeats, clock)
    out |= dict(zip(("verify_v0", "verify_v1", "verify_v2"), fit_line(ver)))
    ctx = cfg.prompt_len + cfg.gen_len // 2
    ks = sorted(set(cfg.whatif_ks) | {cfg.k})
    tt = step_times(t_eng, [1] + [k + 1 for k in ks], ctx, repeats=pc.repeats, clock=clock)
    out |= {f"verify_ms_k{k}": tt[k + 1] for k in ks}
    out["target_step_ms_whatif"] = tt[1]
    out["draft_step_ms_whatif"] = step_ms(d_eng, 1, ctx, repeats=pc.repeats, clock=clock)
    return out


def run_point(point: dict, target, draft, prompt: list[int], cfg: StackConfig, *, device=None, dtype=None,
              clock=time.perf_counter) -> dict:
    """Measure one point (a dict from :func:`point_configs`); ``target`` / ``draft``: HF modules or HF
    configs (random init); ``prompt``: the fixed request's token ids.

    Returns one row: the point's fields, the :func:`~workbench.stack.batch1.run_batch1` columns,
    ``peak_mem_gb`` with ``mem_source`` ("measured: CUDA peak allocated" or "footprint model: engine
    tensors"), ``weight_gb`` (engine tensors without the KV cache, quantized matmuls in their
    quantized format), ``cpu_copy_gb`` (the dequantized copies a CPU engine keeps beside them, not in
    ``weight_gb``; :func:`~workbench.stack.engines.dequantized_copy_bytes`), ``kv_bytes_per_token`` (target +
    draft), ``compute_dtype``, ``device``, ``weight_bytes_per_step`` (the target's, read by every
    decode step) and the fitted cost coefficients (``cost_a..f``, or
    ``draft_cost_a..f``, ``verify_v0..2``, ``verify_ms_k<k>``, ``target_step_ms_whatif``,
    ``draft_step_ms_whatif``)."""
    q, s = bool(point["quantized"]), bool(point["speculative"])
    with MemoryProbe(device or "cpu") as probe:
        t_eng, d_eng = _engines(target, draft, cfg, q, s, device, dtype)
        row = run_batch1(t_eng, d_eng, prompt, gen_len=cfg.gen_len, k=cfg.k, alpha=cfg.alpha,
                         repeats=cfg.repeats, seed=cfg.seed, clock=clock)
    engines = [e for e in (t_eng, d_eng) if e is not None]
    fp = sum(footprint_bytes(e) for e in engines)
    kv_alloc = sum(e.kv_bytes_per_token() * e.max_batch * e.s_cache for e in engines)
    row.pop("tokens", None)
    row = dict(point) | row | {"quantized": q, "speculative": s, "peak_mem_gb": (probe.peak_bytes or fp) / 1e9,
            "mem_source": "measured: CUDA peak allocated" if probe.peak_bytes else "footprint model: engine tensors",
            "weight_gb": (fp - kv_alloc) / 1e9,
            "cpu_copy_gb": sum(dequantized_copy_bytes(e) for e in engines) / 1e9, "kv_bytes_per_token": float(sum(e.kv_bytes_per_token() for e in engines)),
            "compute_dtype": str(t_eng.dtype).removeprefix("torch."), "device": str(t_eng.device),
            "weight_bytes_per_step": int(t_eng.weight_bytes())}
    row |= _profile(t_eng, d_eng, cfg, clock)
    del t_eng, d_eng, engines
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row
