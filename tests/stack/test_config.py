"""StackConfig validation names the field; the combinations come in waterfall order."""

import pytest

from workbench.stack import COMBINATIONS, StackConfig, combo_label


def test_combinations_and_labels():
    assert len(COMBINATIONS) == 8 and len(set(COMBINATIONS)) == 8
    assert COMBINATIONS[:4] == ((False, False, False), (True, False, False), (False, True, False), (True, True, False))
    assert combo_label(True, True, True) == "W4A16 + spec + P/D" and combo_label(False, False, False, "fp32") == "fp32"


@pytest.mark.parametrize("kw, field", [({"group_size": 48}, "group_size"), ({"alpha": 1.0}, "alpha"),
                                       ({"gen_len": 1}, "gen_len"), ({"table_load": 0.3}, "table_load"),
                                       ({"splits": ((0, 1),)}, "splits"), ({"quant_method": "hqq"}, "quant_method"),
                                       ({"whatif_alphas": (1.2,)}, "whatif_alphas"), ({"mem_util": 0}, "mem_util")])
def test_bad_fields_raise_naming_them(kw, field):
    with pytest.raises(ValueError, match=field):
        StackConfig(**kw)


def test_row_and_max_seq():
    cfg = StackConfig(prompt_len=10, gen_len=5, k=3)
    assert cfg.max_seq == 10 + 5 + 3 + 2 and not cfg.synthetic
    assert isinstance(cfg.to_row()["workload"], str)
