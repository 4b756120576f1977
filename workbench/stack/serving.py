"""Step-cost models of the stacked deployments and the simulated load on them.

Each precision's engines are profiled on the study device (:func:`workbench.pd.profile.run_profile`)
and fitted (:meth:`workbench.pd.costmodel.CostModel.fit`), so W4A16 changes the costs the simulator
uses. A speculative decode pool is costed from three measured lines (mean-field, Leviathan et al.
2023 i.i.d. acceptance): a step of every running sequence is ``k`` draft decode steps plus one target
verify step of ``k + 1`` tokens, and emits ``tau = (1 - alpha^(k+1)) / (1 - alpha)`` tokens per
sequence on average, so per emitted token::

    decode_ms(B, K) = [k (d_q + e_q B + f_q K) + (v0 + v1 B + v2 K)] / tau

(``d_q, e_q, f_q``: the draft's decode line; ``v0, v1, v2``: the target's verify line, fitted to
measured ``k + 1``-token steps). The draft also prefills every prompt: its prefill line adds to the
target's. With a draft line ``c`` times the target's decode line and a verify line ``verify_ratio``
times it, this is :func:`workbench.pd.costmodel.speculative_decode_cost` (tested); the measured lines
keep how the draft's and the verify step's costs grow with the batch. Disaggregated pools with their
own costs (e.g. bf16 prefill, W4A16 + spec decode) are :class:`workbench.pd.costmodel.PoolCosts`.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from workbench.pd.costmodel import CostModel, PoolCosts
from workbench.pd.profile import ProfileConfig, run_profile
from workbench.pd.sim import SLO, SimConfig, WorkloadConfig, generate_workload, simulate
from workbench.spec.theory import expected_tokens_per_step

__all__ = ["COST_FIELDS", "capacity_rps", "cost_from_row", "cost_to_row", "derive_slo", "fit_line",
           "profile_costs", "profile_verify", "sim_config", "speculative_cost"]

COST_FIELDS = ("a", "b", "c", "d", "e", "f")


def cost_to_row(cost: CostModel, prefix: str) -> dict:
    """``{prefix + "a": ..., ..., prefix + "f": ...}`` (the fitted line; the floor is zero for fits)."""
    return {prefix + k: float(getattr(cost, k)) for k in COST_FIELDS}


def cost_from_row(row, prefix: str, source: str = "") -> CostModel:
    """The :class:`CostModel` stored by :func:`cost_to_row` in ``row`` (a dict or Series)."""
    return CostModel(**{k: float(row[prefix + k]) for k in COST_FIELDS}, source=source)


def profile_costs(engine, config: ProfileConfig, clock=time.perf_counter) -> tuple[CostModel, pd.DataFrame]:
    """Profile ``engine`` (max_batch / max_seq large enough for ``config``) and fit the cost model."""
    prof = run_profile(engine, config, clock=clock)
    return CostModel.fit(prof), prof


def profile_verify(engine, k: int, batches=(1, 2, 4), contexts=(64, 192), repeats: int = 3,
                   clock=time.perf_counter) -> pd.DataFrame:
    """Times (ms, median of ``repeats``) of verify steps: ``k + 1`` tokens appended to each of
    ``batch`` slots holding ``context`` tokens, greedy argmax to the host, as a speculative decode
    pool's target runs them. Rows ``batch``, ``kv_tokens`` (= batch x context), ``ms``."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for b in batches:
        slots = torch.arange(b).flip(0)
        for L in contexts:
            for s in range(b):
                engine.truncate_slot(s, 0)
            engine.extend_batch(slots, torch.randint(0, engine.vocab_size, (b, L), generator=g))
            tok = torch.randint(0, engine.vocab_size, (b, k + 1), generator=g)
            ts = []
            for i in range(repeats + 1):  # the first run warms up (graph capture)
                engine.synchronize()
                t0 = clock()
                engine.extend_batch(slots, tok).argmax(-1).tolist()
                engine.synchronize()
                if i:
                    ts.append(1e3 * (clock() - t0))
                for s in range(b):
                    engine.truncate_slot(s, L)
            rows.append({"batch": b, "context": L, "kv_tokens": b * L, "ms": float(np.median(ts))})
    return pd.DataFrame(rows)


def fit_line(df: pd.DataFrame) -> tuple[float, float, float]:
    """Non-negative least squares ``ms = v0 + v1 * batch + v2 * kv_tokens`` with relative weights
    (as :meth:`CostModel.fit`); ``(v0, v1, v2)`` in ms, ms per sequence, ms per cached token."""
    from scipy.optimize import nnls

    x = np.column_stack([np.ones(len(df)), df["batch"].to_numpy(float), df["kv_tokens"].to_numpy(float)])
    y = df["ms"].to_numpy(float)
    sol, _ = nnls(x / y[:, None], np.ones_like(y))
    return float(sol[0]), float(sol[1]), float(sol[2])


def speculative_cost(target: CostModel, draft: CostModel, verify: tuple[float, float, float], k: int,
                     alpha: float) -> CostModel:
    """Cost model of a speculative pool (module docstring): prefill = target + draft prefill lines;
    decode per emitted token = (k draft decode steps + one verify step) / tau(alpha, k)."""
    tau = float(expected_tokens_per_step(min(max(alpha, 0.0), 1.0), k))
    v0, v1, v2 = verify
    return CostModel(a=target.a + draft.a, b=target.b + draft.b, c=target.c + draft.c,
                     d=(k * draft.d + v0) / tau, e=(k * draft.e + v1) / tau, f=(k * draft.f + v2) / tau,
                     source=f"speculative k={k} alpha={alpha:.3f} tau={tau:.2f}: (k draft + verify) / tau")


def sim_config(policy: str, n_prefill: int, n_decode: int, *, kv_capacity_tokens: int, kv_bytes_per_token: float,
               link_gbs: float, link_latency_ms: float, max_batch: int = 256) -> SimConfig:
    """The simulator deployment: colocated with ``n_prefill + n_decode`` instances, or disaggregated."""
    n = n_prefill + n_decode
    return SimConfig(policy=policy, n_instances=n, n_prefill=n_prefill, n_decode=n_decode, max_batch=max_batch,
                     kv_capacity_tokens=int(kv_capacity_tokens), kv_bytes_per_token=float(kv_bytes_per_token),
                     link_gbs=link_gbs, link_latency_ms=link_latency_ms)


def derive_slo(baseline: CostModel, workload: WorkloadConfig) -> SLO:
    """SLOs scaled to the baseline on this device: TTFT <= 5 x its prefill time of the median prompt,
    TPOT <= 3 x its batch-1 decode step at the median context (for a CPU, where fixed ms SLOs such as
    DistServe's 400 / 40 ms for 7B chat do not apply)."""
    wl = generate_workload(replace(workload, n_requests=min(workload.n_requests, 512)))
    p, o = float(np.median(wl.prompt_len)), float(np.median(wl.output_len))
    ttft = 5.0 * float(baseline.prefill_ms(p, p * p))
    tpot = 3.0 * float(baseline.decode_ms(1, p + o / 2))
    return SLO(ttft_ms=round(ttft, 1), tpot_ms=round(tpot, 2))


def capacity_rps(workload: WorkloadConfig, config: SimConfig, cost: CostModel | PoolCosts) -> float:
    """Saturation throughput (req/s) of a deployment: its throughput when every request arrives at
    once (a rate far above what it serves)."""
    wl = replace(workload, rate=1e6)
    df = simulate(wl, config, cost)
    return float(len(df) / (df["finish_s"].max() - df["arrival_s"].min()))
