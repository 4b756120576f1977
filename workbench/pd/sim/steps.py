"""Closed-form sums of decode-step times.

Between two events (an arrival to admit, a completion, the KV cache filling up) a decode batch keeps
its ``batch`` sequences and its cached-token total grows by ``batch`` per step, so step ``j`` of a
stretch takes ``max(a1 + b1 j, a2 + b2 j)`` ms: the two lines of :class:`~workbench.pd.costmodel.CostModel`
(``a = d + e batch + f kv_tokens``, ``b = f batch``, and the same with the floor coefficients). The
envelope of two lines crosses at most once, so ``k`` steps sum in closed form (two arithmetic series)
and the step during which a future event happens is found without stepping.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["cum_steps", "step_ends", "steps_until", "steps_until_reference", "stretch_until"]


def cum_steps(k: int, a1: float, b1: float, a2: float, b2: float) -> float:
    """``sum_{j=0}^{k-1} max(a1 + b1 j, a2 + b2 j)``: time of ``k`` decode steps, ms.

    Each arithmetic series ``sum_{j=p}^{q-1} (a + b j) = (q - p) a + b (q (q - 1) - p (p - 1)) / 2``.
    """
    db, da = b2 - b1, a2 - a1
    if db == 0.0:
        if da <= 0:
            return k * a1 + b1 * (k * (k - 1)) * 0.5
        return k * a2 + b2 * (k * (k - 1)) * 0.5
    js = -da / db  # the two lines cross at j = js
    if db > 0:  # line 2 on top for j > js
        m = math.floor(js) + 1
        m = 0 if m < 0 else min(m, k)
        return (m * a1 + b1 * (m * (m - 1)) * 0.5) + ((k - m) * a2 + b2 * (k * (k - 1) - m * (m - 1)) * 0.5)
    m = math.ceil(js)  # line 2 on top for j < js
    m = 0 if m < 0 else min(m, k)
    return (m * a2 + b2 * (m * (m - 1)) * 0.5) + ((k - m) * a1 + b1 * (k * (k - 1) - m * (m - 1)) * 0.5)


def _envelope(kmax: int, a1: float, b1: float, a2: float, b2: float) -> tuple:
    """``(m, a, b, a', b')``: over ``kmax`` steps the envelope is line ``(a, b)`` on steps ``[0, m)``
    and line ``(a', b')`` on ``[m, kmax)`` (the split :func:`cum_steps` uses)."""
    db, da = b2 - b1, a2 - a1
    if db == 0.0:
        return (kmax, a1, b1, a1, b1) if da <= 0 else (kmax, a2, b2, a2, b2)
    m = math.floor(-da / db) + 1 if db > 0 else math.ceil(-da / db)
    m = 0 if m < 0 else min(m, kmax)
    return (m, a1, b1, a2, b2) if db > 0 else (m, a2, b2, a1, b1)


def _root(a: float, b: float, c: float) -> float:
    """Real ``q >= 0`` with ``q a + b q (q - 1) / 2 = c`` (``inf`` when the line is zero), in the
    cancellation-free form ``2 c / (A + sqrt(A^2 + 2 b c))``, ``A = a - b / 2``, where ``A > 0``."""
    if c <= 0:
        return 0.0
    if b <= 0:
        return c / a if a > 0 else math.inf
    big_a = a - 0.5 * b
    disc = math.sqrt(big_a * big_a + 2.0 * b * c)
    return 2.0 * c / (big_a + disc) if big_a > 0 else (disc - big_a) / b


def steps_until(dt: float, kmax: int, a1: float, b1: float, a2: float, b2: float) -> int:
    """Smallest ``k`` in ``[1, kmax]`` with ``cum_steps(k) >= dt`` (``kmax`` if none): the step
    during which an event ``dt`` ms ahead happens (:func:`stretch_until` without the time)."""
    return stretch_until(dt, kmax, a1, b1, a2, b2)[0]


def stretch_until(dt: float, kmax: int, a1: float, b1: float, a2: float, b2: float) -> tuple[int, float]:
    """``(k, cum_steps(k))`` for :func:`steps_until`'s ``k``: the stretch and its time, ms.

    The candidate is the root of the quadratic on the envelope segment where ``dt`` falls; it is
    then checked against ``cum_steps`` (usually two evaluations, on the same split: the same floats),
    so ``k`` is exactly :func:`steps_until_reference`'s and the time is exactly ``cum_steps(k)``.
    """
    m, fa, fb, sa, sb = _envelope(kmax, a1, b1, a2, b2)
    head = m * fa + fb * (m * (m - 1)) * 0.5  # time of the first m steps
    if dt <= head:
        root = _root(fa, fb, dt)
    else:  # head + (q - m) sa + sb (q (q - 1) - m (m - 1)) / 2 >= dt
        root = _root(sa, sb, dt - head + m * sa + sb * (m * (m - 1)) * 0.5)
    k = kmax if root >= kmax else max(1, math.ceil(root))

    def cum(q: int) -> float:  # cum_steps(q), its arithmetic term for term, on the split found above
        mq = min(q, m)
        return (mq * fa + fb * (mq * (mq - 1)) * 0.5) + ((q - mq) * sa + sb * (q * (q - 1) - mq * (mq - 1)) * 0.5)

    elapsed = cum(k)
    if elapsed >= dt:
        while k > 1:
            before = cum(k - 1)
            if before < dt:
                break
            k, elapsed = k - 1, before
        return k, elapsed
    while k < kmax:
        k += 1
        elapsed = cum(k)
        if elapsed >= dt:
            break
    return k, elapsed


def steps_until_reference(dt: float, kmax: int, a1: float, b1: float, a2: float, b2: float) -> int:
    """:func:`steps_until` by bisection on :func:`cum_steps` (non-decreasing in ``k``): the readable
    reference the fast path is tested against."""
    if cum_steps(kmax, a1, b1, a2, b2) < dt:
        return kmax
    lo, hi = 1, kmax
    while lo < hi:
        mid = (lo + hi) // 2
        if cum_steps(mid, a1, b1, a2, b2) >= dt:
            hi = mid
        else:
            lo = mid + 1
    return lo


def step_ends(t0: float, k: int, a1: float, b1: float, a2: float, b2: float) -> list:
    """End times (ms) of ``k`` decode steps starting at ``t0``, for token timestamps (numpy, one call)."""
    j = np.arange(k, dtype=np.float64)
    return (t0 + np.cumsum(np.maximum(a1 + b1 * j, a2 + b2 * j))).tolist()
