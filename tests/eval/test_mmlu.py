"""MMLU scoring: lm-eval's prompt, prefix-KV reuse, and question-by-question agreement with lm-eval."""

import numpy as np
import pytest

from workbench.data import sample_mmlu
from workbench.eval.mmlu import MMLUConfig, format_question, run_mmlu, subject_prefix, summarize_mmlu


def test_prompt_matches_lm_eval_template(mmlu_dev):
    q = format_question("  What is 2+2? ", ["3", "4", "5", "6"])
    assert q == "What is 2+2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:"
    p = subject_prefix("high_school_physics", mmlu_dev, 2)
    assert p.startswith("The following are multiple choice questions (with answers) about high school physics.\n\n")
    first = mmlu_dev[mmlu_dev.subject == "high_school_physics"].iloc[0]
    assert p.split("\n\n")[1] == format_question(first.question, first.choices) + " " + "ABCD"[first.answer]
    assert p.endswith("\n\n") and p.count("\nAnswer: ") == 2


def test_config_validation():
    with pytest.raises(ValueError, match="n_shot"):
        MMLUConfig(n_shot=6)
    with pytest.raises(ValueError, match="batch_size"):
        MMLUConfig(batch_size=0)


def test_prefix_reuse_gives_identical_scores(default_model, mmlu_test, mmlu_dev):
    model, tok = default_model
    q = sample_mmlu(mmlu_test[mmlu_test.subject.isin(["anatomy", "college_physics"])], 3, seed=0)
    a = run_mmlu(model, tok, q, mmlu_dev, n_shot=5, batch_size=3, reuse_prefix=True, progress=False)
    b = run_mmlu(model, tok, q, mmlu_dev, n_shot=5, batch_size=1, reuse_prefix=False, progress=False)
    cols = [f"logprob_{c}" for c in "ABCD"]
    np.testing.assert_allclose(a[cols].to_numpy(), b[cols].to_numpy(), atol=2e-4)
    assert a["pred"].tolist() == b["pred"].tolist()
    # log-probabilities of 4 of 49152 tokens: each negative, their probabilities sum below 1
    assert (a[cols].to_numpy() < 0).all() and (np.exp(a[cols].to_numpy()).sum(axis=1) <= 1 + 1e-9).all()


def test_summary_micro_macro_and_wilson():
    import pandas as pd

    df = pd.DataFrame({"subject": ["a"] * 4 + ["b"] * 6, "correct": [1, 1, 0, 0] + [1] * 6, "n_shot": 5})
    s = summarize_mmlu(df).set_index("subject")
    assert s.loc["micro", "acc"] == pytest.approx(0.8) and s.loc["macro", "acc"] == pytest.approx(0.75)
    # Wilson 95% interval for 2/4: 0.5 +- 1.96*sqrt(.25/4+.96/16)/(1+3.84/4)
    assert s.loc["a", "ci_lo"] == pytest.approx(0.15003, abs=1e-4) and s.loc["a", "ci_hi"] == pytest.approx(0.84997, abs=1e-4)


@pytest.mark.reference
def test_predictions_equal_lm_eval(default_model, mmlu_test, mmlu_dev):
    pytest.importorskip("lm_eval")
    from workbench.eval.lm_eval_ref import lm_eval_mmlu

    model, tok = default_model
    subjects = ["abstract_algebra", "world_religions", "virology"]  # 3 subjects x 3 questions, 5-shot
    q = sample_mmlu(mmlu_test[mmlu_test.subject.isin(subjects)], 3, seed=0)
    ours = run_mmlu(model, tok, q, mmlu_dev, n_shot=5, batch_size=4, progress=False)
    ref = lm_eval_mmlu(model, tok, q, mmlu_dev, n_shot=5, batch_size=4)
    assert ours["qid"].tolist() == ref["qid"].tolist()
    assert ours["pred"].tolist() == ref["pred"].tolist()
    cols = [f"logprob_{c}" for c in "ABCD"]
    np.testing.assert_allclose(ours[cols].to_numpy(), ref[cols].to_numpy(), atol=1e-3)
