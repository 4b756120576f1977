"""Published architectures with random weights, for timing without a download: ``random:<shape>``.

Shapes are the hyper-parameters of each model's ``config.json`` on the Hugging Face hub (Llama-3-8B
is the Llama-3.1-8B shape with llama3 RoPE scaling); the weights are HF's own random init, built
directly on the device in the requested dtype from ``torch.manual_seed(seed)`` (same device, dtype,
seed and versions -> same weights). The tokenizer is a byte-level stand-in (one token per UTF-8
byte, ids 0-255, then BOS 256 and EOS 257): prompt lengths in tokens are about 4x those of the
published tokenizer for English text. Every output of such a model is timing only.
"""

from __future__ import annotations

import copy
import os
from types import MappingProxyType

import torch

from workbench.models.errors import ModelNotAvailableError
from workbench.registry import Registry

__all__ = ["RANDOM_CONFIGS", "RANDOM_PREFIX", "available_bytes", "build_random_model", "byte_tokenizer",
           "hf_config", "weight_bytes"]

RANDOM_PREFIX = "random:"
BYTE_BOS, BYTE_EOS = 256, 257

_QWEN2_7B = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": False}
_LLAMA3_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}}
_QWEN2_0_5B = {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
               "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
               "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
               "tie_word_embeddings": True}
_SMOLLM2_135M = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
                 "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                 "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                 "tie_word_embeddings": True}

# Read-only views: callers that adapt a shape (smoke runs) copy it first: copy.deepcopy(dict(...)).
RANDOM_CONFIGS: Registry = Registry("random model shape", {
    "qwen2-7b": MappingProxyType(_QWEN2_7B),  # Qwen/Qwen2-7B
    "llama3-8b": MappingProxyType(_LLAMA3_8B),  # meta-llama/Llama-3.1-8B
    "qwen2-0.5b": MappingProxyType(_QWEN2_0_5B),  # Qwen/Qwen2-0.5B
    "smollm2-135m": MappingProxyType(_SMOLLM2_135M),  # HuggingFaceTB/SmolLM2-135M (CPU tests)
}, case_sensitive=False)


def hf_config(shape):
    """An HF config object from a shape name (``"qwen2-7b"``) or dict with ``model_type``; the byte
    tokenizer's BOS/EOS ids are set on it so ``generate`` stops where the stand-in tokenizer does."""
    from transformers import AutoConfig

    d = copy.deepcopy(dict(RANDOM_CONFIGS.lookup(shape) if isinstance(shape, str) else shape))
    d.setdefault("bos_token_id", BYTE_BOS)
    d.setdefault("eos_token_id", BYTE_EOS)
    d.setdefault("pad_token_id", BYTE_EOS)
    return AutoConfig.for_model(d.pop("model_type"), **d)


def weight_bytes(config, dtype: torch.dtype) -> int:
    """Bytes of the model's parameters in ``dtype`` (tied embeddings counted once), from a model
    built on the meta device (no memory touched)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return sum(p.numel() for p in m.parameters()) * torch.empty((), dtype=dtype).element_size()


def available_bytes(device: torch.device) -> int:
    """Free memory on ``device``: ``torch.cuda.mem_get_info`` on CUDA, ``MemAvailable`` of
    ``/proc/meminfo`` on the CPU (physical memory when that file is absent)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_fits(name: str, config, dtype: torch.dtype, device: torch.device) -> None:
    need = weight_bytes(config, dtype)
    have = available_bytes(device)
    if need > 0.9 * have:
        half = weight_bytes(config, torch.bfloat16) if dtype == torch.float32 else None
        alt = f" dtype='bfloat16' ({half / 1e9:.1f} GB)," if half and half < 0.9 * have else ""
        raise ModelNotAvailableError(
            f"random:{name} needs {need / 1e9:.1f} GB of {str(dtype)[6:]} weights, but {device} has "
            f"{have / 1e9:.1f} GB available. Fix: use a GPU (device='cuda'),{alt} or a smaller shape "
            f"such as 'random:smollm2-135m' (shapes: {RANDOM_CONFIGS.names()})")


def build_random_model(shape, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """HF ``AutoModelForCausalLM`` of ``shape`` (a :data:`RANDOM_CONFIGS` name, or a dict with
    ``model_type``) with random weights, in eval mode, built on ``device`` in ``dtype``; the caller's
    RNG state is left as it was.

    Raises ``UnknownNameError`` (with "did you mean") for an unknown shape and
    :class:`ModelNotAvailableError` when the weights would not fit in the device's free memory.
    """
    from transformers import AutoModelForCausalLM

    config = hf_config(shape)
    name = shape if isinstance(shape, str) else f"<{shape.get('model_type', 'custom')} config>"
    _check_fits(name, config, dtype, device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (``openai/gpt-2`` ``encoder.py``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_tokenizer():
    """A byte-level stand-in tokenizer: ids 0-255 are the UTF-8 bytes, 256 ``<s>`` (BOS), 257 ``</s>``
    (EOS, also pad); no BOS is added on encode. ``decode(encode(s)) == s`` for any string."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    vocab.update({"<s>": BYTE_BOS, "</s>": BYTE_EOS})
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    t.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>", pad_token="</s>")
    tok.workbench_stand_in = True
    return tok
