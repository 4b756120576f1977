"""run_mmlu against lm-eval itself (tasks ``mmlu_{subject}`` and ``mmlu_{subject}_continuation`` on
its HF backend), question by question, on the built-in model in float32 on the CPU.

Two whole subjects (management: 103 questions, medical_genetics: 100; the two smallest by tokens)
1-shot, so every question's exemplar boundary and continuation tokens are exercised, plus 5-shot on
three questions of three other subjects (``mmlu_sample``). lm-eval's results are cached (``tests/eval/conftest.py``).
"""

import numpy as np
import pytest

from workbench.eval.mmlu import run_mmlu

pytestmark = [pytest.mark.reference, pytest.mark.slow]

LP = [f"logprob_{c}" for c in "ABCD"]
WHOLE = ["management", "medical_genetics"]


def _check(ours, ref, formulation):
    assert ours["qid"].tolist() == ref["qid"].tolist()
    assert ours["pred"].tolist() == ref["pred"].tolist()
    assert ours["correct"].astype(float).tolist() == ref["acc"].tolist()  # lm-eval's own acc per question
    if formulation == "mmlu_continuation":
        assert ours["correct_norm"].astype(float).tolist() == ref["acc_norm"].tolist()  # and its acc_norm
    np.testing.assert_allclose(ours[LP].to_numpy(), ref[LP].to_numpy(), atol=1e-3)


@pytest.fixture(scope="module")
def whole(mmlu_test):
    return mmlu_test[mmlu_test.subject.isin(WHOLE)]


@pytest.mark.parametrize("formulation", ["mmlu", "mmlu_continuation"])
def test_two_whole_subjects_equal_lm_eval(default_model, lm_eval_reference, whole, mmlu_dev, formulation):
    model, tok = default_model
    ours = run_mmlu(model, tok, whole, mmlu_dev, 1, progress=False, formulation=formulation)
    ref = lm_eval_reference(whole, mmlu_dev, 1, formulation)
    assert len(ours) == 203
    _check(ours, ref, formulation)
    if formulation == "mmlu_continuation":
        # planted bugs in acc_norm that this comparison catches: the divisor counting the leading space
        # (" " + choice), or tokens instead of characters, disagree with lm-eval on some questions
        ll, chars = ours[LP].to_numpy(), np.array([[len(c) for c in cs] for cs in whole["choices"]], dtype=float)
        with_space = (ll / (chars + 1)).argmax(1) == whole["answer"].to_numpy()
        assert (with_space.astype(float) != ref["acc_norm"].to_numpy()).any()
        n_tok = np.array([[len(tok(" " + c, add_special_tokens=False)["input_ids"]) for c in cs] for cs in whole["choices"]])
        per_token = (ll / n_tok).argmax(1) == whole["answer"].to_numpy()
        assert (per_token.astype(float) != ref["acc_norm"].to_numpy()).any()


@pytest.mark.parametrize("formulation", ["mmlu", "mmlu_continuation"])
def test_five_shot_equals_lm_eval(hf_sample_run, lm_eval_reference, mmlu_sample, mmlu_dev, formulation):
    ours = hf_sample_run(formulation)  # what run_mmlu does on the CPU by default (backend "hf")
    _check(ours, lm_eval_reference(mmlu_sample, mmlu_dev, 5, formulation, batch_size=4), formulation)
