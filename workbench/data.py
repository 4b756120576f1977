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
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "DataFormatError",
    "load_mmlu",
    "load_prompts",
    "load_text",
    "read_mmlu_csv",
    "sample_mmlu",
    "shared_data_dir",
]

LETTERS = "ABCD"


class DataFormatError(ValueError):
    """A data file is malformed; the message names the file and the line."""


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


def read_mmlu_csv(path: str | Path, subject: str | None = None, split: str | None = None) -> pd.DataFrame:
    """Read one MMLU CSV in either layout.

    Layout A (original release): no header; columns question, A, B, C, D, answer letter.
    Layout B (``../shared/data/mmlu``): header ``question,choice0,choice1,choice2,choice3,answer``,
    answer an index 0-3.

    Returns a DataFrame with columns ``subject`` (str), ``question`` (str), ``choices`` (list of 4
    str), ``answer`` (int 0-3), ``split`` (str).

    Raises:
        DataFormatError: a row without 6 fields or with an answer outside A-D / 0-3; the message gives
            the file and the 1-based line number.
    """
    path = Path(path)
    if subject is None or split is None:
        stem = path.stem  # e.g. abstract_algebra_test
        s_subject, _, s_split = stem.rpartition("_")
        subject = subject or s_subject or stem
        split = split or s_split
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header_seen = False
        for i, rec in enumerate(reader):
            line = reader.line_num
            if i == 0 and [c.strip().lower() for c in rec] == ["question", "choice0", "choice1", "choice2",
                                                               "choice3", "answer"]:
                header_seen = True
                continue
            if not rec or all(not c.strip() for c in rec):
                continue
            if len(rec) != 6:
                raise DataFormatError(f"{path}:{line}: expected 6 fields (question, 4 choices, answer), "
                                      f"got {len(rec)}")
            ans = rec[5].strip()
            if header_seen and ans in {"0", "1", "2", "3"}:
                idx = int(ans)
            elif not header_seen and ans.upper() in LETTERS and len(ans) == 1:
                idx = LETTERS.index(ans.upper())
            elif ans in {"0", "1", "2", "3"}:
                idx = int(ans)
            elif ans.upper() in LETTERS and len(ans) == 1:
                idx = LETTERS.index(ans.upper())
            else:
                raise DataFormatError(f"{path}:{line}: answer {ans!r} is neither a letter A-D nor an index 0-3")
            rows.append((subject, rec[0], [c for c in rec[1:5]], idx, split))
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


def load_mmlu(source: str | Path | None = None, split: str = "test",
              subjects: list[str] | None = None) -> pd.DataFrame:
    """Load MMLU (Hendrycks et al. 2021, arXiv 2009.03300) as a tidy DataFrame.

    Args:
        source: a folder holding ``<split>/<subject>_<split>.csv`` files (either layout), or ``"hf"``
            for ``cais/mmlu``; ``None`` tries ``$WORKBENCH_MMLU_DIR``, ``../shared/data/mmlu``, then HF.
        split: ``"test"`` (14,042 rows), ``"dev"`` (285 rows: the 5-shot exemplars) or ``"val"``.
        subjects: keep only these subjects (underscore names such as ``"abstract_algebra"``).

    Returns:
        Columns ``subject, question, choices (list[str] x4), answer (int 0-3), split``, sorted by
        subject with each file's row order kept.

    Raises:
        FileNotFoundError: the folder has no CSVs for ``split`` (message names the folder and fix).
        DataFormatError: a malformed row (file and line named).
    """
    if source == "hf" or (source is None and _mmlu_local_root() is None):
        df = _load_mmlu_hf(split)
    else:
        root = Path(source) if source is not None else _mmlu_local_root()
        folder = root / split if (root / split).is_dir() else root
        files = sorted(folder.glob(f"*_{split}.csv"))
        if not files:
            raise FileNotFoundError(f"no MMLU files '*_{split}.csv' in {folder}; expected the layout "
                                    f"<root>/{split}/<subject>_{split}.csv (original data.tar or "
                                    "header-and-index CSVs)")
        df = pd.concat([read_mmlu_csv(f, split=split) for f in files], ignore_index=True)
    if subjects is not None:
        unknown = sorted(set(subjects) - set(df["subject"]))
        if unknown:
            raise ValueError(f"unknown MMLU subjects {unknown}; known: {sorted(df['subject'].unique())[:5]}...")
        df = df[df["subject"].isin(subjects)].reset_index(drop=True)
    return df


def sample_mmlu(df: pd.DataFrame, n_per_subject: int | None, seed: int = 0) -> pd.DataFrame:
    """Stratified sample: ``n_per_subject`` questions from each subject (all when fewer or ``None``).

    Sampling is without replacement with ``numpy.random.default_rng(seed)``; the result keeps a
    stable ``qid`` column (``<subject>/<row in the full split>``) for joining runs.
    """
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
        FileNotFoundError: no such file / no local copy and no ``datasets``; ValueError: empty text.
    """
    p = Path(source)
    if source != "wikitext-2" or p.is_file():
        if not p.is_file():
            raise FileNotFoundError(f"text file {p} does not exist; pass 'wikitext-2' or a path to a .txt file")
        text = p.read_text(encoding="utf-8")
    else:
        shared = shared_data_dir()
        local = shared / "wikitext-2" / f"{split}.txt" if shared else None
        if local is not None and local.is_file():
            text = local.read_text(encoding="utf-8")
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
        FileNotFoundError / DataFormatError (a JSONL line that is not JSON or lacks a field).
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
        rows = []
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    rows.append((rec["question_id"], rec["category"], rec["turns"][0]))
                except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
                    raise DataFormatError(f"{path}:{line_no}: not a Spec-Bench record ({type(e).__name__}: {e})") from None
        df = pd.DataFrame(rows, columns=["prompt_id", "category", "prompt"])
    if categories is not None:
        df = df[df["category"].isin(categories)]
    if n is not None and n < len(df):
        # round-robin over categories in a seeded random order within each: balanced and stratified
        rng = np.random.default_rng(seed)
        df = df.assign(_rank=0)
        for idx in df.groupby("category", sort=True).groups.values():
            df.loc[idx, "_rank"] = rng.permutation(len(idx))
        df = df.sort_values(["_rank", "category"], kind="stable").head(n).drop(columns="_rank")
        df = df.sort_values(["category", "prompt_id"], kind="stable")
    return df.reset_index(drop=True)
