"""Bad-input fixtures. Tiny GGUF files written with the ``gguf`` package's ``GGUFWriter``: a 1-layer llama whose
byte-level BPE vocabulary holds the 256 bytes, a few whole words and three special tokens."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from workbench.models.random_init import bytes_to_unicode

WORDS = ["the", "quick", "brown", "fox", "over", "lazy", "dog", "and", "of", "to", "in", "is"]
HIDDEN, FFN, HEADS = 16, 32, 2


def _vocab() -> tuple[list[str], list[str], list[int]]:
    """``(tokens, merges, token types)``: specials 0-2, the 256 byte symbols, then merged words."""
    b2u = bytes_to_unicode()
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [b2u[b] for b in range(256)]
    types = [3, 3, 3] + [1] * 256
    merges: list[str] = []
    have = set(tokens)
    for w in WORDS:
        piece = b2u[ord(" ")]
        for ch in w:  # left-to-right merges: "Ġ t" -> "Ġt", "Ġt h" -> "Ġth", ...
            merges.append(f"{piece} {ch}")
            piece += ch
            if piece not in have:
                tokens.append(piece)
                types.append(1)
                have.add(piece)
    return tokens, merges, types


def write_tiny_gguf(path: Path, *, add_bos: bool = False, bos: int = 1, eos: int = 2, seed: int = 0,
                    arch: str = "llama", tokenizer_model: str = "gpt2") -> Path:
    """Write a valid tiny GGUF (F32 tensors) to ``path`` and return it."""
    tokens, merges, types = _vocab()
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(eos)
    w.add_add_bos_token(add_bos)
    v = len(tokens)
    shapes = {"token_embd.weight": (v, HIDDEN), "output_norm.weight": (HIDDEN,), "output.weight": (v, HIDDEN),
              "blk.0.attn_norm.weight": (HIDDEN,), "blk.0.ffn_norm.weight": (HIDDEN,),
              "blk.0.attn_q.weight": (HIDDEN, HIDDEN), "blk.0.attn_k.weight": (HIDDEN, HIDDEN),
              "blk.0.attn_v.weight": (HIDDEN, HIDDEN), "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
              "blk.0.ffn_gate.weight": (FFN, HIDDEN), "blk.0.ffn_up.weight": (FFN, HIDDEN),
              "blk.0.ffn_down.weight": (HIDDEN, FFN)}
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def tiny_gguf(tmp_path):
    """Factory: ``tiny_gguf(name="m.gguf", **write_tiny_gguf kwargs)`` -> path of a fresh tiny GGUF."""
    def make(name: str = "tiny.gguf", **kw) -> Path:
        (tmp_path / "gguf").mkdir(exist_ok=True)
        return write_tiny_gguf(tmp_path / "gguf" / name, **kw)
    return make


# Long common words (from the tokenizer check's probe list) that a Unigram rebuild splits.
GEMMA_WORDS = ["which", "their", "after", "other", "there", "during", "school", "years", "world", "would",
               "where", "later", "national", "known", "university", "united", "the", "of", "and"]


def write_gemma_like_gguf(path: Path) -> Path:
    """A tokenizer-only ``gemma3`` GGUF in the shape of huggingface/transformers#41494: a
    SentencePiece-BPE vocabulary with rank scores (``score = -rank``; whole words merged last, their
    halves first), ``add_bos_token=True``. transformers rebuilds it as a Unigram model, which splits
    the whole words into their higher-scored halves and adds no BOS."""
    chars = sorted(set("".join(GEMMA_WORDS)) | set("TheQuickBrownFoxJumpsOverLazyDog.,0123456789:()+=-_abcdefghijklmnopqrstuvwxyzSABDP"))
    early, late = [], []
    for w in GEMMA_WORDS:
        if len(w) > 3:
            early += [p for p in ("▁" + w[:2], w[2:]) if p not in early]
        late.append("▁" + w)
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + early + ["▁"] + [c for c in chars if c not in early] + late
    types = [3, 3, 3, 2] + [1] * (len(tokens) - 4)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_key_length(8)
    w.add_value_length(8)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 4 + [-float(i) for i in range(len(tokens) - 4)])
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_pad_token_id(0)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), HIDDEN), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def gemma_like_gguf(tmp_path):
    """Path of a fresh :func:`write_gemma_like_gguf` file."""
    return write_gemma_like_gguf(tmp_path / "gemma-like.gguf")
