// The BF16 schedules' CPU stages around the slice-product tile GEMM (kernel.hpp,
// gemm_bf16_slice_tiles): splitting float64 operands into BF16 slices per line (into row-major
// planes for the tests, or straight into tile panels), the final power-of-two unscaling, and
// two engine helpers (all_finite, to_float64). Same arithmetic, value for value, as
// emulinalg/_bf16.py (tests check bit equality); no AMX instruction, OpenMP over lines; the split
// loop is compiled for AVX-512F, AVX2 and the baseline (target_clones), with the same bits.
//
//   fixed ("BF16xN", Ozaki-style): line exponent v (max |x| < 2**v), r = x 2**-v, and slice s
//     = RNE(r 2**(8s+7)) 2**-(8s+7), r -= slice: signed 8-bit digits |d| <= 128 on a grid fixed
//     per line, so FP32 sums of up to 1024 digit products are exact.
//   float ("BF16x3", Henry et al.): r = x 2**-v, slice = r rounded to 8 significant bits (RNE),
//     flushed to 0 below 2**-126 (TDPBF16PS would flush it), r -= slice (exact: Sterbenz).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

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

// 2**p for p in [-1074, 1023] (subnormal powers included), exactly.
inline double pow2(int p) {
  if (p >= -1022) return double_of(static_cast<std::uint64_t>(p + 1023) << 52);
  return double_of(std::uint64_t(1) << (p + 1074));
}

// x 2**e rounded once (exact unless it under/overflows), as numpy.ldexp.
inline double scale2(double x, int e) {
  return e >= -1074 && e <= 1023 ? x * pow2(e) : std::ldexp(x, e);
}

// Round to nearest even integer (|y| < 2**51; default rounding mode, no FMA contraction).
inline double rne(double y) {
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2**52
  return (y + kMagic) - kMagic;
}

// r rounded to 8 significant bits (RNE), then 0 if below 2**-126 (as the generic code: a value
// just below 2**-126 may round up to it). Branch-free (it vectorizes): a subnormal double's
// pattern rounds to at most 2**-1022, which the flush removes.
inline double round_bf16(double r) {
  std::uint64_t u = bits_of(r);
  u = (u + 0x0FFFFFFFFFFFull + ((u >> 45) & 1)) & ~0x1FFFFFFFFFFFull;
  const double v = double_of(u);
  return std::fabs(v) < 0x1p-126 ? 0.0 : v;
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

// Line exponents: per row (lines_are_rows) or column of max(|re|, |im|).
py::array_t<std::int32_t> line_exponents(const Matrix& re, const Matrix* im, bool rows) {
  const int n = rows ? re.rows : re.cols;
  py::array_t<std::int32_t> out(n);
  std::int32_t* e = out.mutable_data();
  auto mag = [&](int r, int c) {
    double v = std::fabs(re.p[r * re.sr + c * re.sc]);
    if (im) v = std::max(v, std::fabs(im->p[r * im->sr + c * im->sc]));
    return v;
  };
  if (rows) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < re.rows; ++r) {
      double m = 0.0;
      for (int c = 0; c < re.cols; ++c) m = std::max(m, mag(r, c));
      e[r] = frexp_exponent(m);
    }
  } else {
    constexpr int kBlock = 256;  // columns per task: each row's segment is read contiguously
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < re.cols; c0 += kBlock) {
      const int c1 = std::min(re.cols, c0 + kBlock);
      double m[kBlock] = {};
      for (int r = 0; r < re.rows; ++r)
        for (int c = c0; c < c1; ++c) m[c - c0] = std::max(m[c - c0], mag(r, c));
      for (int c = c0; c < c1; ++c) e[c] = frexp_exponent(m[c - c0]);
    }
  }
  return out;
}

// The slices of n values x[t sx] whose line scales are (f1, f2)[t sf] (sf = 0: one line):
// slice s of value t to out[s][t]. Written as loops over t per slice, so that they vectorize;
// compiled for AVX-512F, AVX2 and the baseline, chosen at load time (the same IEEE operations,
// no contraction: the same bits on every path).
__attribute__((target_clones("avx512f", "avx2", "default"))) void split_run(
    const double* x, long long sx, int n, const double* f1, const double* f2, long long sf,
    int slices, bool fixed, std::uint16_t* const* out) {
  constexpr int kRun = 64;
  for (int t0 = 0; t0 < n; t0 += kRun) {
    const int len = std::min(kRun, n - t0);
    double res[kRun];
    for (int t = 0; t < len; ++t) {
      const long long i = (t0 + t) * sf;
      res[t] = (x[(t0 + t) * sx] * f1[i]) * f2[i];
    }
    for (int s = 0; s < slices; ++s) {
      std::uint16_t* o = out[s] + t0;
      if (fixed) {  // digits on the grid 2**-(8s+7): RNE(res 2**g) 2**-g
        const double up = pow2(8 * s + 7), down = pow2(-(8 * s + 7));
        for (int t = 0; t < len; ++t) {
          const double v = rne(res[t] * up) * down;
          res[t] -= v;
          o[t] = bf16_bits(v);
        }
      } else {
        for (int t = 0; t < len; ++t) {
          const double v = round_bf16(res[t]);
          res[t] -= v;
          o[t] = bf16_bits(v);
        }
      }
    }
  }
}

std::vector<LineScale> line_scales(const std::int32_t* e, long long n) {
  std::vector<LineScale> f(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) f[i] = line_scale(e[i]);
  return f;
}

// Row-major slice planes (slices, rows, cols) of x (bf16_split).
void split_into(const Matrix& x, const std::int32_t* e, bool rows, int slices, bool fixed,
                std::uint16_t* planes) {
  const long long plane = static_cast<long long>(x.rows) * x.cols;
  const auto f = line_scales(e, rows ? x.rows : x.cols);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < x.rows; ++r) {
    std::uint16_t* out[8];
    for (int s = 0; s < slices; ++s) out[s] = planes + s * plane + static_cast<long long>(r) * x.cols;
    const LineScale* fr = rows ? &f[r] : f.data();
    split_run(x.p + r * x.sr, x.sc, x.cols, &fr->f1, &fr->f2, rows ? 0 : 2, slices, fixed, out);
  }
}

// `count` new panels for `lines` rows of A (columns of B) of depth k, appended to `out`: their
// first bytes, 16-line blocks (whole 32-line register blocks) and K tiles.
struct NewPanels {
  std::vector<std::uint8_t*> base;
  std::int64_t blocks, ktiles;
};
NewPanels new_panels(std::vector<amx::Panel>& out, int count, std::int64_t lines,
                     std::int64_t k) {
  NewPanels p{{}, amx::ceil_div(lines, amx::kRegRows) * 2, amx::ceil_div(k, 32)};
  for (int s = 0; s < count; ++s) {
    out.push_back(amx::new_panel(p.blocks, p.ktiles));
    p.base.push_back(out.back().bytes.get());
  }
  return p;
}

// The slices of A (m x k, lines = rows) straight into tile panels (pack.hpp's pack_a layout,
// zero padded): no row-major slice planes, one pass over A.
void split_pack_a(const Matrix& x, const std::int32_t* e, int slices, bool fixed,
                  std::vector<amx::Panel>& out) {
  const std::int64_t m = x.rows, k = x.cols;
  const auto [base, blocks, ktiles] = new_panels(out, slices, m, k);
  const auto f = line_scales(e, m);
#pragma omp parallel for schedule(static)
  for (std::int64_t ib = 0; ib < blocks; ++ib) {
    for (int r = 0; r < amx::kTileRows; ++r) {
      const std::int64_t i = ib * amx::kTileRows + r;
      for (std::int64_t kt = 0; kt < ktiles; ++kt) {
        const std::int64_t off = (ib * ktiles + kt) * amx::kTileSize + r * amx::kTileBytes;
        std::uint16_t* o[8];
        for (int s = 0; s < slices; ++s) o[s] = reinterpret_cast<std::uint16_t*>(base[s] + off);
        const int len = i < m ? static_cast<int>(std::min<std::int64_t>(32, k - kt * 32)) : 0;
        if (len > 0) {
          split_run(x.p + i * x.sr + kt * 32 * x.sc, x.sc, len, &f[i].f1, &f[i].f2, 0, slices,
                    fixed, o);
        }
        for (int s = 0; s < slices; ++s) std::fill(o[s] + len, o[s] + 32, std::uint16_t(0));
      }
    }
  }
}

// The slices of B (k x n, lines = columns) straight into VNNI tile panels (pack_b_vnni's
// layout: row r of tile (jb, kt) holds B[32 kt + 2 r + g][16 jb + c] at 2 c + g): each pair of
// B's rows is split into a per-thread buffer, then interleaved into the tiles.
void split_pack_b(const Matrix& x, const std::int32_t* e, int slices, bool fixed,
                  std::vector<amx::Panel>& out) {
  const std::int64_t k = x.rows, n = x.cols;
  const auto [base, blocks, ktiles] = new_panels(out, slices, n, k);
  const auto f = line_scales(e, n);
  const std::int64_t np = blocks * 16;
#pragma omp parallel
  {
    std::vector<std::uint16_t> buf(static_cast<std::size_t>(2 * slices * np), 0);
#pragma omp for schedule(static)
    for (std::int64_t rr = 0; rr < ktiles * 16; ++rr) {  // row pairs (2 rr, 2 rr + 1) of B
      const std::int64_t kt = rr / 16, r = rr % 16;
      for (int g = 0; g < 2; ++g) {
        const std::int64_t l = 2 * rr + g;
        std::uint16_t* o[8];
        for (int s = 0; s < slices; ++s) o[s] = buf.data() + (2 * s + g) * np;
        if (l < k) split_run(x.p + l * x.sr, x.sc, static_cast<int>(n), &f[0].f1, &f[0].f2, 2,
                             slices, fixed, o);
        for (int s = 0; s < slices; ++s)
          std::fill(o[s] + (l < k ? n : 0), o[s] + np, std::uint16_t(0));
      }
      for (int s = 0; s < slices; ++s) {
        const std::uint16_t* r0 = buf.data() + (2 * s) * np;
        const std::uint16_t* r1 = r0 + np;
        for (std::int64_t jb = 0; jb < blocks; ++jb) {
          auto* d = reinterpret_cast<std::uint16_t*>(
              base[s] + (jb * ktiles + kt) * amx::kTileSize + r * amx::kTileBytes);
          for (int c = 0; c < 16; ++c) {
            d[2 * c] = r0[jb * 16 + c];
            d[2 * c + 1] = r1[jb * 16 + c];
          }
        }
      }
    }
  }
}

// A copy of a panel with every BF16 value negated (sign bit flipped; zeros become -0, which
// adds nothing to a sum).
amx::Panel negated(const amx::Panel& p) {
  amx::Panel q = amx::new_panel(p.blocks, p.ktiles);
  const std::int64_t lines = std::max<std::int64_t>(1, p.blocks * p.ktiles) * amx::kTileSize / 16;
  const __m128i sign = _mm_set1_epi16(static_cast<short>(0x8000));
  const auto* src = reinterpret_cast<const __m128i*>(p.bytes.get());
  auto* dst = reinterpret_cast<__m128i*>(q.bytes.get());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < lines; ++i) _mm_store_si128(dst + i, _mm_xor_si128(src[i], sign));
  return q;
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

#ifdef EMULINALG_AMX_COMPILED
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

// A product's operands as BF16 slice panels (bf16_pack), for one or more bf16_multiply calls:
// A stack [Ar (, Ai)], B stack [Br (, Bi, -Bi)], `slices` panels each, and the line exponents.
struct Bf16Panels {
  std::vector<amx::Panel> a, b;
  py::array_t<std::int32_t> ea, eb;
  long long m = 0, n = 0, k = 0;
  int slices = 0;
  bool fixed = true, cplx = false;
};

// emulinalg._bf16's split of 2-D float64 parts, written straight into tile panels.
std::shared_ptr<Bf16Panels> pack(const py::array_t<double>& ar, const py::array_t<double>& br,
                                 int slices, const std::string& kind, const py::object& ai,
                                 const py::object& bi) {
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
  P->ea = line_exponents(xa, P->cplx ? &xai : nullptr, true);
  P->eb = line_exponents(xb, P->cplx ? &xbi : nullptr, false);
  const std::int32_t* ea = P->ea.data();
  const std::int32_t* eb = P->eb.data();
  py::gil_scoped_release release;
  split_pack_a(xa, ea, slices, P->fixed, P->a);
  if (P->cplx) split_pack_a(xai, ea, slices, P->fixed, P->a);
  split_pack_b(xb, eb, slices, P->fixed, P->b);
  if (P->cplx) {
    split_pack_b(xbi, eb, slices, P->fixed, P->b);
    for (int s = 0; s < slices; ++s) P->b.push_back(negated(P->b[slices + s]));
  }
  return P;
}

// One slice-product tile GEMM over the packed stacks: sum over `pairs` (count, 2) of
// A[i] B[j], still scaled by the line exponents (bf16_unscale): float32 (kind 'float', fused
// FP32 tiles) or float64 (kind 'fixed', widened).
py::array multiply(const Bf16Panels& P,
                   const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& pl,
                   bool emulate, int threads) {
  const char* who = "bf16_multiply";
  if (!emulate && !amx::status(kCompiled).available)
    throw std::runtime_error(std::string(who) + ": AMX is not available: " +
                             amx::status(kCompiled).reason + " (emulate=True runs the tile model)");
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
        "BF16 slices of a float64 matrix (emulinalg._bf16.split): returns (planes, im_planes "
        "or None, exponents); planes (slices, rows, cols) uint16 bf16 bit patterns, exponents "
        "int32 per line (rows if lines_are_rows else columns). kind: 'fixed' (signed 8-bit "
        "digits on a per-line grid) or 'float' (RNE residual split).");
  m.def("bf16_unscale", &unscale, py::arg("c"), py::arg("er"), py::arg("ec"),
        "In place: c_ij * 2**(er_i + ec_j), rounded once (float32 or float64 c).");
  py::class_<Bf16Panels, std::shared_ptr<Bf16Panels>>(m, "Bf16Panels",
                                                       "BF16 slice panels of a product's operands")
      .def_property_readonly("ea", [](const Bf16Panels& p) { return p.ea; })
      .def_property_readonly("eb", [](const Bf16Panels& p) { return p.eb; })
      .def_property_readonly("slices", [](const Bf16Panels& p) { return p.slices; });
  m.def("bf16_pack", &pack, py::arg("ar"), py::arg("br"), py::arg("slices"), py::arg("kind"),
        py::arg("ai") = py::none(), py::arg("bi") = py::none(),
        "emulinalg._bf16's split of 2-D float64 parts straight into tile panels: A stack "
        "[Ar, Ai], B stack [Br, Bi, -Bi] (slices each); .ea/.eb are the line exponents.");
  m.def("bf16_multiply", &multiply, py::arg("panels"), py::arg("pairs"), py::kw_only(),
        py::arg("emulate") = false, py::arg("threads") = 0,
        "sum over pairs (count, 2) of A[i] @ B[j] on bf16_pack's panels, still scaled: float32 "
        "(kind 'float': one FP32 accumulator) or float64 (kind 'fixed': widened per 1024 of K).");
  m.def("to_float64", &to_float64, py::arg("x"),
        "float64 C-contiguous copy of a 2-D float32 array (OpenMP, huge-page memory).");
  m.def("all_finite", &all_finite, py::arg("x"),
        "True when every entry of the float64 array is finite (2-D: OpenMP).");
}
