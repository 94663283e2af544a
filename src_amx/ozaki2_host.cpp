// Scheme II's residue and CRT stages on the CPU, from the same CUDA C++ sources the cupy backend
// compiles (backends/cuda/ozaki2_residues.cu, ozaki2_crt.cu, ozaki2_crt_s8.cu): the per-entry
// arithmetic is written once. Here those device functions compile as host C++ (cuda_host.hpp)
// and OpenMP runs the loops; the outputs are bit-identical to emulinalg._ozaki2's numpy code
// (tests/test_amx.py checks it). Real products, and complex ones by 3M (three planes per
// operand: re, im, re + im; three GEMMs per modulus combined into the real and imaginary
// residues).
//
//   residues: float64 lines x (shift per line) -> int8 symmetric residues of trunc(x 2**shift)
//             for moduli 0..n-1, planes (n, rows, cols) in any output layout
//   reduce:   int32 GEMM output -> its symmetric residue mod m_l as int8
//   crt:      int8 residues (n, m, n) -> exact CRT integer -> correctly rounded float64 /
//             float32 / double-double, unscaled by 2**-(mu_i + nu_j)
#include "cuda_host.hpp"
#include "host_loops.hpp"

inline void __syncthreads() {}  // declared for the kernels' text; no kernel with one runs here

#define __CUDACC_RTC__  // the sources' explicit kernel instantiations are for nvcc only
#include "../backends/cuda/ozaki2_crt_s8.cu"     // includes ozaki2_crt.cu, ozaki2_common.cuh
#include "../backends/cuda/ozaki2_residues.cu"
#undef __CUDACC_RTC__

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>


namespace py = pybind11;

namespace {

constexpr int kMaxModuli = 20;
// Words of the exact CRT accumulator per count of moduli (backends/cuda: crt_words; the tables
// are padded to six digits with zeros, so fewer words give the same integer): checked against
// the Python function by tests/test_amx.py through crt_words() below.
// (Counts 0 and 1 are refused at run time; 1 word keeps their template instances valid.)
constexpr int kCrtWords[kMaxModuli + 1] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3,
                                           3, 3, 4, 4, 4, 4, 5, 5, 5, 5};

// Calls f(std::integral_constant<int, L>) for the runtime modulus index l < kMaxModuli.
template <class F, int... L>
void with_index(int l, F&& f, std::integer_sequence<int, L...>) {
  ((l == L ? (f(std::integral_constant<int, L>{}), 0) : 0), ...);
}
template <class F>
void with_index(int l, F&& f) {
  with_index(l, std::forward<F>(f), std::make_integer_sequence<int, kMaxModuli>{});
}

template <int L, int NMOD>
inline void residues_of(const Words& w, signed char* out, long long plane) {
  if constexpr (L < NMOD) {
    out[L * plane] = static_cast<signed char>(residue_of<kModuli[L]>(w));
    residues_of<L + 1, NMOD>(w, out, plane);
  }
}

// Strides in elements. Line r of the input carries shift[r]; entry (r, c) goes to
// out[l * plane + r * out_r + c * out_c].
template <int NMOD>
void residues_impl(const double* x, long long sr, long long sc, int R, int C, const int* shift,
                   signed char* out, long long plane, long long out_r, long long out_c) {
  emu_host::for_entries(x, sr, sc, R, C, [&](int r, int c, double v) {
    residues_of<0, NMOD>(element_words(v, shift[r]), out + r * out_r + c * out_c, plane);
  });
}

template <int L, int NMOD>
inline void residues_of3(const Words& wr, const Words& wi, signed char* out, long long plane,
                         long long set) {
  if constexpr (L < NMOD) {
    constexpr int m = kModuli[L];
    const int xr = residue_of<m>(wr), xi = residue_of<m>(wi);
    out[L * plane] = static_cast<signed char>(xr);
    out[set + L * plane] = static_cast<signed char>(xi);
    out[2 * set + L * plane] = static_cast<signed char>(residue_sum<m>(xr, xi));
    residues_of3<L + 1, NMOD>(wr, wi, out, plane, set);
  }
}

// 3M planes of a complex operand: re, im and re + im (mod m), sets of NMOD planes `set` apart.
template <int NMOD>
void residues3_impl(const double* x, long long sr, long long sc, const double* y, long long yr,
                    long long yc, int R, int C, const int* shift, signed char* out,
                    long long plane, long long out_r, long long out_c) {
  emu_host::for_entries(x, sr, sc, R, C, [&](int r, int c, double v) {
    residues_of3<0, NMOD>(element_words(v, shift[r]), element_words(y[r * yr + c * yc], shift[r]),
                          out + r * out_r + c * out_c, plane, NMOD * plane);
  });
}

template <int L>
void reduce3_impl(const std::int32_t* t1, const std::int32_t* t2, const std::int32_t* t3,
                  long long size, signed char* re, signed char* im) {
  constexpr long long m = kModuli[L];
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < size; ++i) {  // int64: t3 - t1 - t2 can leave the int32 range
    long long a = (static_cast<long long>(t1[i]) - t2[i]) % m;
    long long b = (static_cast<long long>(t3[i]) - t1[i] - t2[i]) % m;
    a += a < 0 ? m : 0;
    b += b < 0 ? m : 0;
    re[i] = static_cast<signed char>(symmetric<kModuli[L]>(static_cast<int>(a)));
    im[i] = static_cast<signed char>(symmetric<kModuli[L]>(static_cast<int>(b)));
  }
}

template <int L>
void reduce_impl(const std::int32_t* t, long long size, signed char* out) {
  constexpr int m = kModuli[L];
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < size; ++i)
    out[i] = static_cast<signed char>(symmetric<m>(mod_pos<m>(t[i])));
}

template <int NMOD, int NP>
void crt_impl(const signed char* res, long long plane, int m, int n, const int* mu, const int* nu,
              int kind, void* hi, void* lo, void* hi_im, void* lo_im) {
  // The kernel on a grid of one thread, one output row per call: rows are shared out by OpenMP
  // (whatever number of threads it grants), each call walks every column of its row.
  gridDim = {1, 1, 1};
  blockDim = {1, 1, 1};
  blockIdx = {0, 0, 0};
#pragma omp parallel for schedule(static)
  for (int row = 0; row < m; ++row) {
    threadIdx = {0, 0, 0};
    ozaki2_crt_s8<NMOD, kCrtWords[NMOD], NP>(res + static_cast<long long>(row) * n, plane, 1, 1,
                                             n, n, m, row, mu, nu, kind, hi, lo, hi_im, lo_im);
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
                                  int nmod, bool lines_are_rows) {
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
    dispatch_nmod(nmod, [&](auto N) {
      residues_impl<decltype(N)::value>(px, sr, sc, R, C, ps, po, plane, out_r, out_c);
    });
  }
  return out;
}

// 3M residue planes (3, nmod, R, C) (or (3, nmod, C, R)) of the complex operand re + i im (same
// shape) with shift (R,): re, im, re + im.
py::array_t<signed char> residues3(py::array_t<double> re, py::array_t<double> im,
                                   py::array_t<int, py::array::c_style> shift, int nmod,
                                   bool lines_are_rows) {
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
      lines_are_rows ? std::vector<py::ssize_t>{3, nmod, R, C}
                     : std::vector<py::ssize_t>{3, nmod, C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double *px = re.data(), *py_ = im.data();
  const int* ps = shift.data();
  signed char* po = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    dispatch_nmod(nmod, [&](auto N) {
      residues3_impl<decltype(N)::value>(px, sr, sc, py_, yr, yc, R, C, ps, po, plane, out_r,
                                         out_c);
    });
  }
  return out;
}

// 3M: Re = T1 - T2, Im = T3 - T1 - T2 modulo the l-th modulus, symmetric, as int8.
void reduce3(py::array_t<std::int32_t, py::array::c_style> t1,
             py::array_t<std::int32_t, py::array::c_style> t2,
             py::array_t<std::int32_t, py::array::c_style> t3, int l, py::array re,
             py::array im) {
  check_moduli(l + 1);
  const long long size = t1.size();
  if (t2.size() != size || t3.size() != size) throw std::invalid_argument("reduce3: sizes");
  for (const py::array* o : {&re, &im})
    if (o->size() != size || !o->dtype().is(py::dtype::of<signed char>()) ||
        !(o->flags() & py::array::c_style) || !o->writeable())
      throw std::invalid_argument("reduce3: outputs must be writable C-contiguous int8 arrays");
  const std::int32_t *p1 = t1.data(), *p2 = t2.data(), *p3 = t3.data();
  signed char* pre = static_cast<signed char*>(re.mutable_data());
  signed char* pim = static_cast<signed char*>(im.mutable_data());
  py::gil_scoped_release nogil;
  with_index(l, [&](auto L) { reduce3_impl<decltype(L)::value>(p1, p2, p3, size, pre, pim); });
}

// Symmetric residues mod m_l of int32 values, written into out (int8, same size).
void reduce(py::array_t<std::int32_t, py::array::c_style> t, int l, py::array out) {
  check_moduli(l + 1);
  if (t.size() != out.size()) throw std::invalid_argument("reduce: sizes differ");
  if (!out.dtype().is(py::dtype::of<signed char>()) || !(out.flags() & py::array::c_style) ||
      !out.writeable())
    throw std::invalid_argument("reduce: out must be a writable C-contiguous int8 array");
  const std::int32_t* pt = t.data();
  signed char* po = static_cast<signed char*>(out.mutable_data());
  const long long size = t.size();
  py::gil_scoped_release nogil;
  with_index(l, [&](auto L) { reduce_impl<decltype(L)::value>(pt, size, po); });
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
        py::arg("lines_are_rows") = true,
        "int8 symmetric residues of trunc(x * 2**shift) (shift per line) for the first `moduli` "
        "moduli: (moduli, R, C) when lines_are_rows, else (moduli, C, R). Exact for "
        "|trunc(x 2**shift)| < 2**96 (Scheme II's scaling keeps it below 2**82).");
  m.def("ozaki2_reduce", &reduce, py::arg("t"), py::arg("l"), py::arg("out"),
        "out = symmetric residue of int32 t modulo the l-th modulus, as int8.");
  m.def("ozaki2_crt", &crt, py::arg("res"), py::arg("mu"), py::arg("nu"), py::arg("kind"),
        py::arg("wdig"), py::arg("pdig"), py::arg("ratio"), py::arg("hi"),
        py::arg("lo") = py::none(), py::arg("hi_im") = py::none(), py::arg("lo_im") = py::none(),
        "Scheme II reconstruction from int8 residues (moduli, m, n), or (2, moduli, m, n) for the "
        "real and imaginary parts (then hi_im, lo_im): kind 0 float64, 1 float32, 2 "
        "double-double (hi, lo); bit-identical to emulinalg._ozaki2.reconstruct.");
  m.def(
      "crt_words", [](int n) { return n >= 2 && n <= kMaxModuli ? kCrtWords[n] : 0; },
      py::arg("n"), "Words of the CRT accumulator compiled for n moduli (0 outside 2..20).");
  m.def("ozaki2_residues3", &residues3, py::arg("re"), py::arg("im"), py::arg("shift"),
        py::arg("moduli"), py::arg("lines_are_rows") = true,
        "3M residue planes (3, moduli, ...) of re + i im: re, im and re + im, as ozaki2_residues.");
  m.def("ozaki2_reduce3", &reduce3, py::arg("t1"), py::arg("t2"), py::arg("t3"), py::arg("l"),
        py::arg("re"), py::arg("im"),
        "3M: re = T1 - T2, im = T3 - T1 - T2 modulo the l-th modulus, symmetric int8.");
}
