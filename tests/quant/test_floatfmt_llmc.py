"""The float formats against llm-compressor's own ``oneshot`` on the built-in model (its first two decoder layers, to
stay fast on 2 cores): the same scales and the same codes, to the bit, for every data-free weight rule; and each
activation rule against compressed-tensors' ``fake_quantize`` with the scale its dynamic observer computes."""

import copy

import pytest
import torch

from workbench.quant import floatref as R
from workbench.quant.floatconfig import FloatConfig
from workbench.quant.floatfmt import e2m1_values, e8m0_decode, unpack_e2m1
from workbench.quant.floatquant import quantize_float

pytest.importorskip("llmcompressor")


@pytest.fixture(scope="module")
def small_builtin(default_model):
    m, _ = default_model
    m2 = copy.deepcopy(m)
    m2.model.layers = m2.model.layers[:2]
    m2.config.num_hidden_layers = 2
    return m2


def _oneshot(model, scheme):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    mm = copy.deepcopy(model)
    oneshot(model=mm, recipe=QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"]))
    return mm


def _codes_llmc(lin):
    """llm-compressor's codes of one calibrated Linear: compressed-tensors ``quantize`` with its scales (the step its
    compressors run when it saves)."""
    from compressed_tensors.quantization.lifecycle.forward import quantize

    args = lin.quantization_scheme.weights
    g = getattr(lin, "weight_global_scale", None)
    dtype = torch.float8_e4m3fn if args.num_bits == 8 else None
    return quantize(lin.weight, lin.weight_scale, lin.weight_zero_point, args, dtype=dtype, global_scale=g)


@pytest.mark.parametrize("scheme", ["FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "MXFP4A16"])
def test_scales_and_codes_equal_llm_compressor_oneshot(small_builtin, scheme):
    ref = _oneshot(small_builtin, scheme)
    ours, _ = quantize_float(small_builtin, FloatConfig(scheme))
    n_checked = 0
    for name, q in ours.named_modules():
        if not hasattr(q, "weight_kind"):
            continue
        lin = ref.get_submodule(name)
        codes = _codes_llmc(lin)
        if q.weight_kind.startswith("fp8"):
            assert torch.equal(q.weight_scale, lin.weight_scale.float()), name
            assert torch.equal(q.weight_q.view(torch.uint8), codes.view(torch.uint8)), name
        elif q.weight_kind == "nvfp4":
            assert torch.equal(q.weight_global_scale, lin.weight_global_scale.float()), name  # fused q/k/v, gate/up
            assert torch.equal(q.weight_scale.float(), lin.weight_scale.float()), name
            assert torch.equal(e2m1_values(unpack_e2m1(q.weight_q)), codes.float()), name
        else:
            assert torch.equal(e8m0_decode(q.weight_scale), lin.weight_scale.float()), name
            assert torch.equal(e2m1_values(unpack_e2m1(q.weight_q)), codes.float()), name
        n_checked += 1
    assert n_checked == 14  # 2 layers x 7 Linears


def test_planted_bug_is_caught():
    """The comparison above can fail: MXFP4 with the OCP shared-exponent rule gives other scales than llm-compressor's
    on real weights (group maxima with mantissa >= 1.75 exist in any large matrix)."""
    torch.manual_seed(0)
    w = torch.randn(64, 256)
    assert not torch.equal(R.weight_mxfp4(w, "ocp")["scale"], R.weight_mxfp4(w, "llm-compressor")["scale"])


@pytest.mark.parametrize("scheme, fn", [("FP8_DYNAMIC", R.act_fp8_per_token), ("W8A8", R.act_int8_per_token),
                                        ("MXFP4", R.act_mxfp4), ("FP8_BLOCK", R.act_fp8_group)])
def test_dynamic_activation_rules_equal_compressed_tensors(scheme, fn):
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    torch.manual_seed(1)
    x = torch.randn(2, 5, 256) * torch.logspace(-2, 1, 256)  # outlier channels, as in LLM activations
    args = preset_name_to_scheme(scheme, ["Linear"]).input_activations
    s, z = compute_dynamic_scales_and_zp(x, args, module=None)
    want = fake_quantize(x, s, z, args)
    assert torch.equal(fn(x), want)


def test_nvfp4_activation_rule_equals_compressed_tensors():
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp, generate_gparam

    torch.manual_seed(2)
    x = torch.randn(3, 7, 64) * 3
    args = preset_name_to_scheme("NVFP4", ["Linear"]).input_activations
    g = generate_gparam(x.amin().reshape(1), x.amax().reshape(1))
    s, z = compute_dynamic_scales_and_zp(x, args, module=None, global_scale=g)
    assert torch.equal(R.act_nvfp4(x, R.nvfp4_global_scale(x.abs().amax())), fake_quantize(x, s, z, args, global_scale=g))
