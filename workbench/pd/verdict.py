"""Which deployment serves more requests within the SLOs, with its margin and uncertainty.

Two deployments simulated on the *same* requests (one seed, common random numbers) are compared by
the paired difference of their good-request indicators (completed and within every SLO, as
:func:`workbench.pd.metrics.good_requests`). Requests in one run are correlated (a queue builds and
drains), so the uncertainty comes from **batch means** (Law, "Simulation Modeling and Analysis",
5th ed., sec. 9.5.3): the requests, in arrival order, are cut into ``n_batches`` contiguous batches,
each batch's mean difference is one observation, and the confidence interval is Student's t over
those. A deployment *beats* another at a rate only when that interval excludes zero, the difference
is at least ``min_diff`` (a practical threshold: 0.1 points of attainment is real but meaningless),
and the winner meets the SLOs for at least ``min_attainment`` of its requests (past that point both
are overloaded and a "win" means nothing, DistServe's capacity rule, arXiv 2401.09670 sec. 2.1);
otherwise the verdict is "no difference". Identical schedules give a zero-width interval at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from workbench.pd.metrics import SLO, good_requests

__all__ = ["NO_DIFFERENCE", "Verdict", "batch_ci", "compare_deployments", "good_batch_means"]

NO_DIFFERENCE = "no difference"  # the table's ``winner`` at a rate where neither deployment wins


def good_batch_means(requests: pd.DataFrame, slo: SLO | None, n_batches: int = 30) -> list[float]:
    """Mean of the good-request indicator over ``n_batches`` contiguous batches of requests in
    ``req_id`` (arrival) order (fewer when there are fewer requests); ``numpy.array_split`` sizes."""
    order = np.argsort(requests["req_id"].to_numpy(), kind="stable") if "req_id" in requests else slice(None)
    good = good_requests(requests, slo)[order].astype(np.float64)
    return [float(b.mean()) for b in np.array_split(good, min(n_batches, good.size))]


def batch_ci(diffs, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of batch-mean differences: ``mean +- t_{m-1, (1+level)/2} s / sqrt(m)``.
    Zero spread gives ``(mean, mean, mean)``; one batch gives an infinite interval."""
    d = np.asarray(diffs, np.float64)
    m = float(d.mean())
    if d.size < 2:
        return m, -math.inf, math.inf
    half = float(stats.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    return m, m - half, m + half


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`compare_deployments`: ``winner`` (a label, or ``None`` for no
    difference), ``rate`` (lowest rate at which it wins), the attainment difference ``diff``
    (challenger - baseline, fraction of requests) with its ``ci`` at that rate (or at the rate of the
    largest difference when there is no winner), ``text`` (the sentence to print) and ``table`` (one
    row per rate: both attainments and goodputs, ``diff``, ``ci_lo``, ``ci_hi``, ``winner`` or
    :data:`NO_DIFFERENCE`)."""

    baseline: str
    challenger: str
    winner: str | None
    rate: float | None
    diff: float
    ci: tuple[float, float]
    level: float
    text: str
    table: pd.DataFrame


def _per_rate(summary: pd.DataFrame, baseline: str, challenger: str, level: float, min_attainment: float,
              min_diff: float) -> pd.DataFrame:
    a = summary[summary["label"] == baseline].set_index("rate")
    b = summary[summary["label"] == challenger].set_index("rate")
    if a.empty or b.empty:
        missing = baseline if a.empty else challenger
        raise ValueError(f"no rows with label {missing!r}; labels are {sorted(summary['label'].unique())}")
    rows = []
    for r in sorted(set(a.index) & set(b.index)):
        ga, gb = np.asarray(a.loc[r, "good_batches"], np.float64), np.asarray(b.loc[r, "good_batches"], np.float64)
        if ga.shape != gb.shape:
            raise ValueError(f"at rate {r} the two deployments have different batch counts; simulate both "
                             "on the same workload with the same n_batches")
        diff, lo, hi = batch_ci(gb - ga, level)
        lo, hi = max(lo, -1.0), min(hi, 1.0)  # a difference of two fractions lies in [-1, 1]
        att_a, att_b = float(a.loc[r, "slo_attainment"]), float(b.loc[r, "slo_attainment"])
        winner = NO_DIFFERENCE
        if lo > 0 and diff >= min_diff and att_b >= min_attainment:
            winner = challenger
        elif hi < 0 and diff <= -min_diff and att_a >= min_attainment:
            winner = baseline
        rows.append({"rate": r, "attainment_baseline": att_a, "attainment_challenger": att_b, "diff": diff,
                     "ci_lo": lo, "ci_hi": hi, "goodput_baseline": float(a.loc[r, "goodput_rps"]),
                     "goodput_challenger": float(b.loc[r, "goodput_rps"]), "winner": winner})
    return pd.DataFrame(rows)


def compare_deployments(summary: pd.DataFrame, baseline: str, challenger: str, *, level: float = 0.95,
                        min_attainment: float = 0.9, min_diff: float = 0.01) -> Verdict:
    """Compare two deployments (``label`` values) over the swept rates of ``summary``.

    ``summary``: one row per (label, rate) on one workload, with ``slo_attainment``, ``goodput_rps``
    and ``good_batches`` (from :func:`good_batch_means`; :func:`workbench.pd.sim.grid.grid_frames`
    keeps them). ``min_diff``: the smallest difference in SLO attainment (fraction) that counts as a
    win. Raises ``ValueError`` for an unknown label or mismatched batches.
    """
    table = _per_rate(summary, baseline, challenger, level, min_attainment, min_diff)
    if table.empty:
        raise ValueError(f"{baseline!r} and {challenger!r} share no swept rate")
    pct = f"{level:.0%} CI"
    wins = table[table["winner"] != NO_DIFFERENCE]
    if wins.empty:
        served = table[table[["attainment_baseline", "attainment_challenger"]].max(axis=1) >= min_attainment]
        where = (f"at any rate where one meets the SLOs for >= {min_attainment:.0%} of requests" if len(served)
                 else f"(neither meets the SLOs for {min_attainment:.0%} of requests at any rate)")
        row = (served if len(served) else table).pipe(lambda t: t.loc[t["diff"].abs().idxmax()])
        text = (f"no difference between {challenger} and {baseline} {where} (largest difference "
                f"{100 * row['diff']:+.1f} points of SLO attainment at {row['rate']:g} req/s, {pct} "
                f"{100 * row['ci_lo']:+.1f}..{100 * row['ci_hi']:+.1f})")
        return Verdict(baseline, challenger, None, None, float(row["diff"]), (float(row["ci_lo"]), float(row["ci_hi"])),
                       level, text, table)
    first = wins.iloc[0]
    winner = first["winner"]
    loser = baseline if winner == challenger else challenger
    sign = 1.0 if winner == challenger else -1.0  # differences from the winner's side
    lo, hi = sorted((sign * first["ci_lo"], sign * first["ci_hi"]))
    att = {challenger: first["attainment_challenger"], baseline: first["attainment_baseline"]}
    goodput = {challenger: first["goodput_challenger"], baseline: first["goodput_baseline"]}
    text = (f"{winner} beats {loser} from {first['rate']:g} req/s: {100 * att[winner]:.1f}% vs "
            f"{100 * att[loser]:.1f}% of requests meet the SLOs ({100 * sign * first['diff']:+.1f} points, {pct} "
            f"{100 * lo:+.1f}..{100 * hi:+.1f}; goodput {goodput[winner]:.1f} vs {goodput[loser]:.1f} req/s)")
    others = wins[wins["winner"] != winner]
    if len(others):
        text += f"; {others.iloc[0]['winner']} beats {winner} from {others.iloc[0]['rate']:g} req/s"
    return Verdict(baseline, challenger, winner, float(first["rate"]), float(first["diff"]),
                   (float(first["ci_lo"]), float(first["ci_hi"])), level, text, table)
