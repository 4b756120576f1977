"""MMLU k-shot multiple choice by log-likelihood, in lm-eval's two formulations (Hendrycks et al. 2021,
arXiv 2009.03300; lm-eval 0.4.13 ``tasks/mmlu/default`` and ``tasks/mmlu/continuation``).

``"mmlu"`` (answer letters, lm-eval's ``mmlu``)::

    The following are multiple choice questions (with answers) about {subject}.\\n\\n
    {dev question}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer: {letter}\\n\\n      <- k exemplars, first k of dev
    {test question}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer:               continuations " A" .. " D"

``"mmlu_continuation"`` (cloze, lm-eval's ``mmlu_continuation``)::

    The following are questions (with answers) about {subject}.\\n\\n
    Question: {dev question}\\nAnswer: {text of the right choice}\\n\\n     <- k exemplars
    Question: {test question}\\nAnswer:                                     continuations " {choice text}"

Every choice's log-likelihood is ``sum_j log p(cont_j | context, cont_<j)`` over its continuation
tokens. ``acc``: ``argmax_c ll_c`` is the answer; ``acc_norm``: ``argmax_c ll_c / len(choice_c)``,
the choice text's length in characters without the leading space (lm-eval ``ConfigurableTask.
process_results`` for ``multiple_choice``: ``completion_len = len(i) for i in doc_to_choice``). With
letters ``len == 1``, so ``acc_norm == acc``. Ties go to the first choice (``np.argmax``).

Tokens are lm-eval's (``TemplateLM._encode_pair``): see :mod:`workbench.eval.mmlu_tokens`. Scoring
runs through :mod:`workbench.eval.mmlu_score`: the HF forward (reference, any model) or the engine's
batch prefill (fast path; the default on CUDA), both with each subject's shared token prefix
computed once.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.eval import mmlu_score
from workbench.eval.mmlu_tokens import tokenize_mmlu
from workbench.models import require_trained
from workbench.stats import binomial_ci
from workbench.validate import check_field_types

__all__ = ["CHANCE", "FORMULATIONS", "MMLUConfig", "build_prompts", "format_question",
           "run_mmlu", "subject_prefix", "summarize_mmlu"]

LETTERS = "ABCD"
CHANCE = 0.25  # accuracy of a uniform guess among four choices
FORMULATIONS = ("mmlu", "mmlu_continuation")
BACKENDS = ("auto", "hf", "engine")


def _check_name(field: str, value: str, names) -> None:
    if value not in names:
        near = difflib.get_close_matches(str(value), names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"{field}={value!r} is not one of {list(names)}{hint}")


@dataclass(frozen=True)
class MMLUConfig:
    """How :func:`run_mmlu` scores: the inputs it validates and the columns its rows carry."""

    formulation: str = "mmlu"  # "mmlu" (answer letters) or "mmlu_continuation" (cloze on choice texts)
    n_shot: int = 5  # exemplars from the dev split, its first n (lm-eval's first_n sampler); 0-5
    batch_size: int | None = None  # questions per forward pass; None: 8 (hf), up to 128 by token budget (engine)
    reuse_prefix: bool = True  # compute each subject's shared token prefix once, copy its KV cache
    backend: str = "auto"  # "hf" (reference, any model), "engine" (fast path), "auto": engine on CUDA
    max_tokens: int | None = None  # engine: padded tokens per step; None: 16384 on CUDA, 4096 on CPU

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        _check_name("formulation", self.formulation, FORMULATIONS)
        _check_name("backend", self.backend, BACKENDS)
        if not 0 <= self.n_shot <= 5:
            raise ValueError(f"n_shot={self.n_shot} must be in 0..5 (the MMLU dev split has 5 exemplars per subject)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be >= 1, or None for the backend's default")
        if self.max_tokens is not None and self.max_tokens < 16:
            raise ValueError(f"max_tokens={self.max_tokens} must be >= 16, or None for the default")


def format_question(question: str, choices) -> str:
    """lm-eval ``mmlu`` ``doc_to_text``: ``question.strip()``, four lettered choices, then ``Answer:``."""
    return question.strip() + "".join(f"\n{LETTERS[i]}. {c}" for i, c in enumerate(choices)) + "\nAnswer:"


def _doc_to_text(formulation: str, question: str, choices) -> str:
    if formulation == "mmlu":
        return format_question(question, choices)
    return f"Question: {question.strip()}\nAnswer:"  # mmlu_continuation doc_to_text


def _doc_to_choice(formulation: str, choices) -> list[str]:
    return list(LETTERS[:len(choices)]) if formulation == "mmlu" else [str(c) for c in choices]


def subject_prefix(subject: str, dev: pd.DataFrame, n_shot: int, formulation: str = "mmlu") -> str:
    """Description plus the first ``n_shot`` dev exemplars of ``subject``, each
    ``doc_to_text + " " + answer choice + "\\n\\n"`` (lm-eval ``fewshot_context``, sampler ``first_n``).

    Raises ValueError when the dev split has fewer than ``n_shot`` exemplars for ``subject``.
    """
    _check_name("formulation", formulation, FORMULATIONS)
    what = "multiple choice questions" if formulation == "mmlu" else "questions"
    text = f"The following are {what} (with answers) about {subject.replace('_', ' ')}.\n\n"
    if n_shot:
        ex = dev[dev["subject"] == subject].head(n_shot)
        if len(ex) < n_shot:
            raise ValueError(f"dev split has {len(ex)} exemplars for {subject!r}, fewer than n_shot={n_shot}")
        text += "".join(_doc_to_text(formulation, r.question, r.choices) + " "
                        + _doc_to_choice(formulation, r.choices)[int(r.answer)] + "\n\n" for r in ex.itertuples())
    return text


def build_prompts(questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int, formulation: str = "mmlu") -> dict:
    """The strings lm-eval builds for ``questions``: ``prefix`` (per subject), ``text`` (per question,
    the context is ``prefix[subject] + text``), ``choices`` (``doc_to_choice`` per question; each
    continuation is ``" " + choice``)."""
    prefix = {s: subject_prefix(s, dev, n_shot, formulation) for s in sorted(questions["subject"].unique())}
    text = [_doc_to_text(formulation, q, c) for q, c in zip(questions["question"], questions["choices"])]
    choices = [_doc_to_choice(formulation, c) for c in questions["choices"]]
    return {"prefix": prefix, "subject": list(questions["subject"]), "text": text, "choices": choices}


def _argmax(x: np.ndarray) -> np.ndarray:
    return x.argmax(axis=1)  # first maximum on ties, as np.argmax in lm-eval


def run_mmlu(model, tok, questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int = 5, batch_size: int | None = None,
             reuse_prefix: bool = True, progress: bool = True, *, formulation: str = "mmlu", backend: str = "auto",
             engine=None, max_tokens: int | None = None) -> pd.DataFrame:
    """Score MMLU questions k-shot in one formulation; one row per question.

    Args:
        model: a causal LM (HF ``AutoModelForCausalLM``), any device and dtype.
        tok: its tokenizer (a fast tokenizer is batched; any tokenizer works).
        questions: rows of :func:`workbench.data.load_mmlu` (optionally :func:`sample_mmlu`).
        dev: the dev split (few-shot exemplars), ``load_mmlu(split="dev")``.
        n_shot, batch_size, reuse_prefix, formulation, backend, max_tokens: see :class:`MMLUConfig`.
        engine: a prebuilt :class:`workbench.engine.Engine` over ``model`` to score with (implies the
            engine backend); by default one is built for the call when the engine backend is chosen.

    Returns:
        DataFrame with ``qid, subject, answer`` (0-3), ``pred, correct`` (lm-eval ``acc``),
        ``pred_norm, correct_norm`` (``acc_norm``), ``logprob_A..logprob_D`` (log-likelihood of each
        choice's continuation, nats), ``n_tokens`` (context length in tokens), ``n_shot``,
        ``formulation``, ``backend`` (the one used), ``tokenize_s`` and ``wall_s`` (seconds of this
        call: tokenization, and everything including tokenization).

    Raises:
        ValueError: bad settings (see :class:`MMLUConfig`); a subject without enough dev exemplars;
            ``backend="engine"`` for a model the engine does not run.
    """
    t0 = time.perf_counter()
    cfg = MMLUConfig(formulation=formulation, n_shot=n_shot, batch_size=batch_size, reuse_prefix=reuse_prefix,
                     backend="engine" if engine is not None else backend, max_tokens=max_tokens)
    require_trained(model, "MMLU")
    if "qid" not in questions:
        questions = questions.assign(qid=questions["subject"] + "/" + questions.groupby("subject").cumcount().astype(str))
    p = build_prompts(questions, dev, cfg.n_shot, cfg.formulation)
    req = tokenize_mmlu(tok, p["prefix"], p["subject"], p["text"], p["choices"], reuse_prefix=cfg.reuse_prefix)
    tokenize_s = time.perf_counter() - t0
    ll, used = mmlu_score.score(model, req, cfg, engine=engine, progress=progress)
    pred = _argmax(ll)
    pred_norm = _argmax(ll / req.choice_chars)
    answer = questions["answer"].to_numpy().astype(int)
    out = pd.DataFrame({"qid": questions["qid"].to_numpy(), "subject": questions["subject"].to_numpy(),
                        "answer": answer, "pred": pred, "correct": pred == answer,
                        "pred_norm": pred_norm, "correct_norm": pred_norm == answer})
    for i, letter in enumerate(LETTERS[:ll.shape[1]]):
        out[f"logprob_{letter}"] = ll[:, i]
    out["n_tokens"] = req.n_context
    out = out.assign(n_shot=cfg.n_shot, formulation=cfg.formulation, backend=used, tokenize_s=tokenize_s)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _rows(base: dict, per: pd.DataFrame, level: float, z: float, chance: float) -> list[dict]:
    out = []
    for s, r in per.iterrows():
        lo, hi = binomial_ci(int(r["sum"]), int(r["size"]), level)
        out.append({**base, "subject": s, "n": int(r["size"]), "correct": int(r["sum"]), "acc": r["sum"] / r["size"],
                    "ci_lo": lo, "ci_hi": hi})
    n, k = int(per["size"].sum()), int(per["sum"].sum())
    lo, hi = binomial_ci(k, n, level)
    out.append({**base, "subject": "micro", "n": n, "correct": k, "acc": k / n, "ci_lo": lo, "ci_hi": hi})
    accs = per["sum"] / per["size"]
    half = z * float(np.sqrt((accs * (1 - accs) / per["size"]).sum()) / len(per))
    m = float(accs.mean())
    out.append({**base, "subject": "macro", "n": n, "correct": k, "acc": m, "ci_lo": max(0.0, m - half),
                "ci_hi": min(1.0, m + half)})
    for r in out:
        r["chance"] = chance
        r["ci_includes_chance"] = bool(r["ci_lo"] <= chance <= r["ci_hi"])
    return out


def summarize_mmlu(df: pd.DataFrame, by: list[str] | None = None, level: float = 0.95,
                   metric: str | list[str] = "acc") -> pd.DataFrame:
    """Accuracy per subject plus ``micro`` (all questions pooled) and ``macro`` (mean of subject
    accuracies), with chance level and whether each interval includes it.

    Args:
        df: :func:`run_mmlu` rows (possibly several runs; ``by`` names the columns that tell them apart,
            default those of ``["formulation", "n_shot"]`` present).
        level: confidence level of the intervals.
        metric: ``"acc"`` (column ``correct``), ``"acc_norm"`` (``correct_norm``), or a list of both.

    Returns:
        Rows ``by..., metric, subject, n, correct, acc, ci_lo, ci_hi, chance, ci_includes_chance``;
        ``acc`` holds the metric's value; subject is ``"micro"``/``"macro"`` for the aggregates.
        Subject and micro intervals are Wilson score intervals; the macro interval is a normal interval
        with ``var = sum_s var_s / S^2``, ``var_s = acc_s (1 - acc_s) / n_s``. ``chance`` is
        ``1 / n_choices`` (0.25); ``ci_includes_chance`` flags an accuracy not distinguishable from
        guessing at this level, where a difference between two such figures is no evidence of a drop.

    Raises:
        ValueError: an unknown metric, or its column missing.
    """
    from scipy import stats as st

    metrics = [metric] if isinstance(metric, str) else list(metric)
    cols = {"acc": "correct", "acc_norm": "correct_norm"}
    for m in metrics:
        _check_name("metric", m, list(cols))
        if cols[m] not in df:
            raise ValueError(f"column {cols[m]!r} (metric {m!r}) missing; pass run_mmlu rows")
    by = by if by is not None else [c for c in ["formulation", "n_shot"] if c in df]
    n_choices = sum(c.startswith("logprob_") for c in df.columns) or 4
    z = st.norm.ppf(0.5 + level / 2)
    out = []
    for key, g in (df.groupby(by, sort=True) if by else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        for m in metrics:
            per = g.groupby("subject", sort=True)[cols[m]].agg(["size", "sum"])
            out += _rows({**dict(zip(by, key)), "metric": m}, per, level, z, 1.0 / n_choices)
    return pd.DataFrame(out)
