"""torch's CPU INT4 / INT8 kernels in the engine (bf16 activations), checked against the dequantized reference.

The reference is ``x @ w_hat.T`` in float64 with ``w_hat = (q - zero) * scale``. The kernels round the activations'
products in bf16 / accumulate in float32, so the bound is relative to the error of the same bf16 ``F.linear`` on
the dequantized weight (what the engine ran before): at most 4x it plus 1e-3 of the output scale. A planted bug
(zero point off by one) must fail the same bound.
"""

import pytest
import torch
import torch.nn.functional as F

from workbench.engine.cpu import CpuInt4Linear, FewRows, cpu_int4_can_implement
from workbench.engine.int8 import Int8Linear


def _codes(n, k, g, seed=0, float_zero=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.uint8)
    s = torch.rand(n, k // g, generator=gen) * 0.02 + 0.001
    z = torch.randint(0, 16, (n, k // g), generator=gen).float()
    if float_zero:
        z = z + torch.rand(n, k // g, generator=gen)
    return q, s, z


def _ref(x, q, s, z):
    g = q.shape[1] // s.shape[1]
    w = (q.double() - z.double().repeat_interleave(g, 1)) * s.double().repeat_interleave(g, 1)
    return x.double() @ w.T, w


def _close_enough(got, x, q, s, z):
    ref, w = _ref(x, q, s, z)
    bf16_err = (F.linear(x, w.to(torch.bfloat16)).double() - ref).abs().max()
    err = (got.double() - ref).abs().max()
    return err <= 4 * bf16_err + 1e-3 * ref.abs().max(), float(err), float(bf16_err)


@pytest.mark.parametrize("n,k,g", [(1536, 576, 64), (576, 1536, 64), (384, 192, 64), (64, 256, 128), (32, 512, 256),
                                   (48, 96, 32)])
@pytest.mark.parametrize("rows", [1, 3, 8, 17])
def test_cpu_int4_matches_dequantized_reference(n, k, g, rows):
    q, s, z = _codes(n, k, g)
    lin = CpuInt4Linear(q, s, z, torch.bfloat16)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ok, err, base = _close_enough(lin(x), x, q, s, z)
    assert ok, (err, base)


def test_cpu_int4_float_zero_points_and_planted_bug():
    q, s, z = _codes(128, 256, 64, float_zero=True)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    assert _close_enough(CpuInt4Linear(q, s, z, torch.bfloat16)(x), x, q, s, z)[0]
    wrong = CpuInt4Linear(q, s, z + 1, torch.bfloat16)  # the classic off-by-one zero point
    assert not _close_enough(wrong(x), x, q, s, z)[0]


def test_cpu_int8pack_bf16_matches_reference():
    gen = torch.Generator().manual_seed(3)
    q = torch.randint(0, 256, (256, 576), generator=gen, dtype=torch.uint8)
    s, z = torch.rand(256, 1, generator=gen) * 0.01, torch.full((256, 1), 128.0)
    lin = Int8Linear(q, s, z, torch.bfloat16, "int8pack")
    x = torch.randn(4, 576, generator=gen).to(torch.bfloat16)
    w = (q.double() - 128) * s.double()
    ref = x.double() @ w.T
    base = (F.linear(x, w.to(torch.bfloat16)).double() - ref).abs().max()
    assert (lin(x).double() - ref).abs().max() <= 4 * base + 1e-3 * ref.abs().max()


@pytest.mark.parametrize("n,k,g,dtype,why", [
    (24, 64, 32, torch.bfloat16, "multiple of 16"), (32, 64, 16, torch.bfloat16, "group 16"),
    (32, 64, 32, torch.float32, "float32 activations")])
def test_cpu_int4_refuses_what_torch_refuses_and_says_why(n, k, g, dtype, why):
    ok, reason = cpu_int4_can_implement(n, k, g, dtype)
    assert not ok and why in reason
    q, s, z = _codes(n, k, g)
    with pytest.raises(ValueError, match="cannot run"):
        CpuInt4Linear(q, s, z, dtype)


def test_few_rows_takes_the_kernel_up_to_max_rows_and_the_copy_above():
    q, s, z = _codes(64, 128, 64)
    lin = CpuInt4Linear(q, s, z, torch.bfloat16)
    few = FewRows(lin, torch.bfloat16, 8)
    calls = []
    real = lin.__class__.__call__

    class Spy(CpuInt4Linear):
        def __call__(self, x):
            calls.append(x.shape[0])
            return real(self, x)

    few.inner.__class__ = Spy
    x = torch.randn(9, 128).to(torch.bfloat16)
    few(x[:8]), few(x)
    assert calls == [8]  # 9 rows took the dequantized copy
    assert few.route(8)[0] == "cpu-int4pack" and few.route(9)[0] == "dequant"
    torch.testing.assert_close(few.w, lin.dequantize(torch.bfloat16))


SMALL_QWEN2 = {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": 256, "tie_word_embeddings": False}


@pytest.mark.parametrize("dtype,kernel", [(torch.bfloat16, "cpu-int4pack"), (torch.float32, "dequant")])
def test_engine_rtn_w4a16_on_the_cpu_takes_the_int4_kernel_in_bf16(dtype, kernel):
    """The engine's own RTN W4A16 (``w4a16=True``, what the stacked study times) on the CPU: bf16 engines run torch's
    INT4 kernel at decode's row counts (before the fix every call dequantized the weight: 6x slower than bf16 on
    SmolLM2), float32 engines the weight dequantized once; both give the logits of the dequantized weights."""
    from workbench.engine import Engine
    from workbench.models.random_init import hf_config

    eng = Engine.from_config(hf_config(SMALL_QWEN2), max_batch=1, max_seq=64, dtype=dtype, device="cpu",
                             w4a16=True, group_size=64, seed=0)
    rt = eng.route_table(rows=[1])
    blocks = rt[rt.matmul != "lm_head"]
    assert set(blocks.kernel) == {kernel}, rt
    ref = Engine.from_config(hf_config(SMALL_QWEN2), max_batch=1, max_seq=64, dtype=torch.float32, device="cpu",
                             w4a16=True, group_size=64, seed=0)
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(1))
    got = eng.extend_batch([0], ids, logits="last").float()
    want = ref.extend_batch([0], ids, logits="last").float()
    assert (got - want).abs().max() <= (0.05 if dtype == torch.bfloat16 else 1e-5) * want.abs().max()
