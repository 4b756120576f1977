"""``run_quant_sweep``: one row per ``QuantConfig`` (memory, fidelity, MMLU, speed), resumable; the measuring
half of the quantization study (:mod:`workbench.studies.quant`)."""

from __future__ import annotations

import inspect
import time
import warnings

import pandas as pd
import torch

from workbench.eval.fidelity import eval_windows, run_fidelity
from workbench.eval.mmlu import run_mmlu, summarize_mmlu
from workbench.models import require_trained, weights_label
from workbench.quant.config import QuantConfig
from workbench.quant.floatconfig import FloatConfig, is_float_row
from workbench.quant.footprint import footprint
from workbench.quant.quantize import quantize
from workbench.studies.speed import SpeedConfig, measure_speed

__all__ = ["FORMULATIONS", "FP_LABEL", "MMLU_CHANCE", "run_quant_point", "run_quant_speed", "run_quant_sweep",
           "speedup_vs_fp"]

FP_LABEL = "FP"
FORMULATIONS = ("mmlu", "mmlu_continuation")  # lm-eval task names: letters A-D, or the choice texts (cloze)
MMLU_CHANCE = 0.25  # four choices; a uniform guess (and acc_norm of a scorer that knows nothing)


def _mmlu(model, tok, questions, dev, n_shot: int, batch_size: int, formulation: str) -> dict:
    """Score MMLU with ``formulation`` and summarise it: accuracy (``acc_norm`` for the continuation
    formulation, lm-eval's length-normalised metric; ``acc`` for letters) with its 95% CI (Wilson,
    micro; normal, macro), chance level, and whether the CI lies above chance."""
    kw = {}
    used = formulation
    if "formulation" in inspect.signature(run_mmlu).parameters:
        kw["formulation"] = formulation
    elif formulation != "mmlu":
        warnings.warn(f"this workbench.eval.mmlu.run_mmlu has no formulation=; MMLU is scored as 'mmlu' "
                      f"(letters), not {formulation!r}", stacklevel=3)
        used = "mmlu"
    per_q = run_mmlu(model, tok, questions, dev, n_shot=n_shot, batch_size=batch_size, progress=False, **kw)
    metric = "acc_norm" if used == "mmlu_continuation" and "correct_norm" in per_q else "acc"
    out = {"mmlu_formulation": used, "mmlu_metric": metric, "n_shot": n_shot, "mmlu_chance": MMLU_CHANCE}
    if metric == "acc_norm":
        out["mmlu_acc_unnormed"] = float(per_q["correct"].mean())
        per_q = per_q.assign(correct=per_q["correct_norm"])
    s = summarize_mmlu(per_q.assign(n_shot=n_shot)).set_index("subject")
    out.update({"mmlu_n": int(s.loc["micro", "n"]), "mmlu_acc": float(s.loc["micro", "acc"]),
                "mmlu_ci_lo": float(s.loc["micro", "ci_lo"]), "mmlu_ci_hi": float(s.loc["micro", "ci_hi"]),
                "mmlu_macro": float(s.loc["macro", "acc"]), "mmlu_macro_ci_lo": float(s.loc["macro", "ci_lo"]),
                "mmlu_macro_ci_hi": float(s.loc["macro", "ci_hi"])})
    out["mmlu_vs_chance"] = ("above chance" if out["mmlu_ci_lo"] > MMLU_CHANCE else
                             "below chance" if out["mmlu_ci_hi"] < MMLU_CHANCE else "CI includes chance")
    return out


def _fp_row(model) -> dict:
    """The config fields of the full-precision point (``w_bits`` 16 or 32 from the model's dtype)."""
    return {"method": "fp", "w_bits": 16 if next(model.parameters()).dtype != torch.float32 else 32,
            "group_size": 0, "granularity": "none", "symmetric": False, "scheme": FP_LABEL, "label": FP_LABEL}


def run_quant_point(model, tok, config: QuantConfig | None, windows: torch.Tensor, *, calib=None,
                    fp_cache: dict | None = None, batch_size: int = 4, mmlu_questions=None, mmlu_dev=None,
                    n_shot: int = 0, formulation: str = "mmlu_continuation", speed: SpeedConfig | None = None,
                    report_out: list | None = None, engine_config=None) -> pd.DataFrame:
    """Quantize ``model`` with ``config`` (``None``: the full-precision model itself) and measure it.

    Returns one row: the config fields (``method, w_bits, group_size, granularity, symmetric, scheme,
    label``...), ``weight_bytes`` and the other :func:`footprint` fields, the fidelity metrics of
    :func:`workbench.eval.fidelity.run_fidelity` on ``windows`` ``[n, seq_len]`` (``ppl`` = ``ppl_q``),
    ``quantize_s``; when ``mmlu_questions`` is given, MMLU (``mmlu_acc`` with 95% CIs, micro and macro,
    ``mmlu_formulation``, ``mmlu_metric``, ``mmlu_chance``, ``mmlu_vs_chance``); when ``speed`` is
    given, the columns of :func:`workbench.studies.speed.measure_speed` (decode ms per token at each
    batch, prefill ms, peak memory, the device and the runtime matmuls).
    ``report_out``: a list that receives the per-layer report (tagged with ``label``). ``engine_config``: the
    ``EngineConfig`` the speed is measured with (``None``: the defaults).
    """
    require_trained(model, "the quantization sweep's fidelity and MMLU columns")
    t0 = time.perf_counter()
    if config is None:
        qmodel, report = model, pd.DataFrame()
        row = _fp_row(model)
    else:
        qmodel, report = _quantize_any(model, config, calib, tok)
        row = config.to_row()
    row["quantize_s"] = time.perf_counter() - t0
    row.update(footprint(qmodel))
    fid = run_fidelity(model, qmodel, tok, "", windows=windows, batch_size=batch_size,
                       fp_cache=fp_cache).iloc[0].to_dict()
    row.update(fid)
    row["ppl"] = row["ppl_q"]
    if mmlu_questions is not None and len(mmlu_questions):
        row.update(_mmlu(qmodel, tok, mmlu_questions, mmlu_dev, n_shot, 8, formulation))
    if speed is not None and isinstance(config, FloatConfig):
        row["runtime"] = NO_FLOAT_KERNEL
    elif speed is not None:
        row.update(measure_speed(qmodel, speed, engine_config))
    if report_out is not None and len(report):
        report_out.append(report.assign(label=row["label"]))
    return pd.DataFrame([row])


# -- the float formats (workbench.quant.floatconfig): FP8_DYNAMIC, FP8, FP8_BLOCK, W8A8, NVFP4(A16), MXFP4(A16) ------
NO_FLOAT_KERNEL = ("speed not measured: the workbench engine runs no FP8 / FP4 / INT8-activation kernel in this sweep "
                   "(FP8 on torch._scaled_mm needs CUDA compute capability >= 8.9: benchmarks/fp8_speed.py)")


def _quantize_any(model, config, calib, tok):
    """``quantize`` for a :class:`QuantConfig`, ``quantize_float`` for a :class:`FloatConfig`."""
    if isinstance(config, FloatConfig):
        from workbench.quant.floatquant import quantize_float

        return quantize_float(model, config, calib, tok=tok)
    return quantize(model, config, calib, tok=tok)


def _config_of(cfg: dict):
    """The config a stored sweep key describes: :class:`FloatConfig` for a float-format key, else :class:`QuantConfig`."""
    return FloatConfig(**cfg) if is_float_row(cfg) else QuantConfig(**cfg)


def _mmlu_data(n_questions: int, subjects, seed: int = 0):
    from workbench.data import load_mmlu, sample_mmlu

    test = load_mmlu(split="test")
    if subjects:
        unknown = sorted(set(subjects) - set(test["subject"]))
        if unknown:
            raise ValueError(f"unknown MMLU subjects {unknown}; see load_mmlu()['subject'].unique()")
        test = test[test["subject"].isin(subjects)]
    return sample_mmlu(test, n_questions, seed=seed), load_mmlu(split="dev")


def run_quant_sweep(model, tok, configs: list[QuantConfig | None], *, text: str | None = None,
                    n_tokens: int = 4096, seq_len: int = 256, batch_size: int = 4, calib=None,
                    n_questions: int | None = None, n_shot: int | None = None,
                    formulation: str = "mmlu_continuation", subjects: list[str] | None = None,
                    speed: bool | SpeedConfig = True, name: str | None = None,
                    root=None, include_fp: bool = True, progress: bool = True, engine=None,
                    mmlu_seed: int = 0) -> pd.DataFrame:
    """Measure each config (and the FP model) and return one row per point.

    Args:
        model, tok: the full-precision causal LM and its tokenizer (never modified); every measurement
            runs on the model's device and dtype.
        configs: :class:`QuantConfig` list; ``None`` entries mean the FP model.
        text: held-out evaluation text (default WikiText-2 test); the first ``n_tokens`` tokens in
            non-overlapping ``seq_len`` windows. AWQ/GPTQ calibrate on WikiText-2 valid (or ``calib``).
        n_questions: MMLU questions per subject (stratified sample); ``None``:
            10 on CUDA, 1 on the CPU; 0: no MMLU.
        n_shot: MMLU exemplars; ``None``: 0 for ``mmlu_continuation`` (lm-eval's default for that
            task), 5 for ``mmlu``.
        formulation: ``"mmlu_continuation"`` (lm-eval's cloze formulation, scored by ``acc_norm``: the
            built-in 135M model is above chance there) or ``"mmlu"`` (letters A-D, ``acc``).
        subjects: restrict MMLU to these subjects (smoke runs); default all 57.
        speed: time every point on the engine (:func:`workbench.studies.speed.measure_speed`): ``True``
            (:meth:`SpeedConfig.for_device`), a :class:`SpeedConfig`, or ``False`` to skip.
        name: results-store name; when given, ``workbench.results.sweep`` appends each finished
            point to it and a re-run skips the points already stored (resume after interruption).
        engine: the backend (:class:`workbench.studies.engines.WorkbenchEngine`; ``None``: the defaults): its
            ``EngineConfig`` times the points and its provenance is part of each point's key.

    Returns:
        DataFrame, one row per point (see :func:`run_quant_point`); when ``name`` is given, the stored
        rows of these points for this model and evaluation data (earlier runs' rows included; rows of
        other weights or data stay in the store, see :func:`workbench.results.sweep`).

    Raises:
        ValueError: an unknown formulation or MMLU subject, negative ``n_questions``.
    """
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation={formulation!r} is unknown; use one of {FORMULATIONS}")
    device = next(model.parameters()).device
    n_questions = (10 if device.type == "cuda" else 1) if n_questions is None else n_questions
    if not isinstance(n_questions, int) or n_questions < 0:
        raise ValueError(f"n_questions={n_questions!r} must be an integer >= 0 (0: no MMLU) or None (default size)")
    n_shot = (0 if formulation == "mmlu_continuation" else 5) if n_shot is None else n_shot
    speed_cfg = (SpeedConfig.for_device(device) if speed is True else speed) or None
    if text is None:
        from workbench.data import load_text

        text = load_text("wikitext-2", split="test")
    windows = eval_windows(tok, text, n_tokens, seq_len)
    questions, dev = _mmlu_data(n_questions, subjects, mmlu_seed) if n_questions else (None, None)
    backend = _backend(engine)
    points = ([None] if include_fp and None not in configs else []) + list(configs)
    fp_cache: dict = {}

    def fn_key(k: dict) -> pd.DataFrame:
        cfg = {kk: v for kk, v in k.items() if kk != "_eval"}
        qc = None if cfg.get("method") == "fp" else _config_of(cfg)
        out = run_quant_point(model, tok, qc, windows, calib=calib, fp_cache=fp_cache, batch_size=batch_size,
                              mmlu_questions=questions, mmlu_dev=dev, n_shot=n_shot, formulation=formulation,
                              speed=speed_cfg, engine_config=backend.engine_config())
        return out.assign(n_questions_per_subject=n_questions, eval_tokens=int(windows.numel()))

    ev = [int(windows.numel()), seq_len, n_questions, n_shot, sorted(subjects or []), formulation,
          None if speed_cfg is None else list(_speed_key(speed_cfg))]
    keys = [{**({"method": "fp"} if c is None else _asdict(c)), "_eval": ev} for c in points]
    if name is None:
        return pd.concat([fn_key(k) for k in keys], ignore_index=True)
    from workbench.results import collect_provenance, data_digest, sweep

    data = {"eval_windows": data_digest(windows), "calib": None if calib is None else data_digest(calib),
            "mmlu_test": None if questions is None else data_digest(questions),
            "mmlu_dev": None if dev is None else data_digest(dev)}
    prov = collect_provenance(model=model, config={"configs": keys}, n_tokens=n_tokens, seq_len=seq_len, data=data,
                              engine=backend.provenance())
    return sweep(name, keys, fn_key, provenance=prov, root=root, progress=progress)


def _speed_key(c: SpeedConfig) -> tuple:
    """What a stored speed point depends on besides the model, the config and the engine (whose kernel settings
    are part of the point key through ``engine_key``): the timing settings."""
    return (list(c.decode_batches), c.prefill_tokens, c.context, c.repeats, c.warmup)


def _backend(engine):
    from workbench.studies.engines import WorkbenchEngine, resolve_engine

    backend = WorkbenchEngine() if engine is None else resolve_engine(engine)
    if not backend.in_process:
        raise ValueError(f"run_quant_sweep runs on the workbench engine; engine {backend.name!r} is measured by "
                         "workbench.studies.quant.run")
    return backend


def _asdict(c: QuantConfig) -> dict:
    from dataclasses import asdict

    d = asdict(c)
    d["skip"] = list(d["skip"])
    return d


def run_quant_speed(model, tok, configs: list[QuantConfig | None], *, speed: bool | SpeedConfig = True, calib=None,
                    include_fp: bool = True, name: str | None = None, root=None, progress: bool = True,
                    engine=None) -> pd.DataFrame:
    """Speed and memory only of each quantization point: quantize, convert for the engine, time
    (:func:`workbench.studies.speed.measure_speed`); no fidelity, no MMLU. Unlike :func:`run_quant_sweep` it accepts
    a model with random weights (``load_model("random:qwen2-7b")``): where a small model's decode step is bound by
    per-kernel latency (the built-in 135M model on an H200: each layer's matmuls read 0.3-3.5 MB), a published 7B
    shape shows what the quantized runtimes cost when the weights' bytes dominate. AWQ and GPTQ calibrate on the
    model's own activations (``calib`` or WikiText-2 valid through ``tok``); with random weights their scales and
    rounding mean nothing, their runtime format (the kernels that run, AWQ's folded scales) is the real one.

    Args: ``model``, ``tok`` as :func:`run_quant_sweep` (any weights); ``configs`` :class:`QuantConfig` list
    (``None``: the FP model); ``speed`` ``True`` (:meth:`SpeedConfig.for_device`) or a :class:`SpeedConfig`;
    ``name``: results-store name (each finished point is stored; a re-run skips it).

    Returns: one row per point: the config fields, ``quantize_s``, the :func:`footprint` fields, the
    :func:`measure_speed` columns (``decode_ms_b{B}`` ms per token, ``prefill_ms_{T}`` ms, ``peak_mem_bytes``,
    ``speed_device``, ``runtime``) and ``weights`` ("trained" or "random weights: timing only").

    Raises: ``ValueError`` for ``speed=False`` (nothing to measure) or what :func:`measure_speed` raises.
    """
    if speed is False or speed is None:
        raise ValueError("run_quant_speed measures speed only: pass speed=True or a SpeedConfig "
                         "(run_quant_sweep(..., speed=False) gives fidelity without speed)")
    device = next(model.parameters()).device
    speed_cfg = SpeedConfig.for_device(device) if speed is True else speed
    label = weights_label(model)
    backend = _backend(engine)
    points = ([None] if include_fp and None not in configs else []) + list(configs)

    def fn_key(k: dict) -> pd.DataFrame:
        cfg = {kk: v for kk, v in k.items() if kk != "_eval"}
        t0 = time.perf_counter()
        if cfg.get("method") == "fp":
            qmodel, row = model, _fp_row(model)
        else:
            qc = _config_of(cfg)
            if isinstance(qc, FloatConfig):
                raise ValueError(f"{qc.scheme}: the workbench engine has no float-format runtime here; time FP8 with "
                                 "benchmarks/fp8_speed.py (workbench.engine.fp8)")
            qmodel = quantize(model, qc, calib, tok=tok)[0]
            row = qc.to_row()
        row["quantize_s"] = time.perf_counter() - t0
        row.update(footprint(qmodel))
        row.update(measure_speed(qmodel, speed_cfg, backend.engine_config()))
        row["weights"] = label
        del qmodel
        return pd.DataFrame([row])

    ev = ["speed only", list(_speed_key(speed_cfg))]
    keys = [{**({"method": "fp"} if c is None else _asdict(c)), "_eval": ev} for c in points]
    if name is None:
        return speedup_vs_fp(pd.concat([fn_key(k) for k in keys], ignore_index=True))
    from workbench.results import collect_provenance, data_digest, sweep

    prov = collect_provenance(model=model, config={"configs": keys}, speed_only=True,
                              data={"calib": None if calib is None else data_digest(calib)},
                              engine=backend.provenance())
    return speedup_vs_fp(sweep(name, keys, fn_key, provenance=prov, root=root, progress=progress))


def speedup_vs_fp(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``speedup_b{B}`` = FP row's ``decode_ms_b{B}`` / this row's, for every ``decode_ms_b{B}`` column
    (NaN without an FP row; > 1: faster than full precision at that batch)."""
    df = df.copy()
    fp = df[df["method"] == "fp"] if "method" in df else df.iloc[:0]
    for c in [c for c in df.columns if c.startswith("decode_ms_b")]:
        df[f"speedup_b{c[len('decode_ms_b'):]}"] = (float(fp[c].iloc[0]) / df[c]) if len(fp) else float("nan")
    return df
