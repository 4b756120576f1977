"""Graphs of more than 32 token rows that run the INT4 MMA kernel are captured without PDL on its multi-tile
launches (``Engine._pdl_max_mt``; the H200 measurement in its docstring). The choice must never change what a step
computes, and the knob must be restored whatever happens inside the capture."""

import pytest
import torch

from workbench.engine import Engine, EngineConfig, int4
from workbench.engine import engine as engine_mod
from workbench.engine.int4 import Int4Linear
from workbench.engine.runtime import InputScaled
from workbench.kernels import common, w4a16_mma

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def test_pdl_knob_is_restored_after_an_error(monkeypatch):
    monkeypatch.setattr(w4a16_mma, "PDL_MAX_MT", 8)
    monkeypatch.setattr(common, "PDL_ENABLED", True)
    with pytest.raises(RuntimeError, match="inside"), engine_mod._launch(False, 1):
        assert w4a16_mma.PDL_MAX_MT == 1 and common.PDL_ENABLED is False
        raise RuntimeError("inside")
    assert w4a16_mma.PDL_MAX_MT == 8 and common.PDL_ENABLED is True
    with engine_mod._launch(None, None):  # None leaves the module's values
        assert w4a16_mma.PDL_MAX_MT == 8 and common.PDL_ENABLED is True


def test_engine_config_pdl_reaches_the_kernels_launch_check(monkeypatch):
    # EngineConfig(pdl=False) replaces WB_PDL=0: every step of the engine runs with the kernels' PDL switch off
    seen = []
    monkeypatch.setattr(engine_mod, "forward", lambda *a, **k: seen.append(common.PDL_ENABLED))
    eng = Engine.from_config(TINY, max_batch=1, max_seq=16, device="cpu", config=EngineConfig(pdl=False))
    assert eng._pdl is None  # a CPU engine leaves the kernel modules alone
    assert engine_mod.launch_pdl(EngineConfig(pdl=False), torch.device("cuda")) is False
    assert engine_mod.launch_pdl(EngineConfig(), torch.device("cuda", 0)) is True
    eng._pdl = engine_mod.launch_pdl(eng.engine_config, torch.device("cuda"))  # what __init__ sets on CUDA
    eng._forward(None, None, None, True, False)
    assert seen == [False] and common.PDL_ENABLED is True  # restored after the step
    with pytest.raises(TypeError, match="pdl"):
        EngineConfig(pdl="0")


def test_no_pdl_change_without_int4_mma_weights_or_for_few_rows():
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu", w4a16=True)  # CPU: no MMA kernel
    assert eng._pdl_max_mt(64) is None
    assert eng._pdl_max_mt(8) is None


def _fake_int4(monkeypatch, rows_on_mma):
    lin = Int4Linear.__new__(Int4Linear)  # no weights: only the routing questions _pdl_max_mt asks
    monkeypatch.setattr(Int4Linear, "_mma_rows", lambda self, m: m in rows_on_mma)
    monkeypatch.setattr(Int4Linear, "_plain_mma", lambda self, m: m in rows_on_mma)
    return lin


def test_pdl_off_above_32_rows_for_int4_mma_weights(monkeypatch):
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu")
    lin = _fake_int4(monkeypatch, rows_on_mma=range(1, 65))
    monkeypatch.setattr(eng.w, "matmuls", lambda: [torch.nn.Identity(), InputScaled(lin, torch.ones(4))])
    assert eng._pdl_max_mt(64) == 1  # an AWQ-scaled INT4 weight counts
    assert eng._pdl_max_mt(32) is None and eng._pdl_max_mt(9) is None
    _fake_int4(monkeypatch, rows_on_mma=range(1, 17))
    assert eng._pdl_max_mt(64) is None  # 64 rows do not take the MMA kernel here


@pytest.mark.parametrize("max_m, rows", [(1, [1]), (2, [1, 2]), (4, [1, 3]), (5, [1, 3, 5]), (8, [1, 3, 5]),
                                         (16, [1, 3, 5, 9]), (64, [1, 3, 5, 9, 17, 33]), (100, [1, 3, 5, 9, 17, 33])])
def test_warmup_tunes_every_row_class_the_batch_reaches(max_m, rows):
    # with tuning rows (1, 3, 5, ...) and a batch of 2, the 2..4-row class was not tuned before the first capture
    assert int4.mma_warmup_rows(max_m) == rows
    assert [w4a16_mma.row_class(m) for m in rows] == list(w4a16_mma.ROW_CLASSES[:len(rows)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="graphs and the MMA kernel are CUDA")
def test_large_graph_records_its_pdl_setting_and_matches_eager():
    if not w4a16_mma.available(torch.device("cuda")):
        pytest.skip(f"W4A16 MMA kernel unavailable: {w4a16_mma.why_unavailable()}")
    eng = Engine.from_config(TINY, max_batch=40, max_seq=64, device="cuda", w4a16=True, seed=0)
    ref = Engine.from_config(TINY, max_batch=40, max_seq=64, device="cuda", w4a16=True, seed=0, use_graphs=False)
    toks = torch.randint(0, 256, (40, 1), device="cuda")
    before = w4a16_mma.PDL_MAX_MT
    got = eng.extend_batch(list(range(40)), toks)
    want = ref.extend_batch(list(range(40)), toks)
    assert eng.pdl_choice.get((40, 1, True, False)) in (None, 1)
    assert w4a16_mma.PDL_MAX_MT == before
    rel = (got.float() - want.float()).norm() / want.float().norm()
    assert got.shape == (40, 1, 256) and rel < 2e-2, float(rel)
