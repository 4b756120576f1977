"""Export: a workbench-quantized model as a compressed-tensors checkpoint that transformers (with
compressed-tensors) loads to the same logits, and that the importer reads back to the same integers."""

import json

import pytest
import torch

from workbench.bridges.export import export_compressed_tensors
from workbench.bridges.imports import load_quantized
from workbench.quant import QuantConfig, QuantLinear, quantize

pytestmark = pytest.mark.reference  # cross-checked against compressed-tensors + transformers


def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _logits(m, ids):
    with torch.no_grad():
        return m(ids).logits


CASES = {
    "rtn-w4-g32-asym": QuantConfig(method="rtn", bits=4, group_size=32),
    "rtn-w8-channel-sym": QuantConfig(method="rtn", bits=8, granularity="per_channel", symmetric=True),
    "rtn-w4-tensor-sym": QuantConfig(method="rtn", bits=4, granularity="per_tensor", symmetric=True),
    "gptq-w4-g64-sym": QuantConfig(method="gptq", bits=4, group_size=64, symmetric=True),
    "gptq-w8-g32-asym": QuantConfig(method="gptq", bits=8, group_size=32),
    "awq-w4-g32-asym": QuantConfig(method="awq", bits=4, group_size=32, awq_grid=8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, bh, name):
    cfg = CASES[name]
    q, _ = quantize(bh.tiny_llama(), cfg, calib=bh.calib_ids())
    report = export_compressed_tensors(q, tmp_path / name)
    ids = bh.calib_ids(2, 24, seed=4)
    ref = _logits(q, ids)
    assert torch.allclose(_logits(_hf(tmp_path / name), ids), ref, rtol=1e-5, atol=1e-5)
    back, _ = load_quantized(tmp_path / name)
    assert torch.allclose(_logits(back, ids), ref, rtol=1e-5, atol=1e-5)
    qc = json.loads((tmp_path / name / "config.json").read_text())["quantization_config"]
    args = qc["config_groups"]["group_0"]["weights"]
    assert (args["num_bits"], args["symmetric"]) == (cfg.bits, cfg.symmetric) and qc["format"] == "pack-quantized"
    assert args["strategy"] == ("group" if cfg.granularity == "group" else "channel")
    if cfg.method != "awq":  # same integers and scales back, layer by layer
        for n, m in q.named_modules():
            if isinstance(m, QuantLinear):
                b = back.get_submodule(n)
                assert torch.equal(b.codes(), m.codes()) and torch.equal(b.zero_points().expand_as(
                    b.scales), m.zero_points().expand(b.scales.shape)), n
                assert torch.equal(b.scales.float(), m.scales.float().expand(b.scales.shape)), n
        assert (report["scale_rel_err"] == 0).all()  # float16 scales are exact in a float32 checkpoint


def test_a_wrong_zero_point_is_caught(tmp_path, bh, monkeypatch):
    # planted bug: exporting z + 1 instead of z moves transformers' logits far beyond the tolerance above
    q, _ = quantize(bh.tiny_llama(), CASES["rtn-w4-g32-asym"])
    real = QuantLinear.zero_points
    monkeypatch.setattr(QuantLinear, "zero_points", lambda self: (real(self).clamp(max=14) + 1))
    export_compressed_tensors(q, tmp_path / "bad")
    monkeypatch.undo()
    ids = bh.calib_ids(2, 24, seed=4)
    assert (_logits(_hf(tmp_path / "bad"), ids) - _logits(q, ids)).abs().max() > 1e-2


@pytest.mark.parametrize("cfg, match", [
    (QuantConfig(method="rtn", bits=4, group_size=48, partial_groups=True), "whole groups"),
    (QuantConfig(method="rtn", bits=4, group_size=32, zero_point="float"), "zero_point='int'"),
])
def test_export_refuses_what_the_format_cannot_hold(tmp_path, bh, cfg, match):
    q, _ = quantize(bh.tiny_llama(), cfg)
    with pytest.raises(ValueError, match=match):
        export_compressed_tensors(q, tmp_path / "x")
    with pytest.raises(ValueError, match="no QuantLinear"):
        export_compressed_tensors(bh.tiny_llama(), tmp_path / "y")


@pytest.mark.slow
def test_builtin_model_awq_w4a16_export_matches_transformers(tmp_path, default_model):
    """The built-in SmolLM2-135M, AWQ W4A16 (groups of 64: 576 is not a multiple of 128), exported and
    loaded by transformers + compressed-tensors: same logits as the workbench's quantized forward."""
    model, tok = default_model
    ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    cfg = QuantConfig(method="awq", bits=4, group_size=64, n_calib_samples=2, calib_seq_len=64, awq_grid=2)
    q, _ = quantize(model, cfg, calib=ids)
    report = export_compressed_tensors(q, tmp_path / "awq", tok)
    x = tok("The capital of France is Paris. The capital of Italy is", return_tensors="pt").input_ids
    ref, got = _logits(q, x), _logits(_hf(tmp_path / "awq"), x)
    assert torch.allclose(got, ref, rtol=1e-4, atol=1e-4), (got - ref).abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    folds = report["fold"].value_counts()
    assert folds["norm"] == 150  # q/k/v/gate/up of 30 layers into their norms
    # every down_proj folded into up_proj's rows, or its search kept the identity scale (AWQ's ratio 0;
    # one of 30 does on full-precision calibration activations)
    down = report[report["layer"].str.endswith("mlp.down_proj")]
    assert len(down) == 30 and set(down["fold"]) <= {"rows", "ones"} and (down["fold"] == "rows").sum() >= 25
    assert (tmp_path / "awq" / "tokenizer.json").exists()
