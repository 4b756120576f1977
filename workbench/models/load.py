"""``load_model`` / ``load_tokenizer`` / ``load_pair``: one entry for every kind of model spec.

A spec is, in the order it is recognised: ``"random:<shape>"`` (:data:`RANDOM_CONFIGS`), a built-in
name (:data:`BUILTINS`), an existing local path (an HF folder with ``config.json``, or a ``.gguf``
file), else an HF hub id (``"org/name"``). Anything else gets one error that names what was wrong
and the fix: an empty spec, a path that does not exist, a folder holding only a ``.gguf``, a
truncated or non-GGUF file, a near miss of a built-in name ("did you mean"), a hub id the hub
cannot serve.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import torch

from workbench.device import dtype_name, resolve
from workbench.models.builtin import BUILTINS, load_builtin, load_builtin_tokenizer
from workbench.models.errors import (
    InvalidModelSpecError,
    ModelFileError,
    ModelNotAvailableError,
    TokenizerMismatchError,
    describe_exception,
)
from workbench.models.hf import gguf_model, gguf_tokenizer, hf_model, hf_tokenizer, sha256_file
from workbench.models.provenance import PROVENANCE_FILE, RANDOM_LABEL, attach
from workbench.models.random_init import RANDOM_CONFIGS, RANDOM_PREFIX, build_random_model, byte_tokenizer
from workbench.registry import close_matches, unknown_name_message

__all__ = ["check_tokenizers_match", "classify_spec", "load_model", "load_pair", "load_tokenizer"]

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
_KNOWN = "a built-in name ({}), 'random:<shape>' ({}), a local HF folder, a .gguf file or an HF hub id"


def _known() -> str:
    return _KNOWN.format(", ".join(BUILTINS.names()), ", ".join(RANDOM_CONFIGS.names()))


def _looks_like_path(spec: str) -> bool:
    return (spec.startswith(("/", "./", "../", "~", ".\\")) or "\\" in spec or spec.count("/") > 1
            or Path(spec).suffix.lower() in (".gguf", ".safetensors", ".bin", ".pt", ".json")
            or (os.sep in spec and Path(spec.split(os.sep)[0]).exists()))


def _missing_path(spec: str, p: Path) -> ModelFileError:
    p = p.absolute()
    parent = next((a for a in p.parents if a.is_dir()), None)
    hint = ""
    if parent is not None and parent != p.parent:
        hint = f" (the nearest existing folder is {parent})"
    elif parent is not None:
        near = close_matches(p.name, [c.name for c in parent.iterdir()], n=1)
        hint = f" Did you mean {str(parent / near[0])!r}?" if near else ""
    return ModelFileError(f"model path {spec!r} ({p}) does not exist{hint}. Fix: check the path, or pass {_known()}")


def classify_spec(spec) -> tuple[str, object]:
    """``(kind, target)`` for a model spec: ``("random", shape)``, ``("builtin", Builtin)``,
    ``("gguf", Path)``, ``("folder", Path)`` or ``("hub", id)``.

    Raises :class:`InvalidModelSpecError` (empty or non-string spec, unknown random shape, a near miss
    of a built-in name) or :class:`ModelFileError` (a path that does not exist or is no model).
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise InvalidModelSpecError(f"model spec {spec!r} is of type {type(spec).__name__}, not a string; "
                                    f"pass {_known()}")
    spec = spec.strip()
    if not spec:
        raise InvalidModelSpecError(f"model spec is empty; pass {_known()}")
    if spec.lower().startswith(RANDOM_PREFIX):
        shape = spec[len(RANDOM_PREFIX):].strip().lower()
        if shape not in RANDOM_CONFIGS:
            raise InvalidModelSpecError(unknown_name_message(
                "model spec", spec, [RANDOM_PREFIX + n for n in RANDOM_CONFIGS], "Random-init shapes are "
                "spelled 'random:<shape>'."))
        return "random", shape
    if spec in BUILTINS:
        return "builtin", BUILTINS[spec]
    p = Path(spec).expanduser()
    if p.is_file():
        if p.suffix.lower() == ".gguf":
            return "gguf", p
        hint = f"; pass its folder {str(p.parent)!r}" if (p.parent / "config.json").is_file() else ""
        raise ModelFileError(f"{p} is a file but not a .gguf model file{hint}. Fix: pass an HF folder (with "
                             "config.json and weights) or a .gguf file")
    if p.is_dir():
        return "folder", p
    if _looks_like_path(spec):
        raise _missing_path(spec, p)
    near = close_matches(spec, [*BUILTINS, *(RANDOM_PREFIX + n for n in RANDOM_CONFIGS)], n=1, cutoff=0.7)
    if near and "/" not in spec:
        raise InvalidModelSpecError(f"model spec {spec!r} is not a built-in name, a local path or an HF hub id. "
                                    f"Did you mean {near[0]!r}? Otherwise pass {_known()}")
    if not _HUB_ID.fullmatch(spec):
        raise InvalidModelSpecError(f"model spec {spec!r} is not a local path and not an HF hub id "
                                    f"('org/name'); pass {_known()}")
    return "hub", spec


_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.safetensors.index.json", "*.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _folder_problem(p: Path, need_tokenizer: bool = True) -> ModelFileError | None:
    """The error for a folder that is no loadable HF model folder, or ``None``."""
    if (p / "config.json").is_file():
        if not any(next(p.glob(g), None) for g in _WEIGHTS):
            return ModelFileError(f"folder {p} holds config.json but no weights (*.safetensors or *.bin). Fix: "
                                  "copy the weight files beside it, or re-save with model.save_pretrained(folder)")
        if need_tokenizer and not any((p / f).is_file() for f in _TOKENIZER_FILES):
            return ModelFileError(f"folder {p} holds a model but no tokenizer files ({', '.join(_TOKENIZER_FILES)}). "
                                  "Fix: tokenizer.save_pretrained(folder), or pass tokenizer=<hub id or folder> "
                                  "to load_model")
        return None
    ggufs = sorted(x.name for x in p.glob("*.gguf"))
    if ggufs:
        return ModelFileError(f"folder {p} holds no config.json (it is not an HF model folder) but holds GGUF "
                              f"file(s) {ggufs}. Fix: pass the file itself, load_model({str(p / ggufs[0])!r})")
    inner = sorted(str(c.parent) for c in p.glob("*/config.json")) + sorted(str(c.parent) for c in
                                                                              p.glob("snapshots/*/config.json"))
    entries = sorted(x.name for x in p.iterdir())[:8]
    hint = f" It has model folders inside: pass one of {inner[:3]}." if inner else ""
    return ModelFileError(f"folder {p} holds no config.json, so it is not an HF model folder "
                          f"({'it is empty' if not entries else 'it holds ' + ', '.join(entries)}).{hint} Fix: "
                          "pass a folder written by save_pretrained (config.json + weights + tokenizer files) "
                          "or a .gguf file")


def _hub_error(spec: str, e: Exception) -> ModelNotAvailableError:
    offline = [v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
               if os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")]
    why = (f"{offline[0]} is set and {spec!r} is not in the local HF cache" if offline
           else f"the hub did not serve it ({describe_exception(e)})")
    near = close_matches(spec, BUILTINS, n=1, cutoff=0.6)
    return ModelNotAvailableError(
        f"could not load {spec!r} as an HF hub id: {why}. It is not a built-in ({BUILTINS.names()}) and not "
        f"a local path.{' Did you mean ' + repr(near[0]) + '?' if near else ''} Fix: check the spelling "
        f"(https://huggingface.co/{spec}), unset the offline variable and go online once, or pass a local folder")


def _tokenizer_for(kind: str, target, tokenizer=None):
    """The tokenizer for a classified spec, or the one given (an object, or a spec to load it from)."""
    if tokenizer is not None:
        return tokenizer if not isinstance(tokenizer, (str, os.PathLike)) else load_tokenizer(tokenizer)
    if kind == "random":
        return byte_tokenizer()
    if kind == "builtin":
        return load_builtin_tokenizer(target)
    if kind == "gguf":
        return gguf_tokenizer(target)[0]
    what = str(target)
    try:
        return hf_tokenizer(what)
    except Exception as e:  # noqa: BLE001 - re-raised naming the folder or id and the fix
        if kind == "hub":
            raise _hub_error(what, e) from None
        raise ModelFileError(f"could not load the tokenizer of {what}: {describe_exception(e)}. Fix: save the "
                             "tokenizer into the folder (tokenizer.save_pretrained), or pass tokenizer=<hub id "
                             "or folder>") from None


def load_tokenizer(spec):
    """The tokenizer of ``spec`` (any spec :func:`load_model` takes, or a folder holding only
    tokenizer files), without loading the model.

    Raises the errors of :func:`classify_spec` and those of loading (each names the fix).
    """
    kind, target = classify_spec(spec)
    tokenizer_only = kind == "folder" and any((target / f).is_file() for f in _TOKENIZER_FILES)
    if kind == "folder" and not tokenizer_only and (problem := _folder_problem(target)):
        raise problem
    return _tokenizer_for(kind, target)


def _load_local(kind: str, p: Path, dtype, device, tokenizer):
    if kind == "gguf":
        tok, fixes = (gguf_tokenizer(p) if tokenizer is None else (_tokenizer_for(kind, p, tokenizer), []))
        model = gguf_model(p, dtype, device)
        return model, tok, {"source": "gguf", "path": str(p.resolve()), "sha256": sha256_file(p),
                            "tokenizer_fixes": fixes}
    if problem := _folder_problem(p, need_tokenizer=tokenizer is None):
        raise problem
    tok = _tokenizer_for(kind, p, tokenizer)
    try:
        model = hf_model(str(p), dtype, device)
    except Exception as e:  # noqa: BLE001 - re-raised naming the folder and the fix
        raise ModelFileError(f"could not load the model in {p}: {describe_exception(e)}. Fix: check that the "
                             "folder holds the weights config.json names (save_pretrained writes both)") from None
    prov = {"source": "local", "path": str(p.resolve())}
    if (p / PROVENANCE_FILE).is_file():
        prov = {**json.loads((p / PROVENANCE_FILE).read_text()), **prov}
    return model, tok, prov


def load_model(spec: str = "smollm2-135m", dtype: str | torch.dtype | None = None,
               device: str | torch.device | None = "auto", *, tokenizer=None, seed: int = 0):
    """Load a causal LM and its tokenizer, with provenance attached.

    Args:
        spec: a built-in name (``"smollm2-135m"``, see :mod:`workbench.models.builtin`), a
            random-init shape ``"random:<shape>"`` (``qwen2-7b``, ``llama3-8b``, ``qwen2-0.5b``,
            ``smollm2-135m``; timing only), a local HF folder, a local ``.gguf`` file, or an HF hub
            id (``"Qwen/Qwen2.5-0.5B-Instruct"``).
        dtype: ``None``/``"auto"`` (bfloat16 on CUDA, float32 on the CPU), a ``torch.dtype`` or a
            name (``"float32"``, ``"bf16"``...).
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        tokenizer: a tokenizer, or a spec to load one from (e.g. the original HF id of a GGUF file
            whose rebuilt tokenizer fails its checks); default: the model's own. Checked against the
            model's vocabulary (:func:`check_vocab_fits`).
        seed: RNG seed of the weights of a ``random:`` spec (ignored otherwise).

    Returns:
        ``(model, tokenizer)``: an ``AutoModelForCausalLM`` in eval mode on ``device`` in ``dtype``.
        ``provenance_of(model)`` gives ``source``, ``model_id`` or ``path``, ``revision`` or
        ``sha256``, ``dtype`` and ``device``; random shapes add ``weights="random"``.

    Raises:
        InvalidModelSpecError: empty or non-string spec, unknown random shape, near miss of a built-in.
        ModelFileError: a missing path, a folder without ``config.json``, a truncated or non-GGUF
            file (``GGUFTokenizerError``: a GGUF whose rebuilt tokenizer fails its probes).
        ModelNotAvailableError: no source could provide the model (each attempt and the fix listed),
            or a random shape that does not fit in the device's memory.
        ValueError: unknown dtype or device, or CUDA asked for where there is none.
        TokenizerMismatchError: a ``tokenizer`` whose vocabulary size is not the model's.
    """
    dev, dt = resolve(device, dtype)
    kind, target = classify_spec(spec)
    if kind == "random":
        model = build_random_model(target, dev, dt, seed)
        tok = _tokenizer_for(kind, target, tokenizer)
        prov = {"name": f"{RANDOM_PREFIX}{target}", "source": "random", "weights": "random", "seed": seed,
                "config": copy.deepcopy(dict(RANDOM_CONFIGS[target])), "note": RANDOM_LABEL,
                "tokenizer": "byte-level stand-in" if tokenizer is None else str(tokenizer)}
    elif kind == "builtin":
        model, tok, prov = load_builtin(target, dt, dev, _tokenizer_for(kind, target, tokenizer) if tokenizer else None)
    elif kind in ("gguf", "folder"):
        model, tok, prov = _load_local(kind, target, dt, dev, tokenizer)
    else:
        tok = _tokenizer_for(kind, target, tokenizer)
        try:
            model = hf_model(target, dt, dev)
        except Exception as e:  # noqa: BLE001 - re-raised with the fix named
            raise _hub_error(target, e) from None
        prov = {"source": "hub", "model_id": target, "revision": getattr(model.config, "_commit_hash", None) or ""}
    if tokenizer is not None:
        check_vocab_fits(model, tok, spec)
    if isinstance(tokenizer, (str, os.PathLike)) and kind != "random":
        prov["tokenizer"] = os.fspath(tokenizer)
    prov.update(dtype=dtype_name(dt), device=str(dev))
    return attach(model, prov), _quiet_bpe_cleanup(tok)


# Checkpoints pad their embedding past the tokenizer's size to a round number of rows (Qwen2-7B: 152,064
# rows for 151,646 tokens; Phi-3-mini: 32,064 for 32,011): a gap below this many rows is such padding.
VOCAB_PAD_MAX = 1024


def check_vocab_fits(model, tok, spec="the model") -> None:
    """Raise :class:`TokenizerMismatchError` unless tokenizer ``tok`` (``len(tok)`` ids, added tokens
    included) fits ``model``'s vocabulary (the rows of its input embedding): no id past the last row,
    and fewer than :data:`VOCAB_PAD_MAX` rows left over (more means another vocabulary: its ids name
    other tokens, and the output is garbage)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = int(getattr(emb, "num_embeddings", 0) or getattr(model.config, "vocab_size", 0))
    n = len(tok)
    if n > rows or rows - n >= VOCAB_PAD_MAX:
        raise TokenizerMismatchError(
            f"the tokenizer has {n:,} tokens but {spec} has {rows:,} vocabulary rows: "
            + ("its ids past the last row cannot be looked up" if n > rows else "they are different vocabularies")
            + ". Fix: pass the tokenizer the model was trained with (tokenizer=<its hub id or folder>), or drop "
              "tokenizer= to use the model's own")


def _quiet_bpe_cleanup(tok):
    """``tok`` with ``clean_up_tokenization_spaces`` off where its backend model is BPE. transformers 5.17
    ignores that flag for BPE tokenizers anyway (the cleanup strips real spaces before punctuation) and warns
    on the first decode that it does ("Ignoring clean_up_tokenization_spaces=True for BPE tokenizer ..."),
    a warning the user cannot act on: SmolLM2's tokenizer config sets it. Decoded text is unchanged."""
    backend = getattr(tok, "backend_tokenizer", None)
    if getattr(tok, "clean_up_tokenization_spaces", False) and type(getattr(backend, "model", None)).__name__ == "BPE":
        tok.clean_up_tokenization_spaces = False
    return tok


def check_tokenizers_match(tok_a, tok_b, probes: list[str] | None = None) -> None:
    """Raise :class:`TokenizerMismatchError` unless both tokenizers give the same ids for each probe.

    Speculative decoding compares draft and target distributions token id by token id, so the two
    vocabularies must agree. The probes cover ASCII text, digits, code, whitespace and non-Latin text.
    """
    probes = probes or [
        "The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x ** 2  # 12345",
        "Überprüfung café naïve — 東京 2024!",
        "  \n\t multiple   spaces",
    ]
    for s in probes:
        a = tok_a(s, add_special_tokens=False)["input_ids"]
        b = tok_b(s, add_special_tokens=False)["input_ids"]
        if a != b:
            raise TokenizerMismatchError(
                f"target and draft tokenizers disagree on {s!r}: {a[:12]} vs {b[:12]}. "
                "Speculative decoding needs one vocabulary: pick a draft from the target's model family."
            )
    if len(tok_a) != len(tok_b):
        raise TokenizerMismatchError(f"vocabulary sizes differ: {len(tok_a)} vs {len(tok_b)}")


def load_pair(target: str, draft: str, dtype: str | torch.dtype | None = None,
              device: str | torch.device | None = "auto", *, seed: int = 0):
    """Load a target and a draft model that share a tokenizer.

    The two tokenizers are loaded and compared first (seconds), so a mismatched pair is refused
    before either model is loaded. Returns ``(target_model, draft_model, tokenizer)``. Raises
    :class:`TokenizerMismatchError` when the tokenizers map the same strings to different ids (see
    :func:`check_tokenizers_match`), and the errors of :func:`load_model`.
    """
    t_tok = load_tokenizer(target)
    d_tok = load_tokenizer(draft)
    check_tokenizers_match(t_tok, d_tok)
    t_model, t_tok = load_model(target, dtype=dtype, device=device, tokenizer=t_tok, seed=seed)
    d_model, _ = load_model(draft, dtype=dtype, device=device, tokenizer=d_tok, seed=seed + 1)
    return t_model, d_model, t_tok
