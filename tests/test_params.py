"""One parser for every WB_* parameter: booleans, numbers, lists and the study size."""

import pytest

from workbench.params import env_flag, env_float, env_int, env_list, env_str, parse_flag, study_size


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "Yes", "on", " On "])
def test_true_spellings(text):
    assert env_flag("WB_X", False, {"WB_X": text}) is True


@pytest.mark.parametrize("text", ["0", "false", "False", "no", "NO", "off", "Off"])
def test_false_spellings(text):
    assert env_flag("WB_X", True, {"WB_X": text}) is False


def test_unset_and_empty_take_the_default():
    assert env_flag("WB_X", True, {}) is True
    assert env_flag("WB_X", False, {"WB_X": ""}) is False


@pytest.mark.parametrize("text", ["2", "yess", "enable", "-1"])
def test_other_values_raise_naming_the_parameter(text):
    with pytest.raises(ValueError, match="WB_X.*not a boolean"):
        env_flag("WB_X", False, {"WB_X": text})


def test_numbers_and_lists():
    env = {"WB_N": "12", "WB_R": "0.5", "WB_L": "1, 2,4", "WB_BAD": "ten"}
    assert env_int("WB_N", 3, env) == 12 and env_int("WB_M", 3, env) == 3
    assert env_float("WB_R", 1.0, env) == 0.5
    assert env_list("WB_L", (8,), int, env) == (1, 2, 4) and env_list("WB_Q", (8,), int, env) == (8,)
    with pytest.raises(ValueError, match="WB_BAD='ten' is not an integer"):
        env_int("WB_BAD", 1, env)


def test_str_choices_say_did_you_mean():
    assert env_str("WB_E", "workbench", {"WB_E": "VLLM"}, choices=("workbench", "vllm")) == "vllm"
    with pytest.raises(ValueError, match="vllm"):
        env_str("WB_E", "workbench", {"WB_E": "vlm"}, choices=("workbench", "vllm"))


@pytest.mark.parametrize(("env", "size"), [
    ({}, "demo"), ({"WB_SMOKE": "1"}, "smoke"), ({"WB_FULL": "yes"}, "full"), ({"WB_SIZE": "FULL"}, "full"),
    ({"WB_SMOKE": "no"}, "demo"), ({"WB_FULL": "off"}, "demo"), ({"WB_SIZE": "smoke", "WB_SMOKE": "1"}, "smoke")])
def test_study_size(env, size):
    assert study_size(env) == size


@pytest.mark.parametrize("env", [{"WB_SMOKE": "1", "WB_FULL": "1"}, {"WB_SIZE": "demo", "WB_FULL": "1"},
                                 {"WB_SIZE": "tiny"}, {"WB_FULL": "maybe"}])
def test_study_size_conflicts_raise(env):
    with pytest.raises(ValueError):
        study_size(env)


def test_parse_flag_passes_bools():
    assert parse_flag("x", True) is True and parse_flag("x", None, True) is True
