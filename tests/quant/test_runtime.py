"""Quantized model -> engine runtime: the engine's logits equal the dequantized QuantLinear forward.

The engine is built through ``Engine.from_hf(qmodel)`` / ``convert_for_runtime(qmodel)``, the same
interface the GPU uses (on CUDA the INT4 matmuls run on the W4A16 kernels; here on the CPU they run
``Int4Linear(backend="dequant")``, the W8 per-channel ones ``torch.ops.aten._weight_int8pack_mm``,
the op CUDA runs too). Before this runtime existed, every QuantLinear became a dense matrix
(``test_every_block_matmul_is_quantized`` and the ``weight_bytes`` checks fail on that code).
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workbench.engine import Engine
from workbench.engine.int4 import Int4Linear, quantize_rtn_int4
from workbench.engine.int8 import Int8Linear
from workbench.engine.runtime import InputScaled, PaddedInput
from workbench.quant import QuantConfig, convert_for_runtime, quantize
from workbench.quant.rtn import compute_qparams, quantize_codes


def _model(dtype=torch.float32):
    # hidden 192 = 128 + 64 and intermediate 320 = 2 x 128 + 64: g128 leaves partial last groups
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=192, intermediate_size=320, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # salient input channels, so that AWQ picks alpha > 0 (non-trivial scales)
        for layer in m.model.layers:
            layer.input_layernorm.weight[:4] *= 20
    return m.to(dtype)


IDS = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
CALIB = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(2))

CONFIGS = {
    "rtn_w4_g64": QuantConfig(bits=4, group_size=64),
    "rtn_w4_g128_partial_sym": QuantConfig(bits=4, group_size=128, partial_groups=True, symmetric=True),
    "rtn_w4_g32_float_zero": QuantConfig(bits=4, group_size=32, zero_point="float"),
    "rtn_w4_channel": QuantConfig(bits=4, granularity="per_channel"),
    "rtn_w3_tensor_sym": QuantConfig(bits=3, granularity="per_tensor", symmetric=True),
    "rtn_w2_g32": QuantConfig(bits=2, group_size=32),
    "rtn_w8_channel_sym": QuantConfig(bits=8, granularity="per_channel", symmetric=True),
    "rtn_w8_channel_asym": QuantConfig(bits=8, granularity="per_channel"),
    "rtn_w8_g64": QuantConfig(bits=8, group_size=64, symmetric=True),
    "rtn_w8_channel_float_zero": QuantConfig(bits=8, granularity="per_channel", zero_point="float"),
    "rtn_w5_channel_sym": QuantConfig(bits=5, granularity="per_channel", symmetric=True),
    "rtn_w6_g128_partial": QuantConfig(bits=6, group_size=128, partial_groups=True),
    "awq_w4_g64": QuantConfig(method="awq", bits=4, group_size=64),
    "awq_w8_channel": QuantConfig(method="awq", bits=8, granularity="per_channel"),
    "gptq_w4_g128_partial_sym": QuantConfig(method="gptq", bits=4, group_size=128, partial_groups=True, symmetric=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_logits_equal_dequantized_forward_float32(name):
    q, _ = quantize(_model(), CONFIGS[name], CALIB)
    with torch.no_grad():
        want = q(IDS).logits[0]
    eng = convert_for_runtime(q, max_seq=32, quant_runtime="kernels")  # from the codes on every call
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)
    cached = convert_for_runtime(q, max_seq=32)  # the CPU default: dequantized once, same numbers
    torch.testing.assert_close(cached.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)
    dense = Engine.from_hf(q, max_seq=32, quant_runtime="dense")
    assert eng.weight_bytes() == cached.weight_bytes() < dense.weight_bytes()


@pytest.mark.parametrize("name", ["rtn_w4_g128_partial_sym", "rtn_w8_channel_asym", "awq_w4_g64", "gptq_w4_g128_partial_sym"])
def test_engine_logits_equal_dequantized_forward_bf16(name):
    q, _ = quantize(_model(torch.bfloat16), CONFIGS[name], CALIB)
    with torch.no_grad():
        want = q(IDS).logits[0].float()
    got = Engine.from_hf(q, max_seq=32).runner().extend(IDS[0])
    # bf16 tolerance: the engine and HF round in different places; measured max |diff| 0.008-0.010 with
    # max |logit| ~ 1 (the engine's dense path on the dequantized weights: 0.005-0.008)
    scale = want.abs().max()
    assert (got - want).abs().max() <= 0.02 * scale
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9


def test_every_block_matmul_is_quantized_and_bytes_are_the_runtime_format():
    m = _model()
    q, _ = quantize(m, QuantConfig(bits=4, group_size=64))
    assert set(Engine.from_hf(q, max_seq=32).w.labels.values()) == {"int4 dequant g64, dequantized once", "dense"}
    eng = Engine.from_hf(q, max_seq=32, quant_runtime="kernels")
    labels = eng.w.labels
    assert len(labels) == 4 * 2 + 1 and labels["lm_head"] == "dense"  # lm_head is skipped
    assert all(v == "int4 dequant g64" for k, v in labels.items() if k != "lm_head")
    assert all(isinstance(x, Int4Linear) for lw in eng.w.layers for x in (lw.wqkv, lw.wo, lw.wgu, lw.wd))
    # bytes a step reads: 4-bit codes + one scale and one zero per group of 64 (activation dtype), norms,
    # the float lm_head
    h, i, qkv = 192, 320, (4 + 2 * 2) * 48
    mats = [(qkv, h), (h, h), (2 * i, h), (h, i)]
    codes = sum(o * k // 2 + 2 * o * (k // 64) * 4 for o, k in mats)
    norms = (2 * 2 + 1) * h * 4
    assert eng.weight_bytes() == 2 * codes + norms + 256 * h * 4
    with torch.no_grad():
        assert torch.equal(eng.w.layers[0].wqkv.q, torch.cat([q.model.layers[0].self_attn.get_submodule(p).codes()
                                                             for p in ("q_proj", "k_proj", "v_proj")]))


def test_awq_scale_folded_into_rmsnorm_and_up_rows_and_applied_to_o_under_gqa():
    q, _ = quantize(_model(), QuantConfig(method="awq", bits=4, group_size=64), CALIB)
    eng = Engine.from_hf(q, max_seq=32, quant_runtime="kernels")
    lw, blk = eng.w.layers[0], q.model.layers[0]
    s = blk.self_attn.q_proj.input_scale
    assert not torch.equal(s, torch.ones_like(s))  # AWQ chose a non-trivial scale
    torch.testing.assert_close(lw.ln1, blk.input_layernorm.weight / s)  # folded: ln / s
    # o under GQA (4 heads, 2 key/value heads): one v channel feeds two o channels, so o divides its input
    assert isinstance(lw.wo, InputScaled) and torch.equal(lw.wo.s, blk.self_attn.o_proj.input_scale)
    # down's scale went into the group scales of up's output rows (the codes unchanged): no runtime op left
    # (the old code kept InputScaled on down: one more kernel per layer, and no fused one-row path on the GPU)
    assert isinstance(lw.wd, Int4Linear)
    sd, up = blk.mlp.down_proj.input_scale.float(), blk.mlp.up_proj
    n = up.out_features
    assert torch.equal(lw.wgu.q[n:], up.codes())
    torch.testing.assert_close(lw.wgu.scales[n:].float(), up.quant_params()["scales"].float() / sd[:, None])


def test_awq_o_scale_folded_into_v_rows_when_every_head_has_its_value_head():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # a salient channel of the attention output, so that o's AWQ scale is not trivial
        m.model.layers[0].self_attn.v_proj.weight[:3] *= 30
    q, _ = quantize(m, QuantConfig(method="awq", bits=4, group_size=64), CALIB)
    so = q.model.layers[0].self_attn.o_proj.input_scale
    assert not torch.equal(so, torch.ones_like(so))
    eng = Engine.from_hf(q, max_seq=32, quant_runtime="kernels")
    lw = eng.w.layers[0]
    assert isinstance(lw.wo, Int4Linear) and isinstance(lw.wd, Int4Linear)
    with torch.no_grad():
        want = q(IDS).logits[0]
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)


def test_awq_down_fold_survives_the_dense_fallback():
    # gate quantized with other groups than up: gate_up cannot fuse and runs dense; the fold of down's scale into
    # up's rows must then be in the dense weight (down no longer divides its input)
    q, _ = quantize(_model(), QuantConfig(method="awq", bits=4, group_size=64), CALIB)
    q32, _ = quantize(_model(), QuantConfig(bits=4, group_size=32))
    q.model.layers[0].mlp.gate_proj = q32.model.layers[0].mlp.gate_proj
    with pytest.warns(UserWarning, match="gate_up"):
        eng = Engine.from_hf(q, max_seq=32, quant_runtime="kernels")
    assert eng.w.labels["layers.0.gate_up"].startswith("dense (")
    with torch.no_grad():
        want = q(IDS).logits[0]
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)


def test_w8_per_channel_uses_int8pack_and_folds_symmetric_zero():
    q, _ = quantize(_model(), QuantConfig(bits=8, granularity="per_channel", symmetric=True))
    lin = Engine.from_hf(q, max_seq=32, quant_runtime="kernels").w.layers[0].wo
    assert isinstance(lin, Int8Linear) and lin.backend == "int8pack" and lin.offset is None
    ql = q.model.layers[0].self_attn.o_proj
    assert torch.equal(lin.v.to(torch.int16), ql.codes().to(torch.int16) - 128)  # v = q - zero, zero = 128


def test_mixed_layouts_fall_back_to_dense_with_a_warning_and_a_label():
    m = _model()
    q, _ = quantize(m, QuantConfig(bits=4, group_size=64))
    q2, _ = quantize(m, QuantConfig(bits=4, group_size=32))
    q.model.layers[0].self_attn.k_proj = q2.model.layers[0].self_attn.k_proj  # k groups differ from q/v
    with pytest.warns(UserWarning, match="group_size differs"):
        eng = Engine.from_hf(q, max_seq=32)
    assert eng.w.labels["layers.0.qkv"].startswith("dense (group_size differs")
    with torch.no_grad():
        want = q(IDS).logits[0]
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)


def test_refused_backend_pads_then_falls_back(monkeypatch):
    import workbench.engine.runtime as rt

    class PickyInt4(Int4Linear):  # a kernel that packs only K % 128 == 0 (as tinygemm's 8 K-tiles)
        def __init__(self, q, scales, zeros, dtype, backend="dequant", device=None, config=None):
            if backend == "picky" and q.shape[1] % 128:
                raise RuntimeError("K must be a multiple of 128")
            super().__init__(q, scales, zeros, dtype, "dequant", device, config)

    q, _ = quantize(_model(), QuantConfig(bits=4, group_size=64))
    with pytest.warns(UserWarning, match="running it with the 'dequant' backend"):
        eng = Engine.from_hf(q, max_seq=32, w4a16_backend="tinygemm")  # CUDA-only: refused on the CPU
    assert "tinygemm refused" in eng.w.labels["layers.0.qkv"]
    monkeypatch.setattr(rt, "Int4Linear", PickyInt4)
    eng = Engine.from_hf(q, max_seq=32, w4a16_backend="picky")
    assert isinstance(eng.w.layers[0].wqkv, PaddedInput) and "192 padded to 256" in eng.w.labels["layers.0.qkv"]
    with torch.no_grad():
        want = q(IDS).logits[0]
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_engine_rtn_int4_is_the_package_rtn(dtype):
    w = torch.randn(16, 256, generator=torch.Generator().manual_seed(3)).to(dtype)
    w[0, :64] = w[0, :64].abs() + 0.5  # a group with no negative weight: 0 must stay on the grid
    q, s, z = quantize_rtn_int4(w, 64)
    s_ref, z_ref = compute_qparams(w, 4, 64, False, dtype)
    assert torch.equal(s, s_ref) and torch.equal(z, z_ref.to(dtype))
    assert torch.equal(q, quantize_codes(w, s_ref, z_ref, 4, 64))
    # planted: the engine's former rule (scale = (max - min) / 15, 0 not forced into the range)
    mn, mx = w[0, :64].float().min(), w[0, :64].float().max()
    assert float(s[0, 0]) != pytest.approx(float((mx - mn) / 15), rel=1e-3)


# ---------------------------------------------------------------- CUDA: the same checks on the kernels
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="the W4A16 kernels need CUDA")


@cuda
@pytest.mark.parametrize("name", ["rtn_w4_g64", "rtn_w4_g128_partial_sym", "rtn_w4_g32_float_zero", "rtn_w3_tensor_sym",
                                  "rtn_w8_channel_asym", "awq_w4_g64", "gptq_w4_g128_partial_sym"])
def test_cuda_engine_on_the_kernels_equals_dequantized_forward(name):
    # K = 192 and 320 are not multiples of 128: tinygemm refuses them unpadded, so this also runs the
    # padded path; decode steps of one token run the Triton GEMV inside CUDA graphs
    q, _ = quantize(_model(torch.bfloat16).cuda(), CONFIGS[name], CALIB.cuda())
    ids = IDS.cuda()
    with torch.no_grad():
        want = q(ids).logits[0].float()
    eng = Engine.from_hf(q, max_seq=32)
    # no matmul on the dense fallback or the per-call "dequant" backend ("int4 triton:dequant": the Triton GEMV for
    # one row, dequantize + cuBLAS for more, the CUDA default)
    assert not any(v.startswith(("dense", "int4 dequant")) for k, v in eng.w.labels.items() if k != "lm_head"), \
        eng.w.labels
    prefill = eng.runner().extend(ids[0, :8])
    steps = torch.cat([eng.runner().extend(ids[0, t:t + 1]) for t in range(8, 12)])
    got = torch.cat([prefill, steps])
    assert (got - want).abs().max() <= 0.03 * want.abs().max()
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9


@cuda
def test_cuda_speed_row_measures_memory():
    from workbench.studies.speed import SpeedConfig, measure_speed

    q, _ = quantize(_model(torch.bfloat16).cuda(), CONFIGS["rtn_w4_g64"])
    row = measure_speed(q, SpeedConfig(decode_batches=(1, 2), prefill_tokens=32, context=8, repeats=3))
    assert row["mem_source"] == "cuda max_memory_allocated" and row["peak_mem_bytes"] > 0
    assert row["speed_device"].startswith("cuda:") and row["decode_ms_b1"] > 0 and "int4" in row["runtime"]


def test_engine_does_not_import_the_quantization_package():
    # workbench.quant builds on the engine (convert_for_runtime, the sweep's timings); an import back
    # would be a cycle through workbench/quant/__init__.py
    import ast
    from pathlib import Path

    import workbench.engine

    for f in Path(workbench.engine.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(m.startswith("workbench.quant") for m in mods), f"{f.name} imports {mods}"


def test_awq_o_scale_fold_into_v_scales_the_v_bias_too():
    # Qwen2 (q/k/v biases) with as many key/value heads as heads: o's AWQ scale goes into v's rows, and v's bias
    # must be divided by it as well (o reads attn(x W_v^T + b_v) / s_o); without that the logits differ
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        attn = m.model.layers[0].self_attn
        attn.v_proj.weight[:3] *= 30
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
            lin.bias.normal_(0, 0.5)  # HF initialises them to zero
    q, _ = quantize(m, QuantConfig(method="awq", bits=4, group_size=64), CALIB)
    so = q.model.layers[0].self_attn.o_proj.input_scale
    assert not torch.equal(so, torch.ones_like(so))
    eng = Engine.from_hf(q, max_seq=32, quant_runtime="kernels")
    assert isinstance(eng.w.layers[0].wo, Int4Linear)
    with torch.no_grad():
        want = q(IDS).logits[0]
    torch.testing.assert_close(eng.runner().extend(IDS[0]), want, atol=2e-5, rtol=1e-4)
