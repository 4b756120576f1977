"""Workload sources (trace, empirical lengths) and the figures' structure."""

import numpy as np
import pandas as pd
import pytest

from workbench.pd import CostModel, plots
from workbench.pd.sim import (
    SLO,
    LengthDist,
    SimConfig,
    Workload,
    WorkloadConfig,
    deployment_grid,
    generate_workload,
    select_deployments,
    simulate,
    sweep_grid,
)


def test_trace_workload_is_sorted_and_simulated_as_given():
    trace = pd.DataFrame({"arrival_s": [0.5, 0.0, 0.2], "prompt_len": [30, 10, 20], "output_len": [3, 1, 2]})
    wl = Workload.from_trace(trace)
    assert wl.arrival_s.tolist() == [0.0, 0.2, 0.5] and wl.prompt_len.tolist() == [10, 20, 30]
    df = simulate(wl, SimConfig(), CostModel(a=1, b=0, c=0, d=1, e=0, f=0))
    assert df["n_tokens"].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="output_len"):
        Workload.from_trace(trace.drop(columns="output_len"))


def test_empirical_and_lognormal_lengths():
    rng = np.random.default_rng(0)
    x = LengthDist("data", values=(5, 7, 11)).sample(rng, 3000)
    assert set(np.unique(x)) == {5, 7, 11}
    y = LengthDist("lognormal", 200, low=10, high=2000, sigma=0.5).sample(rng, 20_000)
    assert np.median(y) == pytest.approx(200, rel=0.03) and y.min() >= 10 and y.max() <= 2000


def test_grid_filters_and_figures():
    cost = CostModel(a=2, b=0.01, c=0, d=4, e=0.1, f=0.001)
    wl = {"w": WorkloadConfig(n_requests=200, prompt=LengthDist("fixed", 100), output=LengthDist("fixed", 20))}
    grid = deployment_grid(SimConfig(), splits=((1, 1), (1, 2)), chunk_budgets=(256, 512), link_gbs=(25, 450))
    assert len(grid) == 2 * (1 + 2 + 2)
    q, summary = sweep_grid(wl, grid, cost, [5.0, 20.0], SLO(100, 10))
    assert len(summary) == 2 * len(grid) and len(q) == 101 * len(summary)
    sel = select_deployments(summary, 1, 2, 512, 25)
    assert sorted(sel["policy"].unique()) == ["chunked", "colocated", "disaggregated"]
    assert len(sel) == 2 * 3 and (sel["n_gpus"] == 3).all()
    fig = plots.plot_goodput(sel)
    assert len(fig.data) == 3 * 2 + 1  # goodput and attainment per deployment, plus the diagonal
    fig = plots.plot_cdfs(select_deployments(q[q["rate"] == 5.0], 1, 2, 512, 25), by="label", slo=SLO(100, 10))
    assert len(fig.data) == 3 * 2
    req = simulate(generate_workload(wl["w"]), SimConfig(policy="chunked"), cost)
    assert len(plots.plot_cdfs(req, by="policy").data) == 2


def test_named_presets_and_labels_come_from_the_config():
    from workbench.pd.sim import WORKLOAD_PRESETS

    chat = WorkloadConfig.from_name("chat", n_requests=50, rate=3.0, seed=7)
    assert (chat.n_requests, chat.rate, chat.seed, chat.output) == (50, 3.0, 7, WORKLOAD_PRESETS["chat"].output)
    assert chat.label == "chat: 512 in / 128 out" and chat.prompt == LengthDist("lognormal", 512, 16, 4096, 0.8)
    assert WorkloadConfig.from_name("long-prompt").label == "long prompt: 2048 in / 128 out"
    assert WorkloadConfig(prompt=LengthDist("uniform", low=20, high=300)).label == "20-300 in / 128 out"
    with pytest.raises(ValueError, match="did you mean 'chat'"):
        WorkloadConfig.from_name("chta")
    assert SimConfig(policy="chunked", n_instances=3, chunk_budget=256).label == "chunked x3 budget 256"
    assert SimConfig(policy="disaggregated", n_prefill=2, n_decode=1, link_gbs=25.0).label == \
        "disaggregated 2P+1D link 25"
    grid = deployment_grid(SimConfig(), splits=((1, 2),), chunk_budgets=(512,), link_gbs=(None,))
    assert list(grid) == ["colocated x3", "chunked x3 budget 512", "disaggregated 1P+2D link 450"]
    assert all(cfg.label == label for label, cfg in grid.items())
