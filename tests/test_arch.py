"""The one architecture description: strict reading refuses what the engine cannot reproduce, and
every KV-bytes figure (description, engine, quantized KV cache) is the one formula."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, LlamaConfig

from workbench.arch import ModelSpec, kv_bytes_per_token
from workbench.engine import Engine
from workbench.engine.kv_cache import kv_bytes_per_element

TINY = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6}


def test_hf_config_fields():
    s = ModelSpec.from_hf_config(LlamaConfig(**TINY), bytes_per_kv=4.0)
    assert (s.vocab, s.hidden, s.intermediate, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.group,
            s.rms_eps) == (64, 32, 48, 2, 4, 2, 8, 2, 1e-6)
    assert s.kv_bytes_per_token == 2 * 2 * 2 * 8 * 4 == kv_bytes_per_token(2, 2, 8, 4)


@pytest.mark.parametrize("cfg, match", [
    (GPT2Config(), "model_type"),
    (LlamaConfig(**TINY, mlp_bias=True), "mlp_bias"),
    (LlamaConfig(**{**TINY, "hidden_size": 36, "num_attention_heads": 4, "head_dim": 9}), "even"),
])
def test_strict_refuses_what_the_engine_cannot_run(cfg, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec.from_hf_config(cfg, strict=True)


@pytest.mark.parametrize("kv_dtype", ["auto", "int8", "fp8_e4m3"])
def test_engine_kv_bytes_are_the_formula(kv_dtype):
    e = Engine.from_config(LlamaConfig(**TINY), max_batch=1, max_seq=8, dtype=torch.float32,
                           device="cpu", kv_dtype=kv_dtype)
    per_elem = 4 if kv_dtype == "auto" else kv_bytes_per_element(kv_dtype, 8, torch.float32)
    assert e.kv_bytes_per_token() == kv_bytes_per_token(2, 2, 8, per_elem)
