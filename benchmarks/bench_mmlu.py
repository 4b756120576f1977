"""MMLU 5-shot scoring on the engine (shared few-shot prefixes) vs lm-eval's HF backend.

Prompt (lm-eval's ``mmlu`` task, Hendrycks et al. 2021, arXiv 2009.03300): ``"The following are
multiple choice questions (with answers) about {subject}.\\n\\n"`` + 5 dev examples, each
``"{question}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer: {letter}"`` joined by ``"\\n\\n"``, then the test
question ending ``"Answer:"``; the prediction is the choice whose continuation ``" A"`` .. ``" D"``
has the largest log-likelihood.

Engine path: per subject the prefix (header + 5 shots) is prefilled once into slot 0 and copied
(``copy_prefix``) into up to ``max_batch - 1`` slots; the questions' own tokens are appended in one
ragged ``extend_batch`` per chunk, reading only the last position's logits.
lm-eval path: ``HFLM(pretrained=model).loglikelihood`` on the same (context, continuation) pairs.

    python -m benchmarks.bench_mmlu --mmlu .stage/mmlu --tokenizer .stage/tok [--lm-eval-per-subject 10]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from benchmarks.common import CONFIGS, Recorder, environment, hf_model, sync
from workbench.engine import Engine

LETTERS = ["A", "B", "C", "D"]


def load_split(root: Path, split: str) -> pd.DataFrame:
    """All ``{root}/{split}/*_{split}.csv`` (header ``question,choice0..3,answer``) with a subject column."""
    frames = []
    for f in sorted((root / split).glob(f"*_{split}.csv")):
        df = pd.read_csv(f)
        df["subject"] = f.name[: -len(f"_{split}.csv")]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def fmt(row, with_answer: bool) -> str:
    s = str(row["question"]).strip() + "".join(f"\n{L}. {row[f'choice{i}']}" for i, L in enumerate(LETTERS))
    s += "\nAnswer:"
    return s + (f" {LETTERS[int(row['answer'])]}" if with_answer else "")


def build_prompts(dev: pd.DataFrame, test: pd.DataFrame) -> tuple[dict, list]:
    """``prefix[subject]`` (header + 5 shots + separator) and ``[(subject, question_text)]`` per test row."""
    prefix = {}
    for subj, d in dev.groupby("subject", sort=False):
        head = f"The following are multiple choice questions (with answers) about {subj.replace('_', ' ')}.\n\n"
        prefix[subj] = head + "\n\n".join(fmt(r, True) for _, r in d.head(5).iterrows()) + "\n\n"
    items = [(r["subject"], fmt(r, False)) for _, r in test.iterrows()]
    return prefix, items


def tokenize(tok, prefix: dict, items: list):
    """Token ids: prefix per subject, and per item the suffix after its subject's prefix (or None and
    the full context when tokenizing the whole context does not start with the prefix's tokens)."""
    p_ids = {s: tok(p, add_special_tokens=False)["input_ids"] for s, p in prefix.items()}
    full = tok([prefix[s] + q for s, q in items], add_special_tokens=False)["input_ids"]
    # the shared prefix: the longest start of tok(prefix) that every context of the subject begins with
    # (BPE may merge the trailing "\n\n" with the question's first characters)
    for s, p in list(p_ids.items()):
        n = len(p)
        for (si, _), ids in zip(items, full):
            if si == s:
                while n > 0 and ids[:n] != p[:n]:
                    n -= 1
        p_ids[s] = p[:n]
    out = []
    for (s, _), ids in zip(items, full):
        p = p_ids[s]
        out.append((s, ids[len(p):]) if len(ids) > len(p) else (s, None, ids))
    letter_ids = []
    for L in LETTERS:  # lm-eval: continuation = tok(ctx + " L")[len(tok(ctx)):]
        c = tok(" " + L, add_special_tokens=False)["input_ids"]
        if len(c) != 1:
            raise ValueError(f"continuation ' {L}' is {len(c)} tokens; this scorer needs one")
        letter_ids.append(c[0])
    return p_ids, out, letter_ids


@torch.no_grad()
def engine_mmlu(eng: Engine, p_ids: dict, toks: list, letter_ids: list) -> torch.Tensor:
    """Predictions ``[n]`` (0..3) for ``toks`` from :func:`tokenize`, in order; device work only,
    one host sync at the end."""
    dev = eng.device
    letters = torch.tensor(letter_ids, device=dev)
    preds = torch.empty(len(toks), dtype=torch.int64, device=dev)
    by_subj: dict = {}
    for i, t in enumerate(toks):
        by_subj.setdefault(t[0], []).append(i)
    cap = eng.max_batch - 1
    for subj, idx in by_subj.items():
        shared = [i for i in idx if toks[i][1] is not None]
        alone = [i for i in idx if toks[i][1] is None]
        eng.reset()
        p = p_ids[subj]
        eng.extend_batch([0], torch.tensor([p]), logits="last")
        shared.sort(key=lambda i: len(toks[i][1]))
        for c in range(0, len(shared), cap):
            chunk = shared[c: c + cap]
            n = len(chunk)
            lens = [len(toks[i][1]) for i in chunk]
            batch = torch.zeros(n, max(lens), dtype=torch.int64)
            for r, i in enumerate(chunk):
                batch[r, : lens[r]] = torch.tensor(toks[i][1])
            slots = list(range(1, n + 1))
            eng.copy_prefix(0, slots, len(p))
            logits = eng.extend_batch(slots, batch, torch.tensor(lens), logits="last")  # [n, V]
            preds[torch.tensor(chunk, device=dev)] = logits[:, letters].argmax(-1)
        for i in alone:
            eng.truncate_slot(1, 0)
            logits = eng.extend_batch([1], torch.tensor([toks[i][2]]), logits="last")
            preds[i] = logits[0, letters].argmax()
    return preds.cpu()


def lm_eval_mmlu(model, tok, prefix: dict, items: list, batch_size: int = 16,
                 max_length: int = 4096) -> tuple[torch.Tensor, float]:
    """lm-eval's HF backend (``HFLM.loglikelihood``) on the same contexts; returns the log-likelihoods
    ``[n_items, 4]`` (float, nats, one per answer letter) and seconds."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tok, backend="causal", batch_size=batch_size, max_length=max_length)
    reqs = []
    for j, (s, q) in enumerate(items):
        for c, L in enumerate(LETTERS):
            reqs.append(Instance(request_type="loglikelihood", doc={}, arguments=(prefix[s] + q, " " + L),
                                 idx=c, metadata=("mmlu", j, 1)))
    sync()
    t0 = time.perf_counter()
    res = lm.loglikelihood(reqs, disable_tqdm=True)
    sync()
    secs = time.perf_counter() - t0
    ll = torch.tensor([r[0] for r in res]).view(-1, 4)
    return ll, secs


def run(mmlu_dir: str, tok_dir: str, model_name: str = "qwen2-7b", max_batch: int = 96,
        lm_eval_per_subject: int = 10, rec: Recorder | None = None, n_subjects: int | None = None,
        dtype: str = "bfloat16", subset_only: bool = False, shard: tuple[int, int] | None = None) -> dict:
    """Time the engine on every question (or only the lm-eval subset with ``subset_only``), then
    lm-eval on ``lm_eval_per_subject`` questions per subject (0 = all of them); compare predictions
    question by question.

    ``shard=(k, n)``: lm-eval only on the subjects ``sorted(subjects)[k::n]`` (the engine still scores
    every question, so each shard also times the full engine run). The full lm-eval set does not fit
    one 10-minute device call; :func:`merge` adds the shards up. The random init is seeded, so every
    shard scores the same weights (checked by ``merge`` through the engine predictions)."""
    from transformers import AutoTokenizer

    rec = rec or Recorder(name="mmlu.json")
    root = Path(mmlu_dir)
    dev, test = load_split(root, "dev"), load_split(root, "test")
    if n_subjects:
        keep = sorted(test["subject"].unique())[:n_subjects]
        dev, test = dev[dev.subject.isin(keep)], test[test.subject.isin(keep)].reset_index(drop=True)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    if subset_only:
        test = test.groupby("subject", sort=False).head(lm_eval_per_subject).reset_index(drop=True)
    prefix, items = build_prompts(dev, test)
    t0 = time.perf_counter()
    p_ids, toks, letter_ids = tokenize(tok, prefix, items)
    tok_s = time.perf_counter() - t0
    max_len = max(len(p_ids[t[0]]) + len(t[1]) if t[1] is not None else len(t[2]) for t in toks)
    model = hf_model(CONFIGS[model_name], dtype=getattr(torch, dtype))
    eng = Engine.from_hf(model, max_batch=max_batch, max_seq=max_len + 8, use_graphs=False)
    # warm-up on one subject (kernel compilation), then the timed run over every question
    first = [t for t in toks if t[0] == toks[0][0]]
    engine_mmlu(eng, p_ids, first, letter_ids)
    sync()
    t0 = time.perf_counter()
    preds = engine_mmlu(eng, p_ids, toks, letter_ids)
    eng_s = time.perf_counter() - t0
    out = {"dtype": dtype, "n_questions": len(items), "n_unshared": sum(t[1] is None for t in toks), "max_len": max_len,
           "tokenize_s": tok_s, "engine_s": eng_s, "max_batch": max_batch,
           "engine_acc_vs_labels": float((preds == torch.tensor(test["answer"].values)).float().mean())}
    rec.put("mmlu_engine", out)
    del eng
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    # lm-eval on a per-subject subset (the full set would take minutes on the HF backend)
    in_shard = test
    if shard is not None:
        keep = sorted(test["subject"].unique())[shard[0]::shard[1]]
        in_shard = test[test.subject.isin(keep)]
    sub = (in_shard if lm_eval_per_subject <= 0
           else in_shard.groupby("subject", sort=False).head(lm_eval_per_subject)).index.tolist()
    lm_ll, lm_s = lm_eval_mmlu(model, tok, prefix, [items[i] for i in sub], max_length=max(max_len + 8, 2048))
    lm_preds = lm_ll.argmax(-1)
    eng_sub = preds[sub]
    agree = (lm_preds == eng_sub)
    # lm-eval's margin between its best and second-best letter (nats): a flip where the margin is
    # within bf16 rounding of the two paths is a near-tie, not a scoring difference
    top2 = lm_ll.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).float()
    out.update({"lm_eval_margin_median": float(margin.median()),
                "lm_eval_margin_mismatched_max": float(margin[~agree].max()) if (~agree).any() else 0.0,
                "lm_eval_margin_mismatched": [round(float(m), 5) for m in margin[~agree].tolist()][:50],
                "frac_margin_below_mismatched_max": float((margin <= margin[~agree].max()).float().mean())
                if (~agree).any() else 0.0})
    out.update({"lm_eval_n": len(sub), "lm_eval_s": lm_s, "lm_eval_s_per_q": lm_s / len(sub),
                "lm_eval_s_extrapolated_14042": lm_s / len(sub) * len(items),
                "engine_s_per_q": eng_s / len(items),
                "speedup_per_question": (lm_s / len(sub)) / (eng_s / len(items)),
                "identical_predictions": int(agree.sum()),
                "mismatched_rows": [int(sub[i]) for i in (~agree).nonzero().view(-1).tolist()][:50],
                "shard": list(shard) if shard else None})
    # per-question record, for merging shards: engine predictions on every question; lm-eval's
    # rows, predictions and top-2 margins on its subset
    rec.put("mmlu_rows", {"engine_preds": preds.tolist(), "lm_eval_rows": [int(i) for i in sub],
                          "lm_eval_preds": lm_preds.tolist(),
                          "lm_eval_margin": [round(float(m), 5) for m in margin.tolist()]})
    rec.put("mmlu", out)
    return out


def merge(paths: list[str]) -> dict:
    """Add up shard files of :func:`run` (``--shard K/N``): lm-eval seconds and questions summed over
    shards, engine seconds per shard (each timed every question), predictions compared on the union.

    Raises ``ValueError`` when the shards' engine predictions differ (not the same weights) or when
    they overlap."""
    import json
    import statistics

    ds = [json.loads(Path(q).read_text()) for q in paths]
    base = ds[0]["mmlu_rows"]["engine_preds"]
    rows, lm, margin = [], [], []
    for q, d in zip(paths, ds):
        if d["mmlu_rows"]["engine_preds"] != base:
            raise ValueError(f"{q}: engine predictions differ from {paths[0]}'s: not the same weights; "
                             "re-run the shards with the same --model and --dtype")
        rows += d["mmlu_rows"]["lm_eval_rows"]
        lm += d["mmlu_rows"]["lm_eval_preds"]
        margin += d["mmlu_rows"]["lm_eval_margin"]
    if len(set(rows)) != len(rows):
        raise ValueError("shards overlap: give each K of one N once")
    shards = [tuple(d["mmlu"].get("shard") or (0, 1)) for d in ds]
    if len({n for _, n in shards}) != 1 or sorted(k for k, _ in shards) != list(range(shards[0][1])):
        raise ValueError(f"shards {shards}: want K = 0..N-1 of one N, each once")
    eng = torch.tensor(base)[rows]
    lm_t, m_t = torch.tensor(lm), torch.tensor(margin)
    agree = eng == lm_t
    lm_s = sum(d["mmlu"]["lm_eval_s"] for d in ds)
    eng_s = [d["mmlu"]["engine_s"] for d in ds]
    n_q = ds[0]["mmlu"]["n_questions"]
    out = {"shards": len(ds), "n_questions": n_q, "lm_eval_n": len(rows), "lm_eval_s": lm_s,
           "engine_s_runs": eng_s, "engine_s_median": statistics.median(eng_s),
           "speedup": (lm_s / len(rows)) / (statistics.median(eng_s) / n_q),
           "identical_predictions": int(agree.sum()),
           "mismatched": int((~agree).sum()),
           "lm_eval_margin_median": float(m_t.median()),
           "lm_eval_margin_mismatched_max": float(m_t[~agree].max()) if (~agree).any() else 0.0,
           "mismatched_margin_counts": {str(float(k)): int(v) for k, v in
                                        zip(*torch.unique(m_t[~agree], return_counts=True))} if (~agree).any() else {},
           "frac_margin_below_mismatched_max": float((m_t <= m_t[~agree].max()).float().mean())
           if (~agree).any() else 0.0}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mmlu", default=".stage/mmlu")
    p.add_argument("--tokenizer", default=".stage/tok")
    p.add_argument("--model", default="qwen2-7b")
    p.add_argument("--max-batch", type=int, default=96)
    p.add_argument("--lm-eval-per-subject", type=int, default=10, help="0 = every question")
    p.add_argument("--shard", default=None, help="K/N: lm-eval on subjects sorted(subjects)[K::N] only")
    p.add_argument("--subjects", type=int, default=None, help="first N subjects only (smoke runs)")
    p.add_argument("--tiny", action="store_true", help="tiny model config (CPU smoke run)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--subset-only", action="store_true", help="engine only on the lm-eval subset")
    a = p.parse_args()
    if a.tiny:
        import benchmarks.common as C

        C.CONFIGS[a.model] = {**C.CONFIGS[a.model], "hidden_size": 128, "intermediate_size": 256,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    shard = None
    if a.shard:
        k, n = (int(v) for v in a.shard.split("/"))
        if not 0 <= k < n:
            p.error(f"--shard {a.shard}: want K/N with 0 <= K < N, e.g. 0/2")
        shard = (k, n)
    tag = f"_shard{shard[0]}of{shard[1]}" if shard else ""
    rec = Recorder(name=f"mmlu_{a.dtype}{'_subset' if a.subset_only else ''}{tag}.json")
    rec.put("env", environment())
    run(a.mmlu, a.tokenizer, a.model, a.max_batch, a.lm_eval_per_subject, rec, a.subjects, a.dtype,
        a.subset_only, shard)


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "merge":  # python -m benchmarks.bench_mmlu merge a.json b.json
        import json

        print(json.dumps(merge(sys.argv[2:]), indent=1))
    else:
        main()
