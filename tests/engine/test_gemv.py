"""The fused one-row GEMV (:mod:`workbench.kernels.gemv`) against plain torch, and the engine's fused decode
path against its unfused path and HF: through Triton's CPU interpreter on a machine without a GPU
(``tests/conftest.py`` sets ``TRITON_INTERPRET=1``), the compiled kernels on CUDA otherwise.

The interpreter rounds float32 -> bf16 by truncation (the GPU rounds to nearest even), so bf16 results
are compared within a few bf16 ulps of the HF-order oracle; float32 ones within float32 summation noise.
"""

import pytest
import torch

pytest.importorskip("triton")

from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from workbench.engine import Engine
from workbench.kernels import common, gemv

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)


def _d(*ts):
    """The tensors on the kernels' device (None stays None)."""
    return [None if t is None else t.to(DEV) for t in ts]

EPS = 1e-6


CASES = [(n, k, pro, res, cfg) for n, k in ((48, 96), (40, 100))
         for pro in ("none", "rmsnorm", "swiglu") for res in (False, True)
         for cfg in ((8, 32, 1, 4), (16, 64, 2, 4), (8, 32, 3, 4))]


@pytest.mark.parametrize("n,k,pro,res,cfg", CASES)
def test_gemv_matches_hf_order(n, k, pro, res, cfg):
    g = torch.Generator().manual_seed(n * k + len(pro) + res)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2.0**-6)):
        w = (torch.randn(n, k, generator=g) / 10).to(dt)
        x = torch.randn(1, 2 * k if pro == "swiglu" else k, generator=g).to(dt)
        nw = (torch.rand(k, generator=g) + 0.5).to(dt)
        r = torch.randn(1, n, generator=g).to(dt) if res else None
        out = gemv.gemv(*_d(x, w), pro, *_d(nw), EPS, *_d(r), cfg).cpu()
        ref = gemv.reference(x, w, pro, nw, EPS, r)  # HF's order and roundings
        assert out.dtype == dt and out.shape == (1, n)
        # relative error (norm) within tol: float32 summation order; bf16 a few truncated roundings
        err = float((out.float() - ref.float()).norm() / ref.float().norm())
        assert err < tol, (dt, err)


def _trunc_bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 by truncation, as Triton 3.6's interpreter converts."""
    return (x.float().contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def _reference_truncating(x, w, prologue, nw, residual):
    """``gemv.reference`` with every bf16 rounding done by truncation (the interpreter's rounding)."""
    if prologue == "rmsnorm":
        xf = x.float()
        x = _trunc_bf16(nw.float() * _trunc_bf16(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).float())
    elif prologue == "swiglu":
        k = x.shape[-1] // 2
        gate = x[:, :k].float()
        x = _trunc_bf16(_trunc_bf16(gate / (1 + torch.exp(-gate))).float() * x[:, k:].float())
    y = _trunc_bf16(x.float() @ w.float().t())
    return y if residual is None else _trunc_bf16(y.float() + residual.float())


@pytest.mark.parametrize("pro", ["none", "rmsnorm", "swiglu"])
@pytest.mark.parametrize("cfg", [(8, 64, 1, 4), (16, 32, 4, 4)])
def test_gemv_bf16_rounds_where_hf_rounds(pro, cfg):
    """bf16: the kernel rounds exactly where HF does (RMSNorm output, its product with the weight, SiLU
    output, gate*up, the GEMV output before the residual add). With the interpreter's truncating
    conversion on both sides (on the GPU: round-to-nearest on both sides), at least 95% of outputs are
    bit-equal and none is more than 1 bf16 ulp off (split-K sums in another order); dropping any one of those
    roundings breaks this."""
    g = torch.Generator().manual_seed(11)
    n, k = 64, 256
    w = (torch.randn(n, k, generator=g) / 10).to(torch.bfloat16)
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, generator=g).to(torch.bfloat16)
    nw = (torch.rand(k, generator=g) + 0.5).to(torch.bfloat16)
    for r in (None, torch.randn(1, n, generator=g).to(torch.bfloat16)):
        out = gemv.gemv(*_d(x, w), pro, *_d(nw), EPS, *_d(r), cfg).float().cpu()
        ref = (_reference_truncating(x, w, pro, nw, r) if DEV == "cpu" else gemv.reference(x, w, pro, nw, EPS, r)).float()
        diff = (out - ref).abs()
        assert float((diff == 0).float().mean()) >= 0.95
        assert bool((diff <= ref.abs() * 2.0**-7 + 1e-30).all())


def test_gemv_split_k_counters_reset():
    """Two launches in a row of a split-K configuration give the same answer (the ticket counters are
    left at zero by the last split)."""
    g = torch.Generator().manual_seed(3)
    w, x = _d(torch.randn(32, 256, generator=g), torch.randn(1, 256, generator=g))
    a = gemv.gemv(x, w, cfg=(8, 32, 4, 4))
    b = gemv.gemv(x, w, cfg=(8, 32, 4, 4))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a.cpu(), x.cpu() @ w.cpu().t(), atol=1e-4, rtol=1e-4)


def test_gemv_bad_input_names_the_fix():
    w = torch.randn(8, 16, device=DEV)
    with pytest.raises(ValueError, match="one row"):
        gemv.gemv(torch.randn(2, 16, device=DEV), w)
    with pytest.raises(ValueError, match="prologue"):
        gemv.gemv(torch.randn(1, 16, device=DEV), w, "layernorm")
    with pytest.raises(ValueError, match="norm_weight"):
        gemv.gemv(torch.randn(1, 16, device=DEV), w, "rmsnorm")
    with pytest.raises(ValueError, match="one row of 32"):
        gemv.gemv(torch.randn(1, 16, device=DEV), w, "swiglu")
    with pytest.raises(ValueError, match="contiguous"):
        gemv.gemv(torch.randn(1, 8, device=DEV), torch.randn(8, 16, device=DEV).t())


SMALL = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "llama-head_dim12-gqa4"])
def test_engine_fused_decode_equals_unfused_and_hf(arch):
    """Decode at batch 1 through the fused GEMVs == the unfused engine path == HF, float32 (head_dim 12:
    the RoPE epilogue's tile falls back to 4 rows)."""
    torch.manual_seed(0)
    cls, cfg = (Qwen2ForCausalLM, Qwen2Config) if arch == "qwen2" else (LlamaForCausalLM, LlamaConfig)
    shape = {**SMALL, "hidden_size": 48, "num_key_value_heads": 1} if "head_dim12" in arch else SMALL
    model = cls(cfg(**shape)).eval()
    with torch.no_grad():
        for p in model.parameters():  # HF zero-inits biases and sets norms to 1: make every term count
            p.add_(torch.randn(p.shape) * 0.05)
    model = model.to(DEV)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1)).to(DEV)
    with torch.no_grad():
        ref = model(ids).logits[0]  # [12, V]
    outs = []
    for fused in (False, True):
        e = Engine.from_hf(model, max_batch=1, max_seq=32)
        assert e.set_fused_gemv(fused, max_rows=1) is fused
        r = e.runner()
        first = r.extend(ids[0, :8])  # prefill: 8 rows, never the one-row path
        steps = [r.extend(ids[0, i: i + 1]) for i in range(8, 12)]  # four one-row decode steps
        outs.append(torch.cat([first, *steps]))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(outs[1], ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("cfg", [(2, 32, 1, 4), (4, 64, 2, 4), (16, 32, 3, 4)])
def test_gemv_qkv_rope_equals_norm_gemv_then_rope_cache(bias, cfg):
    """RMSNorm + qkv GEMV + bias + RoPE + cache write in one launch == the engine's unfused ops
    (float32: only summation order differs)."""
    from workbench.engine import ops

    g = torch.Generator().manual_seed(7)
    h, kv, d, hid, mb, s_cache = 4, 2, 16, 48, 3, 20
    n = (h + 2 * kv) * d
    w, x = torch.randn(n, hid, generator=g) / 8, torch.randn(1, hid, generator=g)
    nw, b = torch.rand(hid, generator=g) + 0.5, (torch.randn(n, generator=g) if bias else None)
    ang = torch.rand(s_cache, d // 2, generator=g) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos, slots = torch.tensor([11]), torch.tensor([2])
    caches = [torch.zeros(mb, kv, s_cache, d) for _ in range(4)]
    qkv = ops.add_rmsnorm(x, None, nw, EPS)[0] @ w.t()
    q_ref = ops.qkv_rope_cache(qkv, b, cos, sin, wpos, slots, 1, caches[0], caches[1], h, kv)
    dc = _d(caches[2], caches[3])
    q = gemv.gemv_qkv_rope(*_d(x, w, nw), EPS, *_d(b, cos, sin, wpos, slots), dc[0], dc[1], h, kv, cfg=cfg).cpu()
    caches[2], caches[3] = dc[0].cpu(), dc[1].cpu()
    assert q.shape == q_ref.shape == (1, kv, h // kv, d)
    torch.testing.assert_close(q, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[2], caches[0], atol=1e-5, rtol=1e-5)  # k written at [slot 2, :, 11]
    torch.testing.assert_close(caches[3], caches[1], atol=1e-5, rtol=1e-5)
    assert caches[2][2, :, 11].abs().sum() > 0 and caches[2][:2].abs().sum() == 0


def test_gemv_qkv_rope_bad_input_names_the_fix():
    w, x = _d(torch.randn(64, 8), torch.randn(1, 8))
    kc = torch.zeros(1, 1, 4, 16, device=DEV)
    args = (x, w, *_d(torch.ones(8)), EPS, None, *_d(torch.ones(4, 16), torch.zeros(4, 16), torch.tensor([0]),
                                                      torch.tensor([0])), kc, kc.clone())
    for bad in ((32, 8, 1, 4), (6, 8, 1, 4)):
        with pytest.raises(ValueError, match="power of two"):
            gemv.gemv_qkv_rope(*args, 2, 1, cfg=bad)
    with pytest.raises(ValueError, match="multiple of n_kv"):
        gemv.gemv_qkv_rope(x, torch.randn(16 * 7, 8, device=DEV), *args[2:], 3, 2)


def test_engine_refuses_fused_path_it_cannot_run():
    """head_dim without a power-of-two divisor >= 4 (here 6): unfused path, and set_fused_gemv says so."""
    model = LlamaForCausalLM(LlamaConfig(**{**SMALL, "hidden_size": 24})).eval().to(DEV)  # 4 heads of 6
    e = Engine.from_hf(model, max_batch=1, max_seq=16)
    assert e.set_fused_gemv(True) is False and e.gemv1 is None
    assert torch.isfinite(e.runner().extend(torch.arange(3))).all()


def _fake_timer(monkeypatch, ms_of_cfg):
    """Replace the CUDA-graph timer (CUDA only) by ``ms_of_cfg(cfg)`` after one real call, so the tuners
    run on the CPU; the configuration is read from the timed closure's default argument."""
    from workbench.kernels import timing

    def fake(fn, inner=20, reps=10):
        fn()
        return ms_of_cfg(fn.__defaults__[0])
    monkeypatch.setattr(timing, "cuda_graph_ms", fake)


def test_tune_takes_the_fastest_correct_config_and_caches_it(monkeypatch):
    monkeypatch.setattr(gemv, "_BEST", {})
    _fake_timer(monkeypatch, lambda cfg: {(8, 32, 1, 4): 3.0, (16, 32, 2, 4): 2.0, (4, 32, 4, 4): 5.0}[cfg])
    g = torch.Generator().manual_seed(2)
    w, x, nw = _d(torch.randn(32, 64, generator=g), torch.randn(1, 64, generator=g), torch.rand(64, generator=g) + 0.5)
    timings: dict = {}
    cfgs = [(8, 32, 1, 4), (16, 32, 2, 4), (4, 32, 4, 4), (3, 32, 1, 4)]  # the last fails to compile
    best = gemv.tune(x, w, "rmsnorm", nw, EPS, configs=cfgs, l2_bytes=0, timings=timings)
    assert best == (16, 32, 2, 4) and set(timings) == set(cfgs[:3])
    assert gemv._BEST[gemv._key(32, 64, "rmsnorm", False, torch.float32)] == best
    torch.testing.assert_close(gemv.gemv(x, w, "rmsnorm", nw, EPS), gemv.reference(x, w, "rmsnorm", nw, EPS),
                               atol=1e-5, rtol=1e-5)  # now launched with the cached configuration


def test_tune_rope_keeps_only_tiles_inside_a_head(monkeypatch):
    monkeypatch.setattr(gemv, "_BEST", {})
    _fake_timer(monkeypatch, lambda cfg: 1.0 / cfg[0])  # bigger tiles "faster": 32 would win if allowed
    h, kv, d, hid = 2, 1, 16, 32
    g = torch.Generator().manual_seed(4)
    w, x = _d(torch.randn((h + 2 * kv) * d, hid, generator=g), torch.randn(1, hid, generator=g))
    cache = torch.zeros(1, kv, 8, d, device=DEV)
    rope = (None, *_d(torch.ones(8, d), torch.zeros(8, d), torch.tensor([3]), torch.tensor([0])), cache, cache.clone(),
            h, kv)
    timings: dict = {}
    best = gemv.tune(x, w, "rmsnorm", torch.ones(hid, device=DEV), EPS, configs=[(4, 32, 1, 4), (16, 32, 1, 4), (32, 32, 1, 4)],
                     l2_bytes=0, timings=timings, rope=rope)
    assert best == (16, 32, 1, 4) and (32, 32, 1, 4) not in timings


def test_tune_skips_a_config_with_a_wrong_result(monkeypatch):
    from workbench.kernels import timing

    calls = []

    def run(w, cfg):
        calls.append(cfg)
        return torch.ones(4) * (2.0 if cfg == "wrong" else 1.0)
    monkeypatch.setattr(timing, "cuda_graph_ms", lambda fn, inner=20, reps=10: (fn(), 1.0)[1])
    timings: dict = {}
    assert timing.fastest_config(["wrong", "right"], run, [None], torch.ones(4), timings) == "right"
    assert timings["right"] == 1.0 and timings["wrong"] != timings["wrong"]  # NaN: checked, not timed
    with pytest.raises(RuntimeError, match="no kernel configuration ran"):
        timing.fastest_config(["wrong"], run, [None], torch.ones(4))


def test_fastest_config_runs_without_autograd(monkeypatch):
    """On the H100 (2026-12-07) notebooks 00 and 02 warned "Converting a tensor with requires_grad=True to a scalar"
    from the tuner: an HF model's weights require grad, so each timed call recorded an autograd graph."""
    from workbench.kernels import timing

    w = torch.nn.Parameter(torch.ones(4, 4))  # as an HF Linear's weight
    seen = []

    def run(weight, cfg):
        seen.append(torch.is_grad_enabled())
        return weight @ torch.ones(4)

    monkeypatch.setattr(timing, "cuda_graph_ms", lambda fn, inner=20, reps=10: (fn(), 1.0)[1])
    assert timing.fastest_config(["a"], run, [w], torch.full((4,), 4.0)) == "a"
    assert seen and not any(seen)


@pytest.mark.parametrize("k,pro,cfg", [(576, "rmsnorm", (8, 1024, 1, 4, 1)), (1536, "swiglu", (16, 1024, 1, 8, 1)),
                                       (1536, "none", (16, 1024, 2, 8, 1))])
def test_wide_tiles_on_narrow_weights_match_hf_order(k, pro, cfg):
    """The whole-K tiles of :data:`gemv.WIDE_CONFIGS` on the built-in model's widths (one masked step of K = 576;
    K = 1536 in two steps, or split in two), float32, against the reference (summation order only)."""
    g = torch.Generator().manual_seed(k)
    n = 24
    w = torch.randn(n, k, generator=g) / 10
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, generator=g)
    nw = torch.rand(k, generator=g) + 0.5
    r = torch.randn(1, n, generator=g)
    out = gemv.gemv(*_d(x, w), pro, *_d(nw), EPS, *_d(r), cfg).cpu()
    ref = gemv.reference(x, w, pro, nw, EPS, r)
    assert float((out - ref).norm() / ref.norm()) < 1e-5


def test_default_configs_add_wide_tiles_only_for_narrow_weights():
    """:func:`gemv.default_configs`: K = 576 and 1536 get the 1024-column tiles; K = 2560 none (1024 < K / 2), nor
    K = 18944 (Qwen2-7B down)."""
    assert gemv.default_configs(576)[:len(gemv.CONFIGS)] == gemv.CONFIGS
    for k in (576, 1536):
        assert {c[1] for c in gemv.default_configs(k)} - {c[1] for c in gemv.CONFIGS} == {1024}
    assert gemv.default_configs(2560) == gemv.CONFIGS and gemv.default_configs(18944) == gemv.CONFIGS
