"""Figure hygiene, checked on the figure objects: readable log ticks, a message instead of empty axes, units
on every axis, reference lines as legend entries (no annotation on top of another), the goodput definition
on the goodput chart. Each test fails on the plots as they were (plotly's default log ticks read
"10, 5, 2, 1, 5" for 10 ... 0.5; an empty selection drew bare axes; axes read "w_bits" and "ms")."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from workbench.eval import plots_fidelity
from workbench.figures import empty_figure, log_ticks, readable_log_axes
from workbench.pd import plots as pdp
from workbench.quant import plots as qp
from workbench.spec import plots as sp


def _grid(kl=(12.0, 0.6, 2.0, 0.9), mmlu=True):
    rows = [{"method": "fp", "w_bits": 16, "group_size": 0, "symmetric": True, "weight_bytes": 5.4e8, "kl_mean": 0.0,
             "top1_agreement": 1.0, "ppl": 31.8, "mmlu_acc": 0.27, "mmlu_ci_lo": 0.23, "mmlu_ci_hi": 0.31}]
    for (bits, gs), k in zip([(2, 64), (4, 64), (2, 32), (4, 32)], kl):
        rows.append({"method": "rtn", "w_bits": bits, "group_size": gs, "symmetric": False, "weight_bytes": 1e8 * bits,
                     "kl_mean": k, "top1_agreement": 0.5, "ppl": 40.0, "mmlu_acc": 0.26, "mmlu_ci_lo": 0.22,
                     "mmlu_ci_hi": 0.30})
    return pd.DataFrame(rows)


def _pd_summary():
    rows = []
    for label, policy in (("colocated x2", "colocated"), ("disaggregated 1P+1D", "disaggregated")):
        for rate in (10.0, 40.0):
            rows.append({"label": label, "policy": policy, "rate": rate, "goodput_rps": rate * 0.97,
                         "slo_attainment": 1.0, "slo_ttft_ms": 400.0, "slo_tpot_ms": 40.0, "slo_e2e_ms": np.nan})
    return pd.DataFrame(rows)


def _cdf_rows():
    q = np.linspace(0, 1, 11)
    return pd.DataFrame({"label": "colocated x2", "policy": "colocated", "q": q, "ttft_ms": 0.5 + 30 * q,
                         "tpot_ms": 5 + 10 * q})


@pytest.mark.parametrize(("values", "ticks", "text"), [
    ([0.6, 12], [0.5, 1, 2, 5, 10], ["0.5", "1", "2", "5", "10"]),
    ([0.004, 0.03], [0.005, 0.01, 0.02], ["0.005", "0.01", "0.02"]),
    ([31.8, 44], [30, 40], ["30", "40"]),  # too narrow for 1-2-5: every digit
    ([30, 2e6], [30, 100, 300, 1000, 3000, 1e4, 3e4, 1e5, 3e5, 1e6, 3e6],
     ["30", "100", "300", "1,000", "3,000", "10,000", "30,000", "100,000", "300,000", "1,000,000", "3,000,000"]),
])
def test_log_ticks_are_plain_numbers(values, ticks, text):
    got_ticks, got_text = log_ticks(values)
    np.testing.assert_allclose(got_ticks, ticks)
    assert got_text == text


def test_log_axes_of_the_plots_carry_readable_ticks():
    kl = qp.plot_metric_vs_bits(_grid(), "kl_mean")
    assert list(kl.layout.yaxis.ticktext) == ["0.5", "1", "2", "5", "10"]  # not "10, 5, 2, 1, 5"
    trend = qp.plot_group_size_trend(_grid(), "kl_mean")
    assert "0.5" in trend.layout.yaxis.ticktext
    cdfs = pdp.plot_cdfs(_cdf_rows(), by="label")
    assert cdfs.layout.xaxis.type == "log" and "0.5" in cdfs.layout.xaxis.ticktext
    assert "5" in cdfs.layout.xaxis2.ticktext and cdfs.layout.xaxis2.tickvals is not None
    fid = plots_fidelity.plot_fidelity_bars(pd.DataFrame({"label": ["a", "b"], "kl_mean": [0.6, 12],
                                                          "kl_p95": [1.0, 20], "top1_agreement": [0.9, 0.4]}))
    assert list(fid.layout.yaxis.ticktext) == ["0.5", "1", "2", "5", "10", "20"]  # p95 markers reach 20
    curve = pd.DataFrame({"step": [0, 10], "kl": [3.0, 0.4], "alpha_pred": [0.3, 0.6]})
    assert "0.5" in sp.plot_distill(curve).layout.yaxis.ticktext
    lin = readable_log_axes(go.Figure(go.Scatter(y=[0.5, 10])))  # a linear axis is left alone
    assert lin.layout.yaxis.tickvals is None


def test_empty_selection_shows_a_message_not_bare_axes():
    empty = _pd_summary().iloc[:0]
    for fig in (pdp.plot_goodput(empty), pdp.plot_cdfs(_cdf_rows().iloc[:0]),
                qp.plot_metric_vs_bits(_grid().iloc[:1], "kl_mean"), sp.plot_tokens_per_step(pd.DataFrame()),
                sp.plot_acceptance_per_pos(pd.DataFrame())):
        assert not fig.data
        assert len(fig.layout.annotations) == 1 and "selected" in fig.layout.annotations[0].text
        assert fig.layout.xaxis.visible is False
    assert empty_figure("x", "t").layout.title.text == "t"


def _axis_titles(fig):
    used = {(t.xaxis or "x", t.yaxis or "y") for t in fig.data}
    out = []
    for xa, ya in used:
        for ref in (xa, ya):
            name = ref[0] + "axis" + ref[1:]
            title = fig.layout[name].title.text
            out.append((name, title))
    return out


def test_every_axis_has_a_unit():
    grid = _grid()
    figs = {
        "memory": qp.plot_memory_vs_bits(grid), "kl": qp.plot_metric_vs_bits(grid, "kl_mean"),
        "top1": qp.plot_metric_vs_bits(grid, "top1_agreement"), "mmlu": qp.plot_mmlu_vs_bits(grid),
        "trend": qp.plot_group_size_trend(grid, "kl_mean"), "goodput": pdp.plot_goodput(_pd_summary()),
        "cdfs": pdp.plot_cdfs(_cdf_rows(), by="label"),
    }
    for name, fig in figs.items():
        for axis, title in _axis_titles(fig):
            assert title and ("(" in title or "[" in title), f"{name}: {axis} title {title!r} names no unit"


def test_reference_lines_are_legend_entries_not_overlapping_labels():
    # the FP band [0.23, 0.31] covers chance (0.25): as add_hline/add_hrect labels they were drawn on top
    # of each other; as legend entries they cannot be
    fig = qp.plot_mmlu_vs_bits(_grid())
    names = [t.name for t in fig.data]
    assert "chance 0.25 (4 choices)" in names and "FP 0.270 [0.230, 0.310]" in names
    assert not fig.layout.annotations and not fig.layout.shapes
    assert not qp.plot_memory_vs_bits(_grid()).layout.annotations


def test_goodput_chart_states_its_definition():
    fig = pdp.plot_goodput(_pd_summary())
    note = fig.layout.title.subtitle.text  # a subtitle: it cannot overlap the axis titles as an annotation did
    assert "meeting every SLO (TTFT <= 400 ms, TPOT <= 40 ms)" in note
    assert "last finish - first arrival" in note and "below the rate line" in note
