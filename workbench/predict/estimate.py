"""AIConfigurator's estimates as tidy frames: static batches, single steps, and agg-vs-disagg recommendations.

Every row carries ``system`` (AIConfigurator's), ``engine`` and ``engine_version`` (the backend whose kernels
were measured, and the version of its tables), ``model`` (as named by the caller), ``precision`` (GEMM quant
mode), ``source`` (``"aiconfigurator 0.12.0 / vllm 0.24.0"``), ``stand_in`` (empty, or the hardware the
system answers for and the scaling: :data:`~workbench.predict.systems.STAND_INS`), ``note`` (a model-family
mapping, if any) and ``label`` (``"predicted for <system> in <engine>"``). Times are milliseconds.

Calls (AIConfigurator 0.12.0, ``aiconfigurator.cli.api``):

* :func:`predict`: ``cli_estimate(mode="static")``: one static batch of ``batch_size`` requests, prefill
  then ``osl - 1`` decode steps; ``tpot_ms`` = decode latency / (osl - 1) (its ``InferenceSession.run_static``).
* :func:`step_costs`: ``cli_estimate(mode="static_ctx")`` for a prefill step of ``batch`` prompts of
  ``seq_len`` tokens, ``cli_estimate(mode="static_gen", osl=2)`` for one decode step of ``batch`` sequences
  with ``seq_len`` cached tokens each; the frame has the columns of :func:`workbench.pd.profile.run_profile`,
  so :meth:`workbench.pd.costmodel.CostModel.fit` fits it as it fits a measured profile.
* :func:`recommend`: ``cli_default``: AIConfigurator's search over aggregated (in-flight batching) and
  disaggregated (prefill and decode workers, rate matched) deployments on ``total_gpus`` GPUs under TTFT and
  TPOT SLOs; the best of each and which one it picks.
"""

from __future__ import annotations

import math

import pandas as pd

from workbench.predict.aic import aic_version, model_path, quiet, require
from workbench.predict.systems import check_precision, latest_version, resolve_system

__all__ = ["predict", "recommend", "step_costs"]


def _label(system: str, engine: str, stand) -> str:
    return f"predicted for {stand.hardware if stand else system} in {engine}" + (
        f" ({system} standing in)" if stand else "")


def _common(model, system: str, engine: str, precision: str) -> dict:
    """Resolve names once: the AIConfigurator call arguments and the identity columns of each row."""
    api = require()
    aic_system, stand = resolve_system(system, engine)
    mode = check_precision(precision, aic_system, engine)
    path, name, note = model_path(model)
    version = latest_version(aic_system, engine)
    cols = {"system": aic_system, "engine": engine, "engine_version": version, "model": name, "precision": mode,
            "source": f"{aic_version()} / {engine} {version}", "stand_in": stand.label if stand else "",
            "note": note, "label": _label(aic_system, engine, stand)}
    return {"api": api, "system": aic_system, "stand": stand, "gemm": mode, "path": path, "cols": cols}


def _estimate(c: dict, **kw):
    """``cli_estimate`` on the resolved names; AIConfigurator's ``PerfDataNotAvailableError`` (no measured
    kernel for this model's shape, e.g. SmolLM2-135M's 64-wide heads with 3 KV heads) becomes a
    ``ValueError`` that says so and names the fix."""
    from aiconfigurator.sdk.errors import PerfDataNotAvailableError

    try:
        with quiet():
            return c["api"].cli_estimate(c["path"], c["system"], backend_name=c["cols"]["engine"],
                                         gemm_quant_mode=c["gemm"], **kw)
    except PerfDataNotAvailableError as e:
        raise ValueError(
            f"AIConfigurator has no measured kernels for {c['cols']['model']} on {c['system']} in "
            f"{c['cols']['engine']} {c['cols']['engine_version']} ({str(e).split(': tried')[0]}). Its tables cover "
            "the attention shapes of the models it supports (Llama-3-8B, Qwen2-7B, Qwen3, ...). Fix: predict a "
            "model of such a shape, or another system or engine") from e


def predict(model, system: str, engine: str = "vllm", precision: str = "bf16", *, batch_sizes=(1,),
            isl: int = 128, osl: int = 128, tp: int = 1) -> pd.DataFrame:
    """AIConfigurator's static-batch estimate, one row per batch size.

    Args:
        model: see :func:`workbench.predict.aic.model_path` (a shape name such as ``"qwen2-7b"``, an HF id
            AIConfigurator ships, a local folder, an HF config dict / object, or a loaded model).
        system: an AIConfigurator system (``"h200_sxm"``) or a stand-in key (``"rtx-4090"``).
        engine: ``"vllm"``, ``"sglang"`` or ``"trtllm"``.
        precision: ``"bf16"``, ``"fp8"``, ... (:data:`~workbench.predict.systems.PRECISION_ALIASES`).
        batch_sizes: requests in the static batch (concurrency).
        isl, osl: input and output lengths, tokens (``osl >= 2`` so that a TPOT exists).
        tp: tensor-parallel GPUs per instance.

    Returns columns ``batch_size``, ``isl``, ``osl``, ``tp``, ``ttft_ms``, ``tpot_ms``,
    ``tokens_per_s_per_user`` (= 1000 / tpot_ms), ``tokens_per_s_per_gpu`` (output tokens per s per GPU
    over the whole request: AIConfigurator's ``tokens/s/gpu``), ``memory_gb``, ``fits`` (False where
    AIConfigurator reports out of memory), and the identity columns of the module docstring. A stand-in's
    ``tpot_ms`` and ``ttft_ms`` are scaled as its :class:`~workbench.predict.systems.StandIn` says (rates
    recomputed from them).

    Raises ``ValueError`` for an unknown system or engine, a precision without tables, an unsupported
    model, ``osl < 2`` or a batch size < 1; :class:`~workbench.predict.aic.PredictUnavailableError`
    without AIConfigurator.
    """
    if osl < 2 or isl < 1:
        raise ValueError(f"isl={isl}, osl={osl}: need isl >= 1 and osl >= 2 (TPOT needs two output tokens)")
    if not batch_sizes or min(batch_sizes) < 1:
        raise ValueError(f"batch_sizes={batch_sizes!r} must be a non-empty sequence of integers >= 1")
    c = _common(model, system, engine, precision)
    ds, ps = _scales(c)
    rows = []
    for b in batch_sizes:
        r = _estimate(c, mode="static", batch_size=int(b), isl=int(isl), osl=int(osl), tp_size=int(tp))
        ttft, tpot = float(r.ttft) * ps, float(r.tpot) * ds
        e2e = ttft + (osl - 1) * tpot
        rows.append({**c["cols"], "batch_size": int(b), "isl": int(isl), "osl": int(osl), "tp": int(tp),
                     "ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_s_per_user": 1000.0 / tpot,
                     "tokens_per_s_per_gpu": 1000.0 * b * osl / e2e / tp, "memory_gb": float(r.raw.get("memory", math.nan)),
                     "fits": r.kv_cache_warning is None})
    return pd.DataFrame(rows)


def _scales(c: dict) -> tuple[float, float]:
    """``(decode_scale, prefill_scale)`` of the stand-in system in ``c`` (see the module docstring), 1 without one."""
    return (c["stand"].decode_scale, c["stand"].prefill_scale) if c["stand"] else (1.0, 1.0)


def step_costs(model, system: str, engine: str = "vllm", precision: str = "bf16", *,
               decode_batches=(1, 2, 4, 8, 16, 32, 64), context_lens=(512,), prompt_lens=(512, 2048),
               prefill_batches=(1,), tp: int = 1) -> pd.DataFrame:
    """AIConfigurator's time for single prefill and decode steps, in the schema of a measured profile.

    One row per point: ``phase`` (prefill | decode), ``batch``, ``seq_len`` (prompt length, or cached tokens
    per sequence before the decode step), ``n_tokens``, ``attn_sq`` (sum of L^2 over prefilled prompts),
    ``kv_tokens`` (cached tokens summed over the batch), ``ms`` (predicted step time; a stand-in's scaled),
    plus the identity columns of the module docstring. Prefill: ``cli_estimate(mode="static_ctx",
    batch_size=batch, isl=seq_len)`` -> its TTFT. Decode: ``cli_estimate(mode="static_gen", batch_size=batch,
    isl=seq_len, osl=2)`` -> its TPOT (one step). Fit a cost model with
    ``workbench.pd.costmodel.CostModel.fit(step_costs(...))``.

    Raises as :func:`predict` does, and ``ValueError`` for an empty or non-positive grid.
    """
    for nm, v in (("decode_batches", decode_batches), ("context_lens", context_lens),
                  ("prompt_lens", prompt_lens), ("prefill_batches", prefill_batches)):
        if not v or min(v) < 1:
            raise ValueError(f"{nm}={v!r} must be a non-empty sequence of integers >= 1")
    c = _common(model, system, engine, precision)
    ds, ps = _scales(c)
    rows = []
    for b in prefill_batches:
        for L in prompt_lens:
            r = _estimate(c, mode="static_ctx", batch_size=int(b), isl=int(L), osl=1, tp_size=int(tp))
            rows.append({"phase": "prefill", "batch": int(b), "seq_len": int(L), "n_tokens": int(b * L),
                         "attn_sq": int(b * L * L), "kv_tokens": 0, "ms": float(r.ttft) * ps})
    for b in decode_batches:
        for L in context_lens:
            r = _estimate(c, mode="static_gen", batch_size=int(b), isl=int(L), osl=2, tp_size=int(tp))
            rows.append({"phase": "decode", "batch": int(b), "seq_len": int(L), "n_tokens": int(b), "attn_sq": 0,
                         "kv_tokens": int(b * L), "ms": float(r.tpot) * ds})
    df = pd.DataFrame(rows)
    for k, v in c["cols"].items():
        df[k] = v
    df["tp"] = int(tp)
    return df


def recommend(model, system: str, engine: str = "vllm", *, total_gpus: int = 8, isl: int = 512, osl: int = 128,
              ttft_ms: float = 400.0, tpot_ms: float = 40.0) -> pd.DataFrame:
    """Aggregated or disaggregated serving, and with how many prefill:decode workers: AIConfigurator's search.

    ``cli_default`` enumerates tensor-parallel sizes, batch sizes and (for disaggregation) prefill and decode
    worker counts on ``total_gpus`` GPUs for requests of ``isl`` input and ``osl`` output tokens, keeps the
    configurations whose predicted TTFT and TPOT meet the SLOs, and picks the mode with the higher output
    tokens/s per GPU. 16-bit weights (the model config's precision; AIConfigurator's search takes it from the
    checkpoint).

    Returns one row per mode (``agg``, ``disagg``): ``mode``, ``chosen`` (bool), ``tokens_per_s_per_gpu``
    (best under the SLOs), ``ttft_ms``, ``tpot_ms``, ``goodput_rps_per_gpu`` (requests/s per GPU at that
    point, all of which meet the SLOs in AIConfigurator's steady state), ``goodput_rps`` (the same times
    ``n_gpus``), ``n_gpus`` (GPUs used: agg, ``replicas x tp``, replicas as many as fit in ``total_gpus``;
    disagg, its prefill and decode workers), ``concurrency`` (requests in flight per agg instance, or in the
    disagg deployment), ``prefill_workers``, ``decode_workers`` (NaN for agg), ``prefill_tp``, ``decode_tp``
    (agg: both the instance's tp), ``replicas`` (agg instances), ``batch_size`` (agg: per instance; disagg:
    per decode worker), ``pd_ratio`` (``"P:D"`` string, "" for agg), the SLOs and the identity columns. A mode with no
    configuration meeting the SLOs has NaN figures and ``chosen`` False.

    Raises ``ValueError`` for a stand-in system (its memory differs from the hardware's, so batch sizes and
    worker counts do not carry over: not predicted), and as :func:`predict` does.
    """
    if total_gpus < 1 or isl < 1 or osl < 2 or not (ttft_ms > 0 and tpot_ms > 0):
        raise ValueError(f"total_gpus={total_gpus}, isl={isl}, osl={osl}, ttft_ms={ttft_ms}, tpot_ms={tpot_ms}: "
                         "need total_gpus >= 1, isl >= 1, osl >= 2 and positive SLOs")
    c = _common(model, system, engine, "bf16")
    if c["stand"]:
        raise ValueError(f"recommend() is not made for a stand-in ({c['stand'].label}): its memory differs from "
                         f"the {c['stand'].hardware}'s, so batch sizes and worker counts do not carry over. Fix: "
                         "use predict() or step_costs() for the stand-in, or an AIConfigurator system")
    with quiet():
        res = c["api"].cli_default(c["path"], int(total_gpus), c["system"], backend=engine, isl=int(isl),
                                   osl=int(osl), ttft=float(ttft_ms), tpot=float(tpot_ms), top_n=1)
    rows = []
    for mode in ("agg", "disagg"):
        df = res.best_configs.get(mode)
        row = {**c["cols"], "mode": mode, "chosen": res.chosen_exp == mode and df is not None and len(df) > 0,
               "total_gpus": int(total_gpus), "isl": int(isl), "osl": int(osl), "slo_ttft_ms": float(ttft_ms),
               "slo_tpot_ms": float(tpot_ms)}
        if df is None or len(df) == 0:
            rows.append(row | {"tokens_per_s_per_gpu": math.nan, "ttft_ms": math.nan, "tpot_ms": math.nan,
                               "goodput_rps_per_gpu": math.nan, "goodput_rps": math.nan, "pd_ratio": ""})
            continue
        b = df.iloc[0]
        per_gpu = float(b["seq/s/gpu"])
        row |= {"tokens_per_s_per_gpu": float(b["tokens/s/gpu"]), "ttft_ms": float(b["ttft"]),
                "tpot_ms": float(b["tpot"]), "goodput_rps_per_gpu": per_gpu, "concurrency": float(b["concurrency"])}
        if mode == "agg":
            inst = int(b["num_total_gpus"])  # GPUs of one instance (tp x pp)
            replicas = int(total_gpus) // inst
            row |= {"n_gpus": replicas * inst, "goodput_rps": per_gpu * replicas * inst, "prefill_workers": math.nan,
                    "decode_workers": math.nan, "prefill_tp": int(b["tp"]), "decode_tp": int(b["tp"]),
                    "replicas": replicas, "batch_size": int(b["bs"]), "pd_ratio": ""}
        else:
            p, d = int(b["(p)workers"]), int(b["(d)workers"])
            row |= {"n_gpus": int(b["num_total_gpus"]), "goodput_rps": per_gpu * int(b["num_total_gpus"]),
                    "prefill_workers": p, "decode_workers": d, "prefill_tp": int(b["(p)tp"]),
                    "decode_tp": int(b["(d)tp"]), "replicas": math.nan, "batch_size": int(b["(d)bs"]),
                    "pd_ratio": f"{p}:{d}"}
        rows.append(row)
    return pd.DataFrame(rows)
