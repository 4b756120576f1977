"""Graphs of more than 8 token rows are captured with and without PDL on the multi-tile INT4 MMA launches, and the
engine keeps the faster (``Engine._pdl_choices``; the H200 measurement in its docstring). The choice must never
change what a step computes, and the knob must be restored whatever happens inside the capture."""

import pytest
import torch

from workbench.engine import Engine
from workbench.engine import engine as engine_mod
from workbench.kernels import w4a16_mma

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def test_pdl_knob_is_restored_after_an_error():
    before = w4a16_mma.PDL_MAX_MT
    with pytest.raises(RuntimeError, match="inside"), engine_mod._w4mma_pdl_max_mt(1):
        assert w4a16_mma.PDL_MAX_MT == 1
        raise RuntimeError("inside")
    assert w4a16_mma.PDL_MAX_MT == before
    with engine_mod._w4mma_pdl_max_mt(None):  # None leaves the module's value
        assert w4a16_mma.PDL_MAX_MT == before


def test_no_ab_without_int4_mma_weights_or_for_few_rows():
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu", w4a16=True)  # CPU: no MMA kernel
    assert eng._pdl_choices(16) == (None,)
    assert eng._pdl_choices(8) == (None,)


class _Mma:
    mma = True


def test_ab_choices_for_int4_mma_weights(monkeypatch):
    eng = Engine.from_config(TINY, max_batch=2, max_seq=64, device="cpu")
    monkeypatch.setattr(eng.w, "matmuls", lambda: [_Mma()])
    monkeypatch.setattr(w4a16_mma, "PDL_MAX_MT", 8)
    assert eng._pdl_choices(9) == (8, 1)
    assert eng._pdl_choices(8) == (None,)  # one 8-row tile: the PDL setting does not change
    monkeypatch.setattr(engine_mod, "GRAPH_PDL_AB", False)
    assert eng._pdl_choices(9) == (None,)


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
