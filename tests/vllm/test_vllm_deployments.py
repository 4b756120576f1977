"""Each deployment command line the ``vllm`` bridge emits (:class:`workbench.bridges.VllmDeployment`) is run as
it is printed, on vLLM's CPU build: it starts a server (``/health`` answers), or vLLM refuses it and its own
error is captured and checked to name the refused feature. Only the ``vllm`` executable is replaced (by vLLM's
CLI module, :func:`workbench.bridges.vllm_process.vllm_argv`); ``--port`` is swapped for a free one."""

from __future__ import annotations

import shlex

import pytest

from workbench.bridges import VllmDeployment
from workbench.bridges.vllm_process import VllmServer, VllmServerError


def deployments(model: str) -> dict[str, VllmDeployment]:
    """The deployments the notebooks choose, for ``model``: plain (as `export` prints it), chunked prefill,
    colocated (chunked prefill off), an FP8 KV cache, and a P/D pair over NixlConnector."""
    from workbench.pd.sim.config import SimConfig

    base = {"max_model_len": 1024, "extra_args": ("--enforce-eager", "--dtype", "bfloat16")}
    return {
        "plain": VllmDeployment(model, **base),
        "chunked": VllmDeployment.from_workbench(model, sim=SimConfig(policy="chunked"), **base),
        "colocated": VllmDeployment.from_workbench(model, sim=SimConfig(policy="colocated"), **base),
        "kv_fp8": VllmDeployment(model, kv_cache_dtype="fp8", **base),
        "disaggregated": VllmDeployment.from_workbench(model, sim=SimConfig(policy="disaggregated"), **base),
    }


# what vLLM's CPU build says of each deployment it refuses (its own words, matched loosely)
REFUSED = {"disaggregated": "nixl|NIXL|kv_connector|KVConnector"}


@pytest.mark.parametrize("name", ["chunked", "colocated", "kv_fp8", "disaggregated"])
def test_emitted_command_starts_or_is_refused_by_vllm(name, w4a16_export, tmp_path):
    dep = deployments(str(w4a16_export))[name]
    argv = shlex.split(dep.serve_commands()[0].split("vllm serve", 1)[1])  # after `vllm serve`
    model, args = argv[0], argv[1:]
    i = args.index("--port")
    del args[i:i + 2]
    srv = VllmServer(model, args, log_path=tmp_path / "server.log", startup_timeout_s=400)
    try:
        srv.start()
    except VllmServerError as e:
        import re

        assert name in REFUSED, f"vLLM refused the {name} deployment: {e.error}"
        assert re.search(REFUSED[name], e.log), e.error
        return
    try:
        assert name not in REFUSED, f"{name} started, but it was expected to be refused"
        assert "choices" in srv.completion("Hello", max_tokens=2)
    finally:
        srv.stop()
