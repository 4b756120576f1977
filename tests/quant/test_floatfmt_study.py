"""The float formats inside the quantization study: presets, a sweep row (memory, fidelity, the speed column that
says no float kernel ran), footprint, and the stored key that resumes to a FloatConfig."""

import pytest
import torch

from workbench.quant import footprint
from workbench.quant.floatconfig import FLOAT_GRIDS, FloatConfig, float_grid, is_float_row
from workbench.quant.floatquant import quantize_float


def test_presets_and_errors():
    assert [c.scheme for c in float_grid("all")] == ["FP8_DYNAMIC", "FP8", "FP8_BLOCK", "W8A8", "NVFP4", "NVFP4A16",
                                                     "MXFP4", "MXFP4A16"]
    row = FloatConfig.from_name("nvfp4").to_row()
    assert (row["w_bits"], row["a_bits"], row["group_size"], row["format"]) == (4, 4, 16, "float")
    assert is_float_row(row) and not is_float_row({"bits": 4, "method": "rtn"})
    with pytest.raises(ValueError, match="Did you mean 'fp8_dynamic'"):
        FloatConfig.from_name("fp8_dynamc")
    with pytest.raises(ValueError, match="smoothing_strength"):
        FloatConfig("W8A8", smoothing_strength=1.5)
    assert set(FLOAT_GRIDS["demo_cpu"]) <= set(FLOAT_GRIDS["all"])


def test_footprint_counts_float_storage(tiny, calib_ids):
    fp = footprint(tiny)
    q8 = footprint(quantize_float(tiny, FloatConfig("FP8_DYNAMIC"))[0])
    q4 = footprint(quantize_float(tiny, FloatConfig("NVFP4"), calib_ids)[0])
    n = q8["n_weights_quantized"]
    assert n == 2 * (128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256) and q4["n_weights_quantized"] == n
    # FP8: 1 byte a weight + a float32 scale per row; NVFP4: 4 bits + one E4M3 byte per 16 + global scales
    rows = 2 * sum((128, 64, 64, 128, 256, 256, 128))  # output rows of the 14 Linears
    assert q8["quant_bytes"] == n + 4 * rows
    assert 4.5 < q4["bits_per_weight_quantized"] < 4.52
    assert q4["weight_bytes"] < q8["weight_bytes"] < fp["weight_bytes"]


def test_w8a8_smoothing_is_exact_before_rounding(tiny, calib_ids):
    import copy

    from workbench.quant.floatquant import smooth_model

    m = copy.deepcopy(tiny)
    rep = smooth_model(m, calib_ids, 0.5)
    assert len(rep) == 4 and (rep["s_min"] > 0).all()
    with torch.no_grad():
        assert torch.allclose(m(calib_ids[:2]).logits, tiny(calib_ids[:2]).logits, atol=1e-4, rtol=1e-4)


def test_activation_quantization_changes_the_output(tiny, calib_ids):
    """W4A4 differs from its weight-only twin (same weights): the input of every Linear is quantized."""
    a4, _ = quantize_float(tiny, FloatConfig("NVFP4"), calib_ids)
    a16, _ = quantize_float(tiny, FloatConfig("NVFP4A16"))
    b16 = dict(a16.named_buffers())
    for n, x in a4.named_buffers():
        if n.endswith("weight_q"):
            assert torch.equal(x, b16[n]), n
    with torch.no_grad():
        assert not torch.allclose(a4(calib_ids[:1]).logits, a16(calib_ids[:1]).logits)


def test_sweep_row_on_the_builtin_model(default_model):
    from workbench.eval.fidelity import eval_windows
    from workbench.studies.quant_sweep import NO_FLOAT_KERNEL, run_quant_point
    from workbench.studies.speed import SpeedConfig

    m, tok = default_model
    text = "The history of the city begins in the twelfth century, when a small market grew by the river. " * 30
    w = eval_windows(tok, text, 128, 64)
    row = run_quant_point(m, tok, FloatConfig("FP8_DYNAMIC"), w, speed=SpeedConfig.for_device("cpu")).iloc[0]
    fp = run_quant_point(m, tok, None, w).iloc[0]
    assert row["format"] == "float" and row["runtime"] == NO_FLOAT_KERNEL
    assert 0 < row["kl_mean"] < 0.5 and row["weight_bytes"] < 0.6 * fp["weight_bytes"]


def test_fp8_vs_w4a16_takeaway_is_computed_from_the_rows():
    import pandas as pd

    from workbench.quant.floatverdict import fp8_vs_w4a16

    base = {"mmlu_acc": 0.5, "mmlu_ci_lo": 0.4, "mmlu_ci_hi": 0.6, "mmlu_n": 100}
    grid = pd.DataFrame([
        {"label": "GPTQ W4 g128 asym", "kl_mean": 0.2, "kl_windows": [0.21, 0.19, 0.2, 0.22], "weight_bytes": 100, **base},
        {"label": "FP8_DYNAMIC (W8A8 e4m3)", "kl_mean": 0.03, "kl_windows": [0.03, 0.02, 0.04, 0.03],
         "weight_bytes": 130, **base}])
    out = fp8_vs_w4a16(grid)
    assert out["memory_ratio"] == pytest.approx(1.3)
    assert out["kl"].winner == "FP8_DYNAMIC (W8A8 e4m3)" and out["mmlu"].winner is None
    assert "1.30x" in out["text"] and "no difference" in out["text"]
    grid.loc[1, "kl_windows"] = [0.25, 0.15, 0.2, 0.22]  # mean difference 0.005, spread wide: no winner
    grid.loc[1, "kl_mean"] = 0.205
    assert fp8_vs_w4a16(grid)["kl"].winner is None
    with pytest.raises(ValueError, match="float_grid"):
        fp8_vs_w4a16(grid.iloc[:1])


def test_pareto_front_known_answer():
    import pandas as pd

    from workbench.quant.floatverdict import pareto_front

    g = pd.DataFrame({"label": list("abcde"), "weight_bytes": [100, 130, 130, 220, 500],
                      "kl_mean": [0.2, 0.03, 0.05, 0.003, 0.0]})
    assert pareto_front(g)["label"].tolist() == ["a", "b", "d", "e"]  # c: same bytes as b, higher KL
    with pytest.raises(ValueError, match="no column"):
        pareto_front(g, y="ppl")
