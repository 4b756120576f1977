"""The Triton kernels against their torch twins: through Triton's CPU interpreter on a machine without a GPU
(``tests/engine/conftest.py`` sets ``TRITON_INTERPRET=1`` first), the compiled kernels on CUDA otherwise
(skipped only without triton)."""

import pytest
import torch

pytest.importorskip("triton")

from workbench.engine import ops
from workbench.engine.int4 import dequantize_int4, quantize_rtn_int4
from workbench.kernels import common, fused, w4a16
from workbench.kernels.int4_layout import pack_int4_words

DEV = "cpu" if common.interpret() else "cuda"
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)

G = torch.Generator().manual_seed(0)


def test_add_rmsnorm_and_silu_match_torch():
    x, r, w = torch.randn(3, 96, generator=G), torch.randn(3, 96, generator=G), torch.randn(96, generator=G)
    for res in (r, None):
        a = ops.add_rmsnorm(x, res, w, 1e-6)
        b = fused.add_rmsnorm(x.to(DEV), None if res is None else res.to(DEV), w.to(DEV), 1e-6)
        torch.testing.assert_close(b[0].cpu(), a[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b[1].cpu(), a[1])
    gu = torch.randn(3, 160, generator=G)
    torch.testing.assert_close(fused.silu_mul(gu.to(DEV)).cpu(), ops.silu_mul(gu), atol=1e-6, rtol=1e-5)


def test_qkv_rope_cache_matches_torch():
    b, t, h, kv, d, mb, s = 2, 3, 4, 2, 16, 3, 32
    qkv = torch.randn(b * t, (h + 2 * kv) * d, generator=G)
    bias = torch.randn((h + 2 * kv) * d, generator=G)
    ang = torch.rand(s, d // 2, generator=G) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    wpos = torch.tensor([[4, 5, 6], [0, 1, 31]]).reshape(-1)
    slots = torch.tensor([2, 0])
    caches = [torch.zeros(mb, kv, s, d) for _ in range(4)]
    q1 = ops.qkv_rope_cache(qkv, bias, cos, sin, wpos, slots, t, caches[0], caches[1], h, kv)
    dc = [c.to(DEV) for c in caches[2:]]
    q2 = fused.qkv_rope_cache(*(a.to(DEV) for a in (qkv, bias, cos, sin, wpos, slots)), t, dc[0], dc[1], h, kv)
    caches[2], caches[3] = dc[0].cpu(), dc[1].cpu()
    torch.testing.assert_close(q2.cpu(), q1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[2], caches[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[3], caches[1])
    assert caches[2][2, :, 4:7].abs().sum() > 0 and caches[2][1].abs().sum() == 0


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("cfg", [(32, 1, 1, 2), (64, 3, 2, 4)])
def test_w4a16_gemv_matches_dequantized_reference(m, cfg):
    n, k, g = 96, 512, 128
    q, s, z = quantize_rtn_int4(torch.randn(n, k, generator=G), g)
    x = torch.randn(m, k, generator=G)
    out = w4a16.w4a16_gemv(x.to(DEV), pack_int4_words(q).to(DEV), s.t().contiguous().to(DEV),
                           (z * s).t().contiguous().to(DEV), g, n, cfg)
    torch.testing.assert_close(out.cpu(), x @ dequantize_int4(q, s, z).T, atol=1e-4, rtol=1e-4)
