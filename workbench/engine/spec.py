"""Architecture description of a Llama-family decoder (Llama 2/3, Qwen2, SmolLM) and its RoPE tables."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


@dataclass(frozen=True)
class ModelSpec:
    """Shapes the engine needs, read from an HF config by :meth:`from_hf_config`."""

    vocab_size: int  # rows of the embedding and of lm_head
    hidden_size: int  # model width
    n_layers: int  # decoder blocks
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (GQA when < n_heads; Ainslie et al. 2023)
    head_dim: int  # per-head width
    intermediate_size: int  # SwiGLU hidden width
    rms_eps: float  # RMSNorm epsilon
    tie_embeddings: bool  # lm_head shares the embedding matrix

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                  "intermediate_size"):
            if getattr(self, f) <= 0:
                raise ValueError(f"{f}={getattr(self, f)} must be positive")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    @classmethod
    def from_hf_config(cls, cfg) -> ModelSpec:
        """Read a ``LlamaConfig`` / ``Qwen2Config`` / ``MistralConfig``; raise ValueError for other
        architectures or features the engine does not implement (MLP bias, sliding window)."""
        mt = getattr(cfg, "model_type", None)
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type={mt!r} is not supported; the engine runs {SUPPORTED_MODEL_TYPES}")
        if getattr(cfg, "mlp_bias", False):
            raise ValueError("mlp_bias=True is not supported by the engine; use HFRunner")
        if getattr(cfg, "use_sliding_window", False) or (mt == "mistral" and getattr(cfg, "sliding_window", None)):
            raise ValueError("sliding-window attention is not supported by the engine; use HFRunner")
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, n_layers=cfg.num_hidden_layers,
                   n_heads=cfg.num_attention_heads,
                   n_kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
                   head_dim=head_dim, intermediate_size=cfg.intermediate_size, rms_eps=cfg.rms_norm_eps,
                   tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)))

    def n_params(self, qkv_bias: bool = False) -> dict:
        """Parameter counts: ``layers`` (all decoder blocks), ``embed``, ``lm_head`` (0 if tied)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * (self.n_heads + 2 * self.n_kv_heads) * d + self.n_heads * d * h
        attn += (self.n_heads + 2 * self.n_kv_heads) * d if qkv_bias else 0
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h
        return {"layers": self.n_layers * per_layer, "embed": self.vocab_size * h,
                "lm_head": 0 if self.tie_embeddings else self.vocab_size * h}

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """KV-cache bytes one token occupies across all layers (keys and values)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * torch.empty(0, dtype=dtype).element_size()


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
