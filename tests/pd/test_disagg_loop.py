"""The two-process disaggregated serving loop (gloo, CPU) against a single-process greedy decode, and its
pieces: FCFS prefill batches, the link fit, capacity and loads, configuration errors.

The slow tests share one run of both workers (module fixture, about 10 s of CPU on two processes).
"""

import os
from collections import deque

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.engine import Engine
from workbench.pd import CostModel
from workbench.pd.disagg import (
    DisaggConfig,
    capacity_rps,
    compare_runs,
    first_token_agreement,
    placement,
    run_disagg,
    transfer_check,
    workloads_at_loads,
)
from workbench.pd.disagg.link import link_fit
from workbench.pd.disagg.run import describe_link
from workbench.pd.disagg.workers import _next_batch, prompts_for
from workbench.pd.metrics import summarize
from workbench.pd.profile import ProfileConfig, extend
from workbench.pd.sim import LengthDist, Workload, WorkloadConfig

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
# queueing on purpose: two decode slots for six requests, prefill batches of two up to 20 tokens
WORKLOAD = Workload(arrival_s=[0.0, 0.001, 0.002, 0.05, 0.051, 0.052], prompt_len=[5, 17, 9, 1, 30, 12],
                    output_len=[4, 1, 6, 3, 5, 7])
CONFIG = DisaggConfig(model=TINY, decode_slots=2, max_prefill_batch=2, max_prefill_tokens=20, max_seq=48,
                      device="cpu", record_kv=True, probe_tokens=(1, 32768), probe_repeats=3, timeout_s=120,
                      profile=ProfileConfig(prompt_lens=(4, 16, 32), prefill_batches=(1, 2), decode_batches=(1, 2),
                                            context_lens=(8, 24), repeats=1, warmup=0))
METRIC_COLUMNS = {"req_id", "arrival_s", "prompt_len", "output_len", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms",
                  "finish_s", "itl_mean_ms"}


@pytest.fixture(scope="module")
def served():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)  # the workers inherit this environment
        mp.delenv("NCCL_NVLS_ENABLE", raising=False)
        mp.setenv("NVSHMEM_DISABLE_NVLS", "7")  # run_disagg sets both for the workers, then restores them
        run = run_disagg(WORKLOAD, CONFIG)
        run.parent_env = {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS")}
        ref = Engine.from_config(TINY, max_batch=1, max_seq=CONFIG.max_seq, device="cpu", seed=CONFIG.weight_seed)
    return run, ref


def _greedy(eng, prompt, n_out):
    """Single-process greedy decode: prefill, then one token per step; and the prompt's KV cache."""
    eng.truncate_slot(0, 0)
    tok = int(extend(eng, torch.tensor([0]), prompt.view(1, -1)).argmax(-1))
    kv = eng.read_slot_kv(0, len(prompt))
    out = [tok]
    while len(out) < n_out:
        out.append(int(extend(eng, torch.tensor([0]), torch.tensor([[out[-1]]])).argmax(-1)))
    return out, kv


@pytest.mark.slow
def test_every_request_completes_with_the_single_process_greedy_tokens(served):
    """Token for token equal to prefill + decode in one process; the first token comes from the decode
    worker's step over the last prompt token (prompt - 1 positions transferred and kept) and equals
    the prefill worker's. Fails if the decode side keeps all prompt positions (the last prompt
    token's K/V then enters twice) or writes the KV cache into the wrong slot."""
    run, ref = served
    req = run.requests
    assert len(req) == len(WORKLOAD) and req["req_id"].tolist() == list(range(len(WORKLOAD)))
    assert req["output_len"].tolist() == WORKLOAD.output_len.tolist()
    prompts = prompts_for(WORKLOAD, TINY["vocab_size"], CONFIG.prompt_seed)
    for r, row in req.iterrows():
        want, _ = _greedy(ref, prompts[r], int(WORKLOAD.output_len[r]))
        assert row["tokens"] == want, f"request {r}"
    assert first_token_agreement(run) == 1.0
    assert (req["prefill_token"] == req["prefill_token_hdr"]).all()


@pytest.mark.slow
def test_transferred_kv_is_the_prefill_cache(served):
    """Received == sent bit for bit; both equal a single-process prefill of the same prompt (up to float
    rounding of a differently batched prefill)."""
    run, ref = served
    prompts = prompts_for(WORKLOAD, TINY["vocab_size"], CONFIG.prompt_seed)
    for r in range(len(WORKLOAD)):
        sent, received = run.kv[(0, r)]
        assert received.shape == (2, 3, 2, int(WORKLOAD.prompt_len[r]), 16)  # [K/V, layers, kv heads, L, d]
        assert torch.equal(sent, received)
        _, kv = _greedy(ref, prompts[r], 1)
        torch.testing.assert_close(received, kv, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_timestamps_are_ordered_and_define_the_metrics(served):
    run, _ = served
    req = run.requests
    t = {c: req[c].to_numpy() for c in ("arrival_s", "prefill_start_s", "prefill_end_s", "transfer_start_s",
                                        "send_end_s", "transfer_end_s", "admit_s")}
    assert (t["arrival_s"] <= t["prefill_start_s"]).all() and (t["prefill_start_s"] < t["prefill_end_s"]).all()
    assert (t["prefill_end_s"] <= t["transfer_start_s"]).all() and (t["transfer_start_s"] < t["transfer_end_s"]).all()
    assert (t["transfer_start_s"] < t["send_end_s"]).all() and (t["transfer_end_s"] <= t["admit_s"]).all()
    order = np.argsort(t["transfer_start_s"])  # one transfer at a time on the link
    assert (t["transfer_start_s"][order][1:] >= t["send_end_s"][order][:-1]).all()
    for _, row in req.iterrows():
        tok = np.asarray(row["token_s"])
        assert row["admit_s"] < tok[0] and (np.diff(tok) > 0).all() and len(tok) == row["output_len"]
        assert row["ttft_ms"] == pytest.approx((tok[0] - row["arrival_s"]) * 1e3)
        assert row["finish_s"] == pytest.approx(tok[-1])
    # FCFS admission in KV-arrival order, never more than decode_slots sequences at once
    by_arrival = np.argsort(t["transfer_end_s"], kind="stable")
    assert (np.diff(t["admit_s"][by_arrival]) >= 0).all()
    starts, ends = t["admit_s"], req["finish_s"].to_numpy()
    assert max(int(((starts <= s) & (ends > s)).sum()) for s in starts) <= CONFIG.decode_slots
    # prefill batches: FCFS, at most 2 prompts and 20 tokens unless one prompt alone is longer
    for start in np.unique(t["prefill_start_s"]):
        batch = req[req["prefill_start_s"] == start]
        assert len(batch) <= 2 and (batch["prompt_len"].sum() <= 20 or len(batch) == 1)


@pytest.mark.slow
def test_metrics_profile_and_simulator_comparison(served):
    run, _ = served
    assert METRIC_COLUMNS <= set(run.requests.columns)
    s = summarize(run.requests)
    assert s["n_requests"].iloc[0] == len(WORKLOAD) and np.isfinite(s["mean_ttft_ms"].iloc[0])
    assert set(run.profile["phase"]) == {"prefill", "decode"} and len(run.profile) == 3 * 2 + 2 * 2
    cmp = compare_runs(run, CostModel.fit(run.profile), CONFIG)
    assert len(cmp) == 12 and np.isfinite(cmp[["real", "sim"]].to_numpy()).all()
    x = transfer_check(run)
    assert (x["transfer_bytes"] == x["prompt_len"] * 2 * 3 * 2 * 16 * 4).all() and (x["transfer_ms"] > 0).all()
    assert run.link["backend"] == "gloo" and run.link["devices"] == ["cpu", "cpu"] and run.link["gbs"] > 0
    assert run.kv_bytes_per_token == 2 * 3 * 2 * 16 * 4


def test_next_batch_is_fcfs_and_the_head_always_runs():
    waiting = deque([0, 1, 2, 3, 4])
    plen = [30, 5, 5, 12, 3]
    got = [_next_batch(waiting, plen, 3, 20) for _ in range(3)]
    assert got == [[0], [1, 2], [3, 4]] and not waiting


def test_link_fit_recovers_latency_and_bandwidth():
    """Times built from 0.05 ms + bytes / 100 GB/s give those two numbers back."""
    sizes = [(1, 1000), (64, 64_000), (4096, 4_096_000)]
    send = [{"tokens": n, "bytes": b, "t_s": [10.0, 20.0, 30.0]} for n, b in sizes]
    recv = [{"tokens": n, "bytes": b, "t_s": [t + (0.05 + b / 1e8) / 1e3 for t in (10.0, 20.0, 30.0)]}
            for n, b in sizes]
    fit = link_fit(send, recv)
    assert fit["gbs"] == pytest.approx(100.0, rel=1e-6)
    assert fit["latency_ms"] == pytest.approx(0.05 + 1000 / 1e8, rel=1e-6)
    with pytest.warns(UserWarning, match="one host"):
        bad = link_fit(send, [dict(r, t_s=[t - 1.0 for t in r["t_s"]]) for r in recv])
    assert np.isnan(bad["gbs"])


def test_capacity_and_loads_known_answer():
    """Constant step times: prefill 10 ms -> 100 req/s; decode 5 ms per step of 4 slots, 10 output
    tokens -> 1000 * 4 / (5 * 10) = 80 req/s; two devices: 80; one shared: 1 / (1/100 + 1/80)."""
    cost = CostModel(a=10.0, b=0.0, c=0.0, d=5.0, e=0.0, f=0.0)
    wcfg = WorkloadConfig(prompt=LengthDist("fixed", 64), output=LengthDist("fixed", 10))
    two, one = capacity_rps(cost, wcfg, 4, False), capacity_rps(cost, wcfg, 4, True)
    assert two == pytest.approx({"prefill_rps": 100.0, "decode_rps": 80.0, "capacity_rps": 80.0})
    assert one["capacity_rps"] == pytest.approx(1 / (1 / 100 + 1 / 80))
    prof = pd.DataFrame(
        [{"phase": "prefill", "n_tokens": n, "attn_sq": n * n, "batch": 1, "kv_tokens": 0, "ms": 10.0}
         for n in (8, 16, 32)] + [{"phase": "decode", "n_tokens": b, "attn_sq": 0, "batch": b, "kv_tokens": b * 8,
                                   "ms": 5.0} for b in (1, 2, 4)])
    wls = workloads_at_loads(prof, {"w": wcfg}, (0.5, 1.0), seconds=10.0, min_requests=3, decode_slots=4,
                             shared_device=False)
    assert [len(w) for w in wls] == [400, 800]
    rates = [len(w) / w.arrival_s[-1] for w in wls]
    assert rates[0] == pytest.approx(40.0, rel=0.15) and rates[1] == pytest.approx(80.0, rel=0.15)


def test_config_and_placement_errors_name_the_fix():
    with pytest.raises(ValueError, match="decode_slots=0"):
        DisaggConfig(model=TINY, decode_slots=0)
    with pytest.raises(ValueError, match="raise decode_slots"):
        DisaggConfig(model=TINY, decode_slots=2, profile=ProfileConfig(decode_batches=(1, 4)))
    with pytest.raises(ValueError, match="use backend='gloo'"):
        placement(DisaggConfig(model=TINY, device="cpu", backend="nccl"), 0)
    assert placement(DisaggConfig(model=TINY, device="cpu"), 1) == (torch.device("cpu"), "gloo")
    with pytest.raises(ValueError, match="max_seq=8"):
        run_disagg(WORKLOAD, DisaggConfig(model=TINY, max_seq=8, device="cpu"))
    with pytest.raises(ValueError, match="need DisaggConfig.profile"):
        run_disagg(lambda prof: [WORKLOAD], DisaggConfig(model=TINY, device="cpu"))
    assert "not an NVLink" in describe_link("gloo", ["cuda:0", "cuda:0"])
    assert describe_link("nccl", ["cuda:0", "cuda:1"]).startswith("NCCL")


@pytest.mark.slow
def test_both_workers_run_with_nvlink_multicast_off(served):
    run, _ = served
    want = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert run.link["env"] == [want, want]
    assert run.parent_env == {"NCCL_NVLS_ENABLE": None, "NVSHMEM_DISABLE_NVLS": "7"}
