"""Engine.read_slot_kv / write_slot_kv: a prompt's KV cache moved to another engine continues the same decode."""

import pytest
import torch

from workbench.engine import Engine
from workbench.pd.profile import extend

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def _engine(max_batch, max_seq):
    return Engine.from_config(TINY, max_batch=max_batch, max_seq=max_seq, device="cpu", seed=3)


def _greedy(eng, slot, token, n):
    out = []
    for _ in range(n):
        token = int(extend(eng, torch.tensor([slot]), torch.tensor([[token]])).argmax(-1))
        out.append(token)
    return out


@pytest.mark.parametrize("plant", [None, "swap k and v", "drop the last position"])
def test_moved_kv_continues_the_same_decode(plant):
    """Prefill in slot 2 of engine A; move the first L - 1 positions to slot 0 of engine B (other size);
    B's decode step on the last prompt token reproduces A's prefill logits, and greedy decoding goes on
    identically. Planted bugs in the move (K and V swapped; one position short) break both."""
    prompt = torch.randint(0, 256, (13,), generator=torch.Generator().manual_seed(0))
    a, b = _engine(3, 32), _engine(2, 48)
    ref = extend(a, torch.tensor([2]), prompt.view(1, -1))[0]
    kv = a.read_slot_kv(2, len(prompt))
    assert kv.shape == (2, 2, 2, 13, 16) and kv.is_contiguous()
    if plant == "swap k and v":
        kv = kv.flip(0)
    b.write_slot_kv(0, kv)
    assert b.lengths().tolist() == [13, 0]
    b.truncate_slot(0, 13 - (2 if plant == "drop the last position" else 1))
    got = extend(b, torch.tensor([0]), prompt[-1].view(1, 1))[0]
    err = float((got - ref).abs().max())
    tok = int(ref.argmax())
    same_tokens = _greedy(a, 2, tok, 6) == _greedy(b, 0, int(got.argmax()), 6)
    if plant is None:
        assert err < 1e-5 and same_tokens
    else:
        assert err > 1e-2 and not same_tokens


def test_read_after_write_is_exact_and_converts_dtype():
    a = _engine(1, 16)
    kv = torch.randn(2, 2, 2, 9, 16, dtype=torch.float64)
    a.write_slot_kv(0, kv)
    back = a.read_slot_kv(0, 9)
    assert back.dtype == torch.float32 and torch.equal(back, kv.float())
    assert torch.equal(a.k_cache[:, 0, :, :9], kv[0].float()) and torch.equal(a.v_cache[:, 0, :, :9], kv[1].float())


def test_slot_kv_errors_name_the_fix():
    a = _engine(2, 16)
    with pytest.raises(ValueError, match="outside"):
        a.read_slot_kv(0, 1)  # nothing cached yet
    with pytest.raises(ValueError, match="slot=2"):
        a.read_slot_kv(2, 0)
    with pytest.raises(ValueError, match=r"expected \[2, 2, 2, L, 16\]"):
        a.write_slot_kv(0, torch.zeros(2, 2, 3, 4, 16))
    with pytest.raises(ValueError, match="max_seq=16"):
        a.write_slot_kv(1, torch.zeros(2, 2, 2, 17, 16))
