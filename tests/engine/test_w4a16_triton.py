"""The Triton W4A16 GEMV (:mod:`workbench.kernels.w4a16`) against ``F.linear`` with the dequantized
weights in float32, run by Triton's CPU interpreter (``tests/conftest.py`` sets
``TRITON_INTERPRET=1`` before triton is imported on a machine without a GPU; on a GPU machine the
same tests run the compiled kernel on CUDA tensors).

Tolerances: with float32 activations the kernel's only error is float32 rounding (exact nibble
decoding, float32 accumulation), so ``||y - ref|| / ||ref|| < 1e-5``; with bf16 activations the output
is bf16, so each element is within one bf16 ulp (2**-7 relative) of the float32 reference.
"""

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from workbench.engine.int4 import dequantize_int4, quantize_rtn_int4
from workbench.kernels import common, w4a16
from workbench.kernels.int4_layout import pack_int4_gemv, pack_int4_words

DEV = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)


def _case(n, k, g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, s, z = quantize_rtn_int4(torch.randn(n, k, generator=gen), g)
    return q, s, z, dequantize_int4(q, s, z, torch.float32), gen


def _rel(y, ref):
    return float((y.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("n,k,g,cfgs", [
    (96, 256, 64, [(32, 1, 2, 4), (16, 2, 1, 4, 2)]),  # 4 groups: 2 steps / a 2-way even split, depth 2
    (96, 256, 128, [(64, 1, 1, 4), (32, 2, 4, 4)]),  # U=4 > 2 groups: masked (uneven) steps
    (80, 512, 128, [(32, 3, 1, 4, 2), (8, 1, 1, 4, 2)]),  # N not a multiple of BLOCK_N; 3-way uneven split
])
def test_gemv_matches_dequantized_reference_fp32(n, k, g, cfgs):
    q, s, z, w_hat, gen = _case(n, k, g)
    qw = pack_int4_gemv(q, g)
    for m in (1, 2, 3, 4):
        x = torch.randn(m, k, generator=gen)
        ref = F.linear(x, w_hat)
        for cfg in cfgs:
            y = w4a16.gemv(x.to(DEV), qw.to(DEV), s.t().contiguous().to(DEV), z.t().contiguous().to(DEV), g, n, cfg)
            assert y.shape == (m, n) and y.dtype == torch.float32
            assert _rel(y.cpu(), ref) < 1e-5, (m, cfg)
    for buf in common._LOCKS.values():  # the last split of each column block reset its ticket counter
        assert int(buf.count_nonzero()) == 0


def test_gemv_bf16_activations_within_one_ulp():
    n, k, g = 96, 256, 64
    q, s, z, w_hat, gen = _case(n, k, g, seed=1)
    qw = pack_int4_gemv(q, g).to(DEV)
    sb, zb = s.to(torch.bfloat16).t().contiguous().to(DEV), z.to(torch.bfloat16).t().contiguous().to(DEV)
    w_hat = dequantize_int4(q, s.to(torch.bfloat16), z.to(torch.bfloat16), torch.float32)
    for m in (1, 4):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        ref = F.linear(x.float(), w_hat)
        y = w4a16.gemv(x.to(DEV), qw, sb, zb, g, n, (32, 2, 2, 4)).cpu()
        assert y.dtype == torch.bfloat16
        torch.testing.assert_close(y.float(), ref, rtol=2**-7, atol=1e-3)
        assert _rel(y, ref) < 4e-3


def test_non_integer_zeros_take_the_exact_general_path():
    n, k, g = 64, 256, 128
    q, s, z, _, gen = _case(n, k, g, seed=2)
    z = z + 0.25  # off the integer grid: the fast path (zero folded into the magic constant) would round it
    w_hat = dequantize_int4(q, s, z, torch.float32)
    x = torch.randn(2, k, generator=gen)
    args = (x.to(DEV), pack_int4_gemv(q, g).to(DEV), s.t().contiguous().to(DEV), z.t().contiguous().to(DEV), g, n,
            (32, 1, 2, 4))
    assert _rel(w4a16.gemv(*args, int_zero=False).cpu(), F.linear(x, w_hat)) < 1e-5
    assert _rel(w4a16.gemv(*args, int_zero=True).cpu(), F.linear(x, w_hat)) > 1e-3  # the flag matters


def test_pack_layout_and_legacy_entry():
    n, k, g = 32, 256, 64
    q, s, z, w_hat, gen = _case(n, k, g, seed=3)
    qw = pack_int4_gemv(q, g)
    # nibble i of word j of group b holds element b*g + i*(g//8) + j
    b, j, i = 2, 5, 7
    word = int(qw[3, b * (g // 8) + j]) & 0xFFFFFFFF
    assert (word >> (4 * i)) & 0xF == int(q[3, b * g + i * (g // 8) + j])
    assert qw.dtype == torch.int32 and qw.shape == (n, k // 8)
    x = torch.randn(1, k, generator=gen)
    y = w4a16.w4a16_gemv(x.to(DEV), pack_int4_words(q).to(DEV), s.t().contiguous().to(DEV),
                         (z * s).t().contiguous().to(DEV), g, n, (32, 1, 2, 4))
    assert _rel(y.cpu(), F.linear(x, w_hat)) < 1e-5
    with pytest.raises(ValueError):
        w4a16.gemv(torch.randn(5, k).to(DEV), qw.to(DEV), s.t().contiguous().to(DEV), z.t().contiguous().to(DEV), g, n)


def test_tune_runs_and_caches_with_a_fake_timer(monkeypatch):
    """:func:`w4a16.tune` end to end, the CUDA-graph timer replaced by a per-config table (the kernels run: through
    the interpreter on the CPU, compiled on the GPU)."""
    from workbench.kernels import timing

    table = {(32, 1, 2, 4): 2.0, (16, 2, 1, 4, 2): 1.0}

    def fake(fn, inner=20, reps=10):
        fn()
        return table[fn.__defaults__[0]]
    monkeypatch.setattr(timing, "cuda_graph_ms", fake)
    monkeypatch.setattr(w4a16, "_BEST", {})
    q, s, z, w_hat, gen = _case(96, 256, 64)
    qw = pack_int4_gemv(q, 64).to(DEV)
    x = torch.randn(1, 256, generator=gen)
    st, zt = s.t().contiguous().to(DEV), z.t().contiguous().to(DEV)
    x = x.to(DEV)
    assert w4a16.tune(x, qw, st, zt, 64, 96, configs=list(table), l2_bytes=0) == (16, 2, 1, 4, 2)
    assert w4a16._BEST[w4a16.gemv_key(96, 256, 1, 64, True, x.dtype)] == (16, 2, 1, 4, 2)
    assert _rel(w4a16.gemv(x, qw, st, zt, 64, 96).cpu(), F.linear(x.cpu(), w_hat)) < 1e-5
