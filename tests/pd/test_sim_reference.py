"""Schedules pinned: the simulator's per-request outputs on fixed seeds match, bit for bit, the
outputs recorded in ``sim_reference.json`` (SHA-256 of each array's float64/int64 bytes, plus its
sum for a readable diff). A refactor of the event loops must not move a single token; a change that
is meant to move them regenerates the file (``python tests/pd/test_sim_reference.py --write``) and
says why in its commit message."""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.sim import LengthDist, SimConfig, WorkloadConfig, simulate

REF = Path(__file__).with_name("sim_reference.json")
TOY = CostModel(a=2.0, b=0.02, c=1e-5, d=5.0, e=0.2, f=0.001)
ROOF = CostModel.from_roofline(ModelSpec.from_name("qwen2-7b"), HardwareSpec.from_name("h200"))
SMALL = WorkloadConfig(n_requests=400, rate=200.0, prompt=LengthDist("uniform", low=20, high=300),
                       output=LengthDist("uniform", low=1, high=200), seed=3)
CHAT = WorkloadConfig(n_requests=3000, rate=60.0, prompt=LengthDist("lognormal", 512, 16, 4096, 0.8),
                      output=LengthDist("lognormal", 128, 2, 2048, 0.8), seed=0)
BURST = WorkloadConfig(n_requests=1500, rate=30.0, arrival="gamma", cv=3.0, prompt=LengthDist("lognormal", 300, 1, 2000),
                       output=LengthDist("uniform", low=1, high=100), seed=4)
COLUMNS = ("first_token_s", "finish_s", "n_preempt", "n_tokens", "instance")


def cases() -> dict:
    """name -> (workload, config, cost, record_itl): queueing, preemption, bursts, every policy."""
    out = {}
    for pol in ("colocated", "chunked", "disaggregated"):
        out[f"small_{pol}"] = (SMALL, SimConfig(policy=pol, n_instances=2, n_prefill=1, n_decode=2, chunk_budget=256,
                                                kv_capacity_tokens=600, kv_bytes_per_token=1e5, link_gbs=10), TOY, True)
        out[f"chat_{pol}"] = (CHAT, SimConfig(policy=pol, n_instances=2, chunk_budget=512, kv_capacity_tokens=1_000_000,
                                              kv_bytes_per_token=57344.0), ROOF, False)
        out[f"chatkv_{pol}"] = (CHAT, SimConfig(policy=pol, n_instances=2, n_prefill=2, n_decode=1, chunk_budget=2048,
                                                kv_capacity_tokens=20_000, kv_bytes_per_token=57344.0), ROOF, False)
        out[f"burst_{pol}"] = (BURST, SimConfig(policy=pol, n_instances=3, n_prefill=1, n_decode=2, chunk_budget=128,
                                                max_batch=16, max_prefill_batch=2, max_prefill_tokens=1024,
                                                kv_capacity_tokens=5000), TOY, True)
    return out


def outputs(name: str) -> dict:
    """``{column: (sha256, sum)}`` of one case's simulated frame."""
    wl, cfg, cost, rec = cases()[name]
    df = simulate(wl, cfg, cost, record_itl=rec)
    arrays = {c: df[c].to_numpy() for c in COLUMNS}
    if rec:
        arrays["itl_ms"] = np.concatenate([np.asarray(x, np.float64) for x in df["itl_ms"]])
    out = {}
    for c, a in arrays.items():
        a = np.ascontiguousarray(a, dtype=np.float64 if a.dtype.kind == "f" else np.int64)
        out[c] = [hashlib.sha256(a.tobytes()).hexdigest(), float(np.nansum(a))]
    return out


@pytest.mark.parametrize("name", sorted(cases()))
def test_schedule_matches_reference(name):
    want = json.loads(REF.read_text())[name]
    got = outputs(name)
    assert {c: v[1] for c, v in got.items()} == pytest.approx({c: v[1] for c, v in want.items()}, rel=0, abs=0)
    assert got == want


if __name__ == "__main__" and "--write" in sys.argv:
    REF.write_text(json.dumps({n: outputs(n) for n in sorted(cases())}, indent=1) + "\n")
