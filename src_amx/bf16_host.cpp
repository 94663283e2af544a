// The BF16 schedules' CPU stages around the slice-product tile GEMM (kernel.hpp,
// gemm_bf16_slice_tiles): splitting float64 operands into BF16 slices per line (into row-major
// planes for the tests, or straight into tile panels), the final power-of-two unscaling, and
// two engine helpers (all_finite, to_float64). Same arithmetic, value for value, as
// emulinalg/algorithm/bf16.py (tests check bit equality); no AMX instruction, OpenMP over lines;
// the split loop is compiled for AVX-512F, AVX2 and the baseline (target_clones), with the same bits.
//
//   fixed ("BF16xN", Ozaki-style): line exponent v (max |x| < 2**v), r = x 2**-v, and slice s
//     = RNE(r 2**(8s+7)) 2**-(8s+7), r -= slice: signed 8-bit digits |d| <= 128 on a grid fixed
//     per line, so FP32 sums of up to 1024 digit products are exact.
//   float ("BF16x3", Henry et al.): r = x 2**-v, slice = r rounded to 8 significant bits (RNE),
//     flushed to 0 below 2**-126 (TDPBF16PS would flush it), r -= slice (exact: Sterbenz).
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "blocking.hpp"
#include "gemm.hpp"
#include "host_loops.hpp"
#include "pack.hpp"
#include "tile_config.hpp"

namespace py = pybind11;
namespace amx = emulinalg::amx;

namespace {

inline std::uint64_t bits_of(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline double double_of(std::uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline std::uint16_t bf16_bits(double v) {  // v has <= 8 significant bits and fits FP32
  const float f = static_cast<float>(v);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>(u >> 16);
}

using emu_host::pow2;
using emu_host::rne;

// x 2**e rounded once (exact unless it under/overflows), as numpy.ldexp.
inline double scale2(double x, int e) {
  return e >= -1074 && e <= 1023 ? x * pow2(e) : std::ldexp(x, e);
}

// r rounded to 8 significant bits (RNE), then +0 if below 2**-126 (as the generic code: a value
// just below 2**-126 may round up to it). Integer operations only, no branch (it vectorizes): a
// subnormal double's pattern rounds to at most 2**-1022, which the flush removes.
inline double round_bf16(double r) {
  constexpr std::uint64_t kAbs = 0x7FFFFFFFFFFFFFFFull, kMin = 0x3810000000000000ull;  // 2**-126
  std::uint64_t u = bits_of(r);
  u = (u + 0x0FFFFFFFFFFFull + ((u >> 45) & 1)) & ~0x1FFFFFFFFFFFull;
  return double_of(u & (std::uint64_t(0) - ((u & kAbs) >= kMin)));
}

// x 2**-e rounded once as (x f1) f2: f1 = 2**min(-e, 1023) rounds at most once, and the rest
// f2 = 2**(-e - 1023) > 1 only for lines below 2**-1023, where both products are exact.
struct LineScale {
  double f1, f2;
};
inline LineScale line_scale(int e) {
  const int p1 = std::min(-e, 1023);
  return {pow2(p1), pow2(-e - p1)};
}

inline int frexp_exponent(double m) {
  int e = 0;
  if (m != 0.0) std::frexp(m, &e);
  return e;
}

struct Matrix {
  const double* p;
  long long sr, sc;
  int rows, cols;
};

// x must stay alive while the Matrix is used (the caller holds it).
Matrix matrix(const py::array_t<double>& x, const char* who) {
  auto [sr, sc] = emu_host::matrix_strides(x, who);
  return {static_cast<const double*>(x.data()), sr, sc, static_cast<int>(x.shape(0)),
          static_cast<int>(x.shape(1))};
}

void check_split(const std::string& kind, int slices, const char* who) {
  if (kind != "fixed" && kind != "float")
    throw std::invalid_argument(std::string(who) + ": kind must be 'fixed' or 'float'");
  if (slices < 1 || slices > 8)
    throw std::invalid_argument(std::string(who) + ": slices must be 1..8");
}

// The imaginary part `im` beside the real part `re` (same shape), kept alive in `keep`.
Matrix imag_part(const py::object& im, const Matrix& re, py::array_t<double>& keep,
                 const char* who) {
  keep = im.cast<py::array_t<double>>();
  const Matrix x = matrix(keep, who);
  if (x.rows != re.rows || x.cols != re.cols)
    throw std::invalid_argument(std::string(who) + ": real and imaginary parts differ in shape");
  return x;
}

// The larger of m and v (std::max(m, v)'s order): a NaN v is ignored, so m never becomes NaN
// and partial maxima may be combined in any order. (Non-finite values never reach the split:
// the engine zeroes them first; this keeps the old code's answer for them anyway.)
inline double max_keep(double m, double v) { return m < v ? v : m; }

// max over n values of |re[t sr]| (and of |im[t si]|): contiguous lines in 8 partial maxima,
// so that the loop vectorizes; exact (a maximum), so the value of one sequential pass.
__attribute__((target_clones("avx512f", "avx2", "default"))) double line_max(
    const double* re, long long sr, const double* im, long long si, int n) {
  double m[8] = {};
  int t = 0;
  if (sr == 1 && !im) {
    for (; t + 8 <= n; t += 8)
      for (int j = 0; j < 8; ++j) m[j] = max_keep(m[j], std::fabs(re[t + j]));
  } else if (sr == 1 && si == 1) {
    for (; t + 8 <= n; t += 8)
      for (int j = 0; j < 8; ++j)
        m[j] = max_keep(m[j], max_keep(std::fabs(re[t + j]), std::fabs(im[t + j])));
  }
  for (; t < n; ++t) {
    double v = std::fabs(re[t * sr]);
    if (im) v = max_keep(v, std::fabs(im[t * si]));
    m[0] = max_keep(m[0], v);
  }
  double r = 0.0;
  for (double x : m) r = max_keep(r, x);
  return r;
}

// m[c] = max(m[c], |re[c sr]|, |im[c si]|) for c < n (one row's segment of column maxima).
__attribute__((target_clones("avx512f", "avx2", "default"))) void column_max(
    double* m, const double* re, long long sr, const double* im, long long si, int n) {
  if (sr == 1 && !im) {
    for (int c = 0; c < n; ++c) m[c] = max_keep(m[c], std::fabs(re[c]));
    return;
  }
  for (int c = 0; c < n; ++c) {
    double v = std::fabs(re[c * sr]);
    if (im) v = max_keep(v, std::fabs(im[c * si]));
    m[c] = max_keep(m[c], v);
  }
}

// Line exponents: per row (lines_are_rows) or column of max(|re|, |im|).
py::array_t<std::int32_t> line_exponents(const Matrix& re, const Matrix* im, bool rows) {
  const int n = rows ? re.rows : re.cols;
  py::array_t<std::int32_t> out(n);
  std::int32_t* e = out.mutable_data();
  const double* ip = im ? im->p : nullptr;
  {
    py::gil_scoped_release release;  // a pass over the operand: other Python threads may run
    if (rows) {
#pragma omp parallel for schedule(static)
      for (int r = 0; r < re.rows; ++r)
        e[r] = frexp_exponent(line_max(re.p + r * re.sr, re.sc, ip ? ip + r * im->sr : nullptr,
                                       ip ? im->sc : 0, re.cols));
    } else {
      constexpr int kBlock = 256;  // columns per task: each row's segment is read contiguously
#pragma omp parallel for schedule(static)
      for (int c0 = 0; c0 < re.cols; c0 += kBlock) {
        const int c1 = std::min(re.cols, c0 + kBlock);
        double m[kBlock] = {};
        for (int r = 0; r < re.rows; ++r)
          column_max(m, re.p + r * re.sr + c0 * re.sc, re.sc,
                     ip ? ip + r * im->sr + c0 * im->sc : nullptr, ip ? im->sc : 0, c1 - c0);
        for (int c = c0; c < c1; ++c) e[c] = frexp_exponent(m[c - c0]);
      }
    }
  }
  return out;
}

// A thread's 64-byte aligned scratch of `count` BF16 (whole runs), not from the panel pool (whose
// large cached buffers are kept for panels).
class Scratch {
 public:
  explicit Scratch(std::size_t count)
      : p_(static_cast<std::uint16_t*>(std::aligned_alloc(64, (count * 2 + 63) / 64 * 64))) {
    if (!p_) throw std::bad_alloc();
  }
  ~Scratch() { std::free(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::uint16_t* get() const { return p_; }

 private:
  std::uint16_t* p_;
};

// Values per run of the split: one 64-byte tile row of BF16 per slice.
constexpr int kRun = 32;

// 64 bytes (one cache line, both 16-byte aligned) from src to dst. `stream`: non-temporal
// stores, which write the line without reading it first (a plain store to a line that is not
// cached reads it from memory: half the traffic of writing gigabytes of panels once). SSE2
// only (the x86-64 baseline); callers run _mm_sfence before other threads read dst.
inline void put_line(void* dst, const void* src, bool stream) {
  const auto* s = static_cast<const __m128i*>(src);
  auto* d = static_cast<__m128i*>(dst);
  for (int q = 0; q < 4; ++q) {
    const __m128i v = _mm_load_si128(s + q);
    if (stream) {
      _mm_stream_si128(d + q, v);
    } else {
      _mm_store_si128(d + q, v);
    }
  }
}

// The slices of n values x[t sx] scaled by (f1, f2)[t] (per_value) or (f1, f2)[0] (one line):
// run r (values 32 r .. 32 r + 31, zero padded beyond n) of slice s goes to out[s] + r
// run_stride as 64 bytes (put_line). Each run is split in registers/L1 (a fixed trip count:
// the loops vectorize) and written once; compiled for AVX-512F, AVX2 and the baseline, chosen
// at load time (the same IEEE operations, no contraction: the same bits on every path).
__attribute__((target_clones("avx512f", "avx2", "default"))) void split_run(
    const double* x, long long sx, int n, const double* f1, const double* f2, bool per_value,
    int slices, bool fixed, std::uint16_t* const* out, long long run_stride, bool stream) {
  for (int t0 = 0, run = 0; t0 < n; t0 += kRun, ++run) {
    const int len = std::min(kRun, n - t0);
    alignas(64) double res[kRun];
    alignas(64) std::uint16_t o[8][kRun];
    if (sx == 1 && len == kRun && per_value) {
      for (int t = 0; t < kRun; ++t) res[t] = (x[t0 + t] * f1[t0 + t]) * f2[t0 + t];
    } else if (sx == 1 && len == kRun) {
      for (int t = 0; t < kRun; ++t) res[t] = (x[t0 + t] * f1[0]) * f2[0];
    } else {  // strided, or the last run: 0 beyond n splits into +0 slices (zero padding)
      for (int t = 0; t < kRun; ++t) {
        const int i = per_value ? t0 + t : 0;
        res[t] = t < len ? (x[(t0 + t) * sx] * f1[i]) * f2[i] : 0.0;
      }
    }
    for (int s = 0; s < slices; ++s) {
      if (fixed) {  // digits on the grid 2**-(8s+7): RNE(res 2**g) 2**-g
        const double up = pow2(8 * s + 7), down = pow2(-(8 * s + 7));
        for (int t = 0; t < kRun; ++t) {
          const double v = rne(res[t] * up) * down;
          res[t] -= v;
          o[s][t] = bf16_bits(v);
        }
      } else {
        for (int t = 0; t < kRun; ++t) {
          const double v = round_bf16(res[t]);
          res[t] -= v;
          o[s][t] = bf16_bits(v);
        }
      }
    }
    for (int s = 0; s < slices; ++s) put_line(out[s] + run * run_stride, o[s], stream);
  }
}

// Zeros in `runs` runs of 32 BF16 per slice (rows of A beyond m).
void zero_runs(std::uint16_t* const* out, int slices, std::int64_t runs, long long run_stride,
               bool stream) {
  alignas(64) const std::uint16_t zero[kRun] = {};
  for (int s = 0; s < slices; ++s)
    for (std::int64_t r = 0; r < runs; ++r) put_line(out[s] + r * run_stride, zero, stream);
}

// Each line's (f1, f2) (line_scale) as two arrays, so that a row of B reads them contiguously.
struct LineScales {
  std::vector<double> f1, f2;
};
LineScales line_scales(const std::int32_t* e, long long n) {
  LineScales f{std::vector<double>(n), std::vector<double>(n)};
  for (long long i = 0; i < n; ++i) {
    const LineScale s = line_scale(e[i]);
    f.f1[i] = s.f1;
    f.f2[i] = s.f2;
  }
  return f;
}

// Row-major slice planes (slices, rows, cols) of x (bf16_split; tests): each row is split into
// a per-thread buffer of whole runs, then copied.
void split_into(const Matrix& x, const std::int32_t* e, bool rows, int slices, bool fixed,
                std::uint16_t* planes) {
  const long long plane = static_cast<long long>(x.rows) * x.cols;
  const long long padded = amx::ceil_div(x.cols, kRun) * kRun;
  const auto f = line_scales(e, rows ? x.rows : x.cols);
#pragma omp parallel
  {
    const Scratch buf(static_cast<std::size_t>(slices * padded));
    std::uint16_t* b = buf.get();
    std::uint16_t* o[8];
    for (int s = 0; s < slices; ++s) o[s] = b + s * padded;
#pragma omp for schedule(static)
    for (int r = 0; r < x.rows; ++r) {
      const long long i = rows ? r : 0;
      split_run(x.p + r * x.sr, x.sc, x.cols, &f.f1[i], &f.f2[i], !rows, slices, fixed, o, kRun,
                false);
      for (int s = 0; s < slices; ++s)
        std::memcpy(planes + s * plane + static_cast<long long>(r) * x.cols, o[s],
                    static_cast<std::size_t>(x.cols) * 2);
    }
  }
}

// Streaming stores pay off where the panels cannot stay in the caches anyway (the slice
// products read them back from memory): from this many bytes of panels on.
constexpr std::size_t kStreamBytes = std::size_t(64) << 20;

// `count` new panels for `lines` rows of A (columns of B) of depth k, appended to `out`: their
// first bytes (as BF16), 16-line blocks (whole 32-line register blocks) and K tiles. Panels come
// from pack.hpp's BufferPool: 2 MiB-aligned, huge-page advised, and kept for the next call
// (EMULINALG_AMX_CACHE_MB), so a repeated product of one size writes into memory that is
// already mapped instead of faulting in (and zeroing) gigabytes again.
struct NewPanels {
  std::vector<std::uint16_t*> base;
  std::int64_t blocks, ktiles;
};
NewPanels new_panels(std::vector<amx::Panel>& out, int count, std::int64_t lines,
                     std::int64_t k) {
  NewPanels p{{}, amx::ceil_div(lines, amx::kRegRows) * 2, amx::ceil_div(k, kRun)};
  for (int s = 0; s < count; ++s) {
    out.push_back(amx::new_panel(p.blocks, p.ktiles));
    p.base.push_back(reinterpret_cast<std::uint16_t*>(out.back().bytes.get()));
  }
  return p;
}

// BF16 per tile (16 rows of 32) and per tile row.
constexpr std::int64_t kTileValues = amx::kTileSize / 2, kRowValues = amx::kTileBytes / 2;

// The slices of A (m x k, lines = rows; complex: re and im, one exponent per row of both)
// straight into tile panels (pack.hpp's pack_a layout, zero padded): re to slices
// [0, slices), im to [slices, 2 slices), appended to `out`. Each row's exponent is found and
// the row split right after (e: its m exponents), so A is read from memory once: the second
// pass over the row hits the cache. Row i, K tile kt of slice s is tile row (i / 16, kt, i % 16).
void split_pack_a(const Matrix& re, const Matrix* im, std::int32_t* e, int slices, bool fixed,
                  std::vector<amx::Panel>& out, bool stream) {
  const std::int64_t m = re.rows, k = re.cols;
  const int parts = im ? 2 : 1;
  const auto [base, blocks, ktiles] = new_panels(out, parts * slices, m, k);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < blocks * amx::kTileRows; ++i) {
      const std::int64_t row0 = (i / amx::kTileRows) * ktiles * kTileValues +
                                (i % amx::kTileRows) * kRowValues;
      std::uint16_t* o[16];
      for (int s = 0; s < parts * slices; ++s) o[s] = base[s] + row0;
      if (i >= m) {
        zero_runs(o, parts * slices, ktiles, kTileValues, stream);
        continue;
      }
      const double* xr = re.p + i * re.sr;
      const double* xi = im ? im->p + i * im->sr : nullptr;
      e[i] = frexp_exponent(line_max(xr, re.sc, xi, im ? im->sc : 0, static_cast<int>(k)));
      const LineScale f = line_scale(e[i]);
      split_run(xr, re.sc, static_cast<int>(k), &f.f1, &f.f2, false, slices, fixed, o,
                kTileValues, stream);
      if (im)
        split_run(xi, im->sc, static_cast<int>(k), &f.f1, &f.f2, false, slices, fixed,
                  o + slices, kTileValues, stream);
    }
    if (stream) _mm_sfence();  // streaming stores visible before the barrier
  }
}

// The slices of B (k x n, lines = columns, exponents e) straight into VNNI tile panels
// (pack_b_vnni's layout: row r of tile (jb, kt) holds B[32 kt + 2 r + g][16 jb + c] at 2 c + g):
// re to slices [0, slices); complex: im to [slices, 2 slices) and -im (sign bits flipped, zero
// padding included: -0 adds nothing) to [2 slices, 3 slices). Each pair of B's rows is split into
// a per-thread buffer (whole runs, zero padded to 16 jb), then interleaved 16 columns at a time
// into 64-byte tile rows.
void split_pack_b(const Matrix& re, const Matrix* im, const std::int32_t* e, int slices,
                  bool fixed, std::vector<amx::Panel>& out, bool stream) {
  const std::int64_t k = re.rows, n = re.cols;
  const int parts = im ? 2 : 1;
  const auto [base, blocks, ktiles] = new_panels(out, (im ? 3 : 1) * slices, n, k);
  const auto f = line_scales(e, n);
  const std::int64_t np = blocks * 16;  // = whole runs of n
  const __m128i sign = _mm_set1_epi16(static_cast<short>(0x8000));
#pragma omp parallel
  {
    const Scratch buf(static_cast<std::size_t>(2 * slices * np));
    std::uint16_t* rows = buf.get();
#pragma omp for schedule(static)
    for (std::int64_t rr = 0; rr < ktiles * 16; ++rr) {  // row pairs (2 rr, 2 rr + 1) of B
      const std::int64_t kt = rr / 16, r = rr % 16;
      for (int part = 0; part < parts; ++part) {
        const Matrix& x = part ? *im : re;
        for (int g = 0; g < 2; ++g) {
          const std::int64_t l = 2 * rr + g;
          std::uint16_t* o[8];
          for (int s = 0; s < slices; ++s) o[s] = rows + (2 * s + g) * np;
          if (l < k) {
            split_run(x.p + l * x.sr, x.sc, static_cast<int>(n), f.f1.data(), f.f2.data(), true,
                      slices, fixed, o, kRun, false);
          } else {
            for (int s = 0; s < slices; ++s) std::fill(o[s], o[s] + np, std::uint16_t(0));
          }
        }
        for (int s = 0; s < slices; ++s) {
          const auto* r0 = reinterpret_cast<const __m128i*>(rows + (2 * s) * np);
          const auto* r1 = reinterpret_cast<const __m128i*>(rows + (2 * s + 1) * np);
          std::uint16_t* dst = base[part * slices + s] + kt * kTileValues + r * kRowValues;
          std::uint16_t* neg = part ? base[2 * slices + s] + kt * kTileValues + r * kRowValues
                                    : nullptr;
          for (std::int64_t jb = 0; jb < blocks; ++jb) {  // 16 columns: two 8-value vectors
            const __m128i a0 = _mm_load_si128(r0 + 2 * jb), a1 = _mm_load_si128(r0 + 2 * jb + 1);
            const __m128i b0 = _mm_load_si128(r1 + 2 * jb), b1 = _mm_load_si128(r1 + 2 * jb + 1);
            alignas(64) __m128i line[4] = {_mm_unpacklo_epi16(a0, b0), _mm_unpackhi_epi16(a0, b0),
                                           _mm_unpacklo_epi16(a1, b1), _mm_unpackhi_epi16(a1, b1)};
            const std::int64_t off = jb * ktiles * kTileValues;
            put_line(dst + off, line, stream);
            if (neg) {
              for (auto& v : line) v = _mm_xor_si128(v, sign);
              put_line(neg + off, line, stream);
            }
          }
        }
      }
    }
    if (stream) _mm_sfence();
  }
}

// (planes_re, planes_im or None, exponents): planes (slices, rows, cols) uint16 in x's shape.
py::tuple split(const py::array_t<double>& re, int slices, bool lines_are_rows, const std::string& kind,
                const py::object& im) {
  const char* who = "bf16_split";
  check_split(kind, slices, who);
  const Matrix xr = matrix(re, who);
  const bool cplx = !im.is_none();
  py::array_t<double> im_arr;
  const Matrix xi = cplx ? imag_part(im, xr, im_arr, who) : Matrix{};
  auto e = line_exponents(xr, cplx ? &xi : nullptr, lines_are_rows);
  const std::vector<py::ssize_t> shape{slices, xr.rows, xr.cols};
  py::array_t<std::uint16_t> pr(shape);
  py::object pi = py::none();
  {
    py::gil_scoped_release release;
    split_into(xr, e.data(), lines_are_rows, slices, kind == "fixed", pr.mutable_data());
  }
  if (cplx) {
    py::array_t<std::uint16_t> p(shape);
    {
      py::gil_scoped_release release;
      split_into(xi, e.data(), lines_are_rows, slices, kind == "fixed", p.mutable_data());
    }
    pi = p;
  }
  return py::make_tuple(pr, pi, e);
}

// out_ij = in_ij 2**(er_i + ec_j), rounded once (exact in double, then to Out); in may be out.
template <class In, class Out>
void unscale_into(const In* in, Out* out, long long m, long long n, const std::int32_t* er,
                  const std::int32_t* ec) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < m; ++i)
    for (long long j = 0; j < n; ++j)
      out[i * n + j] = static_cast<Out>(scale2(static_cast<double>(in[i * n + j]), er[i] + ec[j]));
}

// c (m, n) float32/float64, C-contiguous, in place: c_ij 2**(er_i + ec_j), rounded once.
void unscale(py::array c, const py::array_t<std::int32_t, py::array::c_style>& er,
             const py::array_t<std::int32_t, py::array::c_style>& ec) {
  if (c.ndim() != 2 || !(c.flags() & py::array::c_style) || !c.writeable())
    throw std::invalid_argument("bf16_unscale: c must be a writeable C-contiguous 2-D array");
  const long long m = c.shape(0), n = c.shape(1);
  if (er.size() != m || ec.size() != n)
    throw std::invalid_argument("bf16_unscale: exponent vectors do not match c's shape");
  const std::int32_t* pe = er.data();
  const std::int32_t* qe = ec.data();
  if (py::isinstance<py::array_t<double>>(c)) {
    double* p = static_cast<double*>(c.mutable_data());
    py::gil_scoped_release release;
    unscale_into(p, p, m, n, pe, qe);
  } else if (py::isinstance<py::array_t<float>>(c)) {
    float* p = static_cast<float*>(c.mutable_data());
    py::gil_scoped_release release;
    unscale_into(p, p, m, n, pe, qe);
  } else {
    throw std::invalid_argument("bf16_unscale: c must be float32 or float64");
  }
}

// A product's operands as BF16 slice panels (bf16_pack), for one or more bf16_multiply calls:
// A stack [Ar (, Ai)], B stack [Br (, Bi, -Bi)], `slices` panels each, and the line exponents.
struct Bf16Panels {
  std::vector<amx::Panel> a, b;
  py::array_t<std::int32_t> ea, eb;
  long long m = 0, n = 0, k = 0;
  int slices = 0;
  bool fixed = true, cplx = false;
};

// emulinalg.algorithm.bf16's split of 2-D float64 parts, written straight into tile panels.
std::shared_ptr<Bf16Panels> pack(const py::array_t<double>& ar, const py::array_t<double>& br,
                                 int slices, const std::string& kind, const py::object& ai,
                                 const py::object& bi, const py::object& stream_arg) {
  const char* who = "bf16_pack";
  check_split(kind, slices, who);
  if (ai.is_none() != bi.is_none())
    throw std::invalid_argument("bf16_pack: give both imaginary parts or neither");
  auto P = std::make_shared<Bf16Panels>();
  P->cplx = !ai.is_none();
  P->fixed = kind == "fixed";
  P->slices = slices;
  py::array_t<double> ai_arr, bi_arr;
  const Matrix xa = matrix(ar, who), xb = matrix(br, who);
  const Matrix xai = P->cplx ? imag_part(ai, xa, ai_arr, who) : Matrix{};
  const Matrix xbi = P->cplx ? imag_part(bi, xb, bi_arr, who) : Matrix{};
  if (xb.rows != xa.cols) throw std::invalid_argument("bf16_pack: inner dimensions differ");
  P->m = xa.rows;
  P->k = xa.cols;
  P->n = xb.cols;
  P->ea = py::array_t<std::int32_t>(P->m);  // found row by row in split_pack_a
  P->eb = line_exponents(xb, P->cplx ? &xbi : nullptr, false);
  std::int32_t* ea = P->ea.mutable_data();
  const std::int32_t* eb = P->eb.data();
  const long long values = P->cplx ? 2 * P->m * P->k + 3 * P->k * P->n : P->m * P->k + P->k * P->n;
  const bool stream = stream_arg.is_none() ? static_cast<std::size_t>(2 * slices * values) >= kStreamBytes
                                           : stream_arg.cast<bool>();
  py::gil_scoped_release release;
  split_pack_a(xa, P->cplx ? &xai : nullptr, ea, slices, P->fixed, P->a, stream);
  split_pack_b(xb, P->cplx ? &xbi : nullptr, eb, slices, P->fixed, P->b, stream);
  return P;
}

// One slice-product tile GEMM over the packed stacks: sum over `pairs` (count, 2) of
// A[i] B[j], still scaled by the line exponents (bf16_unscale): float32 (kind 'float', fused
// FP32 tiles) or float64 (kind 'fixed', widened).
py::array multiply(const Bf16Panels& P,
                   const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& pl,
                   bool emulate, int threads) {
  const char* who = "bf16_multiply";
  const amx::Status& st = amx::status(amx::kAmxCompiled);
  if (!emulate && !st.available)
    throw std::runtime_error(std::string(who) + ": AMX is not available: " +
                             st.reason + " (emulate=True runs the tile model)");
  const long long na = static_cast<long long>(P.a.size()), nb = static_cast<long long>(P.b.size());
  if (pl.ndim() != 2 || pl.shape(1) != 2 || pl.shape(0) < 1 || pl.shape(0) > 4096)
    throw std::invalid_argument("bf16_multiply: pairs must be (count, 2), 1 <= count <= 4096");
  for (py::ssize_t q = 0; q < pl.shape(0); ++q)
    if (pl.at(q, 0) < 0 || pl.at(q, 0) >= na || pl.at(q, 1) < 0 || pl.at(q, 1) >= nb)
      throw std::invalid_argument("bf16_multiply: a pair names a slice that is not there");
  py::array out;
  void* c;
  if (P.fixed) {
    auto o = emu_host::huge_page_array<double>({P.m, P.n});
    c = o.mutable_data();
    out = o;
  } else {
    auto o = emu_host::huge_page_array<float>({P.m, P.n});
    c = o.mutable_data();
    out = o;
  }
  std::vector<amx::TileSource> sa, sb;
  for (const auto& p : P.a) sa.push_back(p.source());
  for (const auto& p : P.b) sb.push_back(p.source());
  const std::int64_t ktiles = amx::ceil_div(P.k, 32);
  const int count = static_cast<int>(pl.shape(0));
  const std::int32_t* pairs = pl.data();
  bool ok;
  {
    py::gil_scoped_release release;
#ifdef EMULINALG_AMX_COMPILED
    ok = emulate ? amx::gemm_bf16_slice_tiles_emulated(sa.data(), sb.data(), pairs, count, P.fixed,
                                                       c, P.m, P.n, ktiles, threads)
                 : amx::gemm_bf16_slice_tiles_amx(sa.data(), sb.data(), pairs, count, P.fixed, c,
                                                  P.m, P.n, ktiles, threads);
#else
    ok = amx::gemm_bf16_slice_tiles_emulated(sa.data(), sb.data(), pairs, count, P.fixed, c, P.m,
                                             P.n, ktiles, threads);
#endif
  }
  if (!ok) throw std::runtime_error("bf16_multiply: internal error: tile shapes violate the rules");
  return out;
}

// float64 copy of a 2-D float32 array (any whole-element strides), C-contiguous, in huge-page
// memory, converted with OpenMP (the engine's parts of float32 operands).
py::array_t<double> to_float64(const py::array& xa) {
  if (!py::isinstance<py::array_t<float>>(xa) || xa.ndim() != 2 || xa.strides(0) % 4 != 0 ||
      xa.strides(1) % 4 != 0)
    throw std::invalid_argument("to_float64: x must be a 2-D float32 array of whole elements");
  const auto x = py::reinterpret_borrow<py::array_t<float>>(xa);
  const long long R = x.shape(0), C = x.shape(1);
  const long long sr = x.strides(0) / 4, sc = x.strides(1) / 4;
  auto out = emu_host::huge_page_array<double>({static_cast<py::ssize_t>(R), static_cast<py::ssize_t>(C)});
  const float* p = x.data();
  double* o = out.mutable_data();
  py::gil_scoped_release release;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < R; ++r)
    for (long long c = 0; c < C; ++c) o[r * C + c] = static_cast<double>(p[r * sr + c * sc]);
  return out;
}

// float64 x[:, cols] (C-contiguous, float32 widened exactly) of a 2-D float64 or float32 array
// (any whole-element strides), rows shared out by OpenMP: the line patch's columns of a piece
// of B (numpy's take gathers them on one thread).
template <class T>
py::array_t<double> take_columns_of(const py::array& xa, const std::int64_t* cols, long long n) {
  const auto x = py::reinterpret_borrow<py::array_t<T>>(xa);
  const long long R = x.shape(0), C = x.shape(1);
  const long long sr = x.strides(0) / static_cast<long long>(sizeof(T));
  const long long sc = x.strides(1) / static_cast<long long>(sizeof(T));
  for (long long j = 0; j < n; ++j)
    if (cols[j] < 0 || cols[j] >= C)
      throw std::invalid_argument("take_columns: column index out of range");
  py::array_t<double> out({static_cast<py::ssize_t>(R), static_cast<py::ssize_t>(n)});
  const T* p = x.data();
  double* o = out.mutable_data();
  py::gil_scoped_release release;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < R; ++r) {
    const T* row = p + r * sr;
    for (long long j = 0; j < n; ++j) o[r * n + j] = static_cast<double>(row[cols[j] * sc]);
  }
  return out;
}

py::array_t<double> take_columns(const py::array& xa,
                                 const py::array_t<std::int64_t, py::array::c_style>& cols) {
  const bool f32 = py::isinstance<py::array_t<float>>(xa);
  const long long item = f32 ? 4 : 8;
  if ((!f32 && !py::isinstance<py::array_t<double>>(xa)) || xa.ndim() != 2 ||
      xa.strides(0) % item != 0 || xa.strides(1) % item != 0)
    throw std::invalid_argument(
        "take_columns: x must be a 2-D float64 or float32 array of whole elements");
  if (cols.ndim() != 1) throw std::invalid_argument("take_columns: cols must be 1-D");
  return f32 ? take_columns_of<float>(xa, cols.data(), cols.size())
             : take_columns_of<double>(xa, cols.data(), cols.size());
}

// complex128 C-contiguous (R, C) from 2-D float64 parts of one shape (any element strides),
// interleaved with OpenMP: the engine's output assembly (numpy's astype and imaginary
// assignment are two single-threaded passes). Parts as they are: inf/nan kept.
py::array_t<std::complex<double>> make_complex(const py::array_t<double>& re,
                                               const py::array_t<double>& im) {
  const Matrix a = matrix(re, "make_complex"), b = matrix(im, "make_complex");
  if (a.rows != b.rows || a.cols != b.cols)
    throw std::invalid_argument("make_complex: re and im must have one shape");
  py::array_t<std::complex<double>> out({a.rows, a.cols});
  double* o = reinterpret_cast<double*>(out.mutable_data());
  {
    py::gil_scoped_release release;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < a.rows; ++r) {
      double* orow = o + 2ll * r * a.cols;
      const double* x = a.p + static_cast<long long>(r) * a.sr;
      const double* y = b.p + static_cast<long long>(r) * b.sr;
      for (long long c = 0; c < a.cols; ++c) {
        orow[2 * c] = x[c * a.sc];
        orow[2 * c + 1] = y[c * b.sc];
      }
    }
  }
  return out;
}

// Whether every entry of a float64 matrix is finite (OpenMP; NaN/Inf checks before emulation).
bool all_finite(const py::array_t<double>& x) {
  if (x.ndim() != 2) {  // other ranks: numpy's own check (rare: batches)
    py::object np = py::module_::import("numpy");
    return np.attr("isfinite")(x).attr("all")().cast<bool>();
  }
  const Matrix a = matrix(x, "all_finite");
  long long bad = 0;
  {
    py::gil_scoped_release release;
#pragma omp parallel for schedule(static) reduction(+ : bad)
    for (int r = 0; r < a.rows; ++r) {
      double acc = 0.0;  // x * 0 is NaN exactly for NaN and +-Inf, else +-0
      for (int c = 0; c < a.cols; ++c) acc += a.p[r * a.sr + c * a.sc] * 0.0;
      bad += acc != 0.0 || acc != acc;
    }
  }
  return bad == 0;
}

}  // namespace

void register_bf16_host(py::module_& m) {
  m.def("bf16_split", &split, py::arg("re"), py::arg("slices"), py::arg("lines_are_rows"),
        py::arg("kind"), py::arg("im") = py::none(),
        "BF16 slices of a float64 matrix (emulinalg.algorithm.bf16.split): returns (planes, "
        "im_planes or None, exponents); planes (slices, rows, cols) uint16 bf16 bit patterns, exponents "
        "int32 per line (rows if lines_are_rows else columns). kind: 'fixed' (signed 8-bit "
        "digits on a per-line grid) or 'float' (RNE residual split).");
  m.def("bf16_unscale", &unscale, py::arg("c"), py::arg("er"), py::arg("ec"),
        "In place: c_ij * 2**(er_i + ec_j), rounded once (float32 or float64 c).");
  py::class_<Bf16Panels, std::shared_ptr<Bf16Panels>>(m, "Bf16Panels",
                                                       "BF16 slice panels of a product's operands")
      .def_property_readonly("ea", [](const Bf16Panels& p) { return p.ea; })
      .def_property_readonly("eb", [](const Bf16Panels& p) { return p.eb; })
      .def_property_readonly("slices", [](const Bf16Panels& p) { return p.slices; })
      .def(
          "panel",
          [](const Bf16Panels& p, const std::string& side, int i) {
            const auto& v = side == "a" ? p.a : p.b;
            if ((side != "a" && side != "b") || i < 0 || i >= static_cast<int>(v.size()))
              throw std::invalid_argument("Bf16Panels.panel: side 'a' or 'b' and a panel index");
            const std::int64_t n = v[i].blocks * v[i].ktiles * kTileValues;
            py::array_t<std::uint16_t> out(n);
            std::memcpy(out.mutable_data(), v[i].bytes.get(), static_cast<std::size_t>(n) * 2);
            return out;
          },
          py::arg("side"), py::arg("i"),
          "A copy of panel i of the A ('a') or B ('b') stack: (blocks * ktiles * 512,) uint16, "
          "tile after tile (tests).");
  m.def("bf16_pack", &pack, py::arg("ar"), py::arg("br"), py::arg("slices"), py::arg("kind"),
        py::arg("ai") = py::none(), py::arg("bi") = py::none(), py::kw_only(),
        py::arg("stream") = py::none(),
        "emulinalg.algorithm.bf16's split of 2-D float64 parts straight into tile panels: A stack "
        "[Ar, Ai], B stack [Br, Bi, -Bi] (slices each); .ea/.eb are the line exponents. The "
        "panels come from the panel cache (cache_info). stream: write them with non-temporal "
        "stores (None: from 64 MiB of panels on; the same bits either way).");
  m.def("bf16_multiply", &multiply, py::arg("panels"), py::arg("pairs"), py::kw_only(),
        py::arg("emulate") = false, py::arg("threads") = 0,
        "sum over pairs (count, 2) of A[i] @ B[j] on bf16_pack's panels, still scaled: float32 "
        "(kind 'float': one FP32 accumulator) or float64 (kind 'fixed': widened per 1024 of K).");
  m.def("to_float64", &to_float64, py::arg("x"),
        "float64 C-contiguous copy of a 2-D float32 array (OpenMP, huge-page memory).");
  m.def("take_columns", &take_columns, py::arg("x"), py::arg("cols"),
        "float64 C-contiguous x[:, cols] of a 2-D float64 or float32 array (OpenMP; cols int64, "
        "each in range, else ValueError).");
  m.def("make_complex", &make_complex, py::arg("re"), py::arg("im"),
        "complex128 C-contiguous array from 2-D float64 parts of one shape (OpenMP; inf/nan "
        "parts kept as they are).");
  m.def("all_finite", &all_finite, py::arg("x"),
        "True when every entry of the float64 array is finite (2-D: OpenMP).");
}
