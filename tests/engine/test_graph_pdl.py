"""Graphs of more than 8 token rows are captured with and without PDL on the multi-tile INT4 MMA launches, and the
engine keeps the faster (``Engine._pdl_choices``; the H200 measurement in its docstring). The choice must never
change what a step computes, and the knob must be restored whatever happens inside the capture."""

import pytest
import torch

from workbench.engine import Engine, int4
from workbench.engine import engine as engine_mod
from workbench.engine.int4 import Int4Linear
from workbench.engine.runtime import InputScaled
from workbench.kernels import w4a16_mma

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def test_pdl_knob_is_restored_after_an_error(monkeypatch):
    monkeypatch.setattr(w4a16_mma, "PDL_MAX_MT", 8)
    with pytest.raises(RuntimeError, match="inside"), engine_mod._w4mma_pdl_max_mt(1):
        assert w4a16_mma.PDL_MAX_MT == 1
        raise RuntimeError("inside")
    assert w4a16_mma.PDL_MAX_MT == 8
    with engine_mod._w4mma_pdl_max_mt(None):  # None leaves the module's value
        assert w4a16_mma.PDL_MAX_MT == 8


def test_no_ab_without_int4_mma_weights_or_for_few_rows():
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu", w4a16=True)  # CPU: no MMA kernel
    assert eng._pdl_choices(16) == (None,)
    assert eng._pdl_choices(8) == (None,)


def _fake_int4(monkeypatch, rows_on_mma):
    lin = Int4Linear.__new__(Int4Linear)  # no weights: only the routing questions _pdl_choices asks
    monkeypatch.setattr(Int4Linear, "_mma_rows", lambda self, m: m in rows_on_mma)
    monkeypatch.setattr(Int4Linear, "_plain_mma", lambda self, m: m in rows_on_mma)
    return lin


def test_ab_choices_for_int4_mma_weights(monkeypatch):
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu")
    lin = _fake_int4(monkeypatch, rows_on_mma=range(1, 17))
    monkeypatch.setattr(eng.w, "matmuls", lambda: [torch.nn.Identity(), InputScaled(lin, torch.ones(4))])
    monkeypatch.setattr(w4a16_mma, "PDL_MAX_MT", 8)
    assert eng._pdl_choices(9) == (8, 1)  # an AWQ-scaled INT4 weight counts
    assert eng._pdl_choices(8) == (None,)  # one 8-row tile: the PDL setting does not change
    assert eng._pdl_choices(32) == (None,)  # 32 rows do not take the MMA kernel here: two captures would be equal
    monkeypatch.setattr(engine_mod, "GRAPH_PDL_AB", False)
    assert eng._pdl_choices(9) == (None,)


@pytest.mark.parametrize("max_m, rows", [(1, [1]), (2, [1, 2]), (4, [1, 3]), (5, [1, 3, 5]), (8, [1, 3, 5]),
                                         (16, [1, 3, 5, 9]), (64, [1, 3, 5, 9, 17, 33]), (100, [1, 3, 5, 9, 17, 33])])
def test_warmup_tunes_every_row_class_the_batch_reaches(max_m, rows):
    # with tuning rows (1, 3, 5, ...) and a batch of 2, the 2..4-row class was not tuned before the first capture
    assert int4.mma_warmup_rows(max_m) == rows
    assert [w4a16_mma.row_class(m) for m in rows] == list(w4a16_mma.ROW_CLASSES[:len(rows)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="graphs and the MMA kernel are CUDA")
def test_verify_graph_records_the_ab_and_matches_eager():
    if not w4a16_mma.available(torch.device("cuda")):
        pytest.skip(f"W4A16 MMA kernel unavailable: {w4a16_mma.why_unavailable()}")
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cuda", w4a16=True, seed=0)
    ref = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cuda", w4a16=True, seed=0, use_graphs=False)
    prompt = torch.randint(0, 256, (1, 12), device="cuda")
    eng.extend_batch([0], prompt, logits="last")
    ref.extend_batch([0], prompt, logits="last")
    toks = torch.randint(0, 256, (1, 9), device="cuda")
    before = w4a16_mma.PDL_MAX_MT
    got = eng.extend_batch([0], toks)  # captures the (1, 9) graph twice and keeps one
    want = ref.extend_batch([0], toks)
    choice = eng.pdl_choice[(1, 9, True, False)]  # (B, T, prefix, last); the 12-token prompt's graph has its own
    assert choice["w4mma_pdl_max_mt"] in (before, 1)
    assert set(choice["ms"]) == {before, 1} and all(v > 0 for v in choice["ms"].values())
    assert w4a16_mma.PDL_MAX_MT == before
    # the kept graph computes this step (eager may take SDPA where the graph takes the decode-attention kernel:
    # bf16 rounding apart, equal); a stale or wrong graph output is O(1) off
    rel = (got.float() - want.float()).norm() / want.float().norm()
    assert got.shape == (1, 9, 256) and rel < 2e-2, float(rel)
