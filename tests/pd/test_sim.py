"""Serving simulator: conservation, closed forms, an M/D/1 queue, monotonicity, determinism, bad input."""

import itertools
import random

import numpy as np
import pytest

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.sim import SLO, LengthDist, SimConfig, Workload, WorkloadConfig, simulate
from workbench.pd.sim.steps import cum_steps, steps_until, steps_until_reference, stretch_until

TOY = CostModel(a=2.0, b=0.02, c=1e-5, d=5.0, e=0.2, f=0.001)
ROOF = CostModel.from_roofline(ModelSpec.from_name("qwen2-7b"), HardwareSpec.from_name("h200"))
POLICIES = ["colocated", "chunked", "disaggregated"]


def one_request(prompt, out):
    return Workload([0.0], [prompt], [out])


@pytest.mark.parametrize("k", [1, 2, 7, 50, 333])
@pytest.mark.parametrize("lines", [(1.0, 0.1, 0.0, 0.0), (1.0, 0.1, 3.0, 0.0), (3.0, 0.0, 1.0, 0.05),
                                   (2.0, 0.02, 2.0, 0.02), (5.0, 0.0, 1.0, 0.1)])
def test_cum_steps_matches_brute_force(k, lines):
    a1, b1, a2, b2 = lines
    brute = sum(max(a1 + b1 * j, a2 + b2 * j) for j in range(k))
    assert cum_steps(k, a1, b1, a2, b2) == pytest.approx(brute, rel=1e-12)
    for dt in (0.5, brute / 3, brute - 1e-9, brute + 1):
        got = steps_until(dt, k, a1, b1, a2, b2)
        want = next((m for m in range(1, k + 1) if cum_steps(m, a1, b1, a2, b2) >= dt), k)
        assert got == want


def test_steps_until_matches_bisection_reference():
    """The fast path (quadratic root on the envelope segment, then checked against cum_steps) gives the
    bisection's answer on 20,000 random stretches, and its time is cum_steps' bit for bit: offsets and
    slopes over five decades, equal and zero slopes, and events at, just before and between step
    ends. An off-by-one root fails here."""
    rng = random.Random(0)
    for _ in range(20_000):
        kmax = rng.choice([1, 2, 5, 100, 3000, rng.randint(1, 5000)])
        scale = 10 ** rng.uniform(-3, 2)
        a1, a2 = (rng.choice([0.0, rng.uniform(0, scale)]) for _ in range(2))
        b1 = rng.choice([0.0, rng.uniform(0, 1e-2 * scale)])
        b2 = rng.choice([0.0, b1, rng.uniform(0, 1e-2 * scale)])
        a1 = a1 if a1 + a2 + b1 + b2 > 0 else 1.0
        total = cum_steps(kmax, a1, b1, a2, b2)
        at = cum_steps(rng.randint(1, kmax), a1, b1, a2, b2)
        dt = max(rng.choice([rng.uniform(0, 1.2 * total), at, at * (1 - 1e-12), total]), 1e-9)
        k, elapsed = stretch_until(dt, kmax, a1, b1, a2, b2)
        assert k == steps_until_reference(dt, kmax, a1, b1, a2, b2) and elapsed == cum_steps(k, a1, b1, a2, b2)


@pytest.mark.parametrize("policy", POLICIES)
def test_conservation_under_preemption(policy):
    """Every request finishes once, with exactly the tokens it asked for, even when the KV cache is
    small enough to force queueing and preemption."""
    wl = WorkloadConfig(n_requests=400, rate=200.0, prompt=LengthDist("uniform", low=20, high=300),
                        output=LengthDist("uniform", low=1, high=200), seed=3)
    cfg = SimConfig(policy=policy, n_instances=2, n_prefill=1, n_decode=2, kv_capacity_tokens=600,
                    chunk_budget=256, kv_bytes_per_token=1e5, link_gbs=10)
    df = simulate(wl, cfg, TOY)
    assert len(df) == 400 and df["req_id"].is_unique
    assert np.isfinite(df[["ttft_ms", "e2e_ms"]].to_numpy()).all()
    assert (df["n_tokens"] == df["output_len"]).all()
    assert (df["ttft_ms"] > 0).all() and (df["e2e_ms"] >= df["ttft_ms"]).all()
    assert df["n_preempt"].sum() > 0  # the test really exercised preemption
    one = df["output_len"] == 1
    assert np.isnan(df.loc[one, "tpot_ms"]).all() and (df.loc[~one, "tpot_ms"] > 0).all()


@pytest.mark.parametrize("cost", [TOY, ROOF], ids=["toy", "roofline"])
@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_single_request_closed_form(policy, cost):
    """Alone, TTFT = prefill time and TPOT = mean of decode_ms(1, L + j), j = 0..n-2."""
    L, n = 300, 40
    df = simulate(one_request(L, n), SimConfig(policy=policy, chunk_budget=4096), cost)
    steps = [float(cost.decode_ms(1, L + j)) for j in range(n - 1)]
    assert df["ttft_ms"][0] == pytest.approx(float(cost.prefill_ms(L, L * L)), rel=1e-9)
    assert df["tpot_ms"][0] == pytest.approx(np.mean(steps), rel=1e-9)


def test_single_request_chunked_prefill_is_sum_of_chunks():
    L, C = 300, 128  # chunks 128, 128, 44
    df = simulate(one_request(L, 2), SimConfig(policy="chunked", chunk_budget=C), TOY)
    want = sum(float(TOY.mixed_ms(m, m * (2 * p + m), 0, 0)) for p, m in ((0, 128), (128, 128), (256, 44)))
    assert df["ttft_ms"][0] == pytest.approx(want, rel=1e-9)


def test_single_request_disaggregated_first_token_comes_from_decode():
    """TTFT = prefill + KV transfer + the decode instance's first step (batch 1, prompt - 1 cached
    tokens: it recomputes the last prompt token, as vLLM's connectors do); every output token is
    generated on the decode instance. The older convention (TTFT at the prefill's end) fails here."""
    L, n = 300, 10
    cfg = SimConfig(policy="disaggregated", kv_bytes_per_token=1e6, link_gbs=20, link_latency_ms=0.5)
    df = simulate(one_request(L, n), cfg, TOY)
    prefill = float(TOY.prefill_ms(L, L * L))
    xfer = L * 1e6 / 20e9 * 1e3 + 0.5
    steps = [float(TOY.decode_ms(1, L - 1 + j)) for j in range(n)]
    assert df["prefill_done_s"][0] * 1e3 == pytest.approx(prefill, rel=1e-12)
    assert df["kv_ready_s"][0] * 1e3 == pytest.approx(prefill + xfer, rel=1e-12)
    assert df["ttft_ms"][0] == pytest.approx(prefill + xfer + steps[0], rel=1e-12)
    assert df["e2e_ms"][0] == pytest.approx(prefill + xfer + sum(steps), rel=1e-12)
    assert df["n_tokens"][0] == n
    one = simulate(one_request(L, 1), cfg, TOY)  # a one-token request still gets its token from decode
    assert one["ttft_ms"][0] == pytest.approx(prefill + xfer + steps[0], rel=1e-12) and one["n_tokens"][0] == 1


def test_disaggregated_ttft_includes_transfer_queue_and_admission_wait():
    """Two prompts arrive together and prefill in one batch; their KV caches cross one link in turn
    (the latency overlaps); the decode instance holds one sequence, so the second waits for the
    first to finish before its first decode step."""
    L, n = 200, 5
    wl = Workload([0.0, 0.0], [L, L], [n, n])
    cfg = SimConfig(policy="disaggregated", max_batch=1, kv_bytes_per_token=1e6, link_gbs=10, link_latency_ms=0.3)
    df = simulate(wl, cfg, TOY)
    prefill = float(TOY.prefill_ms(2 * L, 2 * L * L))
    xfer = L * 1e6 / 10e9 * 1e3 + 0.3
    steps = [float(TOY.decode_ms(1, L - 1 + j)) for j in range(n)]
    ready = [prefill + xfer, prefill + 2 * xfer - 0.3]
    assert df["kv_ready_s"].to_numpy() * 1e3 == pytest.approx(ready, rel=1e-12)
    assert df["ttft_ms"][0] == pytest.approx(ready[0] + steps[0], rel=1e-12)
    first_done = ready[0] + sum(steps)
    assert first_done > ready[1]  # the second really waited for admission
    assert df["ttft_ms"][1] == pytest.approx(first_done + steps[0], rel=1e-12)
    assert df["e2e_ms"][1] == pytest.approx(first_done + sum(steps), rel=1e-12)


@pytest.mark.parametrize("rho", [0.2, 0.5])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho):
    """One prefill instance serving one fixed-length prompt at a time is an M/D/1 queue: mean wait in it
    W = rho D / (2 (1 - rho)). Tolerance: 4 standard errors from 40 batch means of 500 requests
    (the first batch dropped as warm-up), a two-sided test at about 1e-4 false-alarm rate."""
    cost = CostModel(a=1.0, b=0.01, c=0.0, d=1.0, e=0.0, f=0.0)
    L = 100
    D = float(cost.prefill_ms(L, L * L))  # 2 ms
    wl = WorkloadConfig(n_requests=20_500, rate=rho / D * 1e3, prompt=LengthDist("fixed", L),
                        output=LengthDist("fixed", 1), seed=11)
    cfg = SimConfig(policy="disaggregated", n_prefill=1, max_prefill_batch=1)
    df = simulate(wl, cfg, cost)
    wait = (df["prefill_done_s"] - df["arrival_s"]).to_numpy()[500:] * 1e3 - D
    means = wait.reshape(40, 500).mean(axis=1)
    se = means.std(ddof=1) / np.sqrt(len(means))
    W = rho * D / (2 * (1 - rho))
    assert se < 0.1 * W  # enough samples for the check to have power
    assert abs(wait.mean() - W) < 4 * se


def test_more_decode_instances_never_worsen_latency():
    """Decode-bound load (KV-limited decode instances): each added decode instance lowers or keeps
    mean and p99 TPOT, mean TTFT (the admission wait is part of it) and mean E2E."""
    wl = WorkloadConfig(n_requests=1500, rate=60.0, prompt=LengthDist("lognormal", 200, low=10, high=1000),
                        output=LengthDist("lognormal", 100, low=2, high=500), seed=5)
    cost = CostModel(a=3.0, b=0.02, c=0.0, d=8.0, e=0.5, f=0.002)
    stats = []
    for nd in range(1, 5):
        df = simulate(wl, SimConfig(policy="disaggregated", n_prefill=2, n_decode=nd,
                                    kv_capacity_tokens=20_000), cost)
        stats.append((df["tpot_ms"].mean(), np.nanpercentile(df["tpot_ms"], 99), df["ttft_ms"].mean(),
                      df["e2e_ms"].mean()))
    for col in zip(*stats):
        assert all(x >= y for x, y in itertools.pairwise(col)), stats
    assert stats[0][3] > 1.5 * stats[-1][3]  # the load really was decode-bound at one instance


@pytest.mark.parametrize("policy", POLICIES)
def test_same_seed_same_results(policy):
    wl = WorkloadConfig(n_requests=300, rate=30.0, arrival="gamma", cv=3.0,
                        prompt=LengthDist("lognormal", 300), output=LengthDist("uniform", low=1, high=100))
    cfg = SimConfig(policy=policy, n_instances=2, kv_capacity_tokens=3000)
    a, b = simulate(wl, cfg, TOY), simulate(wl, cfg, TOY)
    assert a.equals(b)
    c = simulate(WorkloadConfig(**{**wl.__dict__, "seed": 1}), cfg, TOY)
    assert not np.allclose(a["ttft_ms"], c["ttft_ms"])


def test_gamma_arrivals_have_requested_rate_and_cv():
    from workbench.pd.sim import generate_workload

    wl = generate_workload(WorkloadConfig(n_requests=40_000, rate=5.0, arrival="gamma", cv=2.0, seed=2))
    gaps = np.diff(wl.arrival_s)
    # standard errors of mean and cv at n = 40k are below 1.5 %; allow 5 %
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("make, field", [
    (lambda: WorkloadConfig(rate=-1.0), "rate"),
    (lambda: WorkloadConfig(rate=0.0), "rate"),
    (lambda: SLO(ttft_ms=0), "ttft_ms"),
    (lambda: SLO(tpot_ms=-5), "tpot_ms"),
    (lambda: SimConfig(n_instances=0), "n_instances"),
    (lambda: SimConfig(policy="disaggregated", n_decode=0), "n_decode"),
    (lambda: SimConfig(policy="disagregated"), "Did you mean 'disaggregated'"),
    (lambda: LengthDist("uniform", low=10, high=5), "low"),
    (lambda: simulate(one_request(100, 50), SimConfig(kv_capacity_tokens=120), TOY), "kv_capacity_tokens"),
])
def test_bad_input_raises_naming_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize("policy", POLICIES)
def test_itl_lists_add_up(policy):
    """With record_itl, each request has n_out - 1 positive gaps that sum to E2E - TTFT, under
    queueing and preemption."""
    wl = WorkloadConfig(n_requests=300, rate=150.0, prompt=LengthDist("uniform", low=20, high=300),
                        output=LengthDist("uniform", low=1, high=120), seed=8)
    cfg = SimConfig(policy=policy, n_instances=2, n_decode=2, kv_capacity_tokens=800, chunk_budget=128)
    df = simulate(wl, cfg, TOY, record_itl=True)
    assert df["n_preempt"].sum() > 0
    assert (df["itl_ms"].map(len) == df["output_len"] - 1).all()
    assert all((x > 0).all() for x in df["itl_ms"])
    sums = df["itl_ms"].map(np.sum)
    np.testing.assert_allclose(sums, df["e2e_ms"] - df["ttft_ms"], rtol=1e-9, atol=1e-6)
    plain = simulate(wl, cfg, TOY)  # recording does not change the schedule
    np.testing.assert_allclose(plain["e2e_ms"], df["e2e_ms"], rtol=1e-12)


def test_single_request_itl_are_decode_steps():
    L, n = 300, 12
    df = simulate(one_request(L, n), SimConfig(), ROOF, record_itl=True)
    np.testing.assert_allclose(df["itl_ms"][0], [float(ROOF.decode_ms(1, L + j)) for j in range(n - 1)],
                               rtol=1e-9)


def test_chunked_prefill_cuts_generation_stalls():
    """Sarathi-Serve's claim: with long prompts arriving, prefill-first stalls running decodes for a
    whole prompt (ITL spikes); chunking bounds each step, so the p99 ITL drops (seeded, deterministic)."""
    from workbench.pd.metrics import summarize

    wl = WorkloadConfig(n_requests=400, rate=20.0, prompt=LengthDist("fixed", 4000),
                        output=LengthDist("fixed", 200), seed=1)
    p99 = {}
    for policy in ("colocated", "chunked"):
        df = simulate(wl, SimConfig(policy=policy, chunk_budget=512), ROOF, record_itl=True)
        p99[policy] = summarize(df).p99_itl_ms.iloc[0]
    assert p99["chunked"] < 0.5 * p99["colocated"], p99


def test_first_win_rate_and_slo_capacity_on_known_table():
    import pandas as pd

    from workbench.pd.sim import first_win_rate, slo_capacity

    rows = [("A", r, g, att, 2) for r, g, att in ((10, 10, 1.0), (20, 20, 1.0), (30, 18, 0.6), (40, 1, 0.02))]
    rows += [("B", r, g, att, 2) for r, g, att in ((10, 10, 1.0), (20, 20, 1.0), (30, 29, 0.97), (40, 2, 0.05))]
    df = pd.DataFrame(rows, columns=["label", "rate", "goodput_rps", "slo_attainment", "n_gpus"])
    assert first_win_rate(df, "A", "B") == 30  # at 40 B "wins" 2 vs 1 but serves 5%: not counted
    assert first_win_rate(df, "B", "A") is None
    cap = slo_capacity(df).set_index("label")
    assert cap.loc["A", "max_rate_at_slo"] == 20 and cap.loc["B", "max_rate_at_slo"] == 30
    assert cap.loc["B", "per_gpu"] == 15
