"""lm-eval's ``--model workbench``: any lm-eval task on a workbench model, quantized or not.

Importing this module registers :class:`WorkbenchLM` with lm-eval under the name ``workbench``
(``lm_eval.api.registry.register_model``). lm-eval 0.4.13 discovers models only through that
registry (no entry-point plugins; ``--include_path`` adds task YAMLs only), so the command line goes
through ``workbench-lm-eval`` (``pyproject.toml`` ``[project.scripts]``, or
``python -m workbench.bridges.lm_eval_cli``), which imports this module and then runs lm-eval's own
CLI unchanged::

    workbench-lm-eval --model workbench --model_args model=smollm2-135m,quant=awq_int4_g128,device=cpu \\
        --tasks hellaswag --limit 100

``model_args``: ``model`` (anything ``workbench.models.load_model`` takes, or a quantized checkpoint
``workbench.bridges.load_quantized`` reads: compressed-tensors, AutoAWQ, GPTQ), ``quant`` (a
``QuantConfig`` preset name; ``quant_<field>=v`` overrides a field, e.g. ``quant_group_size=64``),
``dtype``, ``device``, ``engine`` (``auto``: the workbench's fast :class:`~workbench.engine.Engine`
on CUDA, HF forward elsewhere; ``true`` / ``false`` force it), plus HFLM's own (``batch_size``,
``max_length``, ...). AWQ and GPTQ calibrate on WikiText-2 (``workbench.quant.quantize``'s default).

WorkbenchLM is lm-eval's ``HFLM`` over the workbench's model object, so tokenisation, batching,
``loglikelihood``, ``loglikelihood_rolling`` and ``generate_until`` are lm-eval's; with the engine the
logits of each padded batch (``HFLM._model_call``) come from one batched prefill of the engine's
static KV cache instead of the HF forward (right padding: real positions never attend to pads).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from workbench.models import BUILTINS, load_model
from workbench.quant import QuantConfig, quantize

__all__ = ["WorkbenchLM", "load_for_eval"]


def _is_quantized_checkpoint(spec: str) -> bool:
    if spec in BUILTINS:
        return False
    p = Path(spec).expanduser()
    if p.is_dir():
        cfg = p / "config.json"
        return cfg.exists() and "quantization_config" in json.loads(cfg.read_text())
    if p.suffix == ".gguf":
        return False
    try:
        from transformers import AutoConfig

        return getattr(AutoConfig.from_pretrained(spec), "quantization_config", None) is not None
    except (OSError, ValueError):
        return False


def load_for_eval(model: str, quant: str | None = None, dtype="float32", device: str = "cpu", **quant_fields):
    """``(model, tokenizer)`` for evaluation: a quantized checkpoint as it is, else ``load_model`` and,
    with ``quant`` (a ``QuantConfig`` preset) or ``quant_fields`` (QuantConfig fields), ``quantize``.

    Raises ``ValueError`` when ``quant`` is given for a checkpoint that is already quantized, or for an
    unknown preset / field (with "did you mean").
    """
    if _is_quantized_checkpoint(model):
        if quant or quant_fields:
            raise ValueError(f"{model} is already a quantized checkpoint; drop quant= (or pass its float original)")
        from workbench.bridges.imports import load_quantized

        return load_quantized(model, dtype=dtype, device=device)
    m, tok = load_model(model, dtype=dtype, device=device)
    if quant in (None, "", "none", "None") and not quant_fields:
        return m, tok
    try:
        cfg = QuantConfig.from_name(quant, **quant_fields) if quant not in (None, "", "none") else QuantConfig(**quant_fields)
    except TypeError as e:
        raise ValueError(f"bad quant_* model_args {sorted(quant_fields)}: {e}; fields are QuantConfig's") from None
    q, _ = quantize(m, cfg, tok=tok)
    q.workbench_provenance = getattr(m, "workbench_provenance", {}) | {"quant": cfg.to_row()}
    return q, tok


@register_model("workbench")
class WorkbenchLM(HFLM):
    """lm-eval ``HFLM`` on a workbench model (see the module docstring for ``model_args``)."""

    def __init__(self, model: str = "smollm2-135m", quant: str | None = None, device: str | None = "cpu",
                 dtype: str = "float32", engine="auto", batch_size=1, max_length: int | None = None, **kwargs):
        if engine not in ("auto", True, False):
            raise ValueError(f"engine={engine!r}: use auto, true or false")
        quant_fields = {k[len("quant_"):]: kwargs.pop(k) for k in list(kwargs) if k.startswith("quant_")}
        if not device or (str(device).startswith("cuda") and not torch.cuda.is_available()):
            if device:  # lm-eval's CLI passes --device's default "cuda:0" to every model
                warnings.warn(f"device={device!r} but CUDA is not available: running on the CPU", stacklevel=2)
            device = "cuda" if torch.cuda.is_available() else "cpu"
        m, tok = load_for_eval(str(model), quant, dtype, device, **quant_fields)
        self._use_engine = (torch.device(device).type == "cuda") if engine == "auto" else bool(engine)
        self._engine = None
        super().__init__(pretrained=m, tokenizer=tok, batch_size=batch_size, max_length=max_length, **kwargs)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """As lm-eval's, but ``model_args`` win over the CLI's ``--device`` / ``--batch_size`` defaults
        (lm-eval passes both, so ``device=`` in ``model_args`` would otherwise be given twice)."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    def _engine_for(self, b: int, t: int):
        from workbench.engine import Engine

        e = self._engine
        if e is None or e.max_batch < b or e.max_seq < t:  # grow in steps of 256 tokens, up to max_length
            cap_b = max(b, int(self.batch_size) if str(self.batch_size).isdigit() else 1)
            cap_t = max(t, min(-(-t // 256) * 256, self.max_length))
            self._engine = Engine.from_hf(self.model, max_batch=cap_b, max_seq=cap_t)
        return self._engine

    def _model_call(self, inps: torch.Tensor, attn_mask=None, labels=None) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]`` of right-padded ``inps`` ``[batch, seq]`` (int64): the engine's
        batched prefill (float32 logits) when enabled, else HFLM's HF forward."""
        if not self._use_engine or attn_mask is not None or labels is not None:
            return super()._model_call(inps, attn_mask, labels)
        b, t = inps.shape
        eng = self._engine_for(b, t)
        eng.reset()
        with torch.no_grad():
            return eng.extend_batch(torch.arange(b), inps.to(eng.device))
