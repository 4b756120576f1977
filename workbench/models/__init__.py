"""Model loading with provenance: built-ins, HF hub ids, local HF folders, ``.gguf`` files and
random-init shapes for timing.

``load_model(spec, dtype=None, device="auto")`` returns ``(model, tokenizer)``; the model carries a
provenance dict (``provenance_of(model)``). Layout: :mod:`~workbench.models.load` (the entry points
and spec errors), :mod:`~workbench.models.builtin` (the built-in model's sources and caches),
:mod:`~workbench.models.gguf` (GGUF header and tokenizer checks), :mod:`~workbench.models.hf`
(HF loading primitives), :mod:`~workbench.models.random_init` (``random:<shape>``),
:mod:`~workbench.models.provenance` (provenance and the random-weights guard).
"""

from workbench.device import resolve_dtype as _resolve_dtype  # noqa: F401 - the name callers used before
from workbench.models.builtin import (
    BUILTINS,
    Builtin,
    cache_dir,
    cache_folder,
    cached_copies,
    fetch_builtin_gguf,
    hub_reachable,
)
from workbench.models.errors import (
    GGUFTokenizerError,
    InvalidModelSpecError,
    ModelFileError,
    ModelNotAvailableError,
    RandomWeightsError,
    TokenizerMismatchError,
)
from workbench.models.hf import sha256_file
from workbench.models.load import check_tokenizers_match, classify_spec, load_model, load_pair, load_tokenizer
from workbench.models.provenance import (
    PROVENANCE_FILE,
    RANDOM_LABEL,
    is_random,
    provenance_of,
    require_trained,
    weights_label,
)
from workbench.models.random_init import RANDOM_CONFIGS, RANDOM_PREFIX, build_random_model, hf_config

__all__ = [
    "BUILTINS", "PROVENANCE_FILE", "RANDOM_CONFIGS", "RANDOM_LABEL", "RANDOM_PREFIX", "Builtin",
    "GGUFTokenizerError", "InvalidModelSpecError", "ModelFileError", "ModelNotAvailableError",
    "RandomWeightsError", "TokenizerMismatchError", "build_random_model", "cache_dir", "cache_folder",
    "cached_copies", "check_tokenizers_match", "classify_spec", "fetch_builtin_gguf", "hf_config",
    "hub_reachable", "is_random", "load_model", "load_pair", "load_tokenizer", "provenance_of",
    "require_trained", "sha256_file", "weights_label",
]
