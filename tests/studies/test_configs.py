"""Every study's named sizes on the CPU and on CUDA (patched here: this machine has no GPU), their validation, and
the study size parameter. A preset that picked the CPU size on CUDA (or the reverse) fails the exact values."""

import pytest
import torch

from workbench import device
from workbench.pd import profile
from workbench.studies import mmlu, pd, quant, spec, stack


@pytest.fixture(params=["cpu", "cuda"])
def kind(request, monkeypatch):
    for m in (device, profile):
        monkeypatch.setattr(m, "resolve_device", lambda d="auto", _k=request.param: torch.device(_k))
    monkeypatch.setattr(device.Placement, "gpu_memory_gib", lambda self: 80.0 if self.device.type == "cuda" else 0.0)
    return request.param


def test_demo_sizes_by_device(kind):
    cuda = kind == "cuda"
    assert mmlu.Config.from_name("demo", kind).n_per_subject == (4 if cuda else 2)
    q = quant.Config.from_name("demo", kind)
    assert (q.grid, q.n_tokens, q.n_calib, q.calib_len, q.awq_tokens, q.n_questions) == (
        ("demo", 4096, 32, 256, 2048, 10) if cuda else ("demo_cpu", 1024, 4, 128, 256, 1))
    assert (q.subjects is None) if cuda else len(q.subjects) == 10
    assert q.timing_shape == ("random:qwen2-7b" if cuda else "")  # the 7B timing shape on a GPU with >= 40 GiB
    g = spec.Config.from_name("demo", kind).spec_grid()
    assert (g.ks, g.n_prompts, g.max_new_tokens, g.drafts, g.distill_steps) == (
        ((1, 2, 4), 6, 12, ("int8", "int3", "distilled"), 50) if cuda else
        ((1, 4), 3, 8, ("int8", "int3", "distilled"), 30))
    p = pd.Config.from_name("demo", kind)
    assert p.loop_requests == (24 if cuda else 12) and p.profile_config(kind).repeats == (5 if cuda else 3)
    s = stack.Config.from_name("demo", kind)
    assert (s.gen_len, s.kv_context, s.timing_shape) == ((16, 0, "random:qwen2-7b") if cuda else (12, 1024, ""))


def test_small_gpu_gets_no_timing_shape(monkeypatch):
    monkeypatch.setattr(device, "resolve_device", lambda d="auto": torch.device("cuda"))
    monkeypatch.setattr(device.Placement, "gpu_memory_gib", lambda self: 24.0)
    assert quant.Config.from_name("demo", "cuda").timing_shape == "" == stack.Config.from_name("demo", "cuda").timing_shape


def test_smoke_and_full_sizes():
    assert mmlu.Config.from_name("smoke", "cpu").subjects == mmlu.SMOKE_SUBJECTS
    full = mmlu.Config.from_name("full", "cpu")
    assert full.n_per_subject == 10 and len(full.runs) == 12
    assert quant.Config.from_name("smoke", "cpu").grid == "smoke" and quant.Config.from_name("full", "cpu").grid == "full"
    assert spec.Config.from_name("full", "cpu").spec_grid().drafts == ("int8", "int4", "int3", "distilled")
    assert pd.Config.from_name("smoke", "cpu").rates == (10.0, 40.0, 80.0)
    assert stack.Config.from_name("smoke", "cpu").stack_config("m").splits == ((1, 1),)


def test_overrides_and_none_keeps_the_preset():
    c = quant.Config.from_name("demo", "cpu", grid="smoke", n_questions=None)
    assert c.grid == "smoke" and c.n_questions == 1
    assert spec.Config.from_name("smoke", "cpu", ks="1,3").spec_grid().ks == (1, 3)
    assert mmlu.Config.from_name("demo", "cpu", subjects="anatomy, virology").subjects == ("anatomy", "virology")


@pytest.mark.parametrize(("make", "match"), [
    (lambda: quant.Config.from_name("tiny", "cpu"), "study size='tiny' is unknown"),
    (lambda: quant.Config.from_name("demo", "cpu", gird="smoke"), r"no field\(s\) \['gird'\]"),
    (lambda: quant.Config.from_name("demo", "cpu", grid="smok"), "Did you mean 'smoke'"),
    (lambda: mmlu.Config(runs=(("mmlu", 6),)), "n_shot in 0..5"),
    (lambda: quant.Config(timing_shape="qwen2-7b"), "random-init published shape"),
    (lambda: spec.Config(grid="nope"), "spec grid 'nope' is unknown"),
    (lambda: stack.Config(slo_ttft_ms=100.0), "set both"),
    (lambda: pd.Config(profile="big"), "'device'"),
    (lambda: mmlu.Config.from_name("demo", "tpu"), "device"),
])
def test_bad_configs_name_the_fix(make, match):
    with pytest.raises(ValueError, match=match):
        make()
