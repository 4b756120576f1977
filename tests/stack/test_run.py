"""run_stack end to end on a tiny model (real engines, real acceptance), and resuming from the store."""

import pytest
import torch

from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import LengthDist, WorkloadConfig
from workbench.spec.drafts import truncated_draft
from workbench.stack import StackConfig, run
from workbench.stack.engines import build_engine, dequantized_copy_bytes, footprint_bytes
from workbench.stack.run import run_stack

CFG = StackConfig(target="tiny", draft="layers-1", group_size=32, prompt_len=12, gen_len=5, k=2,
                  profile=ProfileConfig(prompt_lens=(8, 12, 16), prefill_batches=(1,), decode_batches=(1, 2, 4),
                                        context_lens=(8,), repeats=1, warmup=0),
                  workload=WorkloadConfig(30, prompt=LengthDist("fixed", 12), output=LengthDist("fixed", 4)),
                  load_fractions=(0.5, 1.0), table_load=0.5, slo_scales=(1.0,), whatif_alphas=(0.7,), whatif_ks=(2,))


@pytest.mark.slow
def test_run_stack_end_to_end_and_resume(tiny_target, tmp_path, monkeypatch):
    draft = truncated_draft(tiny_target, 1)
    res = run_stack(tiny_target, draft, CFG, list(range(1, 13)), name="stack_t", root=tmp_path)
    assert len(res.points) == 4 and len(res.table) == 9 and len(res.whatif) == 2
    assert set(res.points["mem_source"]) == {"footprint model: engine tensors"}
    spec = res.points[res.points["speculative"]]
    assert (spec["spec_timing"] == "real").all() and (spec["match_plain"] == 1.0).all()
    assert (res.points["weight_gb"] > 0).all()
    # W4A16 engines store fewer bytes than fp32 ones
    w = res.points.set_index(["quantized", "speculative"])["weight_gb"]
    assert w[(True, False)] < w[(False, False)] / 2
    assert set(res.load["label"]) >= {"fp32 x2", "W4A16 + spec + P/D 1P+1D"} and res.capacity_rps > 0
    calls = []
    real = run.run_point
    monkeypatch.setattr(run, "run_point", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = run_stack(tiny_target, draft, CFG, list(range(1, 13)), name="stack_t", root=tmp_path)
    assert calls == [] and again.points["run_id"].tolist() == res.points["run_id"].tolist()


def test_random_target_needs_alpha():
    with pytest.raises(ValueError, match="StackConfig.alpha"):
        run_stack({"model_type": "llama"}, {"model_type": "llama"}, CFG, list(range(12)))


def test_prompt_length_checked(tiny_target):
    with pytest.raises(ValueError, match="prompt_len=12"):
        run_stack(tiny_target, tiny_target, CFG, [1, 2, 3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_footprint_counts_the_quantized_format_and_the_cpu_copy_apart(tiny_target, dtype):
    """Known answer: a W4A16 matmul stores out x in / 2 bytes of codes plus a scale and a zero per group of 32
    (in the engine's dtype), and the CPU copy beside it out x in values in the engine's dtype. The old footprint
    counted the copy as the weight, so W4A16 weighed what fp32 does."""
    dense, w4 = (build_engine(tiny_target, q, group_size=32, device="cpu", dtype=dtype) for q in (False, True))
    shapes = [m.weight.shape for n, m in tiny_target.named_modules()
              if isinstance(m, torch.nn.Linear) and n.startswith("model.layers")]
    elems = sum(o * i for o, i in shapes)
    size = torch.tensor([], dtype=dtype).element_size()
    assert dequantized_copy_bytes(dense) == 0
    assert dequantized_copy_bytes(w4) == elems * size
    packed = footprint_bytes(dense) - elems * size + elems // 2 + 2 * (elems // 32) * size
    assert footprint_bytes(w4) == packed
