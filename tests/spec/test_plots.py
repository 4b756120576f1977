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
                      "tau_hi": [2.5, 3.5], "speedup": [1.5, 1.6], "c": [0.1, 0.1], "n_steps": [10, 10]})
    assert len(plots.plot_kl_alpha(s).data) == 3  # two panels + the diagonal
    fig = plots.plot_theory_vs_k(s, "tau", k_max=6)
    np.testing.assert_allclose(fig.data[0].y[3], (1 - 0.8 ** 5) / 0.2)  # theory at k = 4
    assert len(plots.plot_theory_vs_k(s, "speedup").data) == 2
    assert len(plots.plot_policies(s).data) == 2
    with pytest.raises(ValueError):
        plots.plot_theory_vs_k(s, "alpha")


def test_distill_plot():
    curve = pd.DataFrame({"step": [0, 10], "kl": [5.0, 2.0], "alpha_pred": [0.1, 0.4], "greedy_match": [0.0, 0.3]})
    assert next(t.name for t in plots.plot_distill(curve).data).startswith("KL")
