"""run_quant_sweep: one row per config with the documented columns, MMLU and speed columns; resumes."""

import pandas as pd
import pytest

import workbench.studies.quant_sweep as sw
from workbench.quant import QuantConfig
from workbench.studies.quant_sweep import run_quant_sweep
from workbench.studies.speed import SpeedConfig, measure_speed


class CharTok:
    def __call__(self, s, add_special_tokens=False):
        return {"input_ids": [ord(c) % 256 for c in s]}


TEXT = "The quick brown fox jumps over the lazy dog. " * 20
FAST = SpeedConfig(decode_batches=(1, 2), prefill_tokens=16, context=8, repeats=1, warmup=0)


def test_sweep_rows_and_resume(tiny, tmp_path, monkeypatch):
    configs = [QuantConfig(bits=8, granularity="per_channel", symmetric=True), QuantConfig(bits=2, group_size=32)]
    kw = {"text": TEXT, "n_tokens": 256, "seq_len": 64, "n_questions": 0, "speed": FAST, "root": tmp_path,
          "progress": False}
    df = run_quant_sweep(tiny, CharTok(), configs, name="qs", **kw)
    assert len(df) == 3 and list(df["method"]) == ["fp", "rtn", "rtn"]
    for col in ("w_bits", "group_size", "method", "granularity", "symmetric", "scheme", "weight_bytes",
                "kl_mean", "kl_p95", "top1_agreement", "ppl", "decode_ms_b1", "decode_ms_b2", "prefill_ms_16",
                "peak_mem_bytes", "mem_source", "speed_device", "runtime", "engine_weight_bytes"):
        assert col in df
    fp, w8, w2 = df.iloc[0], df.iloc[1], df.iloc[2]
    assert fp["kl_mean"] == pytest.approx(0, abs=1e-6) and fp["top1_agreement"] == 1.0
    assert w8["kl_mean"] < w2["kl_mean"] and w8["top1_agreement"] >= w2["top1_agreement"]
    assert fp["weight_bytes"] > w8["weight_bytes"] > w2["weight_bytes"]
    assert fp["engine_weight_bytes"] > w8["engine_weight_bytes"] > w2["engine_weight_bytes"]
    assert (w8["scheme"], w8["group_size"], w2["group_size"]) == ("W8A16", -1, 32)
    assert (fp["runtime"], w8["runtime"]) == ("dense", "int8 int8pack, dequantized once x8; dense x1")
    assert w2["runtime"].startswith("int4 dequant g32") and (df["decode_ms_b1"] > 0).all()
    assert set(df["speed_device"]) == {"cpu (1 thread)"} and set(df["mem_source"]) == {"footprint model (weights + KV cache)"}
    # resume: a re-run with one more config computes only the new point
    calls = []
    real = sw.run_quant_point
    monkeypatch.setattr(sw, "run_quant_point", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    df2 = run_quant_sweep(tiny, CharTok(), configs + [QuantConfig(bits=4, group_size=32)], name="qs", **kw)
    assert calls == [QuantConfig(bits=4, group_size=32)] and len(df2) == 4
    no_speed = run_quant_sweep(tiny, CharTok(), configs[:1], **{**kw, "speed": False}, include_fp=False)
    assert "decode_ms_b1" not in no_speed and len(no_speed) == 1


def test_speed_footprint_model_counts_weights_and_kv(tiny):
    row = measure_speed(tiny, FAST)
    from workbench.engine import Engine

    e = Engine.from_hf(tiny, max_batch=2, max_seq=16)
    kv = 2 * 2 * 2 * 2 * e.s_cache * 32 * 4  # k and v, layers, slots, kv heads, S_cache, head_dim, float32
    embed = 256 * 128 * 4  # the tiny model's lm_head is not tied to the embedding: both are held
    assert row["peak_mem_bytes"] == e.weight_bytes() + embed + kv
    assert row["engine_weight_bytes"] == e.weight_bytes()


def _fake_mmlu(calls, supports: bool):
    def run_mmlu(model, tok, questions, dev, n_shot=5, batch_size=8, progress=True, **kw):
        calls.append(kw)
        n = len(questions)
        return pd.DataFrame({"qid": range(n), "subject": questions["subject"].values, "answer": 0, "pred": 0,
                             "correct": [True] * (n // 2) + [False] * (n - n // 2),
                             **({"correct_norm": [True] * n} if supports else {}), "n_shot": n_shot})

    if supports:
        def with_formulation(model, tok, questions, dev, n_shot=5, batch_size=8, progress=True,
                             formulation="mmlu"):
            return run_mmlu(model, tok, questions, dev, n_shot, batch_size, progress, formulation=formulation)
        return with_formulation
    return run_mmlu


@pytest.mark.parametrize("supports", [True, False])
def test_mmlu_formulation_passed_through_and_feature_detected(tiny, monkeypatch, supports):
    calls = []
    monkeypatch.setattr(sw, "run_mmlu", _fake_mmlu(calls, supports))
    qs = pd.DataFrame({"subject": ["astronomy"] * 40, "question": "q", "choices": [["a", "b", "c", "d"]] * 40,
                       "answer": 0})
    if supports:
        row = sw._mmlu(tiny, CharTok(), qs, qs, 0, 8, "mmlu_continuation")
        assert calls == [{"formulation": "mmlu_continuation"}]
        assert (row["mmlu_metric"], row["mmlu_acc"], row["mmlu_acc_unnormed"]) == ("acc_norm", 1.0, 0.5)
        assert row["mmlu_vs_chance"] == "above chance"
    else:
        with pytest.warns(UserWarning, match="no formulation="):
            row = sw._mmlu(tiny, CharTok(), qs, qs, 0, 8, "mmlu_continuation")
        assert calls == [{}] and (row["mmlu_formulation"], row["mmlu_metric"], row["mmlu_acc"]) == ("mmlu", "acc", 0.5)
        assert row["mmlu_vs_chance"] == "above chance" and row["mmlu_ci_lo"] > 0.25  # 20/40: Wilson [0.35, 0.65]
    assert row["mmlu_chance"] == 0.25 and row["mmlu_n"] == 40


def test_sweep_defaults_mmlu_on_and_rejects_bad_formulation(tiny):
    with pytest.raises(ValueError, match="formulation='cloze'"):
        run_quant_sweep(tiny, CharTok(), [], text=TEXT, formulation="cloze")
    with pytest.raises(ValueError, match="n_questions=-1"):
        run_quant_sweep(tiny, CharTok(), [], text=TEXT, n_questions=-1)


@pytest.mark.parametrize("field,bad", [("repeats", 0), ("prefill_tokens", 51.2), ("decode_batches", (1, 0)),
                                       ("context", "8"), ("warmup", -1), ("decode_batches", ())])
def test_speed_config_fields_name_themselves(field, bad):
    with pytest.raises(ValueError, match=rf"SpeedConfig\.{field}="):
        SpeedConfig(**{field: bad})
    assert SpeedConfig(decode_batches=[1, 4]).decode_batches == (1, 4)
    assert SpeedConfig.for_device("cpu").repeats == 1 and SpeedConfig.for_device("cuda").repeats == 30


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
    kw = {"n_tokens": 128, "seq_len": 64, "name": "qs", "root": tmp_path, "progress": False, "include_fp": False,
          "n_questions": 0, "speed": False}
    cfg = [QuantConfig(bits=4, group_size=32)]
    run_quant_sweep(tiny, CharTok(), cfg, text=TEXT, **kw)
    run_quant_sweep(tiny, CharTok(), cfg, text=TEXT, **kw)  # same model and text: resumed, nothing runs
    other = run_quant_sweep(tiny, CharTok(), cfg, text=TEXT.upper(), **kw)
    run_quant_sweep(retrained, CharTok(), cfg, text=TEXT, **kw)
    assert calls == cfg * 3 and len(other) == 1


def test_run_quant_speed_takes_random_weights_times_every_point_and_resumes(tiny, calib_ids, tmp_path, monkeypatch):
    """:func:`run_quant_speed`: a model flagged random (``load_model("random:...")`` provenance) is refused by the
    fidelity sweep but timed here, one row per point (FP, RTN, AWQ, GPTQ at INT4 g64) with the speed columns, the
    runtime the engine ran (INT4 kernels for every method) and the "timing only" label; a re-run with a stored name
    computes only a new point; ``speed=False`` names the fix."""
    from workbench.models import RandomWeightsError
    from workbench.models.provenance import RANDOM_LABEL, attach
    from workbench.studies.quant_sweep import run_quant_speed

    attach(tiny, {"source": "random", "name": "random:tiny", "weights": "random"})
    with pytest.raises(RandomWeightsError):
        run_quant_sweep(tiny, CharTok(), [QuantConfig(group_size=64)], text=TEXT, n_tokens=128, seq_len=64,
                        n_questions=0, speed=FAST)
    small = {"n_calib_samples": 2, "calib_seq_len": 32, "awq_grid": 2, "awq_max_tokens": 64}
    configs = [QuantConfig(method=m, group_size=64, **small) for m in ("rtn", "awq", "gptq")]
    kw = {"speed": FAST, "calib": calib_ids, "root": tmp_path, "progress": False}
    df = run_quant_speed(tiny, CharTok(), configs, name="spd", **kw)
    assert list(df["method"]) == ["fp", "rtn", "awq", "gptq"] and set(df["weights"]) == {RANDOM_LABEL}
    assert (df[["decode_ms_b1", "decode_ms_b2", "prefill_ms_16"]] > 0).all().all()
    assert df["runtime"].iloc[0] == "dense" and all(r.startswith("int4") for r in df["runtime"].iloc[1:])
    assert df["engine_weight_bytes"].iloc[0] > 2 * df["engine_weight_bytes"].iloc[1]
    assert "kl_mean" not in df and "mmlu_acc" not in df
    assert df["speedup_b1"].iloc[0] == 1.0
    assert df["speedup_b2"].iloc[2] == pytest.approx(df["decode_ms_b2"].iloc[0] / df["decode_ms_b2"].iloc[2])
    calls = []
    real = sw.measure_speed
    monkeypatch.setattr(sw, "measure_speed", lambda m, c, e=None: calls.append(1) or real(m, c, e))
    df2 = run_quant_speed(tiny, CharTok(), configs + [QuantConfig(group_size=32, **small)], name="spd", **kw)
    assert len(calls) == 1 and len(df2) == 5
    with pytest.raises(ValueError, match="speed=True"):
        run_quant_speed(tiny, CharTok(), configs, speed=False)
