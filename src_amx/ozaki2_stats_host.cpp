// The statistics that choose a level's number of moduli (the accurate-mode prescale and the
// per-entry certificate) on the CPU, from the CUDA sources of the cupy backend's kernels
// (src_cuda/ozaki2_stats.cu: exponent_of, scale2, floor_small, bound_upper, entry_lower,
// cert_need): the per-entry arithmetic is written once. Real or complex operands (magnitudes
// max(|re|, |im|), bounds floor(|re| 2**(s+1)) + floor(|im| 2**(s+1)), norms of |re| + |im|);
// OpenMP loops walk whichever axis is contiguous.
//
//   bound_operand  shifts, int8 bound operand and its line terms (sums, nonzero parts, norms)
//   bound_max      e, f from the bound GEMM F = Ā B̄ (row / column maxima of U, / 4)
//   cert_operand   float32 magnitudes for the lower-bound GEMM (only when F leaves entries beyond)
//   cert_entries   the certificate per entry from F (and that GEMM's sums on the second pass);
//                  with one threshold and the exact line factors, the exact step's test
//   bf16_lower     bfloat16 truncations toward zero (the magnitude bound's tile GEMM operands)
//   refine_step    a step of the suspect refinement: the suspects, a sample's dot products of
//                  magnitudes, every suspect's test one count lower
//
// Same values as emulinalg.algorithm.scaling.ozaki2_prescale (exactly) and the same decisions as
// emulinalg.algorithm.certificate.ozaki2_moduli_needed (its float32 lower bound; the norms' sums
// are taken in another order, upper bounds both) --
// tests/backends/amx/test_amx_host_certificate.py.
#include "cuda_host.hpp"
#include "host_loops.hpp"

// Declared for the kernels' text, never called here (no kernel runs in this file).
inline void __syncthreads() {}
inline int atomicMax(int*, int v) { return v; }
inline unsigned long long atomicMin(unsigned long long*, unsigned long long v) { return v; }
inline unsigned long long atomicMax(unsigned long long*, unsigned long long v) { return v; }
inline unsigned long long atomicAdd(unsigned long long*, unsigned long long v) { return v; }
inline unsigned atomicExch(unsigned*, unsigned v) { return v; }
inline unsigned long long __shfl_down_sync(unsigned, unsigned long long v, int) { return v; }
inline double __shfl_down_sync(unsigned, double v, int) { return v; }
inline unsigned __shfl_down_sync(unsigned, unsigned v, int) { return v; }
inline unsigned __shfl_up_sync(unsigned, unsigned v, int) { return v; }
inline unsigned __shfl_sync(unsigned, unsigned v, int) { return v; }
inline long long __shfl_sync(unsigned, long long v, int) { return v; }
inline unsigned long long __shfl_sync(unsigned, unsigned long long v, int) { return v; }
inline unsigned __ballot_sync(unsigned, bool p) { return p; }

#define __CUDACC_RTC__  // the source's explicit kernel instantiations are for nvcc only
#include "ozaki2_stats.cu"  // src_cuda/ (include path)
#undef __CUDACC_RTC__

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

#ifdef _OPENMP
inline int team_size() { return omp_get_num_threads(); }
inline int team_rank() { return omp_get_thread_num(); }
inline int omp_max_threads() { return omp_get_max_threads(); }
#else
inline int team_size() { return 1; }
inline int team_rank() { return 0; }
inline int omp_max_threads() { return 1; }
#endif

// The imaginary part beside re (same shape), or none: its data pointer and element strides.
template <class T = double>
using Imag = emu_host::Operand<T>;
using emu_host::imag_part;
using emu_host::operand_part;

// A product's operand parts as the refinement reads them (A, B and their imaginary parts, or
// none), float64 or float32, kept alive here.
template <class T>
struct Parts {
  py::array_t<T> keep[4];
  emu_host::Operand<T> a, b, ya, yb;
  Parts(const py::object& ar, const py::object& ai, const py::object& br, const py::object& bi,
        const char* who)
      : a(operand_part<T>(ar, who, keep[0])), b(operand_part<T>(br, who, keep[1])),
        ya(imag_part<T>(ai, keep[0], who, keep[2])), yb(imag_part<T>(bi, keep[1], who, keep[3])) {}
  Parts() = default;
};

// ---- bound_operand's passes, vectorized: two reads of each line (its largest magnitude, then
// its terms). A line along memory is read twice by one thread (8192 float64 are 64 KiB: the
// second read comes from L2); lines across memory go kBoundLines at a time (1 KiB of each row
// of memory), their accumulators one per line. The l1 and squares sums of a line
// along memory are kept in kLanes partial sums (any order: certificate_plan.norms_from_sums), so
// every loop vectorizes; each line is one thread's, in a fixed order: no atomics, and the same
// sums for any thread count.
constexpr int kLanes = 8;
constexpr int kBoundLines = 128;

// Lines per task of a pass over R lines across memory: up to kBoundLines (whole rows of memory
// read in long runs), fewer (down to 16) where that would leave threads idle; a line's sums
// do not depend on it.
inline int block_width(int R) {
  const long long per = (static_cast<long long>(R) + 4ll * omp_max_threads() - 1) /
                        (4ll * omp_max_threads());
  return static_cast<int>(std::min<long long>(kBoundLines, std::max(16ll, (per + 15) / 16 * 16)));
}
using u64 = unsigned long long;

// scale2(x, p) = (x f[0]) f[1], both powers of two (src_cuda/ozaki2_stats.cu's scale2).
struct Scale2 {
  double f0, f1;
  explicit Scale2(int p) : f0(p > 1023 ? emu_host::pow2(p - 64) : emu_host::pow2(p)),
                           f1(p > 1023 ? emu_host::pow2(64) : 1.0) {}
};

// The double of the bits of a non-negative value (ozaki2_stats.cu's abs_bits, inverted).
inline double from_bits(u64 b) { return __longlong_as_double(static_cast<long long>(b)); }

// The largest |x| (as bits) of a line of C entries at stride sx.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) u64 line_max_bits(
    const T* __restrict__ x, long long sx, int C) {
  u64 m[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= C; c += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const u64 b = abs_bits(static_cast<double>(x[(c + j) * sx]));
      m[j] = b > m[j] ? b : m[j];
    }
  for (; c < C; ++c) m[0] = std::max(m[0], abs_bits(static_cast<double>(x[c * sx])));
  u64 r = 0;
  for (int j = 0; j < kLanes; ++j) r = std::max(r, m[j]);
  return r;
}

// m[l] = max(m[l], |x[l sx]|) (as bits) for l < L: one entry of each of L lines across memory.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void across_max_bits(
    const T* __restrict__ x, long long sx, int L, u64* __restrict__ m) {
  for (int l = 0; l < L; ++l) {
    const u64 b = abs_bits(static_cast<double>(x[l * sx]));
    m[l] = b > m[l] ? b : m[l];
  }
}

// One line's accumulated terms.
struct LineTerms {
  long long sum = 0, nz = 0, mixed = 0;
  double l1 = 0.0, sq = 0.0;
};

// A line's partial sums: entry c in lane c % kLanes, the tail past the last whole group of
// kLanes in lane 0, added up in lane order (so the line's l1 and sq do not depend on how the
// lanes were filled: line_terms, line_terms_avx512).
struct LaneSums {
  alignas(64) long long sum[kLanes] = {}, nz[kLanes] = {}, mixed[kLanes] = {};
  alignas(64) double l1[kLanes] = {}, sq[kLanes] = {};
  // the entry x (y: its imaginary part, or null) into lane j, its int8 bound to *out
  template <class T>
  void add(const T* x, const T* y, Scale2 up, Scale2 dn, signed char* out, int j) {
    const double a = abs_of(static_cast<double>(*x));
    int b = static_cast<int>((a * up.f0) * up.f1);  // floor: the value is in [0, 128)
    long long z = a != 0.0;
    double l = (a * dn.f0) * dn.f1;
    if (y != nullptr) {
      const double w = abs_of(static_cast<double>(*y));
      b += static_cast<int>((w * up.f0) * up.f1);
      z += w != 0.0;
      mixed[j] += (a != 0.0) & (w != 0.0);
      l = l + (w * dn.f0) * dn.f1;
    }
    *out = static_cast<signed char>(b);
    sum[j] += b;
    nz[j] += z;
    l1[j] = l1[j] + l;
    sq[j] = sq[j] + l * l;
  }
  void into(LineTerms& lt) const {
    for (int j = 0; j < kLanes; ++j) {
      lt.sum += sum[j];
      lt.nz += nz[j];
      lt.mixed += mixed[j];
      lt.l1 = lt.l1 + l1[j];
      lt.sq = lt.sq + sq[j];
    }
  }
};

// A line along memory: its int8 bounds (out, stride so) and terms; y (or null) its imaginary part.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void line_terms(
    const T* __restrict__ x, long long sx, const T* __restrict__ y, long long sy,
    int C, Scale2 up, Scale2 dn, signed char* __restrict__ out, long long so, LineTerms& lt) {
  LaneSums ls;
  int c = 0;
  for (; c + kLanes <= C; c += kLanes)
    for (int j = 0; j < kLanes; ++j)
      ls.add(x + (c + j) * sx, y ? y + (c + j) * sy : nullptr, up, dn, out + (c + j) * so, j);
  for (; c < C; ++c) ls.add(x + c * sx, y ? y + c * sy : nullptr, up, dn, out + c * so, 0);
  ls.into(lt);
}

// |x| of 8 entries along memory (those of mask v; zeros in the others), as float64.
template <class T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d abs8(
    const T* p, __mmask8 v = 0xff) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_abs_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(v, p)));
  else
    return _mm512_abs_pd(_mm512_maskz_loadu_pd(v, p));
}

// line_terms on AVX-512 (F, DQ, BW, VL) for a line along memory written along memory (sx, sy,
// so = 1): lane j of each vector is LaneSums' lane j, the same sums, the same bits.
template <class T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void line_terms_avx512(
    const T* __restrict__ x, const T* __restrict__ y, int C, Scale2 up, Scale2 dn,
    signed char* __restrict__ out, LineTerms& lt) {
  static_assert(kLanes == 8, "one vector of float64 partial sums");
  const __m512d u0 = _mm512_set1_pd(up.f0), u1 = _mm512_set1_pd(up.f1);
  const __m512d d0 = _mm512_set1_pd(dn.f0), d1 = _mm512_set1_pd(dn.f1);
  const __m512d zero = _mm512_setzero_pd();
  const __m512i one = _mm512_set1_epi64(1);
  __m512i sum = _mm512_setzero_si512(), nz = sum, mixed = sum;
  __m512d l1 = zero, sq = zero;
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    const __m512d a = abs8(x + c);
    __m256i b = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_mul_pd(a, u0), u1));
    const __mmask8 za = _mm512_cmp_pd_mask(a, zero, _CMP_NEQ_UQ);  // a != 0.0
    __m512d l = _mm512_mul_pd(_mm512_mul_pd(a, d0), d1);
    nz = _mm512_mask_add_epi64(nz, za, nz, one);
    if (y != nullptr) {
      const __m512d w = abs8(y + c);
      b = _mm256_add_epi32(b, _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_mul_pd(w, u0), u1)));
      const __mmask8 zw = _mm512_cmp_pd_mask(w, zero, _CMP_NEQ_UQ);
      nz = _mm512_mask_add_epi64(nz, zw, nz, one);
      mixed = _mm512_mask_add_epi64(mixed, za & zw, mixed, one);
      l = _mm512_add_pd(l, _mm512_mul_pd(_mm512_mul_pd(w, d0), d1));
    }
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm256_cvtepi32_epi8(b));
    sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(b));
    l1 = _mm512_add_pd(l1, l);
    sq = _mm512_add_pd(sq, _mm512_mul_pd(l, l));
  }
  LaneSums ls;
  _mm512_store_si512(ls.sum, sum);
  _mm512_store_si512(ls.nz, nz);
  _mm512_store_si512(ls.mixed, mixed);
  _mm512_store_pd(ls.l1, l1);
  _mm512_store_pd(ls.sq, sq);
  for (; c < C; ++c) ls.add(x + c, y ? y + c : nullptr, up, dn, out + c, 0);  // the tail
  ls.into(lt);
}

// A line's exponent from line_exponents' code (exponent_of of its largest magnitude: INT32_MIN
// for a zero line, taken as if its max were 1).
inline int scanned_exponent(std::int32_t e) {
  return e == std::numeric_limits<std::int32_t>::min() ? 0 : e;
}

// One entry of 8 lines (a = |re|, and *w = |im| where w is given; masked lanes zero) with
// the lines' scales: the int8 bounds b, the l1 terms l, and the nonzero (N) and mixed (M)
// counts advanced: the step of block_row_avx512 and block_rows_avx512 alike.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline void
bound_step8(__m512d a, const __m512d* w, __m512d U0, __m512d U1, __m512d D0, __m512d D1,
            __m256i& b, __m512d& l, __m512i& N, __m512i& M) {
  const __m512d zero = _mm512_setzero_pd();
  const __m512i one = _mm512_set1_epi64(1);
  b = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_mul_pd(a, U0), U1));
  l = _mm512_mul_pd(_mm512_mul_pd(a, D0), D1);
  const __mmask8 za = _mm512_cmp_pd_mask(a, zero, _CMP_NEQ_UQ);  // a != 0.0
  N = _mm512_mask_add_epi64(N, za, N, one);
  if (w != nullptr) {
    b = _mm256_add_epi32(b, _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_mul_pd(*w, U0), U1)));
    l = _mm512_add_pd(l, _mm512_mul_pd(_mm512_mul_pd(*w, D0), D1));
    const __mmask8 zw = _mm512_cmp_pd_mask(*w, zero, _CMP_NEQ_UQ);
    N = _mm512_mask_add_epi64(N, zw, N, one);
    M = _mm512_mask_add_epi64(M, za & zw, M, one);
  }
}

// block_terms' work on one entry of each of its len lines (consecutive in memory: x[t], y[t]),
// on AVX-512 (F, DQ, BW, VL), 8 lines per vector with masked tails: the same operations in the
// same order per line, the int8 bounds to out[t].
template <class T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void block_row_avx512(
    const T* __restrict__ x, const T* __restrict__ y, int len, const double* u0,
    const double* u1, const double* d0, const double* d1, signed char* __restrict__ out,
    long long* __restrict__ sum, long long* __restrict__ nz, long long* __restrict__ mixed,
    double* __restrict__ l1, double* __restrict__ sq) {
  for (int t = 0; t < len; t += 8) {
    const __mmask8 v = static_cast<__mmask8>(len - t >= 8 ? 0xff : (1u << (len - t)) - 1u);
    const __m512d a = abs8(x + t, v);
    const __m512d U0 = _mm512_maskz_loadu_pd(v, u0 + t), U1 = _mm512_maskz_loadu_pd(v, u1 + t);
    const __m512d D0 = _mm512_maskz_loadu_pd(v, d0 + t), D1 = _mm512_maskz_loadu_pd(v, d1 + t);
    __m512i n = _mm512_maskz_loadu_epi64(v, nz + t);
    __m512i mx = y != nullptr ? _mm512_maskz_loadu_epi64(v, mixed + t) : _mm512_setzero_si512();
    __m256i b;
    __m512d l, w = _mm512_setzero_pd();
    if (y != nullptr) w = abs8(y + t, v);
    bound_step8(a, y != nullptr ? &w : nullptr, U0, U1, D0, D1, b, l, n, mx);
    if (y != nullptr) _mm512_mask_storeu_epi64(mixed + t, v, mx);
    _mm_mask_storeu_epi8(out + t, v, _mm256_cvtepi32_epi8(b));
    _mm512_mask_storeu_epi64(nz + t, v, n);
    _mm512_mask_storeu_epi64(
        sum + t, v, _mm512_add_epi64(_mm512_maskz_loadu_epi64(v, sum + t), _mm512_cvtepi32_epi64(b)));
    _mm512_mask_storeu_pd(l1 + t, v, _mm512_add_pd(_mm512_maskz_loadu_pd(v, l1 + t), l));
    _mm512_mask_storeu_pd(sq + t, v,
                          _mm512_add_pd(_mm512_maskz_loadu_pd(v, sq + t), _mm512_mul_pd(l, l)));
  }
}

// Rows of memory per run of block_rows_avx512 (a multiple of kLanes). A walk down one cache line
// of each row meets the same few cache sets where the rows' pitch is a power of two (N = 4096,
// 8192): 32 rows stay in L2 for the other lines of the block; 64 or 256 measured slower than
// the per-row accumulators, 16 and 32 1.3-1.9x faster (docs/benchmarks/ci-cpu/README.md).
constexpr int kBoundRowRun = 32;

// block_terms' rows c0 .. c1 - 1 (multiples of kLanes, c1 at most the last whole group of kLanes:
// entry c's sums in lane c % kLanes) on AVX-512 (F, DQ, BW, VL), 8 lines at a time with their
// accumulators in registers across the rows: block_row_avx512's operations per entry, the same
// sums in the same order per line and lane, the accumulators loaded and stored once per 8 lines
// and run of rows instead of once per row.
template <class T, bool CPLX>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void block_rows_avx512(
    const T* __restrict__ x, long long sc, const T* __restrict__ y, long long yc, int len,
    int c0, int c1, const double* u0, const double* u1, const double* d0, const double* d1,
    signed char* __restrict__ out, long long oc, long long* __restrict__ sum,
    long long* __restrict__ nz, long long* __restrict__ mixed, double (*l1)[kBoundLines],
    double (*sq)[kBoundLines]) {
  static_assert(kLanes == 8, "one vector of partial sums per lane");
  for (int t = 0; t < len; t += 8) {
    const __mmask8 v = static_cast<__mmask8>(len - t >= 8 ? 0xff : (1u << (len - t)) - 1u);
    const __m512d U0 = _mm512_maskz_loadu_pd(v, u0 + t), U1 = _mm512_maskz_loadu_pd(v, u1 + t);
    const __m512d D0 = _mm512_maskz_loadu_pd(v, d0 + t), D1 = _mm512_maskz_loadu_pd(v, d1 + t);
    __m512i S = _mm512_maskz_loadu_epi64(v, sum + t), N = _mm512_maskz_loadu_epi64(v, nz + t);
    __m512i M = CPLX ? _mm512_maskz_loadu_epi64(v, mixed + t) : _mm512_setzero_si512();
    __m512d L[kLanes], Q[kLanes];
#pragma GCC unroll 8
    for (int j = 0; j < kLanes; ++j) {
      L[j] = _mm512_maskz_loadu_pd(v, l1[j] + t);
      Q[j] = _mm512_maskz_loadu_pd(v, sq[j] + t);
    }
    for (long long c = c0; c < c1; c += kLanes) {
#pragma GCC unroll 8
      for (int j = 0; j < kLanes; ++j) {
        const __m512d a = abs8(x + (c + j) * sc + t, v);
        __m256i b;
        __m512d l, w = _mm512_setzero_pd();
        if constexpr (CPLX) w = abs8(y + (c + j) * yc + t, v);
        bound_step8(a, CPLX ? &w : nullptr, U0, U1, D0, D1, b, l, N, M);
        _mm_mask_storeu_epi8(out + (c + j) * oc + t, v, _mm256_cvtepi32_epi8(b));
        S = _mm512_add_epi64(S, _mm512_cvtepi32_epi64(b));
        L[j] = _mm512_add_pd(L[j], l);
        Q[j] = _mm512_add_pd(Q[j], _mm512_mul_pd(l, l));
      }
    }
    _mm512_mask_storeu_epi64(sum + t, v, S);
    _mm512_mask_storeu_epi64(nz + t, v, N);
    if (CPLX) _mm512_mask_storeu_epi64(mixed + t, v, M);
#pragma GCC unroll 8
    for (int j = 0; j < kLanes; ++j) {
      _mm512_mask_storeu_pd(l1[j] + t, v, L[j]);
      _mm512_mask_storeu_pd(sq[j] + t, v, Q[j]);
    }
  }
}

// kBoundLines lines across memory (line t at x + t sx, entry c at + c sc; len <= kBoundLines of
// them): both passes, the shifts s[t] out. ex (or null): the lines' exponents as line_exponents
// gives them, which spare the first pass. The per-line accumulators live in arrays (L1) and
// every loop over the lines runs t < len, so that a row of memory is read kBoundLines entries
// (1 KiB) at a time and each thread writes whole cache lines of the int8 operand.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void block_terms(
    const T* __restrict__ x, long long sx, long long sc, const T* __restrict__ y,
    long long yx, long long yc, int len, int C, int cplx, const std::int32_t* __restrict__ ex,
    signed char* __restrict__ out, long long ot, long long oc, int* __restrict__ s,
    LineTerms* __restrict__ lt) {
  alignas(64) double u0[kBoundLines], u1[kBoundLines], d0[kBoundLines], d1[kBoundLines];
  {
    alignas(64) u64 mx[kBoundLines] = {};
    if (ex == nullptr)
      for (int c = 0; c < C; ++c) {
        across_max_bits(x + c * sc, sx, len, mx);
        if (y != nullptr) across_max_bits(y + c * yc, yx, len, mx);
      }
    for (int t = 0; t < len; ++t) {
      s[t] = 5 - scanned_exponent(ex != nullptr ? ex[t] : exponent_of(from_bits(mx[t]))) - cplx;
      const Scale2 up(s[t] + 1), dn(s[t] - 5 + cplx);
      u0[t] = up.f0, u1[t] = up.f1, d0[t] = dn.f0, d1[t] = dn.f1;
    }
  }
  alignas(64) long long sum[kBoundLines] = {}, nz[kBoundLines] = {}, mixed[kBoundLines] = {};
  // line_terms' partial sums: entry c in lane c % kLanes, the tail past the last whole group of
  // kLanes in lane 0, so that a line's l1 and sq are the same in either layout
  alignas(64) double l1[kLanes][kBoundLines] = {}, sq[kLanes][kBoundLines] = {};
  const int whole = C / kLanes * kLanes;
  const bool fast = sx == 1 && ot == 1 && (y == nullptr || yx == 1) && emu_host::avx512_loops();
  int c = 0;
  if (fast) {  // the whole groups of kLanes rows in runs, 8 lines at a time; the tail below
    for (; c < whole; c += kBoundRowRun) {
      const int c1 = std::min(whole, c + kBoundRowRun);
      if (y == nullptr)
        block_rows_avx512<T, false>(x, sc, y, yc, len, c, c1, u0, u1, d0, d1, out, oc, sum, nz,
                                    mixed, l1, sq);
      else
        block_rows_avx512<T, true>(x, sc, y, yc, len, c, c1, u0, u1, d0, d1, out, oc, sum, nz,
                                   mixed, l1, sq);
    }
    c = whole;
  }
  for (; c < C; ++c) {
    const int j = c < whole ? c % kLanes : 0;
    const T* __restrict__ xc = x + c * sc;
    signed char* __restrict__ oc_ = out + c * oc;
    double* __restrict__ l1j = l1[j];
    double* __restrict__ sqj = sq[j];
    if (fast) {
      block_row_avx512(xc, y != nullptr ? y + c * yc : nullptr, len, u0, u1, d0, d1, oc_, sum,
                       nz, mixed, l1j, sqj);
    } else if (y == nullptr) {
      for (int t = 0; t < len; ++t) {
        const double a = abs_of(static_cast<double>(xc[t * sx]));
        const int b = static_cast<int>((a * u0[t]) * u1[t]);  // floor: in [0, 128)
        const double l = (a * d0[t]) * d1[t];
        oc_[t * ot] = static_cast<signed char>(b);
        sum[t] += b;
        nz[t] += a != 0.0;
        l1j[t] = l1j[t] + l;
        sqj[t] = sqj[t] + l * l;
      }
    } else {
      const T* __restrict__ yc_ = y + c * yc;
      for (int t = 0; t < len; ++t) {
        const double a = abs_of(static_cast<double>(xc[t * sx]));
        const double w = abs_of(static_cast<double>(yc_[t * yx]));
        const int b = static_cast<int>((a * u0[t]) * u1[t]) + static_cast<int>((w * u0[t]) * u1[t]);
        const double l = (a * d0[t]) * d1[t] + (w * d0[t]) * d1[t];
        oc_[t * ot] = static_cast<signed char>(b);
        sum[t] += b;
        nz[t] += (a != 0.0) + (w != 0.0);
        mixed[t] += (a != 0.0) & (w != 0.0);
        l1j[t] = l1j[t] + l;
        sqj[t] = sqj[t] + l * l;
      }
    }
  }
  for (int t = 0; t < len; ++t) {
    lt[t].sum = sum[t], lt[t].nz = nz[t], lt[t].mixed = mixed[t];
    lt[t].l1 = lt[t].sq = 0.0;
    for (int q = 0; q < kLanes; ++q) {  // line_terms' order
      lt[t].l1 = lt[t].l1 + l1[q][t];
      lt[t].sq = lt[t].sq + sq[q][t];
    }
  }
}

// (s, bound, sums, nz, l1, mixed, sq), the accurate-mode prescale's pass over one operand, as
// ozaki2_stats.cu's bound_operand: s = 5 - cplx - floor(log2 max(|re|, |im|)) per line (for a
// zero line as if the max were 1), int64 (R,); the int8 bound operand floor(RN(|re| 2**(s+1)))
// + floor(RN(|im| 2**(s+1))) <= 127, (R, C) when lines_are_rows, else (C, R); per line the sum
// of its entries, the count of nonzero parts and of entries with both parts nonzero (int64
// (R,), exact), and the sums for the certificate's normalized norms (float64 (R,)): of
// x = |re| 2**-e + |im| 2**-e (e = 5 - cplx - s) and of x**2 (the l2 norm), in a fixed order
// per line (above), so the certificate needs no pass over the operands of its own. exponents
// (or None): the lines' exponents from line_exponents (int32 (R,), none 1024), which spare the
// pass that finds each line's largest magnitude.
template <class T>
py::tuple bound_operand(const py::object& xo, bool lines_are_rows, const py::object& im,
                        const py::object& exponents) {
  py::array_t<T> x, keep;
  const emu_host::Operand<T> xv = operand_part<T>(xo, "bound_operand", x);
  const long long sr = xv.sr, sc = xv.sc;
  const Imag<T> y = imag_part<T>(im, x, "bound_operand", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  py::array_t<std::int32_t, py::array::c_style> keep_ex;
  const std::int32_t* ex = nullptr;
  if (!exponents.is_none()) {
    keep_ex = exponents.cast<py::array_t<std::int32_t, py::array::c_style>>();
    if (keep_ex.ndim() != 1 || keep_ex.shape(0) != R)
      throw std::invalid_argument("bound_operand: exponents must be int32 (R,), one per line");
    ex = keep_ex.data();
    for (int r = 0; r < R; ++r)
      if (ex[r] >= 1024)
        throw std::invalid_argument("bound_operand: a line holds NaN or Inf (exponent 1024)");
  }
  py::array_t<std::int64_t> shift(R), sums(R), nz(R), mixed(R);
  py::array_t<double> l1(R), sq(R);
  // in huge pages: the bound GEMM's operand, written once (faults 2 MiB at a time)
  auto out = emu_host::huge_page_array<signed char>(lines_are_rows ? std::vector<py::ssize_t>{R, C}
                                                                   : std::vector<py::ssize_t>{C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const T* px = xv.p;
  std::int64_t *ps = shift.mutable_data(), *pv = sums.mutable_data(), *pz = nz.mutable_data();
  std::int64_t* pm = mixed.mutable_data();
  double *pl = l1.mutable_data(), *pq = sq.mutable_data();
  signed char* po = out.mutable_data();
  const int cplx = y.p ? 1 : 0;
  auto put = [&](int r, int s, const LineTerms& t) {
    ps[r] = s, pv[r] = t.sum, pz[r] = t.nz, pm[r] = t.mixed, pl[r] = t.l1, pq[r] = t.sq;
  };
  {
    py::gil_scoped_release nogil;
    if (std::llabs(sr) < std::llabs(sc)) {  // lines across memory
      const int width = block_width(R);
#pragma omp parallel for schedule(static)
      for (int r0 = 0; r0 < R; r0 += width) {
        const int len = std::min(width, R - r0);
        int s[kBoundLines];
        LineTerms lt[kBoundLines];
        block_terms(px + r0 * sr, sr, sc, y.p ? y.p + r0 * y.sr : nullptr, y.sr, y.sc, len, C,
                    cplx, ex ? ex + r0 : nullptr, po + r0 * out_r, out_r, out_c, s, lt);
        for (int t = 0; t < len; ++t) put(r0 + t, s[t], lt[t]);
      }
    } else {
#pragma omp parallel for schedule(static)
      for (int r = 0; r < R; ++r) {
        const T* xr = px + r * sr;
        const T* yr = y.p ? y.p + r * y.sr : nullptr;
        std::int32_t code;
        if (ex != nullptr) {
          code = ex[r];
        } else {
          u64 m = line_max_bits(xr, sc, C);
          if (yr) m = std::max(m, line_max_bits(yr, y.sc, C));
          code = exponent_of(from_bits(m));
        }
        const int s = 5 - scanned_exponent(code) - cplx;
        LineTerms lt;
        if (sc == 1 && (yr == nullptr || y.sc == 1) && out_c == 1 && emu_host::avx512_loops())
          line_terms_avx512(xr, yr, C, Scale2(s + 1), Scale2(s - 5 + cplx), po + r * out_r, lt);
        else
          line_terms(xr, sc, yr, y.sc, C, Scale2(s + 1), Scale2(s - 5 + cplx), po + r * out_r,
                     out_c, lt);
        put(r, s, lt);
      }
    }
  }
  return py::make_tuple(shift, out, sums, nz, l1, mixed, sq);
}

// float32 operands (and imaginary parts) are read as they are, else as float64.
py::tuple host_bound_operand(py::array x, bool lines_are_rows, py::object im,
                             py::object exponents) {
  if (emu_host::is_float32(x)) return bound_operand<float>(x, lines_are_rows, im, exponents);
  return bound_operand<double>(x, lines_are_rows, im, exponents);
}

// (e, f): the row maxima (m,) and column maxima (n,) of U = bound_upper(F, ra, nza, cb, nzb, c)
// over the bound GEMM's sums F (int32 (m, n)), times 1/4, float64 (exact: U < 2**53), as
// ozaki2_stats.cu's bound_max. Rows are split among threads; each keeps its own column maxima
// (a max: any order is exact).
py::tuple host_bound_max(py::array_t<std::int32_t, py::array::c_style> F,
                         py::array_t<std::int64_t, py::array::c_style> ra,
                         py::array_t<std::int64_t, py::array::c_style> nza,
                         py::array_t<std::int64_t, py::array::c_style> cb,
                         py::array_t<std::int64_t, py::array::c_style> nzb, bool cplx) {
  if (F.ndim() != 2) throw std::invalid_argument("bound_max: F must be 2-D");
  const int m = static_cast<int>(F.shape(0)), n = static_cast<int>(F.shape(1));
  if (ra.size() != m || nza.size() != m || cb.size() != n || nzb.size() != n)
    throw std::invalid_argument("bound_max: line terms of the wrong size");
  py::array_t<double> e(m), f(n);
  const std::int32_t* pF = F.data();
  const std::int64_t *pra = ra.data(), *pna = nza.data(), *pcb = cb.data(), *pnb = nzb.data();
  double *pe = e.mutable_data(), *pf = f.mutable_data();
  const long long c = cplx ? 2 : 1;
  {
    py::gil_scoped_release nogil;
    std::vector<long long> colmax(n, 0);  // U >= 0
#pragma omp parallel
    {
      std::vector<long long> cm(n, 0);
#pragma omp for schedule(static)
      for (int i = 0; i < m; ++i) {
        const std::int32_t* row = pF + static_cast<long long>(i) * n;
        long long rmax = 0;
        for (int j = 0; j < n; ++j) {
          const long long u = bound_upper(row[j], pra[i], pna[i], pcb[j], pnb[j], c);
          rmax = u > rmax ? u : rmax;
          cm[j] = u > cm[j] ? u : cm[j];
        }
        pe[i] = __dmul_rn(static_cast<double>(rmax), 0.25);
      }
#pragma omp critical(emu_bound_max)
      for (int j = 0; j < n; ++j) colmax[j] = cm[j] > colmax[j] ? cm[j] : colmax[j];
    }
    for (int j = 0; j < n; ++j) pf[j] = __dmul_rn(static_cast<double>(colmax[j]), 0.25);
  }
  return py::make_tuple(e, f);
}

// (mag, l1): float32 magnitudes max(|re|, |im|) 2**-e truncated toward zero, (R, C) when
// lines_are_rows, else (C, R), and the line sums of |re| 2**-e + |im| 2**-e in float64 (in
// column order), for the line exponents e (int64, (R,)). bf16: the magnitudes as bfloat16 bits
// instead (uint16: the float32's high half, truncated toward zero again; bf16_lower's values),
// the operands of the AMX BF16 GEMM that bounds their product from below.
template <class T, class O>
py::tuple cert_operand(const py::object& xo, const py::array_t<std::int64_t,
                       py::array::c_style>& e, bool lines_are_rows, const py::object& im) {
  py::array_t<T> x, keep;
  const emu_host::Operand<T> xv = operand_part<T>(xo, "cert_operand", x);
  const long long sr = xv.sr, sc = xv.sc;
  const Imag<T> y = imag_part<T>(im, x, "cert_operand", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  if (e.size() != R) throw std::invalid_argument("cert_operand: one exponent per line");
  py::array_t<O> out(lines_are_rows ? std::vector<py::ssize_t>{R, C}
                                    : std::vector<py::ssize_t>{C, R});
  py::array_t<double> l1(R);
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const T* px = xv.p;
  const std::int64_t* pe = e.data();
  O* po = out.mutable_data();
  double* pl = l1.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (int r = 0; r < R; ++r) pl[r] = 0.0;
    emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
      const int p = static_cast<int>(-pe[r]);
      double a = scale2(abs_of(v), p), mag = a;
      if (y.p) {
        const double b = scale2(abs_of(static_cast<double>(y.p[r * y.sr + c * y.sc])), p);
        mag = b > a ? b : a;
        a = __dadd_rn(a, b);
      }
      const float f = __double2float_rz(mag);
      if constexpr (std::is_same_v<O, float>) {
        po[r * out_r + c * out_c] = f;
      } else {
        std::uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        po[r * out_r + c * out_c] = static_cast<std::uint16_t>(bits >> 16);
      }
      pl[r] = __dadd_rn(pl[r], a);
    });
  }
  return py::make_tuple(out, l1);
}

// float32 operands (and imaginary parts) are read as they are, else as float64.
py::tuple host_cert_operand(py::array x, py::array_t<std::int64_t, py::array::c_style> e,
                            bool lines_are_rows, py::object im, bool bf16) {
  if (emu_host::is_float32(x))
    return bf16 ? cert_operand<float, std::uint16_t>(x, e, lines_are_rows, im)
                : cert_operand<float, float>(x, e, lines_are_rows, im);
  return bf16 ? cert_operand<double, std::uint16_t>(x, e, lines_are_rows, im)
              : cert_operand<double, float>(x, e, lines_are_rows, im);
}

// cert_entries for len <= 64 consecutive entries of row i (columns j0 .. j0 + len - 1 of F, c,
// mixb, nb, beta, need): entry_lower and cert_test per entry (no contraction in this file),
// vectorized across the entries. The first certifying threshold is counted instead of
// bisected: the test is monotone in t (cert_test), so the thresholds that fail it are those
// before the first that passes (host_cert_entries checks that the thresholds are finite,
// positive and non-increasing, which that needs). The count starts at the run's hint (the
// previous run's smallest index, less one) where every entry fails the threshold before it, and
// stops at the first threshold no entry fails: neighbouring entries need nearly the same count,
// so a run tests a few thresholds, not all. Adds each entry's index to hist.
//
// With the exact line factors of every count (xp: row i's, xq (nth, n) from column j0 on: both
// non-increasing in the count, host_cert_entries checks), also each certifiable entry's exact
// need, counted the same way: the first index whose exact test (threshold 1 with the factors,
// certificate.exact_passes) passes, nth where none does, into xneed (base + index; 255 for an
// entry beyond every count) and xhist. The exact test is then monotone in the count as well, so
// the exact step and every refinement step read their failures off this one pass (an entry
// fails the exact test of count c iff its exact need exceeds c) instead of a pass each.
constexpr int kCertRun = 64;
constexpr std::uint8_t kBeyondCode = 255;

// q[t] = the index of the first of the nth levels at which pass(t, level) holds (nth: none), for
// t < len with live[t], pass monotone in the level; from level lo on where every live entry
// fails the level before it, else from 0. Returns the smallest q of the live entries (nth if
// none is live).
template <class Pass>
inline int first_passing(int len, int nth, int lo, const int* live, int* q, Pass&& pass) {
  lo = lo < 0 ? 0 : lo > nth ? nth : lo;
  if (lo > 0) {
    int any = 0;
    for (int t = 0; t < len; ++t) any |= live[t] & pass(t, lo - 1);
    if (any) lo = 0;
  }
  for (int t = 0; t < len; ++t) q[t] = lo;
  for (int k = lo; k < nth; ++k) {
    int any = 0;
    for (int t = 0; t < len; ++t) {
      const int f = live[t] & !pass(t, k);
      q[t] += f;
      any |= f;
    }
    if (!any) break;  // every live entry passes here, so at every later level too
  }
  int low = nth;
  for (int t = 0; t < len; ++t) low = live[t] && q[t] < low ? q[t] : low;
  return low;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void cert_run(
    const std::int32_t* __restrict__ F, const float* __restrict__ c,
    const std::int64_t* __restrict__ mixb, bool mixa, const double* __restrict__ nb,
    const double* __restrict__ beta, double na_i, double alpha_i, double qa, double fscale,
    double fscale_mixed, double factor, double abs_term, double cR, double c4,
    const double* __restrict__ th, int nth, int base, std::uint8_t* __restrict__ need,
    long long* __restrict__ hist, const double* __restrict__ xp, const double* __restrict__ xq,
    long long ldq, std::uint8_t* __restrict__ xneed, long long* __restrict__ xhist, int len,
    int& hint) {
  double lamv[kCertRun], R[kCertRun], G2[kCertRun], Q[kCertRun];
  int q[kCertRun], live[kCertRun];
  for (int t = 0; t < len; ++t) {
    const double lam = entry_lower(static_cast<double>(F[t]), mixa | (mixb[t] != 0), fscale,
                                   fscale_mixed, c != nullptr, c ? c[t] : 0.0f, factor,
                                   abs_term);
    const CertTest ct = cert_test(lam, na_i, alpha_i, qa, nb[t], beta[t], cR);
    lamv[t] = lam;
    R[t] = ct.R;
    G2[t] = ct.G2;
    Q[t] = ct.Q;
    live[t] = 1;
  }
  const int low = first_passing(len, nth, hint - 1, live, q, [&](int t, int k) {
    return CertTest{R[t], G2[t], Q[t]}.passes(th[k]);
  });
  hint = low;
  for (int t = 0; t < len; ++t) {
    need[t] = static_cast<std::uint8_t>(base + q[t]);
    ++hist[q[t]];
  }
  if (xp == nullptr) return;
  int x[kCertRun];
  for (int t = 0; t < len; ++t) live[t] = q[t] < nth;  // certifiable
  // the exact need is the bound's index or one less (certificate.exact_passes): from low - 2
  first_passing(len, nth, low - 2, live, x, [&](int t, int k) {
    const double p = xp[k];
    return cert_ok(lamv[t], na_i, p, __dmul_rn(c4, p), nb[t], xq[k * ldq + t], cR, 1.0);
  });
  for (int t = 0; t < len; ++t) {
    if (!live[t]) {
      xneed[t] = kBeyondCode;
      continue;
    }
    xneed[t] = static_cast<std::uint8_t>(base + x[t]);
    ++xhist[x[t]];
  }
}

// (need, count, at_count, beyond): the certificate per entry (cert_need) from the lower bound
// F 2**-fexp (2**-fexp_mixed where mixa[i] or mixb[j] is nonzero: certificate.bound_lower) of the
// bound GEMM's int32 sums F (m, n), or the larger of that and the float32
// GEMM sums c's (gemm_lower): need (m, n) uint8 = MIN_MODULI (base) + the index of the first
// threshold in thr that certifies it (base + len(thr): none); count: the largest need below
// that (-1: none), at_count: its entries, beyond: the entries no count certifies.
py::tuple host_cert_entries(py::array_t<std::int32_t, py::array::c_style> F, int fexp,
                            py::array_t<double, py::array::c_style> na,
                            py::array_t<double, py::array::c_style> alpha,
                            py::array_t<double, py::array::c_style> nb,
                            py::array_t<double, py::array::c_style> beta, double factor,
                            double abs_term, double cR, double c4,
                            py::array_t<double, py::array::c_style> thr, int base,
                            py::array_t<std::int64_t, py::array::c_style> mixa,
                            py::array_t<std::int64_t, py::array::c_style> mixb, int fexp_mixed,
                            py::object c, py::object exact_a, py::object exact_b) {
  if (F.ndim() != 2) throw std::invalid_argument("cert_entries: F must be 2-D");
  const int m = static_cast<int>(F.shape(0)), n = static_cast<int>(F.shape(1));
  if (na.size() != m || alpha.size() != m || nb.size() != n || beta.size() != n)
    throw std::invalid_argument("cert_entries: line terms of the wrong size");
  if (fexp < 0 || fexp > 64 || fexp_mixed < 0 || fexp_mixed > 64)
    throw std::invalid_argument("cert_entries: fexp out of range");
  if (mixa.size() != m || mixb.size() != n)
    throw std::invalid_argument("cert_entries: mixed counts of the wrong size");
  const int nth = static_cast<int>(thr.size());
  if (nth < 1 || nth > 32 || base < 0 || base + nth > 255)
    throw std::invalid_argument("cert_entries: 1 to 32 thresholds");
  for (int q = 0; q < nth; ++q)  // cert_run counts failures: the test must be monotone in t
    if (!(thr.data()[q] > 0.0 && thr.data()[q] <= std::numeric_limits<double>::max()) ||
        (q > 0 && thr.data()[q] > thr.data()[q - 1]))
      throw std::invalid_argument("cert_entries: thresholds must be finite, > 0, non-increasing");
  py::array_t<float, py::array::c_style> keep;
  const float* pc = nullptr;
  if (!c.is_none()) {
    keep = c.cast<py::array_t<float, py::array::c_style>>();
    if (keep.ndim() != 2 || keep.shape(0) != m || keep.shape(1) != n)
      throw std::invalid_argument("cert_entries: c must have F's shape");
    pc = keep.data();
  }
  // the exact line factors of every count: A's (nth, m), B's (nth, n)
  py::array_t<double, py::array::c_style> keep_xa, keep_xb;
  const bool exact = !exact_a.is_none();
  if (exact != !exact_b.is_none())
    throw std::invalid_argument("cert_entries: both exact factor tables or neither");
  if (exact) {
    keep_xa = exact_a.cast<py::array_t<double, py::array::c_style>>();
    keep_xb = exact_b.cast<py::array_t<double, py::array::c_style>>();
    if (base + nth >= kBeyondCode)
      throw std::invalid_argument("cert_entries: base + thresholds must stay below 255");
    if (keep_xa.ndim() != 2 || keep_xa.shape(0) != nth || keep_xa.shape(1) != m ||
        keep_xb.ndim() != 2 || keep_xb.shape(0) != nth || keep_xb.shape(1) != n)
      throw std::invalid_argument("cert_entries: exact factor tables must be (nth, m), (nth, n)");
    // the search of cert_run needs each line's factors non-increasing in the count (not NaN)
    auto monotone = [nth](const double* x, long long lines) {
      for (long long l = 0; l < lines; ++l)
        for (int q = 0; q < nth; ++q) {
          const double v = x[q * lines + l];
          if (!(v >= 0.0) || (q > 0 && !(v <= x[(q - 1) * lines + l]))) return false;
        }
      return true;
    };
    if (!monotone(keep_xa.data(), m) || !monotone(keep_xb.data(), n))
      throw std::invalid_argument("cert_entries: exact factors must be >= 0 and non-increasing "
                                  "in the count");
  }
  py::array_t<std::uint8_t> need({m, n});
  py::array_t<std::uint8_t> xneed(exact ? std::vector<py::ssize_t>{m, n}
                                        : std::vector<py::ssize_t>{0, 0});
  std::uint8_t* px = xneed.mutable_data();
  const double* pxa = exact ? keep_xa.data() : nullptr;
  const double* pxb = exact ? keep_xb.data() : nullptr;
  std::vector<long long> xcounts(static_cast<std::size_t>(nth) + 1, 0);
  const std::int32_t* pF = F.data();
  const double *pna = na.data(), *pal = alpha.data(), *pnb = nb.data(), *pbe = beta.data();
  const double* th = thr.data();
  std::uint8_t* pn = need.mutable_data();
  const double fscale = pow2(-fexp), fscale_mixed = pow2(-fexp_mixed);
  const std::int64_t *pma = mixa.data(), *pmb = mixb.data();
  std::vector<long long> counts(static_cast<std::size_t>(nth) + 1, 0);
  {
    py::gil_scoped_release nogil;
#pragma omp parallel
    {
      std::vector<long long> mine(static_cast<std::size_t>(nth) + 1, 0), xmine(mine);
      std::vector<double> prow(static_cast<std::size_t>(nth));
#pragma omp for schedule(static)
      for (int i = 0; i < m; ++i) {
        const double qa = __dmul_rn(c4, pal[i]);
        const long long row = static_cast<long long>(i) * n;
        if (exact)
          for (int q = 0; q < nth; ++q) prow[q] = pxa[static_cast<long long>(q) * m + i];
        int hint = 0;
        for (int j = 0; j < n; j += kCertRun) {
          const int len = std::min(kCertRun, n - j);
          cert_run(pF + row + j, pc ? pc + row + j : nullptr, pmb + j, pma[i] != 0, pnb + j,
                   pbe + j, pna[i], pal[i], qa, fscale, fscale_mixed, factor, abs_term, cR, c4,
                   th, nth, base, pn + row + j, mine.data(), exact ? prow.data() : nullptr,
                   exact ? pxb + j : nullptr, n, exact ? px + row + j : nullptr, xmine.data(),
                   len, hint);
        }
      }
#pragma omp critical
      for (int q = 0; q <= nth; ++q) {
        counts[q] += mine[q];
        xcounts[q] += xmine[q];
      }
    }
  }
  int top = -1;
  for (int q = 0; q < nth; ++q)
    if (counts[q]) top = q;
  if (!exact)
    return py::make_tuple(need, top < 0 ? -1 : base + top, top < 0 ? 0 : counts[top], counts[nth]);
  py::array_t<long long> xhist(nth + 1);
  std::copy(xcounts.begin(), xcounts.end(), xhist.mutable_data());
  return py::make_tuple(need, top < 0 ? -1 : base + top, top < 0 ? 0 : counts[top], counts[nth],
                        xneed, xhist);
}


// Bit t set where entry t < len (<= 64) of a run is a suspect of host_refine_step: its fails
// code above lev and its need not bey. One compare per 64 bytes on AVX-512 BW (the scans pass
// over every entry of the output, the suspects are few), a loop elsewhere.
__attribute__((target("avx512f,avx512bw"))) std::uint64_t suspects64_avx512(
    const std::uint8_t* pf, const std::uint8_t* pn, std::uint8_t lev, std::uint8_t bey,
    int len) {
  const __mmask64 valid = len >= 64 ? ~0ull : (1ull << len) - 1;
  const __mmask64 over =
      _mm512_cmpgt_epu8_mask(_mm512_maskz_loadu_epi8(valid, pf), _mm512_set1_epi8(char(lev)));
  const __mmask64 kept =
      _mm512_cmpneq_epu8_mask(_mm512_maskz_loadu_epi8(valid, pn), _mm512_set1_epi8(char(bey)));
  return over & kept & valid;
}
inline std::uint64_t suspects64(const std::uint8_t* pf, const std::uint8_t* pn, std::uint8_t lev,
                                std::uint8_t bey, int len) {
  if (emu_host::avx512_loops()) return suspects64_avx512(pf, pn, lev, bey, len);
  std::uint64_t bits = 0;
  for (int t = 0; t < len; ++t)
    bits |= static_cast<std::uint64_t>((pf[t] > lev) & (pn[t] != bey)) << t;
  return bits;
}

// The refined test of host_refine_step for the entries of row i from column j0 on (len <= 64,
// the bits of `sus` set): entry_lower times theta (native) and the exact test of cert_ok, as
// the scalar step did per suspect, for the whole run at once (plain loops over the run, which
// the clones vectorize; every operation the scalar one's). Bit t of the result is set where
// suspect t fails; the sampled suspects are the caller's (their bound is raised).
template <bool GEMM>
__attribute__((always_inline)) inline std::uint64_t refine_run_of(
    const std::int32_t* __restrict__ F, const float* __restrict__ c, bool mixa,
    const std::int64_t* __restrict__ mixb, const double* __restrict__ nb,
    const double* __restrict__ q, double na_i, double p_i, double qa, double fscale,
    double fscale_mixed, double factor, double abs_term, double cR, double theta, int len) {
  unsigned char bad[64];
  for (int t = 0; t < len; ++t) {
    const double lam = entry_lower(static_cast<double>(F[t]), mixa | (mixb[t] != 0), fscale,
                                   fscale_mixed, GEMM, GEMM ? c[t] : 0.0f, factor, abs_term);
    bad[t] = !cert_ok(__dmul_rn(lam, theta), na_i, p_i, qa, nb[t], q[t], cR, 1.0);
  }
  std::uint64_t bits = 0;
  for (int t = 0; t < len; ++t) bits |= static_cast<std::uint64_t>(bad[t]) << t;
  return bits;
}
__attribute__((target_clones("avx512f", "avx2", "default"))) std::uint64_t refine_run(
    const std::int32_t* __restrict__ F, const float* __restrict__ c, bool mixa,
    const std::int64_t* __restrict__ mixb, const double* __restrict__ nb,
    const double* __restrict__ q, double na_i, double p_i, double qa, double fscale,
    double fscale_mixed, double factor, double abs_term, double cR, bool native, double theta,
    int len, std::uint64_t sus) {
  const double th = native ? theta : 1.0;  // lam 1.0 = lam: the strict form's bound as it is
  const std::uint64_t bits =
      c != nullptr ? refine_run_of<true>(F, c, mixa, mixb, nb, q, na_i, p_i, qa, fscale,
                                         fscale_mixed, factor, abs_term, cR, th, len)
                   : refine_run_of<false>(F, c, mixa, mixb, nb, q, na_i, p_i, qa, fscale,
                                          fscale_mixed, factor, abs_term, cR, th, len);
  return bits & sus;
}

// The sampled suspects' sums of host_refine_step walk B by blocks of kSampleCols columns (one
// cache line of a row-major float64 B), kSampleSlots slots of a block per task, side by side
// (independent sums: not one chain of dependent additions per slot).
constexpr int kSampleCols = 8;
constexpr long long kSampleSlots = 16;  // slots per task
constexpr int kSamplePrefetch = 32;     // rows of B ahead

// One step of refinement.refine_and_patch at count c, as ozaki2_stats.cu's suspect_ranks,
// refine_suspects and refine_test: the suspects are the entries with need != beyond that fail
// the exact test of c - 1 (fails > level: cert_entries' 0/1 codes of one count with level 0, or
// its exact needs with level c - 1). Where 1 <= sus <= limit: every step-th suspect in flat
// order (step = ceil(sus / sample): refinement.refine_sample) gets its float64 sums of
// x_h = |a_ih| 2**-ea_i |b_hj| 2**-eb_j (|x| = max(|re|, |im|), ea_i = 5 - cplx - shift_a[i])
// and, native, of x_h**2, each in h order (any order: refinement.refine_failures removes the
// rounding of nonnegative sums); theta from their kappas (native); and every suspect the exact
// test at threshold 1 with the factors p, q of c - 1 on lam' = its lower bound (entry_lower)
// times theta, raised to the sampled sums' bound where sampled. Returns (sus, failing, patch):
// failing -1 where no suspect is tested (none, or more than limit), patch the first
// min(failing, patch_cap) failing flat indices, ascending (int64).
py::tuple host_refine_step(py::array ar, py::object ai, py::array br, py::object bi, py::array_t<std::int64_t, py::array::c_style> shift_a,
                           py::array_t<std::int64_t, py::array::c_style> shift_b,
                           py::array_t<std::uint8_t, py::array::c_style> need, int beyond,
                           py::array_t<std::uint8_t, py::array::c_style> fails, int level,
                           py::array_t<std::int32_t, py::array::c_style> F, py::object c,
                           int fexp, int fexp_mixed,
                           py::array_t<std::int64_t, py::array::c_style> mixa,
                           py::array_t<std::int64_t, py::array::c_style> mixb,
                           py::tuple lower_terms, py::array_t<double, py::array::c_style> na,
                           py::array_t<double, py::array::c_style> p,
                           py::array_t<double, py::array::c_style> nb,
                           py::array_t<double, py::array::c_style> q, bool native,
                           py::tuple refine_terms, double theta_cap, long long limit,
                           long long sample, long long patch_cap) {
  const char* who = "refine_step";
  // float32 operands are read as they are (both float32), else as float64
  const bool f32 = emu_host::is_float32(ar) && emu_host::is_float32(br);
  const Parts<float> pf32 = f32 ? Parts<float>(ar, ai, br, bi, who) : Parts<float>();
  const Parts<double> pf64 = f32 ? Parts<double>() : Parts<double>(ar, ai, br, bi, who);
  const int m = static_cast<int>(ar.shape(0)), k = static_cast<int>(ar.shape(1));
  const int n = static_cast<int>(br.shape(1));
  if (br.shape(0) != k) throw std::invalid_argument("refine_step: A and B do not conform");
  if (ai.is_none() != bi.is_none())
    throw std::invalid_argument("refine_step: both operands real or both complex");
  const bool cplx = !ai.is_none();
  auto same = [&](const py::array& x, long long rows, long long cols) {
    return x.ndim() == 2 && x.shape(0) == rows && x.shape(1) == cols;
  };
  if (!same(need, m, n) || !same(fails, m, n) || !same(F, m, n))
    throw std::invalid_argument("refine_step: need, fails and F must be (m, n)");
  if (shift_a.size() != m || shift_b.size() != n || mixa.size() != m || mixb.size() != n ||
      na.size() != m || p.size() != m || nb.size() != n || q.size() != n)
    throw std::invalid_argument("refine_step: line terms of the wrong size");
  if (fexp < 0 || fexp > 64 || fexp_mixed < 0 || fexp_mixed > 64)
    throw std::invalid_argument("refine_step: fexp out of range");
  if (lower_terms.size() != 4 || refine_terms.size() != 3)
    throw std::invalid_argument("refine_step: lower_terms (4) and refine_terms (3)");
  if (beyond < 0 || beyond > 255) throw std::invalid_argument("refine_step: beyond is a uint8 code");
  if (sample < 0 || limit < 0 || patch_cap < 0 || (sample == 0 && limit > 0))
    throw std::invalid_argument("refine_step: sample, limit, patch_cap >= 0 (sample > 0 where "
                                "limit > 0)");
  py::array_t<float, py::array::c_style> keep_c;
  const float* pc = nullptr;
  if (!c.is_none()) {
    keep_c = c.cast<py::array_t<float, py::array::c_style>>();
    if (!same(keep_c, m, n)) throw std::invalid_argument("refine_step: c must be (m, n)");
    pc = keep_c.data();
  }
  const double factor = lower_terms[0].cast<double>(), abs_term = lower_terms[1].cast<double>();
  const double cR = lower_terms[2].cast<double>(), c4 = lower_terms[3].cast<double>();
  const double nfac = refine_terms[0].cast<double>(), tiny = refine_terms[1].cast<double>();
  const double l1fac = refine_terms[2].cast<double>();
  const std::int64_t *sa = shift_a.data(), *sb = shift_b.data();
  const std::int64_t *pma = mixa.data(), *pmb = mixb.data();
  const std::uint8_t *pn = need.data(), *pf = fails.data();
  const std::int32_t* pF = F.data();
  const double *pna = na.data(), *pp = p.data(), *pnb = nb.data(), *pq = q.data();
  const double fscale = pow2(-fexp), fscale_mixed = pow2(-fexp_mixed);
  const std::uint8_t bey = static_cast<std::uint8_t>(beyond);
  if (level < 0 || level > 254) throw std::invalid_argument("refine_step: level is a uint8 code");
  const std::uint8_t lev = static_cast<std::uint8_t>(level);
  // the suspects among the (up to) 64 entries of row i from column j on
  auto run = [&](int i, int j) {
    const long long at = static_cast<long long>(i) * n + j;
    return suspects64(pf + at, pn + at, lev, bey, std::min(64, n - j));
  };

  std::vector<long long> off(static_cast<std::size_t>(m) + 1, 0);  // suspects before row i
  long long sus = 0, failing = -1;
  std::vector<std::int64_t> patch;
  {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      long long cnt = 0;
      for (int j = 0; j < n; j += 64) cnt += __builtin_popcountll(run(i, j));
      off[static_cast<std::size_t>(i) + 1] = cnt;
    }
    for (int i = 0; i < m; ++i) off[i + 1] += off[i];
    sus = off[m];
    if (sus >= 1 && sus <= limit) {
      const long long step = (sus + sample - 1) / sample, slots = (sus + step - 1) / step;
      std::vector<double> S(slots), scale(slots, 0.0);
      std::vector<int> si(slots), sj(slots);
#pragma omp parallel for schedule(static)
      for (long long sl = 0; sl < slots; ++sl) {
        const long long r = sl * step;  // the suspect of rank r: its row, then its column
        const int i = static_cast<int>(std::upper_bound(off.begin(), off.end(), r) - off.begin()) - 1;
        long long left = r - off[i];
        int j = 0;
        for (std::uint64_t bits = run(i, 0);; j += 64, bits = run(i, j)) {
          const int c = __builtin_popcountll(bits);
          if (left < c) {  // the left-th set bit of bits
            for (; left > 0; --left) bits &= bits - 1;
            j += __builtin_ctzll(bits);
            break;
          }
          left -= c;
        }
        si[sl] = i;
        sj[sl] = j;
      }
      // The slots by blocks of kSampleCols columns: a block's slots walk K together, so that
      // each line of B (row-major: a column's entries n apart) comes from memory once per task
      // instead of once per slot. Each slot's sums stay in h order.
      const long long nblk = (n + kSampleCols - 1) / kSampleCols;
      std::vector<long long> first(static_cast<std::size_t>(nblk) + 1, 0), order(slots);
      for (long long sl = 0; sl < slots; ++sl) ++first[sj[sl] / kSampleCols + 1];
      for (long long b = 0; b < nblk; ++b) first[b + 1] += first[b];
      {
        std::vector<long long> fill(first.begin(), first.end() - 1);
        for (long long sl = 0; sl < slots; ++sl) order[fill[sj[sl] / kSampleCols]++] = sl;
      }
      // tasks: a block's slots kSampleSlots at a time (a narrow B, or suspects in a few
      // columns, still spread over the threads)
      std::vector<long long> task;
      for (long long b = 0; b < nblk; ++b)
        for (long long o = first[b]; o < first[b + 1]; o += kSampleSlots) task.push_back(o);
      std::vector<double> acc(slots, 0.0), acc2(slots, 0.0);
      const int cp = cplx ? 1 : 0;
      const long long ntask = static_cast<long long>(task.size());
      // one task's sums, from the operand parts as float32 or float64: its slots side by side
      // (independent sums, each in h order), walking K once
      auto sums = [&](long long q, const auto& P) {
        const auto &A = P.a, &B = P.b, &YA = P.ya, &YB = P.yb;
        const long long b = sj[order[task[q]]] / kSampleCols;
        const int ns = static_cast<int>(std::min(task[q] + kSampleSlots, first[b + 1]) - task[q]);
        long long ia[kSampleSlots], jb[kSampleSlots], iy[kSampleSlots], jy[kSampleSlots];
        double fa[kSampleSlots], ga[kSampleSlots], fb[kSampleSlots], gb[kSampleSlots];
        double t1[kSampleSlots], t2[kSampleSlots];
        for (int u = 0; u < ns; ++u) {  // scale2's factors: x 2**p as (x f) g
          const long long sl = order[task[q] + u];
          const int i = si[sl], j = sj[sl];
          const int ea = static_cast<int>(sa[i]) - 5 + cp, eb = static_cast<int>(sb[j]) - 5 + cp;
          fa[u] = ea > 1023 ? pow2(ea - 64) : pow2(ea);
          ga[u] = ea > 1023 ? pow2(64) : 1.0;
          fb[u] = eb > 1023 ? pow2(eb - 64) : pow2(eb);
          gb[u] = eb > 1023 ? pow2(64) : 1.0;
          ia[u] = i * A.sr, jb[u] = j * B.sc, iy[u] = i * YA.sr, jy[u] = j * YB.sc;
          t1[u] = t2[u] = 0.0;
        }
        for (int h = 0; h < k; ++h) {
          const auto *ah = A.p + h * A.sc, *bh = B.p + h * B.sr;
          // the block's line of B kSamplePrefetch rows on: rows of a row-major B lie a page
          // or more apart, where the hardware's prefetchers do not follow
          if (h + kSamplePrefetch < k) __builtin_prefetch(bh + kSamplePrefetch * B.sr + jb[0]);
          const auto *yah = cplx ? YA.p + h * YA.sc : nullptr, *ybh = cplx ? YB.p + h * YB.sr : nullptr;
          for (int u = 0; u < ns; ++u) {
            double x = abs_of(static_cast<double>(ah[ia[u]]));
            double y = abs_of(static_cast<double>(bh[jb[u]]));
            if (cplx) {
              const double xi = abs_of(static_cast<double>(yah[iy[u]]));
              const double yi = abs_of(static_cast<double>(ybh[jy[u]]));
              x = xi > x ? xi : x;
              y = yi > y ? yi : y;
            }
            const double term = __dmul_rn(__dmul_rn(__dmul_rn(x, fa[u]), ga[u]),
                                          __dmul_rn(__dmul_rn(y, fb[u]), gb[u]));
            t1[u] = __dadd_rn(t1[u], term);
            if (native) t2[u] = __dadd_rn(t2[u], __dmul_rn(term, term));
          }
        }
        for (int u = 0; u < ns; ++u) {
          const long long sl = order[task[q] + u];
          acc[sl] = t1[u];
          acc2[sl] = t2[u];
        }
      };
#pragma omp parallel for schedule(dynamic, 1)
      for (long long q = 0; q < ntask; ++q) {
        if (f32) sums(q, pf32);
        else sums(q, pf64);
      }
      double kmax = 0.0;
#pragma omp parallel for schedule(static) reduction(max : kmax)
      for (long long sl = 0; sl < slots; ++sl) {
        double s1 = __dsub_rn(__dmul_rn(acc[sl], nfac), tiny);
        S[sl] = s1 > 0.0 ? s1 : 0.0;
        if (native) {
          double s2 = __dsub_rn(__dmul_rn(acc2[sl], nfac), tiny);
          s2 = s2 > 0.0 ? s2 : 0.0;
          scale[sl] = __dmul_rn(__dsqrt_rn(__dmul_rn(s2, static_cast<double>(k))), 1.0 - 0x1p-52);
          const double upper = __dadd_rn(__dmul_rn(S[sl], l1fac), tiny);
          const double kappa = __dmul_rn(upper > 0.0 ? __ddiv_rn(scale[sl], upper) : 1.0,
                                         1.0 - 0x1p-50);
          kmax = kappa > kmax ? kappa : kmax;
        }
      }
      double theta = 1.0;
      if (native) theta = std::min(theta_cap, std::max(1.0, kmax));
      // Every suspect tested, except that the test stops once more than patch_cap fail: the
      // step's decision is then the same (refinement.step_after: the count stays), and the
      // rest of a hopeless step (millions of suspects) is not read.
      long long total_fail = 0;
      std::atomic<long long> over{0};
      std::vector<std::vector<std::int64_t>> found;
#pragma omp parallel reduction(+ : total_fail)
      {
#pragma omp single
        found.resize(static_cast<std::size_t>(team_size()));
        std::vector<std::int64_t>& mine = found[static_cast<std::size_t>(team_rank())];
#pragma omp for schedule(static)
        for (int i = 0; i < m; ++i) {
          if (off[i + 1] == off[i] || over.load(std::memory_order_relaxed) > patch_cap) continue;
          long long rank = off[i], row_fail = 0;
          const long long row = static_cast<long long>(i) * n;
          const double qa = __dmul_rn(c4, pp[i]);
          for (int j0 = 0; j0 < n; j0 += 64) {
            const std::uint64_t bits = run(i, j0);
            if (!bits) continue;
            const int len = std::min(64, n - j0), cnt = __builtin_popcountll(bits);
            const long long at0 = row + j0;
            std::uint64_t bad = refine_run(pF + at0, pc ? pc + at0 : nullptr, pma[i] != 0,
                                           pmb + j0, pnb + j0, pq + j0, pna[i], pp[i], qa,
                                           fscale, fscale_mixed, factor, abs_term, cR, native,
                                           theta, len, bits);
            // the sampled suspects of the run (ranks rank .. rank + cnt - 1, every step-th):
            // their bound raised to the sampled sums' bound, tested again
            std::uint64_t b = bits;  // the suspects from rank `at_rank` on
            long long at_rank = rank;
            for (long long r = (rank + step - 1) / step * step; r < rank + cnt; r += step) {
              for (; at_rank < r; ++at_rank) b &= b - 1;
              const int t = __builtin_ctzll(b), j = j0 + t;
              const long long at = at0 + t, sl = r / step;
              double lam = entry_lower(static_cast<double>(pF[at]), pma[i] != 0 || pmb[j] != 0,
                                       fscale, fscale_mixed, pc != nullptr, pc ? pc[at] : 0.0f,
                                       factor, abs_term);
              double own = S[sl];
              if (native) {
                lam = __dmul_rn(lam, theta);
                own = S[sl] > scale[sl] ? S[sl] : scale[sl];
              }
              lam = own > lam ? own : lam;
              const std::uint64_t bit = 1ull << t;
              bad = cert_ok(lam, pna[i], pp[i], qa, pnb[j], pq[j], cR, 1.0) ? bad & ~bit
                                                                            : bad | bit;
            }
            rank += cnt;
            row_fail += __builtin_popcountll(bad);
            for (; bad && static_cast<long long>(mine.size()) < patch_cap; bad &= bad - 1)
              mine.push_back(at0 + __builtin_ctzll(bad));
          }
          total_fail += row_fail;
          if (row_fail) over.fetch_add(row_fail, std::memory_order_relaxed);
        }
      }
      failing = total_fail;
      for (const auto& v : found)  // threads hold contiguous row ranges, in thread order
        for (std::int64_t at : v)
          if (static_cast<long long>(patch.size()) < std::min(failing, patch_cap))
            patch.push_back(at);
    }
  }
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(patch.size()));
  std::copy(patch.begin(), patch.end(), out.mutable_data());
  return py::make_tuple(sus, failing, out);
}


// bf16_rz of a row of C contiguous float64 entries on AVX-512 F/VL/BW: VCVTPD2PS rounding toward
// zero (bf16_rz's float32, subnormals and overflow to the largest float included), then the
// high halves.
__attribute__((target("avx512f,avx512vl,avx512bw"))) void bf16_rz_row_avx512(
    const double* x, int C, std::uint16_t* out) {
  for (int c = 0; c < C; c += 8) {
    const __mmask8 valid = static_cast<__mmask8>(C - c >= 8 ? 0xff : (1u << (C - c)) - 1u);
    const __m256 f = _mm512_cvt_roundpd_ps(_mm512_maskz_loadu_pd(valid, x + c),
                                           _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(f), 16);
    _mm_mask_storeu_epi16(out + c, valid, _mm256_cvtepi32_epi16(hi));
  }
}

// bfloat16 bits of x truncated toward zero (bf16_rz: float32 toward zero, then the high half),
// row-major (R, C) uint16, from a 2-D float64 matrix of any element strides: the operands of
// the AMX BF16 tile GEMM that bounds a product of magnitudes from below (as bf16_lower.cu).
py::array_t<std::uint16_t> host_bf16_lower(py::array_t<double> x) {
  const auto [sr, sc] = emu_host::matrix_strides(x, "bf16_lower");
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  py::array_t<std::uint16_t> out({R, C});
  std::uint16_t* po = out.mutable_data();
  const double* px = x.data();
  {
    py::gil_scoped_release nogil;
    if (sc == 1 && emu_host::avx512_loops()) {  // rows along memory: 8 entries per vector
#pragma omp parallel for schedule(static)
      for (int r = 0; r < R; ++r)
        bf16_rz_row_avx512(px + static_cast<long long>(r) * sr, C,
                           po + static_cast<long long>(r) * C);
    } else {
      emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
        po[static_cast<long long>(r) * C + c] = static_cast<std::uint16_t>(bf16_rz(v));
      });
    }
  }
  return out;
}

// The line exponents floor(log2 max(|re|, |im|)) of x's rows (rows) or columns, int32 (R,) or
// (C,): INT32_MIN for a zero line, 1024 for a line holding NaN or Inf (its exponent field all
// ones), as the cupy backend's line_max_exponent (engine: line_scan).
template <class T>
py::array_t<std::int32_t> line_exponents(const py::object& xo, const py::object& im, bool rows) {
  py::array_t<T> x, keep;
  const emu_host::Operand<T> xv = operand_part<T>(xo, "line_exponents", x);
  const long long sr = xv.sr, sc = xv.sc;
  const Imag<T> y = imag_part<T>(im, x, "line_exponents", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  const int L = rows ? R : C, E = rows ? C : R;  // lines, entries per line
  const long long lx = rows ? sr : sc, ex = rows ? sc : sr;  // strides: line, entry
  const long long ly = rows ? y.sr : y.sc, ey = rows ? y.sc : y.sr;
  py::array_t<std::int32_t> out(L);
  std::int32_t* po = out.mutable_data();
  const T* px = xv.p;
  {
    py::gil_scoped_release nogil;
    std::vector<u64> mx(static_cast<std::size_t>(L), 0);
    const int nt = omp_max_threads();
    if (std::llabs(lx) < std::llabs(ex) &&
        (E < 4ll * nt || static_cast<long long>(nt) * L > (1ll << 24))) {
      // lines across memory, few entries per line or very many lines: blocks of lines
      const int width = block_width(L);
#pragma omp parallel for schedule(static)
      for (int l0 = 0; l0 < L; l0 += width) {
        const int len = std::min(width, L - l0);
        for (int e = 0; e < E; ++e) {
          across_max_bits(px + l0 * lx + e * ex, lx, len, mx.data() + l0);
          if (y.p) across_max_bits(y.p + l0 * ly + e * ey, ly, len, mx.data() + l0);
        }
      }
    } else if (std::llabs(lx) < std::llabs(ex)) {  // lines across memory: whole rows of memory
      // Each thread takes the maxima of a range of entries of every line (contiguous reads),
      // then the threads' maxima are merged (a max is exact in any order).
      std::vector<u64> part(static_cast<std::size_t>(nt) * L, 0);
#pragma omp parallel num_threads(nt)
      {
        u64* mine = part.data() + static_cast<std::size_t>(team_rank()) * L;
#pragma omp for schedule(static)
        for (int e = 0; e < E; ++e) {
          across_max_bits(px + e * ex, lx, L, mine);
          if (y.p) across_max_bits(y.p + e * ey, ly, L, mine);
        }
      }
      for (int t = 0; t < nt; ++t)
        for (int l = 0; l < L; ++l)
          mx[l] = std::max(mx[l], part[static_cast<std::size_t>(t) * L + l]);
    } else {
#pragma omp parallel for schedule(static)
      for (int l = 0; l < L; ++l) {
        u64 m = line_max_bits(px + l * lx, ex, E);
        if (y.p) m = std::max(m, line_max_bits(y.p + l * ly, ey, E));
        mx[l] = m;
      }
    }
    // exponent_of: INT32_MIN for a zero line, 1024 for NaN or Inf (its exponent field)
    for (int l = 0; l < L; ++l) po[l] = exponent_of(from_bits(mx[l]));
  }
  return out;
}

// float64 (R, C) C-contiguous = float32 c (R, C, C-contiguous) times factor, each product
// rounded once (OpenMP, huge-page memory): the BF16 tile GEMM's sums scaled into the bound.
py::array_t<double> host_scaled_float64(py::array_t<float, py::array::c_style> c, double factor) {
  if (c.ndim() != 2) throw std::invalid_argument("scaled_float64: c must be 2-D");
  const long long R = c.shape(0), C = c.shape(1);
  auto out = emu_host::huge_page_array<double>({static_cast<py::ssize_t>(R),
                                                static_cast<py::ssize_t>(C)});
  const float* pc = c.data();
  double* po = out.mutable_data();
  {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < R; ++r)
      for (long long j = 0; j < C; ++j) po[r * C + j] = static_cast<double>(pc[r * C + j]) * factor;
  }
  return out;
}

// float32 operands (and imaginary parts) are read as they are, else as float64.
py::array_t<std::int32_t> host_line_exponents(py::array x, py::object im, bool rows) {
  if (emu_host::is_float32(x)) return line_exponents<float>(x, im, rows);
  return line_exponents<double>(x, im, rows);
}

// ---- the complex part check's balance test (emulinalg.algorithm.parts.balanced), as
// src_cuda's / the cupy backend's fused kernels (emulinalg/backends/cupy/balance.py): the same
// float64 operations in the same order, each rounded on its own (no contraction in this file).

// (t, d) = (x + y, x - y), x = |re| 2**-e, y = |im| 2**-e (e per row when rows, else per
// column; one rounding each, as numpy's ldexp: -e >= -1023, so scale2 is one product or two
// exact ones), float64 (R, C) C-contiguous, from float64 parts of any element strides.
py::tuple host_balance_sides(py::array_t<double> re, py::array_t<double> im,
                             py::array_t<std::int64_t, py::array::c_style> e, bool rows) {
  const auto [sr, sc] = emu_host::matrix_strides(re, "balance_sides");
  const auto [ir, ic] = emu_host::matrix_strides(im, "balance_sides");
  const int R = static_cast<int>(re.shape(0)), C = static_cast<int>(re.shape(1));
  if (im.shape(0) != R || im.shape(1) != C)
    throw std::invalid_argument("balance_sides: im must have re's shape");
  if (e.size() != (rows ? R : C))
    throw std::invalid_argument("balance_sides: one exponent per line");
  const std::int64_t* pe = e.data();
  for (py::ssize_t q = 0; q < e.size(); ++q)
    if (pe[q] < -1074 || pe[q] > 1023)
      throw std::invalid_argument("balance_sides: exponents in [-1074, 1023]");
  auto t = emu_host::huge_page_array<double>({R, C});
  auto d = emu_host::huge_page_array<double>({R, C});
  const double *px = re.data(), *py_ = im.data();
  double *pt = t.mutable_data(), *pd = d.mutable_data();
  {
    py::gil_scoped_release nogil;
    std::vector<double> f0(e.size()), f1(e.size());
    for (py::ssize_t q = 0; q < e.size(); ++q) {
      const Scale2 f(static_cast<int>(-pe[q]));
      f0[q] = f.f0, f1[q] = f.f1;
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; ++r) {
      const double* xr = px + static_cast<long long>(r) * sr;
      const double* yr = py_ + static_cast<long long>(r) * ir;
      double* tr = pt + static_cast<long long>(r) * C;
      double* dr = pd + static_cast<long long>(r) * C;
      if (rows) {
        const double a0 = f0[r], a1 = f1[r];
        for (int c = 0; c < C; ++c) {
          const double x = (abs_of(xr[c * sc]) * a0) * a1, y = (abs_of(yr[c * ic]) * a0) * a1;
          tr[c] = x + y;
          dr[c] = x - y;
        }
      } else {
        for (int c = 0; c < C; ++c) {
          const double x = (abs_of(xr[c * sc]) * f0[c]) * f1[c];
          const double y = (abs_of(yr[c * ic]) * f0[c]) * f1[c];
          tr[c] = x + y;
          dr[c] = x - y;
        }
      }
    }
  }
  return py::make_tuple(t, d);
}

// parts.balance_fine's test over (m, n) float64 t_lo and s (C-contiguous): every entry fine, or
// in an empty row (rows (m,) bool) or column (cols (n,) bool); terms: parts.balance_terms' 12.
bool host_balance_fine(py::array_t<double, py::array::c_style> t_lo,
                       py::array_t<double, py::array::c_style> s,
                       py::array_t<double, py::array::c_style> terms,
                       py::array_t<bool, py::array::c_style> rows,
                       py::array_t<bool, py::array::c_style> cols) {
  if (t_lo.ndim() != 2 || s.ndim() != 2 || s.shape(0) != t_lo.shape(0) ||
      s.shape(1) != t_lo.shape(1))
    throw std::invalid_argument("balance_fine: t_lo and s must be (m, n)");
  const long long m = t_lo.shape(0), n = t_lo.shape(1);
  if (rows.size() != m || cols.size() != n || terms.size() != 12)
    throw std::invalid_argument("balance_fine: rows (m,), cols (n,) and 12 terms");
  const double *pt = t_lo.data(), *ps = s.data(), *c = terms.data();
  const bool *pr = rows.data(), *pc = cols.data();
  long long bad = 0;
  {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static) reduction(+ : bad)
    for (long long i = 0; i < m; ++i) {
      if (pr[i]) continue;
      const double* ti = pt + i * n;
      const double* si = ps + i * n;
      long long row_bad = 0;
      for (long long j = 0; j < n; ++j) {
        const double t_hi = ((((ti[j] + c[0]) / c[1]) + c[2]) / c[3]) * c[4];
        const double d_hi = ((std::fabs(si[j]) + c[5] * t_hi) + c[6]) * c[7];
        const double part_lo = (ti[j] * c[8] - d_hi * c[9]) * c[10];
        row_bad += !(part_lo >= t_hi * c[11]) & !pc[j];
      }
      bad += row_bad;
    }
  }
  return bad == 0;
}

}  // namespace

void register_ozaki2_stats_host(py::module_& m) {
  m.def("ozaki2_bound_operand", &host_bound_operand, py::arg("x"), py::arg("lines_are_rows") = true,
        py::arg("im") = py::none(), py::arg("exponents") = py::none(),
        "(s, bound, sums, nz, l1, mixed, sq): the accurate-mode prescale's shifts s = 5 - [im "
        "given] - floor(log2 max(|x|, |im|)) per line (int64), its int8 bound operand "
        "floor(|x| 2**(s+1)) (+ floor(|im| 2**(s+1))), (R, C) or, lines_are_rows=False, (C, R), "
        "and per line the sum of those entries, the count of nonzero parts and of entries with "
        "both parts nonzero (int64) and the float64 sums of v = (|x| + |im|) 2**(s-5+[im "
        "given]) and of v**2, in column order. exponents: the lines' floor(log2 max) as "
        "line_exponents gives them (int32 (R,)), which spares the operand's first pass.");
  m.def("ozaki2_bound_max", &host_bound_max, py::arg("F"), py::arg("ra"), py::arg("nza"),
        py::arg("cb"), py::arg("nzb"), py::arg("cplx"),
        "(e, f): float64 row (m,) and column (n,) maxima of the bound U(F, line terms) over the "
        "bound GEMM's int32 sums F (m, n), divided by 4.");
  m.def("ozaki2_cert_operand", &host_cert_operand, py::arg("x"), py::arg("e"),
        py::arg("lines_are_rows") = true, py::arg("im") = py::none(), py::arg("bf16") = false,
        "(mag, l1): float32 max(|x|, |im|) 2**-e truncated toward zero (layout as "
        "ozaki2_bound_operand; bf16=True: its bfloat16 bits, uint16, truncated toward zero) and "
        "the float64 line sums of (|x| + |im|) 2**-e.");
  m.def("line_exponents", &host_line_exponents, py::arg("x"), py::arg("im") = py::none(),
        py::arg("rows") = true,
        "int32 floor(log2 max(|x|, |im|)) per row (rows=True) or column: INT32_MIN for a zero "
        "line, 1024 for a line holding NaN or Inf.");
  m.def("scaled_float64", &host_scaled_float64, py::arg("c"), py::arg("factor"),
        "float64 c * factor (each product rounded once) of a 2-D C-contiguous float32 array.");
  m.def("balance_sides", &host_balance_sides, py::arg("re"), py::arg("im"), py::arg("e"),
        py::arg("rows"),
        "(t, d) float64 (R, C): |re| 2**-e + |im| 2**-e and |re| 2**-e - |im| 2**-e, e (int64) per "
        "row (rows=True) or per column: emulinalg.algorithm.parts.balance_sides.");
  m.def("balance_fine", &host_balance_fine, py::arg("t_lo"), py::arg("s"), py::arg("terms"),
        py::arg("rows"), py::arg("cols"),
        "emulinalg.algorithm.parts.balance_fine's test over (m, n) t_lo and s: bool.");
  m.def("bf16_lower", &host_bf16_lower, py::arg("x"),
        "uint16 bfloat16 bits (R, C), row-major, of the float64 matrix x truncated toward zero.");
  m.def("ozaki2_refine_step", &host_refine_step, py::arg("ar"), py::arg("ai"), py::arg("br"),
        py::arg("bi"), py::arg("shift_a"), py::arg("shift_b"), py::arg("need"), py::arg("beyond"),
        py::arg("fails"), py::arg("level"), py::arg("F"), py::arg("c"), py::arg("fexp"), py::arg("fexp_mixed"),
        py::arg("mixa"), py::arg("mixb"), py::arg("lower_terms"), py::arg("na"), py::arg("p"),
        py::arg("nb"), py::arg("q"), py::arg("native"), py::arg("refine_terms"),
        py::arg("theta_cap"), py::arg("limit"), py::arg("sample"), py::arg("patch_cap"),
        "(sus, failing, patch): one step of the suspect refinement (refinement.refine_and_patch) "
        "at count c from the exact test of c - 1 (failing it: fails > level) on the entries not "
        "beyond: the suspects, the failures of their refined test (-1: not tested, none or more "
        "than limit; the test stops once more than patch_cap fail, so beyond patch_cap it is a "
        "lower bound) and the first min(failing, patch_cap) failing flat indices.");
  m.def("ozaki2_cert_entries", &host_cert_entries, py::arg("F"), py::arg("fexp"), py::arg("na"),
        py::arg("alpha"), py::arg("nb"), py::arg("beta"), py::arg("factor"), py::arg("abs_term"),
        py::arg("cR"), py::arg("c4"), py::arg("thr"), py::arg("base"), py::arg("mixa"),
        py::arg("mixb"), py::arg("fexp_mixed"), py::arg("c") = py::none(),
        py::arg("exact_a") = py::none(), py::arg("exact_b") = py::none(),
        "(need, count, at_count, beyond) of the certificate from the lower bound F 2**-fexp of "
        "the bound GEMM's int32 sums F (m, n), or the larger of that and the float32 GEMM sums "
        "c's: per entry base + the index of the first threshold that certifies it. With the "
        "exact line factors of every count (exact_a (nth, m), exact_b (nth, n) float64, "
        "non-increasing in the count) also (xneed, xhist): per entry base + the first index whose "
        "exact test passes (255 for an entry beyond every count), and their histogram over the "
        "certifiable entries (nth + 1,).");
}
