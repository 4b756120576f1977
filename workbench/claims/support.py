"""Can this evidence support that claim? The checks the ledger's hooks run before they judge.

A measurement supports a claim only in the claim's own setting: the claimed model (trained weights,
not a random-init stand-in), the claimed hardware and precision, a real acceptance rate from a draft
cheaper than its target, a serving simulator whose policies were checked against a real run. Each
check here returns the reason it fails (a sentence for the ledger's ``why``) or ``None``.

Names are compared normalised: lower case, letters and digits only, a trailing ``instruct`` / ``chat``
dropped for models, and the organisation prefix (``Qwen/``), ``random:`` spec prefix and the ``Meta-``
of ``Meta-Llama`` removed, so ``Qwen/Qwen2-7B-Instruct`` is ``qwen2-7b`` and ``NVIDIA GeForce RTX 4090`` contains ``rtx-4090``.

Predictions (:data:`PREDICTION_COLUMNS`) are another tool's estimates for hardware that is not here
(NVIDIA's AIConfigurator through ``workbench.predict``): one row per (system, backend, model,
precision, batch size, ISL, OSL) with ``ttft_ms``, ``tpot_ms``, ``tokens_per_s_per_gpu``, the
``source`` (tool and version) and ``stand_in`` (empty when ``system`` is the hardware itself, else the
hardware it stands in for and how, e.g. ``"l40s for rtx-4090: bandwidth scaled 1008/864 GB/s"``).
"""

from __future__ import annotations

import math
import re

import pandas as pd

from workbench.pd.verdict import MAX_SIM_ERR_MEAN, unchecked_policy

__all__ = ["BASE_PRECISIONS", "INT4_PRECISIONS", "MAX_SIM_ERR_MEAN", "PREDICTION_COLUMNS", "check_predictions",
           "draft_support", "hardware_matches", "prediction_label", "prediction_rows", "same_model",
           "sim_support"]

PREDICTION_COLUMNS = ("system", "backend", "model", "precision", "batch_size", "isl", "osl", "ttft_ms", "tpot_ms",
                      "tokens_per_s_per_gpu", "source", "stand_in")
# 16-bit baselines and INT4 weight-only (W4A16) precisions, normalised (letters and digits): the names
# of the workbench (bfloat16, W4A16), of AIConfigurator (float16, int4_wo) and of the quantizers (awq, gptq)
BASE_PRECISIONS = frozenset({"bf16", "bfloat16", "fp16", "float16", "half"})
INT4_PRECISIONS = frozenset({"w4a16", "int4", "int4wo", "w4a16awq", "w4a16gptq", "awq", "gptq"})


def _alnum(s) -> str:
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


def _model_key(name) -> str:
    s = str(name).strip().lower().removeprefix("random:").rsplit("/", 1)[-1]
    s = _alnum(s)
    for suffix in ("instruct", "chat"):
        s = s.removesuffix(suffix)
    return s.removeprefix("meta") if s.startswith("metallama") else s  # meta-llama/Meta-Llama-3-8B


def same_model(name, claimed: str) -> bool:
    """True when model ``name`` (a spec, HF id or preset) is the ``claimed`` model, normalised as the
    module docstring says: ``same_model("Qwen/Qwen2-7B-Instruct", "qwen2-7b")`` is True,
    ``same_model("qwen2-72b", "qwen2-7b")`` and ``same_model("smollm2-135m", "qwen2-7b")`` False."""
    return bool(_model_key(name)) and _model_key(name) == _model_key(claimed)


def hardware_matches(device_name, claimed: str) -> bool:
    """True when the device name (``torch.cuda.get_device_name``, a system name) names the ``claimed``
    hardware: ``hardware_matches("NVIDIA GeForce RTX 4090", "rtx-4090")`` is True."""
    return bool(_alnum(claimed)) and _alnum(claimed) in _alnum(device_name)


def draft_support(c: float, acceptance: str, alpha: float | None = None) -> str | None:
    """Why a speculative-decoding measurement cannot test a claim about drafting, or None: the draft
    must be cheaper than the target (``c`` = draft step / target step < 1; a draft as slow as the
    target cannot pay at any acceptance, Leviathan et al. 2023 Theorem 3.8) and, where ``alpha`` is
    used, the acceptance must be the draft's real one (``acceptance == "real"``), not a what-if."""
    if not (math.isfinite(c) and 0 < c < 1):
        return (f"the draft costs c = {c:.2f} target steps per step: a draft no cheaper than its target cannot "
                "test a claim about drafting; measure with a smaller draft (c < 1)")
    if alpha is not None:
        if str(acceptance) != "real":
            return (f"the acceptance here is a what-if ({acceptance or 'not measured'}), not a draft's real "
                    "acceptance; measure with a real draft (StackConfig.alpha=None)")
        if not math.isfinite(alpha):
            return "no acceptance rate was measured (alpha is NaN)"
    return None


def sim_support(validated: dict | None, policies) -> tuple[str | None, str]:
    """:func:`workbench.pd.verdict.unchecked_policy`: ``(reason, note)`` for a verdict computed in the
    serving simulator with ``policies`` (``reason`` None when each was checked against a real server
    within :data:`MAX_SIM_ERR_MEAN` on mean latencies)."""
    return unchecked_policy(validated, policies)


def check_predictions(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` itself when it is a DataFrame with every :data:`PREDICTION_COLUMNS`; else ValueError
    naming the missing columns and where such a frame comes from (TypeError for another type)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"predictions must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in PREDICTION_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"predictions lack the columns {missing}; build them with workbench.predict "
                         f"(columns {', '.join(PREDICTION_COLUMNS)})")
    return df


def _stands_in_for(row, hardware: str) -> bool:
    if hardware_matches(row["system"], hardware):
        return True
    s = row["stand_in"]
    if isinstance(s, bool):
        return s
    return isinstance(s, str) and hardware_matches(s, hardware)


def prediction_rows(df: pd.DataFrame, model: str, hardware: str, batch_size: int = 1) -> pd.DataFrame:
    """The rows of ``df`` (checked by :func:`check_predictions`) for ``model`` at ``batch_size`` on
    ``hardware`` itself or on a system that states it stands in for it, with a column ``kind``:
    ``"base"`` (16-bit), ``"int4"`` (W4A16) or ``""``; sorted by ISL, OSL."""
    df = check_predictions(df)
    keep = df.loc[[same_model(m, model) and int(b) == batch_size for m, b in zip(df["model"], df["batch_size"])]]
    keep = keep.loc[[_stands_in_for(r, hardware) for _, r in keep.iterrows()]]
    kind = ["base" if _alnum(p) in BASE_PRECISIONS else "int4" if _alnum(p) in INT4_PRECISIONS else ""
            for p in keep["precision"]]
    return keep.assign(kind=kind).sort_values(["isl", "osl"], kind="stable")


def prediction_label(row, hardware: str) -> str:
    """``"predicted (<source>, <system> standing in for <hardware>)"``, or ``"predicted (<source>,
    <system>)"`` when the system is the hardware itself; the stand-in's own description follows."""
    if hardware_matches(row["system"], hardware):
        return f"predicted ({row['source']}, {row['system']})"
    how = row["stand_in"] if isinstance(row["stand_in"], str) else ""
    how = how.split(": ", 1)[1] if ": " in how else how  # "l40s for rtx-4090: bandwidth scaled ..." -> the how
    return f"predicted ({row['source']}, {row['system']} standing in for {hardware}" + (f": {how})" if how else ")")
