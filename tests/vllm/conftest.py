"""Fixtures of the vLLM tests (marker ``vllm``): vLLM runs out of process from ``.venv-vllm``.

Without that environment every test here that needs vLLM skips with one message naming ``make setup-vllm``.
One server per session (the slow part: about 95 s to come up on 2 CPU cores): the built-in model's
compressed-tensors W4A16 export (RTN INT4, groups of 32, symmetric; bfloat16), with n-gram speculative decoding
(k = 3) so ``/metrics`` carries the ``vllm:spec_decode_*`` counters.
"""

from __future__ import annotations

import json

import pytest

from workbench.bridges.vllm_process import VllmServer, vllm_available

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/vllm/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_env():
    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"vLLM tests need .venv-vllm: {why}")
    return True


@pytest.fixture(scope="session")
def w4a16_export(vllm_env, default_model, tmp_path_factory):
    """The built-in model exported as compressed-tensors W4A16 (``rtn_int4_g32_sym``, bfloat16)."""
    import torch

    from workbench.bridges import export_compressed_tensors
    from workbench.quant import QuantConfig, quantize

    model, tok = default_model
    out = tmp_path_factory.mktemp("w4a16")
    qm, _ = quantize(model, QuantConfig.from_name("rtn_int4_g32_sym"))
    export_compressed_tensors(qm, out, tok, dtype=torch.bfloat16)
    return out


@pytest.fixture(scope="session")
def served(w4a16_export, tmp_path_factory):
    """A live ``vllm serve`` of the W4A16 export with n-gram speculation, shared by the session."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    srv = VllmServer(str(w4a16_export), ["--dtype", "bfloat16", "--max-model-len", "1024", "--enforce-eager",
                                         "--speculative-config", json.dumps(NGRAM)], log_path=log)
    srv.start()
    yield srv
    srv.stop()
