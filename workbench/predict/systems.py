"""Systems AIConfigurator has tables for, the engines (backends) and precisions of each, and stand-ins for
hardware it lacks.

Names: a *system* is AIConfigurator's (``h100_sxm``, ``h200_sxm``, ``l40s``, ...); an *engine* is a serving
framework whose kernels it measured (``vllm``, ``sglang``, ``trtllm``; AIConfigurator calls it the backend);
a *precision* is its GEMM quant mode (``bfloat16``, ``fp8``, ``fp8_block``, ``fp8_static``, ``int8_wo``, ...),
with the workbench's names accepted too (``bf16`` -> ``bfloat16``, ``W8A16`` -> ``int8_wo``, ``W4A16`` ->
``int4_wo``).

A *stand-in* (:data:`STAND_INS`) answers for hardware with no table: the RTX 4090 is predicted from the
L40S, the same AD102 chip (Ada, sm_89) with 864 GB/s GDDR6 against the 4090's 1008 GB/s GDDR6X. Decode steps
read the weights and KV cache once per step and are bandwidth bound at small batch, so decode step times
(TPOT) are multiplied by 864 / 1008 = 0.857; prefill (TTFT) is left as the L40S's, which is optimistic for
the 4090 (dense bf16 tensor rate with FP32 accumulate 165.2 TFLOPS against the L40S's 362: Ada whitepaper
v2.1 Appendix A, L40S datasheet). Memory differs too (24 GB against 48 GB), so serving recommendations
(batch sizes, worker counts) are not made for a stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import pandas as pd

from workbench.predict.aic import quiet, require
from workbench.registry import UnknownNameError, unknown_name_message

__all__ = ["ENGINES", "PRECISION_ALIASES", "STAND_INS", "StandIn", "check_precision", "latest_version", "resolve_system",
           "systems"]

ENGINES = ("vllm", "sglang", "trtllm")  # AIConfigurator's backends


@dataclass(frozen=True)
class StandIn:
    """Hardware predicted from another system's tables, with the scaling stated."""

    hardware: str  # the workbench's hardware name (workbench.pd.hardware.PRESETS key)
    system: str  # AIConfigurator system whose tables stand in
    decode_scale: float  # multiplies predicted decode step times (TPOT)
    prefill_scale: float  # multiplies predicted prefill times (TTFT); 1 = not scaled
    how: str  # one sentence, carried into every row's ``stand_in`` column

    @property
    def label(self) -> str:
        """``"l40s for rtx-4090: <how>"`` (the form :func:`workbench.claims.support.prediction_label` reads)."""
        return f"{self.system} for {self.hardware}: {self.how}"


STAND_INS: dict[str, StandIn] = {
    "rtx-4090": StandIn(
        "rtx-4090", "l40s", decode_scale=864.0 / 1008.0, prefill_scale=1.0,
        how="same AD102 chip; decode (TPOT) scaled by bandwidth 864/1008 GB/s; TTFT the L40S's, unscaled "
            "(optimistic: the 4090's dense bf16 rate is 165 against 362 TFLOPS)"),
}

# workbench / vLLM / llm-compressor names -> AIConfigurator GEMM quant modes
PRECISION_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "w16a16": "bfloat16", "fp8": "fp8",
                     "w8a8-fp8": "fp8", "fp8_block": "fp8_block", "fp8_static": "fp8_static",
                     "w8a16": "int8_wo", "int8_wo": "int8_wo", "w4a16": "int4_wo", "int4_wo": "int4_wo",
                     "nvfp4": "nvfp4", "w8a8": "sq", "sq": "sq"}


@lru_cache(maxsize=1)
def _supported() -> dict:
    """AIConfigurator's ``get_supported_databases()`` (system -> engine -> versions), read once (about 1 s)."""
    require()
    from aiconfigurator.sdk.perf_database import get_supported_databases

    with quiet():
        return {s: {e: list(v) for e, v in by.items()} for s, by in get_supported_databases().items()}


@cache
def latest_version(system: str, engine: str) -> str | None:
    """The engine version whose tables AIConfigurator uses by default on ``system`` (its
    ``get_latest_database_version``), cached."""
    require()
    from aiconfigurator.sdk.perf_database import get_latest_database_version

    with quiet():
        return get_latest_database_version(system=system, backend=engine)


def _spec(system: str) -> dict:
    from aiconfigurator.sdk.perf_database import load_system_spec

    return load_system_spec(system)


def systems() -> pd.DataFrame:
    """One row per (system, engine) with tables in the installed AIConfigurator: ``system``, ``engine``,
    ``versions`` (engine versions with tables, comma-separated; :func:`latest_version` gives the default),
    ``mem_bw_gbs`` and ``mem_gb`` (from its system file), ``stand_in_for`` (hardware this system answers
    for, else ""). A dropdown's options: ``sorted(systems()["system"].unique())`` plus :data:`STAND_INS`
    keys. Raises :class:`~workbench.predict.aic.PredictUnavailableError` without AIConfigurator."""
    require()  # before the cache: a missing package is reported even after a successful call
    rows = []
    with quiet():
        for system, by_engine in sorted(_supported().items()):
            gpu = _spec(system).get("gpu", {})
            for engine, versions in sorted(by_engine.items()):
                if engine not in ENGINES or not versions:
                    continue
                rows.append({"system": system, "engine": engine, "versions": ", ".join(versions),
                             "mem_bw_gbs": float(gpu.get("mem_bw", float("nan"))) / 1e9,
                             "mem_gb": float(gpu.get("mem_capacity", float("nan"))) / 2**30,
                             "stand_in_for": ", ".join(h for h, s in STAND_INS.items() if s.system == system)})
    return pd.DataFrame(rows)


def resolve_system(name: str, engine: str) -> tuple[str, StandIn | None]:
    """``(aic_system, stand_in)`` for ``name`` (an AIConfigurator system or a :data:`STAND_INS` key) and
    ``engine``; ``stand_in`` is None when the system is the hardware itself. Raises
    :class:`~workbench.registry.UnknownNameError` (a ``ValueError``) naming the systems and engines that
    have tables, with "did you mean"."""
    if engine not in ENGINES:
        raise UnknownNameError(unknown_name_message("engine", engine, ENGINES))
    require()
    stand = STAND_INS.get(str(name).lower())
    system = stand.system if stand else str(name).lower()
    have = sorted(s for s, by in _supported().items() if by.get(engine))
    if system not in have:
        fix = f"(systems with {engine} tables; stand-ins: {sorted(STAND_INS)}; workbench.predict.systems() lists all)"
        raise UnknownNameError(unknown_name_message(f"system for engine {engine!r}", name, have + sorted(STAND_INS),
                                                    fix))
    return system, stand


def check_precision(precision: str, system: str, engine: str) -> str:
    """AIConfigurator's GEMM quant mode for ``precision`` if ``system`` has ``engine`` GEMM tables for it;
    else ``ValueError`` naming the precisions that system and engine do have."""
    from aiconfigurator.sdk.perf_database import get_database_view

    mode = PRECISION_ALIASES.get(str(precision).lower(), str(precision).lower())
    with quiet():
        db = get_database_view(system, engine, latest_version(system, engine))
        have = sorted(str(m) for m in db.supported_quant_mode.get("gemm", []))
    if mode not in have:
        raise ValueError(f"precision {precision!r} ({mode}) has no {engine} GEMM table on {system}; it has "
                         f"{have}. Fix: pick one of these (workbench names map to them: "
                         f"{ {k: v for k, v in PRECISION_ALIASES.items() if v in have and k != v} })")
    return mode
