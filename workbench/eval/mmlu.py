"""MMLU k-shot multiple-choice scoring by answer-letter log-likelihood, as lm-eval's ``mmlu`` task does.

Prompt (Hendrycks et al. 2021, arXiv 2009.03300; lm-eval ``tasks/mmlu/default``)::

    The following are multiple choice questions (with answers) about {subject with spaces}.\\n\\n
    {dev question 1}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer: {letter}\\n\\n      <- k exemplars, first k of dev
    {test question}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer:

The prediction is ``argmax_c log p(" " + c | context)`` over c in A-D. Tokens follow lm-eval's
``_encode_pair``: the context and ``context + continuation`` are encoded whole with the tokenizer's
default special tokens, and the continuation is the difference, so the ids the model sees are the
ones lm-eval feeds it.

Speed: the few-shot prefix of a subject is encoded once; its KV cache is copied across a batch of
that subject's questions, which are length-sorted and right-padded (causal attention never lets a
real token see padding to its right). The shared part is the longest common *token* prefix of the
subject's contexts, so BPE merges across the prefix/question boundary cannot change any token.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from workbench.models import require_trained
from workbench.stats import binomial_ci
from workbench.validate import check_field_types

__all__ = ["MMLUConfig", "format_question", "run_mmlu", "subject_prefix", "summarize_mmlu"]

LETTERS = "ABCD"


@dataclass(frozen=True)
class MMLUConfig:
    """One MMLU evaluation point."""

    n_shot: int = 5  # exemplars from the dev split (0-5; the dev split has 5 per subject)
    n_per_subject: int | None = 10  # questions per subject, stratified sample; None = all 14,042
    seed: int = 0  # sampling seed for the stratified subset
    batch_size: int = 8  # questions per forward pass
    reuse_prefix: bool = True  # encode each subject's few-shot prefix once and reuse its KV cache

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        if not 0 <= self.n_shot <= 5:
            raise ValueError(f"n_shot={self.n_shot} must be in 0..5 (the MMLU dev split has 5 exemplars per subject)")
        if self.n_per_subject is not None and self.n_per_subject < 1:
            raise ValueError(f"n_per_subject={self.n_per_subject} must be >= 1, or None for every question")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be >= 1")


def format_question(question: str, choices) -> str:
    """lm-eval's ``doc_to_text``: ``question.strip()``, four lettered choices, then ``Answer:``."""
    return question.strip() + "".join(f"\n{LETTERS[i]}. {c}" for i, c in enumerate(choices)) + "\nAnswer:"


def subject_prefix(subject: str, dev: pd.DataFrame, n_shot: int) -> str:
    """Description plus the first ``n_shot`` dev exemplars of ``subject`` (lm-eval sampler ``first_n``)."""
    text = f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
    if n_shot:
        ex = dev[dev["subject"] == subject].head(n_shot)
        if len(ex) < n_shot:
            raise ValueError(f"dev split has {len(ex)} exemplars for {subject!r}, fewer than n_shot={n_shot}")
        text += "".join(format_question(r.question, r.choices) + " " + LETTERS[r.answer] + "\n\n"
                        for r in ex.itertuples())
    return text


def _encode(tok, s: str) -> list[int]:
    return list(tok(s)["input_ids"])


def _choice_ids(tok, context: str) -> list[int]:
    ctx = _encode(tok, context)
    ids = []
    for letter in LETTERS:
        whole = _encode(tok, context + " " + letter)
        cont = whole[len(ctx):]
        if whole[:len(ctx)] != ctx or len(cont) != 1:
            raise ValueError(f"the tokenizer does not encode ' {letter}' as one token after 'Answer:' "
                             f"(got {cont}); this scorer needs single-token answer letters")
        ids.append(cont[0])
    return ids


def _last_logits(model, ids, pos, cache, last) -> torch.Tensor:
    """Logits ``[B, vocab]`` at position ``last[b]`` of each row. The output head runs on those B
    positions only (the decoder's hidden states are gathered first): identical numbers, and it skips
    ``B * T * vocab`` of head work and memory on every batch."""
    rows = torch.arange(ids.shape[0], device=ids.device)
    decoder, head = getattr(model, "model", None), model.get_output_embeddings()
    if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
        out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=cache is not None)
        return out.logits[rows, last]
    hidden = decoder(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=cache is not None)[0]
    return head(hidden[rows, last])


@torch.inference_mode()
def _score_subject(model, ctxs: list[list[int]], shared: int, choice_ids: list[int], batch_size: int) -> np.ndarray:
    """Log-probabilities of the four answer letters for each context; returns float64 ``[n, 4]``."""
    dev = next(model.parameters()).device
    prefix_cache = None
    if shared > 0:
        out = model(input_ids=torch.tensor([ctxs[0][:shared]], device=dev), use_cache=True)
        prefix_cache = out.past_key_values
    order = np.argsort([len(c) for c in ctxs], kind="stable")
    result = np.zeros((len(ctxs), 4))
    cid = torch.tensor(choice_ids, device=dev)
    for b0 in range(0, len(order), batch_size):
        idx = order[b0:b0 + batch_size]
        suffixes = [ctxs[i][shared:] for i in idx]
        width = max(len(s) for s in suffixes)
        ids = torch.zeros((len(idx), width), dtype=torch.long, device=dev)  # right padding (id 0)
        for r, s in enumerate(suffixes):
            ids[r, :len(s)] = torch.tensor(s)
        pos = torch.arange(shared, shared + width, device=dev).expand(len(idx), -1)
        cache = None
        if prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(idx))
        last = torch.tensor([len(s) - 1 for s in suffixes], device=dev)
        logits = _last_logits(model, ids, pos, cache, last)
        lp = torch.log_softmax(logits.double(), dim=-1)
        result[idx] = lp[:, cid].cpu().numpy()
    return result


def run_mmlu(model, tok, questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int = 5, batch_size: int = 8,
             reuse_prefix: bool = True, progress: bool = True) -> pd.DataFrame:
    """Score MMLU questions k-shot; one row per question.

    Args:
        model: a causal LM (HF ``AutoModelForCausalLM``), any device and dtype.
        tok: its tokenizer.
        questions: rows of :func:`workbench.data.load_mmlu` (optionally :func:`sample_mmlu`).
        dev: the dev split (few-shot exemplars), ``load_mmlu(split="dev")``.
        n_shot: exemplars per prompt, 0-5.
        batch_size: questions per forward pass.
        reuse_prefix: reuse each subject's few-shot KV cache (same predictions, far fewer FLOPs).

    Returns:
        DataFrame with ``qid, subject, answer, pred, correct, logprob_A..logprob_D`` (nats),
        ``n_tokens`` (context length in tokens), ``n_shot``.

    Raises:
        ValueError: bad ``n_shot``/``batch_size``; an unknown subject in ``dev``; a tokenizer whose
            answer letters are not single tokens.
    """
    from tqdm.auto import tqdm

    MMLUConfig(n_shot=n_shot, batch_size=batch_size)  # validates
    require_trained(model, "MMLU")
    if "qid" not in questions:
        questions = questions.assign(qid=questions["subject"] + "/" + questions.groupby("subject").cumcount().astype(str))
    rows = []
    groups = list(questions.groupby("subject", sort=True))
    for subject, g in tqdm(groups, desc=f"MMLU {n_shot}-shot", disable=not progress):
        prefix = subject_prefix(subject, dev, n_shot)
        contexts = [prefix + format_question(r.question, r.choices) for r in g.itertuples()]
        ctxs = [_encode(tok, c) for c in contexts]
        choice_ids = _choice_ids(tok, contexts[0])
        shared = 0
        if reuse_prefix:
            ref = _encode(tok, prefix)
            shared = min(len(ref), min(len(c) for c in ctxs) - 1)
            for c in ctxs:
                while shared > 0 and c[:shared] != ref[:shared]:
                    shared -= 1
        lp = _score_subject(model, ctxs, shared, choice_ids, batch_size)
        pred = lp.argmax(axis=1)
        for j, r in enumerate(g.itertuples()):
            rows.append({"qid": r.qid, "subject": subject, "answer": int(r.answer), "pred": int(pred[j]),
                         "correct": bool(pred[j] == r.answer), **{f"logprob_{L}": lp[j, i] for i, L in enumerate(LETTERS)},
                         "n_tokens": len(ctxs[j]), "n_shot": n_shot})
    return pd.DataFrame(rows)


def summarize_mmlu(df: pd.DataFrame, by: list[str] | None = None, level: float = 0.95) -> pd.DataFrame:
    """Accuracy per subject plus ``micro`` (all questions pooled) and ``macro`` (mean of subject accuracies).

    Args:
        df: :func:`run_mmlu` rows (possibly several runs; ``by`` names the columns that tell them apart,
            default ``["n_shot"]`` when present).
        level: confidence level of the intervals.

    Returns:
        Rows ``by..., subject, n, correct, acc, ci_lo, ci_hi``; subject is ``"micro"``/``"macro"`` for
        the aggregates. Subject and micro intervals are Wilson score intervals; the macro interval is
        a normal interval with ``var = sum_s var_s / S^2``, ``var_s = acc_s (1 - acc_s) / n_s``.
    """
    from scipy import stats as st

    by = by if by is not None else [c for c in ["n_shot"] if c in df]
    z = st.norm.ppf(0.5 + level / 2)
    out = []
    for key, g in (df.groupby(by, sort=True) if by else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        base = dict(zip(by, key))
        per = g.groupby("subject", sort=True)["correct"].agg(["size", "sum"])
        accs = per["sum"] / per["size"]
        for s, r in per.iterrows():
            lo, hi = binomial_ci(int(r["sum"]), int(r["size"]), level)
            out.append({**base, "subject": s, "n": int(r["size"]), "correct": int(r["sum"]),
                        "acc": r["sum"] / r["size"], "ci_lo": lo, "ci_hi": hi})
        lo, hi = binomial_ci(int(per["sum"].sum()), int(per["size"].sum()), level)
        out.append({**base, "subject": "micro", "n": int(per["size"].sum()), "correct": int(per["sum"].sum()),
                    "acc": per["sum"].sum() / per["size"].sum(), "ci_lo": lo, "ci_hi": hi})
        half = z * float(np.sqrt((accs * (1 - accs) / per["size"]).sum()) / len(per))
        out.append({**base, "subject": "macro", "n": int(per["size"].sum()), "correct": int(per["sum"].sum()),
                    "acc": float(accs.mean()), "ci_lo": max(0.0, float(accs.mean()) - half),
                    "ci_hi": min(1.0, float(accs.mean()) + half)})
    return pd.DataFrame(out)
