"""GGUF files: broken files fail before transformers sees them; the tokenizer transformers rebuilds
is checked against the file's metadata, repaired where it can be, refused where it cannot."""

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from workbench.models import GGUFTokenizerError, ModelFileError, load_model, load_tokenizer, provenance_of
from workbench.models.gguf import read_header, verify_tokenizer
from workbench.models.hf import gguf_tokenizer

REAL = Path.home() / ".cache" / "workbench" / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _cut(src: Path, dst: Path, n: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n])
    return dst


@pytest.mark.parametrize("make,match", [
    (lambda g, p: _cut(g, p / "c.gguf", g.stat().st_size - 100), r"is truncated: its 12 tensors need \d+ bytes"),
    (lambda g, p: _cut(g, p / "c.gguf", 3000), r"truncated or corrupt inside its header"),
    (lambda g, p: _cut(g, p / "c.gguf", 0), r"is empty \(0 bytes\)"),
    (lambda g, p: (p / "h.gguf").write_text("<html>404</html>") and p / "h.gguf",
     r"not a GGUF file \(it starts with b'<htm'"),
    (lambda g, p: (p / "v.gguf").write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(16)) and p / "v.gguf",
     "GGUF version 1; this loader reads versions 2 and 3"),
])
def test_broken_files_fail_naming_the_file(tiny_gguf, tmp_path, make, match):
    # before: "cannot reshape array of size ...", "cannot mmap an empty file", a magic-bytes ValueError
    path = make(tiny_gguf(), tmp_path)
    with pytest.raises(ModelFileError, match=match) as e:
        load_model(str(path), device="cpu")
    assert str(path) in str(e.value) and ("re-download" in str(e.value) or "convert it again" in str(e.value))


def test_header_reader_matches_the_file(tiny_gguf):
    h = read_header(tiny_gguf())
    assert (h.version, h.n_tensors, h.data_end) == (3, 12, h.file_size)
    assert h.metadata["tokenizer.ggml.eos_token_id"] == 2 and h.tokens[:3] == ["<|endoftext|>", "<|im_start|>",
                                                                               "<|im_end|>"]


def test_tiny_gguf_loads_with_special_tokens_as_the_metadata_says(tiny_gguf):
    # transformers' llama converter swaps BOS and EOS (EOS comes back as id 1); the check restores id 2
    model, tok = load_model(str(tiny_gguf()), device="cpu")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    prov = provenance_of(model)
    assert prov["source"] == "gguf" and any(f.startswith("eos token 1 -> 2") for f in prov["tokenizer_fixes"])
    assert tok.convert_ids_to_tokens(tok(" the quick fox", add_special_tokens=False)["input_ids"]) == \
        ["Ġthe", "Ġquick", "Ġfox"]


def test_add_bos_token_from_the_metadata_is_applied(tiny_gguf):
    tok = load_tokenizer(str(tiny_gguf("bos.gguf", add_bos=True)))
    assert tok("the fox")["input_ids"][0] == 1 and tok("the fox", add_special_tokens=False)["input_ids"][0] != 1


def test_unigram_rebuild_of_a_bpe_vocabulary_is_refused(gemma_like_gguf):
    # The shape of huggingface/transformers#41494: before, this tokenizer was accepted silently and
    # split 'national' into '▁na' + 'tional'.
    path = gemma_like_gguf
    with pytest.raises(GGUFTokenizerError, match=r"common words the vocabulary holds whole.*Way out: use the "
                                                 r"original HF tokenizer, load_model\(.*tokenizer="):
        load_tokenizer(str(path))


def test_the_way_out_is_the_original_tokenizer(tiny_gguf, tmp_path):
    _, tok = load_model(str(tiny_gguf()), device="cpu")
    tok.save_pretrained(tmp_path / "orig-tok")
    model, tok2 = load_model(str(tiny_gguf("again.gguf")), device="cpu", tokenizer=str(tmp_path / "orig-tok"))
    assert provenance_of(model)["tokenizer"] == str(tmp_path / "orig-tok") and len(tok2) == len(tok)


def _planted(tok, kind: str):
    """A copy of ``tok`` with one planted defect."""
    vocab = tok.get_vocab()
    if kind == "unigram-chars":  # a Unigram whose scores favour single symbols: it splits every word
        pieces = sorted(vocab.items(), key=lambda x: x[1])
        t = Tokenizer(models.Unigram([(p, 0.0 if len(p) == 1 else -10.0) for p, _ in pieces], 0,
                                     byte_fallback=False))
        t.pre_tokenizer, t.decoder = tok.backend_tokenizer.pre_tokenizer, tok.backend_tokenizer.decoder
    elif kind == "no-decoder":  # byte-level symbols come back undecoded: 'Ġ' instead of spaces
        t = Tokenizer.from_str(tok.backend_tokenizer.to_str())
        t.decoder = decoders.Fuse()
    else:
        raise ValueError(kind)
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>")


@pytest.mark.parametrize("kind,match", [("unigram-chars", "common words"), ("no-decoder", "round trip")])
def test_planted_tokenizer_defects_are_caught(tiny_gguf, kind, match):
    path = tiny_gguf()
    tok, _ = gguf_tokenizer(path)
    assert verify_tokenizer(tok, read_header(path)) == []  # the repaired tokenizer passes every probe
    with pytest.raises(GGUFTokenizerError, match=match):
        verify_tokenizer(_planted(tok, kind), read_header(path))


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_file(), reason="the built-in model's GGUF is not in the cache")
def test_builtin_gguf_tokenizer_passes_after_repair():
    tok, fixes = gguf_tokenizer(REAL)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    assert fixes == ["eos token 1 -> 2 ('<|im_end|>', from tokenizer.ggml.eos_token_id)",
                     "pad token None -> 2 ('<|im_end|>', from tokenizer.ggml.padding_token_id)"]
