"""run_stack end to end on a tiny model (real engines, real acceptance), and resuming from the store."""

import pytest

from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import LengthDist, WorkloadConfig
from workbench.spec.drafts import truncated_draft
from workbench.stack import StackConfig, run
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
