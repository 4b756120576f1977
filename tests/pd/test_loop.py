"""Profile, real serving loop and metrics: a fake runner on a fake clock makes the loop and the
simulator run the same policy on the same costs, so they must agree to rounding; a tiny random Engine
checks the real path end to end."""

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.pd import CostModel
from workbench.pd.loop import compare_to_sim, run_serving, sim_config_for
from workbench.pd.metrics import RequestStats, summarize
from workbench.pd.profile import ProfileConfig, run_profile
from workbench.pd.sim import SLO, LengthDist, WorkloadConfig, generate_workload

COST = CostModel(a=20.0, b=0.5, c=0.001, d=10.0, e=2.0, f=0.01)


class FakeRunner:
    """BatchRunner whose steps take exactly ``COST`` ms on a fake clock (no model)."""

    vocab_size, device = 11, torch.device("cpu")

    def __init__(self, max_batch=4, max_seq=128):
        self.max_batch, self.max_seq = max_batch, max_seq
        self.len = torch.zeros(max_batch, dtype=torch.int64)
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, dt):
        self.now += dt

    def lengths(self):
        return self.len.clone()

    def extend_batch(self, slots, tokens, n_valid=None):
        slots = torch.as_tensor(slots)
        b, t = tokens.shape
        nv = torch.full((b,), t) if n_valid is None else torch.as_tensor(n_valid)
        if t == 1 and bool((self.len[slots] > 0).all()):
            ms = COST.decode_ms(b, int(self.len[slots].sum()))
        else:
            ms = COST.prefill_ms(int(nv.sum()), int((nv * nv).sum()))
        self.now += float(ms) / 1e3
        self.len[slots] += nv
        return torch.zeros(b, t, self.vocab_size)

    def truncate_slot(self, slot, length):
        self.len[slot] = length

    def copy_prefix(self, src, dst, length):
        raise NotImplementedError

    def synchronize(self):
        pass


@pytest.mark.parametrize("rate", [2.0, 20.0])
def test_loop_on_fake_clock_equals_simulator(rate):
    wl = generate_workload(WorkloadConfig(n_requests=60, rate=rate, prompt=LengthDist("fixed", 40),
                                          output=LengthDist("uniform", low=1, high=30), seed=4))
    r = FakeRunner()
    real = run_serving(r, wl, max_prefill_batch=2, clock=r.clock, sleep=r.sleep)
    assert (real["output_len"] == wl.output_len).all()
    cmp = compare_to_sim(real, wl, COST, sim_config_for(r, max_prefill_batch=2))
    assert np.abs(cmp["err_pct"]).max() < 1e-6, cmp


def test_request_stats_and_summarize_known_values():
    st = RequestStats()
    st.observe(0, 0.0, [0.1, 0.2, 0.4], 10)  # ttft 100, tpot 150, e2e 400
    st.observe(1, 1.0, [1.5], 10)  # one token: ttft 500, tpot NaN
    st.observe(2, 2.0, [2.05, 2.1, 2.15, 2.2, 3.0], 10)  # ttft 50, tpot 237.5, e2e 1000
    df = st.to_frame()
    assert df["ttft_ms"].tolist() == pytest.approx([100, 500, 50])
    assert df["tpot_ms"][0] == pytest.approx(150) and np.isnan(df["tpot_ms"][1])
    assert df["itl_ms"][2] == pytest.approx([50, 50, 50, 800])
    s = summarize(df, SLO(ttft_ms=200, tpot_ms=200)).iloc[0]
    assert s.duration_s == pytest.approx(3.0)  # first arrival 0, last finish 3.0
    assert s.goodput_rps == pytest.approx(1 / 3.0)  # only request 0: 1 fails TTFT, 2 fails TPOT
    assert s.throughput_rps == pytest.approx(1.0)
    assert s.p50_ttft_ms == pytest.approx(100) and s.p99_ttft_ms == pytest.approx(np.percentile([100, 500, 50], 99))
    assert s.mean_tpot_ms == pytest.approx((150 + 237.5) / 2)  # the one-token request has no TPOT
    s2 = summarize(df, SLO(ttft_ms=600, tpot_ms=None, e2e_ms=500)).iloc[0]
    assert s2.goodput_rps == pytest.approx(2 / 3.0)  # one-token request passes; request 2 fails E2E


@pytest.fixture(scope="module")
def tiny_engine():
    from transformers import LlamaConfig

    from workbench.engine import Engine

    cfg = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return Engine.from_config(cfg, max_batch=4, max_seq=96, device="cpu")


class ClockedEngine:
    """The tiny Engine (its real forward, KV slots and argmax) whose every step is charged ``COST``'s time on
    a virtual clock, as :class:`FakeRunner` charges it: the profile, the fit, the serving loop and the
    simulator then have one known answer, while every token goes through the engine."""

    def __init__(self, engine):
        self.engine, self.now, self.steps = engine, 0.0, 0

    def __getattr__(self, name):  # max_batch, max_seq, vocab_size, device, lengths, truncate_slot, ...
        return getattr(self.engine, name)

    def clock(self):
        return self.now

    def sleep(self, dt):
        self.now += dt

    def extend_batch(self, slots, tokens, n_valid=None):
        slots = torch.as_tensor(slots)
        b, t = tokens.shape
        nv = torch.full((b,), t) if n_valid is None else torch.as_tensor(n_valid)
        cached = self.engine.lengths()[slots]
        if t == 1 and bool((cached > 0).all()):
            ms = COST.decode_ms(b, int(cached.sum()))
        else:
            ms = COST.prefill_ms(int(nv.sum()), int((nv * nv).sum()))
        self.now += float(ms) / 1e3
        self.steps += 1
        return self.engine.extend_batch(slots, tokens, n_valid)


def test_profile_and_loop_on_tiny_engine(tiny_engine):
    """The real engine on COST's virtual clock: the profile holds every configured point once with COST's
    times; CostModel.fit recovers COST's six coefficients; the serving loop serves every request its
    output length, and the simulator with the fitted costs reproduces its TTFT, TPOT and E2E to rounding."""
    eng = ClockedEngine(tiny_engine)
    pcfg = ProfileConfig(prompt_lens=(8, 32, 64), prefill_batches=(1, 2), decode_batches=(1, 2, 4),
                         context_lens=(8, 64), repeats=2, warmup=1)
    prof = run_profile(eng, pcfg, clock=eng.clock)
    want = {("prefill", b, L) for b in (1, 2) for L in (8, 32, 64)} | {("decode", b, L) for b in (1, 2, 4) for L in (8, 64)}
    assert set(zip(prof["phase"], prof["batch"], prof["seq_len"])) == want and len(prof) == len(want)
    pre, dec = prof[prof["phase"] == "prefill"], prof[prof["phase"] == "decode"]
    assert (pre["n_tokens"] == pre["batch"] * pre["seq_len"]).all() and (pre["attn_sq"] == pre["n_tokens"] * pre["seq_len"]).all()
    assert (dec["kv_tokens"] == dec["batch"] * dec["seq_len"]).all() and (dec["n_tokens"] == dec["batch"]).all()
    np.testing.assert_allclose(pre["ms"], COST.prefill_ms(pre["n_tokens"], pre["attn_sq"]), rtol=1e-9)
    np.testing.assert_allclose(dec["ms"], COST.decode_ms(dec["batch"], dec["kv_tokens"]), rtol=1e-9)
    assert (prof["ms_iqr"].abs() < 1e-9).all() and (prof["repeats"] == 2).all()
    cost = CostModel.fit(prof)
    got = [cost.a, cost.b, cost.c, cost.d, cost.e, cost.f]
    np.testing.assert_allclose(got, [COST.a, COST.b, COST.c, COST.d, COST.e, COST.f], rtol=1e-6)
    # arrivals every 5 ms on average against a 28 ms prefill: a queue builds, so the prefill batch limit binds
    wl = generate_workload(WorkloadConfig(n_requests=8, rate=200.0, prompt=LengthDist("fixed", 16),
                                          output=LengthDist("uniform", low=1, high=8), seed=0))
    real = run_serving(eng, wl, max_prefill_batch=2, clock=eng.clock, sleep=eng.sleep)
    assert (real["output_len"] == wl.output_len).all() and (real["e2e_ms"] >= real["ttft_ms"]).all()
    for row in real.itertuples():
        assert len(row.itl_ms) == row.output_len - 1
        assert sum(row.itl_ms) == pytest.approx(row.e2e_ms - row.ttft_ms, abs=1e-6)
    cmp = compare_to_sim(real, wl, cost, sim_config_for(eng, max_prefill_batch=2))
    assert cmp["err_pct"].notna().all() and np.abs(cmp["err_pct"]).max() < 1e-6, cmp


def test_profile_rejects_small_runner(tiny_engine):
    with pytest.raises(ValueError, match="max_seq"):
        run_profile(tiny_engine, ProfileConfig(prompt_lens=(200,)))
    with pytest.raises(ValueError, match="decode_batches"):
        ProfileConfig(decode_batches=())


def test_summarize_by_group():
    df = pd.DataFrame({"policy": ["a", "a", "b"], "arrival_s": [0.0, 1.0, 0.0], "output_len": [2, 2, 2],
                       "ttft_ms": [10.0, 20.0, 30.0], "tpot_ms": [1.0, 1.0, 1.0], "e2e_ms": [11.0, 21.0, 31.0]})
    out = summarize(df, SLO(ttft_ms=15, tpot_ms=None), by=["policy"])
    assert out["policy"].tolist() == ["a", "b"]
    assert out["slo_attainment"].tolist() == pytest.approx([0.5, 0.0])


class DriftingRunner(FakeRunner):
    """FakeRunner whose steps take ``speed`` times COST (a machine that slowed down or sped up)."""

    speed = 1.0

    def extend_batch(self, slots, tokens, n_valid=None):
        t0 = self.now
        out = super().extend_batch(slots, tokens, n_valid)
        self.now = t0 + (self.now - t0) * self.speed
        return out


def test_drift_check_flags_errors_smaller_than_the_machine_change():
    """Profile at speed 1, serve and re-measure at speed 1.5: the check reports +50% for both phases and
    the simulator (fitted at speed 1) is 37-69% off (queueing amplifies the change); exactly the errors
    within 50% are flagged, in the table and the figure. Without the change nothing is flagged."""
    from workbench.pd import plots
    from workbench.pd.profile import drift_check

    pcfg = ProfileConfig(prompt_lens=(8, 32), prefill_batches=(1, 2), decode_batches=(1, 2, 4),
                         context_lens=(16, 64), repeats=2, warmup=0)
    wl = generate_workload(WorkloadConfig(n_requests=30, rate=5.0, prompt=LengthDist("fixed", 32),
                                          output=LengthDist("uniform", low=2, high=20), seed=2))
    for speed, flagged in ((1.0, False), (1.5, True)):
        r = DriftingRunner()
        prof = run_profile(r, pcfg, clock=r.clock)
        cost = CostModel.fit(prof, relative=False)
        r.speed = speed
        real = run_serving(r, wl, max_prefill_batch=2, clock=r.clock, sleep=r.sleep)
        drift = drift_check(r, prof, pcfg, clock=r.clock)
        assert drift["drift_pct"].to_numpy() == pytest.approx([100 * (speed - 1)] * 2, abs=1e-6)
        assert drift[["batch", "seq_len"]].values.tolist() == [[2, 32], [4, 64]]  # the largest points
        cmp = compare_to_sim(real, wl, cost, sim_config_for(r, max_prefill_batch=2), drift=drift)
        assert cmp["warning"].tolist() == (cmp["err_pct"].abs() < 100 * (speed - 1)).tolist()
        assert cmp["warning"].sum() >= (6 if flagged else 0) and cmp["warning"].any() == flagged
        fig = plots.plot_sim_vs_real(cmp)
        assert ("moved by 50%" in (fig.layout.title.text or "")) == flagged
        assert [t.endswith("!") for t in fig.data[1].text] == cmp["warning"].tolist()
