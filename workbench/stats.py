"""Small statistics helpers shared by every study: confidence intervals with stated formulas."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["binomial_ci", "t_interval"]


def binomial_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``k / n`` (Wilson 1927; Brown, Cai & DasGupta 2001).

    Returns ``(lo, hi)`` in [0, 1]; ``(nan, nan)`` when ``n == 0``. Raises ValueError for ``k`` outside
    ``[0, n]`` or ``level`` outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"level={level} must be in (0, 1)")
    if n == 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} must be within [0, n={n}]")
    z = stats.norm.ppf(0.5 + level / 2)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``x``: ``mean +- t_{n-1, (1+level)/2} s / sqrt(n)``; the
    mean twice for one value (scipy.stats.t)."""
    m = float(np.mean(x))
    if x.size < 2:
        return m, m
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * np.std(x, ddof=1) / np.sqrt(x.size))
    return m - half, m + half
