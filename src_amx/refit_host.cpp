// The refit's choice of entries on the CPU (emulinalg/backends/host_refit.py: refit_pick) in one
// OpenMP pass over the output: per entry and measure (the modulus; for a complex result each
// part too) the ratio q of refit.cancel_ratios, in its float64 operation order (each product
// rounded, no FMA: -ffp-contract=off, as src_cuda/refit_pick.cu's part_ratio), and per measure
//
//   zeros       the first `keep` flat indices with q == 0, ascending
//   candidates  the `keep` smallest (q, flat index) pairs with 0 < q < inf, ascending by index
//
// refit.pick keeps the entries with 0 < q <= low 2**REFIT_SPREAD_BITS and refit.chosen the
// REFIT_ENTRIES smallest (q, index) of them: a prefix of the (q, index) order, so the
// candidates filtered by the spread are the same set. The Python side applies the spread and
// refit.chosen, so the rule stays in refit.py.
//
// Each thread owns a contiguous range of rows (lines of n entries), so its zeros come in flat
// order and its candidates enter a bounded max-heap in ascending index (a tie never replaces
// the top); the threads' results merge in thread order (zeros) and by (q, index).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using Pair = std::pair<double, long long>;  // (q, flat index): lexicographic order

struct Found {  // one thread's or the merged result, per measure
  std::vector<long long> zeros[3];
  std::priority_queue<Pair> cands[3];  // max-heap: the worst kept on top
};

inline double part_ratio(double p, double a1, double b1, double a2, double b2) {
  return ((std::fabs(p) * a1) * b1) * (a2 * b2);  // refit.cancel_ratios' order
}

// SSE2 intrinsics (the x86-64 baseline) where GCC leaves scalar code: a reduction of
// comparisons, and std::sqrt (its errno path).

// Whether lo < q[j] < top for some j.
bool any_within(const double* q, long long n, double lo, double top) {
  const __m128d l = _mm_set1_pd(lo), t = _mm_set1_pd(top);
  __m128d acc = _mm_setzero_pd();
  long long j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m128d x = _mm_loadu_pd(q + j);
    acc = _mm_or_pd(acc, _mm_and_pd(_mm_cmpgt_pd(x, l), _mm_cmplt_pd(x, t)));
  }
  bool hit = _mm_movemask_pd(acc) != 0;
  for (; j < n; ++j) hit = hit || (q[j] > lo && q[j] < top);
  return hit;
}

// x[j] = sqrt(x[j]), correctly rounded (sqrtpd, as std::sqrt).
void sqrt_all(double* x, long long n) {
  long long j = 0;
  for (; j + 2 <= n; j += 2) _mm_storeu_pd(x + j, _mm_sqrt_pd(_mm_loadu_pd(x + j)));
  for (; j < n; ++j) x[j] = _mm_cvtsd_f64(_mm_sqrt_sd(_mm_setzero_pd(), _mm_set_sd(x[j])));
}

struct Args {
  const void* re;
  const void* im;
  const double *a1, *a2, *b1, *b2;
  const std::uint8_t* exclude;
  long long batch, m, n;
  std::size_t keep;
  int threads;  // <= 0: OpenMP's default
};

// One row's ratios (restrict: GCC vectorizes these without run-time overlap checks).
template <typename T>
void real_ratios(const T* __restrict__ p, double f1, double f2, const double* __restrict__ g1,
                 const double* __restrict__ g2, long long n, double* __restrict__ q) {
  for (long long j = 0; j < n; ++j) {
    const double v = part_ratio(static_cast<double>(p[j]), f1, g1[j], f2, g2[j]);
    q[j] = v >= 0 ? v : kInf;  // nan -> inf
  }
}

template <typename T>
void complex_ratios(const T* __restrict__ pr, const T* __restrict__ pi, double f1, double f2,
                    const double* __restrict__ g1, const double* __restrict__ g2, long long n,
                    double* __restrict__ q0, double* __restrict__ q1, double* __restrict__ q2) {
  for (long long j = 0; j < n; ++j) {
    const double v0 = part_ratio(static_cast<double>(pr[j]), f1, g1[j], f2, g2[j]);
    const double v1 = part_ratio(static_cast<double>(pi[j]), f1, g1[j], f2, g2[j]);
    q0[j] = v0 * v0 + v1 * v1;
    q1[j] = v0 > 0 ? v0 : kInf;  // an exact zero part (or nan): no cancellation
    q2[j] = v1 > 0 ? v1 : kInf;
  }
  sqrt_all(q0, n);  // the modulus
  for (long long j = 0; j < n; ++j) q0[j] = q0[j] >= 0 ? q0[j] : kInf;
}

void excluded(const std::uint8_t* __restrict__ ex, long long n, double* __restrict__ q) {
  for (long long j = 0; j < n; ++j) q[j] = ex[j] ? kInf : q[j];
}

// The rows [r0, r1) of the (batch m, n) output into `out`, `buf` W n doubles of scratch.
template <typename T, bool Cplx>
void scan_rows(const Args& a, long long r0, long long r1, Found& out, std::vector<double>& buf) {
  constexpr int W = Cplx ? 3 : 1;
  const long long n = a.n;
  const T* re = static_cast<const T*>(a.re);
  const T* im = static_cast<const T*>(a.im);
  double* qs[3] = {buf.data(), buf.data() + n, buf.data() + 2 * n};
  for (long long row = r0; row < r1; ++row) {
    const long long bat = row / a.m, base = row * n;
    const double* g1 = a.b1 + bat * n;
    const double* g2 = a.b2 + bat * n;
    if (Cplx)
      complex_ratios(re + base, im + base, a.a1[row], a.a2[row], g1, g2, n, qs[0], qs[1], qs[2]);
    else
      real_ratios(re + base, a.a1[row], a.a2[row], g1, g2, n, qs[0]);
    if (a.exclude)
      for (int w = 0; w < W; ++w) excluded(a.exclude + base, n, qs[w]);
    for (int w = 0; w < W; ++w) {
      const double* q = qs[w];
      auto& zeros = out.zeros[w];
      auto& heap = out.cands[w];
      const bool full = heap.size() >= a.keep;
      const double top = full ? (a.keep ? heap.top().first : 0.0) : kInf;
      const double lo = zeros.size() < a.keep ? -1.0 : 0.0;  // zeros still wanted: q > -1
      if (!any_within(q, n, lo, top)) continue;  // most rows once the heap holds `keep`
      for (long long j = 0; j < n; ++j) {
        const double x = q[j];
        if (x == 0) {
          if (zeros.size() < a.keep) zeros.push_back(base + j);
        } else if (x < kInf) {
          if (heap.size() < a.keep) {
            heap.emplace(x, base + j);
          } else if (a.keep && x < heap.top().first) {  // a later index never wins a tie
            heap.pop();
            heap.emplace(x, base + j);
          }
        }
      }
    }
  }
}

template <typename T, bool Cplx>
Found run(const Args& a) {
  const long long rows = a.batch * a.m;
  int threads = a.threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  threads = std::max(1, threads);
  threads = static_cast<int>(std::min<long long>(threads, std::max<long long>(1, rows)));
  std::vector<Found> part(threads);
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
  {
    int t = 0, nt = 1;
#ifdef _OPENMP
    t = omp_get_thread_num();
    nt = omp_get_num_threads();
#endif
    const long long r0 = rows * t / nt, r1 = rows * (t + 1) / nt;  // thread order = row order
    std::vector<double> buf(static_cast<std::size_t>((Cplx ? 3 : 1) * std::max(1LL, a.n)));
    scan_rows<T, Cplx>(a, r0, r1, part[t], buf);
  }
  Found all;
  constexpr int W = Cplx ? 3 : 1;
  for (int w = 0; w < W; ++w) {
    std::vector<Pair> cands;
    for (auto& p : part) {
      for (long long z : p.zeros[w])
        if (all.zeros[w].size() < a.keep) all.zeros[w].push_back(z);
      for (; !p.cands[w].empty(); p.cands[w].pop()) cands.push_back(p.cands[w].top());
    }
    std::sort(cands.begin(), cands.end());
    if (cands.size() > a.keep) cands.resize(a.keep);
    for (const auto& c : cands) all.cands[w].push(c);
  }
  return all;
}

py::array_t<std::int64_t> as_array(const std::vector<long long>& v) {
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

template <class T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

// A C-contiguous native float32 or float64 array of `total` entries ('f', 'd'), or ValueError.
char part_kind(const py::array& x, long long total, const char* name) {
  const bool c = (x.flags() & py::array::c_style) != 0;
  const char k = py::isinstance<py::array_t<double>>(x)  ? 'd'
                 : py::isinstance<py::array_t<float>>(x) ? 'f'
                                                         : 0;
  if (!c || !k || x.size() != total)
    throw std::invalid_argument(std::string("refit_candidates: ") + name +
                                " must be a C-contiguous float32 or float64 array of batch*m*n "
                                "entries");
  return k;
}

const double* factor(const CArray<double>& x, long long len, const char* name) {
  if (x.size() != len)
    throw std::invalid_argument(std::string("refit_candidates: ") + name + " has " +
                                std::to_string(x.size()) + " entries, not " + std::to_string(len));
  return x.data();
}

py::list refit_candidates(const py::array& re, const py::object& im, const CArray<double>& a1,
                          const CArray<double>& a2, const CArray<double>& b1,
                          const CArray<double>& b2, const py::object& exclude, long long batch,
                          long long m, long long n, long long keep, int threads) {
  if (batch < 0 || m < 0 || n < 0 || keep < 0)
    throw std::invalid_argument("refit_candidates: negative batch, m, n or keep");
  const long long total = batch * m * n;
  const char kind = part_kind(re, total, "re");
  const bool cplx = !im.is_none();
  py::array im_arr;
  if (cplx) {
    im_arr = im.cast<py::array>();
    if (part_kind(im_arr, total, "im") != kind)
      throw std::invalid_argument("refit_candidates: im must have re's dtype");
  }
  py::array_t<std::uint8_t> ex_arr;
  const std::uint8_t* ex = nullptr;
  if (!exclude.is_none()) {
    ex_arr = exclude.cast<py::array_t<std::uint8_t>>();
    if (!(ex_arr.flags() & py::array::c_style) || ex_arr.size() != total)
      throw std::invalid_argument(
          "refit_candidates: exclude must be a C-contiguous uint8 array of batch*m*n entries");
    ex = ex_arr.data();
  }
  Args a{re.data(), cplx ? im_arr.data() : nullptr, factor(a1, batch * m, "a1"),
         factor(a2, batch * m, "a2"), factor(b1, batch * n, "b1"), factor(b2, batch * n, "b2"),
         ex, batch, m, n, static_cast<std::size_t>(keep), threads};
  Found got;
  {
    py::gil_scoped_release nogil;
    if (total > 0) {
      if (kind == 'd')
        got = cplx ? run<double, true>(a) : run<double, false>(a);
      else
        got = cplx ? run<float, true>(a) : run<float, false>(a);
    }
  }
  py::list out;
  for (int w = 0; w < (cplx ? 3 : 1); ++w) {
    std::vector<Pair> c;
    for (auto& h = got.cands[w]; !h.empty(); h.pop()) c.push_back(h.top());
    std::sort(c.begin(), c.end(), [](const Pair& x, const Pair& y) { return x.second < y.second; });
    std::vector<long long> idx;
    py::array_t<double> q(static_cast<py::ssize_t>(c.size()));
    for (std::size_t i = 0; i < c.size(); ++i) {
      idx.push_back(c[i].second);
      q.mutable_data()[i] = c[i].first;
    }
    out.append(py::make_tuple(as_array(got.zeros[w]), as_array(idx), q));
  }
  return out;
}

}  // namespace

void register_refit_host(py::module_& m) {
  m.def("refit_candidates", &refit_candidates, py::arg("re"), py::arg("im"), py::arg("a1"),
        py::arg("a2"), py::arg("b1"), py::arg("b2"), py::arg("exclude"), py::arg("batch"),
        py::arg("m"), py::arg("n"), py::arg("keep"), py::kw_only(), py::arg("threads") = 0,
        "The refit's candidates in one OpenMP pass over a (batch, m, n) output (re, im: "
        "C-contiguous float32 or float64, im None for a real result; a1, a2 (batch*m,), b1, b2 "
        "(batch*n,): refit.line_factors; exclude: C-contiguous uint8 or None). Per measure of "
        "refit.cancel_ratios (the modulus; complex: the real and imaginary parts too) a tuple "
        "(zeros, idx, q): the first `keep` flat indices with q == 0, and the `keep` smallest "
        "(q, flat index) pairs with 0 < q < inf, ascending by index, with their q. Each of "
        "`threads` threads (<= 0: OpenMP's default) takes a contiguous range of rows.");
}
