"""W4A16: RTN format, packing, and the engine forward against the dequantized reference."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workbench.engine import Engine, Int4Linear, dequantize_int4, quantize_rtn_int4, unpack_int4


def test_rtn_matches_definition():
    w = torch.randn(8, 256, generator=torch.Generator().manual_seed(0))
    q, s, z = quantize_rtn_int4(w, 128)
    assert q.dtype == torch.uint8 and q.shape == (8, 256) and s.shape == z.shape == (8, 2)
    assert int(q.max()) <= 15
    g = w.view(8, 2, 128)
    mn, mx = g.amin(-1), g.amax(-1)
    torch.testing.assert_close(s, (mx - mn) / 15)
    torch.testing.assert_close(z, torch.round(-mn / s))
    w_hat = dequantize_int4(q, s, z)
    # RTN error is at most half a step per element (plus the clamp at the range ends)
    step = s.repeat_interleave(128, 1)
    assert ((w_hat - w).abs() <= 0.5 * step + 1e-6).all()


def test_bad_group_size_raises():
    with pytest.raises(ValueError, match="group_size"):
        quantize_rtn_int4(torch.randn(4, 100), 128)


def test_unpack_and_packed_input():
    q = torch.randint(0, 16, (4, 64), dtype=torch.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    assert torch.equal(unpack_int4(packed), q)
    s = torch.rand(4, 1) + 0.1
    z = torch.randint(0, 16, (4, 1)).float()
    x = torch.randn(3, 64)
    a = Int4Linear.from_quantized(packed, s, z, torch.float32, in_features=64)(x)
    b = Int4Linear.from_quantized(q, s, z, torch.float32, in_features=64)(x)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, x @ dequantize_int4(q, s, z).T)


def _model():
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2)).eval()
    return m


@pytest.mark.parametrize("source", ["rtn", "dict"])
def test_engine_w4a16_equals_dequantized_reference(source):
    m = _model()
    qdict = {}
    ref = _model()
    with torch.no_grad():
        for name, mod in m.named_modules():
            if isinstance(mod, torch.nn.Linear) and name.startswith("model.layers"):
                q, s, z = quantize_rtn_int4(mod.weight, 128)
                packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
                qdict[name] = {"qweight": packed, "scales": s, "zeros": z}
                ref.get_submodule(name).weight.copy_(dequantize_int4(q, s, z))
    w4a16 = "rtn" if source == "rtn" else qdict
    e = Engine.from_hf(m, max_batch=1, max_seq=32, w4a16=w4a16)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(ids).logits[0]
        unq = m(ids).logits[0]
    got = e.runner().extend(ids[0])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert (got - unq).abs().max() > 1e-4  # quantization did change the model
    assert e.weight_bytes() < 0.5 * Engine.from_hf(m, max_batch=1, max_seq=32).weight_bytes()


def test_partial_dict_raises():
    m = _model()
    q, s, z = quantize_rtn_int4(m.model.layers[0].self_attn.q_proj.weight, 128)
    with pytest.raises(ValueError, match="all or none"):
        Engine.from_hf(m, max_seq=8, w4a16={"model.layers.0.self_attn.q_proj": (q, s, z)})


@pytest.mark.parametrize("k,tiles", [(576, 4), (1536, 8), (3584, 8), (4096, 8), (96, 2), (32, 2)])
def test_tinygemm_inner_k_tiles_divide_in_features(k, tiles):
    """torch's tinygemm packing wants ``in_features`` divisible by ``innerKTiles * 16``; always passing 8
    (gpt-fast's choice, the old code) refused SmolLM2-135M's 576 columns on the H200."""
    from workbench.engine.int4 import tinygemm_inner_k_tiles

    assert tinygemm_inner_k_tiles(k) == tiles
    assert k % (tiles * 16) == 0


def test_tinygemm_inner_k_tiles_refuse_what_no_tile_divides():
    from workbench.engine.int4 import tinygemm_inner_k_tiles

    with pytest.raises(ValueError, match="multiple of 32.*pad"):
        tinygemm_inner_k_tiles(100)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="tinygemm is a CUDA kernel")
@pytest.mark.parametrize("k", [576, 1536])
def test_tinygemm_takes_576_columns_and_matches_dequant(k):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(256, k, generator=g).to(torch.bfloat16)
    q, s, z = quantize_rtn_int4(w, 64)
    x = torch.randn(5, k, generator=g).to(torch.bfloat16).cuda()
    ref = Int4Linear(q, s, z, torch.bfloat16, "dequant", "cuda")(x).float()
    out = Int4Linear(q, s, z, torch.bfloat16, "tinygemm", "cuda")(x).float()
    assert (out - ref).abs().max() <= 2e-2 * ref.abs().max()


needs_triton = pytest.mark.skipif(not (torch.cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET")),
                                  reason="Triton kernels: CUDA or TRITON_INTERPRET=1")


@needs_triton
@pytest.mark.parametrize("m", [65, 130])
def test_rows_large_kernel_blocks_prefill_rows_through_the_tensor_core_gemm(m):
    """``"triton:rows"``: more than ROWS_MAX (64) rows run in 64-row blocks through the tensor-core GEMM
    (tinygemm, the old large kernel, costs 8x cuBLAS at 64 rows on the H200 and grows linearly)."""
    from workbench.engine.int4 import ROWS_MAX

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    q, s, z = quantize_rtn_int4(torch.randn(96, 256, generator=g), 128)
    lin = Int4Linear(q, s, z, torch.float32, "triton:rows", dev)
    assert lin.tc and lin.large == "rows" and m > ROWS_MAX
    x = torch.randn(m, 256, generator=g)
    ref = torch.nn.functional.linear(x, dequantize_int4(q, s, z, torch.float32))
    out = lin(x.to(dev)).float().cpu()
    assert out.shape == (m, 96)
    assert float((out - ref).norm() / ref.norm()) < 1e-5


@needs_triton
def test_rows_large_kernel_falls_back_to_tinygemm_where_the_gemm_does_not_apply():
    g = torch.Generator().manual_seed(0)
    q, s, z = quantize_rtn_int4(torch.randn(64, 256, generator=g), 64)  # group 64: not a multiple of 128
    if torch.cuda.is_available():
        assert Int4Linear(q, s, z, torch.bfloat16, "triton:rows", "cuda").large == "tinygemm"
    with pytest.raises(ValueError, match="'rows' after 'triton'"):
        Int4Linear(q, s, z, torch.float32, "tinygemm:rows", "cpu")
