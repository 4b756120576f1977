"""Hardware presets, roofline counts against torch and HF, cost-model fit and roofline form."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.roofline import decode_time_ms, prefill_time_ms

TINY = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 128}


def tiny(kind: str, tie: bool):
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=tie)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**TINY, tie_word_embeddings=tie)).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("tie", [True, False])
def test_param_count_matches_hf(kind, tie):
    model = tiny(kind, tie)
    spec = ModelSpec.from_hf_config(model.config, bytes_per_param=4)
    assert spec.n_params == sum(p.numel() for p in model.parameters())


def test_presets_match_published_param_counts():
    # Hugging Face model cards: Qwen2-7B 7,615,616,512; Meta-Llama-3-8B 8,030,261,248 parameters
    assert ModelSpec.from_name("qwen2-7b").n_params == 7_615_616_512
    assert ModelSpec.from_name("llama-3-8b").n_params == 8_030_261_248
    assert ModelSpec.from_name("llama-3-8b").kv_bytes_per_token == 131072  # 2*32*8*128*2
    with pytest.raises(ValueError, match="Did you mean 'qwen2-7b'"):
        ModelSpec.from_name("qwen2-7")


def test_kv_bytes_per_token_matches_dynamic_cache():
    from transformers import DynamicCache

    model = tiny("llama", False)
    spec = ModelSpec.from_hf_config(model.config, bytes_per_param=4, bytes_per_kv=4)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.arange(7).view(1, -1), past_key_values=cache, use_cache=True)
    nbytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert nbytes == 7 * spec.kv_bytes_per_token


@pytest.mark.parametrize("L", [1, 5, 16])
def test_prefill_flops_match_torch_flop_counter(L):
    """torch's FlopCounterMode on the HF forward must agree exactly once two known differences are
    added: eager attention computes all L^2 pairs (the roofline counts the causal L(L+1)/2), and HF
    computes the RoPE angles with a tiny matmul."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = LlamaConfig(**TINY, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).eval()
    spec = ModelSpec.from_hf_config(model.config)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.arange(L).view(1, -1), logits_to_keep=1)
    nd = spec.n_layers * spec.d_attn
    rope = spec.head_dim * L  # HF computes the RoPE angles as a [head_dim/2, 1] @ [1, L] matmul
    ours_as_eager = spec.prefill_flops([L]) - 4 * nd * L * (L + 1) / 2 + 4 * nd * L * L + rope
    assert fc.get_total_flops() == pytest.approx(ours_as_eager, rel=1e-12)


@pytest.mark.parametrize("hw", ["h200", "a100-80g", "l40s"])
def test_from_roofline_equals_roofline_times(hw):
    model, spec = ModelSpec.from_name("llama-3-8b"), HardwareSpec.from_name(hw)
    cm = CostModel.from_roofline(model, spec)
    for L in (1, 100, 2000, 8000):
        assert cm.prefill_ms(L, L * L) == pytest.approx(prefill_time_ms(model, spec, [L]), rel=1e-9)
    for B, K in ((1, 10), (8, 8 * 4000), (256, 256 * 300), (512, 512 * 2000)):
        assert cm.decode_ms(B, K) == pytest.approx(decode_time_ms(model, spec, B, K), rel=1e-9)


def test_h200_decode_is_bandwidth_bound_and_long_prefill_compute_bound():
    model, hw = ModelSpec.from_name("qwen2-7b"), HardwareSpec.from_name("h200")
    cm = CostModel.from_roofline(model, hw)
    assert cm.decode_ms(1, 512) == pytest.approx(model.decode_bytes(1, 512) / 4.8e12 * 1e3, rel=1e-12)
    assert cm.prefill_ms(4096, 4096**2) == pytest.approx(model.prefill_flops([4096]) / 989.4e12 * 1e3, rel=1e-12)


def test_mixed_reduces_to_pure_steps():
    cm = CostModel(a=2, b=0.1, c=1e-4, d=5, e=0.3, f=0.01, floor=(6, 0, 0, 6, 0, 0.02))
    assert cm.mixed_ms(50, 2500, 0, 0) == pytest.approx(float(cm.prefill_ms(50, 2500)))
    assert cm.mixed_ms(0, 0, 7, 900) == pytest.approx(float(cm.decode_ms(7, 900)))
    line1 = max(2, 5) + 0.1 * 50 + 1e-4 * 2500 + 0.3 * 7 + 0.01 * 900  # 21.35
    line2 = 6 + 0.02 * 900  # 24: the floor line wins
    assert cm.mixed_ms(50, 2500, 7, 900) == pytest.approx(max(line1, line2))


def test_fit_recovers_coefficients():
    rng = np.random.default_rng(0)
    true = CostModel(a=3.0, b=0.05, c=2e-5, d=8.0, e=0.4, f=0.002)
    rows = []
    for B in (1, 2, 4):
        for L in (16, 64, 256, 512):
            rows.append({"phase": "prefill", "batch": B, "n_tokens": B * L, "attn_sq": B * L * L, "kv_tokens": 0})
    for B in (1, 4, 16, 32):
        for L in (32, 256, 1024):
            rows.append({"phase": "decode", "batch": B, "n_tokens": B, "attn_sq": 0, "kv_tokens": B * L})
    df = pd.DataFrame(rows)
    exact = np.where(df["phase"] == "prefill", true.prefill_ms(df["n_tokens"], df["attn_sq"]),
                     true.decode_ms(df["batch"], df["kv_tokens"]))
    fit = CostModel.fit(df.assign(ms=exact))
    for k in "abcdef":
        assert getattr(fit, k) == pytest.approx(getattr(true, k), rel=1e-6)
    noisy = CostModel.fit(df.assign(ms=exact * rng.lognormal(0, 0.02, len(df))))
    assert np.abs(noisy.residuals(df.assign(ms=exact))["rel_err"]).max() < 0.05
    with pytest.raises(ValueError, match="prefill"):
        CostModel.fit(df[df["phase"] == "decode"].assign(ms=1.0))


def test_fit_leaves_graph_replayed_prefill_steps_out():
    """A GPU profile: prefill steps of <= 16 tokens per row replay a CUDA graph (about 1 ms) while longer ones run
    eagerly, bound by the host (about 10 ms; SmolLM2-135M on an H200). The prefill line is fitted to the eager
    steps only, so it predicts them (the line through all points was 70-85% under every eager step: the
    simulated TTFT of notebook 03's real loop was -91%); without a ``graph`` column, or with fewer than 3 eager
    steps, every row counts as before."""
    true = CostModel(a=9.9, b=0.002, c=0.0, d=0.8, e=0.03, f=1e-5)
    rows = [{"phase": "prefill", "batch": b, "seq_len": L, "n_tokens": b * L, "attn_sq": b * L * L, "kv_tokens": 0,
             "graph": L <= 16} for b in (1, 2, 4) for L in (16, 32, 64, 128, 256)]
    rows += [{"phase": "decode", "batch": b, "seq_len": L, "n_tokens": b, "attn_sq": 0, "kv_tokens": b * L,
              "graph": True} for b in (1, 4, 16) for L in (32, 256)]
    df = pd.DataFrame(rows)
    ms = np.where(df["phase"] == "prefill", true.prefill_ms(df["n_tokens"], df["attn_sq"]),
                  true.decode_ms(df["batch"], df["kv_tokens"]))
    df["ms"] = np.where(df["graph"] & (df["phase"] == "prefill"), 1.2, ms)  # graph replay: a cheaper regime
    fit = CostModel.fit(df)
    assert (fit.a, fit.b) == (pytest.approx(9.9, rel=1e-6), pytest.approx(0.002, rel=1e-5))
    assert "3 graph-replayed prefill points left out" in fit.source and "fit to 18 profile points" in fit.source
    res = fit.residuals(df)
    assert res.loc[~df["graph"], "rel_err"].abs().max() < 1e-6  # every eager step predicted
    blind = CostModel.fit(df.drop(columns="graph"))  # the old fit: one line through both regimes
    assert blind.residuals(df).loc[~df["graph"] & (df["phase"] == "prefill"), "rel_err"].min() < -0.3
    few = df[(df["phase"] == "decode") | df["graph"] | (df["seq_len"] == 32) & (df["batch"] < 4)]
    assert CostModel.fit(few).source == f"nnls fit to {len(few)} profile points"  # 2 eager rows: all kept


def test_hardware_presets_and_errors():
    h200 = HardwareSpec.from_name("H200")
    assert (h200.hbm_gbs, h200.mem_gb, h200.matmul_flops, h200.flops_dtype) == (4800, 141, 989.4e12, "bfloat16")
    assert h200.ridge_flops_per_byte == pytest.approx(206.1, rel=1e-3)
    with pytest.raises(ValueError, match="Did you mean 'h200'"):
        HardwareSpec.from_name("h20")
    with pytest.raises(ValueError, match="hbm_gbs"):
        HardwareSpec("x", hbm_gbs=0, matmul_flops=1, mem_gb=1, link_gbs=1)


def test_measure_cpu_known_answer(monkeypatch):
    """HardwareSpec.measure on a clock that makes every timed copy and matmul last a known time (the untimed
    warm-up call reads no clock): bandwidth = read + write bytes of the 8 MiB copy (STREAM "copy") over the
    best of 3 copy times (4 ms, not the 10 or 6), 2 * 8 * 2**20 / 0.004 s = 4.194304 GB/s; FLOP/s = 2 n^3 over
    the best matmul time, 2 * 256**3 / 0.002 s = 16.777216 GFLOP/s; memory = the host's MemTotal (/proc/meminfo,
    an independent reading). A one-way byte count, a mean or a max of the repeats, or n^3 FLOPs fails."""
    from workbench.pd import hardware

    durations = [0.010, 0.004, 0.006, 0.003, 0.002, 0.005]  # the 3 timed copies, then the 3 timed matmuls
    stamps = iter(t for i, d in enumerate(durations) for t in (10.0 * i, 10.0 * i + d))
    monkeypatch.setattr(hardware.time, "perf_counter", lambda: next(stamps))
    hw = HardwareSpec.measure("cpu", copy_mb=8, matmul_n=256, repeats=3)
    assert hw.hbm_gbs == pytest.approx(4.194304, rel=1e-9)  # (clock stamps carry float round-off)
    assert hw.matmul_flops == pytest.approx(16.777216e9, rel=1e-9) and hw.flops_dtype == "float32"
    assert hw.link_gbs == hw.hbm_gbs  # same host: the link is memory
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_total_kb = next(int(ln.split()[1]) for ln in meminfo if ln.startswith("MemTotal:"))
    assert hw.mem_gb == pytest.approx(mem_total_kb * 1024 / 1e9, rel=1e-3)


def test_measure_cpu_on_the_real_clock_is_plausible():
    """The same on the real clock: bandwidth and FLOP/s within what any CPU of this decade does (wide bounds:
    the machine is shared), and the stored times give the reported rates."""
    hw = HardwareSpec.measure("cpu", copy_mb=8, matmul_n=256, repeats=3)
    assert 0.1 < hw.hbm_gbs < 1e4 and 1e8 < hw.matmul_flops < 1e15
    assert hw.hbm_gbs == pytest.approx(2 * 8 * 2**20 / hw.extra["copy_s"] / 1e9)
