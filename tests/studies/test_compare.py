"""Side-by-side frames of two engines: differences and ratios computed, rows of one engine kept."""

import numpy as np
import pandas as pd
import pytest

from workbench.studies.compare import paired_difference, side_by_side


def test_side_by_side_known_values():
    a = pd.DataFrame({"label": ["FP", "W4", "W8"], "ms": [10.0, 5.0, 7.0], "acc": [0.5, 0.4, 0.45]})
    b = pd.DataFrame({"label": ["FP", "W4"], "ms": [12.0, 4.0]})
    out = side_by_side({"workbench": a, "vllm": b}, on=["label"], metrics=["ms", "acc"]).set_index("label")
    assert out.loc["FP", "ms_diff"] == 2.0 and out.loc["W4", "ms_ratio"] == pytest.approx(0.8)
    assert out.loc["W8", "present"] == "workbench only" and np.isnan(out.loc["W8", "ms_vllm"])
    assert out.loc["FP", "present"] == "both" and np.isnan(out.loc["FP", "acc_vllm"])


def test_side_by_side_needs_two_frames_and_the_keys():
    a = pd.DataFrame({"label": ["x"], "ms": [1.0]})
    with pytest.raises(ValueError, match="two engines"):
        side_by_side({"a": a}, ["label"], ["ms"])
    with pytest.raises(ValueError, match="no key column"):
        side_by_side({"a": a, "b": a.rename(columns={"label": "name"})}, ["label"], ["ms"])


def test_paired_difference():
    r = paired_difference(pd.Series([1, 0, 1, 1]), pd.Series([1, 1, 1, 0]))
    assert r["n"] == 4 and r["mean_diff"] == 0.0 and r["agree"] == 0.5 and r["ci_lo"] < 0 < r["ci_hi"]
