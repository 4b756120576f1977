"""Tiny models for the stacked study's tests (CPU, seconds). Without a GPU, Triton kernels run in its CPU
interpreter (``tests/conftest.py`` sets ``TRITON_INTERPRET=1`` before triton is first imported)."""

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}


def perturbed(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


@pytest.fixture(scope="session")
def tiny_target():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return perturbed(LlamaForCausalLM(LlamaConfig(**TINY)))


def hand_points(k: int = 4) -> pd.DataFrame:
    """Four measured points with round numbers (no engines): base 100 tokens/s, W4A16 200, spec x1.5."""
    rows = []
    for spec in (False, True):
        for q in (False, True):
            tpot = (10.0 if not q else 5.0) / (1.5 if spec else 1.0)
            row = {"quantized": q, "speculative": spec, "compute_dtype": "bfloat16", "k": k, "draft": "d",
                   "ttft_ms": 20.0, "tpot_ms": tpot, "e2e_ms": 20.0 + 9 * tpot, "decode_tok_s": 1000.0 / tpot,
                   "n_out": 10, "alpha": 0.7 if spec else float("nan"), "tau": 2.0 if spec else float("nan"),
                   "acceptance": "real" if spec else "", "spec_timing": "real" if spec else "",
                   "peak_mem_gb": (2.0 if not q else 0.5) + (0.2 if spec else 0.0), "mem_source": "hand",
                   "weight_gb": (1.5 if not q else 0.4) + (0.1 if spec else 0.0),
                   "kv_bytes_per_token": 1000.0 * (1.1 if spec else 1.0), "weight_bytes_per_step": 1e9 if not q else 3e8}
            if not spec:
                row |= dict(zip(("cost_a", "cost_b", "cost_c", "cost_d", "cost_e", "cost_f"),
                                (5.0, 0.05, 1e-5, tpot, 0.2, 1e-4)))
            else:
                row |= dict(zip(("draft_cost_a", "draft_cost_b", "draft_cost_c", "draft_cost_d", "draft_cost_e",
                                 "draft_cost_f"), (0.5, 0.005, 1e-6, 0.1 * tpot, 0.02, 1e-5)))
                row |= {"verify_v0": 1.1 * tpot, "verify_v1": 0.3, "verify_v2": 1e-4,
                        "target_step_ms_whatif": 10.0, "draft_step_ms_whatif": 1.0}
                row |= {f"verify_ms_k{j}": 10.0 + j for j in (2, 4)}
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture()
def hand_pts():
    """:func:`hand_points` with k = 4."""
    return hand_points()
