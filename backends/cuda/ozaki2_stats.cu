// Scheme II statistics: the accurate-mode prescale and the certificate that picks the number of
// moduli (backends/cupy.py: ozaki2_prescale, ozaki2_certificate), same values and decisions as
// emulinalg._scaling.ozaki2_prescale and emulinalg._select.ozaki2_moduli_needed.
//
// Operands are logical (B, R, C) float64 arrays with element strides (sb, sr, sc), as in
// ozaki2_residues.cu: rows are the lines that carry a shift (rows of A, columns of B), C is the
// contraction axis k. Blocks of 256 threads move 32 x 32 tiles through shared memory (reads
// coalesced along whichever axis is contiguous); per-line reductions are done by the block's
// first warp, one thread per line, walking the tile's 32 columns in order, so every sum has a
// fixed order (the results do not depend on the grid or on timing).
//
//   line_max_exponent  per line floor(log2 max(|re|, |im|)) (atomicMax; INT_MIN for a zero line)
//   bound_operand      s = 5 - e - cplx per line, and int8 ceil(RN(|re| 2**s)) (+ the same of
//                      |im|), <= 64, in the INT8 GEMM's layout (B, Rpad, Cp), zero-padded
//   cert_operand       bfloat16 bits of max(|re|, |im|) 2**-e truncated toward zero, line-major
//                      (B, Rpad, Cp) or k-major (B, Cp, Rpad), as bf16_lower.cu; and per chunk
//                      of columns the sequential sum of |re| 2**-e + |im| 2**-e (the l1 norm)
//   cert_line_terms    per line: the l1 upper bound sum * (1 + (k+2) 2**-52), alpha = 2**(cplx-5)
//                      sqrt(e) from the prescale's line bound
//   cert_entries       per output entry: the lower bound lam of |A||B| from the bf16 GEMM's FP32
//                      sums, the certificate's y (float64, in _select's operation order, no FMA)
//                      and beyond = y < 2**-L_max; the min of y over the other entries
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

// Tile rows r0.., columns c0.. of batch b (zeros outside R x C), as ozaki2_residues.cu loads.
template <bool CPLX>
__device__ __forceinline__ void load_tile(Tile<CPLX>& s, const double* __restrict__ re,
                                          const double* __restrict__ im, long long base,
                                          long long sr, long long sc, int r0, int c0, int R,
                                          int C, int rows_contiguous) {
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kTile * kTile / kThreads; ++i) {
    const int a = t & (kTile - 1), z = (t >> 5) + (kThreads / kTile) * i;
    const int rr = rows_contiguous ? a : z, cc = rows_contiguous ? z : a;
    const int r = r0 + rr, c = c0 + cc;
    double x = 0.0, y = 0.0;
    if (r < R && c < C) {
      const long long o = base + r * sr + c * sc;
      x = re[o];
      if constexpr (CPLX) y = im[o];
    }
    s.re[rr][cc] = x;
    if constexpr (CPLX) s.im[rr][cc] = y;
  }
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

// ceil(v) for 0 <= v <= 64.
__device__ __forceinline__ int ceil_small(double v) {
  const int i = static_cast<int>(v);  // truncation = floor for v >= 0
  return i + (static_cast<double>(i) < v ? 1 : 0);
}

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
template <bool CPLX>
__global__ void __launch_bounds__(kThreads)
    line_max_exponent(const double* __restrict__ re, const double* __restrict__ im, long long sb,
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
        load_tile<CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous);
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

// Grid (Cp / 32, tiles of Rpad, B), as ozaki2_residues.cu. Writes the shifts s (int64, (B, R))
// from the blocks of the first column tile.
template <bool CPLX>
__global__ void __launch_bounds__(kThreads)
    bound_operand(const double* __restrict__ re, const double* __restrict__ im, long long sb,
                  long long sr, long long sc, int B, int R, int C, int Rpad, int Cp,
                  int rows_contiguous, const int* __restrict__ emax, long long* __restrict__ shift,
                  unsigned* __restrict__ out) {
  __shared__ Tile<CPLX> tile;
  __shared__ int tsh[kTile];
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * kTile;
  for (int b = blockIdx.z; b < B; b += gridDim.z) {
    for (int r0 = blockIdx.y * kTile; r0 < Rpad; r0 += gridDim.y * kTile) {
      __syncthreads();
      load_tile<CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous);
      if (t < kTile) {
        const int r = r0 + t;
        const int e = r < R ? emax[static_cast<long long>(b) * R + r] : kIntMin;
        const int s = 5 - (e == kIntMin ? 0 : e) - (CPLX ? 1 : 0);
        tsh[t] = s;
        if (blockIdx.x == 0 && r < R) shift[static_cast<long long>(b) * R + r] = s;
      }
      __syncthreads();
      const int rr = t >> 3, cc = 4 * (t & 7);
      const int r = r0 + rr, c = c0 + cc;
      if (r >= Rpad || c >= Cp) continue;
      int v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = ceil_small(scale2(abs_of(tile.re[rr][cc + j]), tsh[rr]));
        if constexpr (CPLX) v[j] += ceil_small(scale2(abs_of(tile.im[rr][cc + j]), tsh[rr]));
      }
      out[((static_cast<long long>(b) * Rpad + r) * Cp + c) >> 2] = pack4(v[0], v[1], v[2], v[3]);
    }
  }
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
        load_tile<CPLX>(tile, re, im, b * sb, sr, sc, r0, c0, R, C, rows_contiguous);
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
    for (int c = 0; c < nchunks; ++c) s = __dadd_rn(s, partial[(b * nchunks + c) * R + r]);
    norm[i] = __dmul_rn(s, l1fac);
    alpha[i] = __dmul_rn(scale, __dsqrt_rn(e[i]));
  }
}

// The certificate's y of one entry (_select.ozaki2_certified_y after _select.magnitude_lower's
// factor and term, float64 in that operation order, no FMA; +inf where the entry is exact):
// c the lower-bound GEMM's FP32 sum, qa = (4 c k) alpha_i. Also run on the CPU
// (src_amx/ozaki2_host.cpp).
__device__ __forceinline__ double cert_y(float c, double na_i, double alpha_i, double qa,
                                         double nb_j, double beta_j, double factor,
                                         double abs_term, double cR) {
  const double inf = __longlong_as_double(0x7ff0000000000000ll);
  // _select.magnitude_lower with the bf16 hook: max(float64(c) * factor - abs_term, 0)
  double lam = __dsub_rn(__dmul_rn(static_cast<double>(c), factor), abs_term);
  lam = lam > 0.0 ? lam : 0.0;
  const double R = __dmul_rn(cR, lam);  // TAU 2**-bits lam
  const double G = __dadd_rn(__dmul_rn(alpha_i, nb_j), __dmul_rn(beta_j, na_i));
  const double Q = __dmul_rn(qa, beta_j);
  const double disc = __dadd_rn(__dmul_rn(__dmul_rn(4.0, G), G), __dmul_rn(__dmul_rn(4.0, Q), R));
  const double denom = __dadd_rn(__dmul_rn(2.0, G), __dsqrt_rn(disc));
  return denom == 0.0 ? inf : __ddiv_rn(__dmul_rn(2.0, R), denom);
}

// Block (32, 8): x walks the columns j < n, y the rows (b, i) of (B, m). c32: the bf16 GEMM's
// FP32 sums (B, m, n_p). na/alpha (B, m), nb/beta (B, n). Writes beyond (B, m, n) and lowers
// *ymin (the bits of a double >= 0; all ones: no entry is certified) to the min of y over the
// entries not beyond.
extern "C" __global__ void __launch_bounds__(kThreads)
    cert_entries(const float* __restrict__ c32, long long n_p, int B, int m, int n,
                 const double* __restrict__ na, const double* __restrict__ alpha,
                 const double* __restrict__ nb, const double* __restrict__ beta, double factor,
                 double abs_term, double cR, double c4, double thr,
                 unsigned char* __restrict__ beyond, unsigned long long* __restrict__ ymin) {
  __shared__ unsigned long long red[kThreads];
  const long long rows = static_cast<long long>(B) * m;
  unsigned long long best = ~0ull;
  for (long long row = blockIdx.y * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<long long>(gridDim.y) * blockDim.y) {
    const long long b = row / m;
    const double na_i = na[row], alpha_i = alpha[row];
    const double qa = __dmul_rn(c4, alpha_i);  // (4 c k) alpha_i
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
      const double y = cert_y(c32[row * n_p + j], na_i, alpha_i, qa, nb[b * n + j],
                              beta[b * n + j], factor, abs_term, cR);
      const bool out = y < thr;
      beyond[row * n + j] = out ? 1 : 0;
      if (!out) {
        const unsigned long long yb = static_cast<unsigned long long>(__double_as_longlong(y));
        best = yb < best ? yb : best;  // y >= +0: the bits order as the values
      }
    }
  }
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  red[t] = best;
  for (int h = kThreads / 2; h > 0; h >>= 1) {
    __syncthreads();
    if (t < h && red[t + h] < red[t]) red[t] = red[t + h];
  }
  if (t == 0 && red[0] != ~0ull) atomicMin(ymin, red[0]);
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_STATS_INSTANCES(CPLX)                                                             \
  template __global__ void line_max_exponent<CPLX>(const double*, const double*, long long,   \
                                                   long long, long long, int, int, int, int,  \
                                                   int, int*);                                \
  template __global__ void bound_operand<CPLX>(const double*, const double*, long long,       \
                                               long long, long long, int, int, int, int, int, \
                                               int, const int*, long long*, unsigned*);       \
  template __global__ void cert_operand<CPLX>(const double*, const double*, long long,        \
                                              long long, long long, int, int, int, int, int,  \
                                              int, int, int, const long long*, double*,       \
                                              unsigned short*);
EMU_STATS_INSTANCES(false)
EMU_STATS_INSTANCES(true)
#endif
