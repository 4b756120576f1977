"""The CUDA W4A16 MMA kernel (workbench.kernels.w4a16_mma): routing, tuning keys, the build, the engine's kernel
switches; on CUDA the kernel itself against the dequantized reference."""

from __future__ import annotations

import shutil

import pytest
import torch

from workbench.engine import int4
from workbench.kernels import w4a16_mma as mm
from workbench.kernels.int4_layout import pack_int4_gemv

CUDA = torch.cuda.is_available()


def _weight(n, k, g, dtype, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    s = (torch.rand(k // g, n, generator=gen) * 0.02 + 0.005).to(dtype)
    z = torch.randint(0, 16, (k // g, n), generator=gen).to(dtype)
    return pack_int4_gemv(q, g).to(device), s.to(device), z.to(device)


def test_m_tiles_and_supported():
    assert [mm.m_tiles(m) for m in (1, 8, 9, 16, 17, 33, 64)] == [1, 1, 2, 2, 4, 8, 8]
    with pytest.raises(ValueError, match="1..64 rows"):
        mm.m_tiles(65)
    z = torch.zeros(2, 32)
    assert mm.supported(32, 256, 128, torch.bfloat16, z)
    assert not mm.supported(32, 256, 128, torch.float32, z)  # fp32 activations: the Triton kernels
    assert not mm.supported(24, 256, 128, torch.bfloat16, z)  # N not a multiple of 16
    assert not mm.supported(32, 256, 32, torch.bfloat16, z)  # group 32
    assert not mm.supported(32, 256, 128, torch.bfloat16, z + 0.5)  # non-integer zero
    assert not mm.supported(32, 256, 128, torch.bfloat16, z + 128)  # 128 + zero not exact in bf16


def test_tuning_keys_separate_one_row_few_rows_and_one_tile():
    # one key for 1..8 rows let a one-row tuning choose the 5-row verify step's configuration (2.30 vs 2.52 ms a step
    # on the H200, h200_2026-12-04/ab2_qwen_{a,b}.json)
    def cls(m):
        return mm.key(4608, 3584, m, 128, torch.bfloat16, False)[2]

    assert [cls(m) for m in (1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 64)] == [1, 4, 4, 8, 8, 16, 16, 32, 32, 64, 64]
    assert mm.key(4608, 3584, 3, 128, torch.bfloat16, False) != mm.key(4608, 3584, 5, 128, torch.bfloat16, False)
    for bad in (0, 65):
        with pytest.raises(ValueError, match="1..64"):
            mm.row_class(bad)


def test_gemm_off_cuda_raises_a_clear_error():
    qw, s, z = _weight(32, 128, 128, torch.bfloat16)
    with pytest.raises(RuntimeError, match="unavailable"):
        mm.gemm(torch.randn(1, 128).to(torch.bfloat16), qw, s, z, 128, 32)
    with pytest.raises(ValueError, match="qw must be"):
        mm.gemm(torch.randn(1, 128).to(torch.bfloat16), qw[:, :8].contiguous(), s, z, 128, 32)


def test_disabled_kernel_switches_the_mma_kernel_off():
    from workbench.engine import EngineConfig

    q = torch.randint(0, 16, (32, 128), dtype=torch.uint8)
    cfg = EngineConfig(disabled_kernels=("w4a16-mma",))
    lin = int4.Int4Linear(q, torch.rand(32, 1) * 0.01, torch.full((32, 1), 8.0), torch.bfloat16, "triton:dequant",
                          config=cfg)
    assert lin.mma is False and not lin._mma_applies(torch.device("cuda"), torch.full((32, 1), 8.0))


def test_int4linear_on_cpu_does_not_take_the_mma_kernel():
    q = torch.randint(0, 16, (32, 128), dtype=torch.uint8)
    lin = int4.Int4Linear(q, torch.rand(32, 1) * 0.01, torch.full((32, 1), 8.0), torch.bfloat16, "triton:dequant")
    assert not lin.mma


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_source_compiles_for_hopper(tmp_path):
    # the library every GPU run builds at first use: compile errors show here, without a GPU (about 40 s)
    out = mm.build("90", out=tmp_path / "w4a16_mma.so")
    assert out.exists() and out.stat().st_size > 100_000


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("group", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_gemm_matches_reference_for_every_row_class(group, dtype):
    # every compiled configuration; N = 80 leaves a partial last tile for RT = 2 and 4, K of 5 groups an uneven
    # split over the warps (and empty warps up to KS = 16 where configs allow), zeros over the exact range
    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    n, k = 80, 5 * group
    qw, s, z = _weight(n, k, group, dtype, seed=group, device="cuda")
    z = torch.randint(-120, 121, z.shape, device="cuda").to(dtype)
    for m in (1, 2, 8, 9, 16, 17, 33, 64):
        x = torch.randn(m, k, device="cuda").to(dtype)
        res = torch.randn(m, n, device="cuda").to(dtype)
        for cfg in mm.configs(n, k, m, group):
            for r in (None, res):
                out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
                y = mm.gemm(x, qw, s, z, group, n, r, cfg, out=out).float()
                ref = mm.reference(x, qw, s, z, group, r)
                assert float((y - ref).norm() / ref.norm()) < 5e-3, (m, cfg, r is not None)
                assert torch.equal(y, mm.gemm(x, qw, s, z, group, n, r, cfg).float())  # run to run: bit-equal


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_failed_launch_raises_and_leaves_no_pending_error():
    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    qw, s, z = _weight(64, 256, 128, torch.bfloat16, device="cuda")
    x = torch.randn(1, 256, device="cuda").to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="launch failed"):
        mm.gemm(x, qw, s, z, 128, 64, cfg=(1, 2, 1, 32))  # 32 warps: more than any variant takes
    x9 = torch.randn(9, 256, device="cuda").to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="launch failed"):
        mm.gemm(x9, qw, s, z, 128, 64, cfg=(1, 2, mm.WIDE, 4, 3))  # split 3 > the 2 groups of K
    torch.cuda.synchronize()
    assert float((torch.ones(4, device="cuda") * 2).sum()) == 8.0  # the next torch launch sees no stale error


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_int4linear_takes_the_mma_kernel_and_matches_dequant():
    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    n, k, g = 512, 1024, 128
    w = torch.randn(n, k, device="cuda") * 0.02
    q, s, z = int4.quantize_rtn_int4(w, g)
    lin = int4.Int4Linear(q, s, z, torch.bfloat16, "triton:dequant")
    ref = int4.Int4Linear(q, s, z, torch.bfloat16, "dequant")
    assert lin.mma and lin.fused_max_rows() == 64 and not lin.one_row_gemv()
    for m in (1, 5, 64):
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        assert float((lin(x).float() - ref(x).float()).norm() / ref(x).float().norm()) < 5e-3


class _Weights:
    def __init__(self, lins):
        self.lins = lins

    def matmuls(self):
        return self.lins


@pytest.mark.parametrize("group", [64, 128])
def test_which_rows_take_the_mma_kernel_and_the_fused_path_default(group):
    # routing as measured on the H200: G = 128 (the Triton tensor-core GEMM takes it) 1..16 rows, one-row steps
    # unfused; G = 64 2..64 rows, one row on the fused CUDA-core GEMV (so one-row steps stay fused)
    from workbench.engine import dispatch

    q = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    lin = int4.Int4Linear(q, torch.rand(64, 256 // group) * 0.01, torch.full((64, 256 // group), 8.0), torch.bfloat16,
                          "triton:dequant")
    assert lin.tc == (group == 128)
    lin.mma = True  # as on a GPU where the library built
    rows = [m for m in range(1, 65) if lin._mma_rows(m)]
    assert rows == (list(range(1, lin.cfg.w4a16_mma_rows + 1)) if group == 128 else list(range(2, 65)))
    assert lin.one_row_gemv() == (group == 64) and lin.fused_max_rows() == 64
    assert dispatch.default_rows(_Weights([lin])) == ((1, 64) if group == 64 else (2, 64))


def test_plain_calls_above_the_row_threshold_follow_the_measured_route():
    # rows above w4a16_mma_rows: a call without prologue takes the MMA kernel only for the row classes where the
    # timing (recorded in the engine's tuning dict; set by hand here) said it won; calls with a prologue keep the
    # Triton GEMM
    q = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    lin = int4.Int4Linear(q, torch.rand(64, 2) * 0.01, torch.full((64, 2), 8.0), torch.bfloat16, "triton:dequant")
    lin.mma = True
    lin.tuning[lin._plain_key(32)] = True  # 17..32 rows: the MMA kernel won; 33..64: not measured
    plain = [m for m in range(1, 65) if lin._plain_mma(m)]
    assert plain == list(range(1, 33))
    assert [m for m in range(1, 65) if lin._mma_rows(m)] == list(range(1, 17))  # (prologue calls)
    assert lin.route(20)[0] == "w4a16-mma" and lin.route(40)[0] == "triton-w4-rows"
    lin.tuning[lin._plain_key(64)] = False
    assert not lin._plain_mma(64)


def test_dispatch_runs_prologues_and_rope_outside_the_mma_kernel(monkeypatch):
    # an MMA weight gets "none" as prologue (RMSNorm / SwiGLU run first as their own ops); a G = 64 weight with a
    # prologue at M >= 2 raises (no kernel takes it)
    from workbench.engine import dispatch, ops

    q = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    lin = int4.Int4Linear(q, torch.rand(64, 2) * 0.01, torch.full((64, 2), 8.0), torch.bfloat16, "triton:dequant")
    lin.mma = True
    seen = []
    monkeypatch.setattr(lin, "_mma", lambda x, residual=None: seen.append((x.clone(), residual)) or x[:, :64])
    fz = dispatch.FusedMatmuls(None, None, ops.get_ops(torch.device("cpu")), 64, 64)
    x = torch.randn(4, 256).to(torch.bfloat16)
    nw = torch.rand(256).to(torch.bfloat16) + 0.5
    fz.linear(lin, x, "rmsnorm", nw, 1e-6)
    normed = ops.get_ops(torch.device("cpu")).add_rmsnorm(x, None, nw, 1e-6)[0]
    assert torch.equal(seen[-1][0], normed)  # the kernel got the normalized rows, no prologue
    lin64 = int4.Int4Linear(q, torch.rand(64, 4) * 0.01, torch.full((64, 4), 8.0), torch.bfloat16, "triton:dequant")
    lin64.mma = True
    with pytest.raises(ValueError, match="no prologue"):
        lin64.fused(x, "rmsnorm", nw, 1e-6)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_dense_gemm_matches_reference_for_every_config(dtype):
    # N = 80 (a partial CTA grid), K = 640 (5 stages of 128, 10 of 64: uneven splits over the warps)
    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    n, k = 80, 640
    w = (torch.randn(n, k, device="cuda") * 0.05).to(dtype)
    for m in (1, 2, 8, 9, 16, 17, 33, 64):
        x = torch.randn(m, k, device="cuda").to(dtype)
        res = torch.randn(m, n, device="cuda").to(dtype)
        for cfg in mm.dense_configs(n, k, m):
            for r in (None, res):
                ref = (x.float() @ w.float().t()).to(dtype)
                if r is not None:
                    ref = (ref.float() + r.float()).to(dtype)
                y = mm.dense_gemm(x, w, r, cfg).float()
                assert float((y - ref.float()).norm() / ref.float().norm()) < 5e-3, (m, cfg, r is not None)
                assert torch.equal(y, mm.dense_gemm(x, w, r, cfg).float())


def test_dense_routing_is_on_for_two_to_eight_rows_and_cpu_calls_stay_on_linear(monkeypatch):
    # the engine takes the dense MMA kernel for 2..8 bf16 rows by default (measured: batch 2 and verify T = 3 / 5
    # faster, 9..16 rows slower); with it on, a CPU call still runs F.linear and never asks for the library
    from workbench.engine import EngineConfig, weights

    assert EngineConfig().dense_mma_rows == (2, 8) and EngineConfig().enabled("dense-mma")
    w = torch.randn(32, 64)
    lin = weights.Dense(w)
    x = torch.randn(4, 64)
    assert torch.equal(lin(x), x @ w.t()) and lin._mma is None


def test_dense_route_is_measured_once_per_shape_and_row_class_and_cublas_during_capture(monkeypatch):
    # the kernel is used only where it timed faster than cuBLAS: the winner of fastest_config (faked here) decides,
    # once per (shape, row class, dtype), timed at the class's largest row count within DENSE_MMA_ROWS; inside graph
    # capture an unmeasured shape takes cuBLAS and nothing is cached
    from workbench.engine import weights
    from workbench.kernels import timing

    monkeypatch.setattr(mm, "_DENSE_BEST", {})
    tuned, timed = [], []
    monkeypatch.setattr(mm, "dense_tune", lambda x, w, *a, **k: tuned.append(tuple(x.shape)) or (1, 2, 4))
    winner = {64: "cublas", 128: "mma"}

    def fake_fastest(configs, run, ws, ref, timings=None, what=""):
        timed.append((what, tuple(configs)))
        assert torch.equal(run(ws[-1], "cublas").float(), ref)  # the cuBLAS candidate is the reference's matmul
        return winner[ws[0][0].shape[1]]

    monkeypatch.setattr(timing, "fastest_config", fake_fastest)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # (a CPU build raises there)
    tuning = {}  # the engine's dict (Engine.tuning), shared by its matmuls
    a = weights.Dense(torch.randn(32, 64).to(torch.bfloat16))
    b = weights.Dense(torch.randn(32, 128).to(torch.bfloat16))
    a.tuning = b.tuning = tuning
    assert a._route(3) is False and a._route(8) is False and b._route(2) is True
    assert tuned == [(8, 64), (8, 128)]  # the configuration tuned at the class's largest row count (8)
    assert timed == [("bf16 8-row route", ("mma", "cublas"))] * 2  # once per shape and class
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    c = weights.Dense(torch.randn(32, 256).to(torch.bfloat16))
    c.tuning = tuning
    assert c._route(4) is False and len(timed) == 2 and len(tuning) == 2
    # a kernel that cannot be tuned for a shape: that class stays on cuBLAS, with a warning
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(mm, "dense_tune", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no configuration ran")))
    with pytest.warns(UserWarning, match="cuBLAS instead"):
        assert c._route(4) is False
    assert tuning[("dense", 32, 256, 8, str(torch.bfloat16))] is False


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_dense_routing_takes_the_kernel_for_few_rows(monkeypatch):
    from workbench.engine import weights

    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    w = (torch.randn(256, 512, device="cuda") * 0.05).to(torch.bfloat16)
    lin = weights.Dense(w)
    for m in (1, 3, 9, 17):
        x = torch.randn(2, m, 512, device="cuda").to(torch.bfloat16)[:1]  # [1, m, K]: leading dims kept
        y, ref = lin(x), torch.nn.functional.linear(x, w)
        assert y.shape == ref.shape
        assert float((y.float() - ref.float()).norm() / ref.float().norm()) < 5e-3
    assert lin._mma is True and list(lin.tuning) == [("dense", 256, 512, 8, str(torch.bfloat16))]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swiglu_reference_rounds_as_the_engine_silu_mul(dtype):
    # the SwiGLU epilogue's oracle is bit-equal to the engine's torch op (silu on the rounded gate, HF's rounding)
    from workbench.engine import ops

    gu = (torch.randn(5, 2 * 96) * 3).to(dtype)
    assert torch.equal(mm.swiglu_reference(gu), ops.silu_mul(gu).float())
    x = torch.randn(3, 256).to(dtype)
    qw, s, z = _weight(32, 256, 128, dtype, seed=4)
    plain = mm.reference(x, qw, s, z, 128).to(dtype)
    assert torch.equal(mm.reference(x, qw, s, z, 128, act="swiglu"), ops.silu_mul(plain).float())


def test_gemm_rejects_an_unknown_act_and_a_residual_with_swiglu():
    qw, s, z = _weight(32, 256, 128, torch.bfloat16)
    x = torch.randn(2, 256).to(torch.bfloat16)
    with pytest.raises(ValueError, match="act='gelu'"):
        mm.gemm(x, qw, s, z, 128, 32, act="gelu")
    with pytest.raises(ValueError, match="no residual"):
        mm.gemm(x, qw, s, z, 128, 32, torch.zeros(2, 32).to(torch.bfloat16), act="swiglu")


@pytest.mark.parametrize("on", [True, False])
def test_fused_mlp_takes_the_swiglu_epilogue_of_an_mma_gate_up(monkeypatch, on):
    # with w4a16-mma-swiglu on, gate_up (an MMA weight) gets the normalized rows and act="swiglu", down gets its [M, I]
    # output with no prologue and the residual; off, gate_up writes [M, 2 I] and silu_mul runs as its own op
    from workbench.engine import EngineConfig, dispatch, ops

    cfg = EngineConfig(disabled_kernels=() if on else ("w4a16-mma-swiglu",))
    cpu = ops.get_ops(torch.device("cpu"))
    q = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    gu = int4.Int4Linear(q, torch.rand(64, 2) * 0.01, torch.full((64, 2), 8.0), torch.bfloat16, "triton:dequant")
    qd = torch.randint(0, 16, (256, 32), dtype=torch.uint8)
    dn = int4.Int4Linear(qd, torch.rand(256, 1) * 0.01, torch.full((256, 1), 8.0), torch.bfloat16, "triton:dequant")
    gu.mma = dn.mma = True
    gu.cfg = dn.cfg = cfg
    calls = []
    y_gu = torch.randn(4, 64).to(torch.bfloat16)

    def fake_gu(x, residual=None, act="none"):
        calls.append(("gu", x.clone(), act))
        return cpu.silu_mul(y_gu) if act == "swiglu" else y_gu

    def fake_dn(x, residual=None, act="none"):
        calls.append(("dn", x.clone(), residual))
        return x.new_zeros(x.shape[0], 256)

    monkeypatch.setattr(gu, "_mma", fake_gu)
    monkeypatch.setattr(dn, "_mma", fake_dn)
    fz = dispatch.FusedMatmuls(None, None, cpu, 64, 64)
    x = torch.randn(4, 256).to(torch.bfloat16)
    nw = torch.rand(256).to(torch.bfloat16) + 0.5
    fz.mlp(gu, dn, x, nw, 1e-6)
    assert calls[0][0] == "gu" and torch.equal(calls[0][1], cpu.add_rmsnorm(x, None, nw, 1e-6)[0])
    assert calls[0][2] == ("swiglu" if on else "none")
    assert calls[1][0] == "dn" and torch.equal(calls[1][1], cpu.silu_mul(y_gu)) and calls[1][2] is x


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_swiglu_epilogue_matches_silu_mul_of_the_plain_call_for_every_config(group, dtype):
    # N = 2 I = 80: a partial last tile of gate / up pairs for RT = 2 and 4; every configuration and row class; the
    # epilogue against the engine's silu_mul of the same configuration's plain output (the same sums, so equal but
    # for the float32 exp of silu: at most one unit in the last place of the dtype), and against the oracle
    from workbench.kernels import fused

    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    n, k = 80, 5 * group
    qw, s, z = _weight(n, k, group, dtype, seed=group + 1, device="cuda")
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    equal = total = 0
    for m in (1, 2, 9, 17, 33, 64):
        x = (torch.randn(m, k, device="cuda") * 4).to(dtype)
        for cfg in mm.configs(n, k, m, group):
            y = mm.gemm(x, qw, s, z, group, n, cfg=cfg, act="swiglu",
                        out=torch.full((m, n // 2), float("nan"), device="cuda", dtype=dtype)).float()
            two = fused.silu_mul(mm.gemm(x, qw, s, z, group, n, cfg=cfg)).float()
            d = (y - two).abs()
            assert bool((d <= ulp * two.abs() + 1e-30).all()), (m, cfg, float(d.max()))
            equal, total = equal + int((d == 0).sum()), total + d.numel()
            ref = mm.reference(x, qw, s, z, group, prescale=mm.prescaled(cfg), act="swiglu")
            assert float((y - ref).norm() / ref.norm()) < 1e-2, (m, cfg)
    assert equal / total > 0.98, equal / total  # (a wrong pairing or rounding differs in most outputs)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_engine_steps_with_the_swiglu_epilogue_match_the_separate_silu_mul(monkeypatch):
    # a bf16 W4A16 engine (MMA kernel): prefill, one-row decode (unfused path), a 5-row and a 2-row step (fused path)
    # with SwiGLU in the gate_up kernel against w4a16-mma-swiglu off; the epilogue must have run in both paths
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.engine import Engine

    if not mm.available("cuda"):
        pytest.skip(mm.why_unavailable())
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.05)
    eng = Engine.from_hf(model.to(torch.bfloat16).cuda(), max_batch=2, max_seq=32, use_graphs=False,
                         w4a16="rtn", w4a16_backend="triton:dequant", group_size=128)
    eng.set_fused_gemv(True)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1)).cuda()
    acts = []
    real = mm.gemm
    monkeypatch.setattr(mm, "gemm", lambda *a, **k: acts.append((a[0].shape[0], k.get("act", "none"))) or real(*a, **k))

    def steps():
        eng.reset()
        out = [eng.extend_batch([0, 1], ids[:2, :6], torch.tensor([6, 4]))[0]]
        out.append(eng.extend_batch([0], ids[:1, 6:7])[0])
        out.append(eng.extend_batch([0], ids[:1, 7:12])[0])
        out.append(eng.extend_batch([1, 0], ids[:2, 12:13])[:, 0])
        return torch.cat([o.reshape(-1, o.shape[-1]) for o in out]).float()

    from workbench.engine import EngineConfig

    def use(cfg):
        for m in eng.w.matmuls():
            if isinstance(m, int4.Int4Linear):
                m.cfg = cfg

    use(EngineConfig())
    on = steps()
    assert {m for m, a in acts if a == "swiglu"} >= {1, 2, 5}, acts
    acts.clear()
    use(EngineConfig(disabled_kernels=("w4a16-mma-swiglu",)))
    off = steps()
    assert not any(a == "swiglu" for _, a in acts)
    torch.testing.assert_close(on, off, atol=3e-2, rtol=3e-2)
    assert float((on - off).abs().max()) < float(off.abs().max()) * 1e-2
