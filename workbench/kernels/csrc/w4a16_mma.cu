// W4A16 few-row GEMM on tensor cores (mma.sync m16n8k16), M = 1..64 activation rows:
//   out[M, N] = x[M, K] @ w_hat[N, K]^T (+ res[M, N]),   w_hat = (q - zero) * scale per group of G columns.
//
// Built and loaded by workbench/kernels/w4a16_mma.py (nvcc at first use, ctypes); see its docstring for the
// design. In short (the ideas of Marlin, Frantar et al. 2024, arXiv 2408.11743, in a GEMV-sized form):
//  * swap AB: the weight tile (16 rows of N x 16 columns of K) is the MMA's A operand, x^T the B operand
//    (n = 8 activation rows per MMA; MT such tiles for M <= 8 * MT);
//  * the weights stay in the layout of workbench.kernels.int4_layout.pack_int4_gemv (nibble i of word j of
//    group b = column b*G + i*G/8 + j). Lane (gid, tig) of a warp loads G/32 consecutive words of rows gid and
//    gid + 8 of a 16-row tile per group (one 16-byte load each for G = 128), and the k-slots of every MMA are
//    assigned to columns so that those words ARE the lane's A fragments (compute: for G >= 128 MMA (nibble c, word
//    block j) puts nibble c of the lane's words 4j, 4j+1 in k-slots 2*tig + e and of words 4j+2, 4j+3 in
//    2*tig + 8 + e), and the B fragment (x) is loaded with the same mapping: four consecutive activations of one
//    chunk. (A dot product does not care in which order the MMA visits its K columns as long as A and B agree.)
//  * nibble -> bf16 with one prmt + lop3 per two weights (exponent-OR: 0x4300 | q is the bf16 value 128 + q;
//    Kim et al. 2022, arXiv 2211.10017, sec. 4.1), fed to the MMA as it is; one more MMA per two with an all-ones A
//    operand sums the group's activations, and the group's float32 partial minus (128 + zero) times that sum,
//    times the scale, is sum_k x (q - zero) s with exact products and float32 sums (w_hat is never rounded);
//  * split-K inside the CTA: its KS warps take consecutive ranges of groups and store their fragments into
//    their own shared-memory slices, summed in warp order (deterministic); the CTA then writes [M, 16 * RT]
//    outputs (+ residual, HF rounding);
//  * DEPTH groups of weights, scales, zeros and activations in flight per warp (a register ring);
//  * programmatic dependent launch: the first DEPTH - 1 groups' weights are loaded before griddepcontrol.wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

namespace {

template <bool BF16>
struct Dt;
template <>
struct Dt<true> {
  static constexpr uint32_t MAGIC = 0x43004300u;  // bf16 128.0 in both halves
  static constexpr float BASE = 128.0f;
  static __device__ __forceinline__ float to_f(uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }
  static __device__ __forceinline__ uint16_t from_f(float f) {
    __nv_bfloat16 h = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t*>(&h);
  }
  static __device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  static __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {  // round-to-nearest product
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Dt<false> {
  static constexpr uint32_t MAGIC = 0x64006400u;  // fp16 1024.0 in both halves
  static constexpr float BASE = 1024.0f;
  static __device__ __forceinline__ float to_f(uint16_t v) {
    return __half2float(*reinterpret_cast<__half*>(&v));
  }
  static __device__ __forceinline__ uint16_t from_f(float f) {
    __half h = __float2half_rn(f);
    return *reinterpret_cast<uint16_t*>(&h);
  }
  static __device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  static __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {  // round-to-nearest product
    __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

template <uint32_t MAGIC>
__device__ __forceinline__ uint32_t nib2(uint32_t t) {  // (t & 0x000F000F) | MAGIC in one lop3
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(t), "n"(0x000F000F), "n"(MAGIC));
  return d;
}

// The SwiGLU epilogue (act = 1, gate_up = [gate | up] with N = 2 I rows): virtual row v of the tile grid (16-row
// tile t = v / 16, e = v % 16) reads weight row 8 t + e (gate) for e < 8 and I + 8 t + e - 8 (up) for e >= 8, so
// that lane (gid, tig) holds the gate (rows gid) and the up (rows gid + 8) of the same output column 8 t + gid, and
// the kernel writes silu(gate) * up [M, I] instead of [M, N]. act = 0: row v (rows past N read row N - 1, never
// stored).
__device__ __forceinline__ int wrow(int v, int N, int act) {
  if (!act) return min(v, N - 1);
  const int I = N >> 1, j = min((v >> 4) * 8 + (v & 7), I - 1);
  return (v & 8) ? I + j : j;
}

// silu(gate) * up as the engine's silu_mul computes it (workbench.kernels.fused._silu_mul_kernel, HF's rounding):
// gate and up rounded to the dtype, silu in float32 rounded, the product rounded
template <bool BF16>
__device__ __forceinline__ uint16_t swiglu(float g, float u) {
  using D = Dt<BF16>;
  const float gr = D::to_f(D::from_f(g)), ur = D::to_f(D::from_f(u));
  const float a = D::to_f(D::from_f(gr / (1.0f + __expf(-gr))));
  return D::from_f(a * ur);
}

// WB_TILED (an experiment, off by default): the weights in 16-row tiles, [N / 16][K / G][16][G / 8] words, so that a
// warp's load of one group of 8 rows is 512 contiguous bytes (row-major pack_int4_gemv: eight 64-byte pieces)
#ifndef WB_TILED
#define WB_TILED 0
#endif
template <int G>
__device__ __forceinline__ size_t row_words(int n, int KW) {  // word offset of row n's group 0
  return WB_TILED ? (size_t)(n >> 4) * KW * 16 + (n & 15) * (G / 8) : (size_t)n * KW;
}
template <int G>
__host__ __device__ constexpr int group_words() {  // word stride of one group along a row
  return WB_TILED ? 16 * (G / 8) : G / 8;
}

// Programmatic dependent launch (Hopper, PTX ISA griddepcontrol): let the stream's next kernel start launching,
// then wait until the previous kernel has finished and its writes are visible. Every kernel here calls it after
// loading what needs no predecessor (weights, scales) and before its first read of x and its first write.
__device__ __forceinline__ void pdl_launch_then_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// WPL consecutive 32-bit words, streamed (weights are read once per step: keep them out of L1)
template <int WPL>
__device__ __forceinline__ void ld_words(uint32_t (&w)[WPL], const uint32_t* p) {
  if constexpr (WPL == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else {
#pragma unroll
    for (int i = 0; i < WPL; i += 4)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(w[i]), "=r"(w[i + 1]), "=r"(w[i + 2]), "=r"(w[i + 3])
                   : "l"(p + i));
  }
}

// XW consecutive 32-bit words of activations (cached: every warp of the GPU reads the same x)
template <int XW>
__device__ __forceinline__ void ld_x(uint32_t (&v)[XW], const uint16_t* p) {
  if constexpr (XW == 1) {
    v[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
  } else if constexpr (XW == 2) {
    uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
    v[0] = t.x;
    v[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < XW; i += 4) {
      uint4 t = __ldg(reinterpret_cast<const uint4*>(p) + i / 4);
      v[i] = t.x;
      v[i + 1] = t.y;
      v[i + 2] = t.z;
      v[i + 3] = t.w;
    }
  }
}

// XS: the activations travel in the ring with the weights (prefetched); otherwise they are read from L1/L2 when
// a group is computed (fewer registers: more groups in flight, or more activation rows)
template <int G, int MT, int RT, bool XS>
struct Stage {
  static constexpr int WPL = G / 32;  // words per lane per row per group
  static constexpr int XW = WPL / 2;  // x words per lane per chunk
  uint32_t w[RT][2][WPL];             // rows gid, gid + 8 of each 16-row tile
  uint16_t s[RT][2], z[RT][2];
  uint32_t x[XS ? MT : 1][XS ? 8 : 1][XS ? XW : 1];  // chunk c = nibble index (columns c * G/8 + tig * WPL ..)
};

template <bool BF16, int G, int MT, int RT, bool XS>
__device__ __forceinline__ void load_w(Stage<G, MT, RT, XS>& st, const uint32_t* __restrict__ qw,
                                       const uint16_t* __restrict__ s, const uint16_t* __restrict__ z,
                                       const int (&rows)[RT][2], int grp, int N, int KW, int tig) {
  constexpr int WPL = G / 32;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = rows[r][h];
      ld_words<WPL>(st.w[r][h], qw + row_words<G>(n, KW) + grp * group_words<G>() + tig * WPL);
      st.s[r][h] = __ldg(s + (size_t)grp * N + n);
      st.z[r][h] = __ldg(z + (size_t)grp * N + n);
    }
  }
}

template <int G, int MT, int RT, bool XS>
__device__ __forceinline__ void load_x(Stage<G, MT, RT, XS>& st, const uint16_t* __restrict__ x, int sx, int M,
                                       int grp, int gid, int tig) {
  constexpr int WPL = G / 32, XW = WPL / 2;
  if constexpr (XS) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // rows past M load row M - 1 (no branch, no zeroing): their products land only in output columns never stored
      const int m = min(mt * 8 + gid, M - 1);
      const uint16_t* xp = x + (size_t)m * sx + grp * G + tig * WPL;
#pragma unroll
      for (int c = 0; c < 8; ++c) ld_x<XW>(st.x[mt][c], xp + c * (G / 8));
    }
  }
}

// SM: x is a shared-memory tile of this group (row stride sx elements, column 0 = the group's first column; rows
// past M hold stale values whose products land only in output columns that are never stored)
template <int XW>
__device__ __forceinline__ void ld_xs(uint32_t (&v)[XW], const uint16_t* p) {
  if constexpr (XW == 1) {
    v[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (XW == 2) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    v[0] = t.x;
    v[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < XW; i += 4) {
      const uint4 t = reinterpret_cast<const uint4*>(p)[i / 4];
      v[i] = t.x;
      v[i + 1] = t.y;
      v[i + 2] = t.z;
      v[i + 3] = t.w;
    }
  }
}

// The MMAs of one group, in pairs (B, j) of byte B = 0..3 of the lane's words and word block j. QUAD (G >= 128,
// WPL >= 4 words per lane per row): block j is words 4j..4j+3, and the pair is two MMAs, nibble 2B and nibble 2B + 1,
// each taking words 4j, 4j+1 in its k-slots 2 tig + e and words 4j+2, 4j+3 in 2 tig + 8 + e; so an MMA's B fragment
// is four consecutive activations of one chunk (b0, b1 = x words 2j, 2j + 1 of chunk 2B (+1)): no register moves.
// Otherwise (G = 64, two words a lane): one MMA, nibble 2B in k-slots 2 tig + e and nibble 2B + 1 in 2 tig + 8 + e.
// (slot_columns and emulate in w4a16_mma.py spell out the same map.)
//
// The zero (bf16, XSUM): the MMAs multiply the activations by 128 + q straight from the lop3 (no subtraction per
// weight), and one more MMA per pair with an all-ones A operand sums the activations of the group, xs[m] = sum_k
// x[m, k]; after the group, part - (128 + zero) * xs = sum_k x (q - zero) (exact products, float32 sums), times the
// scale. The ones-MMA is shared by the RT tiles; it replaces one packed subtraction per two weights. fp16 keeps the
// subtraction (q - zero exact in fp16): its base is 1024, and part - 1024 xs would cancel 3 more bits of float32
// than bf16's 128 (emulate, 4 x 256 outputs at G = 256: 12% of fp16 outputs differ from the reference by an ulp
// with the sums, 0.3% with the subtraction; bf16 with the sums 0.3%).
// PS (prescaled): the dequantized weight is rounded to x's dtype once, w_hat = dtype((q - zero) * scale) (a packed
// subtraction and multiply, as Marlin does), and the MMAs accumulate into acc directly: no per-group float32
// partial, half the accumulator registers, no per-group scaling (integer zeros: base + zero exact in the dtype).
template <bool BF16, int G, int MT, int RT, bool XS, bool SM = false, bool PS = false>
__device__ __forceinline__ void compute(const Stage<G, MT, RT, XS>& st, float (&acc)[RT][MT][4],
                                        const uint16_t* __restrict__ x, int sx, int M, int grp, int gid, int tig) {
  using D = Dt<BF16>;
  constexpr int WPL = G / 32, XW = WPL / 2;
  constexpr bool QUAD = WPL >= 4;
  constexpr int NJ = QUAD ? WPL / 4 : 1, NF = QUAD ? 2 : 1;  // word blocks; MMAs (A fragments) per pair
  constexpr uint32_t ONE = BF16 ? 0x3F803F80u : 0x3C003C00u;  // 1.0 in both halves
  float part_[PS ? 1 : RT][PS ? 1 : MT][4];
  float(&part)[RT][MT][4] = *reinterpret_cast<float(*)[RT][MT][4]>(PS ? &acc[0][0][0] : &part_[0][0][0]);
  constexpr bool XSUM = BF16 && !PS;  // the zero through the activation sums (fp16: subtracted, see above)
  float xs[XSUM ? MT : 1][4];
  uint32_t c[RT][2], sc[RT][2];  // (unused ones are dropped by the compiler)
  if constexpr (!XSUM) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint16_t cz = D::from_f(D::to_f(st.z[r][h]) + D::BASE);  // base + zero: exact (integer zero)
        c[r][h] = (uint32_t)cz | ((uint32_t)cz << 16);
        if constexpr (PS) sc[r][h] = (uint32_t)st.s[r][h] | ((uint32_t)st.s[r][h] << 16);
      }
  }
  if constexpr (!PS) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (XSUM) xs[mt][i] = 0.0f;
#pragma unroll
        for (int r = 0; r < RT; ++r) part[r][mt][i] = 0.0f;
      }
  }
  // XSUM: base + q from the lop3 as it is; else q - zero (exact), times the scale when prescaled
  auto dq = [&](uint32_t v, int r, int h) -> uint32_t {
    if constexpr (XSUM) {
      return v;
    } else {
      const uint32_t d = D::sub2(v, c[r][h]);
      if constexpr (PS) return D::mul2(d, sc[r][h]);
      return d;
    }
  };
  // tile r's A fragments of pair (B, j): f[0] nibble 2B, f[1] nibble 2B + 1 (QUAD); f[0] both nibbles otherwise
  auto frag = [&](uint32_t (&f)[NF][4], int r, int B, int j) {
    const uint32_t sel = B * 0x1111 + 0x4400;  // bytes [w0.B, w0.B, w1.B, w1.B]
    if constexpr (QUAD) {
      const uint32_t t0 = prmt(st.w[r][0][4 * j], st.w[r][0][4 * j + 1], sel);      // row gid,     words 4j, 4j+1
      const uint32_t t1 = prmt(st.w[r][1][4 * j], st.w[r][1][4 * j + 1], sel);      // row gid + 8
      const uint32_t u0 = prmt(st.w[r][0][4 * j + 2], st.w[r][0][4 * j + 3], sel);  // row gid,     words 4j+2, 4j+3
      const uint32_t u1 = prmt(st.w[r][1][4 * j + 2], st.w[r][1][4 * j + 3], sel);  // row gid + 8
      f[0][0] = dq(nib2<D::MAGIC>(t0), r, 0);
      f[0][1] = dq(nib2<D::MAGIC>(t1), r, 1);
      f[0][2] = dq(nib2<D::MAGIC>(u0), r, 0);
      f[0][3] = dq(nib2<D::MAGIC>(u1), r, 1);
      f[NF - 1][0] = dq(nib2<D::MAGIC>(t0 >> 4), r, 0);
      f[NF - 1][1] = dq(nib2<D::MAGIC>(t1 >> 4), r, 1);
      f[NF - 1][2] = dq(nib2<D::MAGIC>(u0 >> 4), r, 0);
      f[NF - 1][3] = dq(nib2<D::MAGIC>(u1 >> 4), r, 1);
    } else {
      const uint32_t t0 = prmt(st.w[r][0][0], st.w[r][0][1], sel);
      const uint32_t t1 = prmt(st.w[r][1][0], st.w[r][1][1], sel);
      f[0][0] = dq(nib2<D::MAGIC>(t0), r, 0);       // row gid,     nibble 2B
      f[0][1] = dq(nib2<D::MAGIC>(t1), r, 1);       // row gid + 8, nibble 2B
      f[0][2] = dq(nib2<D::MAGIC>(t0 >> 4), r, 0);  // row gid,     nibble 2B + 1
      f[0][3] = dq(nib2<D::MAGIC>(t1 >> 4), r, 1);  // row gid + 8, nibble 2B + 1
    }
  };
  // the pair's MMA(s) with activation chunks v[0] = 2B, v[1] = 2B + 1 (XW words each), A fragments f0 and f1
  auto mmas = [&](float (&d)[4], const uint32_t (&f0)[4], const uint32_t (&f1)[4], const uint32_t (&v)[2][XW],
                  int j) {
    if constexpr (QUAD) {
      D::mma(d, f0, v[0][2 * j], v[0][2 * j + 1]);
      D::mma(d, f1, v[1][2 * j], v[1][2 * j + 1]);
    } else {
      D::mma(d, f0, v[0][0], v[1][0]);
    }
  };
  const uint32_t ones[4] = {ONE, ONE, ONE, ONE};
#pragma unroll
  for (int B = 0; B < 4; ++B) {
    if constexpr (SM) {  // dequantize byte B's fragments first, then one activation tile at a time (fewer registers)
      uint32_t a[RT][NJ][NF][4];
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int r = 0; r < RT; ++r) frag(a[r][j], r, B, j);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t xv[2][XW];
#pragma unroll
        for (int h = 0; h < 2; ++h) ld_xs<XW>(xv[h], x + (mt * 8 + gid) * sx + tig * WPL + (2 * B + h) * (G / 8));
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
          for (int r = 0; r < RT; ++r) mmas(part[r][mt], a[r][j][0], a[r][j][NF - 1], xv, j);
          if constexpr (XSUM) mmas(xs[mt], ones, ones, xv, j);
        }
      }
    } else {
    uint32_t xv[MT][2][XW];  // chunks 2B, 2B + 1 (XS: from the ring)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (XS) {
#pragma unroll
          for (int i = 0; i < XW; ++i) xv[mt][h][i] = st.x[mt][2 * B + h][i];
        } else {
          const int m = min(mt * 8 + gid, M - 1);  // (rows past M: as in load_x)
          ld_x<XW>(xv[mt][h], x + (size_t)m * sx + grp * G + tig * WPL + (2 * B + h) * (G / 8));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        uint32_t a[NF][4];
        frag(a, r, B, j);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mmas(part[r][mt], a[0], a[NF - 1], xv[mt], j);
      }
      if constexpr (XSUM) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mmas(xs[mt], ones, ones, xv[mt], j);
      }
    }
    }  // !SM
  }
  if constexpr (!PS) {  // (prescaled: the MMAs accumulated into acc)
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const float s0 = D::to_f(st.s[r][0]), s1 = D::to_f(st.s[r][1]);
      if constexpr (!XSUM) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          acc[r][mt][0] += s0 * part[r][mt][0];
          acc[r][mt][1] += s0 * part[r][mt][1];
          acc[r][mt][2] += s1 * part[r][mt][2];
          acc[r][mt][3] += s1 * part[r][mt][3];
        }
        continue;
      }
      const float c0 = D::to_f(st.z[r][0]) + D::BASE, c1 = D::to_f(st.z[r][1]) + D::BASE;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {  // xs[mt][i] = xs[mt][i + 2]: the sums of activation rows 2 tig, 2 tig + 1
        acc[r][mt][0] = fmaf(s0, fmaf(-c0, xs[mt][0], part[r][mt][0]), acc[r][mt][0]);
        acc[r][mt][1] = fmaf(s0, fmaf(-c0, xs[mt][1], part[r][mt][1]), acc[r][mt][1]);
        acc[r][mt][2] = fmaf(s1, fmaf(-c1, xs[mt][0], part[r][mt][2]), acc[r][mt][2]);
        acc[r][mt][3] = fmaf(s1, fmaf(-c1, xs[mt][1], part[r][mt][3]), acc[r][mt][3]);
      }
    }
  }
}

// Warps per CTA a variant takes (KS <= this): 16, or 8 where a warp holds >= 4 fragment tiles (more registers:
// 256-thread blocks let each thread have up to 255), and at most 64 / (MT * RT) so the per-warp partials fit 32 KB.
template <int MT, int RT>
struct KsMax {
  static constexpr int a = (MT * RT >= 4) ? 8 : 16, b = 64 / (MT * RT);
  static constexpr int value = a < b ? a : b;
};
// The cp.async kernel (XS = 2) keeps its weights in shared memory, not in a register ring, so MT = 2, RT = 2 (four
// fragment tiles) fits 128 registers a thread too: 16 warps. At 16 rows the register kernels' 8 warps a CTA left
// too few loads in flight on a long K (down: K = 18944, 30 us at 16 rows against 19 at 8 rows with 16 warps).
template <int MT, int RT>
struct KsMaxAsync {
  static constexpr int value = (MT == 2 && RT == 2) ? 16 : KsMax<MT, RT>::value;
};

// The CTA's output: each warp stores its fragments (rows m < M) into its own slice of `red` (warp w's at red + w *
// slice, slice >= M * 16 RT floats), then the threads sum the slices in warp order (a fixed order: the same result
// on every run) and write [M, 16 RT] (+ residual).
template <bool BF16, int MT, int RT>
__device__ __forceinline__ void finish(const float (&acc)[RT][MT][4], float* red, size_t slice, int ks, int warp,
                                       int gid, int tig, int M, int N, int nbase, uint16_t* __restrict__ out,
                                       const uint16_t* __restrict__ res, int act = 0) {
  using D = Dt<BF16>;
  constexpr int T = RT * 16;
  float* mine = red + (size_t)warp * slice;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m0 = mt * 8 + 2 * tig, nl = r * 16 + gid;
      if (m0 < M) {
        mine[m0 * T + nl] = acc[r][mt][0];
        mine[m0 * T + nl + 8] = acc[r][mt][2];
      }
      if (m0 + 1 < M) {
        mine[(m0 + 1) * T + nl] = acc[r][mt][1];
        mine[(m0 + 1) * T + nl + 8] = acc[r][mt][3];
      }
    }
  __syncthreads();
  if (act) {  // SwiGLU: slice column r * 16 + e is the gate, + 8 the up of output column (nbase / 16 + r) * 8 + e
    constexpr int H = T / 2;
    const int I = N >> 1;
    for (int i = threadIdx.x; i < M * H; i += blockDim.x) {
      const int m = i / H, j = i % H, nl = (j >> 3) * 16 + (j & 7), col = (nbase >> 4) * 8 + j;
      if (col < I) {
        float g = 0.0f, u = 0.0f;
        for (int w = 0; w < ks; ++w) {
          g += red[(size_t)w * slice + m * T + nl];
          u += red[(size_t)w * slice + m * T + nl + 8];
        }
        out[(size_t)m * I + col] = swiglu<BF16>(g, u);
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < M * T; i += blockDim.x) {
    const int m = i / T, nl = i % T, n = nbase + nl;
    if (n < N) {
      float y = 0.0f;
      for (int w = 0; w < ks; ++w) y += red[(size_t)w * slice + i];
      if (res != nullptr) y = D::to_f(D::from_f(y)) + D::to_f(res[(size_t)m * N + n]);  // HF: bf16(bf16(xW) + r)
      out[(size_t)m * N + n] = D::from_f(y);
    }
  }
}

// WB_MAXREG (an experiment, 0 by default): cap the registers of the two cp.async-ring kernels at this many per
// thread (__maxnreg__ instead of their launch bounds), for more resident warps per SM; measured slower
// (benchmarks/results/h200_2026-12-03e/: more warps, spills, no gain)
#ifndef WB_MAXREG
#define WB_MAXREG 0
#endif
#if WB_MAXREG
#define WB_RING_BOUNDS(...) __maxnreg__(WB_MAXREG)
#else
#define WB_RING_BOUNDS(...) __launch_bounds__(__VA_ARGS__)
#endif

template <bool BF16, int G, int MT, int RT, int DEPTH, bool XS>
__global__ void __launch_bounds__(32 * KsMax<MT, RT>::value) w4a16_mma_kernel(const uint16_t* __restrict__ x, int sx,
                                                       const uint32_t* __restrict__ qw,
                                                       const uint16_t* __restrict__ s,
                                                       const uint16_t* __restrict__ z, uint16_t* __restrict__ out,
                                                       const uint16_t* __restrict__ res, int M, int N, int K,
                                                       int act) {
  using D = Dt<BF16>;
  __shared__ float red[KsMax<MT, RT>::value * MT * 8 * RT * 16];  // [warp][m][n_local]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int NG = K / G, KW = K / 8;
  const int g0 = (int)(((long long)warp * NG) / ks), g1 = (int)(((long long)(warp + 1) * NG) / ks);
  const int nbase = blockIdx.x * (16 * RT);
  int rows[RT][2];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    rows[r][0] = wrow(nbase + r * 16 + gid, N, act);  // rows past N (last tile) read row N - 1, never stored
    rows[r][1] = wrow(nbase + r * 16 + gid + 8, N, act);
  }

  Stage<G, MT, RT, XS> ring[DEPTH];
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d)
    if (g0 + d < g1) load_w<BF16>(ring[d], qw, s, z, rows, g0 + d, N, KW, tig);
  // programmatic dependent launch: weights need no predecessor; x and every write come after the wait
  pdl_launch_then_wait();
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d)
    if (g0 + d < g1) load_x(ring[d], x, sx, M, g0 + d, gid, tig);

  float acc[RT][MT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][mt][i] = 0.0f;

  for (int base = g0; base < g1; base += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int grp = base + d;
      const int nxt = grp + DEPTH - 1;  // into slot (d + DEPTH - 1) % DEPTH, the slot computed last step
      if (nxt < g1) {
        load_w<BF16>(ring[(d + DEPTH - 1) % DEPTH], qw, s, z, rows, nxt, N, KW, tig);
        load_x(ring[(d + DEPTH - 1) % DEPTH], x, sx, M, nxt, gid, tig);
      }
      if (grp < g1) compute<BF16>(ring[d], acc, x, sx, M, grp, gid, tig);
    }
  }

  finish<BF16, MT, RT>(acc, red, (size_t)M * RT * 16, ks, warp, gid, tig, M, N, nbase, out, res, act);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t sa = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
// the same with src-size `bytes` (0 or 16): 0 reads nothing and zero-fills (a branch-free predicated copy)
__device__ __forceinline__ void cp_async16z(void* smem, const void* gmem, int bytes) {
  const uint32_t sa = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N_>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N_) : "memory"); }

// The same arithmetic as w4a16_mma_kernel, with the weights in flight in shared memory instead of registers
// (XS = 2 in the variant list): each warp keeps a private ring of DEPTH groups, filled by cp.async (16 bytes a lane,
// laid out [stage][chunk][lane] so that a warp's reads are conflict-free); scales and zeros ride in a register
// ring, the activations are loaded one group ahead into registers. More bytes in flight per register than the
// register ring, which at one row left the large matrices at about half the read bandwidth.
template <bool BF16, int G, int MT, int RT, int DEPTH>
__global__ void WB_RING_BOUNDS(32 * KsMaxAsync<MT, RT>::value) w4a16_mma_async_kernel(const uint16_t* __restrict__ x, int sx,
                                                             const uint32_t* __restrict__ qw,
                                                             const uint16_t* __restrict__ s,
                                                             const uint16_t* __restrict__ z,
                                                             uint16_t* __restrict__ out,
                                                             const uint16_t* __restrict__ res, int M, int N, int K,
                                                       int act) {
  using D = Dt<BF16>;
  constexpr int WPL = G / 32, CH = WPL / 4, C = RT * 2 * CH;  // 16-byte chunks per lane per group
  extern __shared__ uint4 wring[];                            // [warp][DEPTH][C][32]; at the end, `red`
  static_assert(MT * 8 * RT * 16 <= DEPTH * C * 32 * 4, "a warp's reduction slice fits in its ring");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int NG = K / G, KW = K / 8;
  const int g0 = (int)(((long long)warp * NG) / ks), g1 = (int)(((long long)(warp + 1) * NG) / ks);
  const int nbase = blockIdx.x * (16 * RT);
  uint4* ring = wring + (size_t)warp * DEPTH * C * 32;
  const uint32_t* wp[RT][2];
  int rows[RT][2];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[r][h] = wrow(nbase + r * 16 + gid + 8 * h, N, act);
      wp[r][h] = qw + row_words<G>(rows[r][h], KW) + tig * WPL;
    }
  uint16_t sr[DEPTH][RT][2], zr[DEPTH][RT][2];

  // group grp's weights into ring slot `slot`; past g1 a zero-byte copy of group g1 - 1 (no branch, no traffic)
  auto issue = [&](int slot, int grp) {
    const int bytes = grp < g1 ? 16 : 0, gg = min(grp, g1 - 1);
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < CH; ++c)
          cp_async16z(&ring[((size_t)slot * C + (r * 2 + h) * CH + c) * 32 + lane],
                      wp[r][h] + gg * group_words<G>() + 4 * c, bytes);
  };
  auto load_sz = [&](uint16_t (&sv)[RT][2], uint16_t (&zv)[RT][2], int grp) {  // (past g1: group g1 - 1 again)
    const size_t gg = min(grp, g1 - 1);
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sv[r][h] = __ldg(s + gg * N + rows[r][h]);
        zv[r][h] = __ldg(z + gg * N + rows[r][h]);
      }
  };
#pragma unroll
  for (int d = 0; d < DEPTH; ++d) {
    issue(d, g0 + d);
    load_sz(sr[d], zr[d], g0 + d);
    cp_async_commit();
  }
  pdl_launch_then_wait();
  // two stages, alternating (the loop body is unrolled over 2 DEPTH groups so that the stage of each is known at
  // compile time): group grp computes from cur[grp % 2] while the next group's activations load into the other
  Stage<G, MT, RT, true> cur[2];
  if (g0 < g1) load_x(cur[0], x, sx, M, g0, gid, tig);

  float acc[RT][MT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][mt][i] = 0.0f;

  for (int base = g0; base < g1; base += 2 * DEPTH) {
#pragma unroll
    for (int dd = 0; dd < 2 * DEPTH; ++dd) {
      const int grp = base + dd, d = dd % DEPTH;
      Stage<G, MT, RT, true>& st = cur[dd & 1];
      if (grp < g1) {
        cp_async_wait<DEPTH - 1>();  // the oldest group (this one) has landed
        load_x(cur[(dd + 1) & 1], x, sx, M, min(grp + 1, g1 - 1), gid, tig);  // (branch-free: the last reloads)
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int c = 0; c < CH; ++c) {
              const uint4 v = ring[((size_t)d * C + (r * 2 + h) * CH + c) * 32 + lane];
              st.w[r][h][4 * c] = v.x;
              st.w[r][h][4 * c + 1] = v.y;
              st.w[r][h][4 * c + 2] = v.z;
              st.w[r][h][4 * c + 3] = v.w;
            }
            st.s[r][h] = sr[d][r][h];
            st.z[r][h] = zr[d][r][h];
          }
        compute<BF16>(st, acc, x, sx, M, grp, gid, tig);
        // refill this slot (its reads are done: the MMAs above consumed them) with the group DEPTH ahead
        issue(d, grp + DEPTH);
        load_sz(sr[d], zr[d], grp + DEPTH);
      }
      cp_async_commit();  // one group per step, also when empty: wait_group counts stay aligned
    }
  }
  cp_async_wait<0>();
  __syncwarp();  // every lane's copies have landed and its ring reads are done: the warp's ring becomes its slice

  // the reduction slices live in the rings (each warp's in its own: no barrier before the stores), so that the
  // CTA's shared memory is the ring alone (a static [KsMax][M][16 RT] array cost 16 KB a CTA at MT = 1, RT = 2)
  finish<BF16, MT, RT>(acc, reinterpret_cast<float*>(wring), (size_t)DEPTH * C * 32 * 4, ks, warp, gid, tig, M, N,
                       nbase, out, res, act);
}

// the wide kernel's activation tile per group: 8 MT rows of G columns, each row padded by 16 XW bytes so that a
// warp's fragment reads (8 rows x 4 lanes of XW words) fall into distinct banks
template <int G, int MT>
struct WideTile {
  static constexpr int XROW = G + 8 * (G / 64);
  static constexpr int TILE = 8 * MT * XROW;
};

// The split-K fixup of the wide and TC kernels (S = gridDim.y > 1; the stream-K "fixup" of Osama et al. 2023,
// arXiv 2301.03598, in its serial, deterministic form). acc is the thread's NV float4s of float32 partials (any
// [a][b][4] or [a][4 b] accumulator array, flattened). Each CTA stores them in thread order, [S][tiles][NV][blockDim]
// float4 (coalesced 16-byte stores and loads, no bounds: a split launch's workspace is S x Npad x Mpad floats,
// mm.split_workspace_floats), then counts itself in at its column tile's counter sem[blockIdx.x]; the CTA that
// arrives last sums the S partials into acc in the order u = 0 .. S - 1 (its own read back, so the result does not
// depend on which CTA came last), with every load of a round in flight. Returns whether this CTA was the last (the
// others return without storing); the kernel's last CTA then resets sem[blockIdx.x] after its stores, for the next
// launch, whose CTAs reach it only after griddepcontrol.wait. last: a __shared__ int of the kernel. An earlier form
// summed element by element, one dependent L2 load a step: o at 64 rows took 88 us at S = 8 against 66 unsplit
// (benchmarks/results/h200_2026-12-04c/occ_layers.json), 16 us after (h200_2026-12-04d/fix_layers.json).
template <int NV>
__device__ __forceinline__ bool split_fixup(float (&acc)[4 * NV], float* __restrict__ ws, int* __restrict__ sem,
                                            int& last) {
  const int S = gridDim.y, sp = blockIdx.y;
  float4* const mine = reinterpret_cast<float4*>(ws) + (size_t)blockIdx.x * NV * blockDim.x + threadIdx.x;
  const size_t ustep = (size_t)gridDim.x * NV * blockDim.x;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    __stcg(mine + sp * ustep + j * blockDim.x, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(sem + blockIdx.x, 1) == S - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < 4 * NV; ++i) acc[i] = 0.0f;
  for (int u = 0; u < S; ++u)
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const float4 v = __ldcg(mine + u * ustep + j * blockDim.x);
      acc[4 * j] += v.x;
      acc[4 * j + 1] += v.y;
      acc[4 * j + 2] += v.z;
      acc[4 * j + 3] += v.w;
    }
  return true;
}

// The wide kernel (XS = 3 in the variant list), for 9..64 rows: the CTA's W warps take W adjacent tiles of 16 RT
// weight rows (N), and all of them read one shared copy of the activations, staged group by group into shared
// memory by cp.async (DEPTH groups in flight, the weights in a register ring beside them). The split kernels above
// give each CTA one tile of rows, so each CTA reads all of x: at 64 rows that is 16x the weight bytes (L2-bound).
// K is split across CTAs instead (gridDim.y = S): each writes its float32 partial to ws[S, M, N], and the CTA that
// arrives last at its column tile's counter (sem, reset by it) sums the S partials in split order (the same result
// on every run: the stream-K "fixup" of Osama et al. 2023, arXiv 2301.03598, in its serial, deterministic form).
// ws and sem belong to one stream at a time (the loader keeps one counter array per device; a launch uses it only
// after griddepcontrol.wait, i.e. after the previous kernel in the stream has finished).
// WSM bit 0 (WS): the weights through shared memory; bit 1 (PS): prescaled weights (compute), which frees the
// partials' registers (ptxas: 80-125 registers a thread for the MT RT <= 8 prescaled tiles, so two CTAs of 8 warps
// fit an SM without a min-blocks hint; an explicit hint of 1 or 2 made ptxas use more registers in every variant).
template <bool BF16, int G, int MT, int RT, int DEPTH, int WSM>
__global__ void __launch_bounds__(256) w4a16_wide_kernel(const uint16_t* __restrict__ x, int sx,
                                                         const uint32_t* __restrict__ qw,
                                                         const uint16_t* __restrict__ s,
                                                         const uint16_t* __restrict__ z, uint16_t* __restrict__ out,
                                                         const uint16_t* __restrict__ res, int M, int N, int K,
                                                         float* __restrict__ ws, int* __restrict__ sem, int act) {
  using D = Dt<BF16>;
  constexpr bool WS = WSM & 1, PS = (WSM & 2) != 0;
  constexpr int XROW = WideTile<G, MT>::XROW, TILE = WideTile<G, MT>::TILE, CPR = G / 8;
  constexpr int WPL = G / 32, CH = WPL / 4, C = RT * 2 * CH;  // WS: 16-byte chunks per lane per group
  static_assert(!WS || G >= 128, "weights through shared memory: 16-byte chunks per lane (G >= 128)");
  extern __shared__ uint4 xsm4[];  // [DEPTH][8 MT][XROW] activations, then (WS) [W][DEPTH][C][32] weights
  uint16_t* xsm = reinterpret_cast<uint16_t*>(xsm4);
  __shared__ int last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int NG = K / G, KW = K / 8, S = gridDim.y, sp = blockIdx.y;
  const int g0 = (int)(((long long)sp * NG) / S), g1 = (int)(((long long)(sp + 1) * NG) / S);
  const int nbase = (blockIdx.x * nw + warp) * (16 * RT);
  int rows[RT][2];
  const uint32_t* wp[RT][2];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[r][h] = wrow(nbase + r * 16 + gid + 8 * h, N, act);  // rows past N read row N - 1, never stored
      wp[r][h] = qw + row_words<G>(rows[r][h], KW) + tig * WPL;
    }
  uint4* wring = xsm4 + (size_t)DEPTH * TILE * 2 / 16 + (size_t)warp * DEPTH * C * 32;
  auto issue_x = [&](int slot, int grp) {  // the group's [M, G] activations, 16 bytes a copy
    uint16_t* dst = xsm + slot * TILE;
    for (int i = threadIdx.x; i < M * CPR; i += blockDim.x) {
      const int m = i / CPR, c = i - m * CPR;
      cp_async16(dst + m * XROW + c * 8, x + (size_t)m * sx + (size_t)grp * G + c * 8);
    }
  };
  auto issue_w = [&](int slot, int grp) {  // WS: this warp's weights of the group, [C][32] 16-byte chunks
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < CH; ++c)
          cp_async16(&wring[((size_t)slot * C + (r * 2 + h) * CH + c) * 32 + lane], wp[r][h] + grp * group_words<G>() + 4 * c);
  };
  Stage<G, MT, RT, false> ring[WS ? 1 : DEPTH];  // !WS: the weights' register ring; WS: the group being computed
  uint16_t sr[WS ? DEPTH : 1][RT][2], zr[WS ? DEPTH : 1][RT][2];  // WS: scales and zeros ride in registers
  auto load_sz = [&](int slot, int grp) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sr[slot][r][h] = __ldg(s + (size_t)grp * N + rows[r][h]);
        zr[slot][r][h] = __ldg(z + (size_t)grp * N + rows[r][h]);
      }
  };
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d)
    if (g0 + d < g1) {
      if constexpr (WS) {
        issue_w(d, g0 + d);  // (in the first commit group, with stage 0's activations)
        load_sz(d, g0 + d);
      } else {
        load_w<BF16>(ring[d], qw, s, z, rows, g0 + d, N, KW, tig);
      }
    }
  pdl_launch_then_wait();
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d) {
    if (g0 + d < g1) issue_x(d, g0 + d);
    cp_async_commit();
  }
  float acc[RT][MT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][mt][i] = 0.0f;

  for (int base = g0; base < g1; base += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int grp = base + d;
      if (grp < g1) {  // the same for every thread of the CTA
        cp_async_wait<DEPTH - 2>();  // this thread's copies of group grp have landed
        __syncthreads();             // everyone's have; and every warp is done with the slot refilled next
        const int nxt = grp + DEPTH - 1, slot = (d + DEPTH - 1) % DEPTH;
        if (nxt < g1) {
          issue_x(slot, nxt);
          if constexpr (WS) {
            issue_w(slot, nxt);
            load_sz(slot, nxt);
          } else {
            load_w<BF16>(ring[slot], qw, s, z, rows, nxt, N, KW, tig);
          }
        }
        cp_async_commit();
        if constexpr (WS) {
#pragma unroll
          for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int c = 0; c < CH; ++c) {
                const uint4 v = wring[((size_t)d * C + (r * 2 + h) * CH + c) * 32 + lane];
                ring[0].w[r][h][4 * c] = v.x;
                ring[0].w[r][h][4 * c + 1] = v.y;
                ring[0].w[r][h][4 * c + 2] = v.z;
                ring[0].w[r][h][4 * c + 3] = v.w;
              }
              ring[0].s[r][h] = sr[d][r][h];
              ring[0].z[r][h] = zr[d][r][h];
            }
          compute<BF16, G, MT, RT, false, true, PS>(ring[0], acc, xsm + d * TILE, XROW, M, 0, gid, tig);
        } else {
          compute<BF16, G, MT, RT, false, true, PS>(ring[d], acc, xsm + d * TILE, XROW, M, 0, gid, tig);
        }
      }
    }
  }
  cp_async_wait<0>();

  // fragment (r, mt, i) is output row m = 8 mt + 2 tig + (i & 1), column n = nbase + 16 r + gid + 8 (i >> 1)
  auto store = [&](int m, int n, float y) {
    if (res != nullptr) y = D::to_f(D::from_f(y)) + D::to_f(res[(size_t)m * N + n]);  // HF: bf16(bf16(xW) + r)
    out[(size_t)m * N + n] = D::from_f(y);
  };
  // fragment (r, mt)'s four values y: the output (act: y[i] is the gate and y[i + 2] the up of row 8 mt + 2 tig + i,
  // output column (nbase / 16 + r) * 8 + gid; see wrow)
  auto emit = [&](int r, int mt, const float (&y)[4]) {
    if (act) {
      const int I = N >> 1, col = ((nbase >> 4) + r) * 8 + gid;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = mt * 8 + 2 * tig + i;
        if (m < M && col < I) out[(size_t)m * I + col] = swiglu<BF16>(y[i], y[i + 2]);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = mt * 8 + 2 * tig + (i & 1), n = nbase + r * 16 + gid + 8 * (i >> 1);
      if (m < M && n < N) store(m, n, y[i]);
    }
  };
  if (S > 1 && !split_fixup<RT * MT>(reinterpret_cast<float(&)[4 * RT * MT]>(acc), ws, sem, last)) return;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) emit(r, mt, acc[r][mt]);
  if (S > 1 && threadIdx.x == 0) sem[blockIdx.x] = 0;  // ready for the next launch
}

// The tensor-core kernel (WSM bit 2, TC; XS = 3 + WSM in the variant list), for 17..64 rows: the activations are the
// MMA's A operand and the weights its B operand (no swap), the way Marlin (Frantar et al. 2024, arXiv 2408.11743,
// sec. 4) runs larger batches. Warp w of the CTA takes the 16 RT weight rows (N) of the wide kernel's tile, as
// NT = 2 RT tiles of 8 (the MMA's n), and all MT / 2 tiles of 16 activation rows (its m). Per group:
//  * the CTA stages x's [16 MT / 2, G] tile into shared memory by cp.async, rows padded to G + 8 elements (an odd
//    number of 16-byte chunks: the eight row addresses of an ldmatrix phase fall into distinct banks); each warp
//    loads an A fragment (16 rows x 16 columns) with one ldmatrix.x4, the natural m16n8k16 layout;
//  * lane (gid, tig) holds weight row gid of each n8 tile; the B fragment of k-block kb wants columns 16 kb + 2 tig
//    + e (b0) and 16 kb + 8 + 2 tig + e (b1), e = 0, 1. In pack_int4_gemv's layout column c of a group is nibble
//    c / (G/8) of word c % (G/8), so those are one nibble of words 8 p + 2 tig, 8 p + 2 tig + 1 (pair p): the lane
//    loads G / 64 pairs (8 bytes each) per row and group, and each 32-bit fragment register is one prmt (shared by
//    two nibbles), one shift, one lop3 (exponent-OR), then w_hat = (v - (base + zero)) * scale in x's dtype (the
//    prescaled arithmetic: a packed subtraction and multiply, rounded once, as Marlin's dequantization);
//  * each B fragment feeds MT / 2 MMAs and each A fragment NT: ~1 ldmatrix per NT MMAs, ~4 / (MT / 2) dequantizing
//    instructions per MMA (the swap-AB kernels reload an activation fragment for every MMA pair at n = 8).
// The weights ride in a DEPTH-group register ring (WR: a per-warp cp.async ring) beside the activations' shared-memory
// ring; split K across CTAs,
// the deterministic fixup, the residual and the SwiGLU epilogue are the wide kernel's (act: n8 tile 2 r holds the gate
// and 2 r + 1 the up of the same 8 output columns, wrow's mapping).
template <int G, int MT>
struct TcTile {
  static constexpr int XROW = G + 8;
  static constexpr int TILE = 8 * MT * XROW;  // 16 (MT / 2) rows
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&a)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(saddr));
}

// lane tig's weight words of k-block kb, half h (0: b0, 1: b1): pair index and nibble (see the TC kernel's comment)
template <int G>
__host__ __device__ constexpr int tc_pair(int kb, int h) {
  return ((16 * kb + 8 * h) % (G / 8)) / 8;
}
template <int G>
__host__ __device__ constexpr int tc_nibble(int kb, int h) {
  return (16 * kb + 8 * h) / (G / 8);
}

// OCC (WS bit 3): launch bounds of 128 threads and OCC = 3 CTAs an SM (ptxas caps the registers at 65536 / (128 OCC)):
// the launcher takes W <= 4 for these. At 32 rows MT = 4, RT = 2, DEPTH = 3 ran 64.5 us on gate_up at 165 registers
// (3 CTAs of 4 warps an SM) and 78-80 us at 175 (2 CTAs); with OCC = 3 gate_up at 64 rows went from 103.9 to
// 87.5 us. OCC = 4 (128 registers: 52-328 bytes of spill) was slower in every shape (benchmarks/results/
// h200_2026-12-04c/occ4_layers.json) and is not instantiated.
template <bool BF16, int G, int MT, int RT, int DEPTH, bool WR, int OCC = 0>
__global__ void __launch_bounds__(OCC ? 128 : 256, OCC ? OCC : 1) w4a16_tc_kernel(const uint16_t* __restrict__ x, int sx,
                                                       const uint32_t* __restrict__ qw,
                                                       const uint16_t* __restrict__ s,
                                                       const uint16_t* __restrict__ z, uint16_t* __restrict__ out,
                                                       const uint16_t* __restrict__ res, int M, int N, int K,
                                                       float* __restrict__ ws, int* __restrict__ sem, int act) {
  using D = Dt<BF16>;
  static_assert(MT % 2 == 0 && G >= 64, "TC: whole 16-row activation tiles, groups of >= 64 columns");
  constexpr int M16 = MT / 2, NT = 2 * RT, P = G / 64, KB = G / 16, CPR = G / 8;
  constexpr int XROW = TcTile<G, MT>::XROW, TILE = TcTile<G, MT>::TILE;
  extern __shared__ uint4 xsm4[];  // [DEPTH][16 M16][XROW] activations
  uint16_t* xsm = reinterpret_cast<uint16_t*>(xsm4);
  __shared__ int last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int NG = K / G, KW = K / 8, S = gridDim.y, sp = blockIdx.y;
  const int g0 = (int)(((long long)sp * NG) / S), g1 = (int)(((long long)(sp + 1) * NG) / S);
  const int nbase = (blockIdx.x * nw + warp) * (16 * RT);
  int rows[NT];
  const uint32_t* wp[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    rows[t] = wrow(nbase + 8 * t + gid, N, act);  // rows past N read row N - 1, never stored
    wp[t] = qw + row_words<G>(rows[t], KW) + 2 * tig;
  }
  // ldmatrix.x4 row addresses: lanes 0-15 rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8
  const uint32_t abase =
      (uint32_t)__cvta_generic_to_shared(xsm) + 2u * (uint32_t)((lane & 15) * XROW + (lane >> 4) * 8);
  // the group's [min(M, 16 M16), G] activations, 16 bytes a copy: thread i copies chunk i % CPR of rows i / CPR + j *
  // (blockDim / CPR) (blockDim is a multiple of 32 >= CPR). Rows past M are not copied: their stale values reach only
  // output rows past M (row m of an MMA's result depends on row m of A alone), which are never stored.
  const int xrs = blockDim.x / CPR, xm0 = threadIdx.x / CPR, xc = threadIdx.x % CPR;
  const uint16_t* const xsrc0 = x + (size_t)xm0 * sx + xc * 8;
  const size_t xsstep = (size_t)xrs * sx;
  const uint32_t xdst0 = (uint32_t)__cvta_generic_to_shared(xsm) + 2u * (uint32_t)(xm0 * XROW + xc * 8);
  auto issue_x = [&](int slot, int grp) {
    const uint16_t* src = xsrc0 + (size_t)grp * G;
    uint32_t dst = xdst0 + 2u * (uint32_t)(slot * TILE);
    for (int m = xm0; m < min(M, 16 * M16); m += xrs, src += xsstep, dst += 2u * (uint32_t)(xrs * XROW))
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
  };
  // WR: the weights through a shared-memory ring ([DEPTH][warps][NT][P][32 lanes] 8-byte pieces after the
  // activations, filled by cp.async: no registers held per group in flight); else a register ring
  uint32_t wr[WR ? 1 : DEPTH][NT][2 * P];
  uint16_t sr[DEPTH][NT], zr[DEPTH][NT];
  const uint2* const wring = reinterpret_cast<const uint2*>(xsm4 + (size_t)DEPTH * TILE * 2 / 16);
  const uint32_t wsm0 = (uint32_t)__cvta_generic_to_shared(wring) + 8u * (uint32_t)(warp * NT * P * 32 + lane);
  auto load_w = [&](int slot, int grp) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const uint32_t* src = wp[t] + grp * group_words<G>() + 8 * p;
        if constexpr (WR) {
          const uint32_t dst = wsm0 + 8u * (uint32_t)((slot * nw * NT * P + t * P + p) * 32);
          asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
        } else {
          uint32_t v[2];
          ld_words<2>(v, src);
          wr[slot][t][2 * p] = v[0];
          wr[slot][t][2 * p + 1] = v[1];
        }
      }
      sr[slot][t] = __ldg(s + (size_t)grp * N + rows[t]);
      zr[slot][t] = __ldg(z + (size_t)grp * N + rows[t]);
    }
  };
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d)
    if (g0 + d < g1) load_w(d, g0 + d);
  pdl_launch_then_wait();
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d) {
    if (g0 + d < g1) issue_x(d, g0 + d);
    cp_async_commit();
  }
  float acc[NT][M16][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int mt = 0; mt < M16; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][mt][i] = 0.0f;

  for (int base = g0; base < g1; base += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int grp = base + d;
      if (grp < g1) {  // the same for every thread of the CTA
        cp_async_wait<DEPTH - 2>();
        __syncthreads();
        const int nxt = grp + DEPTH - 1, slot = (d + DEPTH - 1) % DEPTH;
        if (nxt < g1) {
          issue_x(slot, nxt);
          load_w(slot, nxt);
        }
        cp_async_commit();
        if constexpr (WR) {  // this group's weights from the ring (this warp's own slice: landed, see the wait)
#pragma unroll
          for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int p = 0; p < P; ++p) {
              const uint2 v = wring[((d * nw + warp) * NT * P + t * P + p) * 32 + lane];
              wr[0][t][2 * p] = v.x;
              wr[0][t][2 * p + 1] = v.y;
            }
        }
        uint32_t c[NT], sc[NT];  // base + zero (exact: integer zero) and the scale, in both halves
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const uint16_t cz = D::from_f(D::to_f(zr[d][t]) + D::BASE);
          c[t] = (uint32_t)cz | ((uint32_t)cz << 16);
          sc[t] = (uint32_t)sr[d][t] | ((uint32_t)sr[d][t] << 16);
        }
#pragma unroll
        for (int kb = 0; kb < KB; ++kb) {
          uint32_t a[M16][4];
#pragma unroll
          for (int mt = 0; mt < M16; ++mt)
            ldmatrix_x4(a[mt], abase + 2u * (uint32_t)(d * TILE + 16 * mt * XROW + 16 * kb));
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            uint32_t b[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int p = tc_pair<G>(kb, h), i = tc_nibble<G>(kb, h);
              const uint32_t sel = (i >> 1) * 0x1111 + 0x4400;  // bytes [w0.B, w0.B, w1.B, w1.B], B = i / 2
              uint32_t tt = prmt(wr[WR ? 0 : d][t][2 * p], wr[WR ? 0 : d][t][2 * p + 1], sel);
              if (i & 1) tt >>= 4;
              b[h] = D::mul2(D::sub2(nib2<D::MAGIC>(tt), c[t]), sc[t]);
            }
#pragma unroll
            for (int mt = 0; mt < M16; ++mt) D::mma(acc[t][mt], a[mt], b[0], b[1]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // fragment (t, mt, i) is output row m = 16 mt + gid + 8 (i >> 1), (virtual) column n = nbase + 8 t + 2 tig + (i & 1)
  auto frow = [&](int mt, int i) { return 16 * mt + gid + 8 * (i >> 1); };
  auto fcol = [&](int t, int i) { return nbase + 8 * t + 2 * tig + (i & 1); };
  auto store = [&](int m, int n, float y) {
    if (res != nullptr) y = D::to_f(D::from_f(y)) + D::to_f(res[(size_t)m * N + n]);  // HF: bf16(bf16(xW) + r)
    out[(size_t)m * N + n] = D::from_f(y);
  };
  // tile pair r (n8 tiles 2 r, 2 r + 1) of m-tile mt: y[t][i] for t = 0, 1
  auto emit = [&](int r, int mt, const float (&y)[2][4]) {
    if (act) {  // n8 tile 2 r: gate, 2 r + 1: up of output columns (nbase / 16 + r) * 8 + 2 tig + (i & 1)
      const int I = N >> 1;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = frow(mt, i), col = ((nbase >> 4) + r) * 8 + 2 * tig + (i & 1);
        if (m < M && col < I) out[(size_t)m * I + col] = swiglu<BF16>(y[0][i], y[1][i]);
      }
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = frow(mt, i), n = fcol(2 * r + h, i);
        if (m < M && n < N) store(m, n, y[h][i]);
      }
  };
  if (S > 1 && !split_fixup<NT * M16>(reinterpret_cast<float(&)[4 * NT * M16]>(acc), ws, sem, last)) return;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int mt = 0; mt < M16; ++mt) {
      float y[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 4; ++i) y[h][i] = acc[2 * r + h][mt][i];
      emit(r, mt, y);
    }
  if (S > 1 && threadIdx.x == 0) sem[blockIdx.x] = 0;  // ready for the next launch
}

// raise a kernel's dynamic shared-memory limit once per device (a race between host threads only repeats the same
// idempotent call); on failure clear the error, so that the next (torch) launch does not report it
template <typename F>
cudaError_t raise_smem(F* fn, std::atomic<unsigned>& raised, size_t need, size_t stat) {
  int dev = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess && need + stat > (size_t)optin) e = cudaErrorInvalidValue;
  const unsigned bit = 1u << (dev & 31);
  if (e == cudaSuccess && !(raised.load() & bit)) {
    e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)stat);
    if (e == cudaSuccess) raised.fetch_or(bit);
  }
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

template <bool BF16, int G, int MT, int RT, int DEPTH, int WS>
int launch_wide(const void* x, int sx, const void* qw, const void* s, const void* z, void* out, const void* res,
                int M, int N, int K, int act, int w, int split, void* ws, void* sem, int sem_len, int pdl,
                cudaStream_t stream) {
  const int tiles = (N + 16 * RT * w - 1) / (16 * RT * w);
  if (w < 1 || w > 8 || split < 1 || split > K / G ||
      (split > 1 && (ws == nullptr || sem == nullptr || tiles > sem_len || ((uintptr_t)ws & 15))))  // float4 partials
    return (int)cudaErrorInvalidValue;
  if (act && (res != nullptr || N % 16)) return (int)cudaErrorInvalidValue;  // SwiGLU: no residual, I % 8 == 0
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(tiles, split);
  cfg.blockDim = dim3(32 * w);
  cfg.dynamicSmemBytes =
      (WS & 4) ? (size_t)DEPTH * TcTile<G, MT>::TILE * 2 + ((WS & 1) ? (size_t)DEPTH * w * 2 * RT * (G / 64) * 256 : 0)
                 : (size_t)DEPTH * WideTile<G, MT>::TILE * 2 + ((WS & 1) ? (size_t)w * DEPTH * RT * 2 * (G / 128) * 512 : 0);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto go = [&](auto* fn) {  // one kernel: raise its shared-memory limit if needed, launch
    if (cfg.dynamicSmemBytes + 64 > 48 * 1024) {  // (with the kernel's static shared memory, <= 64 bytes)
      static std::atomic<unsigned> raised{0};  // one per launch_wide instantiation, i.e. per kernel
      const cudaError_t e = raise_smem(fn, raised, cfg.dynamicSmemBytes, 64);
      if (e != cudaSuccess) return (int)e;
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, fn, (const uint16_t*)x, sx, (const uint32_t*)qw, (const uint16_t*)s,
                                             (const uint16_t*)z, (uint16_t*)out, (const uint16_t*)res, M, N, K,
                                             (float*)ws, (int*)sem, act);
    if (e != cudaSuccess) cudaGetLastError();
    return (int)e;
  };
  if constexpr ((WS & 4) != 0) {  // the TC kernel (prescaled arithmetic only)
    static_assert((WS & 2) && MT % 2 == 0, "TC variants: WS = 6 (register ring) or 7 (shared-memory ring), MT = 4 or 8");
    if ((WS & 8) && w > 4) return (int)cudaErrorInvalidValue;  // OCC: 128-thread launch bounds
    return go(w4a16_tc_kernel<BF16, G, MT, RT, DEPTH, (WS & 1) != 0, (WS & 8) ? 3 : 0>);
  } else {  // (an else branch: the wide kernel is not instantiated for the TC variants' WS values)
    return go(w4a16_wide_kernel<BF16, G, MT, RT, DEPTH, WS>);
  }
}

// bf16 / fp16 weights, the same few-row technique without dequantization (the verify step of k + 1 <= 9 rows and
// small decode batches): out[M, N] = x[M, K] @ W[N, K]^T (+ res). Swap AB as above; a stage is 32 CH columns of K:
// lane (gid, tig) copies CH 16-byte chunks of rows gid and gid + 8 (columns 32 c + 8 tig .. + 7) into its warp's
// shared-memory ring by cp.async, and loads the same columns of its activation rows. The k-slots of MMA (c, j) map
// to columns so that those 16 bytes ARE the fragments: slots 2 tig + e <-> column 32 c + 8 tig + 4 j + e, slots
// 2 tig + 8 + e <-> column 32 c + 8 tig + 4 j + 2 + e (e = 0, 1), for the weight (A) and the activations (B) alike.
// Split-K over the CTA's KS warps and the output (+ residual) as in the INT4 kernels (finish: warp order).
template <bool BF16, int MT, int CH, int DEPTH>
__global__ void WB_RING_BOUNDS(32 * KsMax<MT, 1>::value) dense_mma_kernel(const uint16_t* __restrict__ x, int sx,
                                                                             const uint16_t* __restrict__ w,
                                                                             uint16_t* __restrict__ out,
                                                                             const uint16_t* __restrict__ res, int M,
                                                                             int N, int K) {
  using D = Dt<BF16>;
  constexpr int SC = 32 * CH;      // columns per stage
  extern __shared__ uint4 dring[];  // [warp][DEPTH][2 CH][32]; at the end, `red` (as in the async INT4 kernel)
  static_assert(MT * 8 * 16 <= DEPTH * 2 * CH * 32 * 4, "a warp's reduction slice fits in its ring");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int NS = K / SC;
  const int g0 = (int)(((long long)warp * NS) / ks), g1 = (int)(((long long)(warp + 1) * NS) / ks);
  const int nbase = blockIdx.x * 16;
  uint4* ring = dring + (size_t)warp * DEPTH * 2 * CH * 32;
  const uint16_t* wp[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) wp[h] = w + (size_t)min(nbase + gid + 8 * h, N - 1) * K + tig * 8;
  auto issue = [&](int slot, int st) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int c = 0; c < CH; ++c)
        cp_async16(&ring[((size_t)slot * 2 * CH + h * CH + c) * 32 + lane], wp[h] + (size_t)st * SC + 32 * c);
  };
  auto load_x = [&](uint4 (&v)[MT][CH], int st) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = mt * 8 + gid;
#pragma unroll
      for (int c = 0; c < CH; ++c)
        v[mt][c] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + (size_t)m * sx + (size_t)st * SC + 32 * c + tig * 8))
                         : make_uint4(0u, 0u, 0u, 0u);
    }
  };
#pragma unroll
  for (int d = 0; d < DEPTH; ++d) {
    if (g0 + d < g1) issue(d, g0 + d);
    cp_async_commit();
  }
  pdl_launch_then_wait();
  uint4 cur[MT][CH], nx[MT][CH];
  if (g0 < g1) load_x(cur, g0);
  float acc[1][MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[0][mt][i] = 0.0f;

  for (int base = g0; base < g1; base += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int st = base + d;
      if (st < g1) {
        cp_async_wait<DEPTH - 1>();  // the oldest stage (this one) has landed
        if (st + 1 < g1) load_x(nx, st + 1);
#pragma unroll
        for (int c = 0; c < CH; ++c) {
          const uint4 a0 = ring[((size_t)d * 2 * CH + c) * 32 + lane];       // row gid
          const uint4 a1 = ring[((size_t)d * 2 * CH + CH + c) * 32 + lane];  // row gid + 8
          const uint32_t fa[4] = {a0.x, a1.x, a0.y, a1.y}, fb[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            D::mma(acc[0][mt], fa, cur[mt][c].x, cur[mt][c].y);
            D::mma(acc[0][mt], fb, cur[mt][c].z, cur[mt][c].w);
          }
        }
        if (st + DEPTH < g1) issue(d, st + DEPTH);  // this slot's reads are done (consumed by the MMAs above)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < CH; ++c) cur[mt][c] = nx[mt][c];
      }
      cp_async_commit();
    }
  }
  cp_async_wait<0>();
  __syncwarp();
  finish<BF16, MT, 1>(acc, reinterpret_cast<float*>(dring), (size_t)DEPTH * 2 * CH * 32 * 4, ks, warp, gid, tig, M,
                      N, nbase, out, res);
}

template <bool BF16, int MT, int CH, int DEPTH>
int launch_dense(const void* x, int sx, const void* w, void* out, const void* res, int M, int N, int K, int ks,
                 int pdl, cudaStream_t stream) {
  if (ks < 1 || ks > KsMax<MT, 1>::value || K % (32 * CH)) return (int)cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((N + 15) / 16);
  cfg.blockDim = dim3(32 * ks);
  cfg.dynamicSmemBytes = (size_t)ks * DEPTH * 2 * CH * 32 * 16;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cfg.dynamicSmemBytes > 48 * 1024) {  // (no static shared memory: the reduction slices are in the ring)
    static std::atomic<unsigned> raised{0};
    const cudaError_t e = raise_smem(dense_mma_kernel<BF16, MT, CH, DEPTH>, raised, cfg.dynamicSmemBytes, 0);
    if (e != cudaSuccess) return (int)e;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, dense_mma_kernel<BF16, MT, CH, DEPTH>, (const uint16_t*)x, sx,
                                           (const uint16_t*)w, (uint16_t*)out, (const uint16_t*)res, M, N, K);
  if (e != cudaSuccess) cudaGetLastError();
  return (int)e;
}

template <bool BF16, int G, int MT, int RT, int DEPTH, int XS>
int launch_one(const void* x, int sx, const void* qw, const void* s, const void* z, void* out, const void* res,
               int M, int N, int K, int act, int ks, int pdl, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((N + 16 * RT - 1) / (16 * RT));
  cfg.blockDim = dim3(32 * ks);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t e = cudaSuccess;
  if (ks < 1 || ks > (XS == 2 ? KsMaxAsync<MT, RT>::value : KsMax<MT, RT>::value)) return (int)cudaErrorInvalidValue;
  if (act && (res != nullptr || N % 16)) return (int)cudaErrorInvalidValue;  // SwiGLU: no residual, I % 8 == 0
  if constexpr (XS == 2) {
    constexpr int C = RT * 2 * (G / 128);
    const size_t smem = (size_t)ks * DEPTH * C * 32 * 16;
    if (smem > 48 * 1024) {  // the dynamic shared-memory limit is a per-device function attribute (no static one)
      static std::atomic<unsigned> raised{0};
      e = raise_smem(w4a16_mma_async_kernel<BF16, G, MT, RT, DEPTH>, raised, smem, 0);
      if (e != cudaSuccess) return (int)e;
    }
    cfg.dynamicSmemBytes = smem;
    e = cudaLaunchKernelEx(&cfg, w4a16_mma_async_kernel<BF16, G, MT, RT, DEPTH>, (const uint16_t*)x, sx,
                           (const uint32_t*)qw, (const uint16_t*)s, (const uint16_t*)z, (uint16_t*)out,
                           (const uint16_t*)res, M, N, K, act);
  } else {
    e = cudaLaunchKernelEx(&cfg, w4a16_mma_kernel<BF16, G, MT, RT, DEPTH, XS == 1>, (const uint16_t*)x, sx,
                           (const uint32_t*)qw, (const uint16_t*)s, (const uint16_t*)z, (uint16_t*)out,
                           (const uint16_t*)res, M, N, K, act);
  }
  if (e != cudaSuccess) cudaGetLastError();  // a failed launch: clear it (the caller raises with the code)
  return (int)e;
}

}  // namespace

// The instantiated variants (G, MT, RT, DEPTH, XS) for bf16 and fp16; the list is read back by the loader
// (wb_w4mma_variants). XS = 0: activations read when a group is computed; 1: prefetched with the weights in
// the register ring; 2: the cp.async kernel (weights in a shared-memory ring, activations one group ahead).
#define WB_W4MMA_VARIANTS(X)                                                                                  \
  X(64, 1, 1, 2, 1) X(64, 1, 1, 4, 0) X(64, 1, 2, 2, 0) X(64, 2, 1, 2, 0) X(64, 2, 1, 2, 1) X(64, 4, 1, 2, 0) X(64, 8, 1, 2, 0) \
  X(128, 1, 1, 2, 1) X(128, 1, 1, 3, 1) X(128, 1, 1, 4, 0) X(128, 1, 2, 2, 1) X(128, 1, 2, 3, 0)           \
  X(128, 1, 2, 4, 0) X(128, 1, 4, 2, 0) X(128, 2, 1, 2, 0) X(128, 2, 1, 3, 0) X(128, 2, 2, 2, 0) X(128, 2, 1, 2, 1)           \
  X(128, 4, 1, 2, 0) X(128, 4, 2, 2, 0) X(128, 8, 1, 2, 0)                                                  \
  X(256, 1, 1, 2, 0) X(256, 1, 2, 2, 0) X(256, 2, 1, 2, 0) X(256, 4, 1, 2, 0) X(256, 8, 1, 2, 0)           \
  X(128, 1, 1, 3, 2) X(128, 1, 1, 4, 2) X(128, 1, 1, 6, 2) X(128, 1, 2, 3, 2) X(128, 2, 1, 3, 2)           \
  X(128, 1, 2, 2, 2) X(128, 1, 2, 4, 2) X(128, 1, 4, 2, 2) X(128, 1, 4, 3, 2) X(128, 2, 2, 2, 2) X(128, 2, 2, 3, 2) \
  X(128, 2, 4, 2, 2) X(128, 2, 4, 3, 2) \
  X(256, 1, 1, 3, 2)

extern "C" int wb_w4mma_launch(int bf16, int group, int mt, int rt, int depth, int xs, int ks, const void* x, int sx,
                               const void* qw, const void* s, const void* z, void* out, const void* res, int M,
                               int N, int K, int act, int pdl, void* stream) {
  cudaStream_t st = (cudaStream_t)stream;
#define WB_CASE(G_, MT_, RT_, D_, XS_)                                                                        \
  if (group == G_ && mt == MT_ && rt == RT_ && depth == D_ && xs == XS_)                                       \
    return bf16 ? launch_one<true, G_, MT_, RT_, D_, XS_>(x, sx, qw, s, z, out, res, M, N, K, act, ks, pdl, st)   \
                : launch_one<false, G_, MT_, RT_, D_, XS_>(x, sx, qw, s, z, out, res, M, N, K, act, ks, pdl, st);
  WB_W4MMA_VARIANTS(WB_CASE)
#undef WB_CASE
  return -1;  // no such variant
}

// The wide kernel's variants (G, MT, RT, DEPTH, WS): WS bit 0 the weights through a per-warp shared-memory ring
// (cp.async, G >= 128), else a register ring; bit 1 prescaled weights (w_hat rounded to x's dtype, see compute);
// bit 2 the TC kernel (activations as the A operand, w4a16_tc_kernel; WS = 6, or 7 with its weights through a
// shared-memory ring), bit 3 with it: 128-thread launch bounds for 3 CTAs an SM (W <= 4; registers permitting: (128,
// 8, 2, 3, 15) at W = 4 takes 75 KB of shared memory, two CTAs an SM, and was kept because it timed fastest on
// Llama-3-8B's gate_up at 64 rows among the TC configurations, benchmarks/results/h200_2026-12-04c/occ_layers.json);
// the loader lists them with XS = 3 + WS (wb_w4mma_wide_variants).
#define WB_W4WIDE_VARIANTS(X)                                                                                 \
  X(64, 2, 1, 2, 0) X(64, 4, 1, 2, 0) X(64, 8, 1, 2, 0)                                                       \
  X(128, 2, 1, 4, 1) X(128, 4, 1, 4, 1) X(128, 8, 1, 2, 0) X(128, 8, 1, 3, 1)                                 \
  X(256, 8, 1, 3, 1)                                                                                          \
  X(64, 8, 1, 2, 2) X(128, 2, 1, 4, 3) X(128, 4, 1, 4, 3) X(128, 8, 1, 2, 2) X(128, 8, 1, 3, 3)               \
  X(128, 8, 1, 4, 3) X(128, 8, 2, 2, 2) X(128, 8, 2, 3, 3)                                                    \
  X(64, 8, 1, 3, 6) X(128, 4, 1, 3, 6) X(128, 4, 2, 3, 6) X(128, 4, 1, 4, 6) X(128, 8, 1, 3, 6)               \
  X(128, 8, 1, 4, 6) X(128, 8, 2, 3, 6) X(128, 8, 2, 2, 6) X(256, 8, 1, 3, 6)                                 \
  X(128, 4, 1, 4, 7) X(128, 4, 2, 4, 7) X(128, 8, 1, 4, 7) X(128, 8, 2, 4, 7) X(128, 8, 2, 3, 7) X(128, 8, 1, 6, 7)  \
  X(128, 8, 2, 2, 14) X(128, 8, 2, 3, 15) X(128, 4, 2, 3, 14) X(128, 4, 2, 4, 15)

extern "C" int wb_w4mma_wide_launch(int bf16, int group, int mt, int rt, int depth, int wsm, int w, int split,
                                    const void* x,
                                    int sx, const void* qw, const void* s, const void* z, void* out, const void* res,
                                    int M, int N, int K, int act, void* ws, void* sem, int sem_len, int pdl,
                                    void* stream) {
  cudaStream_t st = (cudaStream_t)stream;
#define WB_WCASE(G_, MT_, RT_, D_, WS_)                                                                       \
  if (group == G_ && mt == MT_ && rt == RT_ && depth == D_ && wsm == WS_)                                      \
    return bf16 ? launch_wide<true, G_, MT_, RT_, D_, WS_>(x, sx, qw, s, z, out, res, M, N, K, act, w, split, ws,  \
                                                           sem, sem_len, pdl, st)                              \
                : launch_wide<false, G_, MT_, RT_, D_, WS_>(x, sx, qw, s, z, out, res, M, N, K, act, w, split, ws, \
                                                            sem, sem_len, pdl, st);
  WB_W4WIDE_VARIANTS(WB_WCASE)
#undef WB_WCASE
  return -1;
}

extern "C" const char* wb_w4mma_wide_variants() {  // "G,MT,RT,DEPTH,WS;..."
#define WB_WSTR(G_, MT_, RT_, D_, WS_) #G_ "," #MT_ "," #RT_ "," #D_ "," #WS_ ";"
  return WB_W4WIDE_VARIANTS(WB_WSTR);
#undef WB_WSTR
}

// The dense kernel's variants (MT, CH, DEPTH) (wb_dense_mma_variants).
#define WB_DENSE_VARIANTS(X)                                                                                  \
  X(1, 2, 4) X(1, 2, 8) X(1, 4, 3) X(1, 4, 4) X(2, 2, 4) X(2, 2, 8) X(2, 4, 3) X(2, 4, 4) X(4, 2, 4) X(4, 4, 3)     \
  X(8, 2, 4)

extern "C" int wb_dense_mma_launch(int bf16, int mt, int ch, int depth, int ks, const void* x, int sx, const void* w,
                                   void* out, const void* res, int M, int N, int K, int pdl, void* stream) {
  cudaStream_t st = (cudaStream_t)stream;
#define WB_DCASE(MT_, CH_, D_)                                                                                \
  if (mt == MT_ && ch == CH_ && depth == D_)                                                                   \
    return bf16 ? launch_dense<true, MT_, CH_, D_>(x, sx, w, out, res, M, N, K, ks, pdl, st)                  \
                : launch_dense<false, MT_, CH_, D_>(x, sx, w, out, res, M, N, K, ks, pdl, st);
  WB_DENSE_VARIANTS(WB_DCASE)
#undef WB_DCASE
  return -1;
}

extern "C" const char* wb_dense_mma_variants() {  // "MT,CH,DEPTH;..."
#define WB_DSTR(MT_, CH_, D_) #MT_ "," #CH_ "," #D_ ";"
  return WB_DENSE_VARIANTS(WB_DSTR);
#undef WB_DSTR
}

// the launch functions' argument list, checked by the loader (2: the act argument of the SwiGLU epilogue; 3:
// wb_w4mma_ks_max takes the XS of the variant)
extern "C" int wb_w4mma_abi() { return 3; }

extern "C" int wb_w4mma_ks_max(int mt, int rt, int xs) {  // KsMax<MT, RT> (KsMaxAsync for XS = 2) for the loader
  const int a = (mt * rt >= 4) ? 8 : 16, b = 64 / (mt * rt);
  if (xs == 2 && mt == 2 && rt == 2) return 16;
  return a < b ? a : b;
}

// "G,MT,RT,DEPTH,XS;..." : the variants this library holds
extern "C" const char* wb_w4mma_variants() {
#define WB_STR(G_, MT_, RT_, D_, XS_) #G_ "," #MT_ "," #RT_ "," #D_ "," #XS_ ";"
  return WB_W4MMA_VARIANTS(WB_STR);
#undef WB_STR
}
