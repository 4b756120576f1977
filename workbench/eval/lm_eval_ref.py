"""lm-eval's ``mmlu`` task run on local MMLU data and an in-memory model: the reference that
:func:`workbench.eval.mmlu.run_mmlu` is cross-checked against question by question.

lm-eval (EleutherAI lm-evaluation-harness, 0.4.x) reads ``cais/mmlu`` from the hub; here the task's
own YAML (prompt template, description, few-shot sampler) is loaded unchanged and only its dataset
is pointed at local JSON files in the ``cais/mmlu`` schema, so no network is needed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["lm_eval_mmlu"]

LETTERS = "ABCD"


def lm_eval_mmlu(model, tok, questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int = 5,
                 batch_size: int = 8) -> pd.DataFrame:
    """Score ``questions`` with lm-eval's HF backend (``HFLM``) over the same model object.

    Returns a DataFrame ``qid, subject, pred, logprob_A..logprob_D`` in the order of ``questions``
    (``qid`` added as in :func:`workbench.data.sample_mmlu` when missing). Needs ``lm-eval`` and
    ``datasets`` (``pip install -e .[eval]``); raises ImportError naming that fix otherwise.
    """
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError as e:
        raise ImportError("the lm-eval cross-check needs `pip install -e .[eval]` (lm-eval==0.4.13)") from e

    if "qid" not in questions:
        questions = questions.assign(qid=questions["subject"] + "/" + questions.groupby("subject").cumcount().astype(str))
    tm = TaskManager()
    tasks, order = [], {}
    with tempfile.TemporaryDirectory() as td:
        for subject, g in questions.groupby("subject", sort=True):
            order[subject] = list(g["qid"])
            for split, df in (("test", g), ("dev", dev[dev["subject"] == subject])):
                with open(Path(td) / f"{subject}_{split}.jsonl", "w") as f:
                    f.writelines(json.dumps({"question": r.question, "subject": subject,
                                            "choices": list(r.choices), "answer": int(r.answer)}) + "\n" for r in df.itertuples())
            cfg = load_yaml(tm._entry(f"mmlu_{subject}").yaml_path, resolve_func=True)
            cfg.pop("tag", None)
            cfg.update(task=f"wb_mmlu_{subject}", dataset_path="json", dataset_name=None,
                       dataset_kwargs={"data_files": {"test": f"{td}/{subject}_test.jsonl",
                                                      "dev": f"{td}/{subject}_dev.jsonl"}})
            tasks.append(cfg)
        res = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size),
                                      tasks=tasks, num_fewshot=n_shot, log_samples=True, task_manager=tm,
                                      verbosity="ERROR")
    rows = []
    for subject, qids in order.items():
        for s in res["samples"][f"wb_mmlu_{subject}"]:
            lp = np.array([float(r[0]) for r in s["filtered_resps"]])
            rows.append({"qid": qids[s["doc_id"]], "subject": subject, "pred": int(lp.argmax()),
                         **{f"logprob_{L}": lp[i] for i, L in enumerate(LETTERS)}})
    out = pd.DataFrame(rows).set_index("qid").loc[list(questions["qid"])].reset_index()
    return out
