"""MMLU scoring: lm-eval's prompts in both formulations, the batched tokenization against lm-eval's
``_encode_pair``, the engine fast path against the HF reference, prefix reuse, summaries."""

import numpy as np
import pandas as pd
import pytest

from workbench.eval.mmlu import (
    MMLUConfig,
    build_prompts,
    format_question,
    run_mmlu,
    subject_prefix,
    summarize_mmlu,
)
from workbench.eval.mmlu_tokens import encode_pairs_reference, tokenize_mmlu

LP = [f"logprob_{c}" for c in "ABCD"]


@pytest.fixture(scope="module")
def tok(request):
    """The built-in model's tokenizer alone (its cache folder), else the one of ``default_model``."""
    from transformers import AutoTokenizer

    from workbench.models import cache_dir

    folder = cache_dir() / "models" / "smollm2-135m"
    if (folder / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(folder))
    return request.getfixturevalue("default_model")[1]


def test_prompt_matches_lm_eval_template(mmlu_dev):
    q = format_question("  What is 2+2? ", ["3", "4", "5", "6"])
    assert q == "What is 2+2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:"
    p = subject_prefix("high_school_physics", mmlu_dev, 2)
    assert p.startswith("The following are multiple choice questions (with answers) about high school physics.\n\n")
    first = mmlu_dev[mmlu_dev.subject == "high_school_physics"].iloc[0]
    assert p.split("\n\n")[1] == format_question(first.question, first.choices) + " " + "ABCD"[first.answer]
    assert p.endswith("\n\n") and p.count("\nAnswer: ") == 2


def test_continuation_prompt_matches_lm_eval_template(mmlu_dev):
    # lm-eval tasks/mmlu/continuation: description "The following are questions (with answers) about
    # {subject}.\n\n", doc_to_text "Question: {{question.strip()}}\nAnswer:", exemplar target = choice text
    p = subject_prefix("anatomy", mmlu_dev, 1, "mmlu_continuation")
    ex = mmlu_dev[mmlu_dev.subject == "anatomy"].iloc[0]
    assert p == ("The following are questions (with answers) about anatomy.\n\n"
                 f"Question: {ex.question.strip()}\nAnswer: {ex.choices[ex.answer]}\n\n")
    b = build_prompts(pd.DataFrame({"subject": ["anatomy"], "question": [" Why? "], "choices": [["a", "bb", "c", "d"]],
                                    "answer": [1]}), mmlu_dev, 0, "mmlu_continuation")
    assert b["text"] == ["Question: Why?\nAnswer:"] and b["choices"] == [["a", "bb", "c", "d"]]
    assert b["prefix"]["anatomy"] == "The following are questions (with answers) about anatomy.\n\n"


def test_config_validation():
    with pytest.raises(ValueError, match="n_shot"):
        MMLUConfig(n_shot=6)
    with pytest.raises(ValueError, match="batch_size"):
        MMLUConfig(batch_size=0)
    with pytest.raises(ValueError, match="did you mean 'mmlu_continuation'"):
        MMLUConfig(formulation="mmlu_continuaton")
    with pytest.raises(ValueError, match="backend"):
        MMLUConfig(backend="vllm")


@pytest.mark.slow  # ~5 s: 1,300 reference encodes of 5-shot contexts
@pytest.mark.parametrize("formulation", ["mmlu", "mmlu_continuation"])
def test_split_tokenization_equals_lm_eval_encode_pair(tok, mmlu_test, mmlu_dev, formulation):
    # two whole subjects, and the first question of every subject (the longest few-shot prefixes), 5-shot:
    # the split encoding gives exactly lm-eval's ctx = encode(context), cont = encode(context + cont)[len(ctx):]
    q = pd.concat([mmlu_test[mmlu_test.subject.isin(["management", "medical_genetics"])],
                   mmlu_test.groupby("subject").head(1)]).drop_duplicates(subset=["subject", "question"])
    p = build_prompts(q, mmlu_dev, 5, formulation)
    req = tokenize_mmlu(tok, p["prefix"], p["subject"], p["text"], p["choices"])
    assert set(req.method) == {"split"}  # no subject fell back to the reference encoding
    ctx, cont = encode_pairs_reference(tok, [p["prefix"][s] + t for s, t in zip(p["subject"], p["text"])],
                                       [[" " + c for c in cs] for cs in p["choices"]])
    ours = [req.prefix_ids[s] + c for s, c in zip(req.subject_idx, req.ctx_ids)]
    assert ours == ctx and req.cont_ids == cont
    assert (req.n_context == [len(c) for c in ctx]).all()
    # the shared prefix is a common token prefix of the subject's contexts and leaves >= 1 own token
    assert all(len(c) >= 1 for c in req.ctx_ids) and max(len(x) for x in req.prefix_ids) > 100


def test_split_cut_needs_the_whitespace_rule(tok, mmlu_test, mmlu_dev):
    # planted bug: cutting right after the last exemplar's "\n" (before "Answer:") is wrong where the
    # exemplar's last line ends in a space: GPT-2's pre-tokenizer splits " \n" + "Answer" as " ", "\n"
    # but " \n" at the end of a string as one piece; professional_law's 5th exemplar has it
    from workbench.eval.mmlu_tokens import _encoder

    enc = _encoder(tok)
    q = mmlu_test[mmlu_test.subject == "professional_law"].head(1)
    p = build_prompts(q, mmlu_dev, 5, "mmlu")
    h, t = p["prefix"]["professional_law"], p["text"][0]
    cut = h.rfind("\nAnswer:") + 1
    naive = enc([h[:cut]])[0] + enc([h[cut:] + t], specials=False)[0]
    assert naive != enc([h + t])[0]
    req = tokenize_mmlu(tok, p["prefix"], p["subject"], p["text"], p["choices"])
    assert req.prefix_ids[0] + req.ctx_ids[0] == enc([h + t])[0] and req.method == ["split"]


def test_split_falls_back_where_it_is_not_exact(mmlu_test, mmlu_dev):
    # a SentencePiece-style tokenizer (Metaspace: "▁" before every word, also at the start of a
    # string) breaks the split; the per-subject check must catch it and use the reference encoding
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    q = mmlu_test[mmlu_test.subject.isin(["anatomy", "virology"])].groupby("subject").head(4)
    p = build_prompts(q, mmlu_dev, 2, "mmlu_continuation")
    texts = [p["prefix"][s] + t + " " + c for s, t, cs in zip(p["subject"], p["text"], p["choices"]) for c in cs]
    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"]))
    sp = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    req = tokenize_mmlu(sp, p["prefix"], p["subject"], p["text"], p["choices"])
    assert "reference" in req.method
    ctx, cont = encode_pairs_reference(sp, [p["prefix"][s] + t for s, t in zip(p["subject"], p["text"])],
                                       [[" " + c for c in cs] for cs in p["choices"]])
    assert [req.prefix_ids[s] + c for s, c in zip(req.subject_idx, req.ctx_ids)] == ctx and req.cont_ids == cont


@pytest.mark.parametrize("formulation", ["mmlu", "mmlu_continuation"])
def test_prefix_reuse_gives_identical_scores(default_model, hf_sample_run, mmlu_sample, mmlu_dev, formulation):
    model, tok = default_model
    a = hf_sample_run(formulation)  # shared prefix once per subject, 4 questions per forward
    b = run_mmlu(model, tok, mmlu_sample, mmlu_dev, 5, 1, reuse_prefix=False, progress=False,
                 formulation=formulation, backend="hf")
    np.testing.assert_allclose(a[LP].to_numpy(), b[LP].to_numpy(), atol=2e-4)
    assert a["pred"].tolist() == b["pred"].tolist() and a["pred_norm"].tolist() == b["pred_norm"].tolist()
    # log-likelihoods of continuations: negative; the four letters' probabilities sum below 1
    assert (a[LP].to_numpy() < 0).all()
    if formulation == "mmlu":
        assert (np.exp(a[LP].to_numpy()).sum(axis=1) <= 1 + 1e-9).all()
        assert (a["correct_norm"] == a["correct"]).all()  # len("A") == 1: acc_norm is acc


@pytest.mark.parametrize("formulation", ["mmlu", "mmlu_continuation"])
def test_engine_path_equals_hf_path_on_cpu(default_model, hf_sample_run, mmlu_sample, mmlu_dev, formulation):
    # the fast path (engine batch prefill, resident prefixes, ragged steps) against the HF reference,
    # float32 CPU. "mmlu": the engine run_mmlu builds (one wave, steps mixing subjects, max_tokens 512
    # -> several steps); "mmlu_continuation": a 3-slot engine (one resident prefix: three waves)
    from workbench.engine import Engine

    model, tok = default_model
    hf = hf_sample_run(formulation)
    engine = None if formulation == "mmlu" else Engine.from_hf(model, max_batch=3, max_seq=2048, use_graphs=False)
    eng = run_mmlu(model, tok, mmlu_sample, mmlu_dev, 5, 4, progress=False, formulation=formulation,
                   backend="engine", engine=engine, max_tokens=512)
    assert (eng["backend"] == "engine").all() and (hf["backend"] == "hf").all()
    assert eng["pred"].tolist() == hf["pred"].tolist() and eng["pred_norm"].tolist() == hf["pred_norm"].tolist()
    np.testing.assert_allclose(eng[LP].to_numpy(), hf[LP].to_numpy(), atol=1e-3)


def test_summary_micro_macro_wilson_and_chance():
    df = pd.DataFrame({"subject": ["a"] * 4 + ["b"] * 6, "correct": [1, 1, 0, 0] + [1] * 6,
                       "correct_norm": [0] * 4 + [1, 0, 0, 0, 0, 0], "n_shot": 5, "formulation": "mmlu_continuation",
                       **{c: -1.0 for c in LP}})
    s = summarize_mmlu(df).set_index("subject")
    assert s.loc["micro", "acc"] == pytest.approx(0.8) and s.loc["macro", "acc"] == pytest.approx(0.75)
    # Wilson 95% interval for 2/4: 0.5 +- 1.96*sqrt(.25/4+.96/16)/(1+3.84/4)
    assert s.loc["a", "ci_lo"] == pytest.approx(0.15003, abs=1e-4) and s.loc["a", "ci_hi"] == pytest.approx(0.84997, abs=1e-4)
    assert (s["chance"] == 0.25).all() and (s["metric"] == "acc").all()
    # 2/4 [0.150, 0.850] includes 0.25; 6/6 (Wilson [0.610, 1]) and 8/10 micro ([0.490, 0.943]) do not
    assert s["ci_includes_chance"].to_dict() == {"a": True, "b": False, "micro": False, "macro": False}
    n = summarize_mmlu(df, metric="acc_norm").set_index("subject")
    assert n.loc["micro", "acc"] == pytest.approx(0.1) and (n["metric"] == "acc_norm").all()
    assert n.loc["micro", "ci_includes_chance"]  # 1/10: Wilson [0.018, 0.404]
    both = summarize_mmlu(df, metric=["acc", "acc_norm"])
    assert len(both) == 2 * len(s) and set(both["formulation"]) == {"mmlu_continuation"}
    with pytest.raises(ValueError, match="did you mean 'acc_norm'"):
        summarize_mmlu(df, metric="acc_nrom")
