// Scheme II's residue, product and CRT stages on the CPU. The CRT compiles the cupy
// backend's CUDA C++ (src_cuda/ozaki2_crt.cu, ozaki2_crt_s8.cu) as host C++ (cuda_host.hpp)
// with OpenMP over rows; the residues have their own vectorized float64 form of the same
// integers (below). The outputs are bit-identical to emulinalg.algorithm's numpy code
// (products.product; tests/backends/amx/ checks it). Real products, and complex ones by 3M
// (three planes per operand: re, im, re + im; three GEMMs per modulus combined into the real and
// imaginary residues) or modulo the Gaussian moduli (kGaussianModuli: two planes u = re + iota
// im, v = re - iota im; two GEMMs per modulus, U and V combined into Re = (U + V) / 2 and
// Im = (U - V) / (2 iota)).
//
//   residues: float64 lines x (shift per line) -> int8 symmetric residues of x 2**shift rounded
//             to nearest (ties to even) or toward zero, as
//             emulinalg.algorithm.scaling.scale_to_integers, for moduli 0..n-1, planes
//             (n, rows, cols) in any output layout
//   pack, multiply: the residues straight into the tile GEMM's int8 panels; one GEMM per
//             modulus, reduced mod m_l into int8 residues in its epilogue (kernel.hpp)
//   crt:      int8 residues (n, m, n) -> exact CRT integer -> correctly rounded float64 /
//             float32 / double-double, unscaled by 2**-(mu_i + nu_j)
#include "cuda_host.hpp"
#include "host_loops.hpp"
#include "gemm.hpp"
#include "tile_config.hpp"

inline void __syncthreads() {}  // declared for the kernels' text; no kernel with one runs here

// From src_cuda/ (include path), with ozaki2_crt.cu, ozaki2_common.cuh and ozaki2_tables.h
// (kModuli, kCrtWords, kDigitStride, ...: generated from the Python tables).
#define __CUDACC_RTC__  // the sources' explicit kernel instantiations are for nvcc only
#include "ozaki2_crt_s8.cu"
#undef __CUDACC_RTC__

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/pybind11.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>


namespace py = pybind11;

namespace {

// The residues, vectorized: the CUDA kernel's word arithmetic (element_words, residue_of) runs
// one entry per thread; here the same integers are reached with exact float64 operations,
// vectorized (explicit AVX-512 loops, or portable ones compiled for AVX2 and the baseline; every
// operation is exact, so all paths give the same residues, which
// tests/backends/amx/test_amx_host_pipeline.py checks against Python integers and against
// emulinalg.algorithm.residues):
//   v  = |x| 2**shift                 as (|x| f1) f2, both powers of two: exact wherever v is
//                                     normal (below, v < 1/2 however it rounds: X = 0)
//   X  = h2 2**56 + h1 2**28 + h0     h2 = floor(v 2**-56) < 2**26, r1 = v - h2 2**56,
//                                     h1 = floor(r1 2**-28) < 2**28, r0 = r1 - h1 2**28 < 2**28
//                                     (exact scalings and differences), h0 = floor(r0), or
//                                     rne(r0) <= 2**28 to round v to nearest, ties to even (h0
//                                     and X have one parity); |X| <= 2**82
//   s  = sign(x) h0 + (2**28 mod m) sign(x) h1 + (2**56 mod m) sign(x) h2   |s| < 2**37: exact
//   r  = s - m rne(s * (1/m))         the nearest quotient: for odd m, s / m is at least 1/(2m)
//                                     >= 2**-9 from a half-integer and s * (1/m) within 2**-22
//                                     of s / m, so r is the symmetric residue in
//                                     [-(m - 1) / 2, (m - 1) / 2]; for m = 256 (1/m exact)
//                                     a tie gives r = 128, which becomes -128 (r - m for
//                                     r > (m - 1) / 2).
constexpr int kRun = 64;  // entries per vectorized run

struct ModConst {
  double m, inv, c28, c56, half, low;  // m, 1/m, 2**28 mod m, 2**56 mod m, (m - 1) / 2, -(m / 2)
  double iota;                         // the Gaussian moduli's square root of -1 (else 0)
};
struct ModTable {
  ModConst c[kMaxModuli];
  explicit ModTable(bool gauss) {
    for (int l = 0; l < kMaxModuli; ++l) {
      const unsigned m = gauss ? kGaussianModuli[l] : kModuli[l];
      c[l] = {double(m), 1.0 / m, double(pow2mod(28, m)), double(pow2mod(56, m)),
              double((m - 1) / 2), -double(m / 2), gauss ? double(kGaussianIota[l]) : 0.0};
    }
  }
};
const ModTable kModTable(false), kGaussTable(true);

// 2**p for p in [-1074, 1023], exactly; 0 below.
inline double pow2_or_zero(int p) { return p < -1074 ? 0.0 : emu_host::pow2(p); }

// |x| 2**shift as (|x| f1) f2: f1 = 2**clamp(shift, -1022, 1023) is one exact product wherever
// the result is normal; f2 carries the rest: > 1 only for lines of tiny entries (both products
// exact), < 1 only for shift < -1022, where v < 2 and |x| f1 is exact whenever v >= 1/2 (else
// X = 0, rounded to nearest or toward zero). f2 is capped at 2**1023: beyond, |X| would exceed
// 2**972 for any nonzero x, far outside the contract, and 0 x inf would be NaN.
struct ShiftFactors {
  std::vector<double> f1, f2;
};
// Padded with 1.0 to whole runs: a run across lines reads kRun factors (times 0 beyond len).
ShiftFactors shift_factors(const int* shift, int n) {
  const std::size_t padded = static_cast<std::size_t>((n + kRun - 1) / kRun) * kRun;
  ShiftFactors f{std::vector<double>(padded, 1.0), std::vector<double>(padded, 1.0)};
  for (int i = 0; i < n; ++i) {
    const int p1 = std::min(std::max(shift[i], -1022), 1023);
    f.f1[i] = pow2_or_zero(p1);
    f.f2[i] = pow2_or_zero(std::min(shift[i] - p1, 1023));
  }
  return f;
}

// floor(y) for |y| < 2**51 from emu_host::rne: std::floor does not vectorize under
// -ftrapping-math (GCC's default), its additions and a select of constants do.
inline double floor_small(double y) {
  const double r = emu_host::rne(y);
  return r - (r > y ? 1.0 : 0.0);
}

// The pieces h0, h1, h2 and the sign of X = x 2**shift rounded to nearest, ties to even
// (nearest), or toward zero, for kRun entries x[t sx] (t < len; zeros beyond), scaled by
// (f1, f2)[t] (per_value) or (f1, f2)[0].
struct Pieces {
  alignas(64) double h0[kRun], h1[kRun], h2[kRun], sg[kRun];
};
template <class T>
__attribute__((always_inline)) inline void pieces(const T* x, long long sx, int len,
                                                  const double* f1, const double* f2,
                                                  bool per_value, bool nearest, Pieces& p) {
  const double down = nearest ? 0.0 : 1.0;  // floor_small's step, kept a select of constants
  alignas(64) double v[kRun], xs[kRun];
  if (sx == 1 && len == kRun) {  // a whole run along memory: a plain (widening) copy
    for (int t = 0; t < kRun; ++t) xs[t] = static_cast<double>(x[t]);
  } else {
    for (int t = 0; t < kRun; ++t) xs[t] = t < len ? static_cast<double>(x[t * sx]) : 0.0;
  }
  for (int t = 0; t < kRun; ++t) {
    const int i = per_value ? t : 0;
    const double xv = xs[t];
    v[t] = (std::fabs(xv) * f1[i]) * f2[i];
    p.sg[t] = xv < 0.0 ? -1.0 : 1.0;
  }
  for (int t = 0; t < kRun; ++t) {
    const double h2 = floor_small(v[t] * 0x1p-56);
    const double r1 = v[t] - h2 * 0x1p56;
    const double h1 = floor_small(r1 * 0x1p-28);
    const double r0 = r1 - h1 * 0x1p28;
    const double r = emu_host::rne(r0);
    p.h2[t] = h2 * p.sg[t];  // signed once here, not once per modulus
    p.h1[t] = h1 * p.sg[t];
    p.h0[t] = (r - (r > r0 ? down : 0.0)) * p.sg[t];
  }
}

// Symmetric residues of the run's integers mod c.m, as float64 values (the pieces signed).
__attribute__((always_inline)) inline void residues_mod(const Pieces& p, const ModConst& c,
                                                        double* r) {
  for (int t = 0; t < kRun; ++t) {
    const double s = p.h0[t] + c.c28 * p.h1[t] + c.c56 * p.h2[t];
    const double u = s - emu_host::rne(s * c.inv) * c.m;
    r[t] = u - (u > c.half ? c.m : 0.0);  // a select of constants: it vectorizes
  }
}

// 64 bytes to a 64-byte aligned destination with non-temporal stores (SSE2).
inline void stream_line(void* dst, const void* src) {
  const auto* s = static_cast<const __m128i*>(src);
  auto* d = static_cast<__m128i*>(dst);
  for (int q = 0; q < 4; ++q) _mm_stream_si128(d + q, _mm_load_si128(s + q));
}

// len int8 values of r to out[t so] (r is 0 beyond the run's entries); stream: a whole
// 64-byte aligned tile row (len = kRun, so = 1) with non-temporal stores.
__attribute__((always_inline)) inline void put_residues(const double* r, int len,
                                                        signed char* out, long long so,
                                                        bool stream) {
  alignas(64) signed char o[kRun];
  for (int t = 0; t < kRun; ++t) o[t] = static_cast<signed char>(static_cast<int>(r[t]));
  if (stream) {
    stream_line(out, o);
  } else if (so == 1) {
    std::memcpy(out, o, len);
  } else {
    for (int t = 0; t < len; ++t) out[t * so] = o[t];
  }
}

// One run of up to kRun entries of a line (or across lines: per_value) to every plane: real
// (y == nullptr) planes out[l plane], or 3M planes re, im, re + im (sets `set` apart), or with
// `gauss` the Gaussian moduli's planes u = re + iota im, v = re - iota im; out_len values per
// plane (len, or kRun with zeros beyond len: a whole tile row of a panel).
template <class T>
__attribute__((target_clones("avx2", "default"))) void residue_run_generic(
    const T* x, long long sx, const T* y, long long sy, int len, const double* f1,
    const double* f2, bool per_value, bool nearest, int nmod, bool gauss, signed char* out,
    long long so, long long plane, long long set, int out_len, bool stream) {
  Pieces px, py;
  pieces(x, sx, len, f1, f2, per_value, nearest, px);
  if (y != nullptr) pieces(y, sy, len, f1, f2, per_value, nearest, py);
  alignas(64) double rr[kRun], ri[kRun];
  const ModTable& tab = gauss && y != nullptr ? kGaussTable : kModTable;
  for (int l = 0; l < nmod; ++l) {
    const ModConst& c = tab.c[l];
    residues_mod(px, c, rr);
    if (y == nullptr) {
      put_residues(rr, out_len, out + l * plane, so, stream);
      continue;
    }
    residues_mod(py, c, ri);
    if (&tab == &kGaussTable) {  // re +- iota im: |.| < 2**15, exact; one rounded quotient
      const double m = c.m, inv = c.inv, half = c.half, iota = c.iota;
      alignas(64) double rv[kRun];
      for (int t = 0; t < kRun; ++t) {
        const double s = rr[t] + iota * ri[t], d = rr[t] - iota * ri[t];
        double u = s - m * emu_host::rne(s * inv), v = d - m * emu_host::rne(d * inv);
        rr[t] = u > half ? u - m : u;
        rv[t] = v > half ? v - m : v;
      }
      put_residues(rr, out_len, out + l * plane, so, stream);
      put_residues(rv, out_len, out + set + l * plane, so, stream);
      continue;
    }
    put_residues(rr, out_len, out + l * plane, so, stream);
    put_residues(ri, out_len, out + set + l * plane, so, stream);
    // (re + im) mod m from the two symmetric residues; the constants in locals (else GCC
    // reloads them after each store and leaves the loop scalar, with a branch per entry)
    const double m = c.m, half = c.half, low = c.low;
    for (int t = 0; t < kRun; ++t) {
      double u = rr[t] + ri[t];
      u = u > half ? u - m : u;
      rr[t] = u < low ? u + m : u;
    }
    put_residues(rr, out_len, out + 2 * set + l * plane, so, stream);
  }
}

// The symmetric residues of 8 entries' pieces (h0, h1, h2 at p + g) mod c.m, as int8 at o + g:
// residues_mod's operations, fused where the product is exact (every product and sum here is
// an exact integer below 2**53, so fusing changes no value). Without `fold`, m = 256's tie
// stays 128 (for |X| < 2**96, the contract, odd moduli never exceed (m - 1) / 2): right only
// where pack64's truncation to int8 comes next (128 -> -128), which saves a compare and a
// masked subtraction per vector.
template <bool fold = true>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d
residue8(const Pieces& p, int g, __m512d m, __m512d inv, __m512d c28, __m512d c56,
         __m512d half) {
  const __m512d s = _mm512_fmadd_pd(
      c56, _mm512_load_pd(p.h2 + g), _mm512_fmadd_pd(c28, _mm512_load_pd(p.h1 + g),
                                                     _mm512_load_pd(p.h0 + g)));
  const __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(s, inv),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512d u = _mm512_fnmadd_pd(q, m, s);
  if (!fold) return u;
  return _mm512_mask_sub_pd(u, _mm512_cmp_pd_mask(u, half, _CMP_GT_OQ), u, m);
}

// 64 int8 residues from 8 vectors of 8 (exact integers in [-128, 127]) in one zmm.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512i
pack64(const __m512d (&r)[8]) {
  __m128i q[4];
  for (int h = 0; h < 4; ++h)
    q[h] = _mm512_cvtepi32_epi8(_mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtpd_epi32(r[2 * h])), _mm512_cvtpd_epi32(r[2 * h + 1]),
        1));
  const __m512i lo = _mm512_inserti64x2(_mm512_castsi128_si512(q[0]), q[1], 1);
  return _mm512_inserti64x2(_mm512_inserti64x2(lo, q[2], 2), q[3], 3);
}

// out_len residues of a run (zeros beyond the run's entries) to out[t so], as put_residues.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline void
emit_run(__m512i v, int out_len, signed char* out, long long so, bool stream) {
  if (stream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), v);
  } else if (so == 1 && out_len == kRun) {
    _mm512_storeu_si512(out, v);
  } else {
    alignas(64) signed char o[kRun];
    _mm512_store_si512(o, v);
    for (int t = 0; t < out_len; ++t) out[t * so] = o[t];
  }
}

// 8 entries from x (float64, or float32 widened exactly).
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d
load8(const double* x) {
  return _mm512_loadu_pd(x);
}
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d
load8(const float* x) {
  return _mm512_cvtps_pd(_mm256_loadu_ps(x));
}

// floor_small and emu_host::rne, 8 at a time: the same operations, so the same values.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d
rne8(__m512d y) {
  const __m512d magic = _mm512_set1_pd(emu_host::kRneMagic);
  return _mm512_sub_pd(_mm512_add_pd(y, magic), magic);
}
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline __m512d
floor8(__m512d y, __m512d step) {
  const __m512d r = rne8(y);
  return _mm512_mask_sub_pd(r, _mm512_cmp_pd_mask(r, y, _CMP_GT_OQ), r, step);
}

// pieces() for a whole run along memory (sx = 1, len = kRun) on CPUs with AVX-512: its
// operations 8 entries at a time in registers (every product by a power of two below is exact,
// so fusing it into the subtraction changes no value), the signed pieces stored once; other
// runs take pieces().
template <class T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), always_inline)) inline void
pieces_avx512(const T* x, long long sx, int len, const double* f1, const double* f2,
              bool per_value, bool nearest, Pieces& p) {
  if (sx != 1 || len != kRun) {
    pieces(x, sx, len, f1, f2, per_value, nearest, p);
    return;
  }
  const __m512d one = _mm512_set1_pd(1.0), minus = _mm512_set1_pd(-1.0);
  const __m512d down = nearest ? _mm512_setzero_pd() : one, zero = _mm512_setzero_pd();
  const __m512d lo56 = _mm512_set1_pd(0x1p-56), hi56 = _mm512_set1_pd(0x1p56);
  const __m512d lo28 = _mm512_set1_pd(0x1p-28), hi28 = _mm512_set1_pd(0x1p28);
  const __m512d g1 = _mm512_set1_pd(f1[0]), g2 = _mm512_set1_pd(f2[0]);
  for (int g = 0; g < kRun; g += 8) {
    const __m512d xv = load8(x + g);
    const __m512d a1 = per_value ? _mm512_loadu_pd(f1 + g) : g1;
    const __m512d a2 = per_value ? _mm512_loadu_pd(f2 + g) : g2;
    const __m512d v = _mm512_mul_pd(_mm512_mul_pd(_mm512_abs_pd(xv), a1), a2);
    const __m512d sg = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(xv, zero, _CMP_LT_OQ), one, minus);
    const __m512d h2 = floor8(_mm512_mul_pd(v, lo56), one);
    const __m512d r1 = _mm512_fnmadd_pd(h2, hi56, v);
    const __m512d h1 = floor8(_mm512_mul_pd(r1, lo28), one);
    const __m512d r0 = _mm512_fnmadd_pd(h1, hi28, r1);
    const __m512d h0 = floor8(r0, down);  // rne(r0), less `down` where it rounded up
    _mm512_store_pd(p.h2 + g, _mm512_mul_pd(h2, sg));
    _mm512_store_pd(p.h1 + g, _mm512_mul_pd(h1, sg));
    _mm512_store_pd(p.h0 + g, _mm512_mul_pd(h0, sg));
  }
}

// residue_run on CPUs with AVX-512 (F, DQ, BW, VL): the same residues, 8 entries at a time
// through every modulus with the constants in registers and a run's 64 residues stored at once,
// instead of residue_run_generic's passes over run-long arrays per modulus (what GCC makes of
// the portable loops).
template <class T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void residue_run_avx512(
    const T* x, long long sx, const T* y, long long sy, int len, const double* f1,
    const double* f2, bool per_value, bool nearest, int nmod, bool gauss, signed char* out,
    long long so, long long plane, long long set, int out_len, bool stream) {
  Pieces px, py;
  pieces_avx512(x, sx, len, f1, f2, per_value, nearest, px);
  if (y != nullptr) pieces_avx512(y, sy, len, f1, f2, per_value, nearest, py);
  gauss = gauss && y != nullptr;
  const ModTable& tab = gauss ? kGaussTable : kModTable;
  for (int l = 0; l < nmod; ++l) {
    const ModConst& c = tab.c[l];
    const __m512d m = _mm512_set1_pd(c.m), inv = _mm512_set1_pd(c.inv);
    const __m512d c28 = _mm512_set1_pd(c.c28), c56 = _mm512_set1_pd(c.c56);
    const __m512d half = _mm512_set1_pd(c.half), low = _mm512_set1_pd(c.low);
    __m512d rr[8], ri[8];
    if (y == nullptr) {  // straight to int8 (residue8<false>)
      for (int g = 0; g < 8; ++g) rr[g] = residue8<false>(px, 8 * g, m, inv, c28, c56, half);
      emit_run(pack64(rr), out_len, out + l * plane, so, stream);
      continue;
    }
    for (int g = 0; g < 8; ++g) rr[g] = residue8(px, 8 * g, m, inv, c28, c56, half);
    for (int g = 0; g < 8; ++g) ri[g] = residue8(py, 8 * g, m, inv, c28, c56, half);
    if (gauss) {  // re +- iota im, as residue_run_generic: exact, one rounded quotient
      const __m512d iota = _mm512_set1_pd(c.iota);
      __m512d rv[8];
      for (int g = 0; g < 8; ++g) {
        const __m512d s = _mm512_fmadd_pd(iota, ri[g], rr[g]);
        const __m512d d = _mm512_fnmadd_pd(iota, ri[g], rr[g]);
        const int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const __m512d u = _mm512_fnmadd_pd(_mm512_roundscale_pd(_mm512_mul_pd(s, inv), rn), m, s);
        const __m512d v = _mm512_fnmadd_pd(_mm512_roundscale_pd(_mm512_mul_pd(d, inv), rn), m, d);
        rr[g] = _mm512_mask_sub_pd(u, _mm512_cmp_pd_mask(u, half, _CMP_GT_OQ), u, m);
        rv[g] = _mm512_mask_sub_pd(v, _mm512_cmp_pd_mask(v, half, _CMP_GT_OQ), v, m);
      }
      emit_run(pack64(rr), out_len, out + l * plane, so, stream);
      emit_run(pack64(rv), out_len, out + set + l * plane, so, stream);
      continue;
    }
    emit_run(pack64(rr), out_len, out + l * plane, so, stream);
    emit_run(pack64(ri), out_len, out + set + l * plane, so, stream);
    for (int g = 0; g < 8; ++g) {  // (re + im) mod m, as residue_run_generic
      __m512d u = _mm512_add_pd(rr[g], ri[g]);
      u = _mm512_mask_sub_pd(u, _mm512_cmp_pd_mask(u, half, _CMP_GT_OQ), u, m);
      rr[g] = _mm512_mask_add_pd(u, _mm512_cmp_pd_mask(u, low, _CMP_LT_OQ), u, m);
    }
    emit_run(pack64(rr), out_len, out + 2 * set + l * plane, so, stream);
  }
}

// One run of residues (residue_run_generic's contract), on the AVX-512 path where the CPU
// has it.
template <class T>
inline void residue_run(const T* x, long long sx, const T* y, long long sy, int len,
                        const double* f1, const double* f2, bool per_value, bool nearest,
                        int nmod, signed char* out, long long so, long long plane, long long set,
                        int out_len, bool stream, bool gauss = false) {
  if (emu_host::avx512_loops())
    residue_run_avx512(x, sx, y, sy, len, f1, f2, per_value, nearest, nmod, gauss, out, so,
                       plane, set, out_len, stream);
  else
    residue_run_generic(x, sx, y, sy, len, f1, f2, per_value, nearest, nmod, gauss, out, so,
                        plane, set, out_len, stream);
}

// Residue planes of the R x C lines x (element strides sr, sc; and y beside it for 3M, strides
// yr, yc), line r scaled by 2**shift[r] and rounded as `nearest` says; entry (r, c) of plane l
// at out[l plane + r out_r + c out_c]. Runs follow x's contiguous axis: along a line, or across
// kRun lines.
void residues_all(const double* x, long long sr, long long sc, const double* y, long long yr,
                  long long yc, int R, int C, const int* shift, bool nearest, int nmod,
                  signed char* out, long long plane, long long set, long long out_r,
                  long long out_c, bool gauss = false) {
  const ShiftFactors f = shift_factors(shift, R);
  if (std::llabs(sr) < std::llabs(sc)) {
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < R; r0 += kRun) {
      const int len = std::min(kRun, R - r0);
      for (int c = 0; c < C; ++c)
        residue_run(x + r0 * sr + c * sc, sr, y ? y + r0 * yr + c * yc : nullptr, yr, len,
                    &f.f1[r0], &f.f2[r0], true, nearest, nmod, out + r0 * out_r + c * out_c,
                    out_r, plane, set, len, false, gauss);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; ++r)
    for (int c0 = 0; c0 < C; c0 += kRun)
      residue_run(x + r * sr + c0 * sc, sc, y ? y + r * yr + c0 * yc : nullptr, yc,
                  std::min(kRun, C - c0), &f.f1[r], &f.f2[r], false, nearest, nmod,
                  out + r * out_r + c0 * out_c, out_c, plane, set, std::min(kRun, C - c0),
                  false, gauss);
}

// ---- Scheme II on packed panels: the residues written straight into the tile GEMM's int8
// panels (pack.hpp's layouts, zero padded), then one GEMM per modulus reduced modulo m_l in its
// epilogue (kernel.hpp, gemm_s8_mod_tiles): no residue planes, no per-modulus packing, no int32
// products in memory.

namespace amx = emulinalg::amx;

void check_moduli(int nmod);                  // below
constexpr long long kMaxK = (1ll << 17) - 1;  // kernel.hpp's kMaxKS8: exact int32 sums

// The residue panels of a product's operands: per operand `sets` x `nmod` panels one after the
// other (`panel` bytes each): A's rows in 16-row blocks (ablocks = whole 32-row register
// blocks), B's columns in VNNI 16-column blocks; ktiles K tiles of 64. Complex (sets = 3): the
// residues of re, im and re + im (3M); with `gauss` (sets = 2) u = re + iota im and
// v = re - iota im modulo the Gaussian moduli.
struct Ozaki2Panels {
  // shared: an ozaki2_multiply in flight keeps its own references (release_operands in another
  // Python thread only drops the object's)
  std::shared_ptr<amx::PooledBytes> a, b;
  amx::PooledBytes res;  // the products' residues (parts, nmod, m, n), int8: the CRT's input
  long long m = 0, n = 0, k = 0, ablocks = 0, bblocks = 0, ktiles = 0, apanel = 0, bpanel = 0;
  int nmod = 0, sets = 1;
  bool gauss = false;    // complex, modulo the Gaussian moduli (kGaussianModuli)
  bool stream = false;   // panels written with non-temporal stores
  bool nearest = false;  // the scaled operands rounded to nearest (else toward zero)
  // The tiles of panel (set, l) in the stack at `stack` (a's or b's bytes; panel bytes each),
  // in pack.hpp's layouts (`blocks`: ablocks or bblocks).
  amx::TileSource source(const amx::PooledBytes& stack, long long panel, long long blocks,
                         int set, int l) const {
    const std::uint8_t* base = stack.get() + (static_cast<long long>(set) * nmod + l) * panel;
    return amx::panel_source(base, blocks, ktiles, chunked);
  }
  // Tile (block, kt) of the first panel of a stack (the others lie panel bytes apart).
  std::uint8_t* tile(const amx::PooledBytes& stack, long long blocks, long long block,
                     long long kt) const {
    return const_cast<std::uint8_t*>(source(stack, 0, blocks, 0, 0).tile(block, kt));
  }
  bool chunked = true;  // chunked pairs, else plain (ozaki2_pack's `chunked`)
};

// A (m x k, lines = rows) into its panels: row i's K tile kt is tile row (i / 16, kt, i % 16),
// one residue run of 64 per tile row; rows beyond m are zeros.
template <class T>
void pack_rows(const T* x, long long sr, long long sc, const T* y, long long yr,
               long long yc, const int* shift, Ozaki2Panels& P) {
  const ShiftFactors f = shift_factors(shift, static_cast<int>(P.m));
  const long long set = static_cast<long long>(P.nmod) * P.apanel;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (long long i = 0; i < P.ablocks * amx::kTileRows; ++i) {
      for (long long kt = 0; kt < P.ktiles; ++kt) {
        std::uint8_t* tile = P.tile(*P.a, P.ablocks, i / amx::kTileRows, kt);
        signed char* out =
            reinterpret_cast<signed char*>(tile + (i % amx::kTileRows) * amx::kTileBytes);
        if (i >= P.m) {
          for (int q = 0; q < P.sets * P.nmod; ++q) std::memset(out + q * P.apanel, 0, kRun);
          continue;
        }
        const long long c0 = kt * kRun;
        residue_run(x + i * sr + c0 * sc, sc, y ? y + i * yr + c0 * yc : nullptr, yc,
                    static_cast<int>(std::min<long long>(kRun, P.k - c0)), &f.f1[i], &f.f2[i],
                    false, P.nearest, P.nmod, out, 1, P.apanel, set, kRun, P.stream, P.gauss);
      }
    }
    if (P.stream) _mm_sfence();  // streamed rows visible before the region's closing barrier
  }
}

// B (k x n, lines = columns) into its VNNI panels: rows 4q .. 4q + 3 of B, a run of 64 columns
// at a time, into a buffer (set, modulus, row g, column), then interleaved (pack.hpp's
// vnni_row) into tile row q % 16 of K tile q / 16 of its four 16-column blocks.
template <class T>
void pack_columns(const T* x, long long sr, long long sc, const T* y, long long yr,
                  long long yc, const int* shift, Ozaki2Panels& P) {
  const ShiftFactors f = shift_factors(shift, static_cast<int>(P.n));
  const long long quads = P.ktiles * amx::kTileRows, runs = (P.bblocks * 16 + kRun - 1) / kRun;
  const int q_all = P.sets * P.nmod;
#pragma omp parallel
  {
    std::vector<signed char> buf(static_cast<std::size_t>(q_all) * 4 * kRun);
#pragma omp for schedule(static) collapse(2) nowait
    for (long long q = 0; q < quads; ++q) {
      for (long long run = 0; run < runs; ++run) {
        const long long j0 = run * kRun;
        const int len =
            static_cast<int>(std::max<long long>(0, std::min<long long>(kRun, P.n - j0)));
        for (int g = 0; g < 4; ++g) {
          const long long kk = 4 * q + g;
          signed char* o = buf.data() + g * kRun;
          if (kk >= P.k || len == 0) {
            for (int u = 0; u < q_all; ++u) std::memset(o + u * 4 * kRun, 0, kRun);
            continue;
          }
          residue_run(x + kk * sr + j0 * sc, sc, y ? y + kk * yr + j0 * yc : nullptr, yc, len,
                      &f.f1[j0], &f.f2[j0], true, P.nearest, P.nmod, o, 1, 4 * kRun,
                      static_cast<long long>(P.nmod) * 4 * kRun, kRun, false, P.gauss);
        }
        const long long kt = q / amx::kTileRows, r = q % amx::kTileRows;
        for (int u = 0; u < q_all; ++u) {
          const signed char* src = buf.data() + u * 4 * kRun;
          for (int jb = 0; jb < kRun / 16; ++jb) {
            const long long block = j0 / 16 + jb;
            if (block >= P.bblocks) break;
            const std::int8_t* rows[4];
            for (int g = 0; g < 4; ++g)
              rows[g] = reinterpret_cast<const std::int8_t*>(src + g * kRun + 16 * jb);
            std::uint8_t* dst =
                P.tile(*P.b, P.bblocks, block, kt) + u * P.bpanel + r * amx::kTileBytes;
            if (P.stream) {
              alignas(64) std::uint8_t line[amx::kTileBytes];
              amx::vnni_row<std::int8_t>(rows, line);
              stream_line(dst, line);
            } else {
              amx::vnni_row<std::int8_t>(rows, dst);
            }
          }
        }
      }
    }
    if (P.stream) _mm_sfence();  // as in pack_rows
  }
}

// Both operands' residue panels (real, or 3M sets when both imaginary parts are given, or the
// Gaussian moduli's two sets with `gaussian`).
template <class T>
std::shared_ptr<Ozaki2Panels> pack_parts(const py::array& ar_in, const py::array& br_in,
                                         py::array_t<int, py::array::c_style> mu,
                                         py::array_t<int, py::array::c_style> nu, int nmod,
                                         const py::object& ai, const py::object& bi,
                                         const py::object& stream, bool nearest, bool gaussian,
                                         const py::object& chunked) {
  check_moduli(nmod);
  if (ai.is_none() != bi.is_none())
    throw std::invalid_argument("ozaki2_pack: give both imaginary parts or neither");
  const bool cplx = !ai.is_none();
  const char* who = "ozaki2_pack";
  py::array_t<T> ar, br, aim, bim;
  const emu_host::Operand<T> A = emu_host::operand_part<T>(ar_in, who, ar);
  const emu_host::Operand<T> B = emu_host::operand_part<T>(br_in, who, br);
  const emu_host::Operand<T> AI = emu_host::imag_part<T>(ai, ar, who, aim);
  const emu_host::Operand<T> BI = emu_host::imag_part<T>(bi, br, who, bim);
  if (br.shape(0) != ar.shape(1))
    throw std::invalid_argument("ozaki2_pack: inner dimensions differ");
  if (ar.shape(1) > kMaxK)
    throw std::invalid_argument("ozaki2_pack: k beyond 2**17 - 1 (int32 sums could overflow)");
  if (mu.size() != ar.shape(0) || nu.size() != br.shape(1))
    throw std::invalid_argument("ozaki2_pack: one shift per row of A and per column of B");
  auto P = std::make_shared<Ozaki2Panels>();
  P->m = ar.shape(0);
  P->k = ar.shape(1);
  P->n = br.shape(1);
  P->nmod = nmod;
  P->gauss = cplx && gaussian;
  P->sets = cplx ? (P->gauss ? 2 : 3) : 1;
  P->nearest = nearest;
  P->chunked = chunked.is_none() ? amx::current_tuning().panels == 1 : chunked.cast<bool>();
  P->ablocks = amx::ceil_div(P->m, amx::kRegRows) * 2;
  P->bblocks = amx::ceil_div(P->n, amx::kRegCols) * 2;
  P->ktiles = std::max<long long>(1, amx::ceil_div(P->k, kRun));
  P->apanel = P->ablocks * P->ktiles * amx::kTileSize;
  P->bpanel = P->bblocks * P->ktiles * amx::kTileSize;
  // Non-temporal stores where the panels cannot stay in the caches anyway (the GEMMs read
  // them back from memory): from 64 MiB of panels on, as bf16_pack.
  const long long panel_bytes = P->sets * nmod * (P->apanel + P->bpanel);
  P->stream = stream.is_none() ? panel_bytes >= (64ll << 20) : stream.cast<bool>();
  P->a = std::make_shared<amx::PooledBytes>(static_cast<std::size_t>(P->sets * nmod * P->apanel));
  P->b = std::make_shared<amx::PooledBytes>(static_cast<std::size_t>(P->sets * nmod * P->bpanel));
  // pooled too: a repeated product finds its 1.2 GB of residues (N = 8192) mapped already
  // (their first touch cost 0.19 s on the AMX host)
  const auto res_bytes = static_cast<std::size_t>((cplx ? 2 : 1) * nmod * P->m * P->n);
  P->res = amx::PooledBytes(std::max<std::size_t>(1, res_bytes));
  py::gil_scoped_release nogil;
  // A fresh buffer's pages faulted in by every thread now, not one by one in the GEMMs'
  // epilogues (the first product's GEMMs ran at half speed, and the K chunk timed on them chose
  // wrongly); a buffer from the cache is mapped already and costs a write per page.
  amx::touch_pages(P->res.get(), res_bytes);
  pack_rows(A.p, A.sr, A.sc, AI.p, AI.sr, AI.sc, mu.data(), *P);
  pack_columns(B.p, B.sr, B.sc, BI.p, BI.sr, BI.sc, nu.data(), *P);
  return P;
}

// Both operands' residue panels from float32 parts read as they are (A and B float32), else
// from float64 ones.
std::shared_ptr<Ozaki2Panels> pack(py::array ar, py::array br,
                                   py::array_t<int, py::array::c_style> mu,
                                   py::array_t<int, py::array::c_style> nu, int nmod,
                                   py::object ai, py::object bi, py::object stream,
                                   bool nearest, bool gaussian, py::object chunked) {
  if (emu_host::is_float32(ar) && emu_host::is_float32(br))
    return pack_parts<float>(ar, br, mu, nu, nmod, ai, bi, stream, nearest, gaussian, chunked);
  return pack_parts<double>(ar, br, mu, nu, nmod, ai, bi, stream, nearest, gaussian, chunked);
}

// out (int8, m x n, C-contiguous, writable) or ValueError.
signed char* residue_out(const py::object& o, const Ozaki2Panels& P, const char* what) {
  py::array a = o.cast<py::array>();
  if (a.ndim() != 2 || a.shape(0) != P.m || a.shape(1) != P.n ||
      !a.dtype().is(py::dtype::of<signed char>()) || !(a.flags() & py::array::c_style) ||
      !a.writeable())
    throw std::invalid_argument(std::string("ozaki2_multiply: ") + what +
                                " must be a writable C-contiguous (m, n) int8 array");
  return static_cast<signed char*>(a.mutable_data());
}

bool mod_gemm(const amx::TileSource& a, const amx::TileSource& b, int m_l, signed char* out,
              const Ozaki2Panels& P, bool emulate, int threads, long long kc) {
  auto* o = reinterpret_cast<std::int8_t*>(out);
#ifdef EMULINALG_AMX_COMPILED
  if (!emulate)
    return amx::gemm_s8_mod_tiles_amx(a, b, m_l, o, P.n, P.m, P.n, P.ktiles, threads, kc);
#endif
  return amx::gemm_s8_mod_tiles_emulated(a, b, m_l, o, P.n, P.m, P.n, P.ktiles, threads,
                                          kc);
}

// Modulus l's product on the panels, as int8 residues: real -> re; complex (3M) -> re = T1 -
// T2, im = T3 - T1 - T2; the Gaussian moduli -> re = (U + V) / 2, im = (U - V) / (2 iota) (each
// product reduced in its GEMM's epilogue; the ring operations after it give the same residues
// as reducing the int32 combinations).
void multiply(const Ozaki2Panels& P, int l, py::object re, py::object im, bool emulate,
              int threads, long long kc) {
  if (kc < 0 || kc > (1 << 20))
    throw std::invalid_argument("ozaki2_multiply: kc in [0, 2**20] (0: the blocking's)");
  if (l < 0 || l >= P.nmod) throw std::invalid_argument("ozaki2_multiply: no such modulus");
  const std::shared_ptr<amx::PooledBytes> pa = P.a, pb = P.b;  // read with the GIL held
  if (!pa || !pb)
    throw std::invalid_argument("ozaki2_multiply: the operands' panels were released");
  auto ta = [&](int set) { return P.source(*pa, P.apanel, P.ablocks, set, l); };
  auto tb = [&](int set) { return P.source(*pb, P.bpanel, P.bblocks, set, l); };
  const amx::Status& st = amx::status(amx::kAmxCompiled);
  if (!emulate && !st.available)
    throw std::runtime_error("ozaki2_multiply: AMX is not available: " +
                             st.reason + " (emulate=True runs the tile model)");
  signed char* pre = residue_out(re, P, "re");
  const bool cplx = P.sets > 1;
  if (cplx == im.is_none())
    throw std::invalid_argument("ozaki2_multiply: im is needed exactly for complex panels");
  signed char* pim = cplx ? residue_out(im, P, "im") : nullptr;
  const int m_l = P.gauss ? kGaussianModuli[l] : kModuli[l];
  bool ok = true;
  py::gil_scoped_release nogil;
  if (!cplx) {
    ok = mod_gemm(ta(0), tb(0), m_l, pre, P, emulate, threads, kc);
  } else if (P.gauss) {
    ok = mod_gemm(ta(0), tb(0), m_l, pre, P, emulate, threads, kc) &&
         mod_gemm(ta(1), tb(1), m_l, pim, P, emulate, threads, kc);
    // No division per entry (it cost more than the GEMMs): Re = (U + V) / 2 halves an even
    // representative (|U + V| <= m - 1; m odd), Im = (U - V) c with c the symmetric residue of
    // 1 / (2 iota), |(U - V) c| < m**2 / 2 < 2**15, reduced by its nearest quotient in float64
    // (exact: the rounding of x / m is far below 1 / (2m); emu_host::rne rounds to nearest).
    const int half = (m_l - 1) / 2, inv2iota = (m_l - kGaussianIota[l]) * ((m_l + 1) / 2) % m_l;
    const int c = inv2iota > half ? inv2iota - m_l : inv2iota;
    const double md = m_l, inv = 1.0 / m_l;
    const long long size = P.m * P.n;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < size; ++i) {
      const int u = pre[i], v = pim[i];
      int s = u + v;
      s = (s + (s & 1) * m_l) / 2;  // an even representative halved (exact)
      s -= s > half ? m_l : 0;
      s += s < -half ? m_l : 0;
      const double d = static_cast<double>((u - v) * c);
      const double q = emu_host::rne(d * inv);
      pre[i] = static_cast<signed char>(s);
      pim[i] = static_cast<signed char>(static_cast<int>(d - md * q));
    }
  } else {
    amx::PooledBytes t3(static_cast<std::size_t>(P.m * P.n));
    signed char* p3 = reinterpret_cast<signed char*>(t3.get());
    ok = mod_gemm(ta(0), tb(0), m_l, pre, P, emulate, threads, kc) &&
         mod_gemm(ta(1), tb(1), m_l, pim, P, emulate, threads, kc) &&
         mod_gemm(ta(2), tb(2), m_l, p3, P, emulate, threads, kc);
    const long long size = P.m * P.n;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < size; ++i) {  // |t1 - t2|, |t3 - t1 - t2| < 3 m: two corrections
      int a = pre[i] - pim[i], b = p3[i] - pre[i] - pim[i];
      a += a < -(m_l / 2) ? m_l : 0;
      a -= a > (m_l - 1) / 2 ? m_l : 0;
      b += b < -(m_l / 2) ? m_l : 0;
      b += b < -(m_l / 2) ? m_l : 0;
      b -= b > (m_l - 1) / 2 ? m_l : 0;
      b -= b > (m_l - 1) / 2 ? m_l : 0;
      pre[i] = static_cast<signed char>(a);
      pim[i] = static_cast<signed char>(b);
    }
  }
  if (!ok)
    throw std::runtime_error("ozaki2_multiply: tile shapes violate the rules (an internal "
                             "error), or no memory for the GEMM's partial sums");
}

// The CRT sums of a run of kRun entries (int8 residues w[l][t], zeros beyond the run):
// acc[i][t] = sum_l w[l][t] wdig[l][i] (int64) and qf[t] = (..(w[0][t] ratio[0]) + ..) +
// w[l][t] ratio[l] in modulus order, as ozaki2_crt_s8's accumulate_s8 for each entry (the same
// operations, vectorized across entries; no contraction in this file).
__attribute__((target_clones("avx2", "default"))) void crt_sums_generic(
    const signed char (*__restrict__ w)[kRun], int nmod, int nw,
    long long (*__restrict__ acc)[kRun], double* __restrict__ qf) {
  for (int i = 0; i < nw; ++i)
    for (int t = 0; t < kRun; ++t) acc[i][t] = 0;
  for (int t = 0; t < kRun; ++t) qf[t] = 0.0;
  for (int l = 0; l < nmod; ++l) {
    for (int i = 0; i < nw; ++i) {
      const long long d = emu_wdig[l * kDigitStride + i];
      for (int t = 0; t < kRun; ++t) acc[i][t] += static_cast<long long>(w[l][t]) * d;
    }
    const double ratio = emu_ratio[l];
    for (int t = 0; t < kRun; ++t) qf[t] = qf[t] + static_cast<double>(w[l][t]) * ratio;
  }
}

// c ? x : y by masks: GCC's if-conversion leaves many ternaries as branches, which stops the
// loops below from vectorizing; both sides are always computed (and always defined). Every lane
// value is 64 bits wide, so that all the loops vectorize with one lane count.
using u64 = unsigned long long;
using i64 = long long;
inline u64 pick(bool c, u64 x, u64 y) { return y ^ ((x ^ y) & (0ull - static_cast<u64>(c))); }
inline i64 pick(bool c, i64 x, i64 y) {
  return static_cast<i64>(pick(c, static_cast<u64>(x), static_cast<u64>(y)));
}
inline i64 clamp64(i64 x, i64 lo, i64 hi) { return std::min(std::max(x, lo), hi); }

// finish()'s carry() lane by lane: words 0..nw-2 into [0, 2**32), the carries upwards.
__attribute__((always_inline)) inline void carry_run(i64 (&a)[kMaxCrtWords][kRun], int nw) {
  for (int i = 0; i + 1 < nw; ++i)
    for (int t = 0; t < kRun; ++t) {
      a[i + 1][t] += a[i][t] >> 32;
      a[i][t] &= 0xffffffffll;
    }
}

// ozaki2_crt.cu's finish() for float64 / float32 outputs, lane by lane over a run (the same
// integer steps with selects instead of branches): Y = X - qP (words a, carried) -> its sign
// and magnitude, the top 64 bits T of |Y| and a sticky bit, then RNE to MANT bits. Only results
// in the normal range (e_res in [EMIN + MANT - 1, EMAX]: every significand bit kept, no
// overflow before rounding; a carry out of the top rounds into the exponent field, up to inf,
// as in finish()) take this path, so that the rounding position is the same in every lane;
// returns false, with nothing written, when a lane of the first len needs finish() itself
// (subnormal, zero-rounding or overflowing results). Shift counts are read from arrays of
// 64-bit values: computed in the same loop, GCC narrows them to 32 bits and then cannot
// vectorize the 64-bit shifts. Always inlined: compiled once per target of crt_finish_run.
template <int MANT, int EMIN, int EMAX>
__attribute__((always_inline)) inline bool round_run(i64 (&a)[kMaxCrtWords][kRun], int nw,
                                                     const i64* off, int len, u64* out_bits) {
  u64 neg[kRun];
  for (int t = 0; t < kRun; ++t) neg[t] = 0ull - static_cast<u64>(a[nw - 1][t] < 0);
  for (int i = 0; i < nw; ++i)  // |Y|: conditional negation, then the carries again
    for (int t = 0; t < kRun; ++t)
      a[i][t] = static_cast<i64>((static_cast<u64>(a[i][t]) ^ neg[t]) - neg[t]);
  carry_run(a, nw);
  i64 bl[kRun];  // bit length of |Y|: the highest nonzero word's
  for (int t = 0; t < kRun; ++t) bl[t] = 0;
  for (int i = 0; i < nw; ++i)
    for (int t = 0; t < kRun; ++t) {
      const u64 v = static_cast<u64>(a[i][t]);  // in [0, 2**32)
      double d;  // 2**52 + v exactly, then v: its exponent is v's bit length - 1
      const u64 bits = 0x4330000000000000ull | v;
      std::memcpy(&d, &bits, sizeof d);
      d -= 4503599627370496.0;
      u64 u;
      std::memcpy(&u, &d, sizeof u);
      bl[t] = pick(v != 0, 32 * i + static_cast<i64>(u >> 52) - 1022, bl[t]);
    }
  bool slow = false;  // a lane outside the normal range
  for (int t = 0; t < len; ++t) {
    const i64 e_res = bl[t] - 1 + off[t];
    slow |= (bl[t] != 0) & ((e_res < EMIN + MANT - 1) | (e_res > EMAX));
  }
  if (slow) return false;
  u64 T[kRun], sticky[kRun], ls[kRun], rs[kRun];
  for (int t = 0; t < kRun; ++t) {
    T[t] = 0;
    sticky[t] = 0;
  }
  for (int i = 0; i < nw; ++i) {
    for (int t = 0; t < kRun; ++t) {  // word i lands at bit d = 32 i - (bl - 64) of T
      const i64 d = 32 * i - (bl[t] - 64);
      ls[t] = static_cast<u64>(clamp64(d, 0, 63));
      rs[t] = static_cast<u64>(clamp64(-d, 0, 31));
    }
    for (int t = 0; t < kRun; ++t) {
      const u64 v = static_cast<u64>(a[i][t]);
      const i64 d = 32 * i - (bl[t] - 64);
      const u64 left = pick((d >= 0) & (d < 64), v << ls[t], 0ull);
      const u64 right = pick((d < 0) & (d > -32), v >> rs[t], 0ull);
      const u64 lost = pick(d >= 0, 0ull, pick(d > -32, v - (right << rs[t]), v));
      T[t] |= left | right;
      sticky[t] |= lost;
    }
  }
  constexpr int kDrop = 64 - MANT;
  for (int t = 0; t < kRun; ++t) {
    const i64 e_res = bl[t] - 1 + off[t];
    u64 keep = T[t] >> kDrop;
    const u64 rem = T[t] & ((1ull << kDrop) - 1), half = 1ull << (kDrop - 1);
    const bool tie_up = (sticky[t] != 0) | ((keep & 1) != 0);
    keep += static_cast<u64>((rem > half) | ((rem == half) & tie_up));
    // keep in [2**(MANT-1), 2**MANT]: its carry moves into the exponent field by itself
    u64 bits = (static_cast<u64>(e_res - MANT + 1 - EMIN) << (MANT - 1)) + keep;
    bits = pick(bl[t] == 0, 0ull, bits);
    out_bits[t] = bits | (neg[t] & (MANT == 53 ? 1ull << 63 : 0x80000000ull));
  }
  return true;
}

// finish() for a run of len entries of a float64 (kind 0) or float32 (kind 1) output row;
// false (nothing written) where round_run declines.
__attribute__((target_clones("avx2", "default"))) bool crt_finish_run(
    const i64 (*__restrict__ acc)[kRun], const double* __restrict__ qf, int nw,
    const i64* __restrict__ off, int kind, int len, void* out) {
  i64 a[kMaxCrtWords][kRun];
  i64 qi[kRun];
  for (int t = 0; t < kRun; ++t)  // RNE as __double2int_rn (|qf| <= 2560)
    qi[t] = static_cast<i64>(emu_host::rne(qf[t]));
  for (int i = 0; i < nw; ++i) {
    const i64 d = emu_pdig[i];
    for (int t = 0; t < kRun; ++t) a[i][t] = acc[i][t] - qi[t] * d;
  }
  carry_run(a, nw);
  u64 bits[kRun];
  if (kind == 1) {
    if (!round_run<24, -149, 127>(a, nw, off, len, bits)) return false;
    float* o = static_cast<float*>(out);
    for (int t = 0; t < len; ++t) {
      const unsigned b = static_cast<unsigned>(bits[t]);
      std::memcpy(o + t, &b, sizeof b);
    }
  } else {
    if (!round_run<53, -1074, 1023>(a, nw, off, len, bits)) return false;
    std::memcpy(out, bits, sizeof(double) * len);
  }
  return true;
}

// The AVX-512 CRT (F, DQ, CD, BW, VL): crt_sums_generic's sums and crt_finish_run's rounding
// fused, 8 entries per vector with everything in registers (round_run's lane loops are passes
// over run-long arrays in memory), the residues read from their planes and the results stored
// as they come.
#define EMU_AVX512_CRT __attribute__((target("avx512f,avx512dq,avx512cd,avx512bw,avx512vl")))

// crt_finish_run's steps for 8 entries (lanes `valid`) with their words a and quotient qf:
// q = rne(qf) (VCVTPD2QQ, round to nearest even), Y = X - qP, |Y| carried, its bit length
// (VPLZCNTQ), the top 64 bits and a sticky bit by variable shifts (a count of 64 or more, or a
// negative one read as unsigned, shifts everything out, as round_run's masks do), RNE to MANT
// bits, stored at out. False (nothing stored) where an entry needs finish() (subnormal,
// zero-rounding or overflowing results).
template <int NW, int MANT, int EMIN, int EMAX>
EMU_AVX512_CRT __attribute__((always_inline)) inline bool finish8(
    __m512i (&a)[NW], __m512d qf, __mmask8 valid, long long mu_row, const int* nu, void* out) {
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffll), zero = _mm512_setzero_si512();
  // Y = X - qP (|q| <= 2560: VPMULDQ of the low 32 bits is exact), then carried
  const __m512i q = _mm512_cvt_roundpd_epi64(qf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  for (int i = 0; i < NW; ++i)
    a[i] = _mm512_sub_epi64(a[i], _mm512_mul_epi32(q, _mm512_set1_epi64(emu_pdig[i])));
  for (int i = 0; i + 1 < NW; ++i) {
    a[i + 1] = _mm512_add_epi64(a[i + 1], _mm512_srai_epi64(a[i], 32));
    a[i] = _mm512_and_si512(a[i], lo32);
  }
  const __m512i neg = _mm512_srai_epi64(a[NW - 1], 63);  // all ones where Y < 0
  for (int i = 0; i < NW; ++i) a[i] = _mm512_sub_epi64(_mm512_xor_si512(a[i], neg), neg);
  for (int i = 0; i + 1 < NW; ++i) {
    a[i + 1] = _mm512_add_epi64(a[i + 1], _mm512_srai_epi64(a[i], 32));
    a[i] = _mm512_and_si512(a[i], lo32);
  }
  __m512i bl = zero;  // bit length of |Y|: its highest nonzero word's
  for (int i = 0; i < NW; ++i) {
    const __m512i len_i =
        _mm512_sub_epi64(_mm512_set1_epi64(32 * i + 64), _mm512_lzcnt_epi64(a[i]));
    bl = _mm512_mask_mov_epi64(bl, _mm512_test_epi64_mask(a[i], a[i]), len_i);
  }
  const __m512i nuv = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(valid, nu));
  const __m512i e_res =  // bl - 1 + off, off = -(mu + nu)
      _mm512_sub_epi64(_mm512_sub_epi64(bl, _mm512_set1_epi64(1 + mu_row)), nuv);
  const __mmask8 nonzero = _mm512_test_epi64_mask(bl, bl);
  const __mmask8 slow = valid & nonzero &
                        (_mm512_cmplt_epi64_mask(e_res, _mm512_set1_epi64(EMIN + MANT - 1)) |
                         _mm512_cmpgt_epi64_mask(e_res, _mm512_set1_epi64(EMAX)));
  if (slow) return false;
  __m512i T = zero, sticky = zero;
  const __m512i top = _mm512_sub_epi64(bl, _mm512_set1_epi64(64));
  for (int i = 0; i < NW; ++i) {  // word i lands at bit d = 32 i - (bl - 64) of T
    const __m512i d = _mm512_sub_epi64(_mm512_set1_epi64(32 * i), top);
    const __m512i nd = _mm512_sub_epi64(zero, d);
    const __m512i right = _mm512_srlv_epi64(a[i], nd);  // 0 unless -32 < d <= 0
    T = _mm512_or_si512(T, _mm512_or_si512(_mm512_sllv_epi64(a[i], d), right));
    const __m512i lost = _mm512_sub_epi64(a[i], _mm512_sllv_epi64(right, nd));
    sticky = _mm512_mask_or_epi64(sticky, _mm512_cmplt_epi64_mask(d, zero), sticky, lost);
  }
  constexpr int kDrop = 64 - MANT;
  __m512i keep = _mm512_srli_epi64(T, kDrop);
  const __m512i rem = _mm512_and_si512(T, _mm512_set1_epi64((1ll << kDrop) - 1));
  const __m512i half = _mm512_set1_epi64(1ll << (kDrop - 1));
  const __mmask8 tie_up = _mm512_test_epi64_mask(sticky, sticky) |
                          _mm512_test_epi64_mask(keep, _mm512_set1_epi64(1));
  const __mmask8 up =
      _mm512_cmpgt_epu64_mask(rem, half) | (_mm512_cmpeq_epi64_mask(rem, half) & tie_up);
  keep = _mm512_mask_add_epi64(keep, up, keep, _mm512_set1_epi64(1));
  // keep in [2**(MANT-1), 2**MANT]: its carry moves into the exponent field by itself
  __m512i bits = _mm512_add_epi64(
      _mm512_slli_epi64(_mm512_sub_epi64(e_res, _mm512_set1_epi64(MANT - 1 + EMIN)), MANT - 1),
      keep);
  bits = _mm512_maskz_mov_epi64(nonzero, bits);
  bits = _mm512_or_si512(
      bits, _mm512_and_si512(neg, _mm512_set1_epi64(MANT == 53 ? (1ll << 63) : 0x80000000ll)));
  if (MANT == 53)
    _mm512_mask_storeu_epi64(out, valid, bits);
  else
    _mm256_mask_storeu_epi32(out, valid, _mm512_cvtepi64_epi32(bits));
  return true;
}

// emu_wdig as float64 (exact: 32-bit integers), set with it under the tables' lock.
double wdig_f64[kMaxModuli * kDigitStride];

// One run of len <= kRun entries of an output row (residues at src, plane bytes apart; the
// row's mu, the run's nu) to out, or false where finish8 declines (the caller then redoes the
// whole run with finish(), overwriting what was stored). The sums of G groups of 8 run
// together: the quotient's float additions are one dependent chain per entry. The words'
// sums are float64 FMAs (two ports, where VPMULDQ has one, and the float64 residue is the
// quotient's already): each term |w| 2**31 <= 2**38 and every partial sum of up to 20 below
// 2**43, all exact integers, converted to int64 once at the end.
template <int NMOD, int MANT, int EMIN, int EMAX>
EMU_AVX512_CRT bool crt_run_avx512(const signed char* src, long long plane, int len,
                                   long long mu_row, const int* nu, void* out) {
  constexpr int NW = kCrtWords[NMOD];
  constexpr int G = 4;
  constexpr int kOutBytes = MANT == 53 ? 8 : 4;
  static_assert(NMOD <= 20, "the float64 sums stay exact for up to 20 terms");
  for (int g0 = 0; g0 < len; g0 += 8 * G) {
    __m512d accd[G][NW];
    __m512d qf[G];
    __mmask8 valid[G];
    for (int h = 0; h < G; ++h) {
      const int cnt = std::max(0, std::min(8, len - g0 - 8 * h));
      valid[h] = static_cast<__mmask8>((1u << cnt) - 1u);
      for (int i = 0; i < NW; ++i) accd[h][i] = _mm512_setzero_pd();
      qf[h] = _mm512_setzero_pd();
    }
    for (int l = 0; l < NMOD; ++l) {  // crt_sums_generic's sums, in modulus order
      __m512d dig[NW];
      for (int i = 0; i < NW; ++i) dig[i] = _mm512_set1_pd(wdig_f64[l * kDigitStride + i]);
      const __m512d ratio = _mm512_set1_pd(emu_ratio[l]);
      for (int h = 0; h < G; ++h) {
        const __m128i w8 = _mm_maskz_loadu_epi8(valid[h], src + l * plane + g0 + 8 * h);
        const __m512d wd = _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(w8));
        for (int i = 0; i < NW; ++i) accd[h][i] = _mm512_fmadd_pd(wd, dig[i], accd[h][i]);
        qf[h] = _mm512_add_pd(qf[h], _mm512_mul_pd(wd, ratio));  // two roundings, as numpy
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {  // unrolled: the sums stay in registers, not stack arrays
      const int g = g0 + 8 * h;
      if (g >= len) break;
      __m512i acc[NW];
      for (int i = 0; i < NW; ++i) acc[i] = _mm512_cvtpd_epi64(accd[h][i]);  // exact integers
      if (!finish8<NW, MANT, EMIN, EMAX>(acc, qf[h], valid[h], mu_row, nu + g,
                                         static_cast<char*>(out) + g * kOutBytes))
        return false;
    }
  }
  return true;
}

// Rows of the output shared out by OpenMP; each row in runs of kRun columns: the sums
// (crt_sums) and the rounding (crt_finish_run) vectorized, ozaki2_crt.cu's finish() entry by
// entry for double-double output and for runs with results beyond the normal range.
template <int NMOD, int NP>
void crt_impl(const signed char* res, long long plane, int m, int n, const int* mu, const int* nu,
              int kind, void* hi, void* lo, void* hi_im, void* lo_im) {
  constexpr int NW = kCrtWords[NMOD];
  static_assert(NW <= kMaxCrtWords, "kMaxCrtWords");
  const bool fused = emu_host::avx512_loops();
#pragma omp parallel for schedule(static)
  for (int row = 0; row < m; ++row) {
    alignas(64) signed char w[NMOD][kRun];
    alignas(64) long long acc[kMaxCrtWords][kRun];
    alignas(64) double qf[kRun];
    for (int p = 0; p < NP; ++p) {
      void* out_hi = p == 0 ? hi : hi_im;
      void* out_lo = p == 0 ? lo : lo_im;
      for (int j0 = 0; j0 < n; j0 += kRun) {
        const int len = std::min(kRun, n - j0);
        const signed char* src = res + (p * NMOD) * plane + static_cast<long long>(row) * n + j0;
        if (fused && kind != 2) {
          char* o = static_cast<char*>(out_hi) +
                    (static_cast<long long>(row) * n + j0) * (kind == 1 ? 4 : 8);
          if (kind == 1 ? crt_run_avx512<NMOD, 24, -149, 127>(src, plane, len, mu[row],
                                                               nu + j0, o)
                        : crt_run_avx512<NMOD, 53, -1074, 1023>(src, plane, len, mu[row],
                                                                nu + j0, o))
            continue;
        }
        for (int l = 0; l < NMOD; ++l) {
          std::memcpy(w[l], src + l * plane, len);
          if (len < kRun) std::memset(w[l] + len, 0, kRun - len);
        }
        crt_sums_generic(w, NMOD, NW, acc, qf);
        if (kind != 2 && !fused) {  // where crt_run_avx512 declined, crt_finish_run would too
          alignas(64) i64 off[kRun];
          for (int t = 0; t < kRun; ++t) off[t] = -(mu[row] + nu[j0 + std::min(t, len - 1)]);
          char* o = static_cast<char*>(out_hi) +
                    (static_cast<long long>(row) * n + j0) * (kind == 1 ? 4 : 8);
          if (crt_finish_run(acc, qf, NW, off, kind, len, o)) continue;
        }
        for (int t = 0; t < len; ++t) {  // double-double, or results beyond the normal range
          long long a[NW];
          for (int i = 0; i < NW; ++i) a[i] = acc[i][t];
          finish<NW>(a, qf[t], -(mu[row] + nu[j0 + t]), kind, out_hi, out_lo,
                     static_cast<long long>(row) * n + j0 + t);
        }
      }
    }
  }
}

// Calls f(std::integral_constant<int, NMOD>{}) for the runtime count nmod in 1..20.
template <class F, int... N>
void dispatch_nmod(int nmod, F&& f, std::integer_sequence<int, N...>) {
  ((nmod == N + 1 ? (f(std::integral_constant<int, N + 1>{}), 0) : 0), ...);
}
template <class F>
void dispatch_nmod(int nmod, F&& f) {
  dispatch_nmod(nmod, std::forward<F>(f), std::make_integer_sequence<int, kMaxModuli>{});
}

void check_moduli(int nmod) {
  if (nmod < 1 || nmod > kMaxModuli)
    throw std::invalid_argument("moduli: expected 1..20, got " + std::to_string(nmod));
}

// Residues of x (R x C lines, float64, any strides) with shift (R,): int8 planes (nmod, R, C)
// when lines_are_rows, else (nmod, C, R) (the layout of B for the GEMM: rows = k).
py::array_t<signed char> residues(py::array_t<double> x, py::array_t<int, py::array::c_style> shift,
                                  int nmod, bool lines_are_rows, bool nearest) {
  check_moduli(nmod);
  const auto [sr, sc] = emu_host::matrix_strides(x, "residues");
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  if (shift.ndim() != 1 || shift.shape(0) != R)
    throw std::invalid_argument("residues: shift must have one entry per line");
  const long long plane = static_cast<long long>(R) * C;
  auto out = emu_host::huge_page_array<signed char>(
      lines_are_rows ? std::vector<py::ssize_t>{nmod, R, C} : std::vector<py::ssize_t>{nmod, C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double* px = x.data();
  const int* ps = shift.data();
  signed char* po = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    residues_all(px, sr, sc, nullptr, 0, 0, R, C, ps, nearest, nmod, po, plane, 0, out_r,
                 out_c);
  }
  return out;
}

// 3M residue planes (3, nmod, R, C) (or (3, nmod, C, R)) of the complex operand re + i im (same
// shape) with shift (R,): re, im, re + im; with `gaussian` (2, nmod, ...): u = re + iota im and
// v = re - iota im modulo the Gaussian moduli.
py::array_t<signed char> residues3(py::array_t<double> re, py::array_t<double> im,
                                   py::array_t<int, py::array::c_style> shift, int nmod,
                                   bool lines_are_rows, bool nearest, bool gaussian) {
  check_moduli(nmod);
  const auto [sr, sc] = emu_host::matrix_strides(re, "residues3");
  const auto [yr, yc] = emu_host::matrix_strides(im, "residues3");
  if (re.shape(0) != im.shape(0) || re.shape(1) != im.shape(1))
    throw std::invalid_argument("residues3: re and im must have one shape");
  const int R = static_cast<int>(re.shape(0)), C = static_cast<int>(re.shape(1));
  if (shift.ndim() != 1 || shift.shape(0) != R)
    throw std::invalid_argument("residues3: shift must have one entry per line");
  const long long plane = static_cast<long long>(R) * C;
  auto out = emu_host::huge_page_array<signed char>(
      lines_are_rows ? std::vector<py::ssize_t>{gaussian ? 2 : 3, nmod, R, C}
                     : std::vector<py::ssize_t>{gaussian ? 2 : 3, nmod, C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double *px = re.data(), *py_ = im.data();
  const int* ps = shift.data();
  signed char* po = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    residues_all(px, sr, sc, py_, yr, yc, R, C, ps, nearest, nmod, po, plane, nmod * plane,
                 out_r, out_c, gaussian);
  }
  return out;
}

std::mutex tables_mutex;  // the digit tables are process globals (the kernels' __constant__)

// CRT of int8 residues res (nmod, m, n) with shifts mu (m,), nu (n,); kind 0 float64 -> hi,
// 1 float32 -> hi (float32 array), 2 double-double -> hi, lo. Tables: crt_tables(nmod).
void crt(py::array_t<signed char, py::array::c_style> res,
         py::array_t<int, py::array::c_style> mu, py::array_t<int, py::array::c_style> nu,
         int kind, py::array_t<int, py::array::c_style> wdig,
         py::array_t<int, py::array::c_style> pdig, py::array_t<double, py::array::c_style> ratio,
         py::array hi, py::object lo, py::object hi_im, py::object lo_im) {
  if (res.ndim() != 3 && !(res.ndim() == 4 && res.shape(0) == 2))
    throw std::invalid_argument("crt: res must be (moduli, m, n) or (2, moduli, m, n)");
  const int np = res.ndim() == 4 ? 2 : 1, d = res.ndim() - 3;
  const int nmod = static_cast<int>(res.shape(d));
  check_moduli(nmod);
  if (nmod < 2) throw std::invalid_argument("crt: at least 2 moduli");
  const int m = static_cast<int>(res.shape(d + 1)), n = static_cast<int>(res.shape(d + 2));
  if (mu.size() != m || nu.size() != n) throw std::invalid_argument("crt: shift sizes");
  if (wdig.size() != kMaxModuli * kDigitStride || pdig.size() != kDigitStride ||
      ratio.size() != kMaxModuli)
    throw std::invalid_argument("crt: tables of the wrong size");
  if (kind < 0 || kind > 2) throw std::invalid_argument("crt: kind must be 0, 1 or 2");
  const py::dtype want = kind == 1 ? py::dtype::of<float>() : py::dtype::of<double>();
  if (hi.size() != static_cast<py::ssize_t>(m) * n || !hi.dtype().is(want) ||
      !(hi.flags() & py::array::c_style) || !hi.writeable())
    throw std::invalid_argument("crt: hi must be a writable C-contiguous (m, n) output of "
                                "float64 (kind 0, 2) or float32 (kind 1)");
  auto output = [&](py::object o, const py::dtype& dt, const char* what) -> void* {
    py::array a = o.cast<py::array>();
    if (a.size() != hi.size() || !a.dtype().is(dt) || !(a.flags() & py::array::c_style) ||
        !a.writeable())
      throw std::invalid_argument(std::string("crt: ") + what +
                                  " must be a writable C-contiguous (m, n) array like hi");
    return a.mutable_data();
  };
  void* phi = hi.mutable_data();
  void* plo = kind == 2 ? output(lo, py::dtype::of<double>(), "lo") : phi;
  void* phi_im = np == 2 ? output(hi_im, want, "hi_im") : phi;
  void* plo_im = np == 2 && kind == 2 ? output(lo_im, py::dtype::of<double>(), "lo_im") : phi_im;
  const signed char* pr = res.data();
  const int* pmu = mu.data();
  const int* pnu = nu.data();
  // The GIL first, then the tables' lock: taking the lock while holding the GIL deadlocks with
  // a second caller (this one would wait for the GIL at the end while holding the lock).
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(tables_mutex);
  std::memcpy(emu_wdig, wdig.data(), sizeof(emu_wdig));
  std::memcpy(emu_pdig, pdig.data(), sizeof(emu_pdig));
  std::memcpy(emu_ratio, ratio.data(), sizeof(emu_ratio));
  for (int q = 0; q < kMaxModuli * kDigitStride; ++q) wdig_f64[q] = emu_wdig[q];
  const long long plane = static_cast<long long>(m) * n;
  dispatch_nmod(nmod, [&](auto N) {
    if (np == 1)
      crt_impl<decltype(N)::value, 1>(pr, plane, m, n, pmu, pnu, kind, phi, plo, phi, plo);
    else
      crt_impl<decltype(N)::value, 2>(pr, plane, m, n, pmu, pnu, kind, phi, plo, phi_im, plo_im);
  });
}

}  // namespace

void register_ozaki2_host(py::module_& m) {
  m.def(
      "empty",
      [](const std::vector<py::ssize_t>& shape, const std::string& dtype) -> py::array {
        if (dtype == "int8") return emu_host::huge_page_array<signed char>(shape);
        if (dtype == "float64") return emu_host::huge_page_array<double>(shape);
        if (dtype == "float32") return emu_host::huge_page_array<float>(shape);
        throw std::invalid_argument("empty: dtype must be 'int8', 'float32' or 'float64'");
      },
      py::arg("shape"), py::arg("dtype"),
      "An uninitialized C-contiguous array (like numpy.empty) in 2 MiB-aligned memory advised "
      "for transparent huge pages: for output planes of gigabytes written once.");
  m.def("ozaki2_residues", &residues, py::arg("x"), py::arg("shift"), py::arg("moduli"),
        py::arg("lines_are_rows") = true, py::kw_only(), py::arg("nearest") = false,
        "int8 symmetric residues of X = x * 2**shift (shift per line) rounded to nearest, ties "
        "to even (nearest), or toward zero, as emulinalg.algorithm.scaling.scale_to_integers, "
        "for the first `moduli` moduli: (moduli, R, C) when lines_are_rows, else (moduli, C, R). Exact "
        "for |X| < 2**96 (Scheme II's scaling keeps it at most 2**82).");
  m.def("ozaki2_crt", &crt, py::arg("res"), py::arg("mu"), py::arg("nu"), py::arg("kind"),
        py::arg("wdig"), py::arg("pdig"), py::arg("ratio"), py::arg("hi"),
        py::arg("lo") = py::none(), py::arg("hi_im") = py::none(), py::arg("lo_im") = py::none(),
        "Scheme II reconstruction from int8 residues (moduli, m, n), or (2, moduli, m, n) for the "
        "real and imaginary parts (then hi_im, lo_im): kind 0 float64, 1 float32, 2 "
        "double-double (hi, lo); bit-identical to emulinalg.algorithm.crt.reconstruct.");
  m.def(
      "host_avx512",
      [](py::object on) {
        const bool was = emu_host::avx512_loops();
        if (!on.is_none()) {
          const bool want = on.cast<bool>();
          if (want && !emu_host::cpu_has_avx512())
            throw std::invalid_argument("host_avx512: this CPU lacks AVX-512 F/DQ/CD/BW/VL");
          emu_host::avx512_switch().store(want);
        }
        return was;
      },
      py::arg("on") = py::none(),
      "Whether the residues, the CRT and the refinement's scans run their explicit AVX-512 "
      "loops (the CPU has AVX-512 F, DQ, CD, BW and VL) or the portable ones; on=True/False switches (process-wide, for "
      "tests and measurements: both give the same bits), returning the setting before.");
  m.def(
      "crt_words", [](int n) { return n >= 2 && n <= kMaxModuli ? kCrtWords[n] : 0; },
      py::arg("n"), "Words of the CRT accumulator compiled for n moduli (0 outside 2..20).");
  py::class_<Ozaki2Panels, std::shared_ptr<Ozaki2Panels>>(
      m, "Ozaki2Panels", "Scheme II residue panels of a product's operands (ozaki2_pack)")
      .def_property_readonly("moduli", [](const Ozaki2Panels& p) { return p.nmod; })
      .def_property_readonly("complex", [](const Ozaki2Panels& p) { return p.sets > 1; })
      .def_property_readonly("gaussian", [](const Ozaki2Panels& p) { return p.gauss; })
      .def_property_readonly("chunked", [](const Ozaki2Panels& p) { return p.chunked; })
      .def_property_readonly(
          "residues",
          [](py::object self) {
            const auto& p = self.cast<const Ozaki2Panels&>();
            const std::vector<py::ssize_t> shape{p.sets > 1 ? 2 : 1, p.nmod, p.m, p.n};
            return py::array_t<signed char>(
                shape, reinterpret_cast<signed char*>(p.res.get()), self);
          },
          "Uninitialised int8 (parts, moduli, m, n) in the panel cache, alive with the panels: "
          "where ozaki2_multiply's residues go for ozaki2_crt (parts: 2 when complex).")
      .def(
          "release_operands",
          [](Ozaki2Panels& p) {
            p.a.reset();
            p.b.reset();
          },
          "Give the operands' panels back to the cache (after the last ozaki2_multiply; one "
          "still running keeps them until it returns; the residues stay).");
  m.def("ozaki2_pack", &pack, py::arg("ar"), py::arg("br"), py::arg("mu"), py::arg("nu"),
        py::arg("moduli"), py::arg("ai") = py::none(), py::arg("bi") = py::none(), py::kw_only(),
        py::arg("stream") = py::none(), py::arg("nearest") = false, py::arg("gaussian") = false,
        py::arg("chunked") = py::none(),
        "Scheme II residues of A (m, k) with row shifts mu and of B (k, n) with column shifts nu "
        "for the first `moduli` moduli, written straight into the int8 tile panels of the GEMMs "
        "(with ai, bi: the 3M sets re, im, re + im, or with gaussian the sets u = re + iota im, "
        "v = re - iota im of the first `moduli` Gaussian moduli). The scaled operands are rounded to nearest, "
        "ties to even (nearest: emulinalg.algorithm.scaling.rounds_to_nearest), or toward zero. "
        "Panels come from the panel cache. stream: write them with non-temporal stores (None: from 64 "
        "MiB of panels on; same bytes). chunked: the panels in chunked pairs of PANEL_CHUNK K "
        "tiles, else plain (None: the blocking's panels knob); same products.");
  m.def("ozaki2_multiply", &multiply, py::arg("panels"), py::arg("l"), py::arg("re"),
        py::arg("im") = py::none(), py::kw_only(), py::arg("emulate") = false,
        py::arg("threads") = 0, py::arg("kc") = 0,
        "Modulus l's product on ozaki2_pack's panels into int8 residues re (m, n) (complex: re "
        "and im, from 3M's three products or the Gaussian moduli's two): one tile GEMM per product, reduced modulo m_l in its epilogue (the "
        "symmetric residues of gemm_s8s8s32 on the residue planes). kc > 0: K tiles per chunk "
        "for this call in the place of the blocking's (the residues do not depend on it).");
  m.def("ozaki2_residues3", &residues3, py::arg("re"), py::arg("im"), py::arg("shift"),
        py::arg("moduli"), py::arg("lines_are_rows") = true, py::kw_only(),
        py::arg("nearest") = false, py::arg("gaussian") = false,
        "3M residue planes (3, moduli, ...) of re + i im: re, im and re + im, as ozaki2_residues "
        "(gaussian: (2, moduli, ...), u = re + iota im and v = re - iota im modulo the Gaussian "
        "moduli).");
}
