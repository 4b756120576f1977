"""The results store: resume, point keys (weights, data, device, version), run history, kills, modes."""

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import workbench
from workbench import results
from workbench.results import collect_provenance, load_results, save_results, sweep

CONFIGS = [{"bits": b} for b in (8, 4, 3, 2)]


def _fn(calls):
    def fn(cfg):
        calls.append(cfg["bits"])
        return {"err": 1.0 / cfg["bits"]}
    return fn


def _prov(sha="a" * 64, data="wikitext-2 test", **kw):
    """A provenance as collect_provenance gives it for a model loaded from a GGUF file ``sha``."""
    model = {"source": "gguf", "path": "/models/m.gguf", "sha256": sha, "dtype": "float32"}
    return {**collect_provenance(seed=0, data={"text": data}), "model": model, **kw}


def test_sweep_resumes_after_interruption(tmp_path):
    calls = []

    def fn(cfg):
        if cfg["bits"] == 3 and not calls.count("crashed"):
            calls.append("crashed")
            raise KeyboardInterrupt  # simulate the user stopping the sweep at the third point
        calls.append(cfg["bits"])
        return {"bits": cfg["bits"], "err": 1.0 / cfg["bits"]}

    with pytest.raises(KeyboardInterrupt):
        sweep("s", CONFIGS, fn, root=tmp_path, progress=False)
    done = pd.read_parquet(tmp_path / "s.parquet")
    assert done["bits"].tolist() == [8, 4]  # finished points were saved one by one
    out = sweep("s", CONFIGS, fn, root=tmp_path, progress=False)
    assert calls == [8, 4, "crashed", 3, 2]  # 8 and 4 were not recomputed
    assert out["bits"].tolist() == [8, 4, 3, 2]
    assert out["err"].tolist() == pytest.approx([1 / 8, 1 / 4, 1 / 3, 1 / 2])


def test_points_on_other_weights_are_recomputed_and_kept(tmp_path):
    calls = []
    p1, p2 = _prov("a" * 64), _prov("b" * 64)
    sweep("s", CONFIGS[:2], _fn(calls), provenance=p1, root=tmp_path, progress=False)
    out = sweep("s", CONFIGS[:2], _fn(calls), provenance=p2, root=tmp_path, progress=False)
    assert calls == [8, 4, 8, 4]  # the old store skipped both points of the second file: [8, 4]
    everything = load_results("s", root=tmp_path)
    assert len(everything) == 4 and everything["model_key"].nunique() == 2
    assert (out["model_key"] == results.identity(p2)["model_key"]).all() and len(out) == 2
    assert load_results("s", root=tmp_path, provenance=p1)["run_id"].unique().tolist() == [p1["run_id"]]
    # where the copy lives is not which weights it holds: a moved cache is a hit
    moved = {**p1, "model": {**p1["model"], "cache_path": "/elsewhere", "note": "reworded"}}
    sweep("s", CONFIGS[:2], _fn(calls), provenance=moved, root=tmp_path, progress=False)
    assert calls == [8, 4, 8, 4]


@pytest.mark.parametrize("change, recomputed", [
    ({"data": {"text": "my own text"}}, True),
    ({"device": "NVIDIA H200"}, True),
    ({"workbench": "0.2.0"}, True),
    # the engine and its kernel settings: a timing made with another kernel set is never reused
    ({"engine": {"name": "workbench", "engine_config": {"disabled_kernels": ["cpu_int4pack"]}}}, True),
    ({"engine": {"name": "vllm", "version": "0.32.0"}}, True),
    ({"model": {"source": "gguf", "path": "/models/m.gguf", "sha256": "a" * 64, "dtype": "bfloat16"}}, True),
    ({"seed": 7, "git_commit": "other", "config": {"note": "x"}}, False),  # not part of a point's identity
])
def test_what_makes_a_point_new(tmp_path, change, recomputed):
    calls = []
    sweep("s", CONFIGS[:1], _fn(calls), provenance=_prov(), root=tmp_path, progress=False)
    sweep("s", CONFIGS[:1], _fn(calls), provenance={**_prov(), **change}, root=tmp_path, progress=False)
    assert calls == ([8, 8] if recomputed else [8])


def test_weights_digest_tells_models_apart(tmp_path):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)
    twin = torch.nn.Linear(64, 64)
    twin.load_state_dict(a.state_dict())
    assert results.weights_digest(a) == results.weights_digest(twin) != results.weights_digest(b)
    assert results.weights_digest(a) != results.weights_digest(copy.deepcopy(a).to(torch.bfloat16))
    big = torch.nn.Linear(1000, 100)  # 100,000 weights > n_sample: only sampled elements count
    before = results.weights_digest(big, n_sample=1000)
    with torch.no_grad():
        big.weight.view(-1)[99_999] += 1.0  # the last element is always sampled
    assert results.weights_digest(big, n_sample=1000) != before
    assert results.weights_digest(object()) is None
    # models without workbench provenance (random init, built in a test) are told apart by it
    calls = []
    sweep("s", CONFIGS[:1], _fn(calls), provenance=collect_provenance(a), root=tmp_path, progress=False)
    sweep("s", CONFIGS[:1], _fn(calls), provenance=collect_provenance(twin), root=tmp_path, progress=False)
    sweep("s", CONFIGS[:1], _fn(calls), provenance=collect_provenance(b), root=tmp_path, progress=False)
    assert calls == [8, 8]


def test_pairs_of_models_are_keyed_by_both():
    torch.manual_seed(0)
    t, d1, d2 = (torch.nn.Linear(8, 8) for _ in range(3))
    keys = [results.identity(collect_provenance({"target": t, "draft": d}))["model_key"] for d in (d1, d2, d1)]
    assert keys[0] == keys[2] != keys[1]
    with pytest.raises(TypeError, match="model= must be a torch.nn.Module"):
        collect_provenance(object())  # e.g. an engine: its points could not be told apart


def test_data_digest_is_content():
    df = pd.DataFrame({"question": ["q1", "q2"], "answer": [0, 3]})
    assert results.data_digest(df) == results.data_digest(df.copy().set_index("answer", drop=False))
    assert results.data_digest(df) != results.data_digest(df.assign(answer=[0, 2]))
    assert results.data_digest("abc") != results.data_digest("abd")
    t = torch.arange(6)
    assert results.data_digest(t) == results.data_digest(t.clone()) != results.data_digest(t.view(2, 3))
    assert results.data_digest({"a": 1, "b": 2}) == results.data_digest({"b": 2, "a": 1})


def test_rows_point_at_the_run_that_computed_them(tmp_path):
    calls = []
    p1 = _prov()
    sweep("s", CONFIGS[:2], _fn(calls), provenance=p1, root=tmp_path, progress=False)
    p2 = _prov(git_commit="later", start_time="2031-01-01T00:00:00+00:00")
    out = sweep("s", CONFIGS, _fn(calls), provenance=p2, root=tmp_path, progress=False)
    assert out["run_id"].tolist() == [p1["run_id"]] * 2 + [p2["run_id"]] * 2
    runs = results.load_runs("s", root=tmp_path)
    assert list(runs) == [p1["run_id"], p2["run_id"]]
    assert runs[p1["run_id"]]["start_time"] == p1["start_time"] != p2["start_time"]
    assert runs[p2["run_id"]]["git_commit"] == "later" and runs[p1["run_id"]]["git_commit"] != "later"
    meta = json.loads((tmp_path / "s.json").read_text())
    assert meta["run_id"] == p2["run_id"] and [r["run_id"] for r in meta["runs"]] == list(runs)
    assert "rows" not in meta  # row counts live in the parquet only


def test_save_results_keeps_earlier_runs(tmp_path):
    p1, p2 = _prov(), _prov()
    save_results(pd.DataFrame({"acc": [0.5]}), "t", p1, root=tmp_path)
    df = load_results("t", root=tmp_path)
    save_results(pd.concat([df, pd.DataFrame({"acc": [0.6]})], ignore_index=True), "t", p2, root=tmp_path)
    out = load_results("t", root=tmp_path)
    assert out["run_id"].tolist() == [p1["run_id"], p2["run_id"]] and out["acc"].tolist() == [0.5, 0.6]
    assert list(results.load_runs("t", root=tmp_path)) == [p1["run_id"], p2["run_id"]]
    assert results.select(out, p1, on=("model_key",))["acc"].tolist() == [0.5, 0.6]  # same model, both rows
    with pytest.raises(ValueError, match="drop the run_id"):
        save_results(pd.DataFrame({"acc": [1.0], "run_id": ["nope"]}), "t", p1, root=tmp_path)
    with pytest.raises(ValueError, match="identity columns"):
        results.select(out, p1, on=("seed",))


def test_fn_may_not_return_store_columns(tmp_path):
    with pytest.raises(ValueError, match="run_id"):
        sweep("s", CONFIGS[:1], lambda c: {"run_id": 1}, root=tmp_path, progress=False)


def test_legacy_store_is_read_and_never_reused(tmp_path):
    pd.DataFrame({"err": [0.125], "config_key": ['{"bits": 8}']}).to_parquet(tmp_path / "s.parquet")
    (tmp_path / "s.json").write_text(json.dumps({"git_commit": "old", "rows": 1}))
    assert load_results("s", root=tmp_path)["run_id"].tolist() == ["legacy"]
    calls = []
    sweep("s", CONFIGS[:1], _fn(calls), provenance=_prov(), root=tmp_path, progress=False)
    assert calls == [8] and len(load_results("s", root=tmp_path)) == 2
    assert results.load_runs("s", root=tmp_path)["legacy"]["git_commit"] == "old"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        sweep("s", CONFIGS[:1], _fn([]), root=tmp_path, progress=False)
    finally:
        os.umask(old)
    for f in ("s.parquet", "s.json"):
        assert (tmp_path / f).stat().st_mode & 0o777 == mode, f  # the old store: always 0o600


def test_concurrent_sweeps_lose_nothing(tmp_path):
    """Two writers of one store: each save re-reads the store under the lock (the old store let the
    second writer overwrite the first one's points: 10 of 20 rows survived)."""
    def run(configs):
        sweep("s", configs, lambda c: time.sleep(0.01) or {"i": c["i"]}, root=tmp_path, progress=False)

    threads = [threading.Thread(target=run, args=([{"i": i} for i in range(k, 20, 2)],)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(load_results("s", root=tmp_path)["i"]) == list(range(20))


KILLED_RUN = r"""
import os, signal, sys
import pyarrow.parquet as pq
from workbench import results

mode, root = sys.argv[1], sys.argv[2]
count = {"n": 0}

def kill_after(real, n):
    def wrapper(*a, **k):
        out = real(*a, **k)
        count["n"] += 1
        if count["n"] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return wrapper

if mode == "in_parquet_write":  # the 3rd point's parquet is in its temp file, not yet renamed
    pq.write_table = kill_after(pq.write_table, 3)
else:  # two renames per save: the 3rd save's first rename is done, its second is not
    os.replace = kill_after(os.replace, 5)
prov = results.collect_provenance(seed=1, data={"text": "t"})
print(prov.get("run_id", "none"), flush=True)  # (the old store had no run ids)
results.sweep("s", [{"bits": b} for b in (8, 4, 3, 2)], lambda c: {"err": 1.0 / c["bits"]}, provenance=prov,
              root=root, progress=False)
"""


@pytest.fixture(scope="module")
def killed_stores(tmp_path_factory):
    """Two real processes SIGKILLed mid-save (run side by side): mode -> (store folder, run id)."""
    env = {**os.environ, "PYTHONPATH": str(Path(workbench.__file__).resolve().parent.parent)}
    procs = {}
    for mode in ("in_parquet_write", "between_renames"):
        root = tmp_path_factory.mktemp(mode)
        procs[mode] = (root, subprocess.Popen([sys.executable, "-c", KILLED_RUN, mode, str(root)], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = {}
    for mode, (root, p) in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == -signal.SIGKILL, stderr
        out[mode] = (root, stdout.split()[0])
    return out


@pytest.mark.slow  # two fresh interpreters importing torch: about 5 s on 2 cores
@pytest.mark.parametrize("mode", ["in_parquet_write", "between_renames"])
def test_store_after_sigkill_is_consistent_and_resumes(killed_stores, mode):
    root, run1 = killed_stores[mode]
    temps = sorted(p.name for p in root.glob(".*.tmp"))
    assert bool(temps) == (mode == "in_parquet_write")  # the kill really was mid-save
    df = load_results("s", root=root)
    assert df["err"].tolist() == [1 / 8, 1 / 4]  # the third point had not been committed
    json_runs = {r["run_id"] for r in json.loads((root / "s.json").read_text())["runs"]}
    assert set(df["run_id"]) == {run1} and run1 in json_runs  # old store: no run ids, "rows" off by one

    calls = []
    prov = collect_provenance(seed=1, data={"text": "t"})
    out = sweep("s", [{"bits": b} for b in (8, 4, 3, 2)], _fn(calls), provenance=prov, root=root, progress=False)
    assert calls == [3, 2]  # only the uncommitted points run again
    assert out["run_id"].tolist() == [run1, run1, prov["run_id"], prov["run_id"]]
    assert not list(root.glob(".*.tmp"))  # the next writer removed the dead one's temp file
    assert set(results.load_runs("s", root=root)) == {run1, prov["run_id"]}
