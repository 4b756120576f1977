"""GGUF files: a header check before loading, and a check of the tokenizer transformers rebuilds.

The header reader follows the GGUF specification (``ggml/docs/gguf.md``, version 2 and 3, little
endian): magic ``GGUF``, version, tensor and metadata counts, the metadata key/values, the tensor
infos, then tensor data from the next multiple of ``general.alignment`` (32). A file whose data ends
before the last tensor's is truncated; :func:`read_header` says so before transformers meets it as a
reshape error.

transformers rebuilds a GGUF's tokenizer from its metadata (``integrations/ggml.py``), and the
rebuild is wrong for some files: the llama converter swaps BOS and EOS; the Gemma converter builds a
Unigram model from a BPE vocabulary with rank scores and drops BOS (reported upstream as
huggingface/transformers#41494). :func:`verify_tokenizer` checks the result against the file's own
metadata, repairs what can be repaired (special-token ids, whether BOS is added) and raises
:class:`GGUFTokenizerError` for the rest, naming the way out: the original HF tokenizer
(``load_model(path, tokenizer=<hub id or folder>)``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from workbench.models.errors import GGUFTokenizerError, ModelFileError

__all__ = ["GGUFHeader", "read_header", "verify_tokenizer"]

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_KEEP_ARRAYS = ("tokenizer.ggml.tokens",)  # other arrays (merges, scores, types) are skipped over


@dataclass
class GGUFHeader:
    """What :func:`read_header` found: ``metadata`` (scalars, and the token list), tensor count,
    the byte offset where tensor data ends, and the file size (bytes)."""

    path: Path
    version: int
    n_tensors: int
    data_end: int
    file_size: int
    metadata: dict = field(default_factory=dict)

    @property
    def tokens(self) -> list[str]:
        return self.metadata.get("tokenizer.ggml.tokens", [])


class _Reader:
    def __init__(self, f, path):
        self.f, self.path = f, path

    def take(self, n: int) -> bytes:
        b = self.f.read(n)
        if len(b) != n:
            raise EOFError
        return b

    def scalar(self, vtype: int):
        fmt = _SCALARS[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, keep: bool = True):
        n = self.scalar(10)
        if n > 1 << 30:
            raise ValueError(f"a string of {n} bytes")
        if not keep:
            self.f.seek(n, os.SEEK_CUR)
            return None
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool = True):
        if vtype == _STRING:
            return self.string(keep)
        if vtype == _ARRAY:
            etype, n = self.scalar(4), self.scalar(10)
            if etype in _SCALARS and not keep:
                self.f.seek(n * struct.calcsize(_SCALARS[etype]), os.SEEK_CUR)
                return None
            out = [self.value(etype, keep) for _ in range(n)]
            return out if keep else None
        if vtype not in _SCALARS:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.scalar(vtype)


def _tensor_bytes(dims: list[int], ggml_type: int) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n = 1
    for d in dims:
        n *= d
    return n // block * size


def read_header(path: str | Path) -> GGUFHeader:
    """Parse the header of a ``.gguf`` file and check that the file holds all its tensor data.

    Raises :class:`ModelFileError` naming the file and the fix when it is missing, empty, not GGUF
    (wrong magic: e.g. an HTML error page saved under a ``.gguf`` name), of an unsupported version,
    cut inside its header, or shorter than its tensors need.
    """
    p = Path(path).expanduser()
    fix = "re-download it (compare its sha256 with the publisher's) or pass another file"
    if not p.is_file():
        raise ModelFileError(f"GGUF file {p} does not exist; check the path")
    size = p.stat().st_size
    if size == 0:
        raise ModelFileError(f"GGUF file {p} is empty (0 bytes): {fix}")
    with open(p, "rb") as f:
        r = _Reader(f, p)
        try:
            magic = r.take(4)
            if magic != b"GGUF":
                raise ModelFileError(f"{p} is not a GGUF file (it starts with {magic!r}; GGUF files start "
                                     f"with b'GGUF'): {fix}")
            version = r.scalar(4)
            if version not in (2, 3):
                raise ModelFileError(f"{p} is GGUF version {version}; this loader reads versions 2 and 3: "
                                     "convert it again with a current llama.cpp (convert_hf_to_gguf.py)")
            n_tensors, n_kv = r.scalar(10), r.scalar(10)
            meta = {}
            for _ in range(n_kv):
                key = r.string()
                vtype = r.scalar(4)
                keep = vtype != _ARRAY or key in _KEEP_ARRAYS
                v = r.value(vtype, keep)
                if keep:
                    meta[key] = v
            infos = []
            for _ in range(n_tensors):
                r.string(keep=False)
                dims = [r.scalar(10) for _ in range(r.scalar(4))]
                infos.append((dims, r.scalar(4), r.scalar(10)))
            align = int(meta.get("general.alignment", 32))
            start = -(-f.tell() // align) * align
        except (EOFError, ValueError, struct.error) as e:
            if isinstance(e, ModelFileError):
                raise
            raise ModelFileError(f"GGUF file {p} ({size} bytes) is truncated or corrupt inside its header "
                                 f"({type(e).__name__} {e or 'end of file'}): {fix}") from None
    end = max((start + off + _tensor_bytes(dims, t) for dims, t, off in infos), default=start)
    if end > size:
        raise ModelFileError(f"GGUF file {p} is truncated: its {n_tensors} tensors need {end} bytes, the file "
                             f"has {size} ({100 * size / end:.0f}%): {fix}")
    return GGUFHeader(p, version, n_tensors, end, size, meta)


_PROBES = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding verifies several draft tokens in one forward pass of the target model.",
    "In 2024 the price rose from 12 to 345 dollars",
    "def add(a, b):\n    return a + b",
]
_WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "that", "with", "as", "on", "by", "at", "from", "his", "an", "were", "are", "which", "this", "be", "has", "or", "had", "not", "first", "one", "their", "its", "new", "after", "but", "who", "they", "have", "her", "she", "two", "been", "other", "when", "there", "all", "during", "into", "school", "time", "may", "years", "more", "most", "only", "over", "city", "some", "world", "would", "where", "later", "up", "such", "used", "many", "can", "state", "about", "national", "out", "known", "university", "united", "then", "made"]


def _word_probe(tok, vocab: dict[str, int]) -> tuple[int, int, list[str]]:
    """Words the GGUF vocabulary holds whole (``Ġword`` byte-level or ``▁word`` SentencePiece):
    how many the tokenizer encodes as that one token after a space (``(ok, tried, failures)``)."""
    ok = tried = 0
    bad = []
    for w in _WORDS:
        for piece in ("Ġ" + w, "▁" + w):
            if piece in vocab:
                tried += 1
                ids = tok("a " + w, add_special_tokens=False)["input_ids"]
                if ids and ids[-1] == vocab[piece]:
                    ok += 1
                elif len(bad) < 3:
                    bad.append(f"{w!r} -> {tok.convert_ids_to_tokens(ids)}")
                break
    return ok, tried, bad


def _special_ids(tok, meta: dict, fixes: list[str]) -> None:
    tokens = meta.get("tokenizer.ggml.tokens", [])
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id")):
        want = meta.get(f"tokenizer.ggml.{key}")
        if want is None or not 0 <= want < len(tokens):
            continue
        have = getattr(tok, f"{role}_token_id")
        if have != want and not (role == "pad" and have is not None):
            setattr(tok, f"{role}_token", tokens[want])
            fixes.append(f"{role} token {have} -> {want} ({tokens[want]!r}, from tokenizer.ggml.{key})")
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
        fixes.append("pad token unset -> the EOS token")


def _bos_added(tok) -> bool:
    ids = tok("hello")["input_ids"]
    return bool(ids) and tok.bos_token_id is not None and ids[0] == tok.bos_token_id


def _bos_policy(tok, meta: dict, fixes: list[str], problems: list[str]) -> None:
    want = meta.get("tokenizer.ggml.add_bos_token")
    if want is None or _bos_added(tok) == bool(want):
        return
    if hasattr(tok, "update_post_processor"):
        tok.add_bos_token = bool(want)
        tok.update_post_processor()
    if _bos_added(tok) == bool(want):
        fixes.append(f"BOS {'added' if want else 'no longer added'} on encode (tokenizer.ggml.add_bos_token={want})")
    else:
        problems.append(f"tokenizer.ggml.add_bos_token={want}, but the tokenizer "
                        f"{'does not add' if want else 'adds'} BOS and could not be changed")


def verify_tokenizer(tok, header: GGUFHeader, original_hint: str = "") -> list[str]:
    """Check (and repair where possible) a tokenizer built from the GGUF file of ``header``.

    Probes: (1) ids map to the file's vocabulary (``convert_ids_to_tokens(i) == tokens[i]``, tokens
    that the converter rewrites on purpose, all-whitespace and ``<0x09>``, excepted); (2) BOS, EOS
    and pad ids are the file's ``tokenizer.ggml.*_token_id`` (repaired); (3) BOS is added on encode
    exactly when ``tokenizer.ggml.add_bos_token`` says (repaired through the post-processor);
    (4) ``decode(encode(s)) == s`` on four plain texts; (5) common English words that the
    vocabulary holds whole encode to that one token (>= 80% of them); (6) with a vocabulary of at
    least 8,000 tokens, English prose averages >= 2.5 characters per token (subword vocabularies
    give 3.5-5; a rebuild that falls back to characters or bytes gives <= 1.5).

    Returns the repairs made (strings for provenance). Raises :class:`GGUFTokenizerError` listing
    every failed probe and the way out.
    """
    meta, tokens = header.metadata, header.tokens
    fixes: list[str] = []
    problems: list[str] = []
    if tokens:
        skip = lambda t: not t.strip() or t == "<0x09>"
        ids = sorted(set(range(min(len(tokens), 300))) | set(range(0, len(tokens), max(1, len(tokens) // 500))))
        got = tok.convert_ids_to_tokens(ids)
        bad = [(i, g, tokens[i]) for i, g in zip(ids, got) if g != tokens[i] and not skip(tokens[i])]
        if bad:
            i, g, t = bad[0]
            problems.append(f"{len(bad)} of {len(ids)} sampled ids map to other strings than the file's vocabulary "
                            f"(id {i}: {g!r} vs {t!r})")
    _special_ids(tok, meta, fixes)
    _bos_policy(tok, meta, fixes, problems)
    for s in _PROBES:
        back = tok.decode(tok(s, add_special_tokens=False)["input_ids"])
        if back != s:
            problems.append(f"round trip changes {s!r} into {back!r}")
            break
    if tokens:
        ok, tried, bad = _word_probe(tok, {t: i for i, t in enumerate(tokens)})
        if tried and ok < 0.8 * tried:
            problems.append(f"only {ok} of {tried} common words the vocabulary holds whole encode to that token "
                            f"(e.g. {'; '.join(bad)}): the merges or scores were rebuilt wrongly")
    if len(tokens) >= 8000:
        text = " ".join(_PROBES[:2])
        cpt = len(text) / max(1, len(tok(text, add_special_tokens=False)["input_ids"]))
        if cpt < 2.5:
            problems.append(f"English prose gives {cpt:.2f} characters per token (subword vocabularies give 3.5-5)")
    if problems:
        arch = meta.get("general.architecture", "?")
        raise GGUFTokenizerError(
            f"the tokenizer transformers rebuilt from {header.path} (architecture {arch!r}, tokenizer model "
            f"{meta.get('tokenizer.ggml.model', '?')!r}) is wrong: " + "; ".join(problems) + ". The model would "
            "load and produce garbage. Way out: use the original HF tokenizer, load_model("
            f"{str(header.path)!r}, tokenizer={original_hint or '<hub id or local folder of the original>'!r}), "
            "or load the original HF model instead of the GGUF file.")
    return fixes
