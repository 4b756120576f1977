"""Evaluation data: MMLU questions, perplexity text and prompt sets, offline first.

Sources, in the order tried when ``source=None``:

* MMLU: ``$WORKBENCH_MMLU_DIR``; ``../shared/data/mmlu`` beside the project (tests and CI); the HF
  dataset ``cais/mmlu`` (needs ``datasets`` and a network). A local folder may hold either layout:
  the original release (``data.tar``: ``test/<subject>_test.csv``, no header, letter answers A-D) or
  the header-and-index layout (``question,choice0..choice3,answer`` with ``answer`` in 0-3).
* Text: ``"wikitext-2"`` (``../shared/data/wikitext-2/{test,valid}.txt`` or HF ``wikitext``) or any
  path to a plain-text file.
* Prompts: Spec-Bench JSONL (``question_id``, ``category``, ``turns``), MMLU questions or WikiText
  passages.
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.registry import did_you_mean

__all__ = [
    "MMLU_SUBJECT_COUNTS",
    "DataFormatError",
    "load_mmlu",
    "load_prompts",
    "load_text",
    "mmlu_coverage",
    "read_mmlu_csv",
    "sample_mmlu",
    "shared_data_dir",
]

LETTERS = "ABCD"
_HEADERS = (["question", "choice0", "choice1", "choice2", "choice3", "answer"],
            ["question", "a", "b", "c", "d", "answer"])

# Questions per subject in the MMLU release (Hendrycks et al. 2021): test split (14,042 in all);
# the dev split has 5 per subject. A local file with another count is cut short or not the release.
MMLU_SUBJECT_COUNTS: dict[str, int] = {
    "abstract_algebra": 100, "anatomy": 135, "astronomy": 152, "business_ethics": 100, "clinical_knowledge": 265,
    "college_biology": 144, "college_chemistry": 100, "college_computer_science": 100, "college_mathematics": 100,
    "college_medicine": 173, "college_physics": 102, "computer_security": 100, "conceptual_physics": 235,
    "econometrics": 114, "electrical_engineering": 145, "elementary_mathematics": 378, "formal_logic": 126,
    "global_facts": 100, "high_school_biology": 310, "high_school_chemistry": 203,
    "high_school_computer_science": 100, "high_school_european_history": 165, "high_school_geography": 198,
    "high_school_government_and_politics": 193, "high_school_macroeconomics": 390,
    "high_school_mathematics": 270, "high_school_microeconomics": 238, "high_school_physics": 151,
    "high_school_psychology": 545, "high_school_statistics": 216, "high_school_us_history": 204,
    "high_school_world_history": 237, "human_aging": 223, "human_sexuality": 131, "international_law": 121,
    "jurisprudence": 108, "logical_fallacies": 163, "machine_learning": 112, "management": 103, "marketing": 234,
    "medical_genetics": 100, "miscellaneous": 783, "moral_disputes": 346, "moral_scenarios": 895, "nutrition": 306,
    "philosophy": 311, "prehistory": 324, "professional_accounting": 282, "professional_law": 1534,
    "professional_medicine": 272, "professional_psychology": 612, "public_relations": 110, "security_studies": 245,
    "sociology": 201, "us_foreign_policy": 100, "virology": 166, "world_religions": 171,
}
_SPLIT_COUNTS = {"test": MMLU_SUBJECT_COUNTS, "dev": dict.fromkeys(MMLU_SUBJECT_COUNTS, 5)}


class DataFormatError(ValueError):
    """A data file is malformed, empty or cut short; the message names the file (and the line)."""


def _not_utf8(path: Path, what: str) -> DataFormatError:
    """The error for a file that does not decode as UTF-8, naming its first bad byte and line."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        return DataFormatError(f"{path}:{line}: byte {e.start} is not UTF-8 ({e.reason}); save the {what} as "
                               "UTF-8 (in a spreadsheet program: 'CSV UTF-8')")
    return DataFormatError(f"{path}: not UTF-8; save the {what} as UTF-8")


def _read_text_file(path: Path, what: str) -> str:
    """UTF-8 text with a leading byte-order mark dropped (spreadsheet programs' "CSV UTF-8")."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise _not_utf8(path, what) from None


def shared_data_dir() -> Path | None:
    """The read-only evaluation data folder, if present.

    Looks at ``$WORKBENCH_SHARED_DATA``, then ``../shared/data`` relative to the project root (the
    parent of the ``workbench`` package) and to the current directory.
    """
    candidates = []
    if os.environ.get("WORKBENCH_SHARED_DATA"):
        candidates.append(Path(os.environ["WORKBENCH_SHARED_DATA"]))
    root = Path(__file__).resolve().parent.parent
    candidates += [root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data",
                   Path.cwd().parent.parent / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


def _mmlu_answer(path: Path, line: int, ans: str, header_seen: bool) -> int:
    ans = ans.strip()
    if ans in {"0", "1", "2", "3"} and (header_seen or ans.upper() not in LETTERS):
        return int(ans)
    if len(ans) == 1 and ans.upper() in LETTERS:
        return LETTERS.index(ans.upper())
    raise DataFormatError(f"{path}:{line}: answer {ans!r} is neither a letter A-D nor an index 0-3")


def read_mmlu_csv(path: str | Path, subject: str | None = None, split: str | None = None) -> pd.DataFrame:
    """Read one MMLU CSV in either layout.

    Layout A (original release): no header; columns question, A, B, C, D, answer letter.
    Layout B (``../shared/data/mmlu``): header ``question,choice0,choice1,choice2,choice3,answer``
    (or ``question,A,B,C,D,answer``), answer an index 0-3.
    Every valid CSV variant reads the same: UTF-8 with or without a byte-order mark, LF or CRLF line
    ends, quoted fields holding commas, quotes (``""``) or line breaks.

    Returns a DataFrame with columns ``subject`` (str), ``question`` (str), ``choices`` (list of 4
    str), ``answer`` (int 0-3), ``split`` (str).

    Raises:
        DataFormatError: the file is empty or holds no question rows; it is not UTF-8; a quoted field
            never closes (a file cut short); a row without 6 fields or with an answer outside
            A-D / 0-3. The message gives the file and, for a row, the 1-based line number.
    """
    path = Path(path)
    if subject is None or split is None:
        stem = path.stem  # e.g. abstract_algebra_test
        s_subject, _, s_split = stem.rpartition("_")
        subject = subject or s_subject or stem
        split = split or s_split
    if path.stat().st_size == 0:
        raise DataFormatError(f"{path} is empty (0 bytes): restore it from the MMLU release, or remove it")
    rows = []
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, strict=True)
        header_seen = False
        try:
            for i, rec in enumerate(reader):
                line = reader.line_num
                if i == 0 and [c.strip().lower() for c in rec] in _HEADERS:
                    header_seen = True
                    continue
                if not rec or all(not c.strip() for c in rec):
                    continue
                if len(rec) != 6:
                    raise DataFormatError(f"{path}:{line}: expected 6 fields (question, 4 choices, answer), "
                                          f"got {len(rec)}")
                rows.append((subject, rec[0], list(rec[1:5]), _mmlu_answer(path, line, rec[5], header_seen), split))
        except csv.Error as e:
            raise DataFormatError(f"{path}:{reader.line_num}: not valid CSV ({e}); a quoted field that never "
                                  "closes usually means the file was cut short: restore it") from None
        except UnicodeDecodeError:
            raise _not_utf8(path, "MMLU file") from None
    if not rows:
        raise DataFormatError(f"{path} holds no question rows{' (only a header)' if header_seen else ''}: "
                              "restore it from the MMLU release, or remove it")
    return pd.DataFrame(rows, columns=["subject", "question", "choices", "answer", "split"])


def _mmlu_local_root() -> Path | None:
    if os.environ.get("WORKBENCH_MMLU_DIR"):
        return Path(os.environ["WORKBENCH_MMLU_DIR"])
    shared = shared_data_dir()
    if shared is not None and (shared / "mmlu").is_dir():
        return shared / "mmlu"
    return None


def _load_mmlu_hf(split: str) -> pd.DataFrame:
    try:
        import datasets
    except ImportError as e:
        raise FileNotFoundError("no local MMLU folder found and the `datasets` package is not installed; "
                                "pass source=<folder> or set WORKBENCH_MMLU_DIR") from e
    hf_split = {"dev": "dev", "test": "test", "val": "validation", "validation": "validation"}[split]
    try:
        ds = datasets.load_dataset("cais/mmlu", "all", split=hf_split)
    except (ConnectionError, OSError) as e:
        raise FileNotFoundError(
            f"MMLU is not available offline: no local folder (WORKBENCH_MMLU_DIR, WORKBENCH_SHARED_DATA or "
            f"../shared/data/mmlu) and the hub dataset cais/mmlu is unreachable ({type(e).__name__}). Fix: "
            "set WORKBENCH_MMLU_DIR to a folder of MMLU CSVs (either layout) or go online once") from None
    return pd.DataFrame({"subject": ds["subject"], "question": ds["question"], "choices": ds["choices"],
                         "answer": ds["answer"], "split": split})


def _mmlu_files(folder: Path, split: str, subjects: list[str] | None) -> list[Path]:
    files = sorted(folder.glob(f"*_{split}.csv"))
    if not files:
        where = f"{folder}" if folder.is_dir() else f"{folder} (the folder does not exist)"
        raise FileNotFoundError(f"no MMLU files '*_{split}.csv' in {where}; expected the layout "
                                f"<root>/{split}/<subject>_{split}.csv (original data.tar or "
                                "header-and-index CSVs)")
    if subjects is None:
        return files
    have = {f.name[: -len(f"_{split}.csv")]: f for f in files}
    unknown = [s for s in subjects if s not in have]
    if unknown:
        raise ValueError(f"MMLU subjects {unknown} have no file in {folder} ({len(have)} subjects there)."
                         + did_you_mean(unknown[0], have) + " Subject names use underscores, e.g. "
                         "'high_school_physics'")
    return [have[s] for s in dict.fromkeys(subjects)]


def _check_release_count(df: pd.DataFrame, path: Path, split: str) -> None:
    want = _SPLIT_COUNTS.get(split, {}).get(df["subject"].iloc[0])
    if want is not None and len(df) != want:
        raise DataFormatError(f"{path} holds {len(df)} questions; the MMLU release has {want} for "
                              f"{df['subject'].iloc[0]!r} ({split}): the file looks cut short or edited. Fix: "
                              "restore it, or pass check_counts=False to load a custom subset")


def mmlu_coverage(df: pd.DataFrame) -> str:
    """A one-line note of which MMLU subjects ``df`` covers, for tables and plot titles:
    ``"57 of 57 MMLU subjects"`` or ``"55 of 57 MMLU subjects (missing: anatomy, virology)"``."""
    present = set(df["subject"].unique()) & set(MMLU_SUBJECT_COUNTS)
    missing = sorted(set(MMLU_SUBJECT_COUNTS) - present)
    note = f"{len(present)} of {len(MMLU_SUBJECT_COUNTS)} MMLU subjects"
    if missing:
        note += f" (missing: {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''})"
    return note


def load_mmlu(source: str | Path | None = None, split: str = "test",
              subjects: list[str] | None = None, *, check_counts: bool = True) -> pd.DataFrame:
    """Load MMLU (Hendrycks et al. 2021, arXiv 2009.03300) as a tidy DataFrame.

    Args:
        source: a folder holding ``<split>/<subject>_<split>.csv`` files (either layout), or ``"hf"``
            for ``cais/mmlu``; ``None`` tries ``$WORKBENCH_MMLU_DIR``, ``../shared/data/mmlu``, then HF.
        split: ``"test"`` (14,042 rows), ``"dev"`` (285 rows: the 5-shot exemplars) or ``"val"``.
        subjects: keep only these subjects (underscore names such as ``"abstract_algebra"``); only
            their files are read.
        check_counts: refuse a local test/dev file whose question count differs from the release's
            (:data:`MMLU_SUBJECT_COUNTS`), the sign of a file cut short at a row boundary.

    Returns:
        Columns ``subject, question, choices (list[str] x4), answer (int 0-3), split``, sorted by
        subject with each file's row order kept. ``df.attrs["mmlu_missing_subjects"]`` lists the
        release subjects a local folder lacks (a ``UserWarning`` names them too when ``subjects`` is
        ``None``); :func:`mmlu_coverage` gives the one-line note for tables and plots.

    Raises:
        FileNotFoundError: the folder has no CSVs for ``split`` (message names the folder and fix).
        ValueError: a requested subject has no file (with "did you mean").
        DataFormatError: an empty, non-UTF-8 or cut-short file, a malformed row (file and line named).
    """
    if source == "hf" or (source is None and _mmlu_local_root() is None):
        df = _load_mmlu_hf(split)
        if subjects is not None:
            unknown = sorted(set(subjects) - set(df["subject"]))
            if unknown:
                raise ValueError(f"unknown MMLU subjects {unknown}." + did_you_mean(unknown[0], df["subject"].unique()))
            df = df[df["subject"].isin(subjects)].reset_index(drop=True)
        df.attrs["mmlu_missing_subjects"] = []
        return df
    root = Path(source) if source is not None else _mmlu_local_root()
    folder = root / split if (root / split).is_dir() else root
    parts = []
    for f in _mmlu_files(folder, split, subjects):
        part = read_mmlu_csv(f, split=split)
        if check_counts:
            _check_release_count(part, f, split)
        parts.append(part)
    df = pd.concat(parts, ignore_index=True).sort_values("subject", kind="stable", ignore_index=True)
    present = set(df["subject"])
    missing = sorted(set(_SPLIT_COUNTS.get(split, {})) - present) if present & set(MMLU_SUBJECT_COUNTS) else []
    if missing and subjects is None:
        warnings.warn(f"MMLU {split} in {folder} lacks {len(missing)} of the release's "
                      f"{len(MMLU_SUBJECT_COUNTS)} subjects ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); "
                      "averages cover the others only. Pass subjects=[...] to choose a subset on purpose",
                      UserWarning, stacklevel=2)
    df.attrs["mmlu_missing_subjects"] = missing if subjects is None else []
    return df


def sample_mmlu(df: pd.DataFrame, n_per_subject: int | None, seed: int = 0) -> pd.DataFrame:
    """Stratified sample: ``n_per_subject`` questions from each subject (all when fewer or ``None``).

    Sampling is without replacement with ``numpy.random.default_rng(seed)``; the result keeps a
    stable ``qid`` column (``<subject>/<row in the full split>``) for joining runs.
    """
    if n_per_subject is not None and (isinstance(n_per_subject, bool) or not isinstance(n_per_subject, (int, np.integer))
                                      or n_per_subject < 1):
        raise ValueError(f"n_per_subject={n_per_subject!r} must be an integer >= 1, or None for every question")
    df = df.copy()
    df["qid"] = df["subject"] + "/" + df.groupby("subject").cumcount().astype(str)
    if n_per_subject is None:
        return df.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    parts = []
    for _, g in df.groupby("subject", sort=True):
        take = min(n_per_subject, len(g))
        parts.append(g.iloc[np.sort(rng.choice(len(g), size=take, replace=False))])
    return pd.concat(parts, ignore_index=True)


def load_text(source: str | Path = "wikitext-2", split: str = "test") -> str:
    """Plain text for perplexity, calibration or distillation.

    Args:
        source: ``"wikitext-2"`` (local ``../shared/data/wikitext-2/<split>.txt``; else HF
            ``wikitext``/``wikitext-2-raw-v1`` via ``datasets``) or a path to any UTF-8 text file.
        split: ``"test"``, ``"valid"`` or ``"train"`` (WikiText only).

    Raises:
        FileNotFoundError: no such file / no local copy and no ``datasets``; ValueError: empty text or
        an unknown WikiText split; DataFormatError: a file that is not UTF-8.
    """
    p = Path(source)
    if source != "wikitext-2" or p.is_file():
        if not p.is_file():
            raise FileNotFoundError(f"text file {p} does not exist; pass 'wikitext-2' or a path to a .txt file")
        text = _read_text_file(p, "text file")
    else:
        if split not in ("test", "valid", "train"):
            raise ValueError(f"split={split!r} is not a WikiText-2 split; use 'test', 'valid' or 'train'."
                             + did_you_mean(split, ("test", "valid", "train")))
        shared = shared_data_dir()
        local = shared / "wikitext-2" / f"{split}.txt" if shared else None
        if local is not None and local.is_file():
            text = _read_text_file(local, "text file")
        else:
            try:
                import datasets
            except ImportError as e:
                raise FileNotFoundError("no local WikiText-2 and `datasets` is not installed; pass a text "
                                        "file path") from e
            hf_split = {"valid": "validation"}.get(split, split)
            try:
                text = "\n".join(datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=hf_split)["text"])
            except (ConnectionError, OSError) as e:
                raise FileNotFoundError(
                    f"WikiText-2 is not available offline: no ../shared/data/wikitext-2/{split}.txt and the hub "
                    f"is unreachable ({type(e).__name__}). Fix: pass a path to a text file, set "
                    "WORKBENCH_SHARED_DATA, or go online once") from None
    if not text.strip():
        raise ValueError(f"text source {source!r} ({split}) is empty; pass a non-empty text file")
    return text


def _read_spec_bench(path: Path) -> pd.DataFrame:
    """``prompt_id, category, prompt`` from a Spec-Bench JSONL (UTF-8, BOM and CRLF allowed)."""
    rows = []
    for line_no, line in enumerate(_read_text_file(path, "prompt file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            row = (rec["question_id"], rec["category"], rec["turns"][0])
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
            raise DataFormatError(f"{path}:{line_no}: not a Spec-Bench record ({type(e).__name__}: {e}); each "
                                  "line must be JSON with question_id, category and turns") from None
        if not isinstance(row[2], str) or not row[2].strip():
            raise DataFormatError(f"{path}:{line_no}: the first turn is {row[2]!r}, not a non-empty string")
        rows.append(row)
    if not rows:
        raise DataFormatError(f"{path} holds no prompts (the file is empty); pass a Spec-Bench JSONL with one "
                              "record per line")
    return pd.DataFrame(rows, columns=["prompt_id", "category", "prompt"])


def load_prompts(source: str | Path = "spec-bench", n: int | None = None, seed: int = 0,
                 categories: list[str] | None = None) -> pd.DataFrame:
    """Prompts for decoding studies as a DataFrame ``prompt_id, category, prompt``.

    Args:
        source: ``"spec-bench"`` (``../shared/data/spec_bench/question.jsonl``), a path to a
            Spec-Bench-style JSONL (fields ``question_id``, ``category``, ``turns``; the first turn is
            the prompt), ``"mmlu"`` (test questions formatted with their choices) or ``"wikitext"``
            (passages of ~64 words from the WikiText-2 test split, to be continued).
        n: keep ``n`` prompts, sampled stratified by category with ``seed`` (all when ``None``).
        categories: keep only these categories.

    Raises:
        FileNotFoundError; DataFormatError (an empty file, a JSONL line that is not JSON or lacks a
        field, a first turn that is not text); ValueError (unknown categories, ``n < 1``).
    """
    if source == "mmlu":
        q = load_mmlu(split="test")
        prompts = [f"{r.question}\n" + "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(r.choices))
                   for r in q.itertuples()]
        df = pd.DataFrame({"prompt_id": range(len(q)), "category": "mmlu/" + q["subject"], "prompt": prompts})
    elif source == "wikitext":
        words = load_text("wikitext-2", "test").split()
        chunks = [" ".join(words[i:i + 64]) for i in range(0, len(words) - 64, 256)]
        df = pd.DataFrame({"prompt_id": range(len(chunks)), "category": "wikitext", "prompt": chunks})
    else:
        if source == "spec-bench":
            shared = shared_data_dir()
            path = shared / "spec_bench" / "question.jsonl" if shared else Path("question.jsonl")
        else:
            path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"prompt file {path} not found; pass a Spec-Bench JSONL path, 'mmlu' or 'wikitext'")
        df = _read_spec_bench(path)
    if categories is not None:
        unknown = sorted(set(categories) - set(df["category"]))
        if unknown:
            raise ValueError(f"prompt categories {unknown} are not in {source!r} (it has "
                             f"{sorted(df['category'].unique())[:8]}...)." + did_you_mean(unknown[0], df["category"].unique()))
        df = df[df["category"].isin(categories)]
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
        raise ValueError(f"n={n!r} must be an integer >= 1 (prompts to keep), or None for all")
    if n is not None and n < len(df):
        # round-robin over categories in a seeded random order within each: balanced and stratified
        rng = np.random.default_rng(seed)
        df = df.assign(_rank=0)
        for idx in df.groupby("category", sort=True).groups.values():
            df.loc[idx, "_rank"] = rng.permutation(len(idx))
        df = df.sort_values(["_rank", "category"], kind="stable").head(n).drop(columns="_rank")
        df = df.sort_values(["category", "prompt_id"], kind="stable")
    return df.reset_index(drop=True)
