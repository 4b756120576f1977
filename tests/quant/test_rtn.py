"""RTN definitions on hand-computed cases, and QuantLinear storage / forward."""

import copy

import pytest
import torch
import torch.nn.functional as F

from workbench.quant import QuantConfig, QuantLinear, quantize
from workbench.quant.rtn import compute_qparams, dequantize_codes, fake_quantize, quantize_codes


def test_asymmetric_known_answer():
    # lo=-1, hi=2 -> s=(2-(-1))/3=1, z=round(1)=1; q=round(w/s)+z; 0.5 rounds half-to-even to 0
    w = torch.tensor([[-1.0, 0.5, 0.25, 2.0]])
    s, z = compute_qparams(w, bits=2, group_size=-1, symmetric=False)
    assert s.tolist() == [[1.0]] and z.tolist() == [[1]]
    q = quantize_codes(w, s, z, 2)
    assert q.tolist() == [[0, 1, 1, 3]]
    assert dequantize_codes(q, s, z).tolist() == [[-1.0, 0.0, 0.0, 2.0]]


def test_symmetric_known_answer_matches_absmax_over_7p5():
    # compressed-tensors: s = absmax / ((2^4 - 1) / 2) = 3 / 7.5 = 0.4; codes in [-8, 7] offset by 8
    w = torch.tensor([[-1.5, 0.75, 3.0, 0.0]])
    s, z = compute_qparams(w, bits=4, group_size=-1, symmetric=True)
    assert s.item() == pytest.approx(0.4) and z.item() == 8
    q = quantize_codes(w, s, z, 4)
    assert q.tolist() == [[4, 10, 15, 8]]
    assert dequantize_codes(q, s, z)[0].tolist() == pytest.approx([-1.6, 0.8, 2.8, 0.0])


@pytest.mark.parametrize("gs,shape", [(0, (1, 1)), (-1, (6, 1)), (16, (6, 4))])
def test_qparam_shapes(gs, shape):
    w = torch.randn(6, 64, generator=torch.Generator().manual_seed(0))
    s, z = compute_qparams(w, 4, gs, False, torch.float16)
    assert s.shape == shape and z.shape == shape and s.dtype == torch.float16 and z.dtype == torch.uint8


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_error_bounded_by_half_step(bits):
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(bits))
    s, z = compute_qparams(w, bits, 32, False)
    err = (dequantize_codes(quantize_codes(w, s, z, bits), s, z) - w).abs()
    step = s.float().repeat_interleave(32, dim=1)
    assert torch.all(err <= step / 2 + 1e-6)


def test_more_bits_and_smaller_groups_lower_error():
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(3))
    mse = {b: ((fake_quantize(w, b, 128, False) - w) ** 2).mean() for b in (2, 3, 4, 8)}
    assert mse[2] > mse[3] > mse[4] > mse[8]
    g = {gs: ((fake_quantize(w, 4, gs, True) - w) ** 2).mean() for gs in (0, -1, 128, 32)}
    assert g[0] > g[-1] > g[128] > g[32]


def test_quantize_leaves_original_and_forward_matches_dequantized(tiny):
    before = copy.deepcopy(tiny.state_dict())
    q, rep = quantize(tiny, QuantConfig(bits=4, group_size=32))
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())
    assert isinstance(tiny.model.layers[0].mlp.down_proj, torch.nn.Linear)
    ql = q.model.layers[0].mlp.down_proj
    assert isinstance(ql, QuantLinear) and not isinstance(q.lm_head, QuantLinear)  # lm_head skipped
    assert len(rep) == 2 * 7 and set(rep.columns) >= {"weight_mse", "max_abs_err", "bits_per_weight"}
    x = torch.randn(3, ql.in_features)
    assert torch.allclose(ql(x), F.linear(x, ql.dequantize_weight()), atol=1e-6)
    p = ql.quant_params()
    assert p["q"].shape == (ql.out_features, ql.in_features) and p["scales"].shape == (ql.out_features, 8)
    w_hat = (p["q"].float() - p["zeros"].float().repeat_interleave(32, 1)) * p["scales"].float().repeat_interleave(32, 1)
    assert torch.equal(w_hat, ql.dequantize_weight(torch.float32))
    # INT4 g32 asym, fp16 scales: 4 + 16/32 + 8/32 bits per weight
    assert rep["bits_per_weight"].tolist() == pytest.approx([4.75] * len(rep))
    # report MSE equals the measured error of the stored weight
    w = tiny.model.layers[0].mlp.down_proj.weight
    assert rep.set_index("layer").loc["model.layers.0.mlp.down_proj", "weight_mse"] == pytest.approx(
        float(((ql.dequantize_weight() - w.detach()) ** 2).mean()), rel=1e-5)


def test_per_tensor_quant_params_expand(tiny):
    q, _ = quantize(tiny, QuantConfig(granularity="per_tensor", symmetric=True))
    p = q.model.layers[0].self_attn.q_proj.quant_params()
    assert p["scales"].shape == (128, 1) and p["group_size"] == 128 and p["zeros"].unique().tolist() == [8]
    assert q.model.layers[0].self_attn.q_proj.zeros.numel() == 0  # symmetric: zero point not stored


def test_partial_last_group_equals_separate_groups():
    w = torch.randn(4, 192, generator=torch.Generator().manual_seed(5))
    with pytest.raises(ValueError, match="partial_groups"):
        from workbench.quant.rtn import resolve_group_size

        resolve_group_size(128, 192, "x")
    s, z = compute_qparams(w, 4, 128, False)
    assert s.shape == (4, 2)
    s0, z0 = compute_qparams(w[:, :128], 4, -1, False)
    s1, z1 = compute_qparams(w[:, 128:], 4, -1, False)
    assert torch.equal(s, torch.cat([s0, s1], 1)) and torch.equal(z, torch.cat([z0, z1], 1))
    w_hat = fake_quantize(w, 4, 128, False)
    assert torch.equal(w_hat[:, 128:], fake_quantize(w[:, 128:], 4, -1, False))
    w = w + 5.0  # all positive: the float-zero range must not see any padding value
    for sym, fz in ((False, True), (True, False)):
        assert torch.equal(fake_quantize(w, 3, 128, sym, float_zero=fz)[:, 128:],
                           fake_quantize(w[:, 128:], 3, -1, sym, float_zero=fz))


def test_float_zero_recovers_q4_1_blocks_int_zero_does_not():
    # weights built as llama.cpp Q4_1 does (w = d*q + m per block of 32, fp16 d and m, q in 0..15 using
    # both ends): the float-zero grid recovers them; the integer-zero grid (must contain 0) cannot
    g = torch.Generator().manual_seed(7)
    q = torch.randint(0, 16, (64, 128), generator=g).float()
    q[:, ::32], q[:, 1::32] = 0, 15
    d = (torch.rand(64, 4, generator=g) * 0.01 + 0.001).half().float().repeat_interleave(32, 1)
    m = (-(torch.rand(64, 4, generator=g)) * 0.05).half().float().repeat_interleave(32, 1)
    w = q * d + m
    rel = lambda w_hat: float((w_hat - w).norm() / w.norm())
    assert rel(fake_quantize(w, 4, 32, False, torch.float32, float_zero=True)) < 1e-6
    assert rel(fake_quantize(w, 4, 32, False, torch.float16, float_zero=True)) < 2e-3  # fp16 zero storage
    assert rel(fake_quantize(w, 4, 32, False)) > 0.02


def test_bfloat16_model_quantizes_and_runs(tiny, calib_ids):
    m = tiny.to(torch.bfloat16)
    q, rep = quantize(m, QuantConfig(method="gptq", bits=4, group_size=32), calib_ids)
    ql = q.model.layers[1].mlp.up_proj
    assert ql.compute_dtype == torch.bfloat16 and ql.dequantize_weight().dtype == torch.bfloat16
    with torch.no_grad():
        out = q(calib_ids[:2]).logits
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    assert rep["rel_err"].max() < 0.2  # INT4 g32: ~0.1 relative weight error


@pytest.mark.parametrize("bits,expected", [(2, 2.75), (3, 3.75), (4, 4.75), (6, 6.75), (8, 8.75)])
def test_bits_per_weight_is_packed_width_plus_group_params(tiny, bits, expected):
    # codes packed to `bits` bits + fp16 scale and uint8 zero per group of 32: bits + 24/32
    q, rep = quantize(tiny, QuantConfig(bits=bits, group_size=32))
    assert rep["bits_per_weight"].tolist() == pytest.approx([expected] * len(rep))
    ql = q.model.layers[0].mlp.down_proj
    x = torch.randn(2, ql.in_features)
    assert torch.allclose(ql(x), x @ ql.dequantize_weight().T, atol=1e-5)
