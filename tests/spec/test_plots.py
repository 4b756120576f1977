"""Plots: DataFrame in, plotly Figure out, one trace per group, values from the data."""

import numpy as np
import pandas as pd
import pytest

from workbench.spec import plots


@pytest.fixture
def rows():
    return pd.DataFrame({"draft": ["a", "a", "b"], "tokens_per_step": [[1, 2, 5], [5], [1, 1]],
                         "accepted_per_pos": [[2, 1], [1, 1], [0, 0]], "drafted_per_pos": [[3, 3], [1, 1], [2, 2]]})


def test_tokens_per_step(rows):
    fig = plots.plot_tokens_per_step(rows)
    a = next(t for t in fig.data if t.name == "a")
    assert dict(zip(a.x, a.y)) == {1: 0.25, 2: 0.25, 5: 0.5}


def test_acceptance_per_pos(rows):
    fig = plots.plot_acceptance_per_pos(rows)
    a = next(t for t in fig.data if t.name == "a")
    np.testing.assert_allclose(a.y, [3 / 4, 2 / 4])


def test_summary_plots():
    s = pd.DataFrame({"draft": ["a", "a"], "temperature": [0.0, 0.0], "policy": ["static", "static"],
                      "k": [2, 4], "alpha": [0.8, 0.8], "alpha_lo": [0.7, 0.7], "alpha_hi": [0.9, 0.9],
                      "alpha_pred": [0.79, 0.81], "kl_pq": [0.2, 0.2], "tau": [2.4, 3.3], "tau_lo": [2.3, 3.1],
                      "tau_hi": [2.5, 3.5], "speedup": [1.5, 1.6], "c": [0.1, 0.1], "n_steps": [10, 10],
                      "n_tested": [10, 20], "n_accepted": [8, 16], "n_draft_tokens": [20, 40]})
    assert len(plots.plot_kl_alpha(s).data) == 3  # two panels + the diagonal
    fig = plots.plot_theory_vs_k(s, "tau", k_max=6)
    np.testing.assert_allclose(fig.data[0].y[3], (1 - 0.8 ** 5) / 0.2)  # theory at k = 4
    speed = plots.plot_theory_vs_k(s, "speedup")  # theory, measured, and the plain-decoding line (a legend entry)
    assert [t.name for t in speed.data][2] == "plain decoding (speedup 1)" and not speed.layout.annotations
    assert len(plots.plot_policies(s).data) == 2
    with pytest.raises(ValueError):
        plots.plot_theory_vs_k(s, "alpha")


def test_theory_curve_pools_alpha_over_tested_tokens(toy):
    """The theory curve uses alpha = accepted / tested tokens over the rows, the same number
    summarize_spec gives for the pooled rows, 390 / 470 = 0.830 (the old step-weighted mean of the
    rows' alphas, (0.5 * 100 + 0.919 * 100) / 200 = 0.709, disagreed with it)."""
    from workbench.spec.run import summarize_spec

    # two k values of one draft: k=1 tests 1 token per step, k=4 up to 4
    rows = pd.DataFrame({"draft": "d", "temperature": 0.0, "top_p": 1.0, "policy": "static", "k": [1, 4],
                         "prompt_id": [0, 0], "num_accepted_tokens": [50, 340], "num_rejections": [50, 30],
                         "num_drafts": [100, 100], "num_draft_tokens": [100, 400], "draft_s": [1.0, 4.0],
                         "target_s": [10.0, 10.0], "baseline_decode_s": [10.0, 10.0], "baseline_n_new": [101, 101],
                         "spec_decode_s": [8.0, 5.0], "n_new": [150, 440], "kl_pq": 0.1, "kl_qp": 0.1, "tv": 0.1,
                         "alpha_pred": 0.8})
    per_k = summarize_spec(rows)
    assert per_k.alpha.tolist() == pytest.approx([0.5, 340 / 370])
    pooled = summarize_spec(rows, by=("draft",)).alpha.iloc[0]
    assert pooled == pytest.approx(390 / 470)
    assert plots.pooled_alpha_c(per_k)[0] == pytest.approx(pooled)
    fig = plots.plot_theory_vs_k(per_k, "tau", k_max=4)
    np.testing.assert_allclose(fig.data[0].y, [(1 - pooled ** (k + 1)) / (1 - pooled) for k in range(1, 5)])
    with pytest.raises(ValueError, match="count columns"):
        plots.plot_theory_vs_k(per_k.drop(columns="n_tested"))


def test_distill_plot():
    """Each column of the distillation curve on its own trace and axis: KL (nats, log axis, left), predicted
    alpha and greedy match (fractions, right axis fixed to [0, 1]); the greedy trace only when the curve has it."""
    curve = pd.DataFrame({"step": [0, 10, 20], "kl": [5.0, 2.0, 0.5], "alpha_pred": [0.1, 0.4, 0.7],
                          "greedy_match": [0.0, 0.3, 0.6]})
    fig = plots.plot_distill(curve)
    traces = {t.name: t for t in fig.data}
    assert list(traces) == ["KL(p||q) held out [nats]", "predicted alpha (T=1)", "greedy match"]
    for name, col in zip(traces, ("kl", "alpha_pred", "greedy_match")):
        assert list(traces[name].x) == [0, 10, 20] and list(traces[name].y) == curve[col].tolist(), name
    assert [traces[n].yaxis or "y" for n in traces] == ["y", "y2", "y2"]  # (None: the primary axis)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.title.text == "KL [nats/token]"
    assert list(fig.layout.yaxis2.range) == [0, 1] and fig.layout.xaxis.title.text == "training step"
    assert 0.5 in fig.layout.yaxis.tickvals and 5 in fig.layout.yaxis.tickvals  # readable ticks over the KL data
    without = plots.plot_distill(curve.drop(columns="greedy_match"))
    assert [t.name for t in without.data] == ["KL(p||q) held out [nats]", "predicted alpha (T=1)"]
