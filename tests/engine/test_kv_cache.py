"""KV-cache formats: INT8 / FP8 round trips (known answers and error bounds), the engine's quantized cache
against the round trip of the full-precision cache, slot semantics with scales, and fidelity that orders
the formats by their rounding error."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workbench.engine import Engine
from workbench.engine.kv_cache import (
    dequantize_int8,
    kv_bytes_per_element,
    quantize_fp8,
    quantize_int8,
    resolve_kv_dtype,
    round_trip,
)
from workbench.eval.fidelity import token_metrics

SMALL = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**SMALL)).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return m


def test_int8_known_answer():
    x = torch.tensor([[1.0, -2.0, 0.5, 0.0]])
    q, s = quantize_int8(x)
    assert s.item() == pytest.approx(2.0 / 127)
    assert q.tolist() == [[64, -127, 32, 0]]  # round(1 / (2/127)) = round(63.5) = 64 (half to even)
    torch.testing.assert_close(dequantize_int8(q, s, torch.float32), q.float() * (2.0 / 127))
    qz, sz = quantize_int8(torch.zeros(1, 8))
    assert qz.abs().sum() == 0 and torch.isfinite(sz).all()


def test_int8_error_bound():
    x = torch.randn(64, 4, 32, generator=torch.Generator().manual_seed(1)) * 3
    q, s = quantize_int8(x)
    err = (dequantize_int8(q, s, torch.float32) - x).abs()
    assert q.abs().max() <= 127 and (err <= s.unsqueeze(-1) / 2 + 1e-6).all()  # half a step per element


def test_fp8_relative_error_and_saturation():
    x = torch.logspace(-5, 8, 200, base=2.0) * torch.where(torch.arange(200) % 2 == 0, 1.0, -1.0)  # |x| in [2^-5, 2^8]
    back = quantize_fp8(x).float()
    assert ((back - x).abs() / x.abs()).max() <= 2.0 ** -4  # 3 mantissa bits: half an ulp = 2^-4 relative
    assert quantize_fp8(torch.tensor([1000.0, -1e6])).float().tolist() == [448.0, -448.0]


def test_round_trip_and_bytes():
    x = torch.randn(3, 16)
    assert torch.equal(round_trip(x, "auto"), x) and torch.equal(round_trip(x, "float32"), x)
    assert torch.equal(round_trip(x, "bf16"), x.bfloat16().float())
    assert kv_bytes_per_element("int8", 64) == 1 + 4 / 64 and kv_bytes_per_element("fp8", 64) == 1.0
    assert kv_bytes_per_element("auto", 64, torch.float32) == 4.0
    with pytest.raises(ValueError, match="Did you mean 'int8'"):
        resolve_kv_dtype("int9", torch.float32)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "fp8_e4m3", "int8"])
def test_engine_cache_holds_the_round_trip(tiny, kv_dtype):
    """Layer 0's keys and values depend only on the tokens: the quantized cache must read back exactly the
    round trip of the full-precision engine's cache (write after RoPE + read before attention)."""
    ids = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(2))
    ref = Engine.from_hf(tiny, max_batch=2, max_seq=32)
    ref.extend_batch([0, 1], ids)
    e = Engine.from_hf(tiny, max_batch=2, max_seq=32, kv_dtype=kv_dtype)
    e.extend_batch([1, 0], ids.flip(0))  # scattered slots: the gather path
    k, v = e.kvq.read(0, torch.tensor([0, 1]), 20, prefix=True)
    torch.testing.assert_close(k, round_trip(ref.k_cache[0, :, :, :20], kv_dtype), rtol=0, atol=0)
    torch.testing.assert_close(v, round_trip(ref.v_cache[0, :, :, :20], kv_dtype), rtol=0, atol=0)
    assert e.kv_bytes_per_token() == 2 * 2 * 2 * 16 * kv_bytes_per_element(kv_dtype, 16)
    assert e.set_fused_gemv(True) is False and e.decode_attention is None


def test_float32_cache_is_the_default_path(tiny):
    ids = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(3))
    a = Engine.from_hf(tiny, max_seq=32).extend_batch([0], ids)
    b = Engine.from_hf(tiny, max_seq=32, kv_dtype="float32")
    assert b.kvq is None
    assert torch.equal(a, b.extend_batch([0], ids))


def test_int8_incremental_ragged_and_copy_prefix(tiny):
    """Scales follow the codes through incremental steps, ragged rows and copy_prefix."""
    ids = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(4))
    one = Engine.from_hf(tiny, max_seq=32, kv_dtype="int8")
    full = one.extend_batch([0], ids)[0]
    e = Engine.from_hf(tiny, max_batch=3, max_seq=32, kv_dtype="int8")
    e.extend_batch([2], ids[:, :10])
    e.copy_prefix(2, [0, 1], 10)
    toks = torch.stack([ids[0, 10:24], torch.cat([ids[0, 10:20], torch.zeros(4, dtype=torch.int64)])])
    out = e.extend_batch([0, 1], toks, n_valid=[14, 10])
    torch.testing.assert_close(out[0], full[10:], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1, :10], full[10:20], atol=1e-5, rtol=1e-4)


def _kl(tiny, kv_dtype, ids):
    ref = Engine.from_hf(tiny, max_seq=72).extend_batch([0], ids)[0]
    out = Engine.from_hf(tiny, max_seq=72, kv_dtype=kv_dtype).extend_batch([0], ids)[0]
    return float(token_metrics(ref, out)["kl"].mean())


def test_fidelity_orders_formats_by_rounding_error(tiny):
    """KL vs the float32 cache: 0 for float32, then bf16 (2^-9 relative) < INT8 (per-vector max / 254)
    < FP8 e4m3 (2^-4 relative); each step at least 3x apart on this model (measured: ~10-100x)."""
    ids = torch.randint(0, 128, (1, 64), generator=torch.Generator().manual_seed(5))
    kl = {kd: _kl(tiny, kd, ids) for kd in ("float32", "bfloat16", "int8", "fp8_e4m3")}
    assert kl["float32"] == 0.0
    assert 3 * kl["bfloat16"] < kl["int8"] and 3 * kl["int8"] < kl["fp8_e4m3"]


def test_fidelity_check_catches_a_planted_scale_bug(tiny, monkeypatch):
    """Power of the ordering test: an INT8 cache whose scales are 8x too small (codes clip at +-127)
    must lose the INT8 < FP8 ordering by a wide margin."""
    import workbench.engine.kv_cache as kvc

    ids = torch.randint(0, 128, (1, 64), generator=torch.Generator().manual_seed(5))
    good, fp8 = _kl(tiny, "int8", ids), _kl(tiny, "fp8_e4m3", ids)
    real = kvc.quantize_int8

    def scale_too_small(x):
        _, s = real(x)
        return torch.round(x.float() / (s / 8).unsqueeze(-1)).clamp(-127, 127).to(torch.int8), s / 8

    monkeypatch.setattr(kvc, "quantize_int8", scale_too_small)
    bad = _kl(tiny, "int8", ids)
    assert bad > 10 * good and bad > fp8


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_slot_kv_transfer_with_a_quantized_cache(tiny, kv_dtype):
    """read_slot_kv dequantizes and write_slot_kv requantizes: a prompt moved to another engine with the
    same format continues exactly as on the engine that prefilled it (re-encoding a decoded value is
    exact for both formats)."""
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(6))
    a = Engine.from_hf(tiny, max_seq=32, kv_dtype=kv_dtype)
    a.extend_batch([0], ids[:, :16])
    payload = a.read_slot_kv(0, 16)
    assert payload.dtype == torch.float32 and payload.shape == (2, 2, 2, 16, 16)
    b = Engine.from_hf(tiny, max_batch=2, max_seq=32, kv_dtype=kv_dtype)
    b.write_slot_kv(1, payload)
    assert torch.equal(b.extend_batch([1], ids[:, 16:]), a.extend_batch([0], ids[:, 16:]))
