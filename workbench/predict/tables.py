"""The frames the notebooks show beside their measurements: "predicted for <system> in <engine>".

* :func:`batch1_table` (notebook 04): batch-1 decode tokens/s per technique (precision) and system.
* :func:`serving_table` (notebook 03): TTFT, TPOT and goodput of AIConfigurator's best aggregated and
  disaggregated deployments per system under the notebook's SLOs, with its pick and the P:D worker counts.
* :func:`steps_table`: prefill and decode step times per system (:func:`~workbench.predict.estimate.step_costs`).

Each takes the user's model (anything :func:`workbench.predict.aic.model_path` accepts, e.g. the loaded
model or its HF config), a list of systems (:func:`~workbench.predict.systems.systems` for a dropdown; stand-ins
such as ``"rtx-4090"`` too) and an engine. A system or precision without tables is not an error here: it gets
no row, and the frame's ``attrs["skipped"]`` lists ``(system, precision, reason)``.
"""

from __future__ import annotations

import pandas as pd

from workbench.pd.metrics import SLO
from workbench.predict.estimate import predict, recommend, step_costs
from workbench.registry import UnknownNameError

__all__ = ["TECHNIQUES", "batch1_table", "serving_table", "steps_table"]

# precision -> the technique it stands for in notebook 04's terms
TECHNIQUES = {"bfloat16": "16-bit baseline", "fp8": "FP8 weights and activations (W8A8)",
              "fp8_block": "FP8, block scales", "int8_wo": "INT8 weight-only (W8A16)",
              "int4_wo": "INT4 weight-only (W4A16)"}


def _collect(fn, systems, precisions):
    frames, skipped = [], []
    for s in systems:
        for p in precisions:
            try:
                frames.append(fn(s, p))
            except (UnknownNameError, ValueError) as e:  # a precision or system without tables: say why
                skipped.append((s, p, str(e)))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    df.attrs["skipped"] = skipped
    return df


def batch1_table(model, systems, engine: str = "vllm", *, precisions=("bf16", "fp8", "W8A16", "W4A16"),
                 isl: int = 128, osl: int = 128) -> pd.DataFrame:
    """Predicted batch-1 decode rate per system and precision: :func:`~workbench.predict.estimate.predict`
    rows at batch 1 with ``technique`` (:data:`TECHNIQUES`) and ``tokens_per_s`` (= 1000 / ``tpot_ms``, the
    rate notebook 04 measures). Rows for precisions without tables are skipped (``attrs["skipped"]``)."""
    df = _collect(lambda s, p: predict(model, s, engine, p, batch_sizes=(1,), isl=isl, osl=osl), systems,
                  precisions)
    if len(df):
        df["technique"] = [TECHNIQUES.get(p, p) for p in df["precision"]]
        df["tokens_per_s"] = 1000.0 / df["tpot_ms"]
    return df


def serving_table(model, systems, engine: str = "vllm", *, slo: SLO | None = None, isl: int = 512,
                  osl: int = 128, total_gpus: int = 2) -> pd.DataFrame:
    """:func:`~workbench.predict.estimate.recommend` per system (both modes, ``chosen`` marks the pick)
    under ``slo`` (default ``SLO()``: TTFT 400 ms, TPOT 40 ms; both must be set, AIConfigurator's search
    needs them), for fixed ``isl`` / ``osl`` (AIConfigurator models fixed lengths: use the medians of the
    notebook's workload) on ``total_gpus`` GPUs. Stand-ins are skipped (see ``recommend``)."""
    slo = slo or SLO()
    if slo.ttft_ms is None or slo.tpot_ms is None:
        raise ValueError(f"serving_table needs both a TTFT and a TPOT SLO, got {slo.label}; set SLO(ttft_ms=..., "
                         "tpot_ms=...)")
    return _collect(lambda s, _p: recommend(model, s, engine, total_gpus=total_gpus, isl=isl, osl=osl,
                                            ttft_ms=slo.ttft_ms, tpot_ms=slo.tpot_ms), systems, ("bf16",))


def steps_table(model, systems, engine: str = "vllm", *, precision: str = "bf16", **grid) -> pd.DataFrame:
    """:func:`~workbench.predict.estimate.step_costs` per system (``grid``: its keyword arguments)."""
    return _collect(lambda s, p: step_costs(model, s, engine, p, **grid), systems, (precision,))
