"""The architecture description of a Llama-family decoder (Llama 2/3, Qwen2, Mistral, SmolLM) and
the counts derived from it: parameters, weight bytes, KV-cache bytes per token, FLOPs and bytes per
step. The engine reads its shapes from it, the roofline (:mod:`workbench.pd.roofline`) and cost model
its FLOPs and bytes, the footprint its KV bytes.

Counting (Kaplan et al. 2020, arXiv 2001.08361, Table 1; Pope et al. 2022, arXiv 2211.05102, sec. 2):

* a matmul with a ``[in, out]`` weight costs ``2 * in * out`` FLOPs per token, so the dense part of a
  forward costs ``2 * N_matmul`` FLOPs per token (``N_matmul``: every weight used by a matmul,
  embedding lookup excluded; the LM head is applied to one position per sequence, as servers do);
* attention adds, per layer and per (query, key) pair, ``2 * d_attn`` FLOPs for ``q k^T`` and as many
  for ``p v``: ``4 * n_layers * d_attn`` FLOPs per pair. A causal prefill of ``L`` tokens has
  ``L (L + 1) / 2`` pairs; a decode step at context ``L`` has ``L`` pairs;
* KV cache bytes per token: ``2 (K and V) * n_layers * n_kv_heads * head_dim * bytes_per_elem``
  (:func:`kv_bytes_per_token`, the one place this is computed);
* a decode step reads every weight once plus the KV cache of every sequence in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.registry import lookup_in
from workbench.validate import check_field_types

__all__ = ["MODEL_PRESETS", "SUPPORTED_MODEL_TYPES", "ModelSpec", "kv_bytes_per_token"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")  # HF model types the engine's forward reproduces


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_element: float) -> float:
    """KV-cache bytes one token occupies over all layers, keys and values:
    ``2 * n_layers * n_kv_heads * head_dim * bytes_per_element`` (an int when ``bytes_per_element``
    is; ``bytes_per_element`` includes any per-element share of scales, e.g. ``1 + 4 / head_dim`` for
    INT8 with one float32 scale per head vector, :func:`workbench.engine.kv_cache.kv_bytes_per_element`)."""
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_element


def _check_exact(config) -> None:
    """Raise ValueError for HF configs whose forward the engine does not reproduce exactly."""
    mt = getattr(config, "model_type", None)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type={mt!r} is not supported; the engine runs {SUPPORTED_MODEL_TYPES}")
    if getattr(config, "mlp_bias", False):
        raise ValueError("mlp_bias=True is not supported by the engine; use HFRunner")
    if getattr(config, "use_sliding_window", False) or (mt == "mistral" and getattr(config, "sliding_window", None)):
        raise ValueError("sliding-window attention is not supported by the engine; use HFRunner")


@dataclass(frozen=True)
class ModelSpec:
    """Dimensions of a Llama/Qwen2-style decoder (GQA, SwiGLU MLP, RMSNorm, RoPE): the one
    architecture description the engine (shapes), the roofline and cost model (FLOPs, bytes) and the
    footprint (KV bytes) read. Build it with :meth:`from_hf_config` or :meth:`from_name`."""

    name: str
    n_layers: int  # transformer blocks
    hidden: int  # residual width d_model
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (GQA); sets the KV cache size
    head_dim: int  # per-head width; d_attn = n_heads * head_dim
    intermediate: int  # SwiGLU MLP width (gate, up: hidden -> intermediate; down: back)
    vocab: int  # vocabulary size (embedding and LM head rows)
    tie_embeddings: bool = False  # LM head shares the embedding matrix (counts once in weight bytes)
    qkv_bias: bool = False  # Qwen2 has q/k/v biases
    rms_eps: float = 1e-5  # RMSNorm epsilon (the engine's forward reads it)
    bytes_per_param: float = 2.0  # bf16 weights
    bytes_per_kv: float = 2.0  # bf16 KV cache

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate", "vocab"):
            if int(getattr(self, f)) <= 0:
                raise ValueError(f"ModelSpec.{f}={getattr(self, f)!r} must be a positive integer")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"ModelSpec.n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.rms_eps <= 0:
            raise ValueError(f"ModelSpec.rms_eps={self.rms_eps} must be > 0")
        if self.bytes_per_param <= 0 or self.bytes_per_kv <= 0:
            raise ValueError("ModelSpec.bytes_per_param and bytes_per_kv must be > 0 (2 for bf16)")

    # ---- parameter and byte counts -------------------------------------------------------------
    @property
    def d_attn(self) -> int:
        """Query width ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per key/value head (grouped-query attention, Ainslie et al. 2023)."""
        return self.n_heads // self.n_kv_heads

    @property
    def layer_params(self) -> int:
        """Weights of one block: q, k, v, o projections (+ q/k/v biases), SwiGLU MLP, two RMSNorms."""
        kv = self.n_kv_heads * self.head_dim
        attn = self.hidden * self.d_attn + 2 * self.hidden * kv + self.d_attn * self.hidden
        bias = (self.d_attn + 2 * kv) if self.qkv_bias else 0
        return attn + bias + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def n_params(self) -> int:
        """All stored parameters (embedding, blocks, final norm, LM head unless tied)."""
        emb = self.vocab * self.hidden
        return emb * (1 if self.tie_embeddings else 2) + self.n_layers * self.layer_params + self.hidden

    @property
    def weight_bytes(self) -> float:
        return self.n_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per cached token at ``bytes_per_kv`` (:func:`kv_bytes_per_token`)."""
        return kv_bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, self.bytes_per_kv)

    @property
    def block_matmul_params(self) -> int:
        """Matmul weights applied to every token (all blocks' projections and biases; no norms, no
        embedding lookup, no LM head)."""
        return self.n_layers * (self.layer_params - 2 * self.hidden)

    # ---- FLOPs and bytes per step -------------------------------------------------------------------
    def prefill_flops(self, lengths) -> float:
        """FLOPs of one prefill step over sequences of ``lengths`` (ints, tokens; no cached prefix):
        ``2 * N_block * sum(L) + 2 * vocab * hidden * n_seq + 4 * n_layers * d_attn * sum(L (L + 1) / 2)``."""
        lens = np.atleast_1d(np.asarray(lengths, dtype=np.float64))
        pairs = float(np.sum(lens * (lens + 1) / 2))
        return (2.0 * self.block_matmul_params * lens.sum() + 2.0 * self.vocab * self.hidden * lens.size
                + 4.0 * self.n_layers * self.d_attn * pairs)

    def decode_flops(self, batch: int, kv_tokens: float) -> float:
        """FLOPs of one decode step: ``batch`` sequences holding ``kv_tokens`` cached tokens in total."""
        return (2.0 * (self.block_matmul_params + self.vocab * self.hidden) * batch
                + 4.0 * self.n_layers * self.d_attn * kv_tokens)

    def decode_bytes(self, batch: int, kv_tokens: float) -> float:
        """Bytes read by one decode step: all weights once, plus every cached token's K and V."""
        del batch  # activations are negligible next to weights and KV
        return self.weight_bytes + self.kv_bytes_per_token * kv_tokens

    # ---- constructors -----------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config, name: str | None = None, bytes_per_param: float = 2.0,
                       bytes_per_kv: float = 2.0, *, strict: bool = False) -> ModelSpec:
        """From a ``transformers`` config (Llama, Qwen2, Mistral, SmolLM: the same field names).

        ``strict=True`` (the engine's forward, which must match HF exactly) raises ValueError for
        what this description does not capture: a ``model_type`` outside ``SUPPORTED_MODEL_TYPES``,
        MLP biases, sliding-window attention, an odd ``head_dim`` (RoPE rotates pairs). Either way a
        config without the Llama-family fields (GPT-2's ``n_inner`` instead of ``intermediate_size``)
        raises ValueError naming its ``model_type``, the missing fields and the supported families."""
        if strict:
            _check_exact(config)
        missing = [f for f in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                               "vocab_size") if getattr(config, f, None) is None]
        if missing:
            raise ValueError(f"model_type={getattr(config, 'model_type', None)!r}: the config has no {missing}; the "
                             "workbench describes Llama-family decoders (GQA, SwiGLU MLP, RMSNorm, RoPE) as "
                             f"{SUPPORTED_MODEL_TYPES} configs write them: load a model of those families "
                             "(e.g. 'smollm2-135m', 'Qwen/Qwen2-0.5B')")
        n_heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // n_heads)
        if strict and head_dim % 2:
            raise ValueError(f"head_dim={head_dim} must be even for RoPE")
        return cls(
            name=name or str(getattr(config, "_name_or_path", "") or config.model_type),
            n_layers=int(config.num_hidden_layers), hidden=int(config.hidden_size), n_heads=n_heads,
            n_kv_heads=int(getattr(config, "num_key_value_heads", None) or n_heads), head_dim=head_dim,
            intermediate=int(config.intermediate_size), vocab=int(config.vocab_size),
            tie_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False)),
            rms_eps=float(getattr(config, "rms_norm_eps", 1e-5)),
            bytes_per_param=bytes_per_param, bytes_per_kv=bytes_per_kv)

    @classmethod
    def from_name(cls, name: str) -> ModelSpec:
        """A preset by name (``qwen2-7b``, ``llama-3-8b``, ``smollm2-135m``)."""
        return lookup_in(MODEL_PRESETS, name, "model preset", lower=True)


# Dimensions from each model's config.json on the Hugging Face hub.
MODEL_PRESETS: dict[str, ModelSpec] = {
    "qwen2-7b": ModelSpec("Qwen2-7B", n_layers=28, hidden=3584, n_heads=28, n_kv_heads=4, head_dim=128,
                          intermediate=18944, vocab=152064, qkv_bias=True),
    "llama-3-8b": ModelSpec("Llama-3-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                            intermediate=14336, vocab=128256),
    "smollm2-135m": ModelSpec("SmolLM2-135M", n_layers=30, hidden=576, n_heads=9, n_kv_heads=3, head_dim=64,
                              intermediate=1536, vocab=49152, tie_embeddings=True,
                              bytes_per_param=4.0, bytes_per_kv=4.0),
}
