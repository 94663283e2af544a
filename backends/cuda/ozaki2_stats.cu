// Scheme II statistics: the accurate-mode prescale and the certificate that picks the number of
// moduli (backends/cupy.py: ozaki2_prescale, ozaki2_certificate), same values and decisions as
// emulinalg._scaling.ozaki2_prescale and emulinalg._select.ozaki2_moduli_needed.
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
//                      (atomicAdd: exact integers), and per 128 columns the sequential sum
//                      of |re| 2**-e + |im| 2**-e (the l1 norm's partials); one warp per block,
//                      streaming its tiles through shared memory by cp.async, a line per lane
//   bound_max          per line of the bound GEMM F = Ā B̄ the max over the other axis of
//                      U = bound_upper(F, line terms) (atomicMax; _scaling.bound_upper)
//   cert_operand       bfloat16 bits of max(|re|, |im|) 2**-e truncated toward zero, line-major
//                      (B, Rpad, Cp) or k-major (B, Cp, Rpad), as bf16_lower.cu; and per chunk
//                      of columns the sequential sum of |re| 2**-e + |im| 2**-e (the l1 norm)
//   cert_line_terms    per line: the l1 upper bound sum * (1 + (k+2) 2**-52), alpha = 2**(cplx-5)
//                      sqrt(e) from the prescale's line bound
//   cert_entries       per output entry: the lower bound lam of |A||B| from the bound GEMM F
//                      (F 2**-12, 2**-11 complex) or, on the second pass, the larger of that
//                      and the bf16 GEMM's FP32 sums' bound; the smallest count of moduli the
//                      certificate accepts (float64, in _select's operation order, no FMA),
//                      and a histogram of those counts
//   collect_suspects   the flat indices of the entries needing a given count (the suspects),
//                      with the number of their distinct rows and columns
//   refine_suspects    the suspect refinement (_select.refine_moduli): the suspects' float64
//                      sums of normalized magnitude products (one warp per entry) and the
//                      certificate's test one count lower, failures counted
//
// x * 2**p is computed as a multiplication by an exact power of two: one correctly rounded
// operation, the same as ldexp (numpy's and CUDA's), also for subnormal results.

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
  // loads.
  __device__ __forceinline__ void load(const In* __restrict__ pre,
                                       const In* __restrict__ pim, long long base,
                                       long long sr, long long sc, int r0, int c0, int R, int C,
                                       int rows_contiguous) {
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
        re[i] = pre[o + i * step];
        if constexpr (CPLX) im[i] = pim[o + i * step];
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

// Tile rows r0.., columns c0.. of batch b into shared memory (zeros outside R x C).
template <typename In, bool CPLX>
__device__ __forceinline__ void load_tile(Tile<CPLX>& s, const In* __restrict__ re,
                                          const In* __restrict__ im, long long base,
                                          long long sr, long long sc, int r0, int c0, int R,
                                          int C, int rows_contiguous) {
  TileFetch<In, CPLX> f;
  f.load(re, im, base, sr, sc, r0, c0, R, C, rows_contiguous);
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

// 2**p for p in [-1074, 1023].
__device__ __forceinline__ double pow2(int p) {
  return p >= -1022 ? __longlong_as_double(static_cast<long long>(p + 1023) << 52)
                    : __longlong_as_double(1ll << (p + 1074));
}

// RN(|x| 2**p), x * 2**p < 2**8, p in [-1074, 1100]: above 2**1023 the first step is exact.
__device__ __forceinline__ double scale2(double x, int p) {
  if (p > 1023) return __dmul_rn(__dmul_rn(x, pow2(p - 64)), pow2(64));
  return __dmul_rn(x, pow2(p));
}

// floor(v) for 0 <= v < 128 (truncation = floor for v >= 0).
__device__ __forceinline__ int floor_small(double v) { return static_cast<int>(v); }

constexpr long long kBoundMax = 127;  // _scaling.BOUND_MAX
constexpr int kStage = 256;  // rows whose line terms F's passes stage in shared memory

// _scaling.bound_upper for one entry, F + min(c ra, 127 nzb) + min(c cb, 127 nza) + c min(nza,
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
template <typename In, bool CPLX>
__global__ void __launch_bounds__(kThreads)
    line_max_exponent(const In* __restrict__ re, const In* __restrict__ im, long long sb,
                      long long sr, long long sc, int B, int R, int C, int rows_contiguous,
                      int chunk, int* __restrict__ emax) {
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
        load_tile<In, CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous);
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
// chunk, so that the line-major 16-byte reads of 8 lanes cover all 32 banks).
template <typename In, bool CPLX>
struct BoundRing {
  static constexpr int kE = 16 / static_cast<int>(sizeof(In));  // entries per 16-byte chunk
  static constexpr int kLd = kTile + kE;
  static constexpr int kPart = kTile * kLd;  // entries of one part's tile
  static constexpr int kSlot = (CPLX ? 2 : 1) * kPart;
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

// The warp's copies of tile p into `slot` (zeros outside R x C). With `vec` (the contiguous
// axis has stride 1, and every chunk's address is 16-byte aligned) a whole chunk inside the
// operand is one cp.async; other chunks, and every chunk without `vec`, are loaded entry by entry
// and stored at once.
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

// One block is one warp; the grid's warps split the B x ceil(Rpad / 32) x ceil(Cp / 128) chunks
// of 4 tiles (the last of a row may have fewer), taken in the order (b, row tile, chunk), into
// equal contiguous ranges (the host sizes the grid to what the device holds at once), and each
// warp streams its range's tiles through its ring (BoundRing). Lane l computes line r0 + l of
// every tile: writes the shifts s (int64, (B, R)) from the first column tiles, the int8 operand
// (B, Rpad, Cp) (32 bytes per line and tile), and per line: the sum of its entries (sums), of
// its nonzero parts (nz) and of its entries with both parts nonzero (mixed, complex), added
// atomically when the warp leaves the row tile (exact integers, zeroed by the caller), and
// partial (B, ceil(Cp / 128), R): each chunk's float64 sum of |re| 2**-e + |im| 2**-e (e = 5 -
// cplx - s) over its 128 columns: 32 sequential sums of 4 columns, added in order (the same for
// any grid; the line's l1 norm then adds Cp / 128 partials, not Cp / 32). Cp is a multiple of
// 16; rows_contiguous: the lines are the contiguous axis (k-major slots); vec: as bound_fetch.
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
    if (p.ti % kBoundChunk == 0) acc = 0.0;
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      double xr[4], xi[4];
      bound_read4(t, lm, lane, g, xr);
      if constexpr (CPLX) bound_read4(t + G::kPart, lm, lane, g, xi);
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
    if (in_r && (p.ti % kBoundChunk == kBoundChunk - 1 || p.ti == ntiles - 1))
      partial[(static_cast<long long>(p.b) * nch + p.ti / kBoundChunk) * R + r] = acc;
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

// One thread per line of (B, R): norm = (sum of the chunks, in order) * l1fac, alpha = scale *
// sqrt(e).
extern "C" __global__ void __launch_bounds__(kThreads)
    cert_line_terms(const double* __restrict__ partial, int nchunks, int B, int R, double l1fac,
                    const double* __restrict__ e, double scale, double* __restrict__ norm,
                    double* __restrict__ alpha) {
  const long long lines = static_cast<long long>(B) * R;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < lines;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long b = i / R, r = i - b * R;
    double s = 0.0;
#pragma unroll 16
    for (int c = 0; c < nchunks; ++c) s = __dadd_rn(s, partial[(b * nchunks + c) * R + r]);
    norm[i] = __dmul_rn(s, l1fac);
    alpha[i] = __dmul_rn(scale, __dsqrt_rn(e[i]));
  }
}

// _select.magnitude_lower with the bf16 hook: max(float64(c) * factor - abs_term, 0).
__device__ __forceinline__ double gemm_lower(float c, double factor, double abs_term) {
  const double lam = __dsub_rn(__dmul_rn(static_cast<double>(c), factor), abs_term);
  return lam > 0.0 ? lam : 0.0;
}

// An entry's lower bound lam of the line-normalized |A||B|: the bound GEMM's sum F times fs =
// 2**-fexp, or 2**-fexp_mixed where its row or column has an entry with both parts nonzero
// (_select.bound_lower; exact), and with the bf16 GEMM's FP32 sum c (gemm: the second pass) the
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

// The certificate's test of one entry, its terms computed once: the count with threshold t =
// 2**-L_n certifies it iff y (2 G + y Q) <= R with y = t (_select._need_of's test, float64 in
// that operation order, no FMA), from its lower bound lam of the normalized |A||B|; qa = (4 c k)
// alpha_i. Each rounded operation is monotone in t, so the test is too: it passes below some
// threshold and fails above (t > 0). Also run on the CPU (src_amx/ozaki2_stats_host.cpp).
struct CertTest {
  double R, G2, Q;
  __device__ __forceinline__ bool passes(double t) const {
    return __dmul_rn(t, __dadd_rn(G2, __dmul_rn(t, Q))) <= R;
  }
};
__device__ __forceinline__ CertTest cert_test(double lam, double na_i, double alpha_i, double qa,
                                              double nb_j, double beta_j, double cR) {
  return {__dmul_rn(cR, lam),  // TAU 2**-bits lam
          __dmul_rn(2.0, __dadd_rn(__dmul_rn(alpha_i, nb_j), __dmul_rn(beta_j, na_i))),
          __dmul_rn(qa, beta_j)};
}
__device__ __forceinline__ bool cert_ok(double lam, double na_i, double alpha_i, double qa,
                                        double nb_j, double beta_j, double cR, double t) {
  return cert_test(lam, na_i, alpha_i, qa, nb_j, beta_j, cR).passes(t);
}

// The first index in [lo, nth) of the thresholds th (2**-L_n, n = MIN_MODULI.., decreasing)
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

// cert_entries' column terms of batch entry b for the columns jb .. jb + 3 (zeros beyond n).
__device__ __forceinline__ void cert_columns(long long b, int jb, int n,
                                             const double* __restrict__ nb,
                                             const double* __restrict__ beta,
                                             const unsigned long long* __restrict__ mixb,
                                             double (&nbv)[4], double (&bev)[4], bool (&mxb)[4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int j = jb + c;
    nbv[c] = j < n ? nb[b * n + j] : 0.0;
    bev[c] = j < n ? beta[b * n + j] : 0.0;
    mxb[c] = j < n && mixb[b * n + j] != 0;
  }
}

// Block (32, 8), grid (column groups of 128, row chunks of rows_per_block) over the rows (b, i)
// of (B, m) and columns j < n; thread x takes columns j0 + 4x .. j0 + 4x + 3 (16-byte loads).
// F: the bound GEMM's sums (B, m, n_p), int32 or int64; c32 (GEMM pass only): the bf16 GEMM's
// FP32 sums (B, m, c_pitch); n_p and c_pitch multiples of 4, both 16-byte aligned. lam = F
// 2**-fexp (2**-fexp_mixed where mixa[row] or mixb[column] is nonzero: _select.bound_lower), or
// max(that, gemm_lower(c32)). na/alpha (B, m), nb/beta (B, n). thr: the nth thresholds (at
// most 32). Writes need (B, m, n): base + cert_need (base + nth: beyond every count) for the
// beyond entries and those needing the largest count; the others may get a larger count than
// their own, still below the largest (so need depends on the grid; what is read of it does
// not). hist[0, nth + 1]: the block's largest cert_need below nth goes to hist[nth + 1]
// (atomicMax) and the number of its entries there to hist[that value]; the beyond entries are
// added to hist[nth]. So after the grid, hist[nth + 1] is the largest over all certified
// entries and hist[hist[nth + 1]] counts all of them (blocks with a smaller maximum add to
// lower slots).
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
                 unsigned char* __restrict__ need, unsigned long long* __restrict__ hist) {
  __shared__ double th[32];
  __shared__ unsigned long long s_red[3][kThreads / 32];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < 32) th[t] = t < nth ? thr[t] : 0.0;
  __syncthreads();
  const long long rows = static_cast<long long>(B) * m;
  const double fscale = pow2(-fexp), fscale_mixed = pow2(-fexp_mixed);
  int qmax = -1;  // this thread's largest certified value, its entries, the beyond entries
  unsigned long long at_max = 0, out = 0;
  const int jb = blockIdx.x * 128 + 4 * threadIdx.x;
  const bool packed = (n & 3) == 0;  // need's 4 bytes in one store
  const long long rbeg = static_cast<long long>(blockIdx.y) * rows_per_block;
  const long long rend = rbeg + rows_per_block < rows ? rbeg + rows_per_block : rows;
  long long bend = 0;  // the column terms below are those of rows < bend
  double nbv[4] = {}, bev[4] = {};
  bool mxb[4] = {};
  // An int32 F's first pass runs 4 blocks per SM, in 64 registers: its column terms wait in
  // shared memory (each thread reads back its own), not in 16 registers.
  constexpr bool kSharedCols = sizeof(T) == 4 && !GEMM;
  __shared__ double s_nb[kSharedCols ? 4 : 1][kSharedCols ? kThreads : 1];
  __shared__ double s_be[kSharedCols ? 4 : 1][kSharedCols ? kThreads : 1];
  const auto share_columns = [&] {
    if constexpr (kSharedCols)
      for (int c = 0; c < 4; ++c) s_nb[c][t] = nbv[c], s_be[c][t] = bev[c];
  };
  // The rows [rbeg, rend) with stride 8, kStage rows at a time: their line terms go to shared
  // memory first, and F (and c32) comes through the ring D - 1 rows ahead of the arithmetic,
  // so the loads in flight (which bound the pass) are not held up by the line terms.
  __shared__ double s_na[kStage], s_al[kStage];
  __shared__ bool s_mx[kStage];
  constexpr int D = kDepth<T>;
  __shared__ uint4 fring[D][kThreads * kWords<T>];
  __shared__ uint4 cring[GEMM ? D : 1][GEMM ? kThreads : 1];
  uint4* const fmine = fring[0] + t * kWords<T>;  // slot d: fmine + d * kThreads * kWords<T>
  uint4* const cmine = cring[0] + t;              // (GEMM) slot d: cmine + d * kThreads
  long long row = rbeg + threadIdx.y;
  const long long step = blockDim.y;
  if (row < rend) {  // the first rows' column terms, loaded while the line terms are staged
    bend = (row / m + 1) * m;
    cert_columns(row / m, jb, n, nb, beta, mixb, nbv, bev, mxb);
    share_columns();
  }
  for (int d = 0; d < D - 1; ++d) {
    const long long r = row + d * step;
    if (r < rend && jb < n) {
      fetch4(fmine + d * kThreads * kWords<T>, F + r * n_p + jb);
      if constexpr (GEMM) fetch4(cmine + d * kThreads, c32 + r * c_pitch + jb);
    }
    cp_async_commit();
  }
  int slot = 0;
  for (long long s0 = rbeg; s0 < rend; s0 += kStage) {
    const long long s1 = rend - s0 < kStage ? rend : s0 + kStage;
    __syncthreads();  // the previous rows' terms have been read
    for (long long i = t; i < s1 - s0; i += kThreads) {
      s_na[i] = na[s0 + i];
      s_al[i] = alpha[s0 + i];
      s_mx[i] = mixa[s0 + i] != 0;
    }
    __syncthreads();
    for (; row < s1; row += step) {
      const long long ahead = row + (D - 1) * step;
      const int back = slot == 0 ? D - 1 : slot - 1;  // the slot read last time
      if (ahead < rend && jb < n) {
        fetch4(fmine + back * kThreads * kWords<T>, F + ahead * n_p + jb);
        if constexpr (GEMM) fetch4(cmine + back * kThreads, c32 + ahead * c_pitch + jb);
      }
      cp_async_commit();
      cp_async_wait<D - 1>();  // this row's group has landed
      T fv[4];
      float cv[4] = {};
      load4(reinterpret_cast<const T*>(fmine + slot * kThreads * kWords<T>), fv);
      if constexpr (GEMM) load4(reinterpret_cast<const float*>(cmine + slot * kThreads), cv);
      slot = slot + 1 == D ? 0 : slot + 1;
      if (row >= bend) {  // a new batch entry: its column terms
        bend = (row / m + 1) * m;
        cert_columns(row / m, jb, n, nb, beta, mixb, nbv, bev, mxb);
        share_columns();
      }
      const double na_i = s_na[row - s0], alpha_i = s_al[row - s0];
      const double qa = __dmul_rn(c4, alpha_i);  // (4 c k) alpha_i
      const bool mxa = s_mx[row - s0];
      unsigned word = 0;
      // An entry certified by this thread's largest count so far (qm, as of the row's start:
      // the row's 4 entries are tested independently) minus one is neither beyond nor among
      // the largest: store that count (an upper bound of its own), skip the search. (Its own
      // count when that is qm: one more test.) An entry above qm tests the next count first (a
      // thread's largest mostly grows by one: the lanes of a warp seldom wait on one lane's
      // bisection), then bisects; the thread's first entry bisects (all lanes at once).
      const int qm = qmax;
      int qs[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        qs[c] = -1;  // beyond n: none
        if (jb + c >= n) continue;
        const double lam = entry_lower(static_cast<double>(fv[c]), mxa || mxb[c], fscale,
                                       fscale_mixed, GEMM, cv[c], factor, abs_term);
        double nb_c = nbv[c], be_c = bev[c];
        if constexpr (kSharedCols) nb_c = s_nb[c][t], be_c = s_be[c][t];
        const CertTest ct = cert_test(lam, na_i, alpha_i, qa, nb_c, be_c, cR);
        int q;
        if (qm > 0 && ct.passes(th[qm - 1]))
          q = qm - 1;
        else if (qm >= 0 && ct.passes(th[qm]))
          q = qm;
        else if (qm >= 0 && qm + 1 < nth && ct.passes(th[qm + 1]))
          q = qm + 1;
        else
          q = cert_first(ct, th, qm >= 0 ? qm + 2 : 0, nth);
        qs[c] = q;
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int q = qs[c];
        if (q < 0) continue;
        const unsigned v = static_cast<unsigned>(base + q) & 0xffu;
        if (packed)
          word |= v << (8 * c);
        else
          need[row * n + jb + c] = static_cast<unsigned char>(v);
        if (q == nth) {
          ++out;
        } else if (q > qmax) {
          qmax = q;
          at_max = 1;
        } else if (q == qmax) {
          ++at_max;
        }
      }
      if (packed && jb < n) *reinterpret_cast<unsigned*>(need + row * n + jb) = word;
    }
  }
  cp_async_wait<0>();
  // The block's largest count, its entries and the beyond entries: by warp shuffles, then the
  // 8 warps in order by one thread.
  unsigned long long q2 = static_cast<unsigned long long>(qmax + 1);  // 0: none certified
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long oq = __shfl_down_sync(0xffffffffu, q2, o);
    const unsigned long long oc = __shfl_down_sync(0xffffffffu, at_max, o);
    out += __shfl_down_sync(0xffffffffu, out, o);
    at_max = oq > q2 ? oc : oq == q2 ? at_max + oc : at_max;
    q2 = oq > q2 ? oq : q2;
  }
  if (threadIdx.x == 0) {
    s_red[0][threadIdx.y] = q2;
    s_red[1][threadIdx.y] = at_max;
    s_red[2][threadIdx.y] = out;
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

// Whether cert_entries' histogram allows the suspect refinement: a largest certified count
// above the smallest (index top > 0) held by at most cap entries, and, unless this is the last
// pass (last = 0: a pass with beyond entries is followed by another), no entry beyond.
__device__ __forceinline__ bool refinable(const unsigned long long* hist, int nth, long long cap,
                                          int last) {
  const unsigned long long top = hist[nth + 1];
  return top > 0 && hist[top] <= static_cast<unsigned long long>(cap) && (last || !hist[nth]);
}

// The suspects of the refinement (B = 1), when refinable: the flat indices of the entries of
// need (m, n) at the largest count (base + hist[nth + 1]), in any order, the first cap to idx;
// stat[0] counts them all, stat[1] and stat[2] their distinct rows and columns (row_mark (m),
// col_mark (n), zeroed by the caller: the thread that marks a line first counts it).
extern "C" __global__ void __launch_bounds__(kThreads)
    collect_suspects(const unsigned char* __restrict__ need, long long total, int n,
                     const unsigned long long* __restrict__ hist, int nth, int last, int base,
                     long long* __restrict__ idx, long long cap, unsigned* __restrict__ row_mark,
                     unsigned* __restrict__ col_mark, unsigned long long* __restrict__ stat) {
  if (!refinable(hist, nth, cap, last)) return;
  const int value = base + static_cast<int>(hist[nth + 1]);
  // 16 entries per step, one 16-byte load (need: the caller's allocation, 16-byte aligned; the
  // suspects are rare, the scan is the cost); threads past the last full group take the rest
  const long long groups = total >> 4;
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  for (long long g = first; g < groups + 16; g += step) {
    unsigned char v[16];
    long long i0;
    int cnt;
    if (g < groups) {
      i0 = g << 4;
      cnt = 16;
      const uint4 w = reinterpret_cast<const uint4*>(need)[g];
      const unsigned words[4] = {w.x, w.y, w.z, w.w};
      for (int h = 0; h < 16; ++h)
        v[h] = static_cast<unsigned char>(words[h >> 2] >> (8 * (h & 3)));
    } else {  // thread g - groups: entry 16 groups + (g - groups), if there is one
      i0 = (groups << 4) + (g - groups);
      cnt = i0 < total ? 1 : 0;
      if (cnt) v[0] = need[i0];
    }
    for (int h = 0; h < cnt; ++h) {
      if (v[h] != value) continue;
      const long long i = i0 + h;
      const unsigned long long at = atomicAdd(stat, 1ull);
      if (static_cast<long long>(at) < cap) idx[at] = i;
      const long long r = i / n, c = i - r * n;
      if (atomicExch(row_mark + r, 1u) == 0u) atomicAdd(stat + 1, 1ull);
      if (atomicExch(col_mark + c, 1u) == 0u) atomicAdd(stat + 2, 1ull);
    }
  }
}

// The suspect refinement on the device (_select.refine_moduli with refine_certifies), B = 1,
// when refinable: one warp per suspect idx[s], s < min(stat[0], cap) (entry (i, j) of the
// m x n output):
//   S   = float64 sum over k of |a_ik| 2**-ea_i |b_kj| 2**-eb_j (|x| = max(|re|, |im|),
//         ea_i = 5 - cplx - shift_a[i]); lane l sums terms l, l + 32, ... in order, then the
//         lanes are added by shuffles; its rounding removed: max(S native_factor - tiny, 0);
//   lam = max(the entry's lower bound as cert_entries makes it, S);
// and an entry that cert_ok does not certify at the threshold of one count lower (th[top - 1])
// adds one to stat[3]. Every warp takes the same number of steps (the CPU build's shuffle
// needs the block).
template <typename T, bool GEMM, bool CPLX, typename In>
__global__ void __launch_bounds__(kThreads)
    refine_suspects(const In* __restrict__ are, const In* __restrict__ aim, long long asr,
                    long long asc, const In* __restrict__ bre,
                    const In* __restrict__ bim, long long bsr, long long bsc, int k,
                    const long long* __restrict__ shift_a, const long long* __restrict__ shift_b,
                    const long long* __restrict__ idx, long long cap, int n,
                    const T* __restrict__ F, const float* __restrict__ c32, long long n_p,
                    long long c_pitch, int fexp, int fexp_mixed,
                    const unsigned long long* __restrict__ mixa,
                    const unsigned long long* __restrict__ mixb, double factor, double abs_term,
                    const double* __restrict__ na, const double* __restrict__ alpha,
                    const double* __restrict__ nb, const double* __restrict__ beta,
                    double native_factor, double tiny, double cR, double c4,
                    const double* __restrict__ th, int nth, int last,
                    const unsigned long long* __restrict__ hist,
                    unsigned long long* __restrict__ stat) {
  if (!refinable(hist, nth, cap, last)) return;
  const long long found = static_cast<long long>(stat[0]);
  const int count = static_cast<int>(found < cap ? found : cap);
  const double t = th[hist[nth + 1] - 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int base = blockIdx.x * warps; base < count; base += gridDim.x * warps) {
    const int s = base + warp;
    long long i = 0, j = 0;
    double acc = 0.0;
    if (s < count) {
      i = idx[s] / n;
      j = idx[s] - i * n;
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
        acc = __dadd_rn(acc, __dmul_rn(scale2(x, pa), scale2(y, pb)));
      }
    }
    for (int o = 16; o > 0; o >>= 1) acc = __dadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, o));
    if (s < count && lane == 0) {
      double lam = entry_lower(static_cast<double>(F[i * n_p + j]), mixa[i] != 0 || mixb[j] != 0,
                               pow2(-fexp), pow2(-fexp_mixed), GEMM,
                               GEMM ? c32[i * c_pitch + j] : 0.0f, factor, abs_term);
      double S = __dsub_rn(__dmul_rn(acc, native_factor), tiny);
      S = S > 0.0 ? S : 0.0;
      lam = S > lam ? S : lam;
      const double qa = __dmul_rn(c4, alpha[i]);
      if (!cert_ok(lam, na[i], alpha[i], qa, nb[j], beta[j], cR, t)) atomicAdd(stat + 3, 1ull);
    }
  }
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_LINE_INSTANCES(In, CPLX)                                                          \
  template __global__ void line_max_exponent<In, CPLX>(const In*, const In*, long long,        \
                                                       long long, long long, int, int, int, int, \
                                                       int, int*);                             \
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
      unsigned char*, unsigned long long*);
#define EMU_REFINE_INSTANCE(T, GEMM, CPLX, In)                                                 \
  template __global__ void refine_suspects<T, GEMM, CPLX, In>(                                 \
      const In*, const In*, long long, long long, const In*, const In*, long long, long long,  \
      int, const long long*, const long long*, const long long*, long long, int, const T*,     \
      const float*, long long, long long, int, int, const unsigned long long*,                 \
      const unsigned long long*, double, double, const double*, const double*, const double*,  \
      const double*, double, double, double, double, const double*, int, int,                  \
      const unsigned long long*, unsigned long long*);
#define EMU_REFINE_INSTANCES(T, In)                                                            \
  EMU_REFINE_INSTANCE(T, false, false, In)                                                     \
  EMU_REFINE_INSTANCE(T, false, true, In)                                                      \
  EMU_REFINE_INSTANCE(T, true, false, In)                                                      \
  EMU_REFINE_INSTANCE(T, true, true, In)
#define EMU_STATS_F_INSTANCES(T)                                                               \
  template __global__ void bound_max<T>(const T*, long long, int, int, int, int,               \
                                        const unsigned long long*, const unsigned long long*,  \
                                        const unsigned long long*, const unsigned long long*,  \
                                        long long, unsigned long long*, unsigned long long*);  \
  EMU_CERT_INSTANCE(T, false)                                                                  \
  EMU_CERT_INSTANCE(T, true)                                                                   \
  EMU_REFINE_INSTANCES(T, double)                                                              \
  EMU_REFINE_INSTANCES(T, float)
EMU_STATS_F_INSTANCES(int)
EMU_STATS_F_INSTANCES(long long)
#endif
