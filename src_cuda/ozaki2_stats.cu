// Scheme II statistics: the accurate-mode prescale and the certificate that picks the number of
// moduli (emulinalg/backends/cupy/: statistics.ozaki2_prescale, certificate.ozaki2_certificate),
// same values and
// decisions as emulinalg.algorithm.scaling.ozaki2_prescale and
// emulinalg.algorithm.certificate.ozaki2_moduli_needed.
//
// Operands are logical (B, R, C) float64 arrays with element strides (sb, sr, sc), as in
// ozaki2_residues.cu: rows are the lines that carry a shift (rows of A, columns of B), C is the
// contraction axis k. Blocks of 256 threads move 32 x 32 tiles through shared memory (reads
// coalesced along whichever axis is contiguous); every float sum has a fixed order, given at
// each kernel (the results read by the host do not depend on the grid or on timing); integer
// sums and maxima go through atomics (exact in any order).
//
//   line_max_exponent  per line floor(log2 max(|re|, |im|)) (atomicMax; INT_MIN for a zero line)
//   bound_operand      s = 5 - e - cplx per line, and int8 floor(RN(|re| 2**(s+1))) (+ the same
//                      of |im|), <= 127, in the INT8 GEMM's layout (B, Rpad, Cp), zero-padded;
//                      per line the sum of those entries and the count of nonzero parts
//                      (atomicAdd: exact integers), and per 128 columns the sequential sums
//                      of x = |re| 2**-e + |im| 2**-e and of x**2 (the l1 and l2 norms'
//                      partials); one warp per block, streaming its tiles through shared
//                      memory by cp.async, a line per lane
//   bound_max          per line of the bound GEMM F = Ā B̄ the max over the other axis of
//                      U = bound_upper(F, line terms) (atomicMax; scaling.bound_upper)
//   cert_operand       bfloat16 bits of max(|re|, |im|) 2**-e truncated toward zero, line-major
//                      (B, Rpad, Cp) or k-major (B, Cp, Rpad), as bf16_lower.cu; and per chunk
//                      of columns the sequential sum of |re| 2**-e + |im| 2**-e (the l1 norm)
//   cert_line_terms    per line: the l1 upper bound sum * (1 + (k+2) 2**-52) or the l2 one
//                      sqrt(sum of squares * (1 + (k+2) 2**-52)) (1 + 2**-52) (the certificate's
//                      _line_norm), alpha = 2**(cplx-5) sqrt(e) from the prescale's line bound
//   cert_entries       per output entry: the lower bound lam of |A||B| from the bound GEMM F
//                      (F 2**-12, 2**-11 complex) or, on the second pass, the larger of that
//                      and the bf16 GEMM's FP32 sums' bound; the smallest count of moduli the
//                      certificate accepts (float64, in the certificate's operation order, no FMA),
//                      and a histogram of those counts. Launched again with the threshold 1
//                      and the exact line factors in place of alpha, beta, it is the exact
//                      step's test (certificate.exact_passes), its histogram counting failures
//   cert_exact_factors certificate.exact_line_factors of every line for the count the histograms
//                      ask for (one count below the largest, or two after a successful exact
//                      step), and whether the exact-step pass that uses them runs
//   collect_suspects   the flat indices of the suspects: the entries not beyond that fail the
//                      exact test one count below the certificate's count
//   refine_suspects    the suspect refinement (refinement.refine_moduli): the suspects' float64
//                      sums of normalized magnitude products (and of their squares: the
//                      native form), one warp per entry, and the exact test one count lower,
//                      failures counted
//
// The certificate's passes after the first (cert_entries) decide on the device, from the
// histograms in one zeroed buffer of words (cert_plan), whether they run: the host reads the
// buffer back once, after all of them.
//
// x * 2**p is computed as a multiplication by an exact power of two: one correctly rounded
// operation, the same as ldexp (numpy's and CUDA's), also for subnormal results.
//
// kBoundMax (scaling.BOUND_MAX) is in the generated constants:
#include "exact_scale.cuh"
#include "ozaki2_tables.h"

namespace {

constexpr int kTile = 32;
constexpr int kThreads = 256;
constexpr int kIntMin = -2147483647 - 1;

template <bool CPLX>
struct Tile {
  double re[kTile][kTile + 1];  // +1: conflict-free column access
  double im[CPLX ? kTile : 1][kTile + 1];
};

// One thread's 4 entries of a 32 x 32 tile, held in registers; In (float or double): the
// operand's type (float32 entries widen exactly on the store).
template <typename In, bool CPLX>
struct TileFetch {
  static constexpr int kN = kTile * kTile / kThreads, kZStep = kThreads / kTile;
  In re[kN], im[CPLX ? kN : 1];

  // Tile rows r0.., columns c0.. at offset base (zeros outside R x C), as ozaki2_residues.cu
  // loads. pair (CPLX): the parts interleaved, as a complex array's (pim = pre + 1, every
  // entry at a multiple of 2 sizeof(In) bytes): both in one load.
  __device__ __forceinline__ void load(const In* __restrict__ pre,
                                       const In* __restrict__ pim, long long base,
                                       long long sr, long long sc, int r0, int c0, int R, int C,
                                       int rows_contiguous, int pair = 0) {
    const int a = threadIdx.x & (kTile - 1), z = threadIdx.x >> 5;
    const int r = r0 + (rows_contiguous ? a : z), c = c0 + (rows_contiguous ? z : a);
    // entry i lies 8 i further along the columns (rows_contiguous) or the rows
    const long long o = base + r * sr + c * sc, step = kZStep * (rows_contiguous ? sc : sr);
    const int left = r < R && c < C ? (rows_contiguous ? C - c : R - r) : 0;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      re[i] = In(0);
      if constexpr (CPLX) im[i] = In(0);
      if (kZStep * i < left) {
        if constexpr (CPLX) {
          if (pair) {
            load_pair(pre + o + i * step, re[i], im[i]);
            continue;
          }
          im[i] = pim[o + i * step];
        }
        re[i] = pre[o + i * step];
      }
    }
  }

  __device__ __forceinline__ void store(Tile<CPLX>& s, int rows_contiguous) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int a = threadIdx.x & (kTile - 1), z = (threadIdx.x >> 5) + kZStep * i;
      const int rr = rows_contiguous ? a : z, cc = rows_contiguous ? z : a;
      s.re[rr][cc] = static_cast<double>(re[i]);
      if constexpr (CPLX) s.im[rr][cc] = static_cast<double>(im[i]);
    }
  }
};

// Tile rows r0.., columns c0.. of batch b into shared memory (zeros outside R x C); pair: as
// TileFetch::load.
template <typename In, bool CPLX>
__device__ __forceinline__ void load_tile(Tile<CPLX>& s, const In* __restrict__ re,
                                          const In* __restrict__ im, long long base,
                                          long long sr, long long sc, int r0, int c0, int R,
                                          int C, int rows_contiguous, int pair = 0) {
  TileFetch<In, CPLX> f;
  f.load(re, im, base, sr, sc, r0, c0, R, C, rows_contiguous, pair);
  f.store(s, rows_contiguous);
}

__device__ __forceinline__ unsigned long long abs_bits(double x) {
  return static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7fffffffffffffffull;
}

__device__ __forceinline__ double abs_of(double x) {
  return __longlong_as_double(static_cast<long long>(abs_bits(x)));
}

// floor(log2 |x|) (np.frexp(x)[1] - 1), kIntMin for x = 0.
__device__ __forceinline__ int exponent_of(double x) {
  const unsigned long long b = abs_bits(x);
  if (b == 0) return kIntMin;
  const int eb = static_cast<int>(b >> 52);
  return eb != 0 ? eb - 1023 : -1011 - __clzll(static_cast<long long>(b));  // subnormal
}

// floor(v) for 0 <= v < 128 (truncation = floor for v >= 0).
__device__ __forceinline__ int floor_small(double v) { return static_cast<int>(v); }

constexpr int kStage = 256;  // rows whose line terms F's passes stage in shared memory
static_assert(kStage % 8 == 0, "cert_entries: a thread's rows step by 8 across stages");

// scaling.bound_upper for one entry, F + min(c ra, 127 nzb) + min(c cb, 127 nza) + c min(nza,
// nzb) (exact integers, c = 1 real, 2 complex), from its line terms: the row's c ra, 127 nza,
// c nza and the column's c cb, 127 nzb, c nzb (c > 0: c min(nza, nzb) = min(c nza, c nzb)), in
// the integer type U: long long, or unsigned where every term and U are below 2**32.
template <typename U>
struct BoundLine {
  U cr, knz, cnz;  // c ra (or c cb), 127 nza (127 nzb), c nza (c nzb)
};
template <typename U>
__device__ __forceinline__ BoundLine<U> bound_line(long long r, long long nz, long long c) {
  return {static_cast<U>(c * r), static_cast<U>(kBoundMax * nz), static_cast<U>(c * nz)};
}
template <typename U>
__device__ __forceinline__ U bound_upper(U F, const BoundLine<U>& a, const BoundLine<U>& b) {
  const U x = a.cr < b.knz ? a.cr : b.knz;
  const U y = b.cr < a.knz ? b.cr : a.knz;
  return F + x + y + (a.cnz < b.cnz ? a.cnz : b.cnz);
}
__device__ __forceinline__ long long bound_upper(long long F, long long ra, long long nza,
                                                 long long cb, long long nzb, long long c) {
  return bound_upper<long long>(F, bound_line<long long>(ra, nza, c),
                                bound_line<long long>(cb, nzb, c));
}

// bound_max's arithmetic type for F of type T: an int32 F (K not blocked: k 127**2 < 2**31)
// bounds U by k (127**2 + 4 127 + 4) < 2**32, so 32-bit unsigned arithmetic is exact (half the
// instructions of 64-bit, and 32-bit shuffles); an int64 F keeps 64 bits.
template <typename T>
struct BoundArith {
  using type = long long;                // the terms and U
  using max_type = unsigned long long;   // U's maxima (U >= 0) and the shuffles
};
template <>
struct BoundArith<int> {
  using type = unsigned;
  using max_type = unsigned;
};

__device__ __forceinline__ unsigned bf16_rz(double v) {  // as bf16_lower.cu
  return __float_as_uint(__double2float_rz(v)) >> 16;
}

__device__ __forceinline__ unsigned pack4(int a, int b, int c, int d) {
  return (static_cast<unsigned>(a) & 0xffu) | ((static_cast<unsigned>(b) & 0xffu) << 8) |
         ((static_cast<unsigned>(c) & 0xffu) << 16) | (static_cast<unsigned>(d) << 24);
}

}  // namespace

// Grid (chunks of C, tiles of R, B); each block walks `chunk` columns (a multiple of 32). Every
// thread keeps the largest magnitude (as bits: they order as the values for x >= 0) of 4 columns
// of one tile row over the chunk; 8 threads per row are combined through shared memory and the
// row's exponent goes to emax with one atomicMax per row and chunk (a max: any order is exact).
// pair: the parts interleaved (TileFetch::load).
template <typename In, bool CPLX>
__global__ void __launch_bounds__(kThreads)
    line_max_exponent(const In* __restrict__ re, const In* __restrict__ im, long long sb,
                      long long sr, long long sc, int B, int R, int C, int rows_contiguous,
                      int chunk, int pair, int* __restrict__ emax) {
  __shared__ Tile<CPLX> tile;
  __shared__ unsigned long long red[kThreads];
  const int t = threadIdx.x;
  const int rr = t >> 3, q = 4 * (t & 7);
  const int cbeg = blockIdx.x * chunk, cend = min(C, cbeg + chunk);
  for (int b = blockIdx.z; b < B; b += gridDim.z) {
    for (int r0 = blockIdx.y * kTile; r0 < R; r0 += gridDim.y * kTile) {
      unsigned long long best = 0;
      for (int c0 = cbeg; c0 < cend; c0 += kTile) {
        __syncthreads();  // the previous tile (and the previous rows' red) has been read
        load_tile<In, CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous, pair);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned long long x = abs_bits(tile.re[rr][q + j]);
          best = x > best ? x : best;
          if constexpr (CPLX) {
            const unsigned long long y = abs_bits(tile.im[rr][q + j]);
            best = y > best ? y : best;
          }
        }
      }
      red[t] = best;
      __syncthreads();
      if (t < kTile) {
        unsigned long long m = 0;
        for (int i = 0; i < 8; ++i) m = red[8 * t + i] > m ? red[8 * t + i] : m;
        if (r0 + t < R && m != 0)
          atomicMax(emax + static_cast<long long>(b) * R + r0 + t,
                    exponent_of(__longlong_as_double(static_cast<long long>(m))));
      }
    }
  }
}

// cp.async (sm_80+): a 16-byte copy from global to shared memory that holds no register while in
// flight, and its groups. The passes below that are bound by the loads in flight stream their
// input through rings of such copies. A thread waits only for its own copies; where threads read
// each other's, a barrier follows the wait. On the host (src_amx/cuda_host.hpp) cp_async16 is a
// plain copy.
#ifndef EMU_CUDA_HOST
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// bound_operand's ring: a warp's 32 x 32 tiles (both parts, complex) in kDepth slots of shared
// memory, filled kDepth - 1 tiles ahead by cp.async. A slot's tile is stored along the operand's
// contiguous axis: line-major [line][k] when k is contiguous, k-major [k][line] when the lines
// are (B's columns of a row-major B), in rows of kLd entries (16-byte aligned; padded by one
// chunk, so that the line-major 16-byte reads of 8 lanes cover all 32 banks). Complex parts
// interleaved in memory (bound_fetch's pair mode) are stored so, (re, im) pairs in rows of kLdP.
template <typename In, bool CPLX>
struct BoundRing {
  static constexpr int kE = 16 / static_cast<int>(sizeof(In));  // entries per 16-byte chunk
  static constexpr int kLd = kTile + kE;
  static constexpr int kLdP = 2 * kTile + kE;  // pair mode: a row of kTile (re, im) pairs
  static constexpr int kPart = kTile * kLd;  // entries of one part's tile
  static constexpr int kSlot = (CPLX ? 2 : 1) * kPart;
  static_assert(kTile * kLdP <= 2 * kPart, "a pair-mode tile fits a complex slot");
  static constexpr int kSlotBytes = kSlot * static_cast<int>(sizeof(In));
  static constexpr int kDepth = kSlotBytes <= 4608 ? 4 : kSlotBytes <= 9216 ? 3 : 2;  // <= 36 KB
  static constexpr int kRowChunks = kTile / kE;              // chunks per stored row
  // warps an SM holds by shared memory (sm_90: 228 KB, 1 KB reserved per block): the launch
  // bounds keep the registers from holding fewer
  static constexpr int kPerSM = 233472 / (kDepth * kSlotBytes + 1024);
  static constexpr int kMinBlocks = kPerSM < 32 ? kPerSM : 32;
};

constexpr int kBoundChunk = 4;  // bound_operand's tiles per l1 partial (128 columns)

// A position in bound_operand's order of tiles (b, row tile, column tile), column tiles fastest.
struct BoundTile {
  int b, r0, c0, ti;
  __device__ __forceinline__ BoundTile(long long x, int ntiles, int nrt) {
    const long long y = x / ntiles;
    b = static_cast<int>(y / nrt), r0 = static_cast<int>(y % nrt) * kTile;
    ti = static_cast<int>(x % ntiles), c0 = ti * kTile;
  }
  __device__ __forceinline__ void next(int ntiles, int nrt) {  // no divisions per tile
    if (++ti < ntiles) {
      c0 += kTile;
      return;
    }
    ti = c0 = 0;
    r0 += kTile;
    if (r0 < nrt * kTile) return;
    r0 = 0;
    ++b;
  }
};

// The warp's copies of tile p into `slot` (zeros outside R x C). With `vec` 1 (the contiguous
// axis has stride 1, and every chunk's address is 16-byte aligned) a whole chunk inside the
// operand is one cp.async; other chunks, and every chunk without `vec`, are loaded entry by entry
// and stored at once. `vec` 2 (CPLX, pair mode): the parts interleaved as a complex array's (im =
// re + 1, the contiguous axis at stride 2, every chunk 16-byte aligned): a chunk holds kE / 2
// (re, im) pairs, copied as they are into rows of kLdP.
template <typename In, bool CPLX>
__device__ __forceinline__ void bound_fetch(In* slot, const BoundTile& p,
                                            const In* __restrict__ re, const In* __restrict__ im,
                                            long long sb, long long sr, long long sc, int R,
                                            int C, int line_major, int vec) {
  using G = BoundRing<In, CPLX>;
  const int lane = threadIdx.x;
  // stored rows (outer) and the entries along them (inner), in operand coordinates
  const long long so = line_major ? sr : sc, si = line_major ? sc : sr;
  const int o0 = line_major ? p.r0 : p.c0, i0 = line_major ? p.c0 : p.r0;
  const int olim = line_major ? R : C, ilim = line_major ? C : R;
  const long long base = static_cast<long long>(p.b) * sb;
  if constexpr (CPLX) {
    if (vec == 2) {
      constexpr int kC = G::kE / 2, kChunks = 2 * G::kRowChunks;  // pairs per chunk, per row
#pragma unroll
      for (int u = 0; u < kTile * kChunks / 32; ++u) {
        const int idx = lane + 32 * u, o = idx / kChunks, ch = idx % kChunks;
        const int oo = o0 + o, ii = i0 + kC * ch;
        const long long at = base + oo * so + ii * si;
        In* dst = slot + o * G::kLdP + G::kE * ch;
        if (oo < olim && ii + kC <= ilim) {
          cp_async16(dst, re + at);
        } else {
#pragma unroll
          for (int e = 0; e < kC; ++e) {
            const bool in = oo < olim && ii + e < ilim;
            dst[2 * e] = in ? re[at + e * si] : In(0);
            dst[2 * e + 1] = in ? im[at + e * si] : In(0);
          }
        }
      }
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kTile * G::kRowChunks / 32; ++u) {
    const int idx = lane + 32 * u, o = idx / G::kRowChunks, ch = idx % G::kRowChunks;
    const int oo = o0 + o, ii = i0 + G::kE * ch;
    const long long at = base + oo * so + ii * si;
#pragma unroll
    for (int part = 0; part < (CPLX ? 2 : 1); ++part) {
      const In* src = part ? im : re;
      In* dst = slot + part * G::kPart + o * G::kLd + G::kE * ch;
      if (vec && oo < olim && ii + G::kE <= ilim) {
        cp_async16(dst, src + at);
      } else {
#pragma unroll
        for (int e = 0; e < G::kE; ++e)
          dst[e] = oo < olim && ii + e < ilim ? src[at + e * si] : In(0);
      }
    }
  }
}

// 4 consecutive entries at p (16-byte aligned): one 16-byte load (two for 8-byte T). The
// passes over F are limited by loads in flight, so each thread takes 4 adjacent columns; the
// bound operands' line-major slots are read the same way.
__device__ __forceinline__ void load4(const int* p, int (&v)[4]) {
  const int4 w = *reinterpret_cast<const int4*>(p);
  v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
}
__device__ __forceinline__ void load4(const long long* p, long long (&v)[4]) {
  const longlong2 a = reinterpret_cast<const longlong2*>(p)[0];
  const longlong2 b = reinterpret_cast<const longlong2*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  const float4 w = *reinterpret_cast<const float4*>(p);
  v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
}
__device__ __forceinline__ void load4(const double* p, double (&v)[4]) {
  const double2 a = reinterpret_cast<const double2*>(p)[0];
  const double2 b = reinterpret_cast<const double2*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

// Entries 4g .. 4g + 3 of line `lane` of one part's stored tile.
template <typename In>
__device__ __forceinline__ void bound_read4(const In* t, int line_major, int lane, int g,
                                            double (&x)[4]) {
  constexpr int kLd = BoundRing<In, false>::kLd;
  if (line_major) {
    In v[4];
    load4(t + lane * kLd + 4 * g, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = v[j];
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = t[(4 * g + j) * kLd + lane];
  }
}

// Entries 4g .. 4g + 3 of line `lane` of a pair-mode tile (bound_fetch's vec 2), both parts.
template <typename In>
__device__ __forceinline__ void bound_read4_pair(const In* t, int line_major, int lane, int g,
                                                 double (&xr)[4], double (&xi)[4]) {
  constexpr int kLdP = BoundRing<In, true>::kLdP;
  if (line_major) {
    In lo[4], hi[4];  // pairs 4g, 4g + 1 and 4g + 2, 4g + 3
    load4(t + lane * kLdP + 8 * g, lo);
    load4(t + lane * kLdP + 8 * g + 4, hi);
    xr[0] = lo[0], xi[0] = lo[1], xr[1] = lo[2], xi[1] = lo[3];
    xr[2] = hi[0], xi[2] = hi[1], xr[3] = hi[2], xi[3] = hi[3];
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      In a, b;
      load_pair(t + (4 * g + j) * kLdP + 2 * lane, a, b);
      xr[j] = a, xi[j] = b;
    }
  }
}

// One block is one warp; the grid's warps split the B x ceil(Rpad / 32) x ceil(Cp / 128) chunks
// of 4 tiles (the last of a row may have fewer), taken in the order (b, row tile, chunk), into
// equal contiguous ranges (the host sizes the grid to what the device holds at once), and each
// warp streams its range's tiles through its ring (BoundRing). Lane l computes line r0 + l of
// every tile: writes the shifts s (int64, (B, R)) from the first column tiles, the int8 operand
// (B, Rpad, Cp) (32 bytes per line and tile), and per line: the sum of its entries (sums), of
// its nonzero parts (nz) and of its entries with both parts nonzero (mixed, complex), added
// atomically when the warp leaves the row tile (exact integers, zeroed by the caller), and
// partial (2, B, ceil(Cp / 128), R): each chunk's float64 sums of x = |re| 2**-e + |im| 2**-e
// (e = 5 - cplx - s) over its 128 columns, 32 sequential sums of 4 columns added in order, and
// of x**2, in column order (the same for any grid; the line's norm then adds Cp / 128 partials,
// not Cp / 32; the squares give the native form's l2 norm). Cp is a multiple of
// 16; rows_contiguous: the lines are the contiguous axis (k-major slots); vec: as bound_fetch
// (2: complex parts interleaved).
template <typename In, bool CPLX>
__global__ void __launch_bounds__(32, (BoundRing<In, CPLX>::kMinBlocks))
    bound_operand(const In* __restrict__ re, const In* __restrict__ im, long long sb,
                  long long sr, long long sc, int B, int R, int C, int Rpad, int Cp,
                  int rows_contiguous, int vec, const int* __restrict__ emax,
                  long long* __restrict__ shift, unsigned* __restrict__ out,
                  unsigned long long* __restrict__ sums, unsigned long long* __restrict__ nz,
                  unsigned long long* __restrict__ mixed, double* __restrict__ partial) {
  using G = BoundRing<In, CPLX>;
  constexpr int D = G::kDepth;
  __shared__ uint4 ring_words[D * G::kSlotBytes / 16];
  In* const ring = reinterpret_cast<In*>(ring_words);  // slot d: ring + d * G::kSlot
  const int lane = threadIdx.x, lm = !rows_contiguous;
  const int ntiles = (Cp + kTile - 1) / kTile, nrt = (Rpad + kTile - 1) / kTile;
  const int nch = (ntiles + kBoundChunk - 1) / kBoundChunk;
  const long long units = static_cast<long long>(B) * nrt * nch;
  const long long ub = units * blockIdx.x / gridDim.x, ue = units * (blockIdx.x + 1) / gridDim.x;
  // the first tile of chunk u (u = units: the end of all tiles)
  const long long xb = ub / nch * ntiles + ub % nch * kBoundChunk;
  const long long xe = ue / nch * ntiles + ue % nch * kBoundChunk;
  BoundTile ahead(xb, ntiles, nrt), p = ahead;  // the next tile to fetch, the tile computed
  for (int d = 0; d < D - 1; ++d) {
    if (xb + d < xe) {
      bound_fetch<In, CPLX>(ring + d * G::kSlot, ahead, re, im, sb, sr, sc, R, C, lm, vec);
      ahead.next(ntiles, nrt);
    }
    cp_async_commit();
  }
  long long line = 0;  // the lane's line b R + r in the row tile being walked (r = r0 + lane)
  bool in_r = false, first = true;
  int p1 = 0, pn = 0;                                // 2**(s+1), 2**-e of the line
  unsigned long long vs = 0, zs = 0, mx = 0;         // its line terms over the warp's tiles
  double acc = 0.0;  // the chunk's l1 partial: its groups of 4 columns in order, each in order
  double acc2 = 0.0;  // and its sum of squares, in column order
  int slot = 0;
  for (long long x = xb; x < xe; ++x, slot = slot == D - 1 ? 0 : slot + 1, p.next(ntiles, nrt)) {
    if (x + D - 1 < xe) {
      bound_fetch<In, CPLX>(ring + (slot == 0 ? D - 1 : slot - 1) * G::kSlot, ahead, re, im, sb,
                            sr, sc, R, C, lm, vec);
      ahead.next(ntiles, nrt);
    }
    cp_async_commit();
    const int r = p.r0 + lane;
    // A row tile starts at its first column tile or at the warp's first tile (not where b R + r
    // changes: for padding rows r >= R it can name a line of batch b + 1).
    if (first || p.ti == 0) {  // the last row tile's line terms out, this line's shift
      first = false;
      if (in_r) {
        if (vs) atomicAdd(sums + line, vs);
        if (zs) atomicAdd(nz + line, zs);
        if (mx) atomicAdd(mixed + line, mx);
      }
      line = static_cast<long long>(p.b) * R + r, in_r = r < R, vs = zs = mx = 0;
      const int e = in_r ? emax[line] : kIntMin;
      const int s = 5 - (e == kIntMin ? 0 : e) - (CPLX ? 1 : 0);
      if (p.ti == 0 && in_r) shift[line] = s;
      p1 = s + 1, pn = s - 5 + (CPLX ? 1 : 0);
    }
    cp_async_wait<D - 1>();
    __syncthreads();  // every lane's copies (and stores) of tile x are in the slot
    const In* t = ring + slot * G::kSlot;
    unsigned w[8], tv = 0, tz = 0, tm = 0;  // the 32 int8 values, packed; the tile's terms
    if (p.ti % kBoundChunk == 0) acc = acc2 = 0.0;
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      double xr[4], xi[4];
      if (CPLX && vec == 2) {
        bound_read4_pair(t, lm, lane, g, xr, xi);
      } else {
        bound_read4(t, lm, lane, g, xr);
        if constexpr (CPLX) bound_read4(t + G::kPart, lm, lane, g, xi);
      }
      int v[4];
      double l1 = 0.0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double a = abs_of(xr[j]);
        v[j] = floor_small(scale2(a, p1));
        tz += a != 0.0;
        double wj = scale2(a, pn);
        if constexpr (CPLX) {
          const double y = abs_of(xi[j]);
          v[j] += floor_small(scale2(y, p1));
          tz += y != 0.0;
          tm += a != 0.0 && y != 0.0;
          wj = __dadd_rn(wj, scale2(y, pn));
        }
        l1 = __dadd_rn(l1, wj);
        acc2 = __dadd_rn(acc2, __dmul_rn(wj, wj));
      }
      w[g] = pack4(v[0], v[1], v[2], v[3]);
      tv += v[0] + v[1] + v[2] + v[3];
      acc = __dadd_rn(acc, l1);
    }
    __syncthreads();  // the slot has been read: the next step refills it
    vs += tv, zs += tz, mx += tm;
    if (r < Rpad) {
      uint4* o = reinterpret_cast<uint4*>(out) +
                 ((static_cast<long long>(p.b) * Rpad + r) * Cp + p.c0) / 16;
      o[0] = uint4{w[0], w[1], w[2], w[3]};
      if (p.c0 + 16 < Cp) o[1] = uint4{w[4], w[5], w[6], w[7]};
    }
    if (in_r && (p.ti % kBoundChunk == kBoundChunk - 1 || p.ti == ntiles - 1)) {
      const long long at = (static_cast<long long>(p.b) * nch + p.ti / kBoundChunk) * R + r;
      partial[at] = acc;
      partial[static_cast<long long>(B) * nch * R + at] = acc2;  // the second half
    }
  }
  cp_async_wait<0>();  // the last groups are empty; none is left open
  if (in_r) {
    if (vs) atomicAdd(sums + line, vs);
    if (zs) atomicAdd(nz + line, zs);
    if (mx) atomicAdd(mixed + line, mx);
  }
}

// F's passes read its rows (and the bf16 GEMM's c32) through a ring of kDepth slots per thread
// (cp.async, above), filled kDepth - 1 rows ahead: a thread reads back only its own slots, so
// cp.async.wait_group orders them (no barrier).

// A thread's ring slot holds 4 entries of T: sizeof(T) / 4 words of 16 bytes.
template <typename T>
constexpr int kWords = static_cast<int>(sizeof(T)) / 4;
template <typename T>
constexpr int kDepth = sizeof(T) == 4 ? 4 : 3;  // int64 F: 48 KB of static shared memory

// 4 consecutive entries at p (16-byte aligned) into the slot (cp.async; in flight until the
// group is waited for).
template <typename T>
__device__ __forceinline__ void fetch4(uint4* slot, const T* p) {
#pragma unroll
  for (int w = 0; w < kWords<T>; ++w) cp_async16(slot + w, reinterpret_cast<const uint4*>(p) + w);
}

// Block (32, 8), grid (column groups of 128, row chunks): the row maxima (ua, (B, m)) and column
// maxima (ub, (B, n)) of U = bound_upper(F, line terms) over the bound GEMM's sums F (B, m, n_p)
// (int32, or int64 when K was blocked; n_p a multiple of 4, F 16-byte aligned); U >= 0, so the
// unsigned atomicMax orders as the values. Thread x takes columns j0 + 4x .. j0 + 4x + 3.
template <typename T>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 4 ? 4 : 2)
    bound_max(const T* __restrict__ F, long long n_p, int B, int m, int n, int rows_per_block,
              const unsigned long long* __restrict__ ra, const unsigned long long* __restrict__ nza,
              const unsigned long long* __restrict__ cb, const unsigned long long* __restrict__ nzb,
              long long c, unsigned long long* __restrict__ ua,
              unsigned long long* __restrict__ ub) {
  using A = typename BoundArith<T>::type;
  using M = typename BoundArith<T>::max_type;
  constexpr int D = kDepth<T>;
  __shared__ BoundLine<A> srow[kStage];
  __shared__ uint4 ring[D][kThreads * kWords<T>];
  const long long rows = static_cast<long long>(B) * m;
  const int jb = blockIdx.x * 128 + 4 * threadIdx.x;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  uint4* const mine = ring[0] + t * kWords<T>;  // slot d: mine + d * kThreads * kWords<T>
  const long long rbeg = static_cast<long long>(blockIdx.y) * rows_per_block;
  const long long rend = rbeg + rows_per_block < rows ? rbeg + rows_per_block : rows;
  M colmax[4] = {};
  long long bcur = -1, bend = 0;
  BoundLine<A> col[4] = {};  // bound_upper's column terms, kept: three minima, adds per entry
  // This thread's rows are row, row + 8, ...; F's rows go through the ring D - 1 ahead, and the
  // row terms of kStage rows at a time to shared memory, so that the row loop waits on nothing
  // else. Every thread takes the same number of steps (the barriers, and the warp shuffle that
  // needs the whole warp; a warp is one row's 32 x-threads).
  long long row = rbeg + threadIdx.y;
  const long long step = blockDim.y;
  for (int d = 0; d < D - 1; ++d) {
    const long long r = row + d * step;
    if (r < rend && jb < n) fetch4(mine + d * kThreads * kWords<T>, F + r * n_p + jb);
    cp_async_commit();
  }
  int slot = 0;
  for (long long s0 = rbeg; s0 < rend; s0 += kStage) {
    const long long s1 = rend - s0 < kStage ? rend : s0 + kStage;
    __syncthreads();  // the previous rows' terms have been read
    for (long long i = t; i < s1 - s0; i += kThreads)
      srow[i] = bound_line<A>(static_cast<long long>(ra[s0 + i]),
                              static_cast<long long>(nza[s0 + i]), c);
    __syncthreads();
    for (long long r0 = s0; r0 < s1; r0 += step, row += step) {  // row = r0 + threadIdx.y
      const long long ahead = row + (D - 1) * step;
      const int back = slot == 0 ? D - 1 : slot - 1;  // the slot read last time
      if (ahead < rend && jb < n) fetch4(mine + back * kThreads * kWords<T>, F + ahead * n_p + jb);
      cp_async_commit();
      cp_async_wait<D - 1>();  // this row's group has landed
      T fv[4];
      load4(reinterpret_cast<const T*>(mine + slot * kThreads * kWords<T>), fv);
      slot = slot + 1 == D ? 0 : slot + 1;
      M rmax = 0;
      if (row < s1) {  // only the block's last rows leave some warps without one
        if (row >= bend) {  // a new batch entry: flush the column maxima, load its terms
          if (bcur >= 0)
            for (int q = 0; q < 4; ++q) {
              if (jb + q < n && colmax[q])
                atomicMax(ub + bcur * n + jb + q, static_cast<unsigned long long>(colmax[q]));
              colmax[q] = 0;
            }
          bcur = row / m;
          bend = (bcur + 1) * m;
          for (int q = 0; q < 4; ++q) {
            const int j = jb + q;
            col[q] = j < n ? bound_line<A>(static_cast<long long>(cb[bcur * n + j]),
                                           static_cast<long long>(nzb[bcur * n + j]), c)
                           : BoundLine<A>{};
          }
        }
        const BoundLine<A> rowt = srow[row - s0];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (jb + q >= n) continue;
          const M v = static_cast<M>(bound_upper<A>(static_cast<A>(fv[q]), rowt, col[q]));
          rmax = v > rmax ? v : rmax;
          colmax[q] = v > colmax[q] ? v : colmax[q];
        }
      }
      for (int o = 16; o > 0; o >>= 1) {  // the warp is one row's 32 x-threads
        const M w = __shfl_down_sync(0xffffffffu, rmax, o);
        rmax = w > rmax ? w : rmax;
      }
      if (threadIdx.x == 0 && rmax) atomicMax(ua + row, static_cast<unsigned long long>(rmax));
    }
  }
  cp_async_wait<0>();
  if (bcur >= 0)
    for (int q = 0; q < 4; ++q)
      if (jb + q < n && colmax[q])
        atomicMax(ub + bcur * n + jb + q, static_cast<unsigned long long>(colmax[q]));
}

// Grid (chunks of Cp, tiles of Rpad, B). shift: the prescale's s (int64, (B, R)), e = 5 - cplx
// - s. out: bf16 bits, (B, Rpad, Cp) or, k_major, (B, Cp, Rpad); Cp and Rpad multiples of 4.
// partial: (B, gridDim.x, R) float64 sums over each chunk of columns, in column order.
template <bool CPLX>
__global__ void __launch_bounds__(kThreads)
    cert_operand(const double* __restrict__ re, const double* __restrict__ im, long long sb,
                 long long sr, long long sc, int B, int R, int C, int Rpad, int Cp,
                 int rows_contiguous, int k_major, int chunk, const long long* __restrict__ shift,
                 double* __restrict__ partial, unsigned short* __restrict__ out) {
  __shared__ Tile<CPLX> tile;
  __shared__ int tsh[kTile];
  const int t = threadIdx.x;
  const int cbeg = blockIdx.x * chunk, cend = min(Cp, cbeg + chunk);
  for (int b = blockIdx.z; b < B; b += gridDim.z) {
    for (int r0 = blockIdx.y * kTile; r0 < Rpad; r0 += gridDim.y * kTile) {
      __syncthreads();  // tsh of the previous rows has been read
      if (t < kTile) {
        const int r = r0 + t;  // p = -e = s - 5 + cplx (padded rows hold zeros: any p)
        tsh[t] = r < R ? static_cast<int>(shift[static_cast<long long>(b) * R + r]) - 5 +
                             (CPLX ? 1 : 0)
                       : 0;
      }
      double acc = 0.0;
      for (int c0 = cbeg; c0 < cend; c0 += kTile) {
        __syncthreads();
        load_tile<double, CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous);
        __syncthreads();
        // bfloat16 magnitudes, 4 per thread (one 8-byte store)
        const int g = t >> 3, q = 4 * (t & 7);
        const int lr = k_major ? q : g, lc = k_major ? g : q;  // tile row/column of element 0
        const int r = r0 + lr, c = c0 + lc;
        if (r < Rpad && c < Cp) {
          unsigned long long w = 0;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int tr = k_major ? lr + j : lr, tc = k_major ? lc : lc + j;
            double x = abs_of(tile.re[tr][tc]);
            if constexpr (CPLX) {
              const double y = abs_of(tile.im[tr][tc]);
              x = y > x ? y : x;
            }
            w |= static_cast<unsigned long long>(bf16_rz(scale2(x, tsh[tr]))) << (16 * j);
          }
          const long long at = k_major ? (static_cast<long long>(b) * Cp + c) * Rpad + r
                                       : (static_cast<long long>(b) * Rpad + r) * Cp + c;
          *reinterpret_cast<unsigned long long*>(out + at) = w;
        }
        // l1 norms: one thread per line, columns in order
        if (t < kTile) {
          for (int cc = 0; cc < kTile; ++cc) {
            double x = scale2(abs_of(tile.re[t][cc]), tsh[t]);
            if constexpr (CPLX) x = __dadd_rn(x, scale2(abs_of(tile.im[t][cc]), tsh[t]));
            acc = __dadd_rn(acc, x);
          }
        }
      }
      if (t < kTile && r0 + t < R)
        partial[(static_cast<long long>(b) * gridDim.x + blockIdx.x) * R + r0 + t] = acc;
    }
  }
}

// One thread per line of (B, R), partial (2, B, nchunks, R) (bound_operand's): s = the sum of
// the chunks' l1 partials, in order, and norm = s * l1fac; l2: s the sum of the squares'
// partials and norm = sqrt(s * l1fac) * (1 + 2**-52) (certificate.line_norm: upper bounds, the
// root rounded up). alpha = scale * sqrt(e).
extern "C" __global__ void __launch_bounds__(kThreads)
    cert_line_terms(const double* __restrict__ partial, int nchunks, int B, int R, double l1fac,
                    int l2, const double* __restrict__ e, double scale,
                    double* __restrict__ norm, double* __restrict__ alpha) {
  const long long lines = static_cast<long long>(B) * R;
  const double* const part = partial + (l2 ? lines * nchunks : 0);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < lines;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long b = i / R, r = i - b * R;
    double s = 0.0;
#pragma unroll 16
    for (int c = 0; c < nchunks; ++c) s = __dadd_rn(s, part[(b * nchunks + c) * R + r]);
    s = __dmul_rn(s, l1fac);
    norm[i] = l2 ? __dmul_rn(__dsqrt_rn(s), 1.0 + 0x1p-52) : s;
    alpha[i] = __dmul_rn(scale, __dsqrt_rn(e[i]));
  }
}

// certificate.magnitude_lower with the bf16 hook: max(float64(c) * factor - abs_term, 0).
__device__ __forceinline__ double gemm_lower(float c, double factor, double abs_term) {
  const double lam = __dsub_rn(__dmul_rn(static_cast<double>(c), factor), abs_term);
  return lam > 0.0 ? lam : 0.0;
}

// An entry's lower bound lam of the line-normalized |A||B|: the bound GEMM's sum F times fs =
// 2**-fexp, or 2**-fexp_mixed where its row or column has an entry with both parts nonzero
// (certificate.bound_lower; exact), and with the bf16 GEMM's FP32 sum c (gemm: the second pass) the
// larger of that and gemm_lower(c). cert_entries, refine_suspects and the CPU's
// host_cert_entries all take it from here.
__device__ __forceinline__ double entry_lower(double F, bool mixed, double fscale,
                                              double fscale_mixed, bool gemm, float c,
                                              double factor, double abs_term) {
  const double lam = __dmul_rn(F, mixed ? fscale_mixed : fscale);
  if (!gemm) return lam;
  const double g = gemm_lower(c, factor, abs_term);
  return g > lam ? g : lam;
}

// The certificate's test of one entry, its terms computed once: the count with threshold t (of
// certificate.cert_constants' thresholds) certifies it iff t (2 G + t Q) <= R (certificate.passes,
// float64 in that operation order, no FMA), from its lower bound lam of the normalized |A||B|;
// qa = c4 alpha_i. Each rounded operation is monotone in t, so the test is too: it passes below
// some threshold and fails above (t > 0). With t = 1 and the exact line factors in place of
// alpha, beta it is certificate.exact_passes' test. Also run on the CPU
// (src_amx/ozaki2_stats_host.cpp).
struct CertTest {
  double R, G2, Q;
  __device__ __forceinline__ bool passes(double t) const {
    return __dmul_rn(t, __dadd_rn(G2, __dmul_rn(t, Q))) <= R;
  }
};
__device__ __forceinline__ CertTest cert_test(double lam, double na_i, double alpha_i, double qa,
                                              double nb_j, double beta_j, double cR) {
  return {__dmul_rn(cR, lam),  // R = cR lam
          __dmul_rn(2.0, __dadd_rn(__dmul_rn(alpha_i, nb_j), __dmul_rn(beta_j, na_i))),
          __dmul_rn(qa, beta_j)};
}
__device__ __forceinline__ bool cert_ok(double lam, double na_i, double alpha_i, double qa,
                                        double nb_j, double beta_j, double cR, double t) {
  return cert_test(lam, na_i, alpha_i, qa, nb_j, beta_j, cR).passes(t);
}

// The first index in [lo, nth) of the thresholds th (n = MIN_MODULI.., non-increasing)
// whose count certifies the entry, by bisection (the test is monotone); nth where none does.
__device__ __forceinline__ int cert_first(const CertTest& c, const double* th, int lo, int nth) {
  int hi = nth;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (c.passes(th[mid]))
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}
__device__ __forceinline__ int cert_need(double lam, double na_i, double alpha_i, double qa,
                                         double nb_j, double beta_j, double cR,
                                         const double* th, int nth) {
  return cert_first(cert_test(lam, na_i, alpha_i, qa, nb_j, beta_j, cR), th, 0, nth);
}

// An int32 F's first pass runs 4 blocks per SM, in 64 registers: its column terms wait in
// shared memory (each thread reads back its own), not in 16 registers.
template <typename T, bool GEMM>
constexpr bool kSharedCols = sizeof(T) == 4 && !GEMM;

// cert_entries' shared memory: the row terms of kStage rows, the F (and c32) ring, and (where
// kSharedCols) each thread's column terms (nb, beta) per column c, as one 16-byte pair.
template <typename T, bool GEMM>
struct CertShared {
  static constexpr int kC = kSharedCols<T, GEMM> ? 4 : 1, kT = kSharedCols<T, GEMM> ? kThreads : 1;
  double na[kStage], al[kStage];
  double scale[2];  // 2**-fexp, 2**-fexp_mixed
  bool mx[kStage];
  double2 col[kC][kT];
  uint4 fring[kDepth<T>][kThreads * kWords<T>];
  uint4 cring[GEMM ? kDepth<T> : 1][GEMM ? kThreads : 1];
};

// cert_entries' column terms of batch entry b for the thread's columns jb .. jb + 3, to sh.col
// or cols (zeros beyond n); returns the columns' mixed flags (bit c: mixb nonzero).
template <typename T, bool GEMM>
__device__ __forceinline__ unsigned cert_columns(CertShared<T, GEMM>& sh, double2 (&cols)[4],
                                                 int t, long long b, int jb, int n,
                                                 const double* __restrict__ nb,
                                                 const double* __restrict__ beta,
                                                 const unsigned long long* __restrict__ mixb) {
  unsigned mx = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int j = jb + c;
    const double2 v = j < n ? double2{nb[b * n + j], beta[b * n + j]} : double2{0.0, 0.0};
    if constexpr (kSharedCols<T, GEMM>)
      sh.col[c][t] = v;
    else
      cols[c] = v;
    mx |= j < n && mixb[b * n + j] != 0 ? 1u << c : 0u;
  }
  return mx;
}

// cert_entries' pass over the block's rows, with MIXED: fexp_mixed differs from fexp (complex);
// without, every entry's scale is 2**-fexp (the mixed flags select between equal values).
template <typename T, bool GEMM, bool MIXED>
__device__ __forceinline__ void cert_rows(
    CertShared<T, GEMM>& sh, const double* th, const T* __restrict__ F,
    const float* __restrict__ c32, long long n_p, long long c_pitch, int m, int n,
    long long rbeg, long long rend, int fexp, int fexp_mixed, const double* __restrict__ na,
    const double* __restrict__ alpha, const double* __restrict__ nb,
    const double* __restrict__ beta, double factor, double abs_term, double cR, double c4,
    int nth, int base, const unsigned long long* __restrict__ mixa,
    const unsigned long long* __restrict__ mixb, unsigned char* __restrict__ need, int& qmax,
    unsigned& at_max, unsigned& out) {
  constexpr int D = kDepth<T>;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int jb = blockIdx.x * 128 + 4 * threadIdx.x;
  const bool packed = (n & 3) == 0;  // need's 4 bytes in one store
  // the thread's columns inside n (bits), and how many
  const unsigned valid = jb >= n ? 0u : jb + 4 <= n ? 15u : (1u << (n - jb)) - 1u;
  const unsigned nvalid = static_cast<unsigned>(__popc(valid));
  const bool fetch = jb < n;
  long long bend = 0;  // the column terms in sh.col are those of rows < bend
  unsigned mxb = 0;    // their mixed flags
  double2 cols[4] = {};  // (not kSharedCols) the column terms
  uint4* const fmine = sh.fring[0] + t * kWords<T>;  // slot d: fmine + d * kThreads * kWords<T>
  uint4* const cmine = sh.cring[0] + t;              // (GEMM) slot d: cmine + d * kThreads
  // This thread's rows rbeg + threadIdx.y + 8 k, k < nrows (rows_per_block < 2**31): F's
  // (and c32's) rows are fetched D - 1 ahead, through pointers that step a row at a time.
  long long row = rbeg + threadIdx.y;
  const int nrows = row < rend ? static_cast<int>((rend - row + 7) / 8) : 0;
  const T* fnext = F + row * n_p + jb;
  const float* cnext = GEMM ? c32 + row * c_pitch + jb : nullptr;
  const long long fstep = 8 * n_p, cstep = 8 * c_pitch;
  unsigned char* nr = need + row * n + jb;  // the row's need
  if (row < rend) {  // the first rows' column terms, loaded while the line terms are staged
    bend = (row / m + 1) * m;
    mxb = cert_columns(sh, cols, t, row / m, jb, n, nb, beta, mixb);
  }
  for (int d = 0; d < D - 1; ++d) {
    if (d < nrows && fetch) {
      fetch4(fmine + d * kThreads * kWords<T>, fnext);
      if constexpr (GEMM) fetch4(cmine + d * kThreads, cnext);
    }
    fnext += fstep;
    if constexpr (GEMM) cnext += cstep;
    cp_async_commit();
  }
  int slot = 0, k = 0;
  for (long long s0 = rbeg; s0 < rend; s0 += kStage) {
    const long long s1 = rend - s0 < kStage ? rend : s0 + kStage;
    __syncthreads();  // the previous rows' terms have been read
    for (long long i = t; i < s1 - s0; i += kThreads) {
      sh.na[i] = na[s0 + i];
      sh.al[i] = alpha[s0 + i];
      sh.mx[i] = mixa[s0 + i] != 0;
    }
    __syncthreads();
    // the thread's rows in this stage: k .. kend - 1 (from row - s0 < 8 on)
    const int kend = row < s1 ? k + static_cast<int>((s1 - row + 7) / 8) : k;
    for (int lr = static_cast<int>(row - s0); k < kend; ++k, lr += 8, row += 8, nr += 8 * n) {
      const int back = slot == 0 ? D - 1 : slot - 1;  // the slot read last time
      if (k + D - 1 < nrows && fetch) {
        fetch4(fmine + back * kThreads * kWords<T>, fnext);
        if constexpr (GEMM) fetch4(cmine + back * kThreads, cnext);
      }
      fnext += fstep;
      if constexpr (GEMM) cnext += cstep;
      cp_async_commit();
      cp_async_wait<D - 1>();  // this row's group has landed
      T fv[4];
      float cv[4] = {};
      load4(reinterpret_cast<const T*>(fmine + slot * kThreads * kWords<T>), fv);
      if constexpr (GEMM) load4(reinterpret_cast<const float*>(cmine + slot * kThreads), cv);
      slot = slot + 1 == D ? 0 : slot + 1;
      if (row >= bend) {  // a new batch entry: its column terms (each thread reads its own)
        bend = (row / m + 1) * m;
        mxb = cert_columns(sh, cols, t, row / m, jb, n, nb, beta, mixb);
      }
      const double fscale = sh.scale[0], fscale_mixed = sh.scale[1];
      const double na_i = sh.na[lr], alpha_i = sh.al[lr];
      const double qa = __dmul_rn(c4, alpha_i);  // c4 alpha_i
      const unsigned mx = MIXED ? (sh.mx[lr] ? 15u : mxb) : 0u;  // the entries' mixed flags
      // An entry's count q is max(qm - 1, f) (qm: this thread's largest count so far, as of the
      // row's start, -1 for none; f: the first index that certifies the entry, nth where none
      // does): an entry certified by qm - 1 is neither beyond nor among the largest, and stores
      // that count (an upper bound of its own). The test is monotone in the index, so f is the
      // same whatever indices a search probes: every entry first tests pi = max(qm - 1, 0) (if
      // it passes, q = pi); the rows where all entries pass (most of them) store and count at
      // once, and only the others search above pi.
      const int qm = qmax;
      const int pi = qm > 1 ? qm - 1 : 0;
      const double tp = th[pi];
      CertTest ct[4];
      bool all = true;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const double lam = entry_lower(static_cast<double>(fv[c]), mx >> c & 1u, fscale,
                                       fscale_mixed, GEMM, cv[c], factor, abs_term);
        double2 cb;
        if constexpr (kSharedCols<T, GEMM>)
          cb = sh.col[c][t];
        else
          cb = cols[c];
        ct[c] = cert_test(lam, na_i, alpha_i, qa, cb.x, cb.y, cR);
        all &= ct[c].passes(tp) | !(valid >> c & 1u);  // no branch per entry
      }
      unsigned word;
      if (all) {  // every entry at pi (pi < nth: none beyond)
        word = (static_cast<unsigned>(base + pi) & 0xffu) * 0x01010101u;
        if (valid && pi > qmax) {
          qmax = pi;
          at_max = nvalid;
        } else if (valid && pi == qmax) {
          at_max += nvalid;
        }
      } else {
        word = 0;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (!(valid >> c & 1u)) continue;
          int q = pi;
          if (!ct[c].passes(tp)) {  // f > pi: the next two indices, then bisection
            q = pi + 1;
            if (q < nth && !ct[c].passes(th[q])) {
              ++q;
              if (q < nth && !ct[c].passes(th[q])) q = cert_first(ct[c], th, q + 1, nth);
            }
          }
          word |= (static_cast<unsigned>(base + q) & 0xffu) << (8 * c);
          if (q == nth) {
            ++out;
          } else if (q > qmax) {
            qmax = q;
            at_max = 1;
          } else if (q == qmax) {
            ++at_max;
          }
        }
      }
      if (packed) {
        if (valid) *reinterpret_cast<unsigned*>(nr) = word;
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (valid >> c & 1u) nr[c] = static_cast<unsigned char>(word >> (8 * c));
      }
    }
  }
  cp_async_wait<0>();
}

// Block (32, 8), grid (column groups of 128, row chunks of rows_per_block) over the rows (b, i)
// of (B, m) and columns j < n; thread x takes columns j0 + 4x .. j0 + 4x + 3 (16-byte loads).
// F: the bound GEMM's sums (B, m, n_p), int32 or int64; c32 (GEMM pass only): the bf16 GEMM's
// FP32 sums (B, m, c_pitch); n_p and c_pitch multiples of 4, both 16-byte aligned. lam = F
// 2**-fexp (2**-fexp_mixed where mixa[row] or mixb[column] is nonzero: certificate.bound_lower), or
// max(that, gemm_lower(c32)). na/alpha (B, m), nb/beta (B, n). thr: the nth thresholds (at
// most 32). Writes need (B, m, n): base + cert_need (base + nth: beyond every count) for the
// beyond entries and those needing the largest count; the others may get a larger count than
// their own, still below the largest (so need depends on the grid; what is read of it does
// not). hist[0, nth + 1]: the block's largest cert_need below nth goes to hist[nth + 1]
// (atomicMax) and the number of its entries there to hist[that value]; the beyond entries are
// added to hist[nth]. So after the grid, hist[nth + 1] is the largest over all certified
// entries and hist[hist[nth + 1]] counts all of them (blocks with a smaller maximum add to
// lower slots). With one threshold (nth = 1) need and hist are exact: base where the entry
// passes, base + 1 (counted in hist[1]) where it fails. The launch returns at once where *skip
// is nonzero (cert_exact_factors' decision; a word left zero: it always runs).
template <typename T, bool GEMM>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 4 && !GEMM ? 4 : 2)
    cert_entries(const T* __restrict__ F, const float* __restrict__ c32, long long n_p,
                 long long c_pitch, int B, int m, int n, int rows_per_block, int fexp,
                 const double* __restrict__ na,
                 const double* __restrict__ alpha, const double* __restrict__ nb,
                 const double* __restrict__ beta, double factor, double abs_term, double cR,
                 double c4, const double* __restrict__ thr, int nth, int base,
                 const unsigned long long* __restrict__ mixa,
                 const unsigned long long* __restrict__ mixb, int fexp_mixed,
                 unsigned char* __restrict__ need, unsigned long long* __restrict__ hist,
                 const unsigned long long* __restrict__ skip) {
  if (*skip) return;  // the whole grid: no barrier is reached
  __shared__ double th[32];
  __shared__ unsigned long long s_red[3][kThreads / 32];
  __shared__ CertShared<T, GEMM> sh;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < 32) th[t] = t < nth ? thr[t] : 0.0;
  if (t < 2) sh.scale[t] = pow2(t ? -fexp_mixed : -fexp);
  __syncthreads();
  const long long rows = static_cast<long long>(B) * m;
  const long long rbeg = static_cast<long long>(blockIdx.y) * rows_per_block;
  const long long rend = rbeg + rows_per_block < rows ? rbeg + rows_per_block : rows;
  // this thread's largest certified value (-1: none), its entries, the beyond entries (per
  // thread at most 4 ceil(rows_per_block / 8) < 2**32)
  int qmax = -1;
  unsigned at_max = 0, out = 0;
  if (fexp == fexp_mixed)
    cert_rows<T, GEMM, false>(sh, th, F, c32, n_p, c_pitch, m, n, rbeg, rend, fexp, fexp_mixed,
                              na, alpha, nb, beta, factor, abs_term, cR, c4, nth, base, mixa,
                              mixb, need, qmax, at_max, out);
  else
    cert_rows<T, GEMM, true>(sh, th, F, c32, n_p, c_pitch, m, n, rbeg, rend, fexp, fexp_mixed,
                             na, alpha, nb, beta, factor, abs_term, cR, c4, nth, base, mixa,
                             mixb, need, qmax, at_max, out);
  // The block's largest count, its entries and the beyond entries: by warp shuffles, then the
  // 8 warps in order by one thread.
  unsigned long long q2 = static_cast<unsigned long long>(qmax + 1);  // 0: none certified
  unsigned long long at2 = at_max, out2 = out;
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long oq = __shfl_down_sync(0xffffffffu, q2, o);
    const unsigned long long oc = __shfl_down_sync(0xffffffffu, at2, o);
    out2 += __shfl_down_sync(0xffffffffu, out2, o);
    at2 = oq > q2 ? oc : oq == q2 ? at2 + oc : at2;
    q2 = oq > q2 ? oq : q2;
  }
  if (threadIdx.x == 0) {
    s_red[0][threadIdx.y] = q2;
    s_red[1][threadIdx.y] = at2;
    s_red[2][threadIdx.y] = out2;
  }
  __syncthreads();
  if (t == 0) {
    unsigned long long bq = 0, bc = 0, bb = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      bb += s_red[2][w];
      if (s_red[0][w] > bq) {
        bq = s_red[0][w];
        bc = s_red[1][w];
      } else if (s_red[0][w] == bq) {
        bc += s_red[1][w];
      }
    }
    if (bb) atomicAdd(hist + nth, bb);
    if (bq > 0) {
      atomicAdd(hist + (bq - 1), bc);
      atomicMax(hist + nth + 1, bq - 1);
    }
  }
}

// The certificate's words (uint64, zeroed by the host; nth thresholds, W = nth + 2), read back
// once by emulinalg/backends/cupy/certificate.py (ozaki2_certificate):
//   [0, W)              cert_entries' histogram of the counts (top = [nth + 1], beyond [nth])
//   W .. W + 2          the exact step's pass at count index top - 1: [passes, failures, 0]
//   W + 3, W + 4        the skip words of the counts' pass (never set) and of the exact step's
//   W + 5               c: the count index after the exact step and the refinement steps
//   W + 6, W + 7        patched (1), the patch's entries
//   step(s) .. + 8      refinement step s (cw_step): its exact pass's histogram (3), skip word,
//                       the sample's largest kappa (bits: kappa >= 0), failures, suspects
//                       tested, blocks done (suspect_ranks, refine_test)
//   step(steps) ..      the patch's flat indices (in any order)
__device__ __forceinline__ int cw_step(int nth, int s) { return nth + 10 + 9 * s; }

// The exact step's decision (certificate.certify_moduli): its pass tests count index top - 1 where
// there is one below top and this pass is the last (last = 0: a pass with beyond entries is
// followed by another; without beyond entries it is the last); it takes the count off where
// only the beyond entries fail it (they always do).
__device__ __forceinline__ bool cert_step1(const unsigned long long* w, int nth, int last) {
  return w[nth + 1] > 0 && (last || w[nth] == 0);
}

// scaling.half_log_shift of one line bound v (zero counts as 1): the largest t with
// v 4**t <= Q_down. v in [2**ev, 2**(ev+1)) and Q_down in [2**eq, 2**(eq+1)) put t at
// floor((eq - ev) / 2) or one below, and one exact comparison decides (no log2: the result is
// the generic one whatever its estimate).
__device__ __forceinline__ int half_log_shift(double q_down, double v) {
  v = v > 0.0 ? v : 1.0;
  const int d = exponent_of(q_down) - exponent_of(v);
  int t = d >= 0 ? d / 2 : -((1 - d) / 2);  // floor(d / 2)
  if (scale2(v, 2 * t) > q_down) --t;
  return t;
}

// scaling.line_shift of lines 0 .. n-1 (one side of ozaki2_shifts): s + half_log_shift(Q_down,
// v), the Scheme II product's shifts made where they are used (no host round trip).
extern "C" __global__ void __launch_bounds__(kThreads)
    line_shifts(const long long* __restrict__ s, const double* __restrict__ v, long long n,
                double q_down, long long* __restrict__ out) {
  for (long long i = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * kThreads)
    out[i] = s[i] + half_log_shift(q_down, v[i]);
}

// certificate.exact_line_factors of count index c, f0 2**-half_log_shift(Q_down, e), of A's lines
// (e, la of them) to p and B's (f, lb) to q, lines first, first + stride, ...; tab holds
// Q_down per count index, then f0 (0.5 scale min(rel, EXCLUDED)); 0 for a zero line bound.
__device__ __forceinline__ void exact_factors(const double* __restrict__ e, long long la,
                                              const double* __restrict__ f, long long lb,
                                              const double* __restrict__ tab, int nth, int c,
                                              long long first, long long stride,
                                              double* __restrict__ p, double* __restrict__ q) {
  const double q_down = tab[c], f0 = tab[nth + c];
  for (long long i = first; i < la + lb; i += stride) {
    const double v = i < la ? e[i] : f[i - la];
    // a zero line bound: the line's entries are all zero, as are its products (lam 0 passes)
    const double x = v > 0.0 ? scale2(f0, -half_log_shift(q_down, v)) : 0.0;
    if (i < la)
      p[i] = x;
    else
      q[i - la] = x;
  }
}

// One thread per line. mode 0 (after the counts' pass): the exact step's factors (count index
// top - 1) where it runs, and its pass's skip word. mode 1 (after that pass): c (the count index
// after the exact step) and, where the refinement runs (refine: a 2-D product, steps > 0 of
// refinement.REFINE_STEPS, c above the smallest, the last pass), the factors of c - 1 and step 0's
// skip word (the first thread writes the words).
extern "C" __global__ void __launch_bounds__(kThreads)
    cert_exact_factors(const double* __restrict__ e, long long la, const double* __restrict__ f,
                       long long lb, const double* __restrict__ tab, int nth, int mode,
                       int last, int refine, int steps, unsigned long long* __restrict__ words,
                       double* __restrict__ p, double* __restrict__ q) {
  const long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const int W = nth + 2, top = static_cast<int>(words[nth + 1]);
  const bool step1 = cert_step1(words, nth, last);
  if (mode == 0) {
    if (first == 0) words[W + 4] = step1 ? 0ull : 1ull;
    if (step1) exact_factors(e, la, f, lb, tab, nth, top - 1, first, stride, p, q);
    return;
  }
  const bool dec = step1 && words[W + 1] == words[nth];
  const int c = top - (dec ? 1 : 0);
  const bool go = refine && steps > 0 && c > 0 && (last || words[nth] == 0);
  if (first == 0) {
    words[W + 5] = static_cast<unsigned long long>(c);
    if (steps > 0) words[cw_step(nth, 0) + 3] = go ? 0ull : 1ull;
  }
  if (go) exact_factors(e, la, f, lb, tab, nth, c - 1, first, stride, p, q);
}

// A refinement step's suspects (refinement.refine_and_patch's suspects(count)): the entries not
// beyond every count (need0, the counts: not base + nth) that fail the step's exact pass
// (need1 = 1), `sus` of them (its failures less the beyond entries). The step refines them
// where it runs and 1 <= sus <= limit (refinement.SUSPECTS_MAX for the native form, else
// refinement.REFINE_ENTRIES); the sample is every step-th suspect in flat order, step =
// ceil(sus / re) (re = refinement.REFINE_ENTRIES: refinement.refine_sample).
struct CertStep {
  unsigned long long sus, step;
  bool run, work;
};
__device__ __forceinline__ CertStep cert_step(const unsigned long long* w, int nth, int s,
                                              long long limit, long long re) {
  const int P = cw_step(nth, s);
  CertStep r;
  r.run = w[P + 3] == 0;
  r.sus = w[P + 1] - w[nth];
  r.work = r.run && r.sus >= 1 && r.sus <= static_cast<unsigned long long>(limit) && re >= 1;
  r.step = r.work ? (r.sus + re - 1) / re : 1;
  return r;
}

// The 4 entries i0 .. i0 + 3 of the output (i0 a multiple of 4): which are suspects (bits), of
// need0 and need1 (16-byte aligned allocations: 4-byte loads inside the output).
__device__ __forceinline__ unsigned suspect_bits(const unsigned char* __restrict__ need0,
                                                 const unsigned char* __restrict__ need1,
                                                 long long total, long long i0, int out) {
  unsigned bits = 0;
  if (i0 + 4 <= total) {
    const unsigned a = *reinterpret_cast<const unsigned*>(need0 + i0);
    const unsigned b = *reinterpret_cast<const unsigned*>(need1 + i0);
    for (int h = 0; h < 4; ++h)
      bits |= ((b >> (8 * h) & 0xffu) == 1u && (a >> (8 * h) & 0xffu) != static_cast<unsigned>(out))
                  ? 1u << h
                  : 0u;
  } else {
    for (int h = 0; i0 + h < total; ++h)
      bits |= need1[i0 + h] == 1 && need0[i0 + h] != out ? 1u << h : 0u;
  }
  return bits;
}

// 0x80 in each byte of x that is zero, 0 elsewhere (exact: no carry crosses a byte).
__device__ __forceinline__ unsigned zero_bytes(unsigned x) {
  return ~(((x & 0x7f7f7f7fu) + 0x7f7f7f7fu) | x | 0x7f7f7f7fu);
}

// The suspects among 4 entries packed in need0's word a and need1's word b: 0x80 in their bytes
// (suspect_bits' test, out: base + nth).
__device__ __forceinline__ unsigned suspect_bytes(unsigned a, unsigned b, int out) {
  const unsigned one = zero_bytes(b ^ 0x01010101u);  // need1 == 1
  if (static_cast<unsigned>(out) > 0xffu) return one;  // no byte equals out
  return one & ~zero_bytes(a ^ static_cast<unsigned>(out) * 0x01010101u);
}

// Bits 0..3 from suspect_bytes' 0x80 per byte: the multiply moves byte k's flag to bit 21 + k
// (the 16 partial products land on distinct bits, so none carries).
__device__ __forceinline__ unsigned byte_flags(unsigned x) {
  return ((x >> 7) * 0x00204081u) >> 21 & 0xfu;
}

// The 16 entries i0 .. i0 + 15 (i0 a multiple of 16): which are suspects (bit h: entry i0 + h),
// as suspect_bits, with one 16-byte load of need0 and need1 inside the output; COUNT: only how
// many (the bits' popcount).
template <bool COUNT>
__device__ __forceinline__ unsigned suspects16(const unsigned char* __restrict__ need0,
                                               const unsigned char* __restrict__ need1,
                                               long long total, long long i0, int out) {
  if (i0 + 16 <= total) {
    const uint4 a = *reinterpret_cast<const uint4*>(need0 + i0);
    const uint4 b = *reinterpret_cast<const uint4*>(need1 + i0);
    const unsigned x = suspect_bytes(a.x, b.x, out), y = suspect_bytes(a.y, b.y, out);
    const unsigned z = suspect_bytes(a.z, b.z, out), w = suspect_bytes(a.w, b.w, out);
    if (COUNT) return __popc(x) + __popc(y) + __popc(z) + __popc(w);
    return byte_flags(x) | byte_flags(y) << 4 | byte_flags(z) << 8 | byte_flags(w) << 12;
  }
  unsigned bits = 0;
  for (int h = 0; h < 16 && i0 + h < total; ++h)
    bits |= need1[i0 + h] == 1 && need0[i0 + h] != out ? 1u << h : 0u;
  return COUNT ? __popc(bits) : bits;
}

// The inclusive prefix of v over the warp's lanes (every lane takes part).
__device__ __forceinline__ unsigned warp_scan(unsigned v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned y = __shfl_up_sync(0xffffffffu, v, o);
    v += lane >= o ? y : 0u;
  }
  return v;
}

// The exclusive prefix of v over the block's threads (kThreads, in thread order) and the block's
// total: a scan per warp by shuffles, the warps' totals through shared memory (wtot, its halves
// taken in turn, `parity`, so that one barrier per call orders them); every thread takes part.
__device__ __forceinline__ unsigned block_scan(unsigned v, unsigned (*wtot)[kThreads / 32],
                                               int& parity, unsigned& total) {
  const int t = threadIdx.x, w = t >> 5;
  const unsigned x = warp_scan(v);
  if ((t & 31) == 31) wtot[parity][w] = x;
  __syncthreads();
  unsigned before = 0, all = 0;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) {
    const unsigned c = wtot[parity][i];
    before += i < w ? c : 0u;
    all += c;
  }
  parity ^= 1;
  total = all;
  return before + x - v;
}

// The groups of 1024 entries (of the flat output, total entries) of block b of nblk: a
// contiguous range, so that a block's suspects follow the blocks before it in flat order.
__device__ __forceinline__ void group_range(long long total, long long b, long long nblk,
                                            long long& lo, long long& hi) {
  const long long groups = (total + 1023) / 1024;
  lo = groups * b / nblk;
  hi = groups * (b + 1) / nblk;
}

// Step s's suspect ranks, where it refines (cert_step): block b counts the suspects of its
// groups (group_range) per 128-entry segment g to seg[g] (uint32) and in all to boff[b]; the
// last block to finish (a counter, after a fence) turns boff (gridDim.x entries) into exclusive
// prefix sums: a suspect's rank is its block's offset plus those before it in the block's
// groups (refine_test, suspect_at). A thread takes 16 entries (16-byte loads), 8 threads a
// segment; no barrier until the block's total.
extern "C" __global__ void __launch_bounds__(kThreads)
    suspect_ranks(const unsigned char* __restrict__ need0,
                  const unsigned char* __restrict__ need1, long long total,
                  unsigned long long* __restrict__ words, int nth, int s, int base,
                  long long limit, long long re, unsigned* __restrict__ seg, long long nseg,
                  unsigned* __restrict__ boff) {
  const CertStep st = cert_step(words, nth, s, limit, re);
  if (!st.work) return;
  __shared__ unsigned wtot[2][kThreads / 32];
  __shared__ bool last_block;
  const int t = threadIdx.x, lane = t & 31;
  long long glo, ghi;
  group_range(total, blockIdx.x, gridDim.x, glo, ghi);
  const long long lo = glo * 1024, hi = ghi * 1024 < total ? ghi * 1024 : total;
  unsigned run = 0;  // the suspects of the segments this thread wrote
  for (long long c0 = lo; c0 < hi; c0 += 16 * kThreads) {
    const long long i0 = c0 + 16 * t;
    unsigned c = i0 < hi ? suspects16<true>(need0, need1, total, i0, base + nth) : 0u;
    c += __shfl_down_sync(0xffffffffu, c, 4);  // lane 8 q: its segment's 8 threads
    c += __shfl_down_sync(0xffffffffu, c, 2);
    c += __shfl_down_sync(0xffffffffu, c, 1);
    if ((lane & 7) == 0 && i0 < hi) {
      seg[i0 / 128] = c;
      run += c;
    }
  }
  int parity = 0;
  unsigned tot;
  block_scan(run, wtot, parity, tot);
  if (t == 0) boff[blockIdx.x] = tot;
  __threadfence();  // this block's counts are visible before it counts itself done
  __syncthreads();
  if (t == 0)
    last_block = atomicAdd(words + cw_step(nth, s) + 7, 1ull) == gridDim.x - 1ull;
  __syncthreads();
  if (!last_block) return;
  volatile unsigned* vb = boff;
  const int per = (static_cast<int>(gridDim.x) + kThreads - 1) / kThreads;
  const int blo = t * per < static_cast<int>(gridDim.x) ? t * per : gridDim.x;
  const int bhi = blo + per < static_cast<int>(gridDim.x) ? blo + per : gridDim.x;
  unsigned sum = 0;
  for (int x = blo; x < bhi; ++x) sum += vb[x];
  unsigned acc = block_scan(sum, wtot, parity, tot);
  for (int x = blo; x < bhi; ++x) {
    const unsigned v = vb[x];
    vb[x] = acc;
    acc += v;
  }
}

// The flat index of the suspect of rank r (step s's suspects, from suspect_ranks' boff (nblk
// blocks) and seg), found by one warp (every lane takes part, each gets it): the last block
// offset at or below r, then the block's segments 32 at a time (a scan of their counts), then the
// segment's entries, 4 per lane.
__device__ __forceinline__ long long suspect_at(const unsigned char* __restrict__ need0,
                                                const unsigned char* __restrict__ need1,
                                                long long total, int out, const unsigned* seg,
                                                long long nseg, const unsigned* boff,
                                                long long nblk, unsigned long long r) {
  const int lane = threadIdx.x & 31;
  long long lo = 0, hi = nblk - 1;  // boff[0] = 0 <= r
  while (lo < hi) {
    const long long mid = (lo + hi + 1) >> 1;
    if (boff[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  long long glo, ghi;
  group_range(total, lo, nblk, glo, ghi);
  unsigned long long run = boff[lo];
  const long long send = ghi * 8 < nseg ? ghi * 8 : nseg;
  long long gs = send;  // the segment holding rank r
  for (long long s0 = glo * 8; s0 < send; s0 += 32) {
    const long long sl = s0 + lane;
    const unsigned c = sl < send ? seg[sl] : 0u;
    const unsigned x = warp_scan(c);
    const unsigned hit = __ballot_sync(0xffffffffu, sl < send && r < run + x);
    if (hit) {
      const int l = __ffs(static_cast<int>(hit)) - 1;
      gs = s0 + l;
      run += __shfl_sync(0xffffffffu, x - c, l);
      break;
    }
    run += __shfl_sync(0xffffffffu, x, 31);
  }
  const long long i0 = gs * 128 + 4 * lane;
  const unsigned bits = suspect_bits(need0, need1, total, i0, out);
  const unsigned pc = __popc(bits);
  const unsigned long long first = run + (warp_scan(pc) - pc);  // the rank of the lane's first
  const bool mine = r >= first && r < first + pc;
  long long at = 0;
  if (mine) {
    unsigned b = bits;
    for (unsigned long long q = first; q < r; ++q) b &= b - 1;
    at = i0 + __ffs(static_cast<int>(b)) - 1;
  }
  const unsigned who = __ballot_sync(0xffffffffu, mine);
  return __shfl_sync(0xffffffffu, at, __ffs(static_cast<int>(who)) - 1);
}

// Step s's sample (refinement.refine_moduli's suspect_sums), where it refines: one warp per sample
// slot j < ceil(sus / step), the suspect of rank j step (suspect_at); entry (i, j) of the
// m x n output (B = 1):
//   S = float64 sum over k of x_h = |a_ih| 2**-ea_i |b_hj| 2**-eb_j (|x| = max(|re|, |im|),
//   ea_i = 5 - cplx - shift_a[i]), and (native) S2 = the sum of x_h**2; lane l sums terms l,
//   l + 32, ... in order, then the lanes are added by shuffles. Then (refinement.refine_failures)
//   S' = max(S native_factor - tiny, 0) to sums[j] and, native, S2' likewise, scale =
//   sqrt(S2' k) (1 - 2**-52) to sums[cap + j] and kappa = scale / (S' l1fac + tiny) (1 where
//   that is 0) (1 - 2**-50), the step's largest kept in its word (as bits: kappa >= 0). The
//   warps of the grid take the slots in turn.
template <bool CPLX, typename In>
__global__ void __launch_bounds__(kThreads)
    refine_suspects(const In* __restrict__ are, const In* __restrict__ aim, long long asr,
                    long long asc, const In* __restrict__ bre, const In* __restrict__ bim,
                    long long bsr, long long bsc, int k, const long long* __restrict__ shift_a,
                    const long long* __restrict__ shift_b, int n,
                    const unsigned char* __restrict__ need0,
                    const unsigned char* __restrict__ need1, long long total,
                    unsigned long long* __restrict__ words, int nth, int s, int base,
                    long long limit, long long re, const unsigned* __restrict__ seg,
                    long long nseg, const unsigned* __restrict__ boff, long long nblk,
                    int native, double native_factor, double tiny, double l1fac,
                    double* __restrict__ sums, long long cap) {
  const CertStep st = cert_step(words, nth, s, limit, re);
  if (!st.work) return;
  const long long count = (st.sus + st.step - 1) / st.step;
  const int lane = threadIdx.x & 31;
  const long long warps = blockDim.x >> 5;
  for (long long slot = blockIdx.x * warps + (threadIdx.x >> 5); slot < count;
       slot += gridDim.x * warps) {
    const long long at = suspect_at(need0, need1, total, base + nth, seg, nseg, boff, nblk,
                                    static_cast<unsigned long long>(slot) * st.step);
    const long long i = at / n, j = at - i * n;
    double acc = 0.0, acc2 = 0.0;
    {
      const int pa = static_cast<int>(shift_a[i]) - 5 + (CPLX ? 1 : 0);
      const int pb = static_cast<int>(shift_b[j]) - 5 + (CPLX ? 1 : 0);
      for (int h = lane; h < k; h += 32) {
        double x = abs_of(static_cast<double>(are[i * asr + h * asc]));
        double y = abs_of(static_cast<double>(bre[h * bsr + j * bsc]));
        if constexpr (CPLX) {
          const double xi = abs_of(static_cast<double>(aim[i * asr + h * asc]));
          const double yi = abs_of(static_cast<double>(bim[h * bsr + j * bsc]));
          x = xi > x ? xi : x;
          y = yi > y ? yi : y;
        }
        const double term = __dmul_rn(scale2(x, pa), scale2(y, pb));
        acc = __dadd_rn(acc, term);
        if (native) acc2 = __dadd_rn(acc2, __dmul_rn(term, term));
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      acc = __dadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, o));
      if (native) acc2 = __dadd_rn(acc2, __shfl_down_sync(0xffffffffu, acc2, o));
    }
    if (lane == 0) {
      double S = __dsub_rn(__dmul_rn(acc, native_factor), tiny);
      S = S > 0.0 ? S : 0.0;
      sums[slot] = S;
      if (native) {
        double S2 = __dsub_rn(__dmul_rn(acc2, native_factor), tiny);
        S2 = S2 > 0.0 ? S2 : 0.0;
        const double scale = __dmul_rn(__dsqrt_rn(__dmul_rn(S2, static_cast<double>(k))),
                                       1.0 - 0x1p-52);
        const double upper = __dadd_rn(__dmul_rn(S, l1fac), tiny);
        const double kappa = __dmul_rn(upper > 0.0 ? __ddiv_rn(scale, upper) : 1.0,
                                       1.0 - 0x1p-50);
        sums[cap + slot] = scale;
        atomicMax(words + cw_step(nth, s) + 4,
                  static_cast<unsigned long long>(__double_as_longlong(kappa)));
      }
    }
  }
}

// Step s's test and decision (refinement.refine_and_patch's loop body), B = 1, on suspect_ranks'
// grid (its blocks' group ranges and offsets boff). Where the step refines: every suspect
// (rank r: sampled where step divides it, slot r / step) gets lam' =
// its lower bound as cert_entries makes it, times theta (native: min(theta_cap, max(1, the
// sample's largest kappa)), theta_cap = min(THETA_MAX, sqrt(k))), raised to max(S', scale)
// (native) or S' (strict) where sampled; the exact test at threshold 1 with the factors p, q
// of the step's count (c - 1) counts its failures and writes the failing flat indices to the
// patch (the first patch_cap; one atomic per warp and 4096 entries with failures, until the
// count passes patch_cap: the patch is then not taken, and the warp adds the rest at its end).
// A thread takes 16 entries (16-byte loads), ranked by a block scan. The last block decides (c
// in words[W + 5]): no suspect, or none
// failing: c - 1, and where steps remain and c - 1 is above the smallest, the next step's
// factors and its skip word cleared; failures at most patch_cap (refinement.patch_limit):
// c - 1 with the patch; else the count stays. A step that does not run sets the next one's
// skip word.
template <typename T, bool GEMM>
__global__ void __launch_bounds__(kThreads)
    refine_test(const T* __restrict__ F, const float* __restrict__ c32, long long n_p,
                long long c_pitch, int n, int fexp, int fexp_mixed,
                const unsigned long long* __restrict__ mixa,
                const unsigned long long* __restrict__ mixb, double factor, double abs_term,
                const double* __restrict__ na, double* __restrict__ p,
                const double* __restrict__ nb, double* __restrict__ q, double cR, double c4,
                const unsigned char* __restrict__ need0,
                const unsigned char* __restrict__ need1, long long total,
                unsigned long long* __restrict__ words, int nth, int s, int steps, int base,
                long long limit, long long re, const unsigned* __restrict__ boff, int native,
                double theta_cap, const double* __restrict__ sums, long long cap,
                long long patch_cap,
                const double* __restrict__ e, long long la, const double* __restrict__ f,
                long long lb, const double* __restrict__ tab) {
  const CertStep st = cert_step(words, nth, s, limit, re);
  const int W = nth + 2, P = cw_step(nth, s), t = threadIdx.x, lane = t & 31;
  const bool more = s + 1 < steps;
  if (!st.run) {
    if (more && blockIdx.x == 0 && t == 0) words[cw_step(nth, s + 1) + 3] = 1;
    return;
  }
  __shared__ unsigned wtot[2][kThreads / 32];
  __shared__ bool last_block;
  unsigned long long* const patch = words + cw_step(nth, steps);
  if (st.work) {
    double theta = 1.0;
    if (native) {
      const double kmax = __longlong_as_double(static_cast<long long>(words[P + 4]));
      theta = kmax > 1.0 ? kmax : 1.0;
      theta = theta < theta_cap ? theta : theta_cap;
    }
    const double fscale = pow2(-fexp), fscale_mixed = pow2(-fexp_mixed);
    long long glo, ghi;
    group_range(total, blockIdx.x, gridDim.x, glo, ghi);
    const long long lo = glo * 1024, hi = ghi * 1024 < total ? ghi * 1024 : total;
    unsigned long long run = boff[blockIdx.x], tested = 0;  // the chunk's first rank
    unsigned long long later = 0;  // (warp) failures past patch_cap, not yet counted
    bool over = false;             // (warp) the count has passed patch_cap
    int parity = 0;
    for (long long c0 = lo; c0 < hi; c0 += 16 * kThreads) {
      const long long i0 = c0 + 16 * t;
      const unsigned bits = i0 < hi ? suspects16<false>(need0, need1, total, i0, base + nth) : 0u;
      unsigned tot;
      const unsigned long long r0 = run + block_scan(__popc(bits), wtot, parity, tot);
      unsigned fail = 0;  // which of the thread's suspects fail
      if (bits) {
        // entry i0's row and column, and rank r0's sample slot and remainder (step >= 1): both
        // carried along the thread's suspects
        const long long i = i0 / n, jj = i0 - i * n;
        unsigned long long slot = st.step == 1 ? r0 : r0 / st.step, rem = r0 - slot * st.step;
        for (unsigned b = bits; b; b &= b - 1) {
          const int h = __ffs(static_cast<int>(b)) - 1;
          long long ii = i, j = jj + h;
          while (j >= n) j -= n, ++ii;
          double lam = entry_lower(static_cast<double>(F[ii * n_p + j]),
                                   mixa[ii] != 0 || mixb[j] != 0, fscale, fscale_mixed, GEMM,
                                   GEMM ? c32[ii * c_pitch + j] : 0.0f, factor, abs_term);
          const bool sampled = rem == 0;
          const double S = sampled ? sums[slot] : 0.0;
          if (native) {
            lam = __dmul_rn(lam, theta);
            if (sampled) {
              const double scale = sums[cap + slot];
              const double own = S > scale ? S : scale;
              lam = own > lam ? own : lam;
            }
          } else if (sampled) {
            lam = S > lam ? S : lam;
          }
          if (!cert_ok(lam, na[ii], p[ii], __dmul_rn(c4, p[ii]), nb[j], q[j], cR, 1.0))
            fail |= 1u << h;
          if (++rem == st.step) rem = 0, ++slot;
        }
      }
      run += tot;
      tested += tot;
      // the warp's failures: their positions in the patch from one atomic
      const unsigned fc = __popc(fail), fx = warp_scan(fc);
      const unsigned wt = __shfl_sync(0xffffffffu, fx, 31);
      if (wt && over) {
        later += wt;
      } else if (wt) {
        unsigned long long at = 0;
        if (lane == 31) at = atomicAdd(words + P + 5, static_cast<unsigned long long>(wt));
        at = __shfl_sync(0xffffffffu, at, 31);
        over = at + wt > static_cast<unsigned long long>(patch_cap);
        unsigned long long pos = at + fx - fc;
        for (unsigned b = fail; b; b &= b - 1, ++pos)
          if (static_cast<long long>(pos) < patch_cap)
            patch[pos] = static_cast<unsigned long long>(i0 + __ffs(static_cast<int>(b)) - 1);
      }
    }
    if (lane == 0 && later) atomicAdd(words + P + 5, later);
    if (t == 0 && tested) atomicAdd(words + P + 6, tested);
  }
  __threadfence();
  __syncthreads();
  if (t == 0) last_block = atomicAdd(words + P + 8, 1ull) == gridDim.x - 1ull;
  __syncthreads();
  if (!last_block) return;
  volatile unsigned long long* const vw = words;
  const unsigned long long fails = vw[P + 5];
  // one count off, and on to the next step: no suspect (where the limit allows none), or no
  // suspect failing
  const bool next = (st.sus == 0 && limit >= 0) || (st.work && fails == 0);
  const bool patched = st.work && fails > 0 && fails <= static_cast<unsigned long long>(patch_cap);
  const int c = static_cast<int>(vw[W + 5]) - (next || patched ? 1 : 0);
  const bool go = next && more && c > 0;
  __syncthreads();  // every thread has read the words
  if (t == 0) {
    vw[W + 5] = static_cast<unsigned long long>(c);
    if (patched) vw[W + 6] = 1, vw[W + 7] = fails;
    if (more) vw[cw_step(nth, s + 1) + 3] = go ? 0ull : 1ull;
  }
  if (go) exact_factors(e, la, f, lb, tab, nth, c - 1, t, blockDim.x, p, q);
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_LINE_INSTANCES(In, CPLX)                                                          \
  template __global__ void line_max_exponent<In, CPLX>(const In*, const In*, long long,        \
                                                       long long, long long, int, int, int, int, \
                                                       int, int, int*);                        \
  template __global__ void bound_operand<In, CPLX>(                                            \
      const In*, const In*, long long, long long, long long, int, int, int, int, int, int, int, \
      const int*, long long*, unsigned*, unsigned long long*, unsigned long long*,              \
      unsigned long long*, double*);
#define EMU_STATS_INSTANCES(CPLX)                                                             \
  EMU_LINE_INSTANCES(double, CPLX)                                                            \
  EMU_LINE_INSTANCES(float, CPLX)                                                             \
  template __global__ void cert_operand<CPLX>(const double*, const double*, long long,        \
                                              long long, long long, int, int, int, int, int,  \
                                              int, int, int, const long long*, double*,       \
                                              unsigned short*);
EMU_STATS_INSTANCES(false)
EMU_STATS_INSTANCES(true)
#define EMU_CERT_INSTANCE(T, GEMM)                                                             \
  template __global__ void cert_entries<T, GEMM>(                                              \
      const T*, const float*, long long, long long, int, int, int, int, int, const double*,     \
      const double*, const double*, const double*, double, double, double, double,              \
      const double*, int, int, const unsigned long long*, const unsigned long long*, int,       \
      unsigned char*, unsigned long long*, const unsigned long long*);
#define EMU_REFINE_INSTANCE(CPLX, In)                                                          \
  template __global__ void refine_suspects<CPLX, In>(                                          \
      const In*, const In*, long long, long long, const In*, const In*, long long, long long,  \
      int, const long long*, const long long*, int, const unsigned char*,                      \
      const unsigned char*, long long, unsigned long long*, int, int, int, long long,          \
      long long, const unsigned*, long long, const unsigned*, long long, int, double, double,   \
      double, double*, long long);
EMU_REFINE_INSTANCE(false, double)
EMU_REFINE_INSTANCE(true, double)
EMU_REFINE_INSTANCE(false, float)
EMU_REFINE_INSTANCE(true, float)
#define EMU_TEST_INSTANCE(T, GEMM)                                                             \
  template __global__ void refine_test<T, GEMM>(                                               \
      const T*, const float*, long long, long long, int, int, int, const unsigned long long*,  \
      const unsigned long long*, double, double, const double*, double*, const double*,        \
      double*, double, double, const unsigned char*, const unsigned char*, long long,          \
      unsigned long long*, int, int, int, int, long long, long long, const unsigned*, int,     \
      double, const double*, long long, long long, const double*, long long, const double*,    \
      long long, const double*);
#define EMU_STATS_F_INSTANCES(T)                                                               \
  template __global__ void bound_max<T>(const T*, long long, int, int, int, int,               \
                                        const unsigned long long*, const unsigned long long*,  \
                                        const unsigned long long*, const unsigned long long*,  \
                                        long long, unsigned long long*, unsigned long long*);  \
  EMU_CERT_INSTANCE(T, false)                                                                  \
  EMU_CERT_INSTANCE(T, true)                                                                   \
  EMU_TEST_INSTANCE(T, false)                                                                  \
  EMU_TEST_INSTANCE(T, true)
EMU_STATS_F_INSTANCES(int)
EMU_STATS_F_INSTANCES(long long)
#endif
