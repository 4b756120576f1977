"""MMLU files as users have them: every valid CSV variant loads the same; empty, cut-short and
mis-encoded files fail naming the file; a partial set says which subjects are missing."""

import warnings

import pandas as pd
import pytest

from workbench.data import DataFormatError, load_mmlu, mmlu_coverage, read_mmlu_csv, sample_mmlu

SUBJ = "anatomy"  # 135 test questions in the release


@pytest.fixture(scope="module")
def anatomy(shared_data):
    return pd.read_csv(shared_data / "mmlu" / "test" / f"{SUBJ}_test.csv")


@pytest.fixture(scope="module")
def reference(shared_data):
    return load_mmlu(shared_data / "mmlu", split="test", subjects=[SUBJ])


def _write(folder, df, *, header: bool, encoding: str, newline: str):
    (folder / "test").mkdir(parents=True)
    df = df.copy()
    if not header:  # the original release: no header, letter answers
        df["answer"] = df["answer"].map(lambda i: "ABCD"[i])
    df.to_csv(folder / "test" / f"{SUBJ}_test.csv", header=header, index=False, encoding=encoding,
              lineterminator=newline)


# Before: the BOM variants were refused (header layout: "answer 'answer' is neither...") or loaded
# with the first question changed by a '\ufeff' prefix (original layout).
@pytest.mark.parametrize("header", [True, False], ids=["header-layout", "original-layout"])
@pytest.mark.parametrize("encoding,newline", [("utf-8", "\n"), ("utf-8-sig", "\n"), ("utf-8", "\r\n"),
                                              ("utf-8-sig", "\r\n")], ids=["lf", "bom", "crlf", "bom-crlf"])
def test_csv_variants_load_to_the_same_frame(tmp_path, anatomy, reference, header, encoding, newline):
    _write(tmp_path, anatomy, header=header, encoding=encoding, newline=newline)
    pd.testing.assert_frame_equal(load_mmlu(tmp_path, split="test", subjects=[SUBJ]), reference)


def test_quoted_commas_quotes_and_newlines_survive(tmp_path, anatomy):
    df = anatomy.copy()
    df.loc[0, "question"] = 'Line one,\nline "two", three'
    df.loc[1, "choice2"] = 'a, "b"'
    _write(tmp_path, df, header=True, encoding="utf-8-sig", newline="\r\n")
    got = load_mmlu(tmp_path, split="test", subjects=[SUBJ])
    assert got.loc[0, "question"] == 'Line one,\nline "two", three'
    assert got.loc[1, "choices"][2] == 'a, "b"' and len(got) == 135


def _folder_with(tmp_path, name: str, content: bytes):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / name).write_bytes(content)
    return tmp_path


@pytest.mark.parametrize("content,match", [
    (b"", r"virology_test\.csv is empty \(0 bytes\)"),  # before: silently dropped from the averages
    (b"question,choice0,choice1,choice2,choice3,answer\r\n", r"virology_test\.csv holds no question rows"),
    (b"\n\n  \n", r"virology_test\.csv holds no question rows"),
    (b'q1,a,b,c,d,A\n"q2 cut inside its quot', r"virology_test\.csv:2: not valid CSV.*cut short"),
    ("Caf\xe9,a,b,c,d,A\n".encode("cp1252"), r"virology_test\.csv:1: byte 3 is not UTF-8.*CSV UTF-8"),
    (b"q1,a,b,c,d\n", r"virology_test\.csv:1: expected 6 fields"),
    (b"q1,a,b,c,d,E\n", r"virology_test\.csv:1: answer 'E'"),
])
def test_bad_files_fail_naming_the_file(tmp_path, content, match):
    folder = _folder_with(tmp_path, "virology_test.csv", content)
    with pytest.raises(DataFormatError, match=match):
        load_mmlu(folder, split="test")


def test_file_cut_at_a_row_boundary_is_caught_by_the_release_count(tmp_path, anatomy):
    # before: 100 of 135 questions loaded silently
    _write(tmp_path, anatomy.head(100), header=True, encoding="utf-8", newline="\n")
    with pytest.raises(DataFormatError, match=r"anatomy_test\.csv holds 100 questions; the MMLU release has 135"):
        load_mmlu(tmp_path, split="test")
    assert len(load_mmlu(tmp_path, split="test", subjects=[SUBJ], check_counts=False)) == 100  # on purpose


def test_missing_subjects_are_named_in_a_warning_and_the_result(tmp_path, anatomy):
    _write(tmp_path, anatomy, header=True, encoding="utf-8", newline="\n")
    with pytest.warns(UserWarning, match=r"lacks 56 of the release's 57 subjects \(abstract_algebra"):
        df = load_mmlu(tmp_path, split="test")
    assert len(df.attrs["mmlu_missing_subjects"]) == 56 and "virology" in df.attrs["mmlu_missing_subjects"]
    assert mmlu_coverage(df).startswith("1 of 57 MMLU subjects (missing: abstract_algebra, astronomy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a subset asked for on purpose: no warning
        load_mmlu(tmp_path, split="test", subjects=[SUBJ])


def test_complete_release_has_full_coverage(mmlu_test):
    assert mmlu_coverage(mmlu_test) == "57 of 57 MMLU subjects"


def test_subject_typo_suggests_the_name(shared_data):
    with pytest.raises(ValueError, match=r"\['anatomyy'\] have no file.*Did you mean 'anatomy'"):
        load_mmlu(shared_data / "mmlu", split="test", subjects=["anatomyy"])


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere \(the folder does not exist\)"):
        load_mmlu(tmp_path / "nowhere", split="test")


@pytest.mark.parametrize("n", [0, -3, 2.5, "10", True])
def test_sample_size_must_be_a_positive_integer(reference, n):
    with pytest.raises(ValueError, match="n_per_subject"):
        sample_mmlu(reference, n)


def test_read_single_file_with_bom_keeps_the_first_question(tmp_path, anatomy):
    p = tmp_path / f"{SUBJ}_test.csv"
    anatomy.to_csv(p, index=False, encoding="utf-8-sig")
    assert read_mmlu_csv(p).loc[0, "question"] == anatomy.loc[0, "question"]
