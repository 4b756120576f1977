"""Plots: DataFrame in, Figure out, with the data where it should be."""

import pandas as pd
import pytest

from workbench.eval.plots_fidelity import plot_fidelity_bars, plot_kl_vs_memory
from workbench.quant import plots as qp


@pytest.fixture
def grid():
    rows = [{"method": "fp", "w_bits": 32, "group_size": 0, "symmetric": False, "weight_bytes": 4e6, "kl_mean": 0.0, "kl_p95": 0.0,
                 "top1_agreement": 1.0, "ppl": 10.0, "mmlu_acc": 0.4, "mmlu_ci_lo": 0.35, "mmlu_ci_hi": 0.45, "label": "FP"}]
    for b, kl in ((2, 3.0), (4, 0.1), (8, 0.001)):
        rows.append({"method": "rtn", "w_bits": b, "group_size": 128, "symmetric": False, "weight_bytes": 1e6 * b, "kl_mean": kl,
                         "kl_p95": 3 * kl, "top1_agreement": 1 - kl / 4, "ppl": 10 + kl, "mmlu_acc": 0.3, "mmlu_ci_lo": 0.25,
                         "mmlu_ci_hi": 0.35, "label": f"RTN W{b}"})
    return pd.DataFrame(rows)


def test_metric_vs_bits_series_and_log_axis(grid):
    fig = qp.plot_metric_vs_bits(grid, "kl_mean")
    assert [t.name for t in fig.data] == ["RTN g128 asym"]
    assert list(fig.data[0].y) == [3.0, 0.1, 0.001] and fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError, match="not in the DataFrame"):
        qp.plot_metric_vs_bits(grid, "nope")


def test_memory_mmlu_and_heatmap(grid):
    assert list(qp.plot_memory_vs_bits(grid).data[0].y) == pytest.approx([2e6 / 2**20, 4e6 / 2**20, 8e6 / 2**20])
    fig = qp.plot_mmlu_vs_bits(grid)
    assert list(fig.data[0].error_y.array) == pytest.approx([0.05] * 3)
    rep = pd.DataFrame({"layer": ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"],
                        "rel_err": [0.1, 0.2]})
    hm = qp.plot_layer_heatmap(rep)
    assert list(hm.data[0].y) == ["q_proj", "down_proj"] and list(hm.data[0].x) == [0, 1]
    assert qp.plot_group_size_trend(grid).data[0].name == "RTN W2 asym"


def test_fidelity_plots(grid):
    fig = plot_fidelity_bars(grid)
    assert list(fig.data[0].x) == ["RTN W2", "RTN W4", "RTN W8"]  # FP (KL = 0) dropped from the log axis
    assert len(plot_kl_vs_memory(grid).data[0].x) == 3


def test_mmlu_plot_marks_points_whose_ci_includes_chance(grid):
    g = grid.assign(mmlu_chance=0.25, mmlu_formulation="mmlu_continuation", mmlu_metric="acc_norm", mmlu_n=57)
    g.loc[3, ["mmlu_ci_lo", "mmlu_ci_hi"]] = [0.27, 0.33]  # W8 clears chance; W2, W4 touch it (0.25)
    fig = qp.plot_mmlu_vs_bits(g)
    assert list(fig.data[0].marker.symbol) == ["circle-open", "circle-open", "circle"]
    assert "acc_norm" in fig.layout.title.text and "n=57" in fig.layout.title.text


def test_speed_plot_groups_batches(grid):
    g = grid.assign(decode_ms_b1=[4.0, 1.0, 2.0, 3.0], decode_ms_b8=[8.0, 2.0, 4.0, 6.0], speed_device="cpu (1 thread)",
                    runtime="dense")
    fig = qp.plot_speed(g)
    assert [t.name for t in fig.data] == ["batch 1", "batch 8"] and list(fig.data[1].y) == [8.0, 2.0, 4.0, 6.0]
    assert "cpu (1 thread)" in fig.layout.title.text
    with pytest.raises(ValueError, match="speed=True"):
        qp.plot_speed(grid)
