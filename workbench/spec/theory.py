"""Closed forms for speculative decoding under the i.i.d. acceptance model.

Leviathan et al. 2023 (arXiv 2211.17192): each draft token is accepted independently with
probability alpha; a step drafts k tokens (their gamma) and costs k draft forwards plus one target
forward; c = draft step cost / target step cost.

* Eq. (1): E[tokens per step] = (1 - alpha^(k+1)) / (1 - alpha)   (= tau, bonus token included)
* Theorem 3.8: walltime speedup = (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))
* Best k: the integer k maximizing the speedup (Section 3.5, found by search as in their Figure 3).

``verify_cost`` generalizes the "+1": the cost of the (k+1)-token verify forward relative to a
1-token target step (1 on a memory-bound GPU; larger on a CPU, where the verify costs more).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _check(alpha, c=0.0) -> None:
    a = np.asarray(alpha, dtype=float)
    if np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha={alpha!r} must be in [0, 1]")
    if np.any(np.asarray(c, dtype=float) < 0):
        raise ValueError(f"c={c!r} must be >= 0 (draft step cost / target step cost)")


def expected_tokens_per_step(alpha, k):
    """(1 - alpha^(k+1)) / (1 - alpha), Leviathan et al. 2023 Eq. (1); k + 1 at alpha = 1.

    ``alpha`` in [0, 1] and ``k >= 1`` (scalars or numpy arrays, broadcast). Raises ``ValueError``.
    """
    _check(alpha)
    a, k = np.asarray(alpha, dtype=float), np.asarray(k, dtype=float)
    if np.any(k < 1):
        raise ValueError(f"k={k!r} must be >= 1")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a < 1, (1 - a ** (k + 1)) / np.where(a < 1, 1 - a, 1), k + 1)
    return out.item() if out.ndim == 0 else out


def speedup(alpha, k, c, verify_cost: float = 1.0):
    """Expected walltime speedup over plain decoding, Leviathan et al. 2023 Theorem 3.8:
    (1 - alpha^(k+1)) / ((1 - alpha)(k c + verify_cost)), ``verify_cost`` = 1 in the paper."""
    _check(alpha, c)
    tokens = np.asarray(expected_tokens_per_step(alpha, k), dtype=float)
    out = tokens / (np.asarray(k, dtype=float) * np.asarray(c, dtype=float) + verify_cost)
    return out.item() if out.ndim == 0 else out


def best_k(alpha: float, c: float, k_max: int = 32, verify_cost: float = 1.0) -> tuple[int, float]:
    """``(k, speedup)`` maximizing :func:`speedup` over k = 1..k_max (ties: the smaller k).

    A speedup below 1 means plain decoding is faster for every k.
    """
    ks = np.arange(1, k_max + 1)
    s = speedup(alpha, ks, c, verify_cost)
    i = int(np.argmax(s))
    return int(ks[i]), float(s[i])


def best_k_table(summary: pd.DataFrame, k_max: int = 32) -> pd.DataFrame:
    """:func:`best_k` at each row's measured ``alpha`` (clipped to [0, 1]) and ``c`` of a
    :func:`workbench.spec.run.summarize_spec` frame: its group columns that are present (``draft,
    temperature, top_p, policy, k, acceptance``) plus ``alpha, c, best_k, best_speedup``. A best
    speedup below 1 says: plain decoding is faster with this draft on this hardware at every k."""
    keys = [c for c in ("draft", "temperature", "top_p", "policy", "k", "acceptance") if c in summary]
    rows = []
    for r in summary.itertuples(index=False):
        k, s = best_k(float(np.clip(r.alpha, 0, 1)), float(r.c), k_max)
        rows.append({**{c: getattr(r, c) for c in keys}, "alpha": r.alpha, "c": r.c, "best_k": k, "best_speedup": s})
    return pd.DataFrame(rows, columns=[*keys, "alpha", "c", "best_k", "best_speedup"])


def simulate_tokens_per_step(alpha: float, k: int, n_steps: int, seed: int = 0) -> np.ndarray:
    """Monte Carlo under the i.i.d. model: tokens emitted in each of ``n_steps`` steps (int ``[n]``):
    1 + the number of leading successes among k Bernoulli(alpha) trials."""
    rng = np.random.default_rng(seed)
    acc = rng.random((n_steps, k)) < alpha
    return 1 + np.cumprod(acc, axis=1).sum(axis=1)


__all__ = ["best_k", "best_k_table", "expected_tokens_per_step", "simulate_tokens_per_step", "speedup"]
