"""KV-cache study: per-position fidelity through the engine, buckets with known answers, speed rows."""

import numpy as np
import pandas as pd
import pytest

from workbench.stack.kv_study import KVStudyConfig, _chunks, by_bucket, kv_speed, run_kv_window


def test_chunks_cover_and_end_at_timed_contexts():
    assert _chunks(10, 4, (6,)) == [(0, 4), (4, 6), (6, 8), (8, 10)]


def test_config_checks():
    with pytest.raises(ValueError, match="kv_dtypes"):
        KVStudyConfig(kv_dtypes=("int4",))
    with pytest.raises(ValueError, match="timed"):
        KVStudyConfig(context=64, timed=(128,))


def test_run_kv_window_on_a_tiny_model(tiny_target):
    import torch

    window = torch.randint(0, 128, (48,), generator=torch.Generator().manual_seed(0))
    cfg = KVStudyConfig(kv_dtypes=("float32", "int8", "fp8_e4m3"), context=48, chunk=16, timed=(16, 48), repeats=1)
    df = run_kv_window(tiny_target, window, cfg)
    assert len(df) == 3 * 48 and set(df["kv_dtype"]) == {"float32", "int8", "fp8_e4m3"}
    same = df[df["kv_dtype"] == "float32"]
    assert (same["kl"] == 0).all() and (same["top1"] == 1).all()  # the reference format itself
    assert np.isnan(df.loc[df["position"] == 47, "nll_kv"]).all() and df["nll_ref"].notna().sum() == 3 * 47
    assert df.groupby("kv_dtype")["kl"].mean()["int8"] < df.groupby("kv_dtype")["kl"].mean()["fp8_e4m3"]
    timed = df[df["decode_ms"].notna()]
    assert sorted(set(timed["position"])) == [15, 47]
    sp = kv_speed(df)
    assert sorted(sp["context"].unique()) == [16, 48]
    i8 = sp[(sp["kv_dtype"] == "int8") & (sp["context"] == 48)].iloc[0]
    assert i8["kv_mb"] == pytest.approx(48 * 2 * 2 * 2 * 16 * (1 + 4 / 16) / 1e6)


def test_by_bucket_known_answer():
    pos = np.arange(8)
    df = pd.DataFrame({"kv_dtype": "int8", "position": pos, "kl": pos.astype(float), "top1": [1, 1, 1, 1, 1, 0, 1, 0],
                       "nll_ref": 0.0, "nll_kv": np.log(2.0)})
    b = by_bucket(df, edges=(0, 4, 100))
    assert b["bucket"].tolist() == ["[0, 4)", "[4, 8)"]
    assert b["kl_mean"].tolist() == [1.5, 5.5] and b["top1_agreement"].tolist() == [1.0, 0.5]
    assert b["ppl_kv"].tolist() == pytest.approx([2.0, 2.0]) and b["n_positions"].tolist() == [4, 4]
    assert b.iloc[1]["top1_lo"] < 0.5 < b.iloc[1]["top1_hi"]
