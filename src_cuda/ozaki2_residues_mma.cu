// Scheme II residues: one pass over a float64 operand writes its int8 residues for every
// modulus, in the layout the INT8 GEMM reads.
//
// The operand, the planes and the rounding: ozaki2_residues.cuh. This kernel does the same on
// the INT8 tensor cores and is the one the backend runs (products.py's RESIDUE_KERNEL says why).
//
// Digits. The kernel takes Y = sign(x) (|X| mod 2**96) (ozaki2_residues.cuh). With
// |X| mod 2**96 = hi 2**52 + lo, its 14 digits d_k: the 7 bytes of lo, the 6 of hi, complemented
// when x < 0, and the sign bit: Y = sum_{k<13} d_k v_k - d_13 C, v_k the bytes' place values and
// C = sum_{k<13} 255 v_k (complement: -A = sum (255 - a_k) v_k - C). With the weights
// w_k = v_k mod m, w_13 = -C mod m as symmetric int8 (|w| <= 127), s = sum_k d_k w_k = Y (mod m),
// |s| <= 14 * 255 * 127 < 2**19: an int8 x uint8 dot product of length 16 per entry and modulus,
// so one tensor-core MMA (mma.sync m16n8k16 s8 x u8 -> s32) gives 16 moduli x 8 entries.
//
// Reduction. The accumulator starts at 0x4B400000, the bits of M = 1.5 * 2**23, so the sum D is
// the float M + s exactly (|s| < 2**22). f = D - M = s exactly, q = fma(f, rn(1/m), M) =
// M + rint(s rn(1/m)) (the product is exact inside the FMA, ulp 1 at 2**23, M even), and
// rint(s rn(1/m)) = rint(s/m): |s rn(1/m) - s/m| <= |s| 2**-24 / m < 1/(2m), while s/m lies at
// least 1/(2m) from a half-integer (m odd). So r = s - m rint(s/m) in [-(m-1)/2, (m-1)/2], whose
// byte is the low byte of D - m bits(q) (bits(M) = 0 mod 256). m = 256 has rn(1/m) = 0 here and
// weights (1, 0, ..., 0, 1 for the sign): the byte of s, Y mod 256. The 3M plane reduces
// s_re + s_im the same way (|s| < 2**20). tests/kernels/test_gpu_kernel_model_products.py checks
// the reduction for every s in range and every modulus.
//
// Gaussian moduli (GAUSS, complex): the planes u = re + iota im and v = re - iota im. The im
// sum reduces to its residue r (odd m: |r| <= 120, the low byte sign-extended), and
// s_re +- iota r (|iota r| < 2**15, so |s| < 2**20) reduce as the 3M plane does.
//
// Work. Each block walks every gridDim.x-th tile of 16 rows x 64 columns (as many blocks as fit
// on the device at once), loading the next tile's doubles into registers while it works on the
// current one. Each thread turns 4 entries into their 16 digit bytes (one 16-byte slot in shared
// memory, the slots of a row in MMA order); each warp then does 2 rows: per row 8 MMAs per 16
// moduli, after which lane (g, q) holds the residues of entries 16q .. 16q + 15 for moduli g and
// g + 8, one 16-byte store each. Loads walk whichever axis is contiguous in memory (rows or
// columns), so both reads and writes are coalesced.
//
// Registers (nvcc 13.0, sm_90/sm_90a, -Xptxas -v and the SASS): real 64 up to 8 moduli
// (__launch_bounds__(256, 4); 12 bytes spilled at 7), 72-76 for 9-16 (256, 3: no spill, and
// faster than 4 blocks with spills: docs/benchmarks/h100/NOTES.md) or 80 (17-20, 16 bytes
// spilled), complex 91-128. With 8 moduli (real and complex) ptxas kept no register for this
// lane's A fragment (weights of modulus g, word q) but reloaded it from kModulusTable before each
// MMA, a constant-memory load with 32 different addresses per warp that the constant cache serves
// one address at a time (2.6x slower than ozaki2_residues.cu on the H200); a_lo passes through a
// shuffle there, whose result ptxas cannot rematerialize, and the loop keeps it in a register.
#include "ozaki2_residues.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 16;  // tile rows
constexpr int kCols = 64;  // tile columns: 8 MMAs of 8 entries per row
constexpr int kPitch = kCols + 1;  // 16-byte slots per row (+1: conflict-free column-wise stores)
constexpr unsigned kMagicBits = 0x4B400000u;  // 1.5 * 2**23
constexpr float kMagic = 12582912.0f;

// Per modulus: the 16 digit weights as int8, 4 per word (a row of the MMA's A operand), rn(1/m)
// (0 for 256), m and (Gaussian moduli) iota.
struct ModulusConsts {
  unsigned w[4];
  float inv;
  int m;
  int iota;
};
struct ModulusTable {
  ModulusConsts c[kMaxModuli];
};

constexpr int symmetric_rep(unsigned u, unsigned m) {
  return u > (m - 1) / 2 ? static_cast<int>(u) - static_cast<int>(m) : static_cast<int>(u);
}

constexpr ModulusTable make_modulus_table(bool gauss) {
  ModulusTable t{};
  for (int l = 0; l < kMaxModuli; ++l) {
    const unsigned m = static_cast<unsigned>(gauss ? kGaussianModuli[l] : kModuli[l]);
    unsigned place[13] = {};  // the digit bytes' place values mod m: lo bytes, hi bytes
    for (int k = 0; k < 7; ++k) place[k] = pow2mod(8 * k, m);
    for (int k = 0; k < 6; ++k) place[7 + k] = pow2mod(52 + 8 * k, m);
    unsigned c = 0;  // C = sum of 255 * place: the complemented digits' excess
    int wt[16] = {};
    for (int k = 0; k < 13; ++k) {
      wt[k] = symmetric_rep(place[k], m);
      c = (c + 255u * place[k]) % m;
    }
    wt[13] = symmetric_rep((m - c) % m, m);
    for (int i = 0; i < 4; ++i) {
      unsigned v = 0;
      for (int b = 0; b < 4; ++b) v |= (static_cast<unsigned>(wt[4 * i + b]) & 0xffu) << (8 * b);
      t.c[l].w[i] = v;
    }
    t.c[l].inv = m == 256 ? 0.0f : 1.0f / static_cast<float>(m);
    t.c[l].m = static_cast<int>(m);
    t.c[l].iota = gauss ? kGaussianIota[l] : 0;
  }
  return t;
}

__constant__ ModulusTable kModulusTable = make_modulus_table(false);
__constant__ ModulusTable kGaussianTable = make_modulus_table(true);

// 2**e as a double, -1022 <= e <= 1023.
__device__ __forceinline__ double pow2(int e) {
  return __longlong_as_double(static_cast<long long>(e + 1023) << 52);
}

// The 16 digit bytes of entry x of a row with shift `shift` (see the top): |X| mod 2**96 =
// hi 2**52 + lo (lo <= 2**52, hi < 2**44) in bytes 0-6 (lo) and 7-12 (hi), complemented where
// x < 0, and the sign in byte 13. Fast path, in float64: y = |x| 2**shift is exact (two exact
// scalings; if y underflows, X = 0 either way), and below 2**96 hi = floor(y / 2**52) from the
// binade of 2**104 (ulp 2**52, toward zero), lo = y - hi 2**52 (exact) rounded to an integer in
// the binade of 2**52 (lo = 2**52 after rounding up shows as the next binade's bits: still
// bits - bits(2**52)); hi 2**52 is even, so rounding lo is rounding y. Other entries (|X| >=
// 2**96, inf, NaN, |shift| > 2044) take the integer path.
template <bool NEAR>
__device__ __forceinline__ uint4 entry_digits(double x, int shift) {
  const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(x));
  const unsigned neg = static_cast<unsigned>(bits >> 63);
  const int a = shift >> 1;
  const double y = __dmul_rn(__dmul_rn(fabs(x), pow2(a)), pow2(shift - a));
  unsigned long long lo, hi;
  if (static_cast<unsigned>(shift + 2044) <= 4090u && y < 0x1p96) {
    const double z1 = __dadd_rz(y, 0x1p104);
    const double f = __dadd_rn(y, __dadd_rn(0x1p104, -z1));
    const double z0 = NEAR ? __dadd_rn(f, 0x1p52) : __dadd_rz(f, 0x1p52);
    lo = static_cast<unsigned long long>(__double_as_longlong(z0)) - 0x4330000000000000ull;
    hi = static_cast<unsigned long long>(__double_as_longlong(z1)) - 0x4670000000000000ull;
  } else {
    const Magnitude a = magnitude_bits<NEAR>(x, shift);  // |X| mod 2**96 as hi 2**52 + lo
    const unsigned long long l = a.lo;
    const unsigned h = static_cast<unsigned>(a.hi);
    lo = l & ((1ull << 52) - 1);
    hi = (l >> 52) | (static_cast<unsigned long long>(h) << 12);
  }
  const unsigned flip = 0u - neg;
  const unsigned hlo = static_cast<unsigned>(hi), hhi = static_cast<unsigned>(hi >> 32);
  uint4 r;
  r.x = static_cast<unsigned>(lo) ^ flip;
  r.y = __byte_perm(static_cast<unsigned>(lo >> 32), hlo, 0x4210) ^ flip;  // lo 4-6, hi 0
  r.z = __funnelshift_r(hlo, hhi, 8) ^ flip;                                 // hi 1-4
  r.w = __byte_perm(hhi, neg, 0x3241) ^ (flip & 0xffu);                      // hi 5, sign
  return r;
}

// D = A B + c (every entry) for one warp: A 16 x 16 int8 (row-major: lane (g, q) holds bytes
// 4q..4q+3 of rows g (a0) and g + 8 (a1)), B 16 x 8 uint8 (lane (g, q) holds bytes 4q..4q+3 of
// column g), D 16 x 8 int32 (lane (g, q): d0, d1 = row g, columns 2q, 2q + 1; d2, d3 = row g + 8).
__device__ __forceinline__ void mma_s8u8(int (&d)[4], unsigned a0, unsigned a1, unsigned b,
                                         int c) {
#if defined(__CUDA_ARCH__)
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(c));
#elif defined(EMU_CUDA_HOST)
  emu_mma_m16n8k16_s8u8(d, a0, a1, b, c);  // tests/kernels/cuda_host_shim.h
#endif
}

// The residue byte (low byte) of the MMA sum D = bits(M + s), f = s as a float (see the top).
__device__ __forceinline__ unsigned reduce(unsigned d, float f, int m, float inv) {
  const float q = fmaf(f, inv, kMagic);
  return d - static_cast<unsigned>(m) * __float_as_uint(q);
}

// Columns of a 64-column unit in MMA order: slot 8j + n is column n of MMA j, entry
// 16 (n / 2) + 2j + n % 2, so that lane q ends up with entries 16q .. 16q + 15.
__device__ __forceinline__ int slot_column(int s) {
  const int j = s >> 3, n = s & 7;
  return 16 * (n >> 1) + 2 * j + (n & 1);
}
__device__ __forceinline__ int column_slot(int c) {
  return 8 * ((c & 15) >> 1) + 2 * (c >> 4) + (c & 1);
}

// A tile: batch b, rows 16 rt .. 16 rt + 15, columns 64 cu .. 64 cu + 63.
struct TilePos {
  unsigned cu, rt, b;
};

// This thread's 4 entries of every tile, loaded along the axis that is contiguous in memory:
// entry i (h = i / 2, e = i % 2) at row row0 + h drow, column col0 + h dca + e dcb, slot
// slot0 + h dsa + e dsb, element offset off0 + h da + e db from the tile's first entry.
// Rows contiguous: 16 rows of 2 columns per warp and load; else 32 columns of one row.
struct Entries {
  int row0, col0, slot0, drow, dca, dcb, dsa, dsb;
  long long off0, da, db;
};

__device__ __forceinline__ Entries entry_map(int rows_contiguous, long long sr, long long sc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Entries m;
  if (rows_contiguous) {
    m.row0 = lane & 15;
    m.col0 = 8 * warp + (lane >> 4);
    m.slot0 = column_slot(m.col0);
    m.drow = 0, m.dca = 4, m.dcb = 2, m.dsa = 16, m.dsb = 8;  // (no wrap within 16 columns)
  } else {
    m.row0 = 2 * warp;
    m.col0 = slot_column(lane);
    m.slot0 = lane;
    m.drow = 1, m.dca = 0, m.dcb = 8, m.dsa = 0, m.dsb = 32;
  }
  m.off0 = m.row0 * sr + m.col0 * sc;
  m.da = m.drow * sr + m.dca * sc;
  m.db = m.dcb * sc;
  return m;
}

// The tile's entries of this thread (zeros outside R x C) and the shifts of their two rows.
template <bool CPLX, typename In>
__device__ __forceinline__ void load_entries(const In* __restrict__ re,
                                             const In* __restrict__ im, long long sb,
                                             long long sr, long long sc, int R, int C,
                                             const Entries& m, const int* __restrict__ shift,
                                             long long shift_sb, TilePos at, double (&xr)[4],
                                             double (&xi)[4], int (&xs)[2]) {
  const int r0 = static_cast<int>(at.rt) * kRows + m.row0;
  const int c0 = static_cast<int>(at.cu) * kCols + m.col0;
  const long long o = at.b * sb + static_cast<long long>(static_cast<int>(at.rt) * kRows) * sr +
                      static_cast<long long>(static_cast<int>(at.cu) * kCols) * sc + m.off0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + h * m.drow;
    xs[h] = r < R ? shift[at.b * shift_sb + r] : 0;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * h + e;
      const long long oi = o + h * m.da + e * m.db;
      const bool in = r < R && c0 + h * m.dca + e * m.dcb < C;
      xr[i] = in ? static_cast<double>(re[oi]) : 0.0;  // a float32 operand: the same value
      if constexpr (CPLX) xi[i] = in ? static_cast<double>(im[oi]) : 0.0;
    }
  }
}

// Two residue bytes (entries 2j, 2j + 1 of a lane) into a 16-byte output: word j / 2, bytes
// 2 (j % 2), 2 (j % 2) + 1.
__device__ __forceinline__ void put_pair(uint4& out, int j, unsigned r0, unsigned r1) {
  const unsigned pair = __byte_perm(r0, r1, 0x0040);
  unsigned* w = j < 2 ? &out.x : j < 4 ? &out.y : j < 6 ? &out.z : &out.w;
  *w = (j & 1) ? __byte_perm(*w, pair, 0x5410) : pair;
}

// One row of a tile, moduli l0 - g .. l0 - g + 15 (this lane: l0 and l0 + 8, the latter only
// where HI): 8 MMAs (entries in slot order), their residues, one 16-byte store per plane and
// modulus of this lane (entries 16q .. 16q + 15).
template <int NMOD, bool CPLX, bool HI, bool GAUSS>
__device__ __forceinline__ void row_pass(const uint4* re_slots, const uint4* im_slots, int g, int q,
                                         int l0, unsigned a_lo, unsigned a_hi, int m_lo, int m_hi,
                                         float inv_lo, float inv_hi, int i_lo, int i_hi,
                                         bool store, unsigned char* out, long long plane,
                                         long long at) {
  constexpr int NP = CPLX ? 2 : 1, kOut = GAUSS ? 2 : CPLX ? 3 : 1;
  constexpr bool hi = HI;
  uint4 olo[kOut], ohi[kOut];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    int d[NP][4];
#pragma unroll
    for (int p = 0; p < NP; ++p) {  // B fragment: word q of slot 8j + g
      const uint4* s = (p == 0 ? re_slots : im_slots) + 8 * j + g;
      mma_s8u8(d[p], a_lo, a_hi, reinterpret_cast<const unsigned*>(s)[q],
               static_cast<int>(kMagicBits));
    }
    unsigned u[kOut][4];  // residue bytes: lo columns 2q, 2q + 1, hi the same
#pragma unroll
    for (int k = 0; k < (hi ? 4 : 2); ++k) {
      const int m = k < 2 ? m_lo : m_hi;
      const float inv = k < 2 ? inv_lo : inv_hi;
      float f[NP];
#pragma unroll
      for (int p = 0; p < NP; ++p) f[p] = __uint_as_float(static_cast<unsigned>(d[p][k])) - kMagic;
      if constexpr (GAUSS) {
        const int iota = k < 2 ? i_lo : i_hi;
        const int r = static_cast<signed char>(reduce(static_cast<unsigned>(d[1][k]), f[1], m, inv));
        const int t = iota * r;
        u[0][k] = reduce(static_cast<unsigned>(d[0][k] + t), f[0] + static_cast<float>(t), m, inv);
        u[1][k] = reduce(static_cast<unsigned>(d[0][k] - t), f[0] - static_cast<float>(t), m, inv);
      } else {
#pragma unroll
        for (int p = 0; p < NP; ++p) u[p][k] = reduce(static_cast<unsigned>(d[p][k]), f[p], m, inv);
        if constexpr (CPLX)
          u[2][k] = reduce(static_cast<unsigned>(d[0][k]) + static_cast<unsigned>(d[1][k]),
                           f[0] + f[1], m, inv);
      }
    }
#pragma unroll
    for (int p = 0; p < kOut; ++p) {
      put_pair(olo[p], j, u[p][0], u[p][1]);
      if constexpr (hi) put_pair(ohi[p], j, u[p][2], u[p][3]);
    }
  }
  if (store) {
    const int l = l0;
#pragma unroll
    for (int p = 0; p < kOut; ++p) {
      if (l < NMOD) *reinterpret_cast<uint4*>(out + (p * NMOD + l) * plane + at) = olo[p];
      if constexpr (hi)
        if (l + 8 < NMOD) *reinterpret_cast<uint4*>(out + (p * NMOD + l + 8) * plane + at) = ohi[p];
    }
  }
}

}  // namespace

template <int NMOD, bool CPLX, bool NEAR, typename In = double, bool GAUSS = false>
__global__ void __launch_bounds__(kThreads, CPLX ? 2 : NMOD > 8 ? 3 : 4)
    ozaki2_residues_mma(const In* __restrict__ re, const In* __restrict__ im,
                        long long sb, long long sr, long long sc, int B, int R, int C, int Rpad,
                        int Cp, int rows_contiguous, const int* __restrict__ shift,
                        long long shift_sb, unsigned* __restrict__ planes) {
  constexpr int NP = CPLX ? 2 : 1;       // digit sets per entry (re, im)
  constexpr int NT = (NMOD + 15) / 16;   // MMA row tiles of 16 moduli
  __shared__ uint4 slots[NP][kRows][kPitch];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;

  // This lane's accumulator rows of the first 16 moduli: g (lo) and g + 8 (hi).
  // (and 16 + g of the second tile where NMOD > 16; moduli >= NMOD get zeros, not stored)
  const int l8 = g + 8, l1 = 16 + g;
  // With 8 moduli ptxas rematerialized a_lo from kModulusTable before each MMA (32 addresses
  // per warp, served one at a time by the constant cache; see the header). A shuffle's result
  // cannot be rematerialized, so it stays in a register.
  constexpr bool kGauss = GAUSS && CPLX;
  const ModulusTable& tab = kGauss ? kGaussianTable : kModulusTable;
  const unsigned a_lo0 = g < NMOD ? tab.c[g].w[q] : 0u;
  const unsigned a_lo = NMOD <= 8 ? __shfl_sync(0xffffffffu, a_lo0, lane) : a_lo0;
  const unsigned a_hi = l8 < NMOD ? tab.c[l8].w[q] : 0u;
  const unsigned a_t1 = l1 < NMOD ? tab.c[l1].w[q] : 0u;
  const float inv_lo = g < NMOD ? tab.c[g].inv : 0.0f;
  const float inv_hi = l8 < NMOD ? tab.c[l8].inv : 0.0f;
  const float inv_t1 = l1 < NMOD ? tab.c[l1].inv : 0.0f;
  const int m_lo = g < NMOD ? tab.c[g].m : 0;
  const int m_hi = l8 < NMOD ? tab.c[l8].m : 0;
  const int m_t1 = l1 < NMOD ? tab.c[l1].m : 0;
  const int i_lo = kGauss && g < NMOD ? tab.c[g].iota : 0;
  const int i_hi = kGauss && l8 < NMOD ? tab.c[l8].iota : 0;
  const int i_t1 = kGauss && l1 < NMOD ? tab.c[l1].iota : 0;

  const long long plane = static_cast<long long>(B) * Rpad * Cp;  // bytes per plane
  unsigned char* const out = reinterpret_cast<unsigned char*>(planes);
  // Tiles in order (batch, row tile, column unit), the block's every gridDim.x-th: the position
  // advances by (db, drt, dcu) with carries (no division per tile).
  const unsigned units = (static_cast<unsigned>(Cp) + kCols - 1) / kCols;
  const unsigned row_tiles = (static_cast<unsigned>(Rpad) + kRows - 1) / kRows;
  const unsigned dcu = gridDim.x % units, drt = gridDim.x / units % row_tiles;
  const unsigned db = gridDim.x / units / row_tiles;
  TilePos cur{blockIdx.x % units, blockIdx.x / units % row_tiles, blockIdx.x / units / row_tiles};
  // The next tile's entries are loaded while this one is reduced, except for complex operands
  // with more than 16 moduli, where those registers would spill.
  constexpr bool kPrefetch = !(CPLX && NT > 1);
  const Entries em = entry_map(rows_contiguous, sr, sc);
  const int sdh = em.drow * kPitch + em.dsa;  // slots from entry i to i + 2
  double xr[4], xi[4];
  int xs[2];  // the shifts of entries 0, 1 and 2, 3
  if (kPrefetch && cur.b < static_cast<unsigned>(B))
    load_entries<CPLX, In>(re, im, sb, sr, sc, R, C, em, shift, shift_sb, cur, xr, xi, xs);
  while (cur.b < static_cast<unsigned>(B)) {  // block-uniform
    if constexpr (!kPrefetch)
      load_entries<CPLX, In>(re, im, sb, sr, sc, R, C, em, shift, shift_sb, cur, xr, xi, xs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int s = (i >> 1) * sdh + (i & 1) * em.dsb;
      (&slots[0][em.row0][em.slot0])[s] = entry_digits<NEAR>(xr[i], xs[i >> 1]);
      if constexpr (CPLX)
        (&slots[NP - 1][em.row0][em.slot0])[s] = entry_digits<NEAR>(xi[i], xs[i >> 1]);
    }
    __syncthreads();
    TilePos next = cur;
    next.cu += dcu;
    next.rt += drt;
    next.b += db;
    if (next.cu >= units) {
      next.cu -= units;
      ++next.rt;
    }
    if (next.rt >= row_tiles) {
      next.rt -= row_tiles;
      ++next.b;
    }
    if (kPrefetch && next.b < static_cast<unsigned>(B))
      load_entries<CPLX, In>(re, im, sb, sr, sc, R, C, em, shift, shift_sb, next, xr, xi, xs);
    const int r0 = static_cast<int>(cur.rt) * kRows, c0 = static_cast<int>(cur.cu) * kCols;
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      const int row = 2 * warp + h, r = r0 + row, c = c0 + 16 * q;
      const bool store = r < Rpad && c < Cp;
      const long long at = (static_cast<long long>(cur.b) * Rpad + r) * Cp + c;
      if constexpr (CPLX && NT > 1) {
        // Complex, more than 16 moduli: one pass body for both tiles, run twice (two inlined
        // passes would not fit the registers); the second's rows g + 8 are computed, not stored.
#pragma unroll 1
        for (int T = 0; T < NT; ++T)
          row_pass<NMOD, CPLX, true, kGauss>(slots[0][row], slots[NP - 1][row], g, q, 16 * T + g,
                                             T ? a_t1 : a_lo, T ? 0u : a_hi, T ? m_t1 : m_lo,
                                             T ? 0 : m_hi, T ? inv_t1 : inv_lo,
                                             T ? 0.0f : inv_hi, T ? i_t1 : i_lo, T ? 0 : i_hi,
                                             store, out, plane, at);
      } else {
        row_pass<NMOD, CPLX, (8 < NMOD), kGauss>(slots[0][row], slots[NP - 1][row], g, q, g,
                                                 a_lo, a_hi, m_lo, m_hi, inv_lo, inv_hi, i_lo,
                                                 i_hi, store, out, plane, at);
        if constexpr (NT > 1)  // moduli 16 .. NMOD - 1 in rows g < NMOD - 16, no rows g + 8
          row_pass<NMOD, CPLX, false, kGauss>(slots[0][row], slots[NP - 1][row], g, q, 16 + g,
                                              a_t1, 0u, m_t1, 0, inv_t1, 0.0f, i_t1, 0, store,
                                              out, plane, at);
      }
    }
    __syncthreads();  // the slots are read before the next tile's are written
    cur = next;
  }
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues_mma, 15, false, true);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues_mma, 20, true, true);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues_mma, 16, true, false);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues_mma, 20, false, false);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues_mma, 8, false, true);
OZAKI2_RESIDUES_GAUSS_INSTANCE(ozaki2_residues_mma, 16, true);
OZAKI2_RESIDUES_GAUSS_INSTANCE(ozaki2_residues_mma, 20, false);
OZAKI2_RESIDUES_GAUSS_INSTANCE(ozaki2_residues_mma, 8, true);
#endif
