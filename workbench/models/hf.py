"""Hugging Face loading primitives: HF folders and hub ids, GGUF files (checked), cache folders."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import torch

from workbench.models.errors import ModelFileError, describe_exception
from workbench.models.gguf import read_header, verify_tokenizer
from workbench.models.provenance import PROVENANCE_FILE

__all__ = ["align_special_tokens", "gguf_model", "gguf_tokenizer", "hf_model", "hf_tokenizer", "save_folder",
           "sha256_file"]


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def hf_tokenizer(path_or_id: str, **kw):
    """``AutoTokenizer.from_pretrained``; pad = EOS when the tokenizer has no pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path_or_id, **kw)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def hf_model(path_or_id: str, dtype, device: torch.device, **kw):
    """``AutoModelForCausalLM.from_pretrained`` in eval mode on ``device``; ``dtype="auto"`` keeps the
    stored dtype."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=dtype, **kw)
    return model.eval().to(device)


def align_special_tokens(model, tok) -> list[str]:
    """Set the tokenizer's EOS (and pad, when unset) to the model config's ids where they differ.

    For cached GGUF-derived folders written before their tokenizer was checked: their
    ``config.json`` holds the file's ids. Returns the changes made."""
    fixes = []
    eos_id = model.config.eos_token_id
    eos_id = eos_id[0] if isinstance(eos_id, (list, tuple)) else eos_id
    if eos_id is not None and tok.eos_token_id != eos_id:
        fixes.append(f"eos token {tok.eos_token_id} -> {eos_id} (from config.json)")
        tok.eos_token = tok.convert_ids_to_tokens(int(eos_id))
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return fixes


def gguf_tokenizer(path: Path, original_hint: str = ""):
    """The tokenizer transformers rebuilds from a checked ``.gguf`` file, verified against the file's
    metadata (:func:`workbench.models.gguf.verify_tokenizer`): ``(tokenizer, repairs made)``.

    Raises :class:`ModelFileError` for a bad file and ``GGUFTokenizerError`` for a tokenizer that
    fails its probes."""
    header = read_header(path)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:  # noqa: BLE001 - any conversion failure is re-raised naming the file and the fix
        raise ModelFileError(
            f"transformers could not build a tokenizer from {path} (architecture "
            f"{header.metadata.get('general.architecture')!r}): {describe_exception(e)}. Fix: pass the "
            "original HF tokenizer with load_model(..., tokenizer=<hub id or folder>)") from None
    return tok, verify_tokenizer(tok, header, original_hint)


def gguf_model(path: Path, dtype: torch.dtype, device: torch.device):
    """The model of a checked ``.gguf`` file, dequantized to float32 on the CPU, then cast and moved.

    Raises :class:`ModelFileError` naming the file and the fix when transformers cannot read it
    (an unsupported architecture, say)."""
    header = read_header(path)
    try:
        model = hf_model(str(path.parent), torch.float32, torch.device("cpu"), gguf_file=path.name)
    except Exception as e:  # noqa: BLE001 - re-raised with the file, its architecture and the fix
        raise ModelFileError(
            f"transformers could not load the weights of {path} (architecture "
            f"{header.metadata.get('general.architecture')!r}, {header.n_tensors} tensors): "
            f"{describe_exception(e)}. Fix: load the original HF model (hub id or folder) instead") from None
    if getattr(model.config, "quantization_config", None) is not None:
        # GGUF loading dequantizes to plain float tensors; only the marker says "quantized".
        del model.config.quantization_config
        model.hf_quantizer = None
        model.is_quantized = False
    return model.to(dtype=dtype, device=device)


@contextlib.contextmanager
def replace_dir(dest: Path):
    """Fill a folder atomically: yields a fresh temp dir beside ``dest`` (same file system); when the
    block ends without error it replaces ``dest`` (an old one is removed) by a rename, and on any error
    it is removed, so ``dest`` is never half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tmp-"))
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def save_folder(model, tok, target: Path, prov: dict) -> None:
    """Write an HF folder with ``PROVENANCE_FILE`` atomically: into a temp dir beside ``target``,
    then rename (an interrupted save leaves no half-written cache)."""
    with replace_dir(target) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2))
