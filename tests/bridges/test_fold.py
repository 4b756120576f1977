"""Folding AWQ's input scale into the preceding RMSNorm / Linear: exact, reported, refused when impossible."""

import pytest
import torch

from workbench.bridges.fold import fold_awq_scales
from workbench.quant import QuantConfig, QuantLinear, quantize


@pytest.fixture(scope="module")
def awq_gqa(bh):
    model = bh.tiny_llama()
    q, _ = quantize(model, QuantConfig(method="awq", bits=4, group_size=32, awq_grid=10), calib=bh.calib_ids())
    return model, q


def _logits(m, ids):
    with torch.no_grad():
        return m(ids).logits


def _scaled(model):
    return [n for n, m in model.named_modules() if isinstance(m, QuantLinear) and m.input_scale.numel()]


def test_fold_is_exact_and_leaves_no_input_scale(awq_gqa, bh):
    _, q = awq_gqa
    folded, report = fold_awq_scales(q)
    assert _scaled(folded) == [] and len(_scaled(q)) == 14  # 7 Linears x 2 layers carried a scale
    ids = bh.calib_ids(2, 32, seed=5)
    ref, got = _logits(q, ids), _logits(folded, ids)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), (got - ref).abs().max()
    kinds = report.set_index("layer")["fold"]
    assert kinds["model.layers.0.self_attn.q_proj"] == "norm" and kinds["model.layers.1.mlp.up_proj"] == "norm"
    assert kinds["model.layers.0.mlp.down_proj"] == "rows"
    # GQA (4 query heads on 2 KV heads): o_proj's scale differs across the heads sharing v rows
    assert kinds["model.layers.0.self_attn.o_proj"] == "dense"
    assert isinstance(folded.get_submodule("model.layers.0.self_attn.o_proj"), torch.nn.Linear)
    assert isinstance(folded.get_submodule("model.layers.0.mlp.down_proj"), QuantLinear)


def test_fold_in_the_wrong_direction_is_caught(awq_gqa, bh):
    # planted bug: multiplying the norm by a (instead of dividing) moves the logits far beyond tolerance
    _, q = awq_gqa
    folded, _ = fold_awq_scales(q)
    bad = fold_awq_scales(q)[0]
    a = q.model.layers[0].self_attn.q_proj.input_scale
    with torch.no_grad():
        bad.model.layers[0].input_layernorm.weight.mul_(a * a)
    ids = bh.calib_ids(2, 32, seed=5)
    assert (_logits(bad, ids) - _logits(folded, ids)).abs().max() > 1e-2


def test_mha_folds_o_proj_into_v_rows(bh):
    model = bh.tiny_llama(kv=4)  # no grouped-query attention: v rows map one-to-one to o_proj inputs
    q, _ = quantize(model, QuantConfig(method="awq", bits=4, group_size=32, awq_grid=10), calib=bh.calib_ids())
    folded, report = fold_awq_scales(q, unfoldable="error")
    assert set(report["fold"]) <= {"norm", "rows", "ones"} and _scaled(folded) == []
    ids = bh.calib_ids(2, 32, seed=6)
    assert torch.allclose(_logits(folded, ids), _logits(q, ids), rtol=1e-5, atol=1e-5)


def test_unfoldable_modes(awq_gqa):
    _, q = awq_gqa
    with pytest.raises(ValueError, match="unfoldable='dense'"):
        fold_awq_scales(q, unfoldable="error")
    folded, report = fold_awq_scales(q, unfoldable="requantize")
    o = report.set_index("layer").loc["model.layers.0.self_attn.o_proj"]
    assert o["fold"] == "requantized" and 0 < o["rel_err"] < 0.2
    assert isinstance(folded.get_submodule("model.layers.0.self_attn.o_proj"), QuantLinear)
    with pytest.raises(ValueError, match="unknown"):
        fold_awq_scales(q, unfoldable="drop")


def test_rtn_models_pass_unchanged(bh):
    model = bh.tiny_llama()
    q, _ = quantize(model, QuantConfig(method="rtn", bits=4, group_size=32))
    folded, report = fold_awq_scales(q)
    assert report.empty
    ids = bh.calib_ids(1, 16)
    assert torch.equal(_logits(folded, ids), _logits(q, ids))
