"""RoPE tables as Hugging Face computes them, and the cache-length rounding of the engine."""

from __future__ import annotations

import math

import torch

__all__ = ["rope_tables", "round_up"]


def rope_tables(cfg, head_dim: int, n_pos: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``cos``, ``sin`` ``[n_pos, head_dim]`` for positions ``0..n_pos-1``, as HF computes them.

    Default RoPE: ``inv_freq_i = theta^(-2i/d)`` (Su et al. 2021, RoFormer eq. 15) with
    ``rope_theta`` from the config; other types (``llama3``, ``linear``, ``yarn``, ...) through
    ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` so the scaling matches HF exactly.
    ``dynamic`` RoPE (length-dependent) is rejected with ValueError.
    """
    params = getattr(cfg, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    if rope_type == "default":
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        scaling = 1.0
    elif rope_type == "dynamic":
        raise ValueError("rope_type='dynamic' depends on sequence length; the engine supports static types")
    else:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](cfg)
        inv_freq = inv_freq.float().cpu()
    pos = torch.arange(n_pos, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(device), (emb.sin() * scaling).to(device)


def round_up(x: int, m: int) -> int:
    """Smallest multiple of ``m`` that is >= ``x``."""
    return int(math.ceil(x / m) * m)
