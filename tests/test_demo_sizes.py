"""The demo sizes by device: the CPU demo is cut to fit ``make reports`` in 20 minutes on 2 cores,
the CUDA demo keeps its sizes (GPU runs of the notebooks are compared across commits at them).

Each module resolves the device through its own ``resolve_device`` name, patched here to answer
"cuda" on this CPU machine. A function that picked the CPU size on CUDA (or the reverse) fails the
exact-value asserts below."""

import pytest
import torch

import workbench.quant.sweep as qsweep
import workbench.stack.config as stack_config
from workbench.eval import mmlu
from workbench.pd import loop, profile
from workbench.spec import presets

MODULES = (mmlu, loop, profile, qsweep, presets, stack_config)


@pytest.fixture(params=["cpu", "cuda"])
def kind(request, monkeypatch):
    for m in MODULES:
        monkeypatch.setattr(m, "resolve_device", lambda d="auto", _k=request.param: torch.device(_k))
    return request.param


def test_demo_sizes_by_device(kind):
    cuda = kind == "cuda"
    # notebook 00
    assert mmlu.demo_n_per_subject(kind) == (4 if cuda else 2)
    # notebook 01
    d = qsweep.demo_defaults(kind)
    assert (d["grid"], d["n_tokens"], d["n_calib_samples"], d["calib_seq_len"], d["awq_max_tokens"]) == (
        ("demo", 4096, 32, 256, 2048) if cuda else ("demo_cpu", 1024, 4, 128, 256))
    assert d["n_questions"] == (10 if cuda else 1) and (d["subjects"] is None if cuda else len(d["subjects"]) == 10)
    # notebook 02
    g = presets.SpecGrid.from_name(presets.demo_grid(kind))
    assert (g.ks, g.n_prompts, g.max_new_tokens, g.drafts, g.distill_steps) == (
        ((1, 2, 4), 6, 12, ("int8", "int3", "distilled"), 50) if cuda else
        ((1, 4), 3, 8, ("int8", "int3", "distilled"), 30))
    # notebook 03
    assert profile.ProfileConfig.for_device(kind) == (profile.ProfileConfig() if cuda else
                                                      profile.ProfileConfig(repeats=3))
    assert profile.ProfileConfig.for_device(kind, repeats=7).repeats == 7
    assert loop.demo_loop_requests(kind) == (24 if cuda else 12)
    # notebook 04
    assert stack_config.demo_defaults(kind) == ({"kv_context": None, "quant_questions": None, "quant_speed": True,
                                                 "gen_len": 16}
                                                if cuda else {"kv_context": 1024, "quant_questions": 0,
                                                              "quant_speed": False, "gen_len": 12})


def test_cpu_demo_keeps_every_control():
    """The CPU spec grid still varies every explorer control (draft, k, temperature, policy) and
    fills one results-store point per config and draft (3 prompts, within the notebook's point size of 4)."""
    g = presets.SpecGrid.from_name("demo_cpu")
    cfgs = g.configs()
    assert len(g.drafts) >= 2 and len({c.k for c in cfgs}) >= 2
    assert len({c.temperature for c in cfgs}) >= 2 and len({c.policy for c in cfgs}) == 3
    assert g.n_prompts == 3


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="device"):
        presets.demo_grid("tpu")
