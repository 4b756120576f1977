"""lm-eval itself on local MMLU data and an in-memory model: the reference that
:func:`workbench.eval.mmlu.run_mmlu` is cross-checked against question by question.

lm-eval (EleutherAI lm-evaluation-harness, 0.4.x) reads ``cais/mmlu`` from the hub; here the task's
own YAML (``mmlu_{subject}`` or ``mmlu_{subject}_continuation``: prompt template, description,
few-shot sampler, metrics) is loaded unchanged and only its dataset is pointed at local JSON files in
the ``cais/mmlu`` schema, so no network is needed. :func:`lm_eval_loglikelihood` runs lm-eval's HF
backend on given (context, continuation) strings, without the task machinery (or ``datasets``).
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["lm_eval_loglikelihood", "lm_eval_mmlu"]

LETTERS = "ABCD"
_TASK = {"mmlu": "mmlu_{}", "mmlu_continuation": "mmlu_{}_continuation"}


def _import():
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError as e:
        raise ImportError("the lm-eval cross-check needs `pip install -e .[eval]` (lm-eval==0.4.13)") from e
    return lm_eval, HFLM, TaskManager, load_yaml


@functools.lru_cache(maxsize=1)
def _task_manager():
    """lm-eval's task index, built once per process (it scans every task YAML: ~10-20 s)."""
    return _import()[2]()


def _task_configs(questions, dev, formulation: str, td: str, tm, load_yaml) -> tuple[list, dict]:
    tasks, order = [], {}
    for subject, g in questions.groupby("subject", sort=True):
        order[subject] = list(g["qid"])
        for split, df in (("test", g), ("dev", dev[dev["subject"] == subject])):
            with open(Path(td) / f"{subject}_{split}.jsonl", "w") as f:
                f.writelines(json.dumps({"question": r.question, "subject": subject, "choices": list(r.choices),
                                         "answer": int(r.answer)}) + "\n" for r in df.itertuples())
        cfg = load_yaml(tm._entry(_TASK[formulation].format(subject)).yaml_path, resolve_func=True)
        cfg.pop("tag", None)
        cfg.update(task=f"wb_{formulation}_{subject}", dataset_path="json", dataset_name=None,
                   dataset_kwargs={"data_files": {"test": f"{td}/{subject}_test.jsonl",
                                                  "dev": f"{td}/{subject}_dev.jsonl"}})
        tasks.append(cfg)
    return tasks, order


def lm_eval_mmlu(model, tok, questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int = 5,
                 batch_size: int = 8, formulation: str = "mmlu") -> pd.DataFrame:
    """Score ``questions`` with lm-eval's task ``mmlu_{subject}`` (``formulation="mmlu"``) or
    ``mmlu_{subject}_continuation`` on its HF backend (``HFLM``) over the same model object.

    Returns a DataFrame ``qid, subject, pred, logprob_A..logprob_D, acc, acc_norm`` in the order of
    ``questions`` (``qid`` added as in :func:`workbench.data.sample_mmlu` when missing); ``acc`` and
    ``acc_norm`` are lm-eval's own per-sample metrics (``acc_norm`` NaN where the task does not
    compute it: the letter task lists only ``acc``). Needs ``lm-eval`` and ``datasets``
    (``pip install -e .[eval]``); raises ImportError naming that fix otherwise, ValueError for an
    unknown formulation.
    """
    if formulation not in _TASK:
        raise ValueError(f"formulation={formulation!r}; use one of {list(_TASK)}")
    lm_eval, HFLM, _, load_yaml = _import()
    if "qid" not in questions:
        questions = questions.assign(qid=questions["subject"] + "/" + questions.groupby("subject").cumcount().astype(str))
    tm = _task_manager()
    with tempfile.TemporaryDirectory() as td:
        tasks, order = _task_configs(questions, dev, formulation, td, tm, load_yaml)
        res = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size),
                                      tasks=tasks, num_fewshot=n_shot, log_samples=True, task_manager=tm,
                                      verbosity="ERROR")
    rows = []
    for subject, qids in order.items():
        for s in res["samples"][f"wb_{formulation}_{subject}"]:
            lp = np.array([float(r[0]) for r in s["filtered_resps"]])
            rows.append({"qid": qids[s["doc_id"]], "subject": subject, "pred": int(lp.argmax()),
                         **{f"logprob_{L}": lp[i] for i, L in enumerate(LETTERS)},
                         "acc": float(s["acc"]), "acc_norm": float(s.get("acc_norm", np.nan))})
    return pd.DataFrame(rows).set_index("qid").loc[list(questions["qid"])].reset_index()


def lm_eval_loglikelihood(model, tok, pairs: list[tuple[str, str]], batch_size: int = 16,
                          max_length: int | None = None) -> np.ndarray:
    """lm-eval's ``HFLM.loglikelihood`` on ``(context, continuation)`` string pairs; returns float64
    ``[len(pairs)]`` log-likelihoods (nats). ``max_length``: lm-eval's context window (default: the
    model's)."""
    _, HFLM, _, _ = _import()
    from lm_eval.api.instance import Instance

    kw = {} if max_length is None else {"max_length": max_length}
    lm = HFLM(pretrained=model, tokenizer=tok, backend="causal", batch_size=batch_size, **kw)
    reqs = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=0, metadata=("mmlu", j, 1))
            for j, p in enumerate(pairs)]
    return np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)], dtype=np.float64)
