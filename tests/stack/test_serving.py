"""Cost models of the stacked deployments: speculative pool arithmetic, per-pool costs, fits, SLOs."""

from dataclasses import replace

import pandas as pd
import pytest

from workbench.pd.costmodel import CostModel, PoolCosts, speculative_decode_cost
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload, simulate
from workbench.spec.theory import expected_tokens_per_step
from workbench.stack.serving import derive_slo, fit_line, sim_config, speculative_cost

TARGET = CostModel(a=5.0, b=0.1, c=1e-4, d=10.0, e=0.5, f=0.01)
DRAFT = CostModel(a=1.0, b=0.01, c=1e-5, d=1.0, e=0.05, f=0.001)


def test_speculative_cost_known_answer():
    # k = 2, alpha = 0.5: tau = (1 - 0.5^3) / 0.5 = 1.75; verify line (12, 0.6, 0.02)
    c = speculative_cost(TARGET, DRAFT, (12.0, 0.6, 0.02), k=2, alpha=0.5)
    assert (c.a, c.b, c.c) == pytest.approx((6.0, 0.11, 1.1e-4))
    assert (c.d, c.e, c.f) == pytest.approx(((2 * 1.0 + 12) / 1.75, (2 * 0.05 + 0.6) / 1.75, (2 * 0.001 + 0.02) / 1.75))


def test_speculative_cost_matches_pd_when_lines_are_proportional():
    """Reference cross-check: a draft line c x the target's decode line and a verify line v x it give
    workbench.pd's speculative_decode_cost(cost, tau, k, draft_ratio=c, verify_ratio=v) exactly."""
    c, v, k, alpha = 0.15, 1.3, 4, 0.7
    draft = CostModel(a=1.0, b=0.01, c=1e-5, d=c * TARGET.d, e=c * TARGET.e, f=c * TARGET.f)
    mine = speculative_cost(TARGET, draft, (v * TARGET.d, v * TARGET.e, v * TARGET.f), k=k, alpha=alpha)
    ref = speculative_decode_cost(TARGET, tau=float(expected_tokens_per_step(alpha, k)), k=k, draft_ratio=c,
                                  verify_ratio=v)
    assert (mine.d, mine.e, mine.f) == pytest.approx((ref.d, ref.e, ref.f), rel=1e-12)
    assert (mine.a, mine.b) == pytest.approx((TARGET.a + draft.a, TARGET.b + draft.b))  # + the draft's prefill


def _wl():
    return generate_workload(WorkloadConfig(80, rate=20.0, prompt=LengthDist("fixed", 64), output=LengthDist("fixed", 16)))


def _sim(policy, cost):
    cfg = sim_config(policy, 1, 1, kv_capacity_tokens=100_000, kv_bytes_per_token=1e5, link_gbs=50.0,
                     link_latency_ms=0.01)
    return simulate(_wl(), cfg, cost)


def test_mixed_pools_use_their_own_lines():
    """The mixed deployment's PoolCosts: a faster decode pool shortens every TPOT and delays no first
    token; a slower prefill pool delays every first token."""
    base = _sim("disaggregated", TARGET)
    fast_d = _sim("disaggregated", PoolCosts(TARGET, replace(TARGET, d=2.0)))
    slow_p = _sim("disaggregated", PoolCosts(replace(TARGET, a=25.0), TARGET))
    assert (fast_d["tpot_ms"] < base["tpot_ms"]).all() and (fast_d["ttft_ms"] <= base["ttft_ms"] + 1e-9).all()
    assert (slow_p["ttft_ms"] > base["ttft_ms"]).all()


def test_fit_line_recovers_an_exact_line():
    df = pd.DataFrame({"batch": [1, 2, 4, 1, 2, 4], "kv_tokens": [64, 128, 256, 192, 384, 768]})
    df["ms"] = 3.0 + 0.5 * df["batch"] + 0.01 * df["kv_tokens"]
    assert fit_line(df) == pytest.approx((3.0, 0.5, 0.01), rel=1e-6)


def test_derive_slo_known_answer():
    wl = WorkloadConfig(20, prompt=LengthDist("fixed", 100), output=LengthDist("fixed", 10))
    slo = derive_slo(TARGET, wl)
    assert slo.ttft_ms == pytest.approx(round(5 * (5 + 0.1 * 100 + 1e-4 * 100**2), 1))
    assert slo.tpot_ms == pytest.approx(round(3 * (10 + 0.5 + 0.01 * 105), 2))
