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
