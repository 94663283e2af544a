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

#ifdef _OPENMP
#include <omp.h>
#endif
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

// (s, bound, sums, nz, l1, mixed, sq), the accurate-mode prescale's pass over one operand, as
// ozaki2_stats.cu's bound_operand: s = 5 - cplx - floor(log2 max(|re|, |im|)) per line (for a
// zero line as if the max were 1), int64 (R,); the int8 bound operand floor(RN(|re| 2**(s+1)))
// + floor(RN(|im| 2**(s+1))) <= 127, (R, C) when lines_are_rows, else (C, R); per line the sum
// of its entries, the count of nonzero parts and of entries with both parts nonzero (int64
// (R,), exact), and the sums for the certificate's normalized norms (float64 (R,)): of
// x = |re| 2**-e + |im| 2**-e (e = 5 - cplx - s) and of x**2 (the l2 norm), in column order,
// so the certificate needs no pass over the operands of its own.
py::tuple host_bound_operand(py::array_t<double> x, bool lines_are_rows, py::object im) {
  const auto [sr, sc] = emu_host::matrix_strides(x, "bound_operand");
  py::array_t<double> keep;
  const Imag y = imag_part(im, x, "bound_operand", keep);
  const int R = static_cast<int>(x.shape(0)), C = static_cast<int>(x.shape(1));
  py::array_t<std::int64_t> shift(R), sums(R), nz(R), mixed(R);
  py::array_t<double> l1(R), sq(R);
  py::array_t<signed char> out(lines_are_rows ? std::vector<py::ssize_t>{R, C}
                                              : std::vector<py::ssize_t>{C, R});
  const long long out_r = lines_are_rows ? C : 1, out_c = lines_are_rows ? 1 : R;
  const double* px = x.data();
  std::int64_t *ps = shift.mutable_data(), *pv = sums.mutable_data(), *pz = nz.mutable_data();
  std::int64_t* pm = mixed.mutable_data();
  double *pl = l1.mutable_data(), *pq = sq.mutable_data();
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
      pv[r] = pz[r] = pm[r] = 0;
      pl[r] = pq[r] = 0.0;
    }
    // for_entries gives each line to one thread and walks its columns in order: the line
    // sums need no atomics and the l1 has a fixed order
    emu_host::for_entries(px, sr, sc, R, C, [&](int r, int c, double v) {
      const int p1 = s[r] + 1, pn = s[r] - 5 + (y.p ? 1 : 0);  // 2**(s+1), 2**-e
      const double a = abs_of(v);
      int b = floor_small(scale2(a, p1));
      int z = a != 0.0;
      double l = scale2(a, pn);
      if (y.p) {
        const double w = abs_of(y.p[r * y.sr + c * y.sc]);
        b += floor_small(scale2(w, p1));
        z += w != 0.0;
        pm[r] += a != 0.0 && w != 0.0;
        l = __dadd_rn(l, scale2(w, pn));
      }
      po[r * out_r + c * out_c] = static_cast<signed char>(b);
      pv[r] += b;
      pz[r] += z;
      pl[r] = __dadd_rn(pl[r], l);
      pq[r] = __dadd_rn(pq[r], __dmul_rn(l, l));
    });
  }
  return py::make_tuple(shift, out, sums, nz, l1, mixed, sq);
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

// cert_entries for 64 consecutive entries of row i (columns j0 .. j0 + 63 of F, c, mixb, nb,
// beta, need): entry_lower and cert_test per entry (no contraction in this file), vectorized
// across the entries; the first certifying threshold is counted instead of bisected: the test
// is monotone in t (cert_test), so the number of thresholds that fail it is the first index
// that passes (nth: none); host_cert_entries checks that the thresholds are finite, positive
// and non-increasing, which that needs. Adds each entry's index to hist.
constexpr int kCertRun = 64;
__attribute__((target_clones("avx512f", "avx2", "default"))) void cert_run(
    const std::int32_t* __restrict__ F, const float* __restrict__ c,
    const std::int64_t* __restrict__ mixb, bool mixa, const double* __restrict__ nb,
    const double* __restrict__ beta, double na_i, double alpha_i, double qa, double fscale,
    double fscale_mixed, double factor, double abs_term, double cR,
    const double* __restrict__ th, int nth, int base, std::uint8_t* __restrict__ need,
    long long* __restrict__ hist) {
  double R[kCertRun], G2[kCertRun], Q[kCertRun];
  int q[kCertRun];
  for (int t = 0; t < kCertRun; ++t) {
    const double lam = entry_lower(static_cast<double>(F[t]), mixa | (mixb[t] != 0), fscale,
                                   fscale_mixed, c != nullptr, c ? c[t] : 0.0f, factor,
                                   abs_term);
    const CertTest ct = cert_test(lam, na_i, alpha_i, qa, nb[t], beta[t], cR);
    R[t] = ct.R;
    G2[t] = ct.G2;
    Q[t] = ct.Q;
    q[t] = 0;
  }
  for (int k = 0; k < nth; ++k)
    for (int t = 0; t < kCertRun; ++t) q[t] += !CertTest{R[t], G2[t], Q[t]}.passes(th[k]);
  for (int t = 0; t < kCertRun; ++t) {
    need[t] = static_cast<std::uint8_t>(base + q[t]);
    ++hist[q[t]];
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
                            py::object c) {
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
  py::array_t<std::uint8_t> need({m, n});
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
      std::vector<long long> mine(static_cast<std::size_t>(nth) + 1, 0);
#pragma omp for schedule(static)
      for (int i = 0; i < m; ++i) {
        const double qa = __dmul_rn(c4, pal[i]);
        const long long row = static_cast<long long>(i) * n;
        int j = 0;
        for (; j + kCertRun <= n; j += kCertRun)  // whole runs vectorized, the rest below
          cert_run(pF + row + j, pc ? pc + row + j : nullptr, pmb + j, pma[i] != 0, pnb + j,
                   pbe + j, pna[i], pal[i], qa, fscale, fscale_mixed, factor, abs_term, cR, th,
                   nth, base, pn + row + j, mine.data());
        for (; j < n; ++j) {
          const long long at = static_cast<long long>(i) * n + j;
          const double lam =
              entry_lower(static_cast<double>(pF[at]), pma[i] != 0 || pmb[j] != 0, fscale,
                          fscale_mixed, pc != nullptr, pc ? pc[at] : 0.0f, factor, abs_term);
          const int q = cert_need(lam, pna[i], pal[i], qa, pnb[j], pbe[j], cR, th, nth);
          pn[at] = static_cast<std::uint8_t>(base + q);
          ++mine[q];
        }
      }
#pragma omp critical
      for (int q = 0; q <= nth; ++q) counts[q] += mine[q];
    }
  }
  int top = -1;
  for (int q = 0; q < nth; ++q)
    if (counts[q]) top = q;
  return py::make_tuple(need, top < 0 ? -1 : base + top, top < 0 ? 0 : counts[top], counts[nth]);
}

}  // namespace

void register_ozaki2_stats_host(py::module_& m) {
  m.def("ozaki2_bound_operand", &host_bound_operand, py::arg("x"), py::arg("lines_are_rows") = true,
        py::arg("im") = py::none(),
        "(s, bound, sums, nz, l1, mixed, sq): the accurate-mode prescale's shifts s = 5 - [im "
        "given] - floor(log2 max(|x|, |im|)) per line (int64), its int8 bound operand "
        "floor(|x| 2**(s+1)) (+ floor(|im| 2**(s+1))), (R, C) or, lines_are_rows=False, (C, R), "
        "and per line the sum of those entries, the count of nonzero parts and of entries with "
        "both parts nonzero (int64) and the float64 sums of v = (|x| + |im|) 2**(s-5+[im "
        "given]) and of v**2, in column order.");
  m.def("ozaki2_bound_max", &host_bound_max, py::arg("F"), py::arg("ra"), py::arg("nza"),
        py::arg("cb"), py::arg("nzb"), py::arg("cplx"),
        "(e, f): float64 row (m,) and column (n,) maxima of the bound U(F, line terms) over the "
        "bound GEMM's int32 sums F (m, n), divided by 4.");
  m.def("ozaki2_cert_operand", &host_cert_operand, py::arg("x"), py::arg("e"),
        py::arg("lines_are_rows") = true, py::arg("im") = py::none(),
        "(mag, l1): float32 max(|x|, |im|) 2**-e truncated toward zero (layout as "
        "ozaki2_bound_operand) and the float64 line sums of (|x| + |im|) 2**-e.");
  m.def("ozaki2_cert_entries", &host_cert_entries, py::arg("F"), py::arg("fexp"), py::arg("na"),
        py::arg("alpha"), py::arg("nb"), py::arg("beta"), py::arg("factor"), py::arg("abs_term"),
        py::arg("cR"), py::arg("c4"), py::arg("thr"), py::arg("base"), py::arg("mixa"),
        py::arg("mixb"), py::arg("fexp_mixed"), py::arg("c") = py::none(),
        "(need, count, at_count, beyond) of the certificate from the lower bound F 2**-fexp of "
        "the bound GEMM's int32 sums F (m, n), or the larger of that and the float32 GEMM sums "
        "c's: per entry base + the index of the first threshold that certifies it.");
}
