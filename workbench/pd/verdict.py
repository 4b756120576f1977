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

A verdict on simulated deployments (rows with a ``policy`` column, as the simulator writes them) is only
as good as the simulator's policies: each policy compared must have been checked against a real
server (``validated_policies``, see :func:`unchecked_policy`), or the verdict is "not testable here",
naming the policy; the table of differences is still returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from workbench.pd.metrics import SLO, good_requests

__all__ = ["MAX_SIM_ERR_MEAN", "NOT_TESTABLE", "NO_DIFFERENCE", "Verdict", "batch_ci", "compare_deployments",
           "good_batch_means", "unchecked_policy"]

NO_DIFFERENCE = "no difference"  # the table's ``winner`` at a rate where neither deployment wins
NOT_TESTABLE = "not testable here"  # the start of a verdict's text when the simulator cannot support it
# a simulator policy counts as checked when its largest error on the mean TTFT / TPOT / E2E of a real run is
# at most this (the p99 error is reported beside it, not judged)
MAX_SIM_ERR_MEAN = 0.25


def unchecked_policy(validated: dict | None, policies) -> tuple[str | None, str]:
    """``(reason, note)`` for a result computed in the serving simulator with ``policies``: ``reason``
    (None when every policy is supported) names the first policy never checked against a real server,
    or checked and missed by more than :data:`MAX_SIM_ERR_MEAN`; ``note`` states each checked policy's
    errors and source. ``validated``: ``{policy: (max_rel_err_mean, max_rel_err_p99, source_file)}``
    (fractions; :func:`workbench.claims.serving.sim_validation` reads them from a comparison file)."""
    validated = validated or {}
    notes, reason = [], None
    for pol in sorted(set(policies)):
        if pol not in validated:
            reason = reason or f"the simulator's {pol} mode was never checked against a real server"
            continue
        mean_err, p99_err, src = validated[pol]
        notes.append(f"{pol} mode checked against a real run: mean within {mean_err:.0%}, p99 within "
                     f"{p99_err:.0%} ({src})")
        if not (math.isfinite(mean_err) and mean_err <= MAX_SIM_ERR_MEAN):
            reason = reason or (f"the simulator's {pol} mode missed a real run's mean latency by {mean_err:.0%} "
                                f"(more than {MAX_SIM_ERR_MEAN:.0%}; {src})")
    return reason, "; ".join(notes)


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
                        min_attainment: float = 0.9, min_diff: float = 0.01,
                        validated_policies: dict | None = None) -> Verdict:
    """Compare two deployments (``label`` values) over the swept rates of ``summary``.

    ``summary``: one row per (label, rate) on one workload, with ``slo_attainment``, ``goodput_rps``
    and ``good_batches`` (from :func:`good_batch_means`; :func:`workbench.pd.sim.grid.grid_frames`
    keeps them). ``min_diff``: the smallest difference in SLO attainment (fraction) that counts as a
    win. ``validated_policies``: the simulator policies checked against a real server (see
    :func:`unchecked_policy`); where ``summary`` is simulated (has a ``policy`` column) and a compared
    policy is not among them, the verdict has no winner and its text starts "not testable here"
    with the reason. Raises ``ValueError`` for an unknown label or mismatched batches.
    """
    table = _per_rate(summary, baseline, challenger, level, min_attainment, min_diff)
    if table.empty:
        raise ValueError(f"{baseline!r} and {challenger!r} share no swept rate")
    if "policy" in summary:
        used = summary.loc[summary["label"].isin([baseline, challenger]), "policy"]
        reason, _ = unchecked_policy(validated_policies, used)
        if reason:
            row = table.loc[table["diff"].abs().idxmax()]
            text = (f"{NOT_TESTABLE}: {reason} (simulated: largest difference {100 * row['diff']:+.1f} points of SLO "
                    f"attainment, {challenger} - {baseline}, at {row['rate']:g} req/s)")
            return Verdict(baseline, challenger, None, None, float(row["diff"]),
                           (float(row["ci_lo"]), float(row["ci_hi"])), level, text, table)
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
