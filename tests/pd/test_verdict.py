"""Verdicts with uncertainty: batch-means CIs (coverage and power on planted differences), "no
difference" where the old fixed-margin rule claimed a win, and a real win found in the simulator."""

import numpy as np
import pandas as pd
import pytest

from workbench.pd import CostModel
from workbench.pd.sim import SLO, LengthDist, SimConfig, WorkloadConfig, first_win_rate, sweep_grid
from workbench.pd.verdict import batch_ci, compare_deployments, good_batch_means


def test_batch_ci_known_values():
    m, lo, hi = batch_ci([0.1, 0.2, 0.3], level=0.95)
    half = 4.302652729749464 * 0.1 / np.sqrt(3)  # t_{2, 0.975} = 4.3027 (t tables) * s / sqrt(m)
    assert (m, lo, hi) == pytest.approx((0.2, 0.2 - half, 0.2 + half), rel=1e-9)
    assert batch_ci([0.0] * 30) == (0.0, 0.0, 0.0)


def test_batch_ci_coverage_and_power():
    """Paired good/bad indicators of 3,000 requests in 30 batches. Equal rates (p = 0.9 both): the 95%
    interval excludes 0 in 5% of 1,000 runs in expectation; more than 8% (4 standard errors) fails.
    A 3-point difference (0.90 vs 0.93, about 4 standard errors) is detected in >= 90% of runs."""
    rng = np.random.default_rng(0)

    def excludes_zero(pa, pb):
        a, b = rng.uniform(size=(2, 3000)) < np.array([[pa], [pb]])
        d = (b.astype(float) - a).reshape(30, 100).mean(axis=1)
        _, lo, hi = batch_ci(d)
        return lo > 0 or hi < 0

    assert np.mean([excludes_zero(0.9, 0.9) for _ in range(1000)]) <= 0.08
    assert np.mean([excludes_zero(0.90, 0.93) for _ in range(300)]) >= 0.90


def _table(att_a, att_b, gp_a, gp_b, batches_a, batches_b, rates=(10.0, 40.0, 80.0)):
    rows = []
    for i, r in enumerate(rates):
        rows.append({"label": "colocated x2", "rate": r, "slo_attainment": att_a[i], "goodput_rps": gp_a[i],
                     "good_batches": batches_a[i]})
        rows.append({"label": "disaggregated 1P+1D link 450", "rate": r, "slo_attainment": att_b[i],
                     "goodput_rps": gp_b[i], "good_batches": batches_b[i]})
    return pd.DataFrame(rows)


def test_no_difference_at_full_attainment_where_the_margin_rule_claimed_a_win():
    """Both deployments serve every request within the SLOs at every rate; goodput differs by 3% at
    80 req/s only because the runs end at different times. The fixed-margin rule calls that a win;
    the verdict says no difference."""
    ones = [[1.0] * 30] * 3
    df = _table([1.0] * 3, [1.0] * 3, [10.0, 40.0, 77.6], [10.0, 40.0, 80.0], ones, ones)
    assert first_win_rate(df, "colocated x2", "disaggregated 1P+1D link 450") == 80.0
    v = compare_deployments(df, "colocated x2", "disaggregated 1P+1D link 450")
    assert v.winner is None and v.ci == (0.0, 0.0)
    assert v.text.startswith("no difference between disaggregated 1P+1D link 450 and colocated x2 at any rate")


def test_win_needs_ci_above_zero_and_attainment():
    rng = np.random.default_rng(3)
    noise = [list(0.95 + 0.02 * rng.standard_normal(30)) for _ in range(3)]
    better = [list(np.asarray(noise[0]) + 0.0), list(np.asarray(noise[1]) + 0.1), list(np.asarray(noise[2]) + 0.3)]
    df = _table([0.95, 0.85, 0.5], [0.95, 0.95, 0.8], [10, 34, 40], [10, 38, 64], noise, better)
    v = compare_deployments(df, "colocated x2", "disaggregated 1P+1D link 450")
    # at 40 req/s the challenger is ahead (CI above 0) and attains 0.95; at 80 it is ahead but at 0.8
    assert v.winner == "disaggregated 1P+1D link 450" and v.rate == 40.0 and v.ci[0] > 0
    assert v.table["winner"].tolist()[1:] == ["disaggregated 1P+1D link 450", "no difference"]
    assert "beats colocated x2 from 40 req/s: 95.0% vs 85.0%" in v.text
    with pytest.raises(ValueError, match="no rows with label"):
        compare_deployments(df, "colocated x3", "disaggregated 1P+1D link 450")


def test_simulated_win_of_twice_the_instances():
    cost = CostModel(a=5.0, b=0.05, c=0.0, d=8.0, e=0.3, f=0.001)
    wl = {"chat": WorkloadConfig(600, prompt=LengthDist("uniform", low=50, high=400),
                                 output=LengthDist("uniform", low=10, high=60), seed=2)}
    deps = {"colocated x1": SimConfig(n_instances=1), "colocated x2": SimConfig(n_instances=2)}
    _, summary = sweep_grid(wl, deps, cost, [2.0, 20.0], SLO(ttft_ms=300, tpot_ms=30))
    assert summary["good_batches"].map(len).eq(30).all()
    v = compare_deployments(summary, "colocated x1", "colocated x2", validated_policies=CHECKED)
    assert v.winner == "colocated x2" and v.rate == 20.0, v.table
    assert v.table["winner"].tolist() == ["no difference", "colocated x2"]  # at 2 req/s both meet every SLO


CHECKED = {"colocated": (0.1, 0.16, "compare.csv")}  # the colocated mode, checked against a real run


def test_simulated_verdict_needs_its_policies_checked_against_a_real_server():
    """The same simulated comparison with no policy checked (the default), with colocated checked but
    disaggregated not, and with a check that missed by 40%: no winner, "not testable here" and why; the
    table of differences is still there. A hand-made (measured) summary has no policy column: judged."""
    cost = CostModel(a=5.0, b=0.05, c=0.0, d=8.0, e=0.3, f=0.001)
    wl = {"chat": WorkloadConfig(600, prompt=LengthDist("uniform", low=50, high=400),
                                 output=LengthDist("uniform", low=10, high=60), seed=2)}
    deps = {"colocated x1": SimConfig(n_instances=1), "colocated x2": SimConfig(n_instances=2),
            "disaggregated 1P+1D": SimConfig(policy="disaggregated", n_prefill=1, n_decode=1)}
    _, summary = sweep_grid(wl, deps, cost, [2.0, 20.0], SLO(ttft_ms=300, tpot_ms=30))
    v = compare_deployments(summary, "colocated x1", "colocated x2")
    assert v.winner is None and len(v.table) == 2
    assert v.text.startswith("not testable here: the simulator's colocated mode was never checked against a real "
                             "server (simulated: largest difference +")
    v = compare_deployments(summary, "colocated x2", "disaggregated 1P+1D", validated_policies=CHECKED)
    assert v.winner is None and v.text.startswith("not testable here: the simulator's disaggregated mode was never")
    off = {"colocated": (0.4, 0.5, "compare.csv")}
    assert "missed a real run's mean latency by 40%" in compare_deployments(
        summary, "colocated x1", "colocated x2", validated_policies=off).text
    assert compare_deployments(summary.drop(columns="policy"), "colocated x1", "colocated x2").winner == "colocated x2"


def test_good_batch_means_in_arrival_order():
    df = pd.DataFrame({"req_id": [3, 2, 1, 0], "arrival_s": [3.0, 2, 1, 0], "output_len": [2] * 4,
                       "ttft_ms": [1.0, 1.0, 500.0, 500.0], "tpot_ms": [1.0] * 4, "e2e_ms": [2.0, 2.0, 501.0, 501.0]})
    assert good_batch_means(df, SLO(ttft_ms=100, tpot_ms=None), n_batches=2) == [0.0, 1.0]


def test_significant_but_negligible_or_overloaded_differences_are_no_difference():
    """0.2 points of attainment with a CI above zero is real but below min_diff (1 point); a 30-point
    gap where both serve under 90% is overload, not a win."""
    rng = np.random.default_rng(5)
    a = [list(0.99 + 0.001 * rng.standard_normal(30)) for _ in range(3)]
    b = [list(np.asarray(a[0]) + 0.002), list(np.asarray(a[1]) + 0.002), list(np.asarray(a[2]) + 0.3)]
    df = _table([0.99, 0.99, 0.4], [0.992, 0.992, 0.7], [10, 40, 32], [10, 40, 56], a, b)
    v = compare_deployments(df, "colocated x2", "disaggregated 1P+1D link 450")
    assert v.table["ci_lo"].gt(0).all() and v.winner is None
    assert "at any rate where one meets the SLOs for >= 90% of requests (largest difference +0.2 points" in v.text
    assert compare_deployments(df, "colocated x2", "disaggregated 1P+1D link 450", min_diff=0.001).winner == \
        "disaggregated 1P+1D link 450"
