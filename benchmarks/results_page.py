"""The current-state page ``benchmarks/RESULTS.md``, generated from the raw files named in ``results/index.yaml``.

    python -m benchmarks.results_page            # rewrite benchmarks/RESULTS.md
    python -m benchmarks.results_page --check    # exit 1 when the committed page differs from what this writes

The index has ``sections`` (study -> section title, in page order) and ``tables``, one block per table: ``study``,
``engine_path`` (which engine and path produced the figures), ``title``, ``file`` (under ``benchmarks/results/``),
``kind`` (a name in :data:`EXTRACTORS`), ``date``, ``device``, ``commit``, ``command``, ``provenance_from`` (where
those four came from: ``raw`` the file itself, ``README`` its folder's README, ``history`` the narrative in
``results/history/README.md``, ``git`` the commit that added the file, ``log`` the log printed beside it),
``options`` (keyword arguments of the extractor) and ``on_page`` (false: checked, but not shown; the page holds at
most :data:`MAX_LINES` lines). Adding a table is one block of YAML; a new raw format is one extractor
``(path, **options) -> DataFrame of strings`` in :data:`EXTRACTORS`. Where the raw file records its own date,
device or commit (``env``, ``meta``, a results store's runs), the index must agree with it. A figure whose floor
(roofline bound) is in the raw file is written ``figure / floor``.
"""
from __future__ import annotations

import argparse
import csv
import difflib
import json
import math
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
INDEX = HERE / "results" / "index.yaml"
PAGE = HERE / "RESULTS.md"
MAX_LINES = 200
OPTIONAL = ("options", "on_page")
FIELDS = ("study", "engine_path", "title", "file", "kind", "date", "device", "commit", "command",
          "provenance_from")
SOURCES = ("raw", "README", "history", "git", "log")


def _num(x, nd: int | None = 2) -> str:
    """``x`` with ``nd`` decimals (for ``nd=None``: 4 significant digits, integers whole); '' for None / NaN,
    yes / no for booleans, anything else as text."""
    if isinstance(x, np.generic):
        x = x.item()
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not isinstance(x, (int, float)) or (nd is None and isinstance(x, int)):
        return str(x)
    return f"{x:.4g}" if nd is None else f"{x:.{nd}f}"


def _pair(x, floor, nd: int) -> str:
    """A figure and its floor, ``"3.685 / 3.108"``."""
    return f"{_num(x, nd)} / {_num(floor, nd)}"


def _json(path: Path):
    return json.loads(Path(path).read_text())


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).fillna("").astype(str)


# ---------------------------------------------------------------------------------------------- extractors
def engine_steps(path, key: str = "engine", models=None, baseline: str = "bf16", labels=None,
                 nd: int = 3) -> pd.DataFrame:
    """Engine step times from ``check_w4_mma --parts engine`` (``key="engine"``) or ``bench_decode.bench_rows_model``
    (``key="rows_<model>"``): rows ``{model, impl, batch | verify_T, ms, floor_ms}``. One row per (model, impl),
    a column per decode batch ``B=n`` and verify step ``verify T=n``, cells ``ms / floor_ms``; then one row per
    non-baseline impl with ``baseline ms / impl ms`` (its speedup)."""
    labels = labels or {}
    rows = [r for r in _json(path)[key] if "ms" in r and (models is None or r["model"] in models)]
    if not rows:
        raise ValueError(f"{path}: no timed rows under {key!r} for models {models}")
    step = [(0, r["batch"]) if "batch" in r else (1, r["verify_T"]) for r in rows]
    cols = {s: (f"B={s[1]}" if s[0] == 0 else f"verify T={s[1]}") for s in sorted(set(step))}
    cell: dict = {}
    for r, s in zip(rows, step):
        cell.setdefault((r["model"], r["impl"]), {})[s] = r
    out = []
    for model in dict.fromkeys(m for m, _ in cell):
        mine = {impl: by for (m, impl), by in cell.items() if m == model}
        out += [{"model": model, "variant": f"{labels.get(impl, impl)} ms / floor",
                 **{cols[s]: _pair(r["ms"], r["floor_ms"], nd) for s, r in by.items()}} for impl, by in mine.items()]
        base = mine.get(baseline, {})
        out += [{"model": model, "variant": f"{labels.get(impl, impl)} speedup over {labels.get(baseline, baseline)}",
                 **{cols[s]: f"{base[s]['ms'] / r['ms']:.2f}x" for s, r in by.items() if s in base}}
                for impl, by in mine.items() if impl != baseline and base]
    return _frame(out)[["model", "variant", *cols.values()]]


def engine_layers(path, key: str = "layers", impls=("mma", "cublas_bf16"), models=None, ms=None, labels=None,
                  nd: int = 1) -> pd.DataFrame:
    """Per-layer matmul times from ``check_w4_mma --parts layers``: rows ``{model, call, M, impl, us, floor_us}``.
    One row per (model, call), a column per (M, impl) with ``us / floor_us`` (the floor of that impl's bytes)."""
    labels = labels or {}
    rows = [r for r in _json(path)[key] if "us" in r and r["impl"] in impls
            and (models is None or r["model"] in models) and (ms is None or r["M"] in ms)]
    if not rows:
        raise ValueError(f"{path}: no rows under {key!r} for impls {list(impls)}")
    cols = {(m, i): f"{labels.get(i, i)} M={m}: us / floor" for m in sorted({r["M"] for r in rows}) for i in impls}
    cell: dict = {}
    for r in rows:
        cell.setdefault((r["model"], r["call"]), {})[cols[(r["M"], r["impl"])]] = _pair(r["us"], r["floor_us"], nd)
    out = _frame([{"model": m, "call": c, **v} for (m, c), v in cell.items()])
    return out[["model", "call", *[c for c in cols.values() if c in out]]]


def engine_spec(path, key: str = "spec") -> pd.DataFrame:
    """Speculative decoding at synthetic acceptance from ``check_w4_mma --parts spec`` / ``run_all``: rows
    ``{target, alpha, k, c, verify_cost, target_ms, realized_speedup, theory_with_verify_cost | theoretical_speedup}``.
    One row per (target, k); a column per alpha with ``realized / theory``, both as the benchmark computed them
    (theory: Leviathan et al. 2023, arXiv 2211.17192, Theorem 3.8, with the measured verify cost in place of one
    target step where the file has ``theory_with_verify_cost``)."""
    cell: dict = {}
    for r in _json(path)[key]:
        theory = r.get("theory_with_verify_cost", r["theoretical_speedup"])
        k = (r.get("target", ""), r["k"])
        cell.setdefault(k, {"target": k[0], "k": str(k[1]), "target step ms": _num(r["target_ms"], 3),
                            "c": _num(r["c"], 3), "verify cost": _num(r["verify_cost"], 2)})
        cell[k][f"alpha {r['alpha']}: speedup / theory"] = f"{_num(r['realized_speedup'])} / {_num(theory)}"
    return _frame(list(cell.values()))


def run_all(path, part: str = "prefill", models=None) -> pd.DataFrame:
    """``benchmarks/run_all.py`` JSON: ``part="prefill"`` (``prefill_<model>`` rows: ms against max(compute,
    memory) floor, achieved TFLOP/s) or ``part="decode"`` (``decode_<model>`` rows: ms per token / floor)."""
    if part not in ("prefill", "decode"):
        raise ValueError(f"part={part!r}: use 'prefill' or 'decode'")
    d = _json(path)
    out = []
    for key in [k for k in d if k.startswith(part + "_")]:
        model = key[len(part) + 1:]
        if models is not None and model not in models:
            continue
        for r in d[key]:
            if part == "prefill":
                floor = max(r["compute_floor_ms"], r["memory_floor_ms"])
                out.append({"model": model, "impl": r["impl"], "prompt tokens": r["tokens"],
                            "ms / floor": _pair(r["ms"], floor, 2), "TFLOP/s": _num(r["flops"] / r["ms"] / 1e9, 0)})
            else:
                out.append({"model": model, "impl": r["impl"], "batch": r["batch"],
                            "ms per token / floor": _pair(r["ms_per_token"], r.get("floor_ms", r["bf16_floor_ms"]), 2)})
    return _frame(out)


def _md_tables(text: str) -> list[pd.DataFrame]:
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif block:
            if len(block) >= 2 and set("".join(block[1])) <= set("-: "):
                tables.append(pd.DataFrame([b for b in block[2:] if len(b) == len(block[0])], columns=block[0]))
            block = []
    return tables


def _pick(df: pd.DataFrame, columns, where, path) -> pd.DataFrame:
    """Rows whose column values are in ``where[column]``; the ``columns`` (a list, or a mapping to new headers).
    Raises KeyError naming the file's columns for a column it lacks."""
    names = dict(columns) if isinstance(columns, dict) else {c: c for c in columns or df.columns}
    missing = [c for c in [*(where or {}), *names] if c not in df]
    if missing:
        raise KeyError(f"{path}: no column {missing}; it has {list(df.columns)}")
    for col, keep in (where or {}).items():
        df = df[df[col].astype(str).isin([str(v) for v in keep])]
    df = df[list(names)].rename(columns=names)
    return df.reset_index(drop=True)


def markdown_table(path, match=None, columns=None, where=None) -> pd.DataFrame:
    """A pipe table from a Markdown file or a log that prints one (``quant_table.py``, ``spec_table.py``): the
    first whose header holds every name in ``match``; ``columns`` and ``where`` as in :func:`_pick`."""
    for t in _md_tables(Path(path).read_text(errors="replace")):
        if all(m in t.columns for m in match or []):
            return _pick(t, columns, where, path).astype(str)
    raise ValueError(f"{path}: no Markdown table whose header holds {match}")


def _format(df: pd.DataFrame, formats) -> pd.DataFrame:
    df = df.copy()
    for col, spec in (formats or {}).items():
        df[col] = [_num(v, int(spec)) for v in df[col]]
    return df.map(lambda v: _num(v, None)).astype(str)


def json_rows(path, key=None, columns=None, formats=None, where=None) -> pd.DataFrame:
    """Rows of a JSON file: the list (or the one object) at ``key`` (dotted path; the whole file when None).
    ``columns`` picks and renames fields, ``formats`` gives decimals per field, ``where`` filters rows."""
    d = _json(path)
    for part in (key.split(".") if key else []):
        d = d[part]
    df = pd.DataFrame(d if isinstance(d, list) else [d])
    return _pick(_format(df, formats), columns, where, path)


def results_store(path, columns=None, formats=None, where=None) -> pd.DataFrame:
    """A workbench results store (``<name>.parquet`` and ``<name>.json``) read by
    :func:`workbench.results.load_results`; ``columns`` / ``formats`` / ``where`` as in :func:`json_rows`."""
    from workbench.results import load_results

    path = Path(path)
    return _pick(_format(load_results(path.stem, root=path.parent), formats), columns, where, path)


SIM_METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")


def _metric(name: str) -> str:
    """``"p99_ttft_ms"`` -> ``"p99 TTFT"``."""
    stat, quantity, _unit = name.split("_")
    return f"{stat} {quantity.upper()}"


def sim_vs_real_csv(path, model: str = "", rate=None, metrics=SIM_METRICS) -> pd.DataFrame:
    """Simulator against the real serving loop, ``compare.csv`` of ``pd_gpu.py`` / ``sim_vs_real.py``: rows
    ``{metric, real, sim, err_pct[, model, rate, load, warning]}``. One row per (model, rate), a column per metric
    with ``real / sim (error)``, error = sim / real - 1; ``!`` marks a metric inside the profile's drift; and the
    largest |error| over every metric of the row."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("model", model), r.get("rate", rate), r.get("load", "")), []).append(r)
    out = []
    for (m, rt, load), part in groups.items():
        by = {r["metric"]: r for r in part}
        worst = max(part, key=lambda r: abs(float(r["err_pct"])))
        row = {"model": m, "rate req/s": _num(float(rt), 2) if rt not in (None, "") else "", "load": load}
        for name in metrics:
            r = by[name]
            flag = "!" if r.get("warning") == "True" else ""
            row[f"{_metric(name)} ms: real / sim"] = (
                f"{float(r['real']):.1f} / {float(r['sim']):.1f} ({float(r['err_pct']):+.1f}%{flag})")
        row["largest error"] = f"{_metric(worst['metric'])} {float(worst['err_pct']):+.1f}%"
        out.append(row)
    df = _frame(out)
    return df.drop(columns="load") if not df["load"].astype(bool).any() else df


def pd_goodput(path, min_attainment: float = 0.9, slos=None) -> pd.DataFrame:
    """SLO capacity per deployment from ``pd_goodput.py --json``: per (costs, SLO, GPUs), the highest swept rate
    with at least ``min_attainment`` of requests meeting every SLO (:func:`workbench.pd.sim.slo_capacity`,
    DistServe's goodput); ``>=`` where it is still met at the highest rate swept. ``slos``: keep only these."""
    from workbench.pd.sim import slo_capacity

    rows = pd.DataFrame(_json(path)["rows"])
    rows = rows if slos is None else rows[rows["slo"].isin(slos)]
    out = []
    for (costs, slo, n), part in rows.groupby(["costs", "slo", "n_gpus"], sort=False):
        cap = slo_capacity(part, min_attainment).set_index("label")["max_rate_at_slo"]
        top = part.groupby("label")["rate"].max()
        row = {"costs": costs, "SLO": slo, "GPUs": str(n)}
        for label, c in cap.items():
            pol = part.loc[part["label"] == label, "policy"].iloc[0]
            text = (">= " if c >= top[label] else "") + _num(c, 0)
            if pol == "disaggregated":
                split = re.search(r"\d+P\+\d+D", label).group(0)
                row[pol] = (row[pol] + "; " if pol in row else "") + f"{split}: {text}"
            else:
                budget = re.search(r"budget (\d+)", label)
                row[f"{pol} {budget.group(1)}" if budget else pol] = text
        out.append(row)
    return _frame(out)


def _cell_seconds(nb_path: Path) -> float | None:
    """The longest cell of an executed notebook, from ``metadata.execution`` (nbclient's timestamps)."""
    if not nb_path.exists():
        return None
    best = None
    for c in _json(nb_path).get("cells", []):
        ex = c.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            t0, t1 = (pd.Timestamp(ex[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
            best = max(best or 0.0, (t1 - t0).total_seconds())
    return best


def make_reports_log(path) -> pd.DataFrame:
    """The log of the Makefile's ``reports`` loop: ``== notebooks/X.ipynb``, ``FAILED ...``, ``... took N s``,
    ``EXIT ... total N s``. One row per notebook with its seconds, whether it ran, and its longest cell when
    the executed notebook lies beside the log; then the total."""
    out, cur = [], None
    for line in Path(path).read_text().splitlines():
        if line.startswith("== "):
            cur = {"notebook": Path(line[3:].strip()).stem, "seconds": "", "ok": "yes", "longest cell s": ""}
            out.append(cur)
            longest = _cell_seconds(Path(path).parent / Path(line[3:].strip()).name)
            cur["longest cell s"] = _num(longest, 0)
        elif line.startswith("FAILED") and cur is not None:
            cur["ok"] = "no"
        elif (m := re.search(r"took (\d+) s", line)) and cur is not None:
            cur["seconds"] = m.group(1)
        elif m := re.search(r"total (\d+) s", line):
            out.append({"notebook": "total", "seconds": m.group(1), "ok": "", "longest cell s": ""})
    return _frame(out)


EXTRACTORS = {f.__name__: f for f in (engine_steps, engine_layers, engine_spec, run_all, markdown_table, json_rows,
                                      results_store, sim_vs_real_csv, pd_goodput, make_reports_log)}


# ---------------------------------------------------------------------------------------------- index and page
def _did_you_mean(name: str, known) -> str:
    near = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def load_index(path: Path = INDEX) -> tuple[dict, list[dict]]:
    """``(sections, tables)`` of the index, checked: every table has the fields of :data:`FIELDS` (and at most
    :data:`OPTIONAL` besides), a ``kind`` in :data:`EXTRACTORS`, a ``study`` in ``sections``, a ``date`` that starts
    YYYY-MM-DD and ``provenance_from`` among :data:`SOURCES`. Raises ValueError (TypeError for a non-boolean
    ``on_page``) naming the entry and the fix."""
    doc = yaml.safe_load(Path(path).read_text()) or {}
    sections, tables = doc.get("sections") or {}, doc.get("tables") or []
    for i, t in enumerate(tables):
        where = f"{path}: table {i + 1} ({t.get('file', '?')})"
        for k in t:
            if k not in (*FIELDS, *OPTIONAL):
                raise ValueError(f"{where}: unknown field {k!r}{_did_you_mean(k, (*FIELDS, *OPTIONAL))}")
        missing = [k for k in FIELDS if not str(t.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{where}: missing {missing}; every table needs {list(FIELDS)}")
        if t["kind"] not in EXTRACTORS:
            raise ValueError(f"{where}: no extractor {t['kind']!r}{_did_you_mean(t['kind'], EXTRACTORS)}; "
                             "a new raw format needs a function in benchmarks/results_page.py EXTRACTORS")
        if t["study"] not in sections:
            raise ValueError(f"{where}: study {t['study']!r} is not under sections{_did_you_mean(t['study'], sections)}; "
                             "add it there with its section title")
        if not isinstance(t.get("on_page", True), bool):
            raise TypeError(f"{where}: on_page must be true or false, not {t['on_page']!r}")
        if "`" in str(t["command"]):
            raise ValueError(f"{where}: the command is shown as inline code; write it without backticks")
        if not re.match(r"\d{4}-\d{2}-\d{2}", str(t["date"])):
            raise ValueError(f"{where}: date {t['date']!r} must start YYYY-MM-DD")
        src = t["provenance_from"] if isinstance(t["provenance_from"], list) else [t["provenance_from"]]
        bad = [s for s in src if s not in SOURCES]
        if bad:
            raise ValueError(f"{where}: provenance_from {bad} is not one of {list(SOURCES)}")
    return sections, tables


def raw_provenance(path: Path, kind: str) -> dict:
    """What a raw file records of its own ``date``, ``device`` and ``commit`` (``env`` of the benchmark JSONs,
    ``meta`` of ``pd_goodput.py``, the last run of a results store); empty for formats that record none."""
    if kind == "results_store":
        from workbench.results import load_runs

        runs = list(load_runs(path.stem, root=path.parent).values())
        if not runs:
            return {}
        last = runs[-1]
        return {"date": last.get("start_time"), "device": last.get("device"), "commit": last.get("git_commit")}
    if path.suffix != ".json" or not isinstance(d := _json(path), dict):
        return {}
    env, meta = d.get("env") if isinstance(d.get("env"), dict) else {}, d.get("meta") or {}
    return {"date": env.get("date_utc") or meta.get("date"), "device": env.get("device"),
            "commit": meta.get("git_commit")}


def check_provenance(table: dict, raw: dict) -> None:
    """Raises ValueError where the index disagrees with what the raw file says of itself."""
    idx = {k: str(table[k]).lower() for k in ("date", "device", "commit")}
    got = {k: str(v).lower().removesuffix("+dirty") for k, v in raw.items() if v}
    bad = [k for k, v in got.items()
           if (k == "date" and not idx[k].startswith(v[:10])) or (k == "device" and v not in idx[k] and idx[k] not in v)
           or (k == "commit" and not (v.startswith(idx[k]) or idx[k].startswith(v)))]
    if bad:
        raise ValueError(f"index entry {table['file']}: {', '.join(f'{k} {table[k]!r}' for k in bad)} disagrees with "
                         f"the raw file ({', '.join(f'{k} {raw[k]!r}' for k in bad)}); correct the index")


def md_table(df: pd.DataFrame) -> list[str]:
    """GitHub Markdown pipe table of ``df`` (cells as text, ``|`` escaped)."""
    def row(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [row(df.columns), "|" + "---|" * len(df.columns), *[row(r) for r in df.itertuples(index=False)]]


HEADER = """# Benchmark results: where things stand

Generated by `python -m benchmarks.results_page` from the raw files in `results/index.yaml` (edit the index; `--check`
fails when this page is stale). Each table is the latest committed run of what it measures, then its date, device,
commit, command and raw file; `a / b` is a figure and its floor (the roofline bound in the raw file). History until
2026-12-06, newest first: `results/history/README.md`; each run folder's `README.md` holds its calls."""


def build_page(index: Path = INDEX, out: Path = PAGE) -> str:
    """The page's text for ``index``, links relative to ``out``'s folder. Raises ValueError for a bad index entry,
    a raw file that disagrees with its entry, or a page over :data:`MAX_LINES` lines."""
    sections, tables = load_index(index)
    root = Path(index).parent
    lines = HEADER.splitlines()
    for study, heading in sections.items():
        mine = [t for t in tables if t["study"] == study]
        if not mine:
            continue
        if any(t.get("on_page", True) for t in mine):
            lines += ["", f"## {heading}"]
        for t in mine:
            path = root / t["file"]
            if not path.exists():
                raise ValueError(f"index entry {t['file']}: no file {path}; commit the raw file or fix `file`")
            check_provenance(t, raw_provenance(path, t["kind"]))
            try:
                df = EXTRACTORS[t["kind"]](path, **(t.get("options") or {}))
            except (TypeError, KeyError, ValueError) as e:
                raise ValueError(f"index entry {t['file']} ({t['kind']}, options {t.get('options')}): {e}") from e
            if not t.get("on_page", True):
                continue
            src = t["provenance_from"] if isinstance(t["provenance_from"], list) else [t["provenance_from"]]
            link = os.path.relpath(path, Path(out).resolve().parent)
            note = "" if src == ["raw"] else f"; provenance from {' and '.join(src)}"
            # GitHub (cmark-gfm), markdown-it and marked all start a table right under a paragraph line
            lines += ["", f"**{t['engine_path']}**: {t['title']}", *md_table(df), "",
                      f"{t['date']}; {t['device']}; commit {t['commit']}; `{t['command']}`; [{link}]({link}){note}"]
    if len(lines) > MAX_LINES:
        raise ValueError(f"the page would be {len(lines)} lines, over {MAX_LINES}: narrow an entry's options "
                         "(models, where, columns) or set on_page: false on a superseded entry in the index")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed page differs from the generated one")
    p.add_argument("--index", type=Path, default=INDEX)
    p.add_argument("--out", type=Path, default=PAGE)
    a = p.parse_args(argv)
    text = build_page(a.index, a.out)
    if a.check:
        same = a.out.exists() and a.out.read_text() == text
        print(f"{a.out}: {'up to date' if same else 'differs from the generated page; run python -m benchmarks.results_page'}")
        return 0 if same else 1
    a.out.write_text(text)
    print(f"wrote {a.out} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
