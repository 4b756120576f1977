"""The prefill path of the Triton INT4 backend: the packed weight dequantized on the device, then a dense GEMM.

``dequantize_packed`` must give exactly ``dequantize_int4``'s values (float32 ``(q - zero) * scale`` rounded
once) from the shuffled words, for every nibble position (nibble 7 makes the int32 word negative when its code
is >= 8, which an unmasked arithmetic shift would smear into the other nibbles), every group width the kernels
take, and shapes that are not multiples of the program's tile. Runs under Triton's interpreter on the CPU."""

import pytest
import torch

from workbench.engine.int4 import Int4Linear, dequantize_int4, quantize_rtn_int4
from workbench.kernels.int4_layout import pack_int4_gemv

needs_triton = pytest.mark.skipif(not (torch.cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET")),
                                  reason="Triton kernels: CUDA or TRITON_INTERPRET=1")
DEV = "cuda" if torch.cuda.is_available() else "cpu"


@needs_triton
@pytest.mark.parametrize("n,k,group", [(24, 256, 32), (40, 576, 64), (17, 640, 128), (8, 512, 256)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantize_packed_equals_dequantize_int4(n, k, group, dtype):
    from workbench.kernels.int4_dequant import dequantize_packed

    g = torch.Generator().manual_seed(n + k)
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    q[:, -1] = 15  # the top nibble of the last word set: a negative int32
    s = (torch.rand(n, k // group, generator=g) + 0.5).to(dtype)
    z = torch.randint(0, 16, (n, k // group), generator=g).to(dtype)
    ref = dequantize_int4(q, s, z, dtype)
    if DEV == "cpu" and dtype == torch.bfloat16:  # Triton's interpreter truncates float32 -> bf16 (CUDA rounds
        f32 = dequantize_int4(q, s, z, torch.float32)  # to nearest even, as torch does)
        ref = (f32.view(torch.int32) & ~0xFFFF).view(torch.float32).to(dtype)
    out = dequantize_packed(pack_int4_gemv(q, group).to(DEV), s.t().contiguous().to(DEV), z.t().contiguous().to(DEV),
                            group, dtype)
    assert out.dtype == dtype and out.shape == (n, k)
    assert torch.equal(out.cpu(), ref)  # bit for bit


@needs_triton
def test_dequantize_packed_refuses_mismatched_shapes():
    from workbench.kernels.int4_dequant import dequantize_packed

    qw = torch.zeros(8, 32, dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match=r"\[K // G, N\]"):
        dequantize_packed(qw, torch.ones(2, 8, device=DEV), torch.ones(2, 9, device=DEV), 128)


@needs_triton
@pytest.mark.parametrize("group,m", [(128, 70), (64, 3)])
def test_triton_dequant_backend_runs_prefill_rows_dense_and_keeps_no_unpacked_codes(group, m):
    """``"triton:dequant"``: rows beyond the small kernel's go through the device dequantization + F.linear and
    match the dense reference; the weight is held once, packed (no ``[out, in]`` uint8 copy)."""
    g = torch.Generator().manual_seed(group)
    q, s, z = quantize_rtn_int4(torch.randn(48, 256, generator=g), group)
    lin = Int4Linear(q, s, z, torch.float32, "triton:dequant", DEV)
    assert not hasattr(lin, "q") and m > lin.small_rows
    x = torch.randn(m, 256, generator=g)
    ref = torch.nn.functional.linear(x, dequantize_int4(q, s, z, torch.float32))
    out = lin(x.to(DEV)).float().cpu()
    assert float((out - ref).norm() / ref.norm()) < 1e-6


@needs_triton
def test_group_that_is_a_multiple_of_128_but_not_a_power_of_two_is_refused_when_built():
    """G = 384: the tensor-core GEMM's ``G // 8 = 48`` words are not a Triton range (a power of two), so the weight
    must be refused at construction with the fix named, not built and then fail at the first decode step (it did:
    ``int4_supported`` took any multiple of 128)."""
    from workbench.kernels.rows import int4_supported

    g = torch.Generator().manual_seed(0)
    q, s, z = quantize_rtn_int4(torch.randn(16, 768, generator=g), 384)
    assert not int4_supported(384, z, torch.float32) and int4_supported(256, z, torch.float32)
    with pytest.raises(ValueError, match="power of two >= 32, got 384"):
        Int4Linear(q, s, z, torch.float32, "triton:dequant", DEV)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="tinygemm (_weight_int4pack_mm) is a CUDA kernel")
@pytest.mark.parametrize("group,m,kernel", [(64, 1, "triton"), (64, 8, "tinygemm"), (64, 64, "tinygemm"),
                                            (64, 65, "dequant"), (128, 8, "tensor-core")])
def test_triton_dequant_few_rows_of_a_non_tensor_core_group_go_through_tinygemm(group, m, kernel, monkeypatch):
    """bf16 on CUDA, a group the tensor-core GEMM does not take (64): 2..ROWS_MAX rows through tinygemm, more rows
    dequantized; group 128 keeps the tensor-core GEMM. Every row count matches the dequantized reference to bf16
    tolerance, and the kernel named is the one called (on the code before it, 8 rows dequantized the weight every
    call: 3.2 ms against bf16's 1.14 ms at batch 8 on the built-in model)."""
    from workbench.kernels import int4_dequant

    g = torch.Generator().manual_seed(group + m)
    q, s, z = quantize_rtn_int4(torch.randn(96, 576 if group == 64 else 512, generator=g), group)
    lin = Int4Linear(q, s, z, torch.bfloat16, "triton:dequant", "cuda")
    assert lin.mid == (None if group == 128 else "tinygemm")
    if group == 64:  # the engine's runtime names the second copy (it is held in memory)
        from workbench.engine.runtime import quant_matmul

        params = {"q": q, "scales": s, "zeros": z, "group_size": group, "bits": 4, "input_scale": None}
        assert quant_matmul(params, torch.bfloat16, "cuda", "triton:dequant")[1].endswith(
            " + tinygemm copy for 2-64 rows")
    called = []
    real_mm, real_deq = torch.ops.aten._weight_int4pack_mm, int4_dequant.dequantize_packed
    monkeypatch.setattr(int4_dequant, "dequantize_packed", lambda *a: called.append("dequant") or real_deq(*a))
    monkeypatch.setattr(torch.ops.aten, "_weight_int4pack_mm",
                        lambda *a: called.append("tinygemm") or real_mm(*a), raising=False)
    x = torch.randn(m, q.shape[1], generator=g).to("cuda", torch.bfloat16)
    ref = torch.nn.functional.linear(x.float(), dequantize_int4(q, s, z, torch.float32).cuda())
    out = lin(x).float()
    assert float((out - ref).norm() / ref.norm()) < 1e-2
    assert called == ([] if kernel in ("triton", "tensor-core") else [kernel])
