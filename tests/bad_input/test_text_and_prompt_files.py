"""Text and prompt files as users have them: BOM and CRLF load the same; empty, mis-encoded or
malformed files and misspelled arguments fail naming the file, the argument and the fix."""

import pytest

from workbench.data import DataFormatError, load_prompts, load_text

RECORD = '{"question_id": 1, "category": "writing", "turns": ["Write a haiku."]}'


@pytest.mark.parametrize("raw", [b"hello\nworld\n", b"\xef\xbb\xbfhello\nworld\n", b"hello\r\nworld\r\n"],
                         ids=["lf", "bom", "crlf"])
def test_text_variants_read_the_same(tmp_path, raw):
    (tmp_path / "t.txt").write_bytes(raw)  # before: the BOM came back as a '\ufeff' prefix
    assert load_text(tmp_path / "t.txt") == "hello\nworld\n"


@pytest.mark.parametrize("make,err,match", [
    (lambda p: load_text(p / "none.txt"), FileNotFoundError, r"none\.txt does not exist"),
    (lambda p: load_text(_put(p, "e.txt", b" \n\t")), ValueError, "empty"),
    (lambda p: load_text(_put(p, "l.txt", "caf\xe9 au lait".encode("cp1252"))), DataFormatError,
     r"l\.txt:1: byte 3 is not UTF-8"),
    (lambda p: load_text("wikitext-2", "tset"), ValueError, "Did you mean 'test'"),
])
def test_bad_text_sources(tmp_path, make, err, match):
    with pytest.raises(err, match=match):
        make(tmp_path)


def _put(folder, name, raw: bytes):
    (folder / name).write_bytes(raw)
    return folder / name


@pytest.mark.parametrize("raw", [RECORD + "\n", "\ufeff" + RECORD + "\r\n", "\n" + RECORD + "\n\n"],
                         ids=["plain", "bom-crlf", "blank-lines"])
def test_prompt_file_variants(tmp_path, raw):
    (tmp_path / "q.jsonl").write_text(raw, encoding="utf-8")  # before: a BOM failed line 1
    df = load_prompts(tmp_path / "q.jsonl")
    assert df.to_dict("records") == [{"prompt_id": 1, "category": "writing", "prompt": "Write a haiku."}]


@pytest.mark.parametrize("raw,match", [
    ("", r"q\.jsonl holds no prompts"),  # before: an empty DataFrame
    ('{"question_id": 1, "category": "x", "turns": [123]}\n', r"q\.jsonl:1: the first turn is 123"),
    ('{"question_id": 1, "category": "x", "turns": []}\n', r"q\.jsonl:1: not a Spec-Bench record"),
    (RECORD + "\n{not json}\n", r"q\.jsonl:2: not a Spec-Bench record \(JSONDecodeError"),
])
def test_bad_prompt_files(tmp_path, raw, match):
    (tmp_path / "q.jsonl").write_text(raw)
    with pytest.raises(DataFormatError, match=match):
        load_prompts(tmp_path / "q.jsonl")


@pytest.mark.parametrize("kw,match", [
    ({"categories": ["writting"]}, "Did you mean 'writing'"),  # before: an empty DataFrame
    ({"n": 0}, "n=0 must be an integer >= 1"),
    ({"n": 2.5}, "n=2.5 must be an integer"),
])
def test_bad_prompt_arguments(tmp_path, kw, match):
    (tmp_path / "q.jsonl").write_text(RECORD + "\n")
    with pytest.raises(ValueError, match=match):
        load_prompts(tmp_path / "q.jsonl", **kw)
