// The BF16 schedules' CPU stages around the slice-product tile GEMM (kernel.hpp,
// gemm_bf16_slices): splitting float64 operands into BF16 slices per line, and the final
// power-of-two unscaling. Same arithmetic, value for value, as emulinalg/_bf16.py (tests
// check bit equality); no AMX or AVX-512 instruction, OpenMP over lines.
//
//   fixed ("BF16xN", Ozaki-style): line exponent v (max |x| < 2**v), r = x 2**-v, and slice s
//     = RNE(r 2**(8s+7)) 2**-(8s+7), r -= slice: signed 8-bit digits |d| <= 128 on a grid fixed
//     per line, so FP32 sums of up to 1024 digit products are exact.
//   float ("BF16x3", Henry et al.): r = x 2**-v, slice = r rounded to 8 significant bits (RNE),
//     flushed to 0 below 2**-126 (TDPBF16PS would flush it), r -= slice (exact: Sterbenz).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "host_loops.hpp"

namespace py = pybind11;

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

// x 2**e rounded once (exact unless it under/overflows), as numpy.ldexp.
inline double scale2(double x, int e) {
  if (e >= -1022 && e <= 1023) return x * double_of(static_cast<std::uint64_t>(e + 1023) << 52);
  return std::ldexp(x, e);
}

// Round to nearest even integer (|y| < 2**51; default rounding mode, no FMA contraction).
inline double rne(double y) {
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2**52
  return (y + kMagic) - kMagic;
}

// r rounded to 8 significant bits (RNE), 0 below 2**-126.
inline double round_bf16(double r) {
  if (std::fabs(r) < 0x1p-126) return 0.0;  // subnormal doubles too: no rounding reaches 2**-126
  std::uint64_t u = bits_of(r);
  u = (u + 0x0FFFFFFFFFFFull + ((u >> 45) & 1)) & ~0x1FFFFFFFFFFFull;
  const double v = double_of(u);
  return std::fabs(v) < 0x1p-126 ? 0.0 : v;
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

void split_into(const Matrix& x, const std::int32_t* e, bool rows, int slices, bool fixed,
                std::uint16_t* planes) {
  const long long plane = static_cast<long long>(x.rows) * x.cols;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < x.rows; ++r) {
    for (int c = 0; c < x.cols; ++c) {
      double res = scale2(x.p[r * x.sr + c * x.sc], -(rows ? e[r] : e[c]));
      std::uint16_t* out = planes + static_cast<long long>(r) * x.cols + c;
      for (int s = 0; s < slices; ++s) {
        double v;
        if (fixed) {
          const int g = 8 * s + 7;  // the slice's digit grid is 2**-g
          v = scale2(rne(scale2(res, g)), -g);
        } else {
          v = round_bf16(res);
        }
        res -= v;
        out[s * plane] = bf16_bits(v);
      }
    }
  }
}

// (planes_re, planes_im or None, exponents): planes (slices, rows, cols) uint16 in x's shape.
py::tuple split(const py::array_t<double>& re, int slices, bool lines_are_rows, const std::string& kind,
                const py::object& im) {
  const char* who = "bf16_split";
  if (kind != "fixed" && kind != "float")
    throw std::invalid_argument("bf16_split: kind must be 'fixed' or 'float'");
  if (slices < 1 || slices > 8) throw std::invalid_argument("bf16_split: slices must be 1..8");
  const Matrix xr = matrix(re, who);
  Matrix xi{};
  const bool cplx = !im.is_none();
  py::array_t<double> im_arr;
  if (cplx) {
    im_arr = im.cast<py::array_t<double>>();
    xi = matrix(im_arr, who);
    if (xi.rows != xr.rows || xi.cols != xr.cols)
      throw std::invalid_argument("bf16_split: re and im shapes differ");
  }
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
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < m; ++i)
      for (long long j = 0; j < n; ++j) p[i * n + j] = scale2(p[i * n + j], pe[i] + qe[j]);
  } else if (py::isinstance<py::array_t<float>>(c)) {
    float* p = static_cast<float*>(c.mutable_data());
    py::gil_scoped_release release;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < m; ++i)  // exact in double, then one rounding to float
      for (long long j = 0; j < n; ++j)
        p[i * n + j] = static_cast<float>(scale2(static_cast<double>(p[i * n + j]), pe[i] + qe[j]));
  } else {
    throw std::invalid_argument("bf16_unscale: c must be float32 or float64");
  }
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
}
