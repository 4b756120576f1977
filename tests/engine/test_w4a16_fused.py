"""The one-row W4A16 GEMV with the engine's fusions (:func:`workbench.kernels.w4a16.gemv_fused`: RMSNorm / SwiGLU
prologue, residual epilogue, qkv bias + RoPE + KV-cache write) against its readable reference
(:func:`workbench.kernels.w4a16.reference`: dequantize, then HF's order of operations and roundings). Through
Triton's CPU interpreter on a machine without a GPU (``tests/conftest.py``), the compiled kernel on CUDA.

Tolerances: float32 differs from the reference only by float32 summation order (``||y - ref|| / ||ref|| <
1e-5``). bf16: the kernel must round exactly where HF rounds; the interpreter converts float32 -> bf16 by
truncation (the GPU rounds to nearest even), so on the CPU the reference rounds by truncation too (and equals the
package reference bit for bit when it rounds to nearest): at least 95% of outputs bit-equal and none more than one
bf16 ulp off. ``test_bf16_criterion_catches_a_missing_prologue_rounding`` shows that criterion fails when one
rounding of the prologue is dropped.
"""

import pytest
import torch

pytest.importorskip("triton")

from workbench.engine import ops
from workbench.engine.int4 import quantize_rtn_int4
from workbench.kernels import common, w4a16
from workbench.kernels.int4_layout import pack_int4_gemv

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)

EPS = 1e-6
N = 40  # not a multiple of BLOCK_N (16, 32): masked rows
SPLIT1, SPLIT3 = (32, 1, 4, 4, 1), (16, 3, 2, 4, 2)  # (BLOCK_N, SPLIT_K, U, num_warps, DEPTH)


def _d(*ts):
    return [None if t is None else t.to(DEV) for t in ts]


def _weight(n, k, g, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, generator=gen) / 8, g)
    return pack_int4_gemv(q, g), s.to(dtype).t().contiguous(), z.to(dtype).t().contiguous(), gen


def _operands(gen, k, pro, res, dtype):
    x = torch.randn(1, 2 * k if pro == "swiglu" else k, generator=gen).to(dtype)
    nw = (torch.rand(k, generator=gen) + 0.5).to(dtype)
    r = torch.randn(1, N, generator=gen).to(dtype) if res else None
    return x, nw, r


def _run(w, g, x, pro, nw, r, cfg):
    qw, s, z, _ = w
    return w4a16.gemv_fused(*_d(x, qw, s, z), g, N, pro, *_d(nw), EPS, *_d(r), cfg=cfg).cpu()


def _trunc(t):
    """float32 -> bf16 by truncation, as Triton 3.6's interpreter converts."""
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def _rne(t):
    return t.to(torch.bfloat16)


def _reference(w, g, x, pro, nw, r, rnd, round_prologue=True):
    """:func:`w4a16.reference` for bf16 with each rounding done by ``rnd``; ``round_prologue=False`` plants the
    bug of a prologue whose output is not rounded to bf16 (HF rounds it)."""
    qw, s, z, _ = w
    p = rnd if round_prologue else (lambda t: t.float())
    if pro == "rmsnorm":
        xf = x.float()
        x = p(nw.float() * rnd(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).float())
    elif pro == "swiglu":
        k = x.shape[-1] // 2
        gate = x[:, :k].float()
        x = p(rnd(gate / (1 + torch.exp(-gate))).float() * x[:, k:].float())
    y = rnd(w4a16.reference(x.float(), qw, s.float(), z.float(), g))
    return y if r is None else rnd(y.float() + r.float())


def _bf16_ok(out, ref) -> bool:
    diff = (out.float() - ref.float()).abs()
    return float((diff == 0).float().mean()) >= 0.95 and bool((diff <= ref.float().abs() * 2.0**-7 + 1e-30).all())


def _bf16_ref(w, g, x, pro, nw, r, round_prologue=True):
    return _reference(w, g, x, pro, nw, r, _trunc if DEV == "cpu" else _rne, round_prologue)


GRID = [(g, k) for k in (576, 1536) for g in (32, 64, 128) if k % g == 0]  # (128 does not divide 576)


def _check(g, k, cases):
    for pro, res, cfg, dtype in cases:
        w = _weight(N, k, g, dtype, seed=g + k)
        x, nw, r = _operands(w[3], k, pro, res, dtype)
        out = _run(w, g, x, pro, nw, r, cfg)
        assert out.shape == (1, N) and out.dtype == dtype
        if dtype == torch.float32:
            ref = w4a16.reference(x, *w[:3], g, pro, nw, EPS, r)
            assert float((out - ref).norm() / ref.norm()) < 1e-5, (pro, res, cfg)
        else:
            assert _bf16_ok(out, _bf16_ref(w, g, x, pro, nw, r)), (pro, res, cfg, dtype)
    for buf in common._LOCKS.values():  # the last split of each column block reset its ticket counter
        assert int(buf.count_nonzero()) == 0


@pytest.mark.slow
@pytest.mark.parametrize("g,k", GRID)
def test_fused_gemv_matches_reference(g, k):
    """Each prologue, with and without the residual epilogue, split-K 1 and 3 (N = 40: masked rows), float32
    (summation order only) and bf16 (HF's roundings)."""
    cases = [("none", True, SPLIT3), ("rmsnorm", False, SPLIT1), ("rmsnorm", True, SPLIT3),
             ("swiglu", True, SPLIT1), ("swiglu", False, SPLIT3)]
    _check(g, k, [(*c, dt) for dt in (torch.float32, torch.bfloat16) for c in cases])


def test_fused_gemv_matches_reference_fast():
    """The fast subset of the above: group 64, K 576, split-K 3, each prologue with the residual epilogue."""
    _check(64, 576, [("none", True, SPLIT3, torch.float32), ("rmsnorm", True, SPLIT3, torch.bfloat16),
                     ("swiglu", True, SPLIT3, torch.float32)])


def test_test_reference_is_the_package_reference():
    """The tests' bf16 reference with round-to-nearest is :func:`w4a16.reference` bit for bit (so the truncating
    variant used under the interpreter checks the same roundings)."""
    w = _weight(N, 576, 64, torch.bfloat16, seed=5)
    for pro, res in (("rmsnorm", False), ("swiglu", True)):
        x, nw, r = _operands(w[3], 576, pro, res, torch.bfloat16)
        assert torch.equal(_reference(w, 64, x, pro, nw, r, _rne), w4a16.reference(x, *w[:3], 64, pro, nw, EPS, r))


@pytest.mark.parametrize("pro", ["rmsnorm", "swiglu"])
def test_bf16_criterion_catches_a_missing_prologue_rounding(pro):
    """Planted bug: the same kernel output against a reference whose prologue output is not rounded to bf16
    fails ``_bf16_ok`` (the assert in ``test_fused_gemv_matches_reference`` that would catch a kernel missing that
    rounding), while the correct reference passes."""
    w = _weight(N, 576, 64, torch.bfloat16, seed=9)
    x, nw, r = _operands(w[3], 576, pro, False, torch.bfloat16)
    out = _run(w, 64, x, pro, nw, r, SPLIT1)
    assert _bf16_ok(out, _bf16_ref(w, 64, x, pro, nw, r))
    assert not _bf16_ok(out, _bf16_ref(w, 64, x, pro, nw, r, round_prologue=False))


@pytest.mark.parametrize("bias,cfg", [(False, SPLIT1), (True, SPLIT3)])
def test_fused_gemv_qkv_rope_equals_gemv_then_rope_cache(bias, cfg):
    """RMSNorm + W4A16 qkv GEMV + bias + RoPE + KV-cache write in one launch == the reference GEMV followed by
    the engine's torch ``qkv_rope_cache`` (float32; BLOCK_N 32 is cut to head_dim 16)."""
    h, kv, d, hid, mb, s_cache, g = 4, 2, 16, 128, 3, 20, 64
    n = (h + 2 * kv) * d
    qw, s, z, gen = _weight(n, hid, g, torch.float32, seed=4)
    x, nw = torch.randn(1, hid, generator=gen), torch.rand(hid, generator=gen) + 0.5
    b = torch.randn(n, generator=gen) if bias else None
    ang = torch.rand(s_cache, d // 2, generator=gen) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos, slots = torch.tensor([11]), torch.tensor([2])
    caches = [torch.zeros(mb, kv, s_cache, d) for _ in range(4)]
    qkv = w4a16.reference(x, qw, s, z, g, "rmsnorm", nw, EPS)
    q_ref = ops.qkv_rope_cache(qkv, b, cos, sin, wpos, slots, 1, caches[0], caches[1], h, kv)
    dc = _d(caches[2], caches[3])
    q = w4a16.gemv_fused(*_d(x, qw, s, z), g, n, "rmsnorm", *_d(nw), EPS,
                         rope=(*_d(b, cos, sin, wpos, slots), dc[0], dc[1], h, kv), cfg=cfg).cpu()
    assert q.shape == q_ref.shape == (1, kv, h // kv, d)
    torch.testing.assert_close(q, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dc[0].cpu(), caches[0], atol=1e-5, rtol=1e-5)  # k written at [slot 2, :, 11]
    torch.testing.assert_close(dc[1].cpu(), caches[1], atol=1e-5, rtol=1e-5)
    assert caches[0][2, :, 11].abs().sum() > 0 and caches[0][:2].abs().sum() == 0


def test_fused_gemv_bad_input_names_the_fix():
    qw, s, z, _ = _d(*_weight(32, 64, 32, torch.float32)[:3], None)
    with pytest.raises(ValueError, match="one row of 64"):
        w4a16.gemv_fused(torch.randn(2, 64, device=DEV), qw, s, z, 32, 32)
    with pytest.raises(ValueError, match="one row of 128"):
        w4a16.gemv_fused(torch.randn(1, 64, device=DEV), qw, s, z, 32, 32, "swiglu")
    with pytest.raises(ValueError, match="prologue"):
        w4a16.gemv_fused(torch.randn(1, 64, device=DEV), qw, s, z, 32, 32, "layernorm")
    with pytest.raises(ValueError, match="norm_weight"):
        w4a16.gemv_fused(torch.randn(1, 64, device=DEV), qw, s, z, 32, 32, "rmsnorm")
    with pytest.raises(ValueError, match="residual"):
        w4a16.gemv_fused(torch.randn(1, 64, device=DEV), qw, s, z, 32, 32, residual=torch.randn(1, 8, device=DEV))


def test_prefetch_configs_cover_the_whole_k_range_and_match_the_reference():
    """The whole-K tiles of :data:`w4a16.PREFETCH_CONFIGS` on the built-in model's widths (K 576 = 9 groups of 64:
    one masked step of 16 groups; K 1536 = 24 groups: one masked step of 32, or a 3-way split), fused prologues included,
    against the reference (float32: summation order only)."""
    _check(64, 576, [("rmsnorm", False, (16, 1, 16, 4, 1), torch.float32),
                     ("none", True, (8, 1, 16, 4, 1), torch.float32)])
    _check(64, 1536, [("swiglu", True, (8, 1, 32, 8, 1), torch.float32), ("none", True, (32, 3, 4, 4, 1), torch.float32)])


def test_default_configs_add_prefetch_tiles_only_where_they_fit():
    """:func:`w4a16.default_configs`: the 576-wide, group-64 weight gets the 16-group tiles; a 4-group weight gets
    no tile wider than its K range; group 128 drops the tile over WORDS_MAX words a thread."""
    narrow = w4a16.default_configs(576, 64)
    assert narrow[:len(w4a16.CONFIGS)] == w4a16.CONFIGS
    assert (16, 1, 16, 4, 1) in narrow and (8, 1, 16, 4, 1) in narrow and (8, 1, 32, 8, 1) not in narrow  # 9 groups
    assert (8, 1, 32, 8, 1) in w4a16.default_configs(1536, 64)  # 24 groups: a 32-group step
    assert all(c[2] <= 4 for c in w4a16.default_configs(256, 64))
    wide = w4a16.default_configs(3584, 128)  # 28 groups: tiles covering a quarter of them in one pass are kept
    assert (16, 1, 16, 4, 1) in wide and (16, 1, 32, 4, 1) not in wide  # 16 x 32 x 16 / 128 = 64 words
    assert w4a16.default_configs(18944, 128) == w4a16.CONFIGS  # 148 groups: nothing to prefetch whole


@pytest.mark.slow
def test_tune_fused_times_the_fused_call_and_the_engine_uses_its_choice(monkeypatch):
    """:func:`w4a16.tune_fused` times the fused call (prologue + residual) per configuration (the CUDA-graph timer
    replaced by a table) and caches the fastest under :func:`w4a16.fused_key`; ``Int4Linear.fused`` then launches
    that configuration, not the plain GEMV's (before: always the plain GEMV's); a layer of another group size does
    not take it."""
    from workbench.engine.int4 import Int4Linear
    from workbench.kernels import timing

    table = {(32, 1, 4, 4, 1): 3.0, (16, 3, 2, 4, 2): 1.0, (16, 1, 16, 4, 1): 2.0}

    def fake(fn, inner=20, reps=10):
        fn()
        return table[fn.__defaults__[0]]
    monkeypatch.setattr(timing, "cuda_graph_ms", fake)
    monkeypatch.setattr(w4a16, "_BEST", {})
    g, k = 64, 576
    gen = torch.Generator().manual_seed(3)
    q, s, z = quantize_rtn_int4(torch.randn(N, k, generator=gen) / 8, g)
    lin = Int4Linear(q, s, z, torch.float32, backend="triton:dequant", device=DEV)
    x, nw, r = _operands(gen, k, "rmsnorm", True, torch.float32)
    x, nw, r = _d(x, nw, r)
    timings, launched = {}, []
    real = w4a16.gemv_fused
    monkeypatch.setattr(w4a16, "gemv_fused", lambda *a, **kw: launched.append((a[6], a[9] is not None)) or real(*a, **kw))
    best = w4a16.tune_fused(x, lin.qw, lin.s_t, lin.z_t, g, N, "rmsnorm", nw, EPS, r, configs=list(table),
                            l2_bytes=0, timings=timings)
    assert best == (16, 3, 2, 4, 2) and set(timings) == set(table)
    assert launched and set(launched) == {("rmsnorm", True)}  # the fused call itself was timed, not the plain GEMV
    key = w4a16.fused_key(N, k, g, lin.int_zero, torch.float32, "rmsnorm", True, None)
    assert w4a16._BEST[key] == best
    assert not any(kk[0] != "fused" for kk in w4a16._BEST)  # the plain GEMV's entries are their own
    # another group size of the same shape does not reuse this entry
    q2, s2, z2 = quantize_rtn_int4(torch.randn(N, k, generator=gen) / 8, 32)
    lin32 = Int4Linear(q2, s2, z2, torch.float32, backend="triton:dequant", device=DEV)
    key32 = w4a16.fused_key(N, k, 32, lin32.int_zero, torch.float32, "rmsnorm", True, None)
    assert key32 != key and key32 not in w4a16._BEST
    if DEV == "cpu":  # (the interpreter does not tune: the default; on CUDA the call would tune its own entry)
        assert lin32._fused_cfg(x, "rmsnorm", nw, EPS, r, None) == w4a16.DEFAULT
    monkeypatch.setattr(w4a16, "gemv_fused", real)
    seen = []
    monkeypatch.setattr(w4a16, "gemv_fused", lambda *a, **kw: seen.append(a[11]) or real(*a, **kw))
    y = lin.fused(x, "rmsnorm", nw, EPS, r)
    assert seen == [best]
    ref = w4a16.reference(x.cpu(), lin.qw.cpu(), lin.s_t.cpu(), lin.z_t.cpu(), g, "rmsnorm", nw.cpu(), EPS, r.cpu())
    assert float((y.cpu() - ref).norm() / ref.norm()) < 1e-5
