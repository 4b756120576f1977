"""Grids that resume: points through workbench.results.sweep are computed once, and the frames built
from stored rows equal the in-memory sweep."""


import numpy as np
import pytest

from workbench import results
from workbench.pd import CostModel
from workbench.pd.sim import (
    SLO,
    LengthDist,
    SimConfig,
    WorkloadConfig,
    deployment_grid,
    grid_frames,
    grid_points,
    run_grid_point,
    sweep_grid,
)

COST = CostModel(a=5.0, b=0.05, c=1e-5, d=8.0, e=0.3, f=0.001)
WORKLOADS = {"short": WorkloadConfig(200, prompt=LengthDist("uniform", low=20, high=200),
                                     output=LengthDist("uniform", low=1, high=40), seed=1)}
DEPLOYMENTS = deployment_grid(SimConfig(kv_capacity_tokens=20_000), splits=((1, 1),), chunk_budgets=(256,))
SLO_ = SLO(ttft_ms=300, tpot_ms=30)


def test_grid_resumes_through_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_RESULTS", str(tmp_path))
    calls = []

    def fn(point):
        calls.append(point["deployment"])
        return run_grid_point(point, workloads=WORKLOADS, deployments=DEPLOYMENTS, cost=COST, slo=SLO_)

    points = grid_points(WORKLOADS, DEPLOYMENTS, [5.0, 50.0], COST, SLO_)
    prov = results.collect_provenance(None, seed=1, data={"workloads": {"short": "uniform 20-200 / 1-40"}})
    results.sweep("pd_grid_test", points[:3], fn, provenance=prov, progress=False)
    rows = results.sweep("pd_grid_test", points, fn, provenance=prov, progress=False)
    assert len(calls) == len(points) == 6  # the first three were not simulated again
    quantiles, summary = grid_frames(rows, points)
    want_q, want_s = sweep_grid(WORKLOADS, DEPLOYMENTS, COST, [5.0, 50.0], SLO_)
    assert summary["goodput_rps"].tolist() == want_s["goodput_rps"].tolist()
    assert summary["label"].tolist() == [p["deployment"] for p in points]
    np.testing.assert_array_equal(quantiles["ttft_ms"], want_q["ttft_ms"])
    assert len(quantiles) == 6 * 101 and quantiles["q"].iloc[100] == 1.0
    with pytest.raises(ValueError, match="no row"):
        grid_frames(rows, grid_points(WORKLOADS, DEPLOYMENTS, [7.0], COST, SLO_))


def test_point_identity_covers_every_input():
    base = grid_points(WORKLOADS, DEPLOYMENTS, [5.0], COST, SLO_)[0]
    other_slo = grid_points(WORKLOADS, DEPLOYMENTS, [5.0], COST, SLO(ttft_ms=200, tpot_ms=30))[0]
    other_cost = grid_points(WORKLOADS, DEPLOYMENTS, [5.0], CostModel(a=5.0, b=0.05, c=0.0, d=8.0, e=0.3, f=0.0),
                             SLO_)[0]
    from workbench.pd.sim.grid import point_id

    assert len({point_id(p) for p in (base, other_slo, other_cost)}) == 3
