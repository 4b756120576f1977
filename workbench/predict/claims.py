"""Predictions for the claims ledger: rows of :data:`workbench.claims.support.PREDICTION_COLUMNS`.

Claim 1 (Qwen2-7B on an RTX 4090, 18 -> 52 tokens/s) is about hardware AIConfigurator has no table for;
:data:`~workbench.predict.systems.STAND_INS` predicts it from the L40S (same AD102 chip, decode scaled by
bandwidth 864/1008 GB/s). The ledger labels each verdict drawn from these rows
``"predicted (<source>, <system> standing in for <hardware>: <how>)"``, the source naming the tool and the
engine (``"aiconfigurator 0.12.0 / vllm 0.24.0"``).
"""

from __future__ import annotations

import pandas as pd

from workbench.predict.tables import batch1_table

__all__ = ["claim_predictions"]


def claim_predictions(model: str = "qwen2-7b", hardware: str = "rtx-4090", engine: str = "vllm", *,
                      precisions=("bf16", "W4A16"), isl: int = 128, osl: int = 128) -> pd.DataFrame:
    """Batch-1 predictions of ``model`` on ``hardware`` (a stand-in key or an AIConfigurator system) for
    ``collect_evidence(predictions=...)``: columns :data:`~workbench.claims.support.PREDICTION_COLUMNS`
    plus ``label`` and ``engine_version``. Precisions without tables (W4A16 in AIConfigurator 0.12.0's vLLM
    tables) get no row; ``attrs["skipped"]`` says why. Raises as :func:`~workbench.predict.estimate.predict`."""
    from workbench.claims.support import PREDICTION_COLUMNS

    df = batch1_table(model, [hardware], engine, precisions=precisions, isl=isl, osl=osl)
    skipped = df.attrs.get("skipped", [])
    if df.empty:
        raise ValueError(f"no prediction for {model} on {hardware} in {engine}: {skipped}")
    out = df.rename(columns={"engine": "backend"})[[*PREDICTION_COLUMNS, "label", "engine_version"]]
    out.attrs["skipped"] = skipped
    return out
