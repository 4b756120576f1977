"""Which quantization point is closer to the full-precision model, with its margin and uncertainty.

Two points of one sweep are scored on the *same* held-out windows, so they are compared by the paired
difference of their per-window mean KL (``kl_windows``, from :class:`workbench.eval.fidelity.FidelityStats`):
windows are independent stretches of text, tokens inside one are not, so the interval is Student's t
over windows (:func:`workbench.stats.t_interval`). Rows without window means (older results) fall back to the
two points' own intervals (``kl_mean_lo``/``kl_mean_hi``) combined as independent, which is wider
(conservative: shared windows correlate the two points positively). A point *beats* another only when
the interval of the difference excludes zero; otherwise the verdict is "no difference". MMLU accuracy is
compared the same way from its Wilson intervals (independent, conservative).

Labels are the configs' own (``QuantConfig.label``, the sweep's ``label`` column), never written by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from workbench.quant.config import QuantConfig
from workbench.stats import t_interval

__all__ = ["NO_DIFFERENCE", "QUESTIONS", "QuantVerdict", "compare_points", "takeaways"]

NO_DIFFERENCE = "no difference"

# (question, a, b): the comparisons notebook 01 draws conclusions from; a point the sweep lacks is skipped
QUESTIONS = (
    ("one scale per tensor or groups of 64, at INT4?",
     QuantConfig(bits=4, granularity="per_tensor", symmetric=True), QuantConfig(bits=4, group_size=64)),
    ("one scale per tensor or groups of 128, at INT4?",
     QuantConfig(bits=4, granularity="per_tensor", symmetric=True), QuantConfig(bits=4, group_size=128)),
    ("groups of 32 or 128, at INT4?", QuantConfig(bits=4, group_size=32), QuantConfig(bits=4, group_size=128)),
    ("AWQ or RTN, at INT4 g128?", QuantConfig(method="awq", bits=4, group_size=128),
     QuantConfig(bits=4, group_size=128)),
    ("GPTQ or RTN, at INT4 g128?", QuantConfig(method="gptq", bits=4, group_size=128),
     QuantConfig(bits=4, group_size=128)),
    ("AWQ or GPTQ, at INT4 g128?", QuantConfig(method="awq", bits=4, group_size=128),
     QuantConfig(method="gptq", bits=4, group_size=128)),
    ("INT3 or INT4, in groups of 128?", QuantConfig(bits=3, group_size=128), QuantConfig(bits=4, group_size=128)),
    ("INT8 per channel or INT4 g128?", QuantConfig(bits=8, granularity="per_channel"),
     QuantConfig(bits=4, group_size=128)),
)

_METRICS = {  # metric: (lower is better, unit, interval columns)
    "kl_mean": (True, "nats/token", ("kl_mean_lo", "kl_mean_hi")),
    "mmlu_acc": (False, "accuracy", ("mmlu_ci_lo", "mmlu_ci_hi")),
}


@dataclass(frozen=True)
class QuantVerdict:
    """Outcome of :func:`compare_points`: both labels and values, ``diff`` (a - b) with its ``ci``,
    ``winner`` (a label, or ``None`` for no difference), ``method`` ("paired over n windows" or
    "independent intervals") and ``text``, the sentence to print."""

    a: str
    b: str
    metric: str
    value_a: float
    value_b: float
    diff: float
    ci: tuple[float, float]
    winner: str | None
    method: str
    text: str


def _row(grid: pd.DataFrame, label: str) -> pd.Series:
    rows = grid[grid["label"] == label]
    if rows.empty:
        raise ValueError(f"no sweep row labelled {label!r}; the grid has {sorted(grid['label'].unique())}")
    return rows.iloc[-1]  # the latest run of that point


def _diff_ci(a: pd.Series, b: pd.Series, metric: str, level: float) -> tuple[float, float, float, str]:
    wa, wb = a.get("kl_windows"), b.get("kl_windows")
    if metric == "kl_mean" and wa is not None and wb is not None and len(wa) == len(wb) and len(wa) > 1:
        diffs = np.asarray(wa, np.float64) - np.asarray(wb, np.float64)
        d, (lo, hi) = float(diffs.mean()), t_interval(diffs, level)
        return d, lo, hi, f"paired over {len(wa)} windows"
    lo_col, hi_col = _METRICS[metric][2]
    if any(c not in a or pd.isna(a[c]) or pd.isna(b[c]) for c in (lo_col, hi_col)):
        return float(a[metric] - b[metric]), -math.inf, math.inf, "no interval"
    z = sps.norm.ppf(0.5 + level / 2)
    se = math.hypot((a[hi_col] - a[lo_col]) / (2 * z), (b[hi_col] - b[lo_col]) / (2 * z))
    d = float(a[metric] - b[metric])
    return d, d - z * se, d + z * se, "independent intervals"


def compare_points(grid: pd.DataFrame, a: str, b: str, metric: str = "kl_mean", level: float = 0.95) -> QuantVerdict:
    """Compare the sweep rows labelled ``a`` and ``b`` (``QuantConfig.label``) on ``metric``
    (``kl_mean``: lower is better; ``mmlu_acc``: higher is better), see the module docstring.

    Raises ``ValueError`` for an unknown metric or a label the grid does not have."""
    if metric not in _METRICS:
        raise ValueError(f"metric={metric!r}: compare 'kl_mean' or 'mmlu_acc'")
    lower, unit, _ = _METRICS[metric]
    ra, rb = _row(grid, a), _row(grid, b)
    d, lo, hi, how = _diff_ci(ra, rb, metric, level)
    winner = None
    if lo > 0 or hi < 0:
        a_better = (d < 0) == lower
        winner = a if a_better else b
    va, vb = float(ra[metric]), float(rb[metric])
    span = f"{d:+.3g} [{level:.0%} CI {lo:+.3g}, {hi:+.3g}] {unit}, {how}"
    if winner is None:
        text = f"{NO_DIFFERENCE} between {a} and {b} on {metric}: {va:.3g} vs {vb:.3g} (difference {a} − {b}: {span})"
    else:
        loser, wv, lv = (b, va, vb) if winner == a else (a, vb, va)  # values in the sentence's order
        better = "lower" if lower else "higher"
        text = (f"{winner} has {better} {metric} than {loser}: {wv:.3g} vs {lv:.3g} "
                f"(difference {a} − {b}: {span})")
    return QuantVerdict(a, b, metric, va, vb, d, (lo, hi), winner, how, text)


def takeaways(grid: pd.DataFrame, metric: str = "kl_mean", questions=QUESTIONS) -> pd.DataFrame:
    """One row per question of ``questions`` whose two points the grid holds: ``question``, ``a``,
    ``b`` (labels from the configs), both values, ``diff``, ``ci_lo``, ``ci_hi``, ``winner`` (or
    :data:`NO_DIFFERENCE`) and ``verdict`` (the sentence)."""
    have = set(grid["label"])
    rows = []
    for question, ca, cb in questions:
        if ca.label in have and cb.label in have and metric in grid:
            v = compare_points(grid, ca.label, cb.label, metric)
            rows.append({"question": question, "a": v.a, "b": v.b, metric + "_a": v.value_a,
                         metric + "_b": v.value_b, "diff": v.diff, "ci_lo": v.ci[0], "ci_hi": v.ci[1],
                         "winner": v.winner or NO_DIFFERENCE, "verdict": v.text})
    return pd.DataFrame(rows)
