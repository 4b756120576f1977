"""The few-row tensor-core GEMMs (:mod:`workbench.kernels.rows`) against plain torch: dense and INT4 weights,
every prologue / epilogue, split-K, and the one-row RoPE epilogue. On a machine without a GPU they run through
Triton's CPU interpreter (``tests/conftest.py`` sets ``TRITON_INTERPRET=1``), where the PTX nibble decoding
is replaced by the same arithmetic in plain Triton; on a GPU machine the same tests run the compiled kernels
(the GPU run of this file covers them).

Tolerances: float32 activations leave only float32 summation order (exact nibble decoding, float32 accumulation,
``input_precision="ieee"``), so ``||y - ref|| / ||ref|| < 1e-5`` where the reference rounds as the kernel does;
RMSNorm over several rows rounds ``x * w_norm`` once where HF rounds twice, which float32 cannot see.
"""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from workbench.engine import ops
from workbench.engine.int4 import dequantize_int4, quantize_rtn_int4
from workbench.kernels import common, gemv, rows
from workbench.kernels.int4_layout import pack_int4_gemv, pack_int4_words, unpack_int4_gemv

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)
EPS = 1e-6


def _rel(y, ref):
    return float((y.float().cpu() - ref.float()).norm() / ref.float().norm())


def _int4(n, k, g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, generator=gen), g)
    w_hat = dequantize_int4(q, s, z, torch.float32)
    args = (pack_int4_gemv(q, g).to(DEV), s.t().contiguous().to(DEV), z.t().contiguous().to(DEV), g, n)
    return args, w_hat, gen


def test_layout_round_trips():
    q = torch.randint(0, 16, (8, 256), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(unpack_int4_gemv(pack_int4_gemv(q, 128), 128), q)


# (m rows, config): 1..33 rows cover M_PAD 16, 32 and 64; N = 160 is not a multiple of 64 (masked rows);
# SPLIT_K 2 and 3 split 2 groups / 4 column steps unevenly
INT4_CASES = [(1, (64, 1, 4, 2)), (2, (32, 2, 4, 2)), (5, (64, 3, 4, 2)), (17, (32, 1, 4, 2)), (33, (64, 2, 4, 2))]


@pytest.mark.parametrize("m,cfg", INT4_CASES)
def test_int4_matches_dequantized_reference(m, cfg):
    args, w_hat, gen = _int4(160, 256, 128)
    x = torch.randn(m, 256, generator=gen)
    y = rows.gemm_int4(x.to(DEV), *args, cfg=cfg)
    assert y.shape == (m, 160) and y.dtype == torch.float32
    assert _rel(y, F.linear(x, w_hat)) < 1e-5
    assert all(int(b.count_nonzero()) == 0 for b in common._LOCKS.values())  # tickets reset by the last split


def test_int4_wrong_layout_is_caught():
    """Planted bug: the unshuffled word layout fed to the kernel gives an error of order 1, so the tolerance of
    the test above is able to fail."""
    args, w_hat, gen = _int4(64, 256, 128, seed=1)
    q = unpack_int4_gemv(args[0].cpu(), 128)
    x = torch.randn(3, 256, generator=gen)
    y = rows.gemm_int4(x.to(DEV), pack_int4_words(q).to(DEV), *args[1:], cfg=(64, 1, 4, 2))
    assert _rel(y, F.linear(x, w_hat)) > 0.3


@pytest.mark.parametrize("m,cfg", [(1, (64, 32, 1, 4, 2)), (3, (32, 64, 3, 4, 2)), (20, (64, 32, 2, 4, 2))])
def test_dense_matches_reference(m, cfg):
    gen = torch.Generator().manual_seed(m)
    w, x = torch.randn(96, 200, generator=gen), torch.randn(m, 200, generator=gen)  # K = 200: a partial step
    y = rows.gemm(x.to(DEV), w.to(DEV), cfg=cfg)
    assert _rel(y, F.linear(x, w)) < 1e-5


@pytest.mark.parametrize("quant", [False, True])
@pytest.mark.parametrize("prologue", ["none", "rmsnorm", "swiglu"])
@pytest.mark.parametrize("m", [1, 6])
def test_prologue_and_residual_match_hf_order(quant, prologue, m):
    """Every prologue with and without the residual epilogue, unsplit and split-K (RMSNorm over several rows
    then combines the splits' sums of squares), against :func:`workbench.kernels.gemv.reference`."""
    n, k = 128, 256
    args, w_hat, gen = _int4(n, k, 128, seed=2)
    w = w_hat if not quant else None
    x = torch.randn(m, 2 * k if prologue == "swiglu" else k, generator=gen)
    nw = torch.rand(k, generator=gen) + 0.5
    for res in (None, torch.randn(m, n, generator=gen)):
        ref = gemv.reference(x, w_hat, prologue, nw, EPS, res)
        for split in (1, 2):
            kw = {"prologue": prologue, "norm_weight": nw.to(DEV), "eps": EPS,
                      "residual": None if res is None else res.to(DEV)}
            if quant:
                y = rows.gemm_int4(x.to(DEV), *args, cfg=(64, split, 4, 2), **kw)
            else:
                y = rows.gemm(x.to(DEV), w.to(DEV), cfg=(64, 64, split, 4, 2), **kw)
            assert _rel(y, ref) < 1e-5, (res is None, split)


@pytest.mark.parametrize("quant", [False, True])
@pytest.mark.parametrize("split", [1, 2])
def test_one_row_rope_epilogue_equals_rope_cache(quant, split):
    """RMSNorm + qkv + bias + RoPE + KV write in one launch == the matmul then ``ops.qkv_rope_cache``."""
    h, kv, d, hid, mb, s_cache = 2, 1, 64, 256, 2, 12
    n = (h + 2 * kv) * d
    args, w_hat, gen = _int4(n, hid, 128, seed=3)
    x, nw, b = torch.randn(1, hid, generator=gen), torch.rand(hid, generator=gen) + 0.5, torch.randn(n, generator=gen)
    ang = torch.rand(s_cache, d // 2, generator=gen) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos, slots = torch.tensor([7]), torch.tensor([1])
    caches = [torch.zeros(mb, kv, s_cache, d) for _ in range(4)]
    q_ref = ops.qkv_rope_cache(gemv.reference(x, w_hat, "rmsnorm", nw, EPS), b, cos, sin, wpos, slots, 1,
                               caches[0], caches[1], h, kv)
    dc = [c.to(DEV) for c in caches[2:]]
    rope = tuple(t.to(DEV) for t in (b, cos, sin, wpos, slots)) + (dc[0], dc[1], h, kv)
    if quant:
        q = rows.gemm_int4(x.to(DEV), *args, "rmsnorm", nw.to(DEV), EPS, cfg=(64, split, 4, 2), rope=rope)
    else:
        q = rows.gemm(x.to(DEV), w_hat.to(DEV), "rmsnorm", nw.to(DEV), EPS, cfg=(64, 64, split, 4, 2), rope=rope)
    assert q.shape == (1, kv, h // kv, d)
    torch.testing.assert_close(q.cpu(), q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dc[0].cpu(), caches[0], atol=1e-5, rtol=1e-5)  # k at [slot 1, :, 7]
    torch.testing.assert_close(dc[1].cpu(), caches[1], atol=1e-5, rtol=1e-5)
    assert caches[0][1, :, 7].abs().sum() > 0 and caches[0][0].abs().sum() == 0


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_half_precision_within_output_rounding(dt):
    """16-bit activations: only the output rounding (and the bf16 product x * w_norm) separates the kernel from
    the float32 reference on the same 16-bit inputs."""
    args, w_hat, gen = _int4(128, 256, 128, seed=4)
    qw, s, z, g, n = args
    w_hat = dequantize_int4(unpack_int4_gemv(qw.cpu(), g), s.t().cpu().to(dt), z.t().cpu().to(dt), torch.float32)
    x = torch.randn(4, 256, generator=gen).to(dt)
    y = rows.gemm_int4(x.to(DEV), qw, s.to(dt), z.to(dt), g, n, cfg=(64, 2, 4, 2))
    assert y.dtype == dt and _rel(y, F.linear(x.float(), w_hat)) < 4e-3
    w = w_hat.to(dt)
    y = rows.gemm(x.to(DEV), w.to(DEV), cfg=(64, 64, 1, 4, 2))
    assert _rel(y, F.linear(x.float(), w.float())) < 4e-3


def test_int4_supported_and_bad_input():
    z = torch.full((4, 2), 3.0)
    assert rows.int4_supported(128, z, torch.bfloat16)
    assert not rows.int4_supported(64, z, torch.bfloat16)  # a group is one 16-deep MMA step per nibble
    assert not rows.int4_supported(128, z + 0.5, torch.bfloat16)  # non-integer zeros
    assert not rows.int4_supported(128, z * 100, torch.bfloat16)  # 2**7 + zero no longer exact in bf16
    args, _, _ = _int4(64, 256, 128)
    with pytest.raises(ValueError, match="1..64 rows"):
        rows.gemm_int4(torch.randn(65, 256).to(DEV), *args)
    with pytest.raises(ValueError, match="norm_weight"):
        rows.gemm_int4(torch.randn(2, 256).to(DEV), *args, "rmsnorm")
    with pytest.raises(ValueError, match="power of two >= 128"):
        rows.gemm_int4(torch.randn(2, 256).to(DEV), *args[:3], 64, 64)


def test_tune_caches_the_fastest_with_a_fake_timer(monkeypatch):
    """:func:`rows.tune` end to end with the CUDA-graph timer replaced by a per-config table (the kernels run, on
    the GPU compiled)."""
    from workbench.kernels import timing

    table = {(64, 1, 4, 2): 2.0, (32, 2, 4, 2): 1.0}
    monkeypatch.setattr(timing, "cuda_graph_ms", lambda fn, inner=20, reps=10: (fn(), table[fn.__defaults__[0]])[1])
    monkeypatch.setattr(rows, "_BEST", {})
    (qw, s, z, g, n), w_hat, gen = _int4(64, 256, 128)
    x = torch.randn(3, 256, generator=gen).to(DEV)
    assert rows.tune(x, qw, quant=(s, z, g), configs=list(table), l2_bytes=0) == (32, 2, 4, 2)
    assert _rel(rows.gemm_int4(x, qw, s, z, g, n), F.linear(x, w_hat)) < 1e-5  # now with the cached config


def _ptx_dequant(w0: int, w1: int, b: int, magic: int) -> tuple:
    """The PTX of ``rows._dq_pair`` run by hand on two words: returns its two output registers."""
    import inspect
    import re

    src = inspect.getsource(rows._dq_pair.fn)
    sel = eval(re.search(r"prmt\.b32 t, \$2, \$3, \{(.+?)\};", src).group(1), {"B": b})
    src_bytes = [(w0 >> (8 * i)) & 0xFF for i in range(4)] + [(w1 >> (8 * i)) & 0xFF for i in range(4)]
    t = sum(src_bytes[(sel >> (4 * i)) & 0x7] << (8 * i) for i in range(4))  # prmt (default mode)
    assert "lop3.b32 $0, t, 0x000F000F, {MAGIC}, 0xEA;" in src and "shr.u32 t, t, 4;" in src
    lo = (t & 0x000F000F) | magic  # lop3 0xEA: (a & b) | c
    hi = ((t >> 4) & 0x000F000F) | magic
    return lo, hi


def test_ptx_nibble_decoding_by_hand():
    """The interpreter cannot run the kernel's inline PTX, so its byte selection is checked here: for every byte
    ``b`` of two random words, output half ``h`` of register 0 (1) must be ``0x4300 | nibble 2b (2b + 1)`` of
    word ``h`` (with ``prmt`` selector ``B * 0x11 + 0x4400``, a bug found on the GPU, word 1 reads byte 0 only)."""
    gen = torch.Generator().manual_seed(5)
    for w0, w1 in torch.randint(0, 2**32, (8, 2), generator=gen, dtype=torch.int64).tolist():
        for b in range(4):
            lo, hi = _ptx_dequant(w0, w1, b, 0x43004300)
            for half, word in ((0, w0), (1, w1)):
                assert (lo >> (16 * half)) & 0xFFFF == 0x4300 | ((word >> (8 * b)) & 0xF)
                assert (hi >> (16 * half)) & 0xFFFF == 0x4300 | ((word >> (8 * b + 4)) & 0xF)
