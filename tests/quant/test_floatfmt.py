"""The float grids and casts (workbench.quant.floatfmt) against the OCP / NVIDIA definitions, torch's float8 cast and
compressed-tensors' FP4 cast; the reference weight / activation rules on hand-built cases."""

import pytest
import torch

from workbench.quant import floatref as R
from workbench.quant.floatfmt import (
    E2M1,
    E4M3,
    e2m1_codes,
    e2m1_values,
    e8m0_decode,
    e8m0_encode,
    pack_e2m1,
    round_to_format,
    unpack_e2m1,
)


def test_e4m3_grid_is_every_finite_float8_e4m3fn_value():
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = torch.unique(every[torch.isfinite(every)].abs())
    g = E4M3.grid()
    assert torch.equal(finite, g)
    assert len(g) == 127 and float(g[-1]) == 448.0 and float(g[1]) == 2.0 ** -9  # OFP8 table 1


def test_e2m1_grid_is_the_mx_table():
    assert E2M1.grid().tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # OCP MX v1.0 table 5


@pytest.mark.parametrize("x, want", [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0),
                                     (5.0, 4.0), (5.01, 6.0), (100.0, 6.0), (-0.75, -1.0), (-5.0, -4.0)])
def test_e2m1_ties_to_even_and_saturation(x, want):
    assert float(round_to_format(torch.tensor([x]), E2M1)) == want


@pytest.mark.parametrize("x, want", [(17.0, 16.0), (19.0, 20.0), (2.0 ** -10, 0.0), (3 * 2.0 ** -10, 2.0 ** -8),
                                     (464.0, 448.0), (1e6, 448.0), (-1e6, -448.0)])
def test_e4m3_ties_to_even_subnormals_and_saturation(x, want):
    assert float(round_to_format(torch.tensor([x]), E4M3)) == want


def test_e4m3_round_equals_torch_cast_on_midpoints_and_random_values():
    g = E4M3.grid()
    mids = (g[1:] + g[:-1]) / 2
    x = torch.cat([mids, -mids, g, torch.randn(50_000) * 50, torch.randn(5000) * 1e-3])
    assert torch.equal(round_to_format(x, E4M3), x.to(torch.float8_e4m3fn).float())


def test_e2m1_round_equals_compressed_tensors_cast_to_fp4():
    from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4

    g = E2M1.grid()
    mids = (g[1:] + g[:-1]) / 2
    x = torch.cat([mids, -mids, g, torch.randn(50_000) * 2.5]).clamp(-6, 6)
    assert torch.equal(round_to_format(x, E2M1), cast_to_fp4(x.clone()))


def test_e2m1_codes_pack_and_unpack():
    v = torch.tensor([[0.5, -0.5, 6.0, -6.0, 0.0, 1.5]])
    c = e2m1_codes(v)
    assert c.tolist() == [[1, 9, 7, 15, 0, 3]]
    p = pack_e2m1(c)
    assert p.tolist() == [[1 | 9 << 4, 7 | 15 << 4, 0 | 3 << 4]]  # even column in the low nibble
    assert torch.equal(e2m1_values(unpack_e2m1(p)), v)
    with pytest.raises(ValueError, match="off the E2M1 grid"):
        e2m1_codes(torch.tensor([0.7]))
    with pytest.raises(ValueError, match="even number of columns"):
        pack_e2m1(torch.zeros(1, 3, dtype=torch.uint8))


def test_e8m0_codes():
    assert e8m0_decode(torch.tensor([127, 128, 125, 0], dtype=torch.uint8)).tolist() == [1.0, 2.0, 0.25, 2.0 ** -127]
    assert torch.isnan(e8m0_decode(torch.tensor([255], dtype=torch.uint8))).all()
    assert e8m0_encode(torch.tensor([0.0, -3.0, 500.0, -500.0])).tolist() == [127, 124, 254, 0]


def test_mx_exponent_rules_differ_only_where_the_mantissa_is_at_least_1_75():
    amax = torch.tensor([1.0, 1.5, 1.74, 1.75, 1.9, 6.0, 0.0])
    ocp = R.mx_exponent(amax, "ocp")  # floor(log2 amax) - 2
    llmc = R.mx_exponent(amax, "llm-compressor")
    assert ocp.tolist() == [-2, -2, -2, -2, -2, 0, -127]
    assert llmc.tolist() == [-2, -2, -2, -1, -1, 0, -127]
    with pytest.raises(ValueError, match="unknown"):
        R.mx_exponent(amax, "nearest")


def test_weight_rules_on_a_hand_built_row():
    w = torch.tensor([[448.0, -224.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    fp8 = R.weight_fp8(w, "channel")
    assert fp8["scale"].flatten().tolist() == [1.0, torch.finfo(torch.float32).eps]  # amax / 448; zero -> eps
    assert fp8["q"].float()[0].tolist() == [448.0, -224.0, 1.0, 0.0]
    i8 = R.weight_int8(torch.tensor([[127.5, -127.5, 0.4, 0.6]]))
    assert i8["scale"].item() == 1.0 and i8["q"].tolist() == [[127, -128, 0, 1]]  # amax / 127.5, clamp to -128..127


def test_nvfp4_weight_dequantizes_within_half_a_step_of_each_group():
    torch.manual_seed(0)
    w = torch.randn(8, 64)
    t = R.weight_nvfp4(w)
    assert t["q"].shape == (8, 32) and t["scale"].shape == (8, 4) and t["scale"].dtype == torch.float8_e4m3fn
    assert float(t["global_scale"]) == pytest.approx(448 * 6 / float(w.abs().max()))
    w_hat = R.dequantize_weight("nvfp4", t, (8, 64))
    step = (t["scale"].float() / t["global_scale"]).repeat_interleave(16, 1)  # E2M1 spacing is <= 2 x scale
    assert bool(((w_hat - w).abs() <= step + 1e-6).all())


def test_activation_rules_keep_exact_values_and_quantize_per_token():
    x = torch.tensor([[448.0, 1.0, -2.0, 0.0], [1.0, 0.5, 0.25, -1.0]])
    assert torch.equal(R.act_fp8_per_token(x), x)  # on the grid at their token's scale
    y = R.act_int8_per_token(torch.tensor([[127.5, 1.2, -0.4, 0.0]]))
    assert y.tolist() == [[127.0, 1.0, 0.0, 0.0]]
    z = R.act_fp8_group(torch.cat([torch.full((1, 128), 1.0), torch.full((1, 64), 3.0)], 1), 128)  # partial group
    assert torch.equal(z, torch.cat([torch.full((1, 128), 1.0), torch.full((1, 64), 3.0)], 1))
