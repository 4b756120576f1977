"""The P/D study's measured half on a vLLM server (``VLLMEngine.run_pd``): profile over HTTP, cost model fitted to
it, the simulator with vLLM's scheduler as its policy against the server on the same Poisson requests, and a
re-run served from the store without starting vLLM.

The agreement asserted here is loose (12 requests per load on a shared 2-core machine: one slow request moves a
mean by 10%); the figures against the issue's targets (means within 10%, p99 within 20%, 40 requests per load)
come from ``benchmarks/vllm_agreement.py sim`` (``benchmarks/results/2026-12-06_vllm_agreement/pd_sim``)."""

from __future__ import annotations

import pytest

from workbench.studies import pd as pd_study
from workbench.studies.base import Store
from workbench.studies.vllm_backend import VLLMEngine


def test_run_pd_on_vllm_then_resume(vllm_env, default_model, tmp_path, monkeypatch):
    model, tok = default_model
    cfg = pd_study.Config.from_name("smoke", device="cpu", loop_requests=12, loop_prompt=32, loop_output_max=12,
                                    vllm_loads=(0.3, 1.0), vllm_max_num_seqs=8, vllm_max_num_batched_tokens=64)
    engine = VLLMEngine(dtype="bfloat16", max_model_len=512)
    got = engine.run_pd(model, tok, cfg, store=Store(tmp_path), progress=False)
    prof, real, cmp = got["profile"], got["real"], got["sim_vs_real"]
    assert set(prof["phase"]) == {"prefill", "decode"}
    assert (prof.loc[prof["phase"] == "prefill", "n_tokens"] <= 64).all()  # one step each
    assert len(real) == 24 and (real["completion_tokens"] == real["output_len"]).all()
    assert sorted(cmp["load"].unique()) == [0.3, 1.0] and got["capacity_rps"] > 0
    # mean TTFT and TPOT within 35%, unless the machine drifted more than the error (flagged)
    means = cmp[cmp["metric"].isin(["mean_ttft_ms", "mean_tpot_ms"])]
    assert ((means["err_pct"].abs() <= 35) | means["warning"]).all(), means

    def no_server(self):
        raise AssertionError("a stored study started vLLM")

    monkeypatch.setattr("workbench.bridges.vllm_process.VllmServer.start", no_server)
    again = engine.run_pd(model, tok, cfg, store=Store(tmp_path), progress=False)
    assert again["real"]["ttft_ms"].tolist() == pytest.approx(real["ttft_ms"].tolist())
