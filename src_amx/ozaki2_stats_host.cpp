// The statistics that choose a level's number of moduli (the accurate-mode prescale and the
// per-entry certificate) on the CPU, from the CUDA sources of the cupy backend's kernels
// (backends/cuda/ozaki2_stats.cu: exponent_of, scale2, ceil_small, cert_y): the per-entry
// arithmetic is written once. Real or complex operands (magnitudes max(|re|, |im|), bounds
// ceil(|re|) + ceil(|im|), norms |re| + |im|); OpenMP loops walk whichever axis is contiguous.
// Same values as emulinalg._scaling.ozaki2_prescale (exactly) and the same decisions as
// emulinalg._select.ozaki2_moduli_needed (its float32 lower bound; the l1 sums are taken in
// another order, upper bounds both) -- tests/test_amx.py.
#include "cuda_host.hpp"
#include "host_loops.hpp"

// Declared for the kernels' text, never called here (no kernel runs in this file).
inline void __syncthreads() {}
inline int atomicMax(int*, int v) { return v; }
inline unsigned long long atomicMin(unsigned long long*, unsigned long long v) { return v; }

#define __CUDACC_RTC__  // the source's explicit kernel instantiations are for nvcc only
#include "../backends/cuda/ozaki2_stats.cu"
#undef __CUDACC_RTC__

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// The imaginary part beside re (same shape), or none: its data pointer and element strides.
struct Imag {
  const double* p = nullptr;
  long long sr = 0, sc = 0;
};

Imag imag_part(const py::object& im, const py::array_t<double>& re, const char* who,
               py::array_t<double>& keep) {
  Imag out;
  if (im.is_none()) return out;
  keep = im.cast<py::array_t<double>>();
  if (keep.ndim() != 2 || keep.shape(0) != re.shape(0) || keep.shape(1) != re.shape(1))
    throw std::invalid_argument(std::string(who) + ": im must have re's shape");
  const auto [sr, sc] = emu_host::matrix_strides(keep, who);
  out.p = keep.data();
  out.sr = sr;
  out.sc = sc;
  return out;
}

// (s, bound): s = 5 - cplx - floor(log2 max(|re|, |im|)) per line (for a zero line as if the
// max were 1), as int64, and the int8 bound operand ceil(RN(|re| 2**s)) + ceil(RN(|im| 2**s))
// <= 64, (R, C) when lines_are_rows, else (C, R).
py::tuple host_bound_operand(py::array_t<double> x, bool lines_are_rows, py::object im) {
  const auto [sr, sc] = emu_host::matrix_strides(x, "bound_operand");
  py::array_t<double> keep;
  const Imag y = imag_part(im, x, "bound_operand", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  py::array_t<std::int64_t> shift(R);
  py::array_t<signed char> out(lines_are_rows ? std::vector<py::ssize_t>{R, C}
                                              : std::vector<py::ssize_t>{C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double* px = x.data();
  std::int64_t* ps = shift.mutable_data();
  signed char* po = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    std::vector<unsigned long long> mx(R, 0);  // largest |re|, |im| per line, as bits
    emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
      unsigned long long b = abs_bits(v);
      if (y.p) b = std::max(b, abs_bits(y.p[r * y.sr + c * y.sc]));
      if (b > mx[r]) mx[r] = b;
    });
    std::vector<int> s(R);
    for (int r = 0; r < R; ++r) {
      const int e = mx[r] == 0 ? 0 : exponent_of(__longlong_as_double(static_cast<long long>(mx[r])));
      s[r] = 5 - e - (y.p ? 1 : 0);
      ps[r] = s[r];
    }
    emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
      int b = ceil_small(scale2(abs_of(v), s[r]));
      if (y.p) b += ceil_small(scale2(abs_of(y.p[r * y.sr + c * y.sc]), s[r]));
      po[r * out_r + c * out_c] = static_cast<signed char>(b);
    });
  }
  return py::make_tuple(shift, out);
}

// (mag, l1): float32 magnitudes max(|re|, |im|) 2**-e truncated toward zero, (R, C) when
// lines_are_rows, else (C, R), and the line sums of |re| 2**-e + |im| 2**-e in float64 (in
// column order), for the line exponents e (int64, (R,)).
py::tuple host_cert_operand(py::array_t<double> x, py::array_t<std::int64_t, py::array::c_style> e,
                            bool lines_are_rows, py::object im) {
  const auto [sr, sc] = emu_host::matrix_strides(x, "cert_operand");
  py::array_t<double> keep;
  const Imag y = imag_part(im, x, "cert_operand", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  if (e.size() != R) throw std::invalid_argument("cert_operand: one exponent per line");
  py::array_t<float> out(lines_are_rows ? std::vector<py::ssize_t>{R, C}
                                        : std::vector<py::ssize_t>{C, R});
  py::array_t<double> l1(R);
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double* px = x.data();
  const std::int64_t* pe = e.data();
  float* po = out.mutable_data();
  double* pl = l1.mutable_data();
  {
    py::gil_scoped_release nogil;
    for (int r = 0; r < R; ++r) pl[r] = 0.0;
    emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
      const int p = static_cast<int>(-pe[r]);
      double a = scale2(abs_of(v), p), mag = a;
      if (y.p) {
        const double b = scale2(abs_of(y.p[r * y.sr + c * y.sc]), p);
        mag = b > a ? b : a;
        a = __dadd_rn(a, b);
      }
      po[r * out_r + c * out_c] = __double2float_rz(mag);
      pl[r] = __dadd_rn(pl[r], a);
    });
  }
  return py::make_tuple(out, l1);
}

// (beyond, y_min): the certificate per entry of the lower-bound GEMM's FP32 sums c (m, n)
// (cert_y), beyond = y < thr, and the smallest y of the other entries (inf: none).
py::tuple host_cert_entries(py::array_t<float, py::array::c_style> c,
                       py::array_t<double, py::array::c_style> na,
                       py::array_t<double, py::array::c_style> alpha,
                       py::array_t<double, py::array::c_style> nb,
                       py::array_t<double, py::array::c_style> beta, double factor,
                       double abs_term, double cR, double c4, double thr) {
  if (c.ndim() != 2) throw std::invalid_argument("cert_entries: c must be 2-D");
  const int m = static_cast<int>(c.shape(0)), n = static_cast<int>(c.shape(1));
  if (na.size() != m || alpha.size() != m || nb.size() != n || beta.size() != n)
    throw std::invalid_argument("cert_entries: line terms of the wrong size");
  py::array_t<bool> beyond({m, n});
  const float* pc = c.data();
  const double *pna = na.data(), *pal = alpha.data(), *pnb = nb.data(), *pbe = beta.data();
  bool* pb = beyond.mutable_data();
  double ymin = std::numeric_limits<double>::infinity();
  {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static) reduction(min : ymin)
    for (int i = 0; i < m; ++i) {
      const double qa = __dmul_rn(c4, pal[i]);
      for (int j = 0; j < n; ++j) {
        const long long at = static_cast<long long>(i) * n + j;
        const double y = cert_y(pc[at], pna[i], pal[i], qa, pnb[j], pbe[j], factor, abs_term, cR);
        const bool out = y < thr;
        pb[at] = out;
        if (!out && y < ymin) ymin = y;
      }
    }
  }
  return py::make_tuple(beyond, ymin);
}

}  // namespace

void register_ozaki2_stats_host(py::module_& m) {
  m.def("ozaki2_bound_operand", &host_bound_operand, py::arg("x"), py::arg("lines_are_rows") = true,
        py::arg("im") = py::none(),
        "(s, bound): the accurate-mode prescale's shifts s = 5 - [im given] - floor(log2 "
        "max(|x|, |im|)) per line and its int8 bound operand ceil(|x| 2**s) (+ ceil(|im| 2**s)), "
        "(R, C) or, lines_are_rows=False, (C, R).");
  m.def("ozaki2_cert_operand", &host_cert_operand, py::arg("x"), py::arg("e"),
        py::arg("lines_are_rows") = true, py::arg("im") = py::none(),
        "(mag, l1): float32 max(|x|, |im|) 2**-e truncated toward zero (layout as "
        "ozaki2_bound_operand) and the float64 line sums of (|x| + |im|) 2**-e.");
  m.def("ozaki2_cert_entries", &host_cert_entries, py::arg("c"), py::arg("na"), py::arg("alpha"),
        py::arg("nb"), py::arg("beta"), py::arg("factor"), py::arg("abs_term"), py::arg("cR"),
        py::arg("c4"), py::arg("thr"),
        "(beyond, y_min) of the certificate from the lower-bound GEMM's float32 sums.");
}
