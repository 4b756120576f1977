"""The 8-combination table, multiplicativity and the batch-1 what-if, on hand-made points."""

import numpy as np
import pandas as pd
import pytest

from workbench.pd.sim import SLO, LengthDist, WorkloadConfig
from workbench.spec.theory import speedup
from workbench.stack import StackConfig, multiplicativity, stack_table, whatif_batch1
from workbench.stack.load import deployments, simulate_deployment

CFG = StackConfig(prompt_len=100, gen_len=10, k=4, link_gbs=1.0, link_latency_ms=0.5,
                  workload=WorkloadConfig(40, prompt=LengthDist("fixed", 32), output=LengthDist("fixed", 8)),
                  load_fractions=(0.5, 1.0), table_load=0.5, slo_scales=(1.0,), whatif_alphas=(0.5, 0.8),
                  whatif_ks=(2, 4))


def _load(points):
    deps = deployments(points, CFG, mem_gb=100.0)
    return pd.concat([simulate_deployment(d, CFG, [5.0, 10.0], SLO(500.0, 50.0)) for d in deps], ignore_index=True)


def test_table_rows_and_transfer(hand_pts):
    pts = hand_pts
    t = stack_table(pts, _load(pts), CFG)
    assert list(t["label"][:4]) == ["bf16", "W4A16", "bf16 + spec", "W4A16 + spec"] and t["mixed"].iloc[-1]
    assert len(t) == 9
    # P/D at batch 1 = colocated + the prompt's KV over the link: 100 tokens x 1000 B / 1 GB/s + 0.5 ms = 0.6 ms
    col, dis = t.iloc[1], t.iloc[5]
    assert dis["label"] == "W4A16 + P/D" and dis["ttft_ms"] - col["ttft_ms"] == pytest.approx(0.6)
    assert dis["e2e_ms"] - col["e2e_ms"] == pytest.approx(0.6) and dis["decode_tok_s"] == col["decode_tok_s"]
    assert t.iloc[1]["decode_speedup"] == pytest.approx(2.0) and t.iloc[3]["decode_speedup"] == pytest.approx(3.0)
    # mixed: bf16 + spec prefill (TTFT 20 + transfer of 1100 B/token), W4A16 + spec decode
    mixed = t.iloc[-1]
    assert mixed["ttft_ms"] == pytest.approx(20.0 + 0.11 + 0.5)
    assert mixed["e2e_ms"] == pytest.approx(mixed["ttft_ms"] + 9 * 5.0 / 1.5)
    assert mixed["peak_mem_gb"] == pytest.approx(2.2)
    assert {"goodput_rps", "slo_capacity_rps", "p99_tpot_ms"} <= set(t.columns)


def test_multiplicativity_known_answer(hand_pts):
    t = stack_table(hand_pts, _load(hand_pts), CFG)
    m = multiplicativity(t).set_index("metric").loc["batch-1 decode tokens/s"]
    assert m["W4A16 alone"] == pytest.approx(2.0) and m["spec alone"] == pytest.approx(1.5)
    assert m["P/D alone"] == pytest.approx(1.0) and m["product of singles"] == pytest.approx(3.0)
    assert m["combined"] == pytest.approx(3.0) and m["combined / product"] == pytest.approx(1.0)


def test_whatif_batch1_known_answer(hand_pts):
    w = whatif_batch1(hand_pts, CFG)
    assert len(w) == 2 * 2 * 2
    r = w[(~w["quantized"]) & (w["alpha"] == 0.8) & (w["k"] == 4)].iloc[0]
    assert r["c"] == pytest.approx(0.1) and r["verify_cost"] == pytest.approx(1.4)
    assert r["speedup"] == pytest.approx(float(speedup(0.8, 4, 0.1, 1.4)))
    assert r["decode_tok_s"] == pytest.approx(100.0 * r["speedup"])
    assert np.isfinite(w["decode_tok_s"]).all()


def _grid(att: dict) -> pd.DataFrame:
    """A hand-made load grid: the baseline's attainment per (load, slo_scale), plus a W4A16 row that always meets."""
    rows = []
    for (ld, sc), a in att.items():
        for q, val in ((False, a), (True, 1.0)):
            rows.append({"label": "W4A16" if q else "bf16", "quantized": q, "speculative": False,
                         "disaggregated": False, "mixed": False, "n_prefill": 1, "n_decode": 1, "load": ld,
                         "slo_scale": sc, "slo_attainment": val})
    return pd.DataFrame(rows)


def test_load_note_says_where_the_baseline_meets_the_slos():
    from workbench.stack import load_note

    cfg = StackConfig(load_fractions=(0.25, 0.5, 0.75), table_load=0.75, slo_scales=(1.0, 2.0, 4.0))
    met = {(0.25, 1.0): 0.95, (0.5, 1.0): 0.92, (0.75, 1.0): 0.1, (0.75, 2.0): 0.5, (0.75, 4.0): 0.97}
    assert load_note(_grid({**met, (0.75, 1.0): 0.9}), cfg) == ""  # met at the table's load: nothing to say
    note = load_note(_grid(met), cfg)
    assert note.startswith("At 0.75 x the baseline's capacity the baseline meets the SLOs for 10% of requests")
    assert "up to 0.5 x capacity at SLO scale 1" in note and "at SLO scale 4 at this load" in note
    never = load_note(_grid({k: 0.0 for k in met}), cfg)
    assert "No precomputed load and SLO scale meets them" in never and "WB_SLO_TTFT_MS" in never
