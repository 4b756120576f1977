"""Errors raised while loading models and tokenizers, and the one way their details are quoted."""

from __future__ import annotations

__all__ = ["GGUFTokenizerError", "InvalidModelSpecError", "ModelFileError", "ModelNotAvailableError",
           "RandomWeightsError", "TokenizerMismatchError", "describe_exception"]


class ModelNotAvailableError(RuntimeError):
    """No source could provide the requested model; the message lists every attempt and the fix."""


class InvalidModelSpecError(ModelNotAvailableError, ValueError):
    """The spec itself is unusable: empty, not a string, or an unknown built-in or random shape."""


class ModelFileError(ModelNotAvailableError, ValueError):
    """A local path is not a loadable model: missing, truncated, not GGUF, or a folder without
    ``config.json``; the message names the path, what is wrong and the fix."""


class GGUFTokenizerError(ModelFileError):
    """The tokenizer rebuilt from a GGUF file fails a probe (round trip, token counts, BOS/EOS) and
    cannot be repaired; the message names the probe and the way out (the original HF tokenizer)."""


class TokenizerMismatchError(ValueError):
    """Target and draft tokenizers map strings to different ids (:func:`check_tokenizers_match`)."""


class RandomWeightsError(RuntimeError):
    """A quality measurement (MMLU, fidelity, alignment) was given a random-init model."""


def describe_exception(e: BaseException, limit: int = 1500) -> str:
    """``"TypeName: message"`` with the message kept whole, or cut at a sentence or line end.

    Library messages can run to pages; a cut mid-sentence hides the part that says what to do.
    Text up to ``limit`` characters is kept; past it, the message ends at the last full sentence
    (". ") or line before ``limit`` (at a word only when there is neither) and ``" [...]"`` marks
    the cut.
    """
    msg = " ".join(str(e).split()) if "\n" not in str(e) else str(e).strip()
    if len(msg) > limit:
        head = msg[:limit]
        cut = max(head.rfind(". "), head.rfind("\n"))
        msg = (head[:cut + 1] if cut > 0 else head.rsplit(" ", 1)[0]).rstrip() + " [...]"
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__
