"""The engine's FP8 Linear (workbench.engine.fp8): its emulated path equals the reference FP8_DYNAMIC rules, the
engine runs with it, and a device without FP8 is refused with the reason."""

import pytest
import torch
import torch.nn.functional as F

from workbench.engine.fp8 import Fp8Linear, fp8_supported, quantize_per_token, to_fp8
from workbench.quant import floatref as R


def test_emulated_fp8_linear_equals_the_reference_rules():
    torch.manual_seed(0)
    w, x = torch.randn(64, 96) * 0.05, torch.randn(2, 5, 96) * torch.logspace(-2, 1, 96)
    lin = Fp8Linear(w, torch.float32, emulate=True)
    ref = R.weight_fp8(w, "channel")
    assert torch.equal(lin.q_w.view(torch.uint8), ref["q"].view(torch.uint8))
    want = F.linear(R.act_fp8_per_token(x), R.dequantize_weight("fp8_channel", ref, (64, 96)))
    assert torch.allclose(lin(x), want, rtol=1e-5, atol=1e-6)
    q, s = quantize_per_token(torch.zeros(1, 16))  # an all-zero row: finite scale, zero codes
    assert torch.isfinite(s).all() and q.float().abs().sum() == 0


def test_refuses_without_fp8_and_runs_an_engine_emulated():
    if not fp8_supported("cuda" if torch.cuda.is_available() else "cpu")[0]:
        with pytest.raises(ValueError, match="8.9"):
            Fp8Linear(torch.randn(32, 32), torch.float32)
    from workbench.engine import Engine

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}
    eng = Engine.from_config(cfg, max_batch=2, max_seq=32, device="cpu")
    ids = torch.randint(0, 128, (2, 8))
    ref = eng.extend_batch([0, 1], ids, logits="last")
    eng.reset()
    labels = to_fp8(eng.w, emulate=True)
    assert labels["layers.1.down"].startswith("fp8 e4m3")
    out = eng.extend_batch([0, 1], ids, logits="last")
    assert out.shape == ref.shape and not torch.equal(out, ref)
    assert F.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.99
