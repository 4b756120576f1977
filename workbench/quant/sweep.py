"""``run_quant_sweep``: one row per ``QuantConfig`` (memory, fidelity, optional MMLU), resumable."""

from __future__ import annotations

import time

import pandas as pd
import torch

from workbench.models import require_trained

from .config import QuantConfig
from .footprint import footprint
from .quantize import quantize

__all__ = ["FP_LABEL", "run_quant_point", "run_quant_sweep"]

FP_LABEL = "FP"


def _mmlu(model, tok, questions, dev, n_shot, batch_size) -> dict:
    from workbench.eval.mmlu import run_mmlu, summarize_mmlu

    per_q = run_mmlu(model, tok, questions, dev, n_shot=n_shot, batch_size=batch_size, progress=False)
    s = summarize_mmlu(per_q.assign(n_shot=n_shot)).set_index("subject")
    return {"mmlu_n": int(s.loc["micro", "n"]), "mmlu_acc": float(s.loc["micro", "acc"]),
            "mmlu_ci_lo": float(s.loc["micro", "ci_lo"]), "mmlu_ci_hi": float(s.loc["micro", "ci_hi"]),
            "mmlu_macro": float(s.loc["macro", "acc"]), "mmlu_macro_ci_lo": float(s.loc["macro", "ci_lo"]),
            "mmlu_macro_ci_hi": float(s.loc["macro", "ci_hi"]), "n_shot": n_shot}


def run_quant_point(model, tok, config: QuantConfig | None, windows: torch.Tensor, *, calib=None,
                    fp_cache: dict | None = None, batch_size: int = 4, mmlu_questions=None, mmlu_dev=None,
                    n_shot: int = 5, report_out: list | None = None) -> pd.DataFrame:
    """Quantize ``model`` with ``config`` (``None``: the full-precision model itself) and measure it.

    Returns one row: the config fields (``method, w_bits, group_size, granularity, symmetric, scheme,
    label``...), ``weight_bytes`` and the other :func:`footprint` fields, the fidelity metrics of
    :func:`workbench.eval.fidelity.run_fidelity` on ``windows`` ``[n, seq_len]`` (``ppl`` = ``ppl_q``),
    ``quantize_s`` and, when ``mmlu_questions`` is given, MMLU micro/macro accuracy with 95% CIs.
    ``report_out``: a list that receives the per-layer report (tagged with ``label``).
    """
    from workbench.eval.fidelity import run_fidelity

    require_trained(model, "the quantization sweep's fidelity and MMLU columns")
    t0 = time.perf_counter()
    if config is None:
        qmodel, report = model, pd.DataFrame()
        row = {"method": "fp", "w_bits": 16 if next(model.parameters()).dtype != torch.float32 else 32,
               "group_size": 0, "granularity": "none", "symmetric": False, "scheme": FP_LABEL,
               "label": FP_LABEL}
    else:
        qmodel, report = quantize(model, config, calib, tok=tok)
        row = config.to_row()
    row["quantize_s"] = time.perf_counter() - t0
    row.update(footprint(qmodel))
    fid = run_fidelity(model, qmodel, tok, "", windows=windows, batch_size=batch_size,
                       fp_cache=fp_cache).iloc[0].to_dict()
    row.update(fid)
    row["ppl"] = row["ppl_q"]
    if mmlu_questions is not None and len(mmlu_questions):
        row.update(_mmlu(qmodel, tok, mmlu_questions, mmlu_dev, n_shot, batch_size=8))
    if report_out is not None and len(report):
        report_out.append(report.assign(label=row["label"]))
    return pd.DataFrame([row])


def run_quant_sweep(model, tok, configs: list[QuantConfig | None], *, text: str | None = None,
                    n_tokens: int = 4096, seq_len: int = 256, batch_size: int = 4, calib=None,
                    n_questions: int = 0, n_shot: int = 5, subjects: list[str] | None = None,
                    name: str | None = None,
                    root=None, include_fp: bool = True, progress: bool = True) -> pd.DataFrame:
    """Measure each config (and the FP model) and return one row per point.

    Args:
        model, tok: the full-precision causal LM and its tokenizer (the model is never modified).
        configs: :class:`QuantConfig` list; ``None`` entries mean the FP model.
        text: held-out evaluation text (default WikiText-2 test); the first ``n_tokens`` tokens in
            non-overlapping ``seq_len`` windows. AWQ/GPTQ calibrate on WikiText-2 valid (or ``calib``).
        n_questions: MMLU questions per subject (0: no MMLU), scored ``n_shot``-shot with the
            lead's ``workbench.eval.mmlu.run_mmlu``; accuracy has 95% CIs (Wilson, micro).
        subjects: restrict MMLU to these subjects (smoke runs); default all 57.
        name: results-store name; when given, ``workbench.results.sweep`` appends each finished
            point to it and a re-run skips the points already stored (resume after interruption).

    Returns:
        DataFrame, one row per point (see :func:`run_quant_point`); when ``name`` is given, the stored
        rows of these points for this model and evaluation data (earlier runs' rows included; rows of
        other weights or data stay in the store, see :func:`workbench.results.sweep`).
    """
    from workbench.eval.fidelity import eval_windows

    if text is None:
        from workbench.data import load_text

        text = load_text("wikitext-2", split="test")
    windows = eval_windows(tok, text, n_tokens, seq_len)
    questions = dev = None
    if n_questions:
        from workbench.data import load_mmlu, sample_mmlu

        test = load_mmlu(split="test")
        if subjects:
            unknown = sorted(set(subjects) - set(test["subject"]))
            if unknown:
                raise ValueError(f"unknown MMLU subjects {unknown}; see load_mmlu()['subject'].unique()")
            test = test[test["subject"].isin(subjects)]
        questions = sample_mmlu(test, n_questions, seed=0)
        dev = load_mmlu(split="dev")
    points = ([None] if include_fp and None not in configs else []) + list(configs)
    fp_cache: dict = {}

    def fn(cfg: dict | None) -> pd.DataFrame:
        qc = None if cfg is None or cfg.get("method") == "fp" else QuantConfig(**cfg)
        out = run_quant_point(model, tok, qc, windows, calib=calib, fp_cache=fp_cache, batch_size=batch_size,
                              mmlu_questions=questions, mmlu_dev=dev, n_shot=n_shot)
        return out.assign(n_questions_per_subject=n_questions, eval_tokens=int(windows.numel()))

    keys = [{"method": "fp"} if c is None else _asdict(c) for c in points]
    keys = [{**k, "_eval": [int(windows.numel()), seq_len, n_questions, n_shot, sorted(subjects or [])]}
            for k in keys]

    def fn_key(k: dict) -> pd.DataFrame:
        return fn({kk: v for kk, v in k.items() if kk != "_eval"})

    if name is None:
        return pd.concat([fn_key(k) for k in keys], ignore_index=True)
    from workbench.results import collect_provenance, data_digest, sweep

    data = {"eval_windows": data_digest(windows), "calib": None if calib is None else data_digest(calib),
            "mmlu_test": None if questions is None else data_digest(questions),
            "mmlu_dev": None if dev is None else data_digest(dev)}
    prov = collect_provenance(model=model, config={"configs": keys}, n_tokens=n_tokens, seq_len=seq_len, data=data)
    return sweep(name, keys, fn_key, provenance=prov, root=root, progress=progress)


def _asdict(c: QuantConfig) -> dict:
    from dataclasses import asdict

    d = asdict(c)
    d["skip"] = list(d["skip"])
    return d
