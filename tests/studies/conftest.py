"""Fixtures for the study tests: a tiny random Llama and calibration ids (seeded)."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(seed: int = 0, hidden: int = 128, inter: int = 256, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def tiny():
    return tiny_llama()


@pytest.fixture
def calib_ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (8, 64), generator=g)


@pytest.fixture
def make_tiny():
    """``tiny_llama`` itself, for tests that need other widths (e.g. the built-in model's 576)."""
    return tiny_llama
