"""The one door to NVIDIA Dynamo's AIConfigurator (PyPI ``aiconfigurator`` 0.12.0 with
``aiconfigurator-core``, Apache-2.0): import check, version, quiet calls, and model configs it can read.

AIConfigurator estimates serving latency from kernel tables measured on GPUs this workbench does not
have (GEMM, attention, NCCL per system, backend and backend version). Everything here calls its public
Python API (``aiconfigurator.cli.api.cli_estimate`` / ``cli_default``, ``aiconfigurator.sdk.perf_database``);
none of its data or code is copied. It is an optional dependency: without it every function that needs it
raises :class:`PredictUnavailableError` with the install command.

Models: AIConfigurator reads an HF ``config.json`` (a hub id it ships, or a local folder). A model given
here as a workbench shape name (``"qwen2-7b"``, ``"random:llama3-8b"``), an HF config dict, a
``transformers`` config or a loaded model is written once to
``$WORKBENCH_CACHE/predict/configs/<sha256 of the JSON>/config.json`` and passed by that path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from importlib import metadata
from pathlib import Path

__all__ = ["INSTALL_HINT", "NEAREST_ARCHITECTURE", "PredictUnavailableError", "aic_version",
           "available", "model_path", "quiet", "require", "supported_architectures"]

INSTALL_HINT = ("pip install 'aiconfigurator==0.12.0' (Python >= 3.11; or pip install -e '.[predict]'; "
                "requirements/cpu.txt pins it)")
# workbench / transformers model_type -> the HF architecture name AIConfigurator maps to a model family
_ARCH_OF_TYPE = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
# architectures AIConfigurator 0.12.0 has no family for, mapped to the nearest one it has (stated in every row)
NEAREST_ARCHITECTURE = {
    "MistralForCausalLM": ("LlamaForCausalLM", ("Mistral as Llama: the same dense GQA decoder; the sliding "
                           "window is not modelled (exact up to the window length)")),
}


class PredictUnavailableError(ImportError):
    """AIConfigurator is not installed (or cannot run on this Python); the message says how to install it."""


def available() -> bool:
    """True when ``aiconfigurator`` can be imported (no import is done here: a metadata look-up)."""
    try:
        metadata.version("aiconfigurator")
    except metadata.PackageNotFoundError:
        return False
    return True


def require():
    """The ``aiconfigurator.cli.api`` module; raises :class:`PredictUnavailableError` naming the install
    command when the package is absent or fails to import (it needs Python >= 3.11)."""
    try:
        from aiconfigurator.cli import api
    except ImportError as e:
        raise PredictUnavailableError(
            f"workbench.predict needs NVIDIA's AIConfigurator, which is not importable here ({e}). Fix: "
            f"{INSTALL_HINT}") from e
    return api


def aic_version() -> str:
    """``"aiconfigurator 0.12.0"``: the tool and version every prediction row names as its ``source``."""
    require()
    return f"aiconfigurator {metadata.version('aiconfigurator')}"


@contextlib.contextmanager
def quiet():
    """Silence AIConfigurator's INFO/WARNING log lines (table loading notes) for the duration; errors
    still propagate as exceptions."""
    prev = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(prev)


def _supported_architectures() -> dict[str, str]:
    require()
    from aiconfigurator.sdk.common import ARCHITECTURE_TO_MODEL_FAMILY

    return dict(ARCHITECTURE_TO_MODEL_FAMILY)


def supported_architectures() -> list[str]:
    """The HF architecture names AIConfigurator maps to a model family (from its own table), sorted."""
    return sorted(_supported_architectures())


def _config_dict(model) -> dict:
    """An HF config dict from a dict, a ``transformers`` config, a model with ``.config`` or a workbench
    random shape name."""
    if isinstance(model, dict):
        return dict(model)
    if hasattr(model, "to_dict") and hasattr(model, "model_type"):  # transformers PretrainedConfig
        return model.to_dict()
    if hasattr(model, "config") and hasattr(model.config, "to_dict"):  # a loaded HF model
        return model.config.to_dict()
    raise TypeError(f"model must be a name, a local folder, an HF config dict, a transformers config or a "
                    f"loaded model; got {type(model).__name__}")


def _with_architecture(cfg: dict) -> tuple[dict, str]:
    """``cfg`` with ``architectures`` set (from ``model_type`` when absent) and mapped to a family
    AIConfigurator has; returns ``(cfg, note)`` where ``note`` states any mapping. Raises ``ValueError``
    naming the supported architectures otherwise."""
    cfg = dict(cfg)
    arch = (cfg.get("architectures") or [None])[0] or _ARCH_OF_TYPE.get(str(cfg.get("model_type", "")))
    supported = _supported_architectures()
    note = ""
    if arch in NEAREST_ARCHITECTURE:
        arch, note = NEAREST_ARCHITECTURE[arch]
    if arch not in supported:
        raise ValueError(
            f"AIConfigurator has no model family for architecture {arch!r} (model_type "
            f"{cfg.get('model_type')!r}); supported architectures: {sorted(supported)}; nearest-family mappings "
            f"the workbench states: {sorted(NEAREST_ARCHITECTURE)}. Fix: pass a config of one of these")
    if arch == "Qwen2ForCausalLM":
        note = "Qwen2 as AIConfigurator's LLAMA family: the QKV bias (0.01% of the FLOPs) is not modelled"
    cfg["architectures"] = [arch]
    cfg.setdefault("torch_dtype", "bfloat16")
    return cfg, note


def model_path(model) -> tuple[str, str, str]:
    """``(path, name, note)`` for AIConfigurator: ``path`` a hub id it ships or a local folder with a
    ``config.json``; ``name`` how rows name the model; ``note`` the family mapping stated (or "").

    ``model``: a hub id AIConfigurator ships (``"meta-llama/Meta-Llama-3.1-8B"``), a local HF folder, a
    workbench random shape (``"qwen2-7b"``, ``"random:llama3-8b"``: :data:`workbench.models.random_init.RANDOM_CONFIGS`),
    an HF config dict, a ``transformers`` config or a loaded HF model. Raises ``ValueError`` for an
    unknown name or an unsupported architecture (naming what is supported), :class:`PredictUnavailableError`
    without AIConfigurator."""
    require()
    if isinstance(model, str):
        from aiconfigurator.sdk.common import DefaultHFModels

        if model in DefaultHFModels:
            return model, model, ""
        if os.path.isdir(model):
            cfg = json.loads((Path(model) / "config.json").read_text())
            return _write(cfg, Path(model).name)
        from workbench.models.random_init import RANDOM_CONFIGS, RANDOM_PREFIX

        shape = model.removeprefix(RANDOM_PREFIX)
        if shape.lower() in RANDOM_CONFIGS:
            return _write(dict(RANDOM_CONFIGS[shape]), shape.lower())
        raise ValueError(
            f"model {model!r} is neither a model AIConfigurator ships, a local HF folder nor a workbench shape; "
            f"shapes: {RANDOM_CONFIGS.names()}; shipped: {sorted(DefaultHFModels)[:12]}... Fix: pass the model's "
            "HF config (a dict, transformers config or loaded model) or a folder with its config.json")
    cfg = _config_dict(model)
    name = str(cfg.get("_name_or_path") or cfg.get("name_or_path") or cfg.get("model_type") or "model")
    return _write(cfg, name)


def _write(cfg: dict, name: str) -> tuple[str, str, str]:
    from workbench.models.builtin import cache_dir

    cfg, note = _with_architecture(cfg)
    text = json.dumps(cfg, sort_keys=True, default=str)
    folder = cache_dir() / "predict" / "configs" / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.json").exists():
        tmp = folder / f"config.json.{os.getpid()}"
        tmp.write_text(text)
        tmp.replace(folder / "config.json")
    return str(folder), name, note
