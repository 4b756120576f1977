"""Named drafts for a target: quantized self-drafts, truncated-layer drafts, distilled drafts, hub models.

Names (``make_draft``):

* ``"int8"``, ``"int4"``, ``"int3"``: the target quantized with RTN through ``workbench.quant``
  (INT8 per output channel; INT4 / INT3 asymmetric groups of ``group_size``). On a CPU these run
  dequantized weights, so their cost ratio c is about 1: they show alignment, not speed.
* ``"layers-N"``: the target's first N decoder layers plus its final norm and head (weights shared,
  no copy): a cheap draft that rejects often (used by the tests).
* ``"distilled"``: :func:`workbench.spec.distill.distill_draft` with ``distill_kwargs``.
* ``"ngram"`` / ``"ngram-MIN-MAX"``: no model, an :class:`workbench.spec.ngram.NgramProposer` (prompt
  lookup with vLLM's rule; ``prompt_lookup_min`` / ``_max`` = MIN / MAX, default vLLM's 5 / 5).
* anything else: a hub id or local path loaded with ``workbench.models.load_model``; its tokenizer
  must match the target's (``check_tokenizers_match`` raises ``TokenizerMismatchError``).
"""

from __future__ import annotations

import copy
import re

import torch

from workbench.models import check_tokenizers_match, load_model, provenance_of
from workbench.registry import did_you_mean
from workbench.spec.distill import distill_draft

QUANT_DRAFTS = {"int8": 8, "int4": 4, "int3": 3}


def truncated_draft(target: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """The target's first ``n_layers`` decoder layers + final norm + head, sharing its tensors.

    Works for Llama-style ``model.model.layers``. Raises ``ValueError`` for ``n_layers`` outside
    [1, num_hidden_layers].
    """
    n_total = target.config.num_hidden_layers
    if not 1 <= n_layers <= n_total:
        raise ValueError(f"n_layers={n_layers} must be in [1, {n_total}]")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    draft = copy.copy(target)  # shallow: shares every submodule and tensor ...
    draft._modules = dict(target._modules)  # ... but not the child registries we are about to edit
    draft.model = copy.copy(target.model)
    draft.model._modules = dict(target.model._modules)
    draft.model.layers = torch.nn.ModuleList(list(target.model.layers)[:n_layers])
    draft.config = cfg
    draft.model.config = cfg
    draft.workbench_provenance = {"draft": f"layers-{n_layers}", "of": getattr(target, "name_or_path", "")}
    return draft


def quantized_draft(target: torch.nn.Module, bits: int, group_size: int = 64):
    """``(qmodel, report)`` from ``workbench.quant.quantize`` with RTN at ``bits`` (8: per channel,
    symmetric; 4/3: asymmetric groups of ``group_size``). The target is left unchanged."""
    from workbench.quant import QuantConfig, quantize

    if bits == 8:
        cfg = QuantConfig(method="rtn", bits=8, granularity="per_channel", symmetric=True)
    else:
        cfg = QuantConfig(method="rtn", bits=bits, granularity="group", group_size=group_size)
    return quantize(target, cfg)


def make_draft(target: torch.nn.Module, name: str, tokenizer=None, *, group_size: int = 64,
               distill_kwargs: dict | None = None):
    """Build the draft called ``name`` for ``target`` (see the module docstring).

    Returns ``(draft_module, info)``, ``info`` a dict for result columns (``draft``, and the distill
    curve under ``"curve"`` for ``"distilled"``) with ``draft_key``: a JSON-able identity of how the
    draft was built (results-store keys use it). Raises ``ValueError`` for a malformed built-in name
    and ``TokenizerMismatchError`` for a hub draft with another vocabulary.
    """
    name_l = name.lower()
    if name_l in QUANT_DRAFTS:
        qmodel, report = quantized_draft(target, QUANT_DRAFTS[name_l], group_size)
        key = {"draft": name_l, "method": "rtn", "bits": QUANT_DRAFTS[name_l],
               "group_size": None if name_l == "int8" else group_size}
        return qmodel, {"draft": name_l, "draft_kind": "quantized", "quant_report": report, "draft_key": key}
    m = re.fullmatch(r"layers-(\d+)", name_l)
    if m:
        return truncated_draft(target, int(m.group(1))), {"draft": name_l, "draft_kind": "truncated",
                                                          "draft_key": {"draft": name_l}}
    if name_l == "distilled":
        draft, curve = distill_draft(target, **(distill_kwargs or {}))
        return draft, {"draft": "distilled", "draft_kind": "distilled", "curve": curve,
                       "draft_key": dict(draft.workbench_provenance)}
    m = re.fullmatch(r"ngram(?:-(\d+)-(\d+))?", name_l)
    if m:
        from workbench.spec.ngram import NgramProposer

        prop = NgramProposer(*(int(g) for g in m.groups())) if m.group(1) else NgramProposer()
        key = {"draft": name_l, "prompt_lookup_min": prop.prompt_lookup_min,
               "prompt_lookup_max": prop.prompt_lookup_max}
        return prop, {"draft": name_l, "draft_kind": "ngram", "draft_key": key}
    if name_l.startswith(("int", "layers", "distil", "ngram")):
        raise ValueError(f"draft {name!r} is not a built-in draft; use one of {sorted(QUANT_DRAFTS)}, "
                         "'layers-N', 'distilled', 'ngram', 'ngram-MIN-MAX' or a model id."
                         + did_you_mean(name_l, [*QUANT_DRAFTS, "distilled", "ngram"]))

    device = next(target.parameters()).device
    draft, d_tok = load_model(name, dtype=next(target.parameters()).dtype, device=str(device))
    if tokenizer is not None:
        check_tokenizers_match(tokenizer, d_tok)
    return draft, {"draft": name, "draft_kind": "model", "draft_key": {"draft": name, **provenance_of(draft)}}


def build_drafts(target: torch.nn.Module, names, tokenizer=None, **kw) -> dict:
    """``{name: (draft_module, info)}`` for each name (see :func:`make_draft`)."""
    return {n: make_draft(target, n, tokenizer, **kw) for n in names}


__all__ = ["QUANT_DRAFTS", "build_drafts", "make_draft", "quantized_draft", "truncated_draft"]
