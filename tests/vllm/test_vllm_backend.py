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


def test_stack_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="KV connector"):
        VLLMEngine().run_stack()
