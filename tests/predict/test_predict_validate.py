"""benchmarks/predict_validate.py's CPU paths: the ratio join on hand-built frames, the explanation rules,
and the engine subcommand's code path on a tiny CPU model (no comparison: AIConfigurator has no CPU systems)."""

import json

import pandas as pd
import pytest

from benchmarks import predict_validate as pv


def test_join_divides_engine_by_aic_for_the_gpu_that_ran(tmp_path):
    keys = {"shape": ["qwen2-7b"] * 2, "phase": ["decode", "prefill"], "batch": [1, 1], "seq_len": [512, 2048]}
    aic = pd.DataFrame({**keys, "system": ["h100_sxm"] * 2, "engine": ["vllm"] * 2, "engine_version": ["0.24.0"] * 2,
                        "ms": [6.0, 40.0]})
    aic = pd.concat([aic, aic.assign(system="h200_sxm", ms=[1.0, 1.0])])  # another GPU's rows: not joined
    eng = pd.DataFrame({**keys, "device": ["NVIDIA H100 80GB HBM3"] * 2, "ms": [5.4, 50.0], "ms_iqr": [0.1, 0.5]})
    aic.to_csv(tmp_path / "a.csv", index=False)
    eng.to_csv(tmp_path / "e.csv", index=False)
    pv.main(["join", "--aic", str(tmp_path / "a.csv"), "--engine", str(tmp_path / "e.csv"), "--out", str(tmp_path)])
    j = pd.read_csv(tmp_path / "engine_vs_aic.csv")
    assert sorted(j["ratio"].round(6)) == [0.9, 1.25]
    meta = json.loads((tmp_path / "engine_vs_aic.json").read_text())
    assert {"date_utc", "device", "git_commit", "command"} <= set(meta) and meta["command"].endswith(str(tmp_path))


def _row(**kw):
    base = {"sim_ttft_p50_ms": 100.0, "aic_ttft_ms": 100.0, "sim_tpot_p50_ms": 30.0, "aic_tpot_ms": 30.0,
            "aic_concurrency": 256, "sim_capacity_rps": 50.0, "aic_goodput_rps": 50.0}
    return base | kw


@pytest.mark.parametrize("kw, fit_err, want", [
    ({}, 0.05, "agree within"),
    ({"sim_ttft_p50_ms": 400.0}, 0.05, "TTFT queueing"),
    ({"sim_ttft_p50_ms": 20.0}, 0.05, "context-token budget"),
    ({"sim_tpot_p50_ms": 15.0}, 0.05, "running batch"),
    ({"sim_capacity_rps": 20.0}, 0.05, "0.40x"),
    ({}, 0.30, "step cost"),
])
def test_explanations_follow_the_stated_bands(kw, fit_err, want):
    assert want in pv._explain(_row(**kw), fit_err)


def test_engine_smoke_runs_the_profile_on_the_cpu(tmp_path):
    pv.main(["engine", "--smoke", "--repeats", "1", "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "engine_steps.csv")
    assert set(df["phase"]) == {"prefill", "decode"} and (df["ms"] > 0).all()
    assert json.loads((tmp_path / "engine_steps.json").read_text())["device"] == "cpu"
