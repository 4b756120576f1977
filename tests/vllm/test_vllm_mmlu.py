"""MMLU on vLLM agrees with the workbench scorer per question (the full-precision built-in model).

Both engines score the same lm-eval token pairs (``mmlu``, letters, 0-shot) in float32: the workbench with the
HF forward (:func:`workbench.eval.mmlu.run_mmlu`, ``backend="hf"``), vLLM with its prompt log-probs
(:meth:`workbench.studies.vllm_backend.VLLMEngine.score_mmlu`). 1 question from each of the 57 subjects here
(57, to keep CI short: 268 s at 114 on 2026-12-06); the same check on 4 per subject (228 >= 200 questions) is the committed raw file
benchmarks/results/2026-12-06_vllm/mmlu_agreement_float32.json (same argmax 228/228, max |delta| 5.9e-5 nats). Tolerance: every choice's log-likelihood within ``TOL`` nats (float32 sums over one continuation
token after ~100-token contexts; measured max 2026-12-06 in benchmarks/results/2026-12-06_vllm/), and the
same argmax on every question whose top-two gap exceeds ``2 * TOL`` (a nearer tie may flip).
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.studies.compare import paired_difference, side_by_side

TOL = 2e-3  # nats per choice, float32 on both engines
L = [f"logprob_{c}" for c in "ABCD"]


def agreement(wb, vl, tol: float = TOL) -> dict:
    """Per-question comparison of two run_mmlu-shaped frames: max |delta logprob| and argmax agreement where the
    workbench's top-two gap exceeds ``2 * tol``."""
    a, b = wb[L].to_numpy(), vl[L].to_numpy()
    top = np.sort(a, 1)
    clear = top[:, -1] - top[:, -2] > 2 * tol
    return {"max_abs": float(np.abs(a - b).max()), "n": len(a), "n_clear": int(clear.sum()),
            "argmax_agree_clear": bool((wb.pred.to_numpy() == vl.pred.to_numpy())[clear].all())}


@pytest.mark.slow
def test_mmlu_per_question_agreement(vllm_env, default_model, mmlu_test, mmlu_dev):
    from workbench.data import sample_mmlu
    from workbench.eval.mmlu import run_mmlu
    from workbench.studies.vllm_backend import VLLMEngine

    model, tok = default_model
    q = sample_mmlu(mmlu_test, 1, seed=0)
    assert len(q) == 57
    wb = run_mmlu(model, tok, q, mmlu_dev, 0, 8, formulation="mmlu", backend="hf", progress=False)
    vl = VLLMEngine(dtype="float32").score_mmlu(model, tok, q, mmlu_dev, 0, formulation="mmlu")
    ag = agreement(wb, vl)
    assert ag["max_abs"] <= TOL, ag
    assert ag["argmax_agree_clear"] and ag["n_clear"] >= 0.9 * ag["n"], ag
    # the frames the notebooks pass to workbench.studies.compare
    sbs = side_by_side({"workbench": wb.assign(engine="workbench"), "vllm": vl.assign(engine="vllm")},
                       on=["qid"], metrics=["correct", "logprob_A"])
    assert (sbs.present == "both").all() and np.abs(sbs.logprob_A_diff).max() <= TOL
    pdiff = paired_difference(wb.correct.astype(float), vl.correct.astype(float))
    assert pdiff["n"] == len(q) and abs(pdiff["mean_diff"]) <= 1 - pdiff["agree"]


def test_agreement_check_fails_on_a_planted_bug():
    """Scoring one token too few (the continuation's last token dropped) or a shifted choice is caught."""
    import pandas as pd

    rng = np.random.default_rng(0)
    a = pd.DataFrame(rng.normal(-3, 1, (50, 4)), columns=L)
    a["pred"] = a[L].to_numpy().argmax(1)
    good = a.copy()
    good[L] += rng.uniform(-TOL / 2, TOL / 2, (50, 4))
    good["pred"] = good[L].to_numpy().argmax(1)
    assert agreement(a, good)["max_abs"] <= TOL
    bad = a.copy()
    bad[L] = a[L].to_numpy()[:, [1, 2, 3, 0]]  # choices shifted by one
    bad["pred"] = bad[L].to_numpy().argmax(1)
    ag = agreement(a, bad)
    assert ag["max_abs"] > TOL and not ag["argmax_agree_clear"]
