"""Provenance attached to every loaded model, and the "random weights: timing only" guard.

``provenance_of(model)`` is the dict :func:`workbench.models.load_model` attached: ``source``
(``"hub"``, ``"pypi-gguf"``, ``"gguf"``, ``"local"``, ``"random"``), ``model_id`` or ``path``,
``revision`` or ``sha256``, ``dtype``, ``device``; a random-init model also has
``weights="random"`` and ``note=RANDOM_LABEL``.
"""

from __future__ import annotations

from workbench.models.errors import RandomWeightsError

__all__ = ["PROVENANCE_FILE", "RANDOM_LABEL", "attach", "is_random", "provenance_of", "require_trained",
           "weights_label"]

PROVENANCE_FILE = "workbench_provenance.json"  # beside every cached HF folder
RANDOM_LABEL = "random weights: timing only"
RANDOM_CONFIG_FLAG = "workbench_random_weights"  # set on the HF config, so engines built from it know


def provenance_of(model) -> dict:
    """The provenance dict attached by ``load_model`` (empty for a model built elsewhere)."""
    return dict(getattr(model, "workbench_provenance", {}) or {})


def attach(model, prov: dict):
    """Attach ``prov`` to ``model`` (and flag its HF config when the weights are random)."""
    model.workbench_provenance = prov
    config = getattr(model, "config", None)
    if prov.get("weights") == "random" and config is not None:
        setattr(config, RANDOM_CONFIG_FLAG, True)
    return model


def is_random(model) -> bool:
    """True for a random-init model (``load_model("random:...")``), anything built from it that kept
    its provenance or HF config (a quantized copy, an ``Engine``), or a runner wrapping one."""
    for obj in (model, getattr(model, "model", None)):
        if obj is None:
            continue
        if provenance_of(obj).get("weights") == "random":
            return True
        if getattr(getattr(obj, "config", None), RANDOM_CONFIG_FLAG, False):
            return True
    return False


def weights_label(model) -> str:
    """``RANDOM_LABEL`` for a random-init model, else ``"trained"``: a column or title suffix so every
    output from a random model says so."""
    return RANDOM_LABEL if is_random(model) else "trained"


def require_trained(model, what: str) -> None:
    """Raise :class:`RandomWeightsError` when ``model`` has random weights.

    ``what`` names the measurement in the message (``"MMLU"``, ``"fidelity (KL, perplexity)"``).
    Quality numbers from random weights mean nothing; their timings are still valid.
    """
    if is_random(model):
        name = provenance_of(model).get("name") or provenance_of(getattr(model, "model", None)).get("name", "")
        raise RandomWeightsError(
            f"{what} needs trained weights, but this model has {RANDOM_LABEL} ({name or 'random init'}). "
            "Load a trained model for quality numbers (load_model('smollm2-135m'), an HF id, a local "
            "folder or a .gguf); keep random:<shape> models for speed and memory measurements.")
