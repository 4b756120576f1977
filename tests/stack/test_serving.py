"""Cost models of the stacked deployments: speculative pool arithmetic, per-pool costs, fits, SLOs."""

from dataclasses import replace

import pandas as pd
import pytest

from workbench.pd.costmodel import CostModel
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload, simulate
from workbench.stack.serving import derive_slo, fit_line, pool_cost, sim_config, speculative_cost

TARGET = CostModel(a=5.0, b=0.1, c=1e-4, d=10.0, e=0.5, f=0.01)
DRAFT = CostModel(a=1.0, b=0.01, c=1e-5, d=1.0, e=0.05, f=0.001)


def test_speculative_cost_known_answer():
    # k = 2, alpha = 0.5: tau = (1 - 0.5^3) / 0.5 = 1.75; verify line (12, 0.6, 0.02)
    c = speculative_cost(TARGET, DRAFT, (12.0, 0.6, 0.02), k=2, alpha=0.5)
    assert (c.a, c.b, c.c) == pytest.approx((6.0, 0.11, 1.1e-4))
    assert (c.d, c.e, c.f) == pytest.approx(((2 * 1.0 + 12) / 1.75, (2 * 0.05 + 0.6) / 1.75, (2 * 0.001 + 0.02) / 1.75))


def test_pool_cost_takes_prefill_and_decode_lines():
    c = pool_cost(TARGET, DRAFT)
    assert (c.a, c.b, c.c, c.d, c.e, c.f) == (5.0, 0.1, 1e-4, 1.0, 0.05, 0.001)


def _wl():
    return generate_workload(WorkloadConfig(80, rate=20.0, prompt=LengthDist("fixed", 64), output=LengthDist("fixed", 16)))


def _sim(policy, cost):
    cfg = sim_config(policy, 1, 1, kv_capacity_tokens=100_000, kv_bytes_per_token=1e5, link_gbs=50.0,
                     link_latency_ms=0.01)
    return simulate(_wl(), cfg, cost)


@pytest.mark.parametrize("policy", ["colocated", "disaggregated"])
def test_equal_pool_costs_equal_single_cost(policy):
    """Per-pool costs that are equal give exactly the single-cost run (a pool_cost bug that mixed up the
    lines fails here: swapping in DRAFT's prefill changes every TTFT)."""
    a, b = _sim(policy, TARGET), _sim(policy, pool_cost(TARGET, TARGET))
    pd.testing.assert_frame_equal(a, b)


def test_disaggregated_pools_use_their_own_lines():
    """A faster decode pool shortens every TPOT and delays no first token; a slower prefill pool delays
    every first token (the lines are not swapped)."""
    base = _sim("disaggregated", TARGET)
    fast_d = _sim("disaggregated", pool_cost(TARGET, replace(TARGET, d=2.0)))
    slow_p = _sim("disaggregated", pool_cost(replace(TARGET, a=25.0), TARGET))
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
