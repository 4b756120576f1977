"""vLLM configuration out: every flag, kwarg, config field and value exists in vLLM 0.33.0's source.

The names are read from the release's wheel (``VllmSource``: ``ast`` over ``vllm/engine/arg_utils.py``,
``vllm/entrypoints/common/cli_args.py``, ``vllm/entrypoints/llm.py``, ``vllm/config/*.py``, the
connector factory and ``vllm/envs.py``), never from a list written here. The tests skip, saying why,
when PyPI cannot be reached.
"""

import json
import re

import pytest

from workbench.bridges.vllm_config import ARTICLE_FLAGS, KV_CACHE_DTYPES, VllmDeployment
from workbench.pd.sim.config import SimConfig
from workbench.spec.config import SpecConfig


def _deployments():
    ckpt = "./exports/smollm2-135m-awq-w4a16"
    spec = SpecConfig(k=4, temperature=0.7)
    return {
        "colocated+fp8": VllmDeployment.from_workbench(ckpt, sim=SimConfig(policy="colocated"),
                                                       kv_cache_dtype="fp8", max_model_len=4096),
        "chunked+spec": VllmDeployment.from_workbench("Qwen/Qwen2-7B-Instruct-AWQ", sim=SimConfig(policy="chunked"),
                                                      spec=spec, draft_model="Qwen/Qwen2-0.5B-Instruct",
                                                      quantization="awq_marlin", kv_cache_dtype="int8"),
        "pd": VllmDeployment.from_workbench(ckpt, sim=SimConfig(policy="disaggregated", n_prefill=1, n_decode=2),
                                            spec=SpecConfig(k=3), draft_model=ckpt, tensor_parallel_size=2,
                                            served_model_name="wb"),
    }


def _json_args(argv: list[str], flag: str) -> dict:
    return json.loads(argv[argv.index(flag) + 1])


@pytest.mark.parametrize("name", list(_deployments()))
def test_every_flag_and_field_exists_in_vllm(vllm_src, name):
    dep = _deployments()[name]
    speculative = vllm_src.class_fields("SpeculativeConfig")
    kv_fields = vllm_src.class_fields("KVTransferConfig")
    for inst in dep.instances():
        argv = dep.serve_args(inst)
        assert argv[:3] == ["vllm", "serve", dep.model]
        assert vllm_src.unknown_flags(argv) == [], name
        if "--speculative-config" in argv:
            sc = _json_args(argv, "--speculative-config")
            assert set(sc) <= set(speculative)
            assert sc["method"] in vllm_src.literal("SpeculativeMethod", "vllm/config/speculative.py")
            assert sc["draft_sample_method"] in vllm_src.literal("DraftSampleMethod", "vllm/config/speculative.py")
        if "--kv-transfer-config" in argv:
            kv = _json_args(argv, "--kv-transfer-config")
            assert set(kv) <= set(kv_fields)
            assert kv["kv_role"] in vllm_src.literal("KVRole", "vllm/config/kv_transfer.py")
            assert kv["kv_connector"] in vllm_src.kv_connectors
        if "--kv-cache-dtype" in argv:
            assert argv[argv.index("--kv-cache-dtype") + 1] in vllm_src.literal("CacheDType", "vllm/config/cache.py")
        if "--quantization" in argv:
            quant = vllm_src.literal("QuantizationMethods", "vllm/model_executor/layers/quantization/__init__.py")
            assert argv[argv.index("--quantization") + 1] in quant
        assert set(inst["env"]) <= vllm_src.env_vars | {"CUDA_VISIBLE_DEVICES"}
        kw = dep.llm_kwargs(inst["role"])
        assert set(kw) <= vllm_src.llm_kwargs, set(kw) - vllm_src.llm_kwargs


def test_the_check_catches_a_wrong_flag(vllm_src):
    # planted bug: a misspelt flag and a field that the dataclass does not have are caught
    assert vllm_src.unknown_flags(["vllm", "serve", "m", "--max-num-batched-token", "8", "--port=1"]) == \
        ["--max-num-batched-token"]
    assert "num_draft_tokens" not in vllm_src.class_fields("SpeculativeConfig")
    assert vllm_src.unknown_flags(["--no-port"]) == ["--no-port"]  # --port is not a bool: no --no- form
    assert vllm_src.unknown_flags(["--no-enable-chunked-prefill", "--no-enable-prefix-caching"]) == []


def test_source_is_the_pinned_release(vllm_src):
    assert vllm_src.release == "0.33.0" and len(vllm_src.serve_flags) > 300
    assert {"--speculative-config", "--kv-transfer-config", "--max-num-batched-tokens"} <= vllm_src.serve_flags


def test_kv_cache_dtype_names_exist(vllm_src):
    assert set(KV_CACHE_DTYPES.values()) <= set(vllm_src.literal("CacheDType", "vllm/config/cache.py"))


@pytest.mark.parametrize("flag", list(ARTICLE_FLAGS))
def test_article_flags_refused_with_real_equivalent(vllm_src, flag):
    assert flag not in vllm_src.serve_flags  # the article's flag really is not vLLM's
    with pytest.raises(ValueError, match=re.escape(flag)) as e:
        VllmDeployment("m", extra_args=(flag, "4"))
    named = set(re.findall(r"--[a-z][a-z0-9-]+", str(e.value))) - {flag}
    assert named and named <= vllm_src.serve_flags, named - vllm_src.serve_flags
    metrics = set(re.findall(r"vllm:[a-z_]+", str(e.value)))
    assert metrics <= set(vllm_src.string_constants("vllm/v1/spec_decode/metrics.py"))


def test_from_workbench_maps_the_simulator_and_spec_configs():
    chunked = VllmDeployment.from_workbench("m", sim=SimConfig(policy="chunked", chunk_budget=1024, max_batch=64))
    argv = chunked.serve_args()
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "1024" and "--enable-chunked-prefill" in argv
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    colo = VllmDeployment.from_workbench("m", sim=SimConfig(policy="colocated", max_prefill_tokens=8192))
    assert "--no-enable-chunked-prefill" in colo.serve_args()
    pd_ = _deployments()["pd"]
    inst = pd_.instances()
    assert [i["role"] for i in inst] == ["prefill", "decode", "decode"]
    assert [i["gpus"] for i in inst] == [[0, 1], [2, 3], [4, 5]]  # tensor_parallel_size=2 each
    assert [i["kv_transfer_config"]["kv_role"] for i in inst] == ["kv_producer", "kv_consumer", "kv_consumer"]
    assert len({i["port"] for i in inst}) == 3 and len({i["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] for i in inst}) == 3
    cmds = pd_.serve_commands()
    assert cmds[0].startswith("CUDA_VISIBLE_DEVICES=0,1 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve")
    spec = _deployments()["chunked+spec"].speculative_config()
    assert spec == {"method": "draft_model", "model": "Qwen/Qwen2-0.5B-Instruct", "num_speculative_tokens": 4,
                    "draft_sample_method": "probabilistic"}
    assert VllmDeployment.from_workbench("m", spec=SpecConfig(k=2), draft_model="d").draft_sample_method == "greedy"
    assert pd_.llm_kwargs("decode")["kv_transfer_config"]["kv_role"] == "kv_consumer"


@pytest.mark.parametrize("kw, match", [
    ({"max_num_batched_tokens": 2048, "max_model_len": 4096, "enable_chunked_prefill": False}, "max_model_len"),
    ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "max_num_seqs"),
    ({"draft_model": "d"}, "together"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"num_speculative_tokens": 0, "draft_model": "d"}, "num_speculative_tokens"),
])
def test_bad_deployments_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        VllmDeployment("m", **kw)


def test_adaptive_k_has_no_vllm_equivalent():
    with pytest.raises(ValueError, match="static"):
        VllmDeployment.from_workbench("m", spec=SpecConfig(policy="heuristic"), draft_model="d")
    with pytest.raises(ValueError, match="'prefill' and 'decode'"):
        _deployments()["pd"].llm_kwargs()


def _readme_commands(prefix: str) -> list[list[str]]:
    import shlex
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(ln.split("&&")[0].split("#")[0]) for ln in text.splitlines() if ln.startswith(prefix)]


def test_readme_vllm_commands_use_real_flags(vllm_src):
    serve = _readme_commands("vllm serve ")
    bench = _readme_commands("vllm bench serve ")
    assert serve and bench
    for argv in serve:
        assert vllm_src.unknown_flags(argv) == [], argv
    bench_flags = set(vllm_src.string_constants("vllm/benchmarks/serve.py", None, "add_cli_args"))
    for argv in bench:
        assert {a for a in argv if a.startswith("--")} <= bench_flags, argv
