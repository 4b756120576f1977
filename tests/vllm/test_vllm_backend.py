"""VLLMEngine without running vLLM: flags passed through (parallel layout included), bad values refused, the
registry entry, and the missing-environment error naming the fix."""

from __future__ import annotations

import pytest

from workbench.studies.engines import resolve_engine
from workbench.studies.vllm_backend import VLLMEngine


def test_parallel_layout_is_passed_through():
    e = VLLMEngine(tensor_parallel_size=8, pipeline_parallel_size=2, distributed_executor_backend="ray")
    a = e.serve_args()
    assert a[a.index("--tensor-parallel-size") + 1] == "8" and a[a.index("--pipeline-parallel-size") + 1] == "2"
    assert a[a.index("--distributed-executor-backend") + 1] == "ray"
    kw = e.llm_kwargs("m")
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"], kw["distributed_executor_backend"]) == (8, 2, "ray")
    p = e.provenance()
    assert p["name"] == "vllm" and p["serve_args"] == a and p["tensor_parallel_size"] == 8
    one = VLLMEngine().serve_args()
    assert "--tensor-parallel-size" not in one and "--distributed-executor-backend" not in one


@pytest.mark.parametrize("kw, match", [({"tensor_parallel_size": 0}, "tensor_parallel_size"),
                                       ({"pipeline_parallel_size": 1.5}, "pipeline_parallel_size"),
                                       ({"distributed_executor_backend": "mpi"}, "ray")])
def test_bad_values_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        VLLMEngine(**kw)


def test_missing_environment_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_VLLM_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="make setup-vllm"):
        resolve_engine("vllm")


def test_registry_gives_the_vllm_backend(vllm_env):
    b = resolve_engine("vllm")
    assert isinstance(b, VLLMEngine) and b.name == "vllm" and b.in_process is False
    assert b.provenance()["vllm"].split()[1].startswith("0.32")


def test_stack_w4a16_with_ngram_on_vllm_then_resume(vllm_env, default_model, tmp_path, monkeypatch):
    """The stacked study's W4A16 + speculative combination on vLLM (one server: CI time): timed, its acceptance
    read from /metrics on a prompt that repeats itself (n-gram lookup finds drafts), and served from the store
    on a re-run without starting vLLM."""
    from workbench.studies import stack as stack_study
    from workbench.studies.base import Store

    model, tok = default_model
    cfg = stack_study.Config.from_name("smoke", device="cpu", gen_len=24, k=3)
    prompt = tok("one two three four five six seven eight " * 4, add_special_tokens=False)["input_ids"]
    eng = VLLMEngine(dtype="bfloat16", max_model_len=512)
    df = eng.run_stack(model, tok, cfg, prompt, store=Store(tmp_path), repeats=2, combinations=((True, True),))
    row = df.iloc[0]
    assert len(df) == 1 and bool(row["quantized"]) and bool(row["speculative"]) and "error" not in df
    assert row["decode_tokens_per_s"] > 0 and row["mean_ttft_ms"] > 0
    assert row["tau"] >= 1 and 0 <= row["draft_acceptance_rate"] <= 1
    monkeypatch.setattr("workbench.bridges.vllm_process.VllmServer.start", lambda self: pytest.fail("vLLM started"))
    again = eng.run_stack(model, tok, cfg, prompt, store=Store(tmp_path), repeats=2, combinations=((True, True),))
    assert again["decode_tokens_per_s"].tolist() == df["decode_tokens_per_s"].tolist()
