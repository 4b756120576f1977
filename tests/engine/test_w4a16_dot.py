"""The group-deep W4A16 dot GEMM (:mod:`workbench.kernels.w4a16_dot`) against the dequantized reference
(:func:`workbench.kernels.w4a16_mma.reference`). Without a GPU it runs through Triton's CPU interpreter
(``tests/conftest.py`` sets ``TRITON_INTERPRET=1``) on its float32 path, where the only difference from the
reference is float32 summation order: relative L2 error < 1e-5 with float32 activations. On a GPU the bf16 path
runs (exponent-OR dequantization, bf16 MMA, float32 accumulation); its error is the output's bf16 rounding
(relative L2 < 5e-3, as the MMA kernel's GPU tests)."""

import pytest
import torch

pytest.importorskip("triton")

from workbench.engine.int4 import quantize_rtn_int4
from workbench.kernels import common, w4a16_dot
from workbench.kernels.int4_layout import pack_int4_gemv, pack_int4_words, unpack_int4_gemv
from workbench.kernels.w4a16_mma import reference

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)
DT = torch.float32 if DEV == "cpu" else torch.bfloat16
TOL = 1e-5 if DEV == "cpu" else 5e-3


def _w(n, k, g, seed=0, dt=DT):
    gen = torch.Generator().manual_seed(seed)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, generator=gen), g)
    return (pack_int4_gemv(q, g).to(DEV), s.t().contiguous().to(DEV, dt), z.t().contiguous().to(DEV, dt)), gen


def _rel(y, ref):
    return float((y.float().cpu() - ref.float().cpu()).norm() / ref.float().cpu().norm())


@pytest.mark.parametrize("cfg", [(True, 64, 1, 4, 2), (False, 64, 1, 4, 2), (True, 32, 3, 4, 2),
                                 (False, 128, 2, 4, 2)])
@pytest.mark.parametrize("m", [1, 17, 33])
def test_matches_dequantized_reference(m, cfg):
    # N = 96 is not a multiple of BLOCK_N = 64 / 128 (the clamped last tile); three groups over split 2 / 3
    n, k, g = 96, 384, 128
    (qw, s, z), gen = _w(n, k, g)
    x = torch.randn(m, k, generator=gen).to(DEV, DT)
    res = torch.randn(m, n, generator=gen).to(DEV, DT)
    for r in (None, res):
        y = w4a16_dot.gemm(x, qw, s, z, g, n, r, cfg)
        assert y.shape == (m, n) and y.dtype == DT
        assert _rel(y, reference(x, qw, s, z, g, r)) < TOL


@pytest.mark.parametrize("g", [64, 256])
def test_other_groups(g):
    n, k = 64, 512
    (qw, s, z), gen = _w(n, k, g, seed=1)
    x = torch.randn(20, k, generator=gen).to(DEV, DT)
    assert _rel(w4a16_dot.gemm(x, qw, s, z, g, n, cfg=(True, 64, 2, 4, 2)), reference(x, qw, s, z, g)) < TOL


def test_wrong_layout_is_caught():
    # the same nibbles in the unshuffled layout: the reference of the shuffled words must not match
    n, k, g = 64, 256, 128
    (qw, s, z), gen = _w(n, k, g, seed=2)
    x = torch.randn(17, k, generator=gen).to(DEV, DT)
    bad = pack_int4_words(unpack_int4_gemv(qw.cpu(), g)).to(DEV)
    assert _rel(w4a16_dot.gemm(x, bad, s, z, g, n, cfg=(False, 64, 1, 4, 2)), reference(x, qw, s, z, g)) > 0.1


def test_bad_input_names_the_fix():
    n, k, g = 64, 256, 128
    (qw, s, z), _ = _w(n, k, g)
    with pytest.raises(ValueError, match="1..64 rows"):
        w4a16_dot.gemm(torch.randn(65, k).to(DEV, DT), qw, s, z, g, n)
    with pytest.raises(ValueError, match="want x"):
        w4a16_dot.gemm(torch.randn(4, k).to(DEV, DT), qw, s, z, 32, n)
    with pytest.raises(ValueError, match="residual"):
        w4a16_dot.gemm(torch.randn(4, k).to(DEV, DT), qw, s, z, g, n, torch.zeros(4, n + 1).to(DEV, DT))
    assert w4a16_dot.supported(n, k, g, torch.bfloat16, z.float())
    assert not w4a16_dot.supported(n, k, g, torch.bfloat16, z.float() + 0.5)
    assert not w4a16_dot.supported(n, k, 32, torch.bfloat16)


def test_keys_and_default_cfg():
    assert w4a16_dot.key(64, 256, 17, 128, torch.bfloat16, False) == w4a16_dot.key(64, 256, 32, 128, torch.bfloat16,
                                                                                    False)
    assert w4a16_dot.key(64, 256, 33, 128, torch.bfloat16, False)[2] == 64
    sw, bn, split, _, _ = w4a16_dot.default_cfg(4608, 3584, 64, 128)
    assert (sw, bn) == (True, 64) and split == 2  # 72 column blocks: two splits fill 132 SMs


def test_plain_calls_routed_to_dot_run_it(monkeypatch):
    # a row class whose measured route is "dot" sends plain calls (with and without residual) to the dot GEMM:
    # same result as the kernel called directly; "mma" / "rows" classes and MMA_PLAIN off do not
    from workbench.engine import int4
    from workbench.engine.int4 import dequantize_int4

    q = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    s, z = torch.rand(64, 2) * 0.01, torch.full((64, 2), 8.0)
    lin = int4.Int4Linear(q, s, z, torch.float32, "triton:dequant")
    lin.mma = True
    monkeypatch.setattr(int4, "_PLAIN_ROUTE", {})
    monkeypatch.setattr(int4, "MMA_ROWS_TC", 16)
    monkeypatch.setattr(int4, "MMA_PLAIN", "auto")
    int4._PLAIN_ROUTE[lin._plain_key(32)] = "dot"
    int4._PLAIN_ROUTE[lin._plain_key(64)] = "rows"
    assert [m for m in range(1, 65) if lin._plain_dot(m)] == list(range(17, 33))
    assert not any(lin._plain_mma(m) for m in range(17, 65))  # "dot" / "rows" are not the MMA kernel
    calls = []
    real = w4a16_dot.gemm
    monkeypatch.setattr(w4a16_dot, "gemm", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(20, 256, generator=gen)
    res = torch.randn(20, 64, generator=gen)
    ref = x @ dequantize_int4(q, s, z, torch.float32).t()
    assert _rel(lin.fused(x.to(DEV)), ref) < 1e-5 and _rel(lin.fused(x.to(DEV), residual=res.to(DEV)), ref + res) < 1e-5
    assert calls == [20, 20]
    lin.fused(torch.randn(40, 256).to(DEV))  # the "rows" class: not the dot GEMM
    assert calls == [20, 20]
    monkeypatch.setattr(int4, "MMA_PLAIN", False)
    assert not lin._plain_dot(20)
