"""EngineConfig, the kernel registry, the route table and the results key."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workbench.engine import Engine, EngineConfig
from workbench.engine.routing import KERNELS, KernelEntry, Problem, choose, kernel_names, register_kernel
from workbench.quant import QuantConfig, convert_for_runtime, quantize
from workbench.results import identity
from workbench.studies.engines import WorkbenchEngine


def _qmodel(bits=4, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=192, intermediate_size=320, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).eval().to(dtype)
    gran = {"granularity": "per_channel", "symmetric": True} if bits == 8 else {"group_size": 64}
    return quantize(m, QuantConfig(bits=bits, **gran, **kw))[0]


def test_disabled_kernel_changes_the_results_key(monkeypatch):
    # fails on the code before EngineConfig: WorkbenchEngine.provenance() had no kernel settings, so a timing
    # made with a kernel switched off was reused for the default
    monkeypatch.delenv("WORKBENCH_DISABLED_KERNELS", raising=False)
    base = identity({"engine": WorkbenchEngine().provenance()})["engine_key"]
    monkeypatch.setenv("WORKBENCH_DISABLED_KERNELS", "cpu-int4pack")
    off = identity({"engine": WorkbenchEngine().provenance()})["engine_key"]
    assert off != base
    cfg = EngineConfig(disabled_kernels=("cpu-int4pack",))
    assert identity({"engine": WorkbenchEngine(cfg).provenance()})["engine_key"] == off
    monkeypatch.setenv("WORKBENCH_DISABLED_KERNELS", " cpu-int4pack , ")  # spacing and order do not matter
    assert identity({"engine": WorkbenchEngine().provenance()})["engine_key"] == off


def test_config_rejects_unknown_and_fallback_kernels(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DISABLED_KERNELS", "w4a16-mmma")
    with pytest.raises(ValueError, match="unknown kernels.*w4a16-mmma"):
        EngineConfig.from_env()
    with pytest.raises(ValueError, match="last resort"):
        EngineConfig(disabled_kernels=("dequant",))
    with pytest.raises(TypeError, match="string"):
        EngineConfig(disabled_kernels="tinygemm")
    with pytest.raises(ValueError, match="compute_dtype"):
        EngineConfig(compute_dtype="bf16")


def test_choose_walks_the_priority_list_and_says_why():
    cfg = EngineConfig()
    p = Problem(1536, 576, 1, 64, torch.bfloat16, "cpu", copy=True)
    assert choose("w4a16", p, cfg)[0] == "cpu-int4pack"
    name, why = choose("w4a16", Problem(1536, 576, 9, 64, torch.bfloat16, "cpu", copy=True), cfg)
    assert name == "dequant" and "9 rows > cpu_int_max_rows=8" in why
    name, why = choose("w4a16", Problem(1536, 576, 1, 64, torch.float32, "cpu", copy=True), cfg)
    assert name == "dequant" and "float32 activations" in why
    name, why = choose("w4a16", p, EngineConfig(disabled_kernels=("cpu-int4pack",)))
    assert name == "dequant" and "cpu-int4pack: disabled" in why
    cuda = Problem(4608, 3584, 1, 128, torch.bfloat16, "cuda", tc=True)
    assert choose("w4a16", cuda, cfg)[0] == "w4a16-mma"
    assert choose("w4a16", cuda, EngineConfig(disabled_kernels=("w4a16-mma",)))[0] == "triton-w4-gemv"
    with pytest.raises(ValueError, match="no fp8 kernel"):
        choose("fp8", cuda, cfg)


def test_register_kernel_adds_a_kind_entry_in_priority_order():
    saved = list(KERNELS["fp8"])
    try:
        register_kernel("fp8", KernelEntry("test-fp8-b", lambda p, c: (True, "ok")), 20)
        register_kernel("fp8", KernelEntry("test-fp8-a", lambda p, c: (p.rows <= 4, "rows")), 10)
        assert {"test-fp8-a", "test-fp8-b"} <= kernel_names()
        p = Problem(64, 64, 2, 0, torch.bfloat16, "cuda")
        assert choose("fp8", p, EngineConfig())[0] == "test-fp8-a"
        assert choose("fp8", Problem(64, 64, 8, 0, torch.bfloat16, "cuda"), EngineConfig())[0] == "test-fp8-b"
        assert choose("fp8", p, EngineConfig(disabled_kernels=("test-fp8-a",)))[0] == "test-fp8-b"
        with pytest.raises(ValueError, match="kind"):
            register_kernel("fp4", KernelEntry("x", lambda p, c: (True, "")), 1)
    finally:
        KERNELS["fp8"] = saved


def test_bf16_cpu_engine_routes_decode_to_the_int_kernels_and_prefill_to_the_copy():
    q = _qmodel()
    eng = convert_for_runtime(q, max_seq=32, dtype=torch.bfloat16)
    t = eng.route_table(rows=(1, 8, 9, 32))
    blocks = t[t.matmul != "lm_head"]
    assert set(blocks[blocks.rows <= 8].kernel) == {"cpu-int4pack"}
    assert set(blocks[blocks.rows > 8].kernel) == {"dequant"}
    assert set(t[t.matmul == "lm_head"].kernel) == {"torch-linear"}
    assert eng.w.labels["layers.0.qkv"] == "int4 cpu-int4pack g64 for <= 8 rows, dequantized copy for more"
    # the decode step runs the INT4 kernel and agrees with the quantized model's forward
    with torch.no_grad():
        ids = torch.tensor([[5, 17, 99, 3]])
        want = q.float()(ids).logits[0, -1]
    r = eng.runner()
    r.extend(ids[0, :3])
    got = r.extend(ids[0, 3:])[-1]
    assert (got - want).abs().max() <= 0.03 * want.abs().max()


def test_float32_cpu_engine_keeps_the_dequantized_weight_and_says_why():
    eng = convert_for_runtime(_qmodel(), max_seq=32)
    t = eng.route_table(rows=(1,))
    row = t[t.matmul == "layers.0.qkv"].iloc[0]
    assert row.kernel == "dequant" and "float32 activations" in row.why


def test_w8a16_bf16_cpu_engine_takes_int8pack():
    eng = convert_for_runtime(_qmodel(bits=8), max_seq=32, config=EngineConfig(compute_dtype="bfloat16"))
    assert eng.dtype == torch.bfloat16
    t = eng.route_table(rows=(1, 64))
    assert set(t[(t.rows == 1) & (t.matmul != "lm_head")].kernel) == {"int8pack"}
    assert set(t[t.rows == 64].kernel) == {"dequant", "torch-linear"}  # prefill: the copy; lm_head dense


def test_route_key_changes_with_the_route_and_is_stable():
    q = _qmodel()
    a = convert_for_runtime(q, max_seq=32, dtype=torch.bfloat16)
    b = convert_for_runtime(q, max_seq=32, dtype=torch.bfloat16)
    c = convert_for_runtime(q, max_seq=32, dtype=torch.bfloat16,
                            config=EngineConfig(disabled_kernels=("cpu-int4pack",)))
    assert a.route_key() == b.route_key() and a.route_key() != c.route_key()
    assert a.route_key().startswith("cpu-int4pack+dequant+torch-linear@")
    assert "cpu-int4pack" not in c.route_key().split("@")[0]


def test_float_engine_route_table_is_dense():
    eng = Engine.from_config({"model_type": "llama", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
                              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1},
                             max_seq=16, device="cpu")
    t = eng.route_table()
    assert set(t.kernel) == {"torch-linear"} and list(t.columns) == ["matmul", "rows", "kernel", "path", "config",
                                                                     "why"]
