"""The CUDA W4A16 MMA kernel (workbench.kernels.w4a16_mma): its K map and bit operations emulated on the CPU against
the dequantized reference, the variant list, the build, the engine switch; on CUDA the kernel itself."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("group", [64, 128, 256])
def test_emulated_kernel_arithmetic_matches_the_dequantized_reference(dtype, group):
    # the kernel's prmt / lop3 / packed-subtract steps and its k-slot -> column map, as csrc/w4a16_mma.cu does
    # them, against (q - zero) * scale in float32: equal after the output rounding up to a few ulps
    n, k = 48, 2 * group
    qw, s, z = _weight(n, k, group, dtype, seed=group)
    for m in (1, 3, 9):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
        res = torch.randn(m, n).to(dtype)
        for r in (None, res):
            got, ref = mm.emulate(x, qw, s, z, group, r), mm.reference(x, qw, s, z, group, r)
            ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
            assert float((got - ref).abs().max()) <= 2 * ulp * float(ref.abs().max())
            assert float((got == ref).float().mean()) >= 0.9


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_emulated_prescaled_arithmetic_matches_the_rounded_dequantized_weight(dtype):
    # the wide kernel's prescaled variants: w_hat = dtype((q - zero) * scale), float32 accumulation; against x @
    # w_hat.T with w_hat rounded to x's dtype: equal after the output rounding up to a few ulps; against the exact
    # w_hat within the GPU test's 5e-3 relative L2 (zeros over the whole exact range, as there)
    group, n, k = 128, 48, 256
    qw, s, z = _weight(n, k, group, dtype, seed=7)
    z = torch.randint(-120, 121, z.shape, generator=torch.Generator().manual_seed(8)).to(dtype)
    q = mm.unpack_int4_gemv(qw, group).float()
    w_hat = ((q - z.float().t().repeat_interleave(group, 1)) * s.float().t().repeat_interleave(group, 1))
    for m in (1, 9):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
        got = mm.emulate(x, qw, s, z, group, prescale=True)
        rounded = (x.float() @ w_hat.to(dtype).float().t()).to(dtype).float()
        ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
        assert float((got - rounded).abs().max()) <= 2 * ulp * float(rounded.abs().max())
        assert float((got == rounded).float().mean()) >= 0.9
        ref = mm.reference(x, qw, s, z, group)
        assert float((got - ref).norm() / ref.norm()) < 5e-3
    # power: the exact (unscaled-partial) arithmetic differs from the rounded weight in some outputs at bf16
    if dtype == torch.bfloat16:
        assert not torch.equal(mm.emulate(x, qw, s, z, group), got)



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("group", [64, 128, 256])
def test_tc_kernel_fragment_map_and_arithmetic_match_the_rounded_dequantized_weight(dtype, group):
    # the TC kernel (activations as the A operand): lane tig's words 8 p + 2 tig (+1), nibble i are the natural
    # k-slots of the ldmatrix fragment; emulated step by step against x @ dtype(w_hat).T: a few ulps after rounding
    n, k = 40, 2 * group
    qw, s, z = _weight(n, k, group, dtype, seed=group + 1)
    z = torch.randint(-100, 101, z.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    for m in (1, 17, 33):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
        res = torch.randn(m, n).to(dtype)
        for r in (None, res):
            got, ref = mm.tc_emulate(x, qw, s, z, group, r), mm.reference(x, qw, s, z, group, r, prescale=True)
            ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
            assert float((got - ref).abs().max()) <= 2 * ulp * float(ref.abs().max())
            assert float((got == ref).float().mean()) >= 0.9


def test_tc_sources_cover_each_column_once_and_a_wrong_map_fails(monkeypatch):
    # every (k-block, half, tig, e) slot reads a distinct column of the group; the source's tc_pair / tc_nibble are
    # the same formulas; power: swapping the halves (b0 <-> b1) of the map moves the result far off the reference
    for g in mm.GROUPS:
        wb = g // 8
        cols = sorted((nib * wb + 8 * pair + 2 * tig + e) for halves in mm.tc_sources(g) for pair, nib in halves
                      for tig in range(4) for e in range(2))
        assert cols == list(range(g))
        natural = [[16 * kb + 8 * h for h in range(2)] for kb in range(g // 16)]
        assert [[nib * wb + 8 * pair for pair, nib in halves] for halves in mm.tc_sources(g)] == natural
    src = mm.SRC.read_text()
    assert "return ((16 * kb + 8 * h) % (G / 8)) / 8;" in src and "return (16 * kb + 8 * h) / (G / 8);" in src
    qw, s, z = _weight(32, 256, 128, torch.bfloat16, seed=2)
    x = torch.randn(3, 256).to(torch.bfloat16)
    good = mm.tc_sources
    monkeypatch.setattr(mm, "tc_sources", lambda g: tuple(h[::-1] for h in good(g)))
    got, ref = mm.tc_emulate(x, qw, s, z, 128), mm.reference(x, qw, s, z, 128, prescale=True)
    assert float((got - ref).norm() / ref.norm()) > 0.3


def _tc_lane_sim(group, mt_tiles, rt, n, m, act, w=1, bug=None):
    """The TC kernel's data movement lane by lane (integer weights, no dequantization: tc_emulate covers that): the
    shared-memory tile, ldmatrix.x4's row addresses and its per-lane delivery, the B fragments from the packed words,
    mma.sync m16n8k16's fragment layouts, frow / fcol and the SwiGLU pairing, as the source spells them (the source
    lines are checked in the test). Returns (out, expected). ``bug`` plants one error to show the test's power."""
    gen = torch.Generator().manual_seed(group + n + m)
    k = 2 * group
    q = torch.randint(0, 16, (n, k), generator=gen)
    x = torch.randint(-3, 4, (m, k), generator=gen).double()
    qw = pack_int4_gemv(q.to(torch.uint8), group).to(torch.int64) & 0xFFFFFFFF
    wb, xrow, m16, nt_, kb_ = group // 8, group + 8, mt_tiles // 2, 2 * rt, group // 16

    def wrow(v):
        if not act:
            return min(v, n - 1)
        i_ = n >> 1
        j = min((v >> 4) * 8 + (v & 7), i_ - 1)
        return i_ + j if v & 8 else j

    n_out = n // 2 if act else n
    out = torch.full((m, n_out), float("nan"), dtype=torch.float64)
    for bx in range(-(-n // (16 * rt * w))):
        for warp in range(w):
            nbase = (bx * w + warp) * 16 * rt
            acc = torch.zeros(32, nt_, m16, 4, dtype=torch.float64)
            for g in range(k // group):
                sm = torch.zeros(16 * m16 * xrow, dtype=torch.float64)  # rows past M: never copied (zeros here)
                for r in range(min(m, 16 * m16)):
                    sm[r * xrow:r * xrow + group] = x[r, g * group:(g + 1) * group]
                for kb in range(kb_):
                    a = torch.zeros(32, m16, 4, 2, dtype=torch.float64)
                    for mt in range(m16):  # abase + 2 (d TILE + 16 mt XROW + 16 kb), in elements
                        col8 = (lambda ln: (ln >> 4) * 8) if bug != "ldmatrix" else (lambda ln: ((ln >> 3) & 1) * 8)
                        addr = [(ln & 15) * xrow + col8(ln) + 16 * mt * xrow + 16 * kb for ln in range(32)]
                        for ln in range(32):  # matrix j: row address of lane 8 j + ln / 4, elements 2 (ln % 4), + 1
                            for j in range(4):
                                row = addr[8 * j + (ln >> 2)]
                                a[ln, mt, j] = sm[row + 2 * (ln & 3):row + 2 * (ln & 3) + 2]
                    for t in range(nt_):
                        b = torch.zeros(32, 2, 2, dtype=torch.float64)
                        for ln in range(32):
                            gid, tig = ln >> 2, ln & 3
                            r = wrow(nbase + 8 * t + gid)
                            for h, (pair, i) in enumerate(mm.tc_sources(group)[kb]):
                                w0 = int(qw[r, g * wb + 8 * pair + 2 * tig])
                                w1 = int(qw[r, g * wb + 8 * pair + 2 * tig + 1])
                                byte = i >> 1

                                def by(v, kk):
                                    return (v >> (8 * kk)) & 0xFF
                                tt = by(w0, byte) | (by(w0, byte) << 8) | (by(w1, byte) << 16) | (by(w1, byte) << 24)
                                if i & 1:
                                    tt >>= 4
                                b[ln, h, 0], b[ln, h, 1] = tt & 0xF, (tt >> 16) & 0xF
                        for mt in range(m16):  # the m16n8k16 fragments as matrices, D = A B
                            am = torch.zeros(16, 16, dtype=torch.float64)
                            bm = torch.zeros(16, 8, dtype=torch.float64)
                            for ln in range(32):
                                gid, tig = ln >> 2, ln & 3
                                am[gid, 2 * tig:2 * tig + 2] = a[ln, mt, 0]
                                am[gid + 8, 2 * tig:2 * tig + 2] = a[ln, mt, 1]
                                am[gid, 2 * tig + 8:2 * tig + 10] = a[ln, mt, 2]
                                am[gid + 8, 2 * tig + 8:2 * tig + 10] = a[ln, mt, 3]
                                bm[2 * tig:2 * tig + 2, gid] = b[ln, 0]
                                bm[2 * tig + 8:2 * tig + 10, gid] = b[ln, 1]
                            c = am @ bm
                            for ln in range(32):
                                gid, tig = ln >> 2, ln & 3
                                acc[ln, t, mt] += torch.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1],
                                                               c[gid + 8, 2 * tig], c[gid + 8, 2 * tig + 1]])
            for ln in range(32):
                gid, tig = ln >> 2, ln & 3
                for r in range(rt):
                    for mt in range(m16):
                        for i in range(4):
                            row = 16 * mt + gid + 8 * (i >> 1)  # frow
                            if act:  # gate tile 2 r, up tile 2 r + 1 (the test's stand-in for SwiGLU: 1000 g + u)
                                col = ((nbase >> 4) + r) * 8 + 2 * tig + (i & 1)
                                gate, up = acc[ln, 2 * r, mt, i], acc[ln, 2 * r + 1, mt, i]
                                if bug == "swiglu":
                                    gate, up = up, gate
                                if row < m and col < n // 2:
                                    out[row, col] = 1000 * gate + up
                            else:
                                for h in range(2):
                                    col = nbase + 8 * (2 * r + h) + (tig if bug == "fcol" else 2 * tig) + (i & 1)
                                    if row < m and col < n:
                                        out[row, col] = acc[ln, 2 * r + h, mt, i]
    y = x @ q.double().t()
    return out, (1000 * y[:, :n // 2] + y[:, n // 2:]) if act else y


@pytest.mark.parametrize("args", [(64, 4, 1, 48, 20, 0, 1), (128, 8, 2, 80, 37, 0, 1), (256, 4, 1, 32, 17, 0, 1),
                                  (128, 8, 2, 80, 64, 1, 1), (64, 8, 1, 96, 50, 1, 3)])
def test_tc_kernel_lane_level_data_movement_gives_x_times_q(args):
    # ldmatrix rows and per-lane delivery, the B fragments from the packed words, the MMA fragment layouts, the
    # epilogue's row / column map and the SwiGLU pairing, lane by lane, against x @ q.T exactly (integers); partial
    # N tiles, M < 16 MT/2, several warps a CTA. The mirrored source lines must still read as simulated.
    src = mm.SRC.read_text()
    for line in ("2u * (uint32_t)((lane & 15) * XROW + (lane >> 4) * 8)",
                 "abase + 2u * (uint32_t)(d * TILE + 16 * mt * XROW + 16 * kb)",
                 "const uint32_t sel = (i >> 1) * 0x1111 + 0x4400;", "if (i & 1) tt >>= 4;",
                 "wp[t] = qw + row_words<G>(rows[t], KW) + 2 * tig;", "rows[t] = wrow(nbase + 8 * t + gid, N, act);",
                 "return 16 * mt + gid + 8 * (i >> 1);", "return nbase + 8 * t + 2 * tig + (i & 1);",
                 "col = ((nbase >> 4) + r) * 8 + 2 * tig + (i & 1);", "swiglu<BF16>(y[0][i], y[1][i])",
                 "y[h][i] = acc[2 * r + h][mt][i];", "D::mma(acc[t][mt], a[mt], b[0], b[1]);"):
        assert line in src, line
    out, ref = _tc_lane_sim(*args)
    assert not torch.isnan(out).any() and torch.equal(out, ref)


@pytest.mark.parametrize("bug,args", [("ldmatrix", (128, 4, 1, 32, 20, 0)), ("fcol", (128, 4, 1, 32, 20, 0)),
                                      ("swiglu", (128, 4, 1, 32, 20, 1))])
def test_tc_lane_simulation_catches_a_planted_bug(bug, args):
    # power of the test above: one wrong address, column or pairing and the result is not x @ q.T
    out, ref = _tc_lane_sim(*args, bug=bug)
    assert torch.isnan(out).any() or not torch.equal(out, ref)

def test_slot_columns_cover_each_column_of_a_group_once():
    for g in mm.GROUPS:
        cols = mm.slot_columns(g)
        assert cols.shape == (4, g // 16, 2, 2)
        assert torch.equal(cols.flatten().sort().values, torch.arange(g))


def test_mma_b_fragments_are_four_consecutive_activations_for_g_ge_128():
    # the QUAD map (G >= 128): k-slots 2 tig, 2 tig + 1, 2 tig + 8, 2 tig + 9 of every MMA are four consecutive
    # columns, so the lane's B fragment (b0, b1) is one 8-byte activation load (no register moves); G = 64 keeps
    # the byte map (columns G/8 apart between the halves). Fails on the earlier (B, p) map of pairs.
    for g in (128, 256):
        cols = mm.slot_columns(g).reshape(4, g // 16, 4)  # [tig, mma, (half, e)]
        assert torch.equal(cols - cols[..., :1], torch.arange(4).expand_as(cols))
        assert torch.equal(cols[..., 0] % 4, torch.zeros_like(cols[..., 0]))  # 8-byte aligned
    c64 = mm.slot_columns(64)
    assert torch.equal(c64[:, :, 1] - c64[:, :, 0], torch.full_like(c64[:, :, 0], 64 // 8))


def test_emulation_catches_a_wrong_column_map(monkeypatch):
    # power of the test above: pairing k-slots 2t and 2t+1 with the columns of the other word fails it
    qw, s, z = _weight(32, 256, 128, torch.bfloat16, seed=1)
    x = torch.randn(2, 256).to(torch.bfloat16)
    good = mm.slot_columns

    monkeypatch.setattr(mm, "slot_columns", lambda g: good(g).flip(-1))
    got, ref = mm.emulate(x, qw, s, z, 128), mm.reference(x, qw, s, z, 128)
    assert float((got - ref).norm() / ref.norm()) > 0.3


def test_every_group_and_row_class_has_a_compiled_variant_with_the_default_tile():
    v = set(mm.source_variants())
    assert len(v) == len(mm.source_variants())  # no duplicates
    for g in mm.GROUPS:
        for mt in (1, 2, 4, 8):
            assert (g, mt, 1, 2, 0) in v or (g, mt, 1, 2, 1) in v, (g, mt)


def test_wide_configs_split_k_into_nonempty_ranges_and_bound_the_grid(monkeypatch):
    # the wide kernel's launch grid (N tiles x splits): every split gets >= 1 group, at most 16 CTAs per SM of 132,
    # counters enough for the split launches; the split kernels keep their (RT, DEPTH, XS, KS) tuples
    monkeypatch.setattr(mm, "variants", lambda device_index=0: mm.source_variants())
    for n, k, m in ((4608, 3584, 16), (37888, 3584, 64), (80, 640, 33), (3584, 18944, 9)):
        cf = mm.configs(n, k, m, 128)
        wide = [c for c in cf if c[2] >= mm.WIDE]
        assert wide and all(len(c) == 4 for c in cf if c[2] < mm.WIDE)
        for rt, _depth, xs, w, sp in wide:
            tiles = -(-n // (16 * rt * w))
            assert w in mm.WIDE_WARPS + (mm.TC_WARPS if (xs - mm.WIDE) & mm.WIDE_TC else ()) and 1 <= sp <= k // 128 and tiles * sp <= 16 * 132 and tiles <= mm.SEM_LEN
        fewest = min(-(-n // (16 * c[0] * c[3])) for c in wide)  # N tiles of the widest CTA
        assert {c[4] for c in wide} == {sp for sp in mm.WIDE_SPLITS if sp <= k // 128 and fewest * sp <= 16 * 132}
    assert not [c for c in mm.configs(4608, 3584, 8, 128) if c[2] >= mm.WIDE]  # one row tile: the split kernels


@pytest.mark.parametrize("group,mt,m", [(128, 8, 64), (128, 8, 37), (128, 4, 20), (128, 2, 9), (64, 8, 50),
                                         (256, 4, 32)])
def test_wg_kernel_stage_layout_is_what_its_descriptors_read(group, mt, m):
    # the WG kernel's cp.async map (chunk i -> row 8 nb + (i & 7), column chunk c, byte nb SBO + c LBO + 16 (i & 7))
    # fills the canonical no-swizzle K-major layout that its descriptors (start + 2 kb LBO for k-block kb = j KBB + kk, LBO 128, SBO 16 G) name:
    # B[k][n] of k-block kb at start + (n / 8) SBO + (k / 8) LBO + 2 (8 (n % 8) + k % 8) (PTX ISA, the matrix
    # descriptor's canonical layouts) must be x[n, 16 kb + k] for every x row n < M, each byte written once
    src = mm.SRC.read_text()
    for line in ("const int r8 = i & 7, c = (i >> 3) % CPR, nb = (i >> 3) / CPR, m = 8 * nb + r8;",
                 "const uint32_t dst = xs0 + (uint32_t)(slot * TILE * 2) + nb * SBO + c * LBO + r8 * 16;",
                 "constexpr uint32_t LBO = 128, SBO = 16u * G;   // bytes",
                 "const uint32_t sa = sbase + (j * KBB + kk) * 2 * LBO;",
                 "const uint64_t desc = (uint64_t)((sa & 0x3FFFF) >> 4) | ((uint64_t)(LBO >> 4) << 16) |",
                 "((uint64_t)(SBO >> 4) << 32);"):
        assert line in src, line
    nx, cpr, lbo, sbo = 8 * mt, group // 8, 128, 16 * group
    x = torch.randint(-1000, 1000, (m, group), dtype=torch.int32)
    smem = torch.full((nx * group,), -(2 ** 20), dtype=torch.int32)  # one element a 2 bytes; unwritten = marker
    written = torch.zeros_like(smem)
    for i in range(nx * cpr):
        r8, c, nb = i & 7, (i >> 3) % cpr, (i >> 3) // cpr
        row = 8 * nb + r8
        if row < m:
            dst = nb * sbo + c * lbo + r8 * 16
            smem[dst // 2: dst // 2 + 8] = x[row, c * 8: c * 8 + 8]
            written[dst // 2: dst // 2 + 8] += 1
    assert written.max() == 1 and written.sum() == m * group
    for kb in range(group // 16):
        start = kb * 2 * lbo
        n = torch.arange(m)[:, None]
        k = torch.arange(16)[None, :]
        addr = start + (n // 8) * sbo + (k // 8) * lbo + 2 * (8 * (n % 8) + k % 8)
        assert torch.equal(smem[addr // 2], x[:, 16 * kb: 16 * kb + 16]), kb


@pytest.mark.parametrize("group,mt,rt,w,depth", [(128, 8, 2, 8, 4), (128, 4, 1, 4, 4), (256, 8, 2, 4, 3)])
def test_wg_weight_ring_pieces_are_distinct_and_inside_the_launch(group, mt, rt, w, depth):
    # the WG kernel's WR ring (WS = 50): piece (slot, r, h, p) of lane `lane` of warp `warp` at wsm0 + wpiece's
    # offset, both evaluated from the source; every piece of every thread and slot has its own 8 bytes, after the x
    # stages and inside the dynamic shared memory the launcher asks for
    src = mm.SRC.read_text()
    wsm0 = re.search(r"const uint32_t wsm0 = xs0 \+ (.+);\n  auto wpiece", src).group(1)
    piece = re.search(r"auto wpiece = \[&\]\(int slot, int r, int h, int p\) \{\n    return wsm0 \+ (.+);", src).group(1)
    launch = re.search(r"\(WS & 16\) \? \(size_t\)DEPTH \* 8 \* MT \* G \* 2 \+ \(\(WS & 32\) \? (.+?) : 0\)", src).group(1)

    def ev(expr, **v):
        return eval(expr.replace("(uint32_t)", "").replace("(size_t)", "").replace("8u", "8"), {}, v)

    p_, tile, nw = group // 64, 8 * mt * group, w
    slot, warp, r, h, p, lane = torch.meshgrid(*(torch.arange(k) for k in (depth, nw, rt, 2, p_, 32)), indexing="ij")
    common = {"DEPTH": depth, "TILE": tile, "RT": rt, "P": p_, "nw": nw, "G": group, "MT": mt, "w": w}
    addr = ev(wsm0, warp=warp, lane=lane, **common) + ev(piece, slot=slot, r=r, h=h, p=p, **common)
    x_bytes = depth * tile * 2
    assert addr.min() == x_bytes and torch.unique(addr).numel() == addr.numel()
    assert addr.max() + 8 == x_bytes + ev(launch, **common)


def _fixup_source():
    # split_fixup's index expressions (the float4 offsets of mine, ustep, the store and the load) and its call sites'
    # (NV, accumulator size) pairs, read from the kernel source: the test evaluates the kernel's own expressions
    src = mm.SRC.read_text()
    body = src[src.index("__device__ __forceinline__ bool split_fixup("):]
    body = body[:body.index("\n}\n")]
    exprs = [re.search(pat, body).group(1) for pat in (
        r"float4\* const mine = reinterpret_cast<float4\*>\(ws\) \+ (.+);", r"const size_t ustep = (.+);",
        r"__stcg\(mine \+ (.+?), make_float4", r"__ldcg\(mine \+ (.+?)\);")]
    calls = re.findall(r"split_fixup<([^>]+)>\(reinterpret_cast<float\(&\)\[([^\]]+)\]>\(acc\)", src)
    return exprs, calls


def _cuda_eval(expr, **names):
    # a C index expression of the fixup over torch tensors: casts dropped, CUDA built-ins renamed
    for c, py in (("(size_t)", ""), ("blockIdx.x", "b"), ("blockDim.x", "bd"), ("threadIdx.x", "tid"),
                  ("gridDim.x", "tiles")):
        expr = expr.replace(c, py)
    return eval(expr, {}, names)


def _split_workspace_map(m, n, rt, w, split, tc):
    # the fixup's float4 index of (split u, column tile b, accumulator float4 j, thread tid), as split_fixup computes
    # it (its source's expressions, evaluated): mine + sp * ustep + j * blockDim for the store of split sp, and
    # mine + u * ustep + j * blockDim for the last CTA's load of split u (the same map)
    (mine, ustep, store, load), _ = _fixup_source()
    mt = mm.m_tiles(m)
    nv = (2 * rt) * (mt // 2) if tc else rt * mt  # NT * M16 (TC) or RT * MT (wide, WG) float4 per thread
    tiles, bd = -(-n // (16 * rt * w)), 32 * w
    u, b, j, tid = torch.meshgrid(torch.arange(split), torch.arange(tiles), torch.arange(nv), torch.arange(bd),
                                  indexing="ij")
    env = {"b": b, "bd": bd, "tid": tid, "tiles": tiles, "NV": nv, "j": j}
    env["ustep"] = _cuda_eval(ustep, **env)
    base = _cuda_eval(mine, **env)
    stored = base + _cuda_eval(store, sp=u, **env)
    loaded = base + _cuda_eval(load, u=u, **env)
    assert torch.equal(stored, loaded)
    return stored


def test_split_fixup_call_sites_pass_the_kernels_tile():
    # the wide and WG kernels pass RT MT float4s a thread ([RT][MT][4] and [RT][NF = 4 MT]), the TC kernel NT M16
    # ([NT][M16][4]); a call site whose NV disagrees with its accumulator's size would read or write past it
    _, calls = _fixup_source()
    assert calls == [("RT * MT", "4 * RT * MT"), ("NT * M16", "4 * NT * M16"), ("RT * MT", "RT * NF")]
    src = mm.SRC.read_text()
    assert "float acc[RT][MT][4];" in src and "float acc[NT][M16][4];" in src and "float acc[RT][NF];" in src
    assert "constexpr int NX = 8 * MT, NF = NX / 2," in src  # the WG kernel: NF = 4 MT
    assert src.count("if (S > 1 && threadIdx.x == 0) sem[blockIdx.x] = 0;") == 3  # each kernel resets its counter


@pytest.mark.parametrize("m,n,rt,w,split,tc", [(20, 80, 1, 4, 2, True), (64, 4608, 2, 4, 8, True),
                                               (33, 3584, 1, 6, 4, True), (9, 3584, 1, 8, 8, False),
                                               (64, 37888, 2, 3, 2, False), (17, 48, 3, 2, 4, False)])
def test_split_workspace_holds_every_thread_partial_once(m, n, rt, w, split, tc):
    # each thread's float4s land in distinct slots that tile [0, split_workspace_floats) exactly: no overlap
    # between CTAs or splits (a wrong stride), nothing past the allocation (the old [SPLIT, M, N] size is too
    # small for padded tiles and rows: the second assert fails on it)
    idx = _split_workspace_map(m, n, rt, w, split, tc).flatten()
    size = mm.split_workspace_floats(m, n, rt, w, split)
    assert torch.equal(torch.sort(idx).values, torch.arange(size // 4))
    assert split * m * n < size or (m % 8 == 0 and n % (16 * rt * w) == 0)


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


def test_ks_max_and_default_cfg_stay_within_the_compiled_variants():
    assert [mm.ks_max(mt, rt) for mt, rt in ((1, 1), (1, 2), (2, 2), (1, 4), (4, 2), (8, 1))] == [16, 16, 8, 8, 8, 8]
    # the cp.async kernel (XS = 2) takes 16 warps at MT = RT = 2 (KsMaxAsync); the register kernels keep 8
    assert [mm.ks_max(mt, rt, 2) for mt, rt in ((1, 1), (2, 2), (1, 4), (4, 2))] == [16, 16, 8, 8]
    assert [mm.ks_max(2, 2, xs) for xs in (0, 1)] == [8, 8]
    assert {(2, 2, 2, 16), (2, 3, 2, 16)} <= set(mm.configs_for(mm.source_variants(), 4608, 3584, 16, 128))
    assert (2, 2, 0, 16) not in mm.configs_for(mm.source_variants(), 4608, 3584, 16, 128)
    src = set(mm.source_variants())
    for g in mm.GROUPS:
        for m in (1, 9, 17, 33):
            for n, k in ((4608, 3584), (576, 1536), (37888, 3584)):
                if k % g:
                    continue
                rt, depth, xs, ks = mm.default_cfg(n, k, m, g)
                assert (g, mm.m_tiles(m), rt, depth, xs) in src
                assert 1 <= ks <= min(mm.ks_max(mm.m_tiles(m), rt), k // g)


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


def test_dense_fragment_assignment_computes_x_w_t():
    # the dense kernel's register placement (DENSE_A_WORDS, and the activations' words as b0 / b1) evaluated by PTX's
    # m16n8k16 fragment layout equals x @ w.T (float32, 10 activation rows: two tiles, the second partial)
    torch.manual_seed(0)
    x, w = torch.randn(10, 128), torch.randn(32, 128)
    got = mm.dense_emulate(x, w)
    assert torch.allclose(got, x @ w.t(), rtol=1e-4, atol=1e-4)


def test_dense_emulation_catches_a_swapped_fragment():
    # power of the test above: a1 / a2 swapped (row gid + 8's words where row gid's k + 8 belong) fails it
    torch.manual_seed(0)
    x, w = torch.randn(3, 64), torch.randn(16, 64)
    bad = ((0, 0), (0, 1), (1, 0), (1, 1))
    assert float((mm.dense_emulate(x, w, bad) - x @ w.t()).norm() / (x @ w.t()).norm()) > 0.3


def test_dense_configs_and_default_stay_within_the_compiled_variants(monkeypatch):
    src = set(mm.dense_source_variants())
    monkeypatch.setattr(mm, "dense_variants", lambda device_index=0: tuple(sorted(src)))
    for n, k in ((4608, 3584), (3584, 18944), (960, 576)):
        for m in (1, 2, 9, 17, 64):
            ch, depth, ks = mm.dense_default_cfg(n, k, m)
            assert (mm.m_tiles(m), ch, depth) in src and k % (32 * ch) == 0, (n, k, m)
            assert 1 <= ks <= min(mm.ks_max(mm.m_tiles(m), 1), k // (32 * ch))
            cf = mm.dense_configs(n, k, m)
            assert cf and all(k % (32 * c[0]) == 0 and c[2] * 32 * c[0] <= k for c in cf)


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
    from workbench.engine import dispatch, ops

    from workbench.engine import EngineConfig

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
