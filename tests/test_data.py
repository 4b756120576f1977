"""MMLU in both layouts, malformed files, text and prompt loaders, on the real shared data."""

import pandas as pd
import pytest

from workbench.data import DataFormatError, load_mmlu, load_prompts, load_text, read_mmlu_csv, sample_mmlu


def test_shared_mmlu_counts(mmlu_test, mmlu_dev):
    # Hendrycks et al. 2021: 57 subjects, 14,042 test questions, 5 dev exemplars per subject
    assert len(mmlu_test) == 14042 and mmlu_test["subject"].nunique() == 57
    assert len(mmlu_dev) == 285 and (mmlu_dev.groupby("subject").size() == 5).all()
    assert set(mmlu_test["answer"].unique()) == {0, 1, 2, 3}
    assert mmlu_test["choices"].map(len).eq(4).all()


def test_original_release_layout_matches_header_layout(tmp_path, shared_data):
    # Rewrite one subject in the original data.tar layout (no header, letter answers): same rows back.
    src = pd.read_csv(shared_data / "mmlu" / "test" / "anatomy_test.csv")
    (tmp_path / "test").mkdir()
    orig = src.copy()
    orig["answer"] = orig["answer"].map(lambda i: "ABCD"[i])
    orig.to_csv(tmp_path / "test" / "anatomy_test.csv", header=False, index=False)
    with pytest.warns(UserWarning, match="lacks 56 of the release's 57 subjects"):
        a = load_mmlu(tmp_path, split="test")
    b = load_mmlu(shared_data / "mmlu", split="test", subjects=["anatomy"])
    assert len(a) == len(b) == 135
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("line,bad", [(3, "only,three,fields"), (2, "q,a,b,c,d,E")])
def test_malformed_row_names_file_and_line(tmp_path, line, bad):
    rows = ["q1,a,b,c,d,A", "q2,a,b,c,d,B", "q3,a,b,c,d,C"]
    rows[line - 1] = bad
    p = tmp_path / "virology_test.csv"
    p.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataFormatError, match=rf"virology_test.csv:{line}:"):
        read_mmlu_csv(p)


def test_missing_split_names_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_mmlu(tmp_path, split="test")


def test_sample_is_stratified_and_seeded(mmlu_test):
    a = sample_mmlu(mmlu_test, 10, seed=1)
    b = sample_mmlu(mmlu_test, 10, seed=1)
    c = sample_mmlu(mmlu_test, 10, seed=2)
    assert len(a) == 570 and (a.groupby("subject").size() == 10).all()
    assert a["qid"].tolist() == b["qid"].tolist() and a["qid"].tolist() != c["qid"].tolist()
    assert a["qid"].is_unique


def test_load_text_wikitext_and_file(shared_data, tmp_path):
    text = load_text("wikitext-2", "test")
    assert text.startswith(" \n = Robert <unk> = \n") and len(text.split()) > 200_000  # tokenized release
    (tmp_path / "t.txt").write_text("hello world")
    assert load_text(tmp_path / "t.txt") == "hello world"
    (tmp_path / "e.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_text(tmp_path / "e.txt")


def test_prompts_spec_bench_stratified(shared_data, tmp_path):
    p = load_prompts("spec-bench")
    assert len(p) == 480 and p["category"].nunique() == 13
    s = load_prompts("spec-bench", n=100, seed=0)
    assert len(s) == 100 and s["category"].value_counts().max() - s["category"].value_counts().min() <= 1
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\n{"question_id": 2}\n')
    with pytest.raises(DataFormatError, match=r"q.jsonl:2"):
        load_prompts(bad)
