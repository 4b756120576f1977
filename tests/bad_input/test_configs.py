"""Counts and types in every config family: integer fields take integers, numbers are numbers and
never NaN, and each error names ``Class.field`` (before: fractions and strings passed validation and
crashed deep inside numpy, or at a comparison, with a TypeError naming nothing)."""

import dataclasses

import numpy as np
import pytest

from workbench.arch import MODEL_PRESETS, ModelSpec
from workbench.eval.fidelity import FidelityConfig
from workbench.eval.mmlu import MMLUConfig
from workbench.pd.hardware import PRESETS, HardwareSpec
from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import SLO, LengthDist, SimConfig, WorkloadConfig
from workbench.quant import QuantConfig
from workbench.spec import SpecConfig
from workbench.validate import ConfigError

NAN = float("nan")
HW = {"name": "x", "hbm_gbs": 100.0, "matmul_flops": 1e12, "mem_gb": 8.0, "link_gbs": 10.0}
MS = {"name": "x", "n_layers": 2, "hidden": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
      "intermediate": 128, "vocab": 100}

CASES = [  # (class, base kwargs, bad field, bad value, message fragment)
    (SimConfig, {}, "n_instances", 1.5, "must be an integer; a count or size cannot be fractional"),
    (SimConfig, {}, "n_instances", "2", "pass the number 2 without quotes"),
    (SimConfig, {}, "n_decode", True, "must be an integer, not a bool"),
    (SimConfig, {}, "max_batch", 256.0, "must be an integer (got a float); pass 256"),
    (SimConfig, {}, "kv_capacity_tokens", float("inf"), "cannot be inf"),
    (SimConfig, {}, "link_gbs", NAN, "is NaN"),
    (SimConfig, {}, "link_latency_ms", "0.01", "must be a number (got str)"),
    (SimConfig, {}, "policy", 3, "must be a string"),
    (WorkloadConfig, {}, "n_requests", 100.5, "must be an integer"),
    (WorkloadConfig, {}, "n_requests", "100", "pass the number 100 without quotes"),
    (WorkloadConfig, {}, "rate", "10", "must be a number (got str)"),
    (WorkloadConfig, {}, "cv", NAN, "is NaN"),
    (WorkloadConfig, {}, "seed", 0.5, "must be an integer"),
    (WorkloadConfig, {}, "prompt", 512, "must be a LengthDist (got int)"),
    (SLO, {}, "ttft_ms", "400", "pass the number 400 without quotes"),
    (SLO, {}, "e2e_ms", NAN, "is NaN"),
    (LengthDist, {}, "value", 12.5, "must be an integer"),
    (LengthDist, {"kind": "data"}, "values", (1.5, 2), "LengthDist.values[0]=1.5 must be an integer"),
    (LengthDist, {"kind": "lognormal"}, "sigma", "0.5", "must be a number"),
    (QuantConfig, {}, "n_calib_samples", 2.5, "must be an integer"),
    (QuantConfig, {}, "group_size", "128", "pass the number 128 without quotes"),
    (QuantConfig, {}, "gptq_damp", "0.01", "must be a number (got str)"),
    (QuantConfig, {}, "gptq_damp", NAN, "is NaN"),
    (QuantConfig, {}, "symmetric", "yes", "must be True or False"),
    (QuantConfig, {}, "bits", 4.0, "pass 4"),
    (SpecConfig, {}, "confidence_threshold", "0.4", "must be a number"),
    (SpecConfig, {}, "top_p", NAN, "is NaN"),
    (SpecConfig, {}, "seed", 1.5, "must be an integer"),
    (SpecConfig, {}, "max_new_tokens", "32", "pass the number 32"),
    (MMLUConfig, {}, "n_shot", 2.5, "must be an integer"),
    (MMLUConfig, {}, "batch_size", "8", "pass the number 8"),
    (MMLUConfig, {}, "max_tokens", 4096.5, "must be an integer"),
    (FidelityConfig, {}, "seq_len", 128.5, "must be an integer"),
    (FidelityConfig, {}, "n_tokens", "4096", "pass the number 4096"),
    (HardwareSpec, HW, "hbm_gbs", "3350", "pass the number 3350"),
    (HardwareSpec, HW, "mem_gb", NAN, "is NaN"),
    (ModelSpec, MS, "n_layers", 28.5, "must be an integer"),
    (ModelSpec, MS, "qkv_bias", "false", "must be True or False"),
    (ProfileConfig, {}, "prompt_lens", (16.5,), "ProfileConfig.prompt_lens[0]=16.5 must be an integer"),
    (ProfileConfig, {}, "repeats", "5", "pass the number 5"),
]


@pytest.mark.parametrize("cls,base,field,value,fragment", CASES,
                         ids=[f"{c.__name__}.{f}={v!r}" for c, _, f, v, _ in CASES])
def test_bad_values_name_the_field(cls, base, field, value, fragment):
    with pytest.raises(ConfigError) as e:
        cls(**{**base, field: value})
    msg = str(e.value)
    assert msg.startswith(f"{cls.__name__}.{field.split('[')[0]}") and fragment in msg, msg
    assert isinstance(e.value, ValueError)  # existing `except ValueError` handlers keep working


@pytest.mark.parametrize("cls,base", [(SimConfig, {}), (WorkloadConfig, {}), (QuantConfig, {}), (SpecConfig, {}),
                                      (MMLUConfig, {}), (FidelityConfig, {}), (ProfileConfig, {}), (SLO, {}),
                                      (LengthDist, {}), (HardwareSpec, HW), (ModelSpec, MS)])
def test_defaults_and_presets_still_validate(cls, base):
    c = cls(**base)
    assert dataclasses.replace(c) == c  # the checks are idempotent


def test_presets_validate():
    assert len(PRESETS) == 5 and len(MODEL_PRESETS) == 3  # constructed at import, through the checks
    assert [QuantConfig.from_name(n).bits for n in ("w4a16", "rtn_int8_channel")] == [4, 8]


def test_numpy_scalars_become_python_scalars_and_ints_stay_ints():
    c = SimConfig(n_instances=np.int64(2), link_gbs=np.float32(10.0))
    assert type(c.n_instances) is int and type(c.link_gbs) is float and c.n_instances == 2
    w = WorkloadConfig(rate=5)  # an int for a float field is a number: kept as given (resume keys unchanged)
    assert type(w.rate) is int
    assert ProfileConfig(prompt_lens=[8, 16]).prompt_lens == (8, 16)
    assert SLO(ttft_ms=None).ttft_ms is None and QuantConfig(skip="lm_head").skip == ("lm_head",)
    assert QuantConfig().to_row() == QuantConfig(**dataclasses.asdict(QuantConfig())).to_row()
