"""Per-pool cost models (prefill pool and decode pool at their own precision, a speculative decode
pool): equal pools reproduce the single-model run exactly; each pool reads only its own phase."""

from dataclasses import replace

import numpy as np
import pytest

from workbench.pd import CostModel
from workbench.pd.costmodel import PoolCosts, speculative_decode_cost
from workbench.pd.sim import LengthDist, SimConfig, Workload, WorkloadConfig, simulate

BF16 = CostModel(a=2.0, b=0.02, c=1e-5, d=5.0, e=0.2, f=0.001, floor=(3.0, 0.0, 0.0, 4.0, 0.0, 0.002))
W4A16 = replace(BF16, d=1.6, e=0.2, f=0.001, floor=(3.0, 0.0, 0.0, 1.2, 0.0, 0.002), source="w4a16")
WL = WorkloadConfig(n_requests=400, rate=150.0, prompt=LengthDist("uniform", low=20, high=300),
                    output=LengthDist("uniform", low=1, high=120), seed=8)
POLICIES = ["colocated", "chunked", "disaggregated"]


def config(policy):
    return SimConfig(policy=policy, n_instances=2, n_decode=2, kv_capacity_tokens=800, chunk_budget=128)


@pytest.mark.parametrize("policy", POLICIES)
def test_equal_pool_costs_equal_single_precision_exactly(policy):
    """Under queueing and preemption, with token times recorded: PoolCosts(c, c) gives the frame of
    c alone, bit for bit; so does a prefill pool whose decode terms are garbage (the prefill side
    must read only a, b, c). A policy that times a decode step with the prefill pool fails here."""
    single = simulate(WL, config(policy), BF16, record_itl=True)
    assert single["n_preempt"].sum() > 0
    garbage = replace(BF16, d=99.0, e=9.0, f=1.0, floor=(*BF16.floor[:3], 50.0, 1.0, 1.0), source="other")
    for costs in (PoolCosts(BF16, BF16), PoolCosts(prefill=garbage, decode=BF16)):
        assert simulate(WL, config(policy), costs, record_itl=True).equals(single)


def test_decode_pool_precision_moves_only_the_decode_side():
    """Disaggregated, bf16 prefill pool and W4A16 decode pool: the prefill side is that of the bf16
    run; alone, a request's decode steps are W4A16's."""
    cfg = SimConfig(policy="disaggregated", kv_bytes_per_token=1e5, link_gbs=10)
    bf16, mixed = simulate(WL, cfg, BF16), simulate(WL, cfg, PoolCosts(prefill=BF16, decode=W4A16))
    np.testing.assert_array_equal(mixed["kv_ready_s"], bf16["kv_ready_s"])
    assert mixed["tpot_ms"].mean() < 0.97 * bf16["tpot_ms"].mean()  # 0.94 measured at this load
    L, n = 300, 20
    one = simulate(Workload([0.0], [L], [n]), cfg, PoolCosts(prefill=BF16, decode=W4A16))
    steps = [float(W4A16.decode_ms(1, L - 1 + j)) for j in range(n)]
    assert one["tpot_ms"][0] == pytest.approx(np.mean(steps[1:]), rel=1e-12)


@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_colocated_instance_takes_each_phase_from_its_pool(policy):
    L, n = 300, 30
    df = simulate(Workload([0.0], [L], [n]), SimConfig(policy=policy, chunk_budget=4096),
                  PoolCosts(prefill=BF16, decode=W4A16))
    assert df["ttft_ms"][0] == pytest.approx(float(BF16.prefill_ms(L, L * L)), rel=1e-12)
    assert df["tpot_ms"][0] == pytest.approx(np.mean([float(W4A16.decode_ms(1, L + j)) for j in range(n - 1)]),
                                             rel=1e-12)


def test_speculative_decode_pool_scales_decode_per_emitted_token():
    """Per emitted token: (k c + verify) / tau target steps (Leviathan et al. 2023, Theorem 3.8)."""
    spec = speculative_decode_cost(BF16, tau=3.2, k=4, draft_ratio=0.1, verify_ratio=1.3)
    s = (4 * 0.1 + 1.3) / 3.2
    assert spec.decode_ms(8, 4000) == pytest.approx(s * BF16.decode_ms(8, 4000), rel=1e-12)
    assert spec.prefill_ms(512, 512**2) == BF16.prefill_ms(512, 512**2)
    L, n = 300, 30
    df = simulate(Workload([0.0], [L], [n]), SimConfig(), PoolCosts(prefill=BF16, decode=spec))
    assert df["tpot_ms"][0] == pytest.approx(s * np.mean([float(BF16.decode_ms(1, L + j)) for j in range(n - 1)]),
                                             rel=1e-12)
    unit = speculative_decode_cost(BF16, tau=1.0, k=1, draft_ratio=0.0, verify_ratio=1.0)  # factor exactly 1
    assert simulate(WL, config("chunked"), unit).equals(simulate(WL, config("chunked"), BF16))


@pytest.mark.parametrize("kw, field", [({"tau": 0.9}, "tau"), ({"tau": 6.5}, "tau"), ({"k": 0}, "k="),
                                       ({"draft_ratio": -1}, "draft_ratio"), ({"verify_ratio": 0}, "verify_ratio")])
def test_speculative_decode_cost_rejects_bad_input(kw, field):
    args = {"tau": 2.0, "k": 5, "draft_ratio": 0.1} | kw
    with pytest.raises(ValueError, match=field):
        speculative_decode_cost(BF16, **args)


def test_pool_costs_rejects_non_cost_models():
    with pytest.raises(TypeError, match="PoolCosts.decode"):
        PoolCosts(BF16, {"d": 1.0})
    with pytest.raises(TypeError, match="CostModel or PoolCosts"):
        simulate(Workload([0.0], [10], [2]), SimConfig(), "bf16")
