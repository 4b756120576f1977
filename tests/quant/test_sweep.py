"""run_quant_sweep: one row per config with the documented columns; an interrupted sweep resumes."""

import pytest

import workbench.quant.sweep as sw
from workbench.quant import QuantConfig, run_quant_sweep


class CharTok:
    def __call__(self, s, add_special_tokens=False):
        return {"input_ids": [ord(c) % 256 for c in s]}


TEXT = "The quick brown fox jumps over the lazy dog. " * 20


def test_sweep_rows_and_resume(tiny, tmp_path, monkeypatch):
    configs = [QuantConfig(bits=8, granularity="per_channel", symmetric=True), QuantConfig(bits=2, group_size=32)]
    df = run_quant_sweep(tiny, CharTok(), configs, text=TEXT, n_tokens=256, seq_len=64, name="qs", root=tmp_path,
                         progress=False)
    assert len(df) == 3 and list(df["method"]) == ["fp", "rtn", "rtn"]
    for col in ("w_bits", "group_size", "method", "granularity", "symmetric", "scheme", "weight_bytes",
                "kl_mean", "kl_p95", "top1_agreement", "ppl"):
        assert col in df
    fp, w8, w2 = df.iloc[0], df.iloc[1], df.iloc[2]
    assert fp["kl_mean"] == pytest.approx(0, abs=1e-6) and fp["top1_agreement"] == 1.0
    assert w8["kl_mean"] < w2["kl_mean"] and w8["top1_agreement"] >= w2["top1_agreement"]
    assert fp["weight_bytes"] > w8["weight_bytes"] > w2["weight_bytes"]
    assert (w8["scheme"], w8["group_size"], w2["group_size"]) == ("W8A16", -1, 32)
    # resume: a re-run with one more config computes only the new point
    calls = []
    real = sw.run_quant_point
    monkeypatch.setattr(sw, "run_quant_point", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    df2 = run_quant_sweep(tiny, CharTok(), configs + [QuantConfig(bits=4, group_size=32)], text=TEXT, n_tokens=256,
                          seq_len=64, name="qs", root=tmp_path, progress=False)
    assert calls == [QuantConfig(bits=4, group_size=32)] and len(df2) == 4


def test_sweep_on_other_text_or_weights_recomputes(tiny, tmp_path, monkeypatch):
    """The point key holds the evaluation data and the weights: the old store reused both points here."""
    import copy

    import torch

    retrained = copy.deepcopy(tiny)
    with torch.no_grad():
        for w in retrained.parameters():
            w.mul_(1.01)
    calls = []
    real = sw.run_quant_point
    monkeypatch.setattr(sw, "run_quant_point", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    kw = {"n_tokens": 128, "seq_len": 64, "name": "qs", "root": tmp_path, "progress": False, "include_fp": False}
    cfg = [QuantConfig(bits=4, group_size=32)]
    run_quant_sweep(tiny, CharTok(), cfg, text=TEXT, **kw)
    run_quant_sweep(tiny, CharTok(), cfg, text=TEXT, **kw)  # same model and text: resumed, nothing runs
    other = run_quant_sweep(tiny, CharTok(), cfg, text=TEXT.upper(), **kw)
    run_quant_sweep(retrained, CharTok(), cfg, text=TEXT, **kw)
    assert calls == cfg * 3 and len(other) == 1
