"""Goodput and SLO attainment: vLLM's rule (an unfinished request meets no SLO; a one-token request has
TPOT 0; SLOs inclusive), against a transcription of ``vllm bench serve``'s loop and on known values."""

import numpy as np
import pandas as pd
import pytest

from workbench.pd.metrics import SLO, good_requests, summarize


def frame(ttft, e2e, n_out, arrival=None):
    ttft, e2e, n_out = (np.asarray(x, np.float64) for x in (ttft, e2e, n_out))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (e2e - ttft) / np.maximum(n_out - 1, 1), np.nan)
    arrival = np.arange(len(ttft), dtype=np.float64) if arrival is None else np.asarray(arrival, np.float64)
    return pd.DataFrame({"arrival_s": arrival, "output_len": n_out.astype(int), "ttft_ms": ttft, "tpot_ms": tpot,
                         "e2e_ms": e2e})


def vllm_good_count(df: pd.DataFrame, goodput: dict) -> int:
    """vLLM 0.11.0 ``vllm/benchmarks/serve.py`` ``calculate_metrics``, transcribed: per-metric lists
    hold successful requests only; a request is good when ``slo >= metric`` for every SLO given."""
    ttfts, all_tpots, e2els = [], [], []
    for r in df.itertuples():
        success = np.isfinite(r.ttft_ms) and np.isfinite(r.e2e_ms)
        if success:
            tpot = 0
            if r.output_len > 1:
                tpot = (r.e2e_ms - r.ttft_ms) / (r.output_len - 1)
            all_tpots.append(tpot)
            ttfts.append(r.ttft_ms)
            e2els.append(r.e2e_ms)
    valid, slos = [], []
    for key, values in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)):
        if key in goodput:
            valid.append(values)
            slos.append(goodput[key])
    return sum(all(s >= r for s, r in zip(slos, m)) for m in zip(*valid))


@pytest.mark.parametrize("slo", [SLO(100, None), SLO(None, 10), SLO(None, None, 300), SLO(100, 10, 300)],
                         ids=["ttft", "tpot", "e2e", "all"])
def test_goodput_matches_vllm_rule_with_unfinished_requests(slo):
    """500 random requests, 10% unfinished (NaN TTFT or E2E), 10% with one output token, values
    on the SLO boundaries included. The old rule (NaN read as 0 ms) counts unfinished ones as good
    and fails here for every SLO."""
    rng = np.random.default_rng(1)
    n = 500
    ttft = rng.choice([50.0, 100.0, 150.0], n) + rng.integers(0, 2, n) * rng.uniform(0, 1, n)
    n_out = np.where(rng.uniform(size=n) < 0.1, 1, rng.integers(2, 30, n))
    e2e = ttft + (n_out - 1) * rng.choice([5.0, 10.0, 12.0], n)
    lost = rng.uniform(size=n) < 0.1
    ttft[lost & (rng.uniform(size=n) < 0.5)] = np.nan
    e2e[lost] = np.nan
    df = frame(ttft, e2e, n_out)
    gp = {k: v for k, v in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2e_ms)) if v is not None}
    want = vllm_good_count(df, gp)
    assert 0 < want < n - lost.sum()  # the SLO separates finished requests too
    assert int(good_requests(df, slo).sum()) == want
    s = summarize(df, slo).iloc[0]
    assert s.slo_attainment == pytest.approx(want / n)
    assert s.n_completed == n - lost.sum()


def test_known_values_unfinished_one_token_and_boundary():
    # 0: good; 1: TTFT exactly at the SLO (inclusive) -> good; 2: one token, TPOT counts 0 -> good;
    # 3: unfinished (no E2E) -> not good; 4: TPOT 20 > 10 -> not good
    df = frame([50, 100, 80, 60, 50], [140, 190, 80, np.nan, 450], [10, 10, 1, 10, 21], arrival=[0, 1, 2, 3, 4])
    good = good_requests(df, SLO(ttft_ms=100, tpot_ms=10))
    assert good.tolist() == [True, True, True, False, False]
    s = summarize(df, SLO(ttft_ms=100, tpot_ms=10)).iloc[0]
    assert s.duration_s == pytest.approx(4.45 - 0.0)  # completed requests only: last finish 4 + 0.45 s
    assert s.throughput_rps == pytest.approx(4 / 4.45) and s.goodput_rps == pytest.approx(3 / 4.45)
    assert s.slo_attainment == pytest.approx(3 / 5) and s.n_completed == 4
    assert s.mean_ttft_ms == pytest.approx((50 + 100 + 80 + 50) / 4)  # the unfinished one is not in the stats
    assert good_requests(df, None).tolist() == [True, True, True, False, True]


def test_no_completed_request_gives_zero_rates():
    s = summarize(frame([np.nan, np.nan], [np.nan, np.nan], [3, 4]), SLO()).iloc[0]
    assert s.goodput_rps == 0.0 and s.throughput_rps == 0.0 and s.slo_attainment == 0.0 and np.isnan(s.duration_s)


def test_slo_presets_and_labels():
    assert SLO.from_name("chat") == SLO(400, 40) and SLO.from_name("tight") == SLO(200, 15)
    assert SLO(400, 40).label == "TTFT<=400 ms, TPOT<=40 ms" and SLO(None, None, 5e3).label == "E2E<=5000 ms"
    with pytest.raises(ValueError, match="did you mean 'chat'"):
        SLO.from_name("chats")
