"""benchmarks/fp8_speed.py: refuses on a device without FP8, and its --smoke CPU path writes every section with
provenance (tiny shape, FP8 emulated)."""

import json

import torch

from benchmarks import fp8_speed


def test_refuses_without_fp8(capsys):
    if torch.cuda.is_available():
        return
    assert fp8_speed.main([]) == 2
    assert "8.9" in capsys.readouterr().err


def test_smoke_writes_json_with_provenance(tmp_path):
    assert fp8_speed.main(["--smoke", "--batches", "1,2", "--prefill", "16", "--steps", "2", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "fp8_speed.json").read_text())
    for k in ("date_utc", "device", "git_commit", "command", "torch"):
        assert k in r["provenance"]
    assert {x["layer"] for x in r["per_layer"]} == {"qkv", "o", "gate_up", "down"}
    assert {x["variant"] for x in r["end_to_end"]} == {"bf16 (engine defaults)", "bf16", "w4a16", "fp8"}
    assert all(x["decode_ms"] > 0 for x in r["end_to_end"])
    fp8 = next(x for x in r["end_to_end"] if x["variant"] == "fp8")
    assert any(lab.startswith("fp8 e4m3") for lab in fp8["runtime"])
