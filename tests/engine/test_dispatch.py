"""The engine's fused few-row steps (:mod:`workbench.engine.dispatch`) against its unfused path: bf16 and W4A16
weights, one-row decode, a verify-like step of 5 rows, a ragged batch, and the clean fallback where a kernel does
not take a weight. Through Triton's interpreter on a machine without a GPU (``tests/conftest.py``), the
compiled kernels on a GPU machine; float32, so the paths agree to float32 summation order."""

import functools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

pytest.importorskip("triton")

from workbench.engine import Engine
from workbench.kernels import common

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)

# head_dim 64: the one-row INT4 qkv runs its RoPE epilogue inside the tensor-core kernel
SHAPE = {"vocab_size": 256, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128}


def _model(**over):
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**{**SHAPE, **over})).eval()
    with torch.no_grad():
        for p in m.parameters():  # HF sets norms to 1: make every term count
            p.add_(torch.randn(p.shape) * 0.05)
    return m.to(DEV)


def _steps(e, ids):
    """Prefill 6 tokens into slots 0 and 1 (ragged: 6 and 4 valid), then one-row decode on slot 0, a 5-row step
    on slot 0 (a verify step of k = 4) and a 2-row batch step; the logits of every valid position."""
    e.reset()
    out = [e.extend_batch([0, 1], ids[:2, :6], torch.tensor([6, 4]))]
    out.append(e.extend_batch([0], ids[:1, 6:7]))
    out.append(e.extend_batch([0], ids[:1, 7:12]))
    out.append(e.extend_batch([1, 0], ids[:2, 12:13]))
    return torch.cat([out[0][0], out[0][1, :4], out[1][0], out[2][0], out[3][:, 0]]).float().cpu()


@pytest.mark.slow
@pytest.mark.parametrize("w4a16", [None, "rtn"])
def test_fused_steps_equal_unfused(w4a16):
    m = _model()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1)).to(DEV)
    kw = {"max_batch": 2, "max_seq": 32, "use_graphs": False}
    if w4a16:
        kw.update(w4a16="rtn", w4a16_backend="triton:dequant", group_size=128)
    e = Engine.from_hf(m, **kw)
    assert e.set_fused_gemv(False) is False
    ref = _steps(e, ids)
    assert e.set_fused_gemv(True, max_rows=64, min_rows=1) is True and e.fused.max_rows == 64
    got = _steps(e, ids)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)
    e.set_fused_gemv(True)  # the default range (bf16: one row; W4A16 g128: 2..64 rows)
    assert (e.fused.min_rows, e.fused.max_rows) == ((2, 64) if w4a16 else (1, 1))
    torch.testing.assert_close(_steps(e, ids), ref, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_w4a16_fused_path_changes_nothing_but_the_kernels():
    """Planted-difference check: the W4A16 engine (fused, Triton) equals the dequantized-weights engine, and both
    differ from the bf16 one, so the comparison above can see a wrong weight."""
    m = _model()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2)).to(DEV)
    kw = {"max_batch": 2, "max_seq": 32, "use_graphs": False, "w4a16": "rtn", "group_size": 128}
    fused = Engine.from_hf(m, w4a16_backend="triton:dequant", **kw)
    fused.set_fused_gemv(True, min_rows=1)
    deq = Engine.from_hf(m, w4a16_backend="dequant", **kw)
    assert deq.set_fused_gemv(True) is False  # no fused kernel for the dequant backend: unfused, cleanly
    a, b = _steps(fused, ids), _steps(deq, ids)
    torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    dense = Engine.from_hf(m, max_batch=2, max_seq=32, use_graphs=False)
    assert float((_steps(dense, ids) - b).abs().max()) > 1e-3


@pytest.mark.slow
def test_group_64_fuses_one_row_steps_only(monkeypatch):
    """A group size the tensor-core kernel does not take: one-row steps run the fused INT4 GEMV (prologues inside
    it, and with ``dispatch.INT4_GEMV_PROLOGUES`` off as their own kernels), steps of more rows the unfused path
    (dequant), and every step matches the dequantized reference."""
    from workbench.engine import dispatch

    monkeypatch.setattr(dispatch, "default_rows", functools.partial(dispatch.default_rows, one_row=True))
    m = _model()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3)).to(DEV)
    kw = {"max_batch": 2, "max_seq": 32, "use_graphs": False, "w4a16": "rtn", "group_size": 64}
    e = Engine.from_hf(m, w4a16_backend="triton:dequant", **kw)
    assert e.set_fused_gemv(True) is True and (e.fused.min_rows, e.fused.max_rows) == (1, 1)
    ref = _steps(Engine.from_hf(m, w4a16_backend="dequant", **kw), ids)
    torch.testing.assert_close(_steps(e, ids), ref, atol=2e-5, rtol=1e-4)
    monkeypatch.setattr(dispatch, "INT4_GEMV_PROLOGUES", {"rmsnorm": False, "swiglu": False})
    assert e.set_fused_gemv(True) is True and not any(e.fused.int4_gemv_prologues.values())
    torch.testing.assert_close(_steps(e, ids), ref, atol=2e-5, rtol=1e-4)


def _greedy(e, prompt, n):
    """Prefill ``prompt`` ``[1, P]`` into slot 0, then ``n`` greedy one-row steps: (tokens [n], logits [n, V])."""
    e.reset()
    tok = e.extend_batch([0], prompt, logits="last").argmax(-1, keepdim=True)
    toks, logits = [], []
    for _ in range(n):
        toks.append(tok)
        out = e.extend_batch([0], tok)[:, -1]
        logits.append(out.float().cpu())
        tok = out.argmax(-1, keepdim=True)
    return torch.cat(toks).view(-1).cpu(), torch.cat(logits)


@pytest.mark.slow
@pytest.mark.parametrize("arch,group", [("llama", 64), ("qwen2", 128)])
def test_w4a16_one_row_steps_take_the_fused_gemv(arch, group, monkeypatch):
    """W4A16 greedy decode at batch 1 through the fused one-row path (INT4 GEMV with RMSNorm / SwiGLU prologues,
    residual epilogue, qkv bias + RoPE + KV write) gives the unfused path's tokens, and its logits equal the
    dequantized-weights engine's (float32: summation order only; well inside bf16 tolerance). The path is taken:
    the engine's fused range starts at one row and every INT4 matmul of every step went through
    ``w4a16.gemv_fused`` (on the code before it, W4A16 one-row steps ran unfused: the range assert fails)."""
    from workbench.engine import dispatch
    from workbench.kernels import w4a16

    monkeypatch.setattr(dispatch, "default_rows", functools.partial(dispatch.default_rows, one_row=True))
    over = {"num_hidden_layers": 2}
    if arch == "qwen2":  # qkv bias (zero-initialised by HF; _model perturbs it)
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        m = Qwen2ForCausalLM(Qwen2Config(**{**SHAPE, **over})).eval()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape) * 0.05)
        m = m.to(DEV)
    else:
        m = _model(**over)
    monkeypatch.setattr(w4a16, "DEFAULT", (128, 1, 2, 4, 1))  # untuned shapes: fewer interpreter programs
    kw = {"max_batch": 1, "max_seq": 24, "use_graphs": False, "w4a16": "rtn", "group_size": group}
    e = Engine.from_hf(m, w4a16_backend="triton:dequant", **kw)
    prompt = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(4)).to(DEV)
    assert e.set_fused_gemv(False) is False
    tok_ref, _ = _greedy(e, prompt, 3)
    assert e.set_fused_gemv(True) is True and e.fused.min_rows == 1
    assert e.fused.max_rows == (64 if group % 128 == 0 else 1)
    calls, real = [], w4a16.gemv_fused

    def counted(x, qw, s, z, group, n, prologue="none", *args, **kw):
        calls.append(prologue)
        return real(x, qw, s, z, group, n, prologue, *args, **kw)
    monkeypatch.setattr(w4a16, "gemv_fused", counted)
    tok, logits = _greedy(e, prompt, 3)
    assert len(calls) == 3 * 4 * 2  # steps x INT4 matmuls per layer x layers (lm_head bf16: gemv.gemv)
    assert calls[:4] == ["rmsnorm", "none", "rmsnorm", "swiglu"]  # qkv, o (+ residual), gate_up, down
    assert torch.equal(tok, tok_ref)
    deq = Engine.from_hf(m, w4a16_backend="dequant", **kw)
    tok_deq, logits_deq = _greedy(deq, prompt, 3)
    assert torch.equal(tok_deq, tok)
    torch.testing.assert_close(logits, logits_deq, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_awq_under_gqa_takes_the_fused_one_row_path(monkeypatch):
    """An AWQ model whose o_proj keeps its input scale (GQA: 2 heads, 1 key/value head; down's scale is folded
    into up's rows) runs its one-row steps fused (the division as its own kernel before the fused o GEMV) and
    matches the dequantized-weights engine. On the code before it, o's ``InputScaled`` had no fused kernel: no
    fused path for any AWQ model (``set_fused_gemv`` returned False)."""
    from workbench.engine import dispatch
    from workbench.engine.runtime import InputScaled
    from workbench.kernels import w4a16
    from workbench.quant import QuantConfig, quantize

    monkeypatch.setattr(dispatch, "default_rows", functools.partial(dispatch.default_rows, one_row=True))
    monkeypatch.setattr(w4a16, "DEFAULT", (128, 1, 2, 4, 1))  # untuned shapes: fewer interpreter programs
    calib = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(5))
    q, _ = quantize(_model().cpu(), QuantConfig(method="awq", bits=4, group_size=64), calib)
    q = q.to(DEV)
    kw = {"max_batch": 2, "max_seq": 32, "use_graphs": False, "quant_runtime": "kernels"}
    e = Engine.from_hf(q, w4a16_backend="triton:dequant", **kw)
    assert isinstance(e.w.layers[0].wo, InputScaled)
    so = e.w.layers[0].wo.s
    assert not torch.equal(so, torch.ones_like(so))
    assert e.set_fused_gemv(True) is True and (e.fused.min_rows, e.fused.max_rows) == (1, 1)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(6)).to(DEV)
    ref = _steps(Engine.from_hf(q, w4a16_backend="dequant", **kw), ids)
    torch.testing.assert_close(_steps(e, ids), ref, atol=2e-5, rtol=1e-4)


def test_one_row_fused_auto_follows_the_group():
    """One-row W4A16 steps fused by default only where the model has no fused path for more rows (group 64);
    group 128 keeps 2..64 rows; bf16 is unaffected."""
    from workbench.engine import dispatch

    kw = {"max_batch": 1, "max_seq": 16, "use_graphs": False, "w4a16": "rtn", "w4a16_backend": "triton:dequant"}
    m = _model()
    assert dispatch.default_rows(Engine.from_hf(m, group_size=64, **kw).w) == (1, 64)
    assert dispatch.default_rows(Engine.from_hf(m, group_size=128, **kw).w) == (2, 64)
    assert dispatch.default_rows(Engine.from_hf(m, max_batch=1, max_seq=16, use_graphs=False).w) == (1, 1)
    assert dispatch.default_rows(Engine.from_hf(m, group_size=128, **kw).w, one_row=True) == (1, 64)


@pytest.mark.slow
def test_fused_int4_one_row_calls_are_tuned_up_front_into_the_scratch_column(monkeypatch):
    """``dispatch._tune_int4_one_row`` (run by ``set_fused_gemv`` on CUDA) tunes every fused one-row INT4 variant of
    a step (qkv + RoPE, o + residual, gate_up + RMSNorm, down + SwiGLU + residual) under the key the step then looks
    up, so no timed step tunes; the qkv variant writes k / v only into the cache's scratch column. The CUDA-graph
    timer is replaced by a fake; before, fused variants were tuned lazily inside the first step."""
    from workbench.engine import dispatch
    from workbench.engine.int4 import Int4Linear
    from workbench.kernels import timing, w4a16

    monkeypatch.setattr(dispatch, "default_rows", functools.partial(dispatch.default_rows, one_row=True))
    monkeypatch.setattr(w4a16, "_BEST", {})

    def fake(fn, inner=20, reps=10):
        fn()
        return 1.0
    monkeypatch.setattr(timing, "cuda_graph_ms", fake)
    monkeypatch.setattr(Int4Linear, "_can_tune", staticmethod(lambda x: True))
    tuned = []
    real = w4a16.tune_fused
    monkeypatch.setattr(w4a16, "tune_fused", lambda x, *a, **kw: tuned.append((a[5], a[8] is not None,
                                                                               a[9] is not None))
                        or real(x, *a, **kw, configs=[w4a16.DEFAULT]))
    e = Engine.from_hf(_model(), max_batch=2, max_seq=32, use_graphs=False, w4a16="rtn", group_size=64,
                       w4a16_backend="triton:dequant")
    e.set_fused_gemv(True)
    fz = e.fused
    k0, v0 = e.k_cache.clone(), e.v_cache.clone()
    scratch = torch.tensor([e.scratch], device=DEV)
    rope = (e.w.layers[0].bqkv, e.cos, e.sin, scratch, torch.zeros(1, dtype=torch.int64, device=DEV), e.k_cache[0],
            e.v_cache[0], e.spec.n_heads, e.spec.n_kv_heads)
    dispatch._tune_int4_one_row(e, fz, torch.randn(1, SHAPE["hidden_size"], device=DEV), rope)
    assert sorted(tuned) == sorted([("rmsnorm", False, True), ("none", True, False), ("rmsnorm", False, False),
                                    ("swiglu", True, False)])
    changed = [int(i) for c, c0 in ((e.k_cache, k0), (e.v_cache, v0)) for i in (c != c0).nonzero()[:, 3]]  # [L, B, KV, S, D]
    assert set(changed) == {e.scratch}
    n = len(tuned)
    _steps(e, torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3)).to(DEV))
    assert len(tuned) == n  # the step found every variant tuned
