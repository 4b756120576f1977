import pytest

from workbench.quant import QuantConfig, quantize
from workbench.quant.calib import calibration_ids


@pytest.mark.parametrize("bits", [1, 9, 0])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="bits"):
        QuantConfig(bits=bits)


def test_unknown_method_did_you_mean():
    with pytest.raises(ValueError, match="Did you mean 'gptq'"):
        QuantConfig(method="gptqq")


def test_unknown_granularity_did_you_mean():
    with pytest.raises(ValueError, match="Did you mean 'per_channel'"):
        QuantConfig(granularity="per_chanel")


def test_group_size_must_divide_names_layer(tiny):
    # hidden 128 divides by 96? no -> the first layer is named
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn\.q_proj.*group_size=96"):
        quantize(tiny, QuantConfig(group_size=96))


def test_empty_calibration_text(tiny):
    class Tok:
        def __call__(self, s, add_special_tokens=False):
            return {"input_ids": [1] * len(s)}

    with pytest.raises(ValueError, match="calibration text is empty"):
        quantize(tiny, QuantConfig(method="gptq"), "   ", tok=Tok())
    with pytest.raises(ValueError, match="calibration text is empty"):
        calibration_ids(Tok(), "")


def test_config_row_and_presets():
    c = QuantConfig.from_name("w4a16")
    assert (c.method, c.bits, c.group_size, c.symmetric, c.scheme) == ("rtn", 4, 128, True, "W4A16")
    assert QuantConfig(granularity="per_channel").to_row()["group_size"] == -1
    assert QuantConfig(granularity="per_tensor").to_row()["group_size"] == 0
    with pytest.raises(ValueError, match="Did you mean"):
        QuantConfig.from_name("w4a61")


def test_default_config_works_on_the_built_in_widths(make_tiny):
    # the built-in SmolLM2-135M has hidden 576 = 4.5 x 128 and intermediate 1536; QuantConfig() used
    # groups of 128 and raised there (fails on the old default)
    m = make_tiny(hidden=576, inter=1536, layers=1)
    _, rep = quantize(m, QuantConfig())
    assert (rep["group_size"] == 64).all() and len(rep) == 7
    with pytest.raises(ValueError, match=r"q_proj: group_size=128 does not divide in_features=576.*64.*partial_groups=True"):
        quantize(m, QuantConfig.from_name("w4a16"))  # W4A16 g128 stays strict, naming the fixes
    assert len(quantize(m, QuantConfig.from_name("w4a16", partial_groups=True))[1]) == 7


INT_FIELDS = ["bits", "group_size", "n_calib_samples", "calib_seq_len", "gptq_block", "awq_grid", "awq_max_tokens",
              "seed"]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("bad", [4.0, 4.5, "4", True, None])
def test_integer_fields_take_integers_and_name_themselves(field, bad):
    with pytest.raises(ValueError, match=rf"QuantConfig\.{field}={bad!r}.*integer"):
        QuantConfig(**{field: bad})


@pytest.mark.parametrize("field,bad", [("gptq_damp", float("nan")), ("gptq_damp", "0.01"), ("gptq_damp", 0.0),
                                       ("symmetric", "yes"), ("partial_groups", 1), ("true_sequential", None),
                                       ("static_groups", "no"), ("act_order", 0), ("skip", 3), ("skip", ("lm_head", 2)),
                                       ("method", 3), ("awq_inputs", "full"), ("zero_point", None)])
def test_every_field_names_itself(field, bad):
    with pytest.raises(ValueError, match=rf"QuantConfig\.{field}(\[\d+\])?="):  # skip[1]=2 names the item
        QuantConfig(**{field: bad})


def test_numpy_integers_are_accepted_as_ints():
    import numpy as np

    c = QuantConfig(bits=np.int64(3), group_size=np.int32(32), symmetric=np.bool_(True))
    assert (type(c.bits), type(c.group_size), type(c.symmetric)) == (int, int, bool)


def test_act_order_with_dynamic_groups_names_the_fix():
    with pytest.raises(ValueError, match="static_groups=True"):
        QuantConfig(method="gptq", act_order=True)
    assert QuantConfig(method="gptq", act_order=True, granularity="per_channel").act_order


def test_presets_are_distinct_and_aliases_resolve():
    from workbench.quant.config import ALIASES, PRESETS

    configs = [QuantConfig.from_name(n) for n in PRESETS]
    assert len(set(configs)) == len(configs)  # no two names for one configuration
    assert QuantConfig.from_name("w8a16") == QuantConfig(bits=8, granularity="per_channel", symmetric=True)
    assert QuantConfig.from_name("w4a16_asym") == QuantConfig(group_size=128)
    assert set(ALIASES.values()) <= set(PRESETS) and not set(ALIASES) & set(PRESETS)


def test_grids_are_named_presets():
    from workbench.quant import quant_grid
    from workbench.quant.config import GRIDS, PRESETS

    full = quant_grid("full")
    assert len(full) == 25 and len(set(full)) == 25  # + the FP point the sweep adds = 26
    assert all(n in PRESETS for g in GRIDS.values() for n in g)
    assert set(quant_grid("demo")) <= set(full) and set(quant_grid("small")) <= set(full)
    assert all(c.partial_groups for c in quant_grid("table")) and not quant_grid("smoke", partial_groups=False)[0].partial_groups
    assert quant_grid("demo", n_calib_samples=4)[-2].n_calib_samples == 4
    with pytest.raises(ValueError, match="Did you mean 'demo'"):
        quant_grid("dmeo")
