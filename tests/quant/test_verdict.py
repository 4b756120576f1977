"""compare_points / takeaways: a point beats another only when the interval of the difference excludes 0,
and labels come from the configs."""

import numpy as np
import pandas as pd
import pytest

from workbench.quant import QuantConfig, compare_points, takeaways

RTN = QuantConfig(bits=4, group_size=128).label
AWQ = QuantConfig(method="awq", bits=4, group_size=128).label
INT8 = QuantConfig(bits=8, granularity="per_channel").label


def _grid(awq_windows, rtn_windows):
    rows = []
    for label, w in ((RTN, rtn_windows), (AWQ, awq_windows)):
        w = np.asarray(w, float)
        rows.append({"label": label, "kl_mean": w.mean(), "kl_windows": w.tolist(),
                     "kl_mean_lo": w.mean() - 0.01, "kl_mean_hi": w.mean() + 0.01})
    return pd.DataFrame(rows)


def test_labels_come_from_the_config():
    # notebook 01's hand-written table called this point "RTN INT8 per-channel sym"; the grid's config is asym
    assert INT8 == "RTN W8 channel asym"


def test_paired_difference_decides():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.6, 16)  # windows differ a lot; the paired difference does not
    v = compare_points(_grid(base - 0.05 + rng.normal(0, 0.005, 16), base), AWQ, RTN)
    assert v.winner == AWQ and v.ci[1] < 0 and v.method == "paired over 16 windows"
    assert v.text.startswith(f"{AWQ} has lower kl_mean than {RTN}")
    # a difference within the noise: no difference (a planted "AWQ is better by 0.001" is not a win)
    noise = rng.normal(0, 0.02, 16)
    same = compare_points(_grid(base + noise - noise.mean() + 0.001, base), AWQ, RTN)
    assert same.winner is None and same.ci[0] < 0 < same.ci[1] and same.text.startswith("no difference")


def test_without_windows_the_independent_intervals_are_used():
    g = pd.DataFrame([{"label": RTN, "kl_mean": 0.40, "kl_mean_lo": 0.35, "kl_mean_hi": 0.45},
                      {"label": AWQ, "kl_mean": 0.38, "kl_mean_lo": 0.33, "kl_mean_hi": 0.43}])
    v = compare_points(g, AWQ, RTN)
    assert v.method == "independent intervals" and v.winner is None  # overlapping intervals
    g.loc[1, ["kl_mean", "kl_mean_lo", "kl_mean_hi"]] = [0.20, 0.18, 0.22]
    assert compare_points(g, AWQ, RTN).winner == AWQ
    with pytest.raises(ValueError, match="no sweep row labelled"):
        compare_points(g, "RTN W3 g128 asym", RTN)


def test_takeaways_skips_questions_the_grid_cannot_answer():
    t = takeaways(_grid([0.1, 0.12, 0.11], [0.3, 0.33, 0.31]))
    assert list(t["question"]) == ["AWQ or RTN, at INT4 g128?"] and t["winner"].iloc[0] == AWQ


def test_sentence_gives_the_winners_value_first():
    """The sentence reads "W has lower kl_mean than L: w vs l" whichever of a, b wins (notebook 01 printed
    "g128 has lower kl_mean than tensor sym: 10.6 vs 0.373" when b won: the values were in a, b order)."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.6, 16)
    grid = _grid(base - 0.1, base)  # AWQ lower by 0.1
    v = compare_points(grid, RTN, AWQ)  # b (AWQ) wins
    w, l_ = float(grid.set_index("label").loc[AWQ, "kl_mean"]), float(grid.set_index("label").loc[RTN, "kl_mean"])
    assert v.winner == AWQ and v.text.startswith(f"{AWQ} has lower kl_mean than {RTN}: {w:.3g} vs {l_:.3g}")
