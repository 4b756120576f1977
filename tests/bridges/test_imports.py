"""Import: compressed-tensors (llm-compressor's oneshot), AutoAWQ GEMM and GPTQ v1/v2 -> QuantLinear.

AutoAWQ and GPTQ tensors are packed by the formats' own reference code as shipped in auto-round
(an llm-compressor dependency): ``auto_round.export.export_to_awq.utils.WQLinear_GEMM.from_linear``
(AutoAWQ's ``WQLinear_GEMM``, MIT HAN Lab) and ``auto_round_extension.torch.qlinear_torch_zp`` /
``qlinear_torch`` ``QuantLinear.pack`` (AutoGPTQ's v1 packing with ``zeros -= 1`` / GPTQModel's v2).
Hand-built tensors check single words against the layouts written in ``workbench.bridges.formats``.
"""

import copy
import json

import pytest
import torch

from workbench.bridges.formats import from_autoawq, from_gptq, to_qlinear
from workbench.bridges.imports import checkpoint_format, load_quantized
from workbench.quant import QuantConfig, QuantLinear, quantize


def _logits(m, ids):
    with torch.no_grad():
        return m(ids).logits


# -- hand-built words (format spec) ------------------------------------------------------------------
def test_autoawq_word_order_by_hand():
    # AutoAWQ GEMM: output column j of a pack of 8 sits in nibble order[j], order = [0, 2, 4, 6, 1, 3, 5, 7]
    # (WQLinear_GEMM.from_linear shifts by [0, 4, 1, 5, 2, 6, 3, 7] * 4 = the nibble of column j)
    cols = torch.arange(8)  # codes 0..7 for columns 0..7 of input row 0
    nibble_of_col = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    word = int(sum(int(c) << (4 * int(n)) for c, n in zip(cols, nibble_of_col)))
    qweight = torch.tensor([[word - (1 << 32) if word >= 1 << 31 else word]], dtype=torch.int32).repeat(8, 1)
    zero_word = int(sum(3 << (4 * i) for i in range(8)))  # every zero point 3
    qt = from_autoawq(qweight, torch.tensor([[zero_word]], dtype=torch.int32), torch.full((1, 8), 0.5), 4, 8)
    assert qt["codes"][:, 0].tolist() == list(range(8))  # [out, in]: column j of the pack is output row j
    assert (qt["zeros"] == 3).all() and (qt["scales"] == 0.5).all()


def test_gptq_word_layout_by_hand():
    # GPTQ: qweight [in*b/32, out], input row 8*r + i in bits 4i..4i+3; qzeros [groups, out*b/32]
    codes = torch.arange(8) % 16  # input rows 0..7 of output column 0
    word = int(sum(int(c) << (4 * i) for i, c in enumerate(codes)))
    qweight = torch.tensor([[word]], dtype=torch.int32)
    qweight = torch.cat([qweight, torch.zeros(1, 7, dtype=torch.int32)], 1)  # 8 output columns
    stored = torch.tensor([[int(sum(7 << (4 * i) for i in range(8)))]], dtype=torch.int32)  # v1 stores z - 1
    scales = torch.ones(1, 8, dtype=torch.float16)
    v1 = from_gptq(qweight, stored, scales, None, 4, 8, "gptq")
    assert v1["codes"][0].tolist() == list(range(8)) and (v1["zeros"] == 8).all()
    assert to_qlinear(v1).symmetric  # all zeros 2^(b-1): stored as the symmetric layout
    v2 = from_gptq(qweight, stored, scales, None, 4, 8, "gptq_v2")
    assert (v2["zeros"] == 7).all()  # the off-by-one: the same word means 7 in GPTQModel's v2
    wrapped = torch.tensor([[-1]], dtype=torch.int32)  # every nibble 15: v1 stored a true zero of -1 + 1?
    z = from_gptq(qweight, wrapped, scales, None, 4, 8, "gptq")["zeros"]
    assert z.is_floating_point() and (z == 16).all()  # AutoGPTQ reads 15 + 1 = 16, kept exactly


# -- reference packers (AutoAWQ / AutoGPTQ / GPTQModel code as shipped in auto-round) ------------------
def _rtn_layer(out_f=64, in_f=128, g=32, sym=False, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(in_f, out_f, bias=False)
    q, _ = quantize(torch.nn.Sequential(lin), QuantConfig(bits=4, group_size=g, symmetric=sym, skip=()))
    return q[0]


@pytest.mark.reference
def test_autoawq_reference_packing_round_trip():
    from auto_round.export.export_to_awq.utils import WQLinear_GEMM, dequantize_gemm

    ql = _rtn_layer()
    dense = torch.nn.Linear(128, 64, bias=False)
    with torch.no_grad():
        dense.weight.copy_(ql.dequantize_weight(torch.float32))
    s, z = ql.scales.T.float(), ql.zero_points().T.float()  # [groups, out]
    awq = WQLinear_GEMM.from_linear(dense, 4, 32, scales=s, zeros=z)
    qt = from_autoawq(awq.qweight, awq.qzeros, awq.scales, 4, 32)
    assert torch.equal(qt["codes"], ql.codes()) and torch.equal(qt["zeros"], ql.zero_points())
    ref_w = dequantize_gemm(awq.qweight, awq.qzeros, awq.scales, 4, 32).T  # AutoAWQ's own unpacking (fp16)
    assert torch.allclose(to_qlinear(qt).dequantize_weight(torch.float32), ref_w.float(), rtol=1e-3, atol=1e-6)


@pytest.mark.reference
@pytest.mark.parametrize("fmt, module", [("gptq", "qlinear_torch_zp"), ("gptq_v2", "qlinear_torch")])
@pytest.mark.parametrize("sym", [False, True])
def test_gptq_reference_packing_round_trip(fmt, module, sym):
    import importlib

    ref_cls = importlib.import_module(f"auto_round_extension.torch.{module}").QuantLinear
    ql = _rtn_layer(sym=sym)
    dense = torch.nn.Linear(128, 64, bias=False)
    with torch.no_grad():
        dense.weight.copy_(ql.dequantize_weight(torch.float32))
    ref = ref_cls(4, 32, 128, 64, bias=False)
    ref.device = torch.device("cpu")  # qlinear_torch.pack reads self.device, which its __init__ never sets
    ref.pack(dense, ql.scales.float(), ql.zero_points().to(torch.int32), torch.arange(128) // 32)
    qt = from_gptq(ref.qweight, ref.qzeros, ref.scales, torch.arange(128) // 32, 4, 32, fmt)
    assert torch.equal(qt["codes"], ql.codes()) and torch.equal(qt["zeros"], ql.zero_points())
    x = torch.randn(3, 128)
    got = to_qlinear(qt)(x)
    assert torch.allclose(got, ref(x), rtol=2e-3, atol=2e-3)  # its forward rounds W to float16
    wrong = from_gptq(ref.qweight, ref.qzeros, ref.scales, None, 4, 32, "gptq_v2" if fmt == "gptq" else "gptq")
    assert not torch.equal(wrong["zeros"], qt["zeros"])  # planted bug: the other convention is off by one


@pytest.mark.reference
def test_gptq_v1_zero_of_zero_reads_as_autogptq_does():
    # a true zero point 0 is stored as -1 (nibble 15) by AutoGPTQ's pack; its forward then uses 16
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear as V1

    dense = torch.nn.Linear(32, 32, bias=False)
    with torch.no_grad():
        dense.weight.copy_(torch.rand(32, 32))  # all positive: RTN would pick z = 0
    ref = V1(4, 32, 32, 32, bias=False)
    scales = torch.full((32, 1), 1 / 16)
    ref.pack(dense, scales, torch.zeros(32, 1, dtype=torch.int32), torch.zeros(32, dtype=torch.int32))
    qt = from_gptq(ref.qweight, ref.qzeros, ref.scales, None, 4, 32, "gptq")
    x = torch.randn(2, 32)
    assert torch.allclose(to_qlinear(qt)(x), ref(x), rtol=2e-3, atol=2e-3)


def test_act_order_is_refused():
    ql = _rtn_layer()
    g_idx = torch.randperm(128) // 32
    with pytest.raises(ValueError, match="desc_act"):
        from_gptq(torch.zeros(16, 64, dtype=torch.int32), torch.zeros(4, 8, dtype=torch.int32), ql.scales.T,
                  g_idx, 4, 32)


# -- whole checkpoints --------------------------------------------------------------------------------
def _write_packed_checkpoint(path, q, fmt: str):
    """A folder in AutoAWQ-GEMM or GPTQ-v1 layout for model ``q`` (its RTN integers), packed by the
    reference code; config.json carries that format's quantization_config."""
    from safetensors.torch import save_file

    state = {k: v for k, v in q.state_dict().items() if not any(
        k.startswith(n + ".") for n, m in q.named_modules() if isinstance(m, QuantLinear))}
    for name, ql in q.named_modules():
        if not isinstance(ql, QuantLinear):
            continue
        dense = torch.nn.Linear(ql.in_features, ql.out_features, bias=False)
        with torch.no_grad():
            dense.weight.copy_(ql.dequantize_weight(torch.float32))
        if fmt == "awq":
            from auto_round.export.export_to_awq.utils import WQLinear_GEMM

            ref = WQLinear_GEMM.from_linear(dense, 4, 32, scales=ql.scales.T.float(), zeros=ql.zero_points().T.float())
        else:
            from auto_round_extension.torch.qlinear_torch_zp import QuantLinear as V1

            ref = V1(4, 32, ql.in_features, ql.out_features, bias=False)
            ref.pack(dense, ql.scales.float(), ql.zero_points().to(torch.int32),
                     torch.arange(ql.in_features) // 32)
        for t in ("qweight", "qzeros", "scales"):
            state[f"{name}.{t}"] = getattr(ref, t).contiguous()
    q.config.save_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = ({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                                   "version": "gemm"} if fmt == "awq" else
                                  {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False,
                                   "desc_act": False})  # no checkpoint_format: v1, as old checkpoints
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))


@pytest.mark.reference
@pytest.mark.parametrize("fmt", ["awq", "gptq"])
def test_load_autoawq_and_gptq_checkpoints(tmp_path, bh, fmt):
    model = bh.tiny_llama()
    model.config.tie_word_embeddings = False
    q, _ = quantize(model, QuantConfig(bits=4, group_size=32))
    _write_packed_checkpoint(tmp_path, q, fmt)
    got, tok = load_quantized(tmp_path)
    assert tok is None and got.workbench_quant_config.method == fmt
    ids = bh.calib_ids(2, 24, seed=2)
    assert torch.allclose(_logits(got, ids), _logits(q, ids), rtol=1e-5, atol=1e-5)


@pytest.mark.reference
def test_llmcompressor_gptq_checkpoint(tmp_path, bh):
    """A GPTQ checkpoint written by llm-compressor's oneshot (W4A16_ASYM, actorder static)."""
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier
    from transformers import AutoTokenizer, LlamaForCausalLM

    from workbench.models import cache_dir

    tok_dir = cache_dir() / "models" / "smollm2-135m"
    if not tok_dir.is_dir():
        pytest.skip("llm-compressor's oneshot needs a tokenizer; the built-in model's cache is absent")
    bh.tiny_llama().save_pretrained(tmp_path / "fp")
    m = LlamaForCausalLM.from_pretrained(tmp_path / "fp").eval()
    ids = bh.calib_ids()
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})
    oneshot(model=m, tokenizer=AutoTokenizer.from_pretrained(tok_dir), dataset=ds, num_calibration_samples=8,
            max_seq_length=64, recipe=GPTQModifier(targets="Linear", scheme="W4A16_ASYM", ignore=["lm_head"]))
    x = bh.calib_ids(2, 24, seed=3)
    ref = _logits(m, x)
    m.save_pretrained(tmp_path / "q", save_compressed=True)
    got, _ = load_quantized(tmp_path / "q")
    assert got.workbench_quant_config.method == "gptq"
    assert torch.allclose(_logits(got, x), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.reference
def test_llmcompressor_checkpoint_of_builtin_model(tmp_path, default_model):
    """llm-compressor's oneshot (W4A16 asymmetric, groups of 64, data-free RTN) on the built-in model,
    saved compressed; imported into QuantLinear, its logits equal llm-compressor's model's."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    model, tok = default_model
    m = copy.deepcopy(model)
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=False, strategy="group", group_size=64))
    oneshot(model=m, recipe=QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"]))
    x = tok("The capital of France is Paris, and the capital of Germany is", return_tensors="pt").input_ids
    ref = _logits(m, x)
    m.save_pretrained(tmp_path, save_compressed=True)
    tok.save_pretrained(tmp_path)
    got, got_tok = load_quantized(tmp_path)
    n_q = sum(isinstance(mod, QuantLinear) for mod in got.modules())
    assert n_q == 210 and got_tok is not None  # 7 Linears x 30 layers; lm_head ignored
    assert torch.allclose(_logits(got, x), ref, rtol=1e-5, atol=1e-5)
    assert got.workbench_quant_config.label == "RTN W4 g64 asym"


def test_not_a_quantized_checkpoint():
    with pytest.raises(ValueError, match="not a quantized checkpoint"):
        checkpoint_format({"model_type": "llama"})
    with pytest.raises(ValueError, match="bitsandbytes"):
        checkpoint_format({"quantization_config": {"quant_method": "bitsandbytes"}})


@pytest.mark.reference
def test_imported_model_runs_on_the_engine(tmp_path, bh):
    """Studies time through workbench.engine: an imported checkpoint runs there with its logits."""
    from workbench.engine import Engine

    model = bh.tiny_llama()
    model.config.tie_word_embeddings = False
    q, _ = quantize(model, QuantConfig(bits=4, group_size=32))
    _write_packed_checkpoint(tmp_path, q, "gptq")
    got, _ = load_quantized(tmp_path)
    ids = bh.calib_ids(2, 24, seed=7)
    eng = Engine.from_hf(got, max_batch=2, max_seq=32)
    logits = eng.extend_batch(torch.arange(2), ids)
    assert torch.allclose(logits, _logits(got, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.reference
def test_llmcompressor_mixed_bit_widths_import_per_layer(tmp_path, bh):
    """Two config groups (every Linear at INT4 g32, the MLP down projections at INT8 per channel) written by
    llm-compressor's oneshot: each layer is imported at its own group's width, chosen as compressed-tensors
    does (exact name, then regex, then class name), and the logits equal llm-compressor's model's. Reading
    every layer with the first group's width gave logits off by tens and a wrong single-scheme label."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import LlamaForCausalLM

    bh.tiny_llama().save_pretrained(tmp_path / "fp")
    m = LlamaForCausalLM.from_pretrained(tmp_path / "fp").eval()
    groups = {"group_0": QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
                  num_bits=4, type="int", symmetric=False, strategy="group", group_size=32)),
              "group_1": QuantizationScheme(targets=["re:.*down_proj$"], weights=QuantizationArgs(
                  num_bits=8, type="int", symmetric=False, strategy="channel"))}
    oneshot(model=m, recipe=QuantizationModifier(config_groups=groups, ignore=["lm_head"]))
    x = bh.calib_ids(2, 24, seed=3)
    ref = _logits(m, x)
    m.save_pretrained(tmp_path / "q", save_compressed=True)
    got, _ = load_quantized(tmp_path / "q")
    bits = {n: mod.bits for n, mod in got.named_modules() if isinstance(mod, QuantLinear)}
    assert bits["model.layers.0.mlp.down_proj"] == 8 and bits["model.layers.1.self_attn.q_proj"] == 4
    assert sorted(set(bits.values())) == [4, 8] and len(bits) == 14
    assert torch.allclose(_logits(got, x), ref, rtol=1e-5, atol=1e-5)
    assert got.workbench_quant_config is None  # no single scheme describes the model: no single label
