"""benchmarks/results_page.py: the committed RESULTS.md is what the script writes from results/index.yaml, every
index entry's raw file exists, agrees with its provenance and extracts; each extractor on a hand-made input."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from benchmarks import results_page as rp

ROOT = Path(__file__).resolve().parents[1]
_, TABLES = rp.load_index(rp.INDEX)


def test_committed_page_is_what_the_script_writes():
    assert rp.main(["--check"]) == 0, "run: python -m benchmarks.results_page"


def test_page_at_most_200_lines():
    text = rp.PAGE.read_text()
    assert text == rp.build_page() and len(text.splitlines()) <= rp.MAX_LINES == 200


@pytest.mark.parametrize("t", TABLES, ids=[t["file"] for t in TABLES])
def test_every_entry_exists_agrees_and_extracts(t):
    path = rp.INDEX.parent / t["file"]
    assert path.is_file(), f"index entry names {path}, which is not committed"
    rp.check_provenance(t, rp.raw_provenance(path, t["kind"]))
    df = rp.EXTRACTORS[t["kind"]](path, **(t.get("options") or {}))
    assert len(df) >= 1 and len(df.columns) >= 2
    assert all(isinstance(v, str) for v in df.to_numpy().ravel())
    assert (df.to_numpy() != "").sum() >= len(df)  # every row holds at least one figure


def test_every_commit_is_in_the_history():
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                             text=True, check=False)
    if shallow.stdout.strip() != "false":
        pytest.skip("needs a full git clone")
    for t in TABLES:
        sha = str(t["commit"]).split()[0]
        ok = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True,
                            check=False)
        assert ok.returncode == 0, f"{t['file']}: commit {sha} is not in this repository"


# ------------------------------------------------------------------------------------------- extractors
def _write(tmp_path, name, obj) -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_engine_steps(tmp_path):
    rows = [{"model": "m", "impl": "bf16", "batch": 1, "ms": 4.0, "floor_ms": 3.0},
            {"model": "m", "impl": "bf16", "batch": 8, "ms": 5.0, "floor_ms": 3.5},
            {"model": "m", "impl": "bf16", "verify_T": 3, "ms": 4.4, "floor_ms": 3.0},
            {"model": "m", "impl": "w4", "batch": 1, "ms": 2.0, "floor_ms": 1.0},
            {"model": "m", "impl": "w4", "batch": 8, "ms": 6.25, "floor_ms": 1.2},
            {"model": "m", "impl": "w4", "verify_T": 3, "ms": 2.2, "floor_ms": 1.0},
            {"model": "m", "impl": "w4", "mma_best": {}},           # routing record, no timing
            {"model": "other", "impl": "bf16", "batch": 1, "ms": 9.0, "floor_ms": 1.0}]
    df = rp.engine_steps(_write(tmp_path, "e.json", {"engine": rows}), models=["m"], labels={"w4": "W4A16"})
    assert list(df.columns) == ["model", "variant", "B=1", "B=8", "verify T=3"]
    assert df.values.tolist() == [
        ["m", "bf16 ms / floor", "4.000 / 3.000", "5.000 / 3.500", "4.400 / 3.000"],
        ["m", "W4A16 ms / floor", "2.000 / 1.000", "6.250 / 1.200", "2.200 / 1.000"],
        ["m", "W4A16 speedup over bf16", "2.00x", "0.80x", "2.00x"]]
    with pytest.raises(ValueError, match="no timed rows"):
        rp.engine_steps(_write(tmp_path, "e.json", {"engine": rows}), models=["absent"])


def test_engine_layers(tmp_path):
    rows = [{"model": "m", "call": "qkv", "M": 32, "impl": "mma", "us": 13.31, "floor_us": 1.89},
            {"model": "m", "call": "qkv", "M": 32, "impl": "cublas_bf16", "us": 10.93, "floor_us": 7.11},
            {"model": "m", "call": "qkv", "M": 32, "impl": "tinygemm", "us": 44.1, "floor_us": 1.89},
            {"model": "m", "call": "qkv", "M": 32, "impl": "mma_timings", "timings": []}]
    df = rp.engine_layers(_write(tmp_path, "l.json", {"layers": rows}), labels={"mma": "W4A16"})
    assert df.values.tolist() == [["m", "qkv", "13.3 / 1.9", "10.9 / 7.1"]]
    assert list(df.columns)[2:] == ["W4A16 M=32: us / floor", "cublas_bf16 M=32: us / floor"]


def test_engine_spec(tmp_path):
    base = {"target": "bf16", "k": 4, "c": 0.1667, "target_ms": 3.69686, "verify_cost": 1.1207}
    rows = [{**base, "alpha": 0.6, "realized_speedup": 1.2, "theoretical_speedup": 1.6, "theory_with_verify_cost": 1.5},
            {**base, "alpha": 0.8, "realized_speedup": 1.75, "theoretical_speedup": 2.0}]  # no verify-cost theory
    df = rp.engine_spec(_write(tmp_path, "s.json", {"spec": rows}))
    assert df.to_dict("records") == [{"target": "bf16", "k": "4", "target step ms": "3.697", "c": "0.167",
                                      "verify cost": "1.12", "alpha 0.6: speedup / theory": "1.20 / 1.50",
                                      "alpha 0.8: speedup / theory": "1.75 / 2.00"}]


def test_run_all(tmp_path):
    d = {"prefill_m": [{"impl": "engine_bf16", "tokens": 512, "ms": 2.0, "flops": 1e12, "compute_floor_ms": 1.5,
                        "memory_floor_ms": 1.6}],
         "decode_m": [{"impl": "engine_bf16", "batch": 1, "ms_per_token": 3.65, "bf16_floor_ms": 3.42}]}
    p = _write(tmp_path, "r.json", d)
    assert rp.run_all(p).values.tolist() == [["m", "engine_bf16", "512", "2.00 / 1.60", "500"]]
    assert rp.run_all(p, part="decode").values.tolist() == [["m", "engine_bf16", "1", "3.65 / 3.42"]]
    with pytest.raises(ValueError, match="prefill"):
        rp.run_all(p, part="spec")


def test_markdown_table(tmp_path):
    text = ("# a log line | with a pipe\n| step | kl |\n|---|---|\n| 0 | 53 |\n\nprose\n"
            "| draft | T | alpha |\n|---|---|---|\n| int8 | 0 | 0.974 |\n| int8 | 0.7 | 0.978 |\n| int4 | 0 | 0.755 |\n")
    p = _write(tmp_path, "t.log", text)
    df = rp.markdown_table(p, match=["alpha"], columns={"draft": "draft", "alpha": "a"}, where={"T": [0]})
    assert df.values.tolist() == [["int8", "0.974"], ["int4", "0.755"]] and list(df.columns) == ["draft", "a"]
    assert rp.markdown_table(p).values.tolist() == [["0", "53"]]
    with pytest.raises(ValueError, match="no Markdown table"):
        rp.markdown_table(p, match=["tau"])
    with pytest.raises(KeyError, match="it has"):
        rp.markdown_table(p, match=["alpha"], columns=["tau"])


def test_json_rows(tmp_path):
    d = {"a": {"rows": [{"name": "x", "v": 0.123456, "ok": True, "n": 14042, "e": None},
                        {"name": "y", "v": 2021071.5, "ok": False, "n": 3, "e": float("nan")}]}}
    p = _write(tmp_path, "j.json", d)
    df = rp.json_rows(p, key="a.rows", columns={"name": "name", "v": "value", "ok": "ran", "n": "n", "e": "e"})
    assert df.values.tolist() == [["x", "0.1235", "yes", "14042", ""], ["y", "2.021e+06", "no", "3", ""]]
    df = rp.json_rows(p, key="a.rows", columns=["name", "v"], formats={"v": 2}, where={"name": ["y"]})
    assert df.values.tolist() == [["y", "2021071.50"]]
    assert rp.json_rows(_write(tmp_path, "o.json", {"s": 60.62, "n": 2})).values.tolist() == [["60.62", "2"]]


def test_results_store(tmp_path):
    from workbench.results import save_results

    prov = {"device": "cpu", "git_commit": "abc1234", "start_time": "2026-12-06T10:00:00+00:00"}
    save_results(pd.DataFrame({"config": ["a", "b"], "ttft_ms": [12.345, np.nan]}), "study_x", prov, root=tmp_path)
    p = tmp_path / "study_x.parquet"
    df = rp.results_store(p, columns={"config": "config", "ttft_ms": "TTFT ms"}, formats={"ttft_ms": 1})
    assert df.values.tolist() == [["a", "12.3"], ["b", ""]]
    raw = rp.raw_provenance(p, "results_store")
    assert raw == {"date": "2026-12-06T10:00:00+00:00", "device": "cpu", "commit": "abc1234"}
    entry = {"file": "study_x.parquet", "date": "2026-12-06", "device": "CPU (2 cores)", "commit": "abc1234"}
    rp.check_provenance(entry, raw)
    with pytest.raises(ValueError, match="date '2026-12-05'"):
        rp.check_provenance({**entry, "date": "2026-12-05"}, raw)


def test_sim_vs_real_csv(tmp_path):
    lines = ["metric,real,sim,err_pct,drift_pct,warning"]
    for name, real, sim, warn in [("mean_ttft_ms", 100, 110, False), ("p50_tpot_ms", 80, 40, True),
                                  ("p99_ttft_ms", 200, 150, False), ("mean_tpot_ms", 80, 60, True),
                                  ("p99_tpot_ms", 90, 90, False)]:
        lines.append(f"{name},{real},{sim},{(sim / real - 1) * 100},-2.5,{warn}")
    df = rp.sim_vs_real_csv(_write(tmp_path, "c.csv", "\n".join(lines)), model="m", rate=0.3)
    assert df.to_dict("records") == [{
        "model": "m", "rate req/s": "0.30", "mean TTFT ms: real / sim": "100.0 / 110.0 (+10.0%)",
        "p99 TTFT ms: real / sim": "200.0 / 150.0 (-25.0%)", "mean TPOT ms: real / sim": "80.0 / 60.0 (-25.0%!)",
        "p99 TPOT ms: real / sim": "90.0 / 90.0 (+0.0%)", "largest error": "p50 TPOT -50.0%"}]


def test_pd_goodput(tmp_path):
    rows = []
    for label, policy, att in [("colocated x2", "colocated", (1.0, 0.95, 0.5)),
                               ("chunked x2 budget 512", "chunked", (1.0, 0.99, 0.91)),
                               ("disaggregated 1P+1D link 450", "disaggregated", (0.8, 0.95, 0.2))]:
        rows += [{"label": label, "policy": policy, "n_gpus": 2, "rate": r, "slo": "S", "costs": "roofline",
                  "slo_attainment": a} for r, a in zip((10.0, 20.0, 30.0), att)]
    df = rp.pd_goodput(_write(tmp_path, "g.json", {"rows": rows}))
    assert df.to_dict("records") == [{"costs": "roofline", "SLO": "S", "GPUs": "2", "colocated": "20",
                                      "chunked 512": ">= 30", "disaggregated": "1P+1D: 20"}]
    assert rp.pd_goodput(_write(tmp_path, "g.json", {"rows": rows}), min_attainment=0.99)["colocated"][0] == "10"


def _cell(t0: int, t1: int) -> dict:
    ex = {"iopub.execute_input": f"2026-12-01T15:02:{t0:02d}.000Z", "shell.execute_reply": f"2026-12-01T15:02:{t1:02d}.000Z"}
    return {"cell_type": "code", "metadata": {"execution": ex}}


def test_make_reports_log(tmp_path):
    _write(tmp_path, "00_a.ipynb", {"cells": [_cell(0, 2), _cell(3, 8), {"cell_type": "markdown", "metadata": {}}]})
    log = ("== notebooks/00_a.ipynb\n[NbConvertApp] Converting\n   notebooks/00_a.ipynb took 9 s\n"
           "== notebooks/01_b.ipynb\nFAILED notebooks/01_b.ipynb\n   notebooks/01_b.ipynb took 4 s\nEXIT 0 total 13 s\n")
    df = rp.make_reports_log(_write(tmp_path, "make_reports.log", log))
    assert df.values.tolist() == [["00_a", "9", "yes", "5"], ["01_b", "4", "no", ""], ["total", "13", "", ""]]


# ------------------------------------------------------------------------------------------- index and page
def _index(tmp_path, **change) -> Path:
    (tmp_path / "r.json").write_text(json.dumps({"env": {"date_utc": "2026-12-04T21:14:32+00:00", "device": "NVIDIA H200"},
                                                 "rows": [{"x": 1.5, "y": "a"}]}))
    t = {"study": "s", "engine_path": "E", "title": "T", "file": "r.json", "kind": "json_rows", "date": "2026-12-04",
         "device": "NVIDIA H200", "commit": "abc1234", "command": "python x.py", "provenance_from": "raw",
         "options": {"key": "rows"}, **change}
    p = tmp_path / "index.yaml"
    p.write_text(yaml.safe_dump({"sections": {"s": "Section"}, "tables": [t]}, sort_keys=False))
    return p


def test_page_from_a_small_index(tmp_path):
    text = rp.build_page(_index(tmp_path), tmp_path / "RESULTS.md")
    assert text.startswith(rp.HEADER) and text.endswith(
        "\n## Section\n\n**E**: T\n| x | y |\n|---|---|\n| 1.5 | a |\n\n"
        "2026-12-04; NVIDIA H200; commit abc1234; `python x.py`; [r.json](r.json)\n")
    out = tmp_path / "RESULTS.md"
    assert rp.main(["--index", str(_index(tmp_path)), "--out", str(out), "--check"]) == 1  # no page yet
    assert rp.main(["--index", str(_index(tmp_path)), "--out", str(out)]) == 0
    assert rp.main(["--index", str(_index(tmp_path)), "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("1.5", "1.6"))
    assert rp.main(["--index", str(_index(tmp_path)), "--out", str(out), "--check"]) == 1
    hidden = rp.build_page(_index(tmp_path, on_page=False), out)
    assert hidden == rp.HEADER + "\n"


@pytest.mark.parametrize("change, match", [
    ({"kind": "json_row"}, "did you mean 'json_rows'"), ({"comand": "x"}, "did you mean 'command'"),
    ({"study": "t"}, "not under sections"), ({"date": "Dec 4"}, "YYYY-MM-DD"), ({"commit": ""}, "missing"),
    ({"provenance_from": "memory"}, "not one of"), ({"command": "`x`"}, "backticks"),
    ({"device": "NVIDIA H100"}, "disagrees with the raw file"), ({"date": "2026-12-05"}, "disagrees"),
    ({"file": "absent.json"}, "no file"), ({"options": {"key": "rows", "colums": ["x"]}}, "unexpected keyword"),
    ({"options": {"key": "rows", "columns": ["z"]}}, "no column")])
def test_bad_index_entries_name_the_fix(tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        rp.build_page(_index(tmp_path, **change), tmp_path / "RESULTS.md")


def test_page_over_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(rp, "MAX_LINES", 12)
    with pytest.raises(ValueError, match="over 12"):
        rp.build_page(_index(tmp_path), tmp_path / "RESULTS.md")
