import pandas as pd

from workbench.quant.floatverdict import pareto_front
from workbench.quant.plots import plot_pareto


def _grid():
    return pd.DataFrame({
        "label": ["FP", "RTN W4 g64 asym", "RTN W8 channel sym", "FP8_DYNAMIC (W8A8 e4m3)", "RTN W4 tensor sym"],
        "method": ["fp", "rtn", "rtn", "fp8_dynamic", "rtn"],
        "format": [None, None, None, "e4m3", None],
        "weight_bytes": [400 * 2**20, 100 * 2**20, 200 * 2**20, 210 * 2**20, 95 * 2**20],
        "kl_mean": [0.0, 0.3, 0.003, 0.03, 11.0]})


def test_plot_pareto_splits_integer_and_float_rows_and_draws_the_front_without_fp():
    g = _grid()
    front = pareto_front(g)
    assert front["label"].tolist() == ["RTN W4 tensor sym", "RTN W4 g64 asym", "RTN W8 channel sym", "FP"]
    fig = plot_pareto(g, front)
    names = [t.name for t in fig.data]
    assert names == ["integer (RTN / AWQ / GPTQ)", "float / W8A8 formats", "front"]
    assert list(fig.data[1].text) == ["FP8_DYNAMIC (W8A8 e4m3)"]  # the dominated float row is placed, not on the front
    assert list(fig.data[2].x) == [95, 100, 200]  # MiB; FP (KL 0) is off the log axis
    assert fig.layout.yaxis.type == "log"
