// The line patch's native products (emulinalg/_engine.py: _native_lines) in one OpenMP pass:
// the rows `rows` of x (m, k) times the columns `cols` of y (k, n), float64 (float32 entries
// widened exactly), each entry summed over pieces of K of `step` whose sums are then added in
// piece order. The pieces keep every chain of additions near the native GEMM's blocked ones (a
// GEMV of one line sums all of k in one chain); numpy's path takes two calls per piece (the
// gather and a thin GEMM), each a thread team, which on a 16-thread host costs more than the
// arithmetic.
//
//   few rows:    y streamed once, a block of its columns per task (C <= COLS_PER_TASK: one
//                task, one thread: the thin blocks), the rows' piece sums of the block in a
//                thread's buffer (rows * COLS_PER_TASK doubles)
//   few columns: y's columns gathered once (cols, k), read whole for every output row (from
//                L2 or L3 where cols * k doubles outgrow L1: few columns only); x's rows
//                shared out, each read once
// The per-thread buffers are allocated before the OpenMP region (a failed allocation raises
// MemoryError, never inside a thread).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace py = pybind11;

namespace {

using ll = std::int64_t;

int team_size() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

constexpr ll COLS_PER_TASK = 256;

struct Lines {  // a 2-D operand's data and element strides
  const void* p;
  ll rows, cols, sr, sc;
};

template <class T>
inline double at(const Lines& a, ll r, ll c) {
  return static_cast<double>(static_cast<const T*>(a.p)[r * a.sr + c * a.sc]);
}

// out (R, C) for few rows: per task a block of at most COLS_PER_TASK output columns; for each
// piece of K, each k of it and each row, one multiply-add across the block.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void by_rows(
    const Lines& x, const Lines& y, const ll* rows, ll R, const ll* cols, ll C, ll step,
    double* out) {
  const ll k = x.cols;
  const ll tasks = (C + COLS_PER_TASK - 1) / COLS_PER_TASK;
  const bool unit = cols == nullptr && y.sc == 1;
  const ll per = (2 * R + 1) * COLS_PER_TASK;  // piece, total, y's gathered segment
  std::vector<double> slab(static_cast<size_t>(per * team_size()));
#pragma omp parallel
  {
    double* const piece_p = slab.data() + per * thread_id();
    double* const total_p = piece_p + R * COLS_PER_TASK;
    double* const yv = total_p + R * COLS_PER_TASK;
#pragma omp for schedule(dynamic, 1)
    for (ll task = 0; task < tasks; ++task) {
      const ll c0 = task * COLS_PER_TASK, cb = std::min(COLS_PER_TASK, C - c0);
      std::fill(total_p, total_p + R * COLS_PER_TASK, 0.0);
      for (ll k0 = 0; k0 < k; k0 += step) {
        std::fill(piece_p, piece_p + R * COLS_PER_TASK, 0.0);
        for (ll kk = k0; kk < std::min(k, k0 + step); ++kk) {
          const double* v;
          if (unit && std::is_same<T, double>::value) {
            v = reinterpret_cast<const double*>(static_cast<const T*>(y.p) + kk * y.sr + c0);
          } else {
            for (ll s = 0; s < cb; ++s) yv[s] = at<T>(y, kk, cols ? cols[c0 + s] : c0 + s);
            v = yv;
          }
          for (ll t = 0; t < R; ++t) {
            const double a = at<T>(x, rows ? rows[t] : t, kk);
            double* p = piece_p + t * COLS_PER_TASK;
#pragma omp simd
            for (ll s = 0; s < cb; ++s) p[s] += a * v[s];
          }
        }
        for (ll i = 0; i < R * COLS_PER_TASK; ++i) total_p[i] += piece_p[i];
      }
      for (ll t = 0; t < R; ++t)
        std::copy(total_p + t * COLS_PER_TASK, total_p + t * COLS_PER_TASK + cb, out + t * C + c0);
    }
  }
}

// out (R, C) for few columns: y's columns gathered once as (C, k); each output row reads its
// row of x piece by piece, each piece once per column (from L1), its sum added in piece order.
template <class T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void by_cols(
    const Lines& x, const Lines& y, const ll* rows, ll R, const ll* cols, ll C, ll step,
    double* out) {
  const ll k = x.cols;
  std::vector<double> yt(static_cast<size_t>(C * k));
  const bool in_place = std::is_same<T, double>::value && x.sc == 1;  // rows read as they are
  const ll per = C + (in_place ? 0 : k);  // the row's sums, its widened copy
  std::vector<double> slab(static_cast<size_t>(per * team_size()));
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (ll kk = 0; kk < k; ++kk)
      for (ll s = 0; s < C; ++s) yt[s * k + kk] = at<T>(y, kk, cols ? cols[s] : s);
    double* const total = slab.data() + per * thread_id();
    double* const xr = total + C;
#pragma omp for schedule(static)
    for (ll t = 0; t < R; ++t) {
      const ll r = rows ? rows[t] : t;
      const double* row = xr;
      if (in_place)
        row = reinterpret_cast<const double*>(static_cast<const T*>(x.p) + r * x.sr);
      else
        for (ll kk = 0; kk < k; ++kk) xr[kk] = at<T>(x, r, kk);
      std::fill(total, total + C, 0.0);
      for (ll k0 = 0; k0 < k; k0 += step) {
        const ll kb = std::min(step, k - k0);
        const double* xp = row + k0;
        for (ll s = 0; s < C; ++s) {
          const double* yp = yt.data() + s * k + k0;
          double sum = 0.0;
#pragma omp simd reduction(+ : sum)
          for (ll i = 0; i < kb; ++i) sum += xp[i] * yp[i];
          total[s] += sum;
        }
      }
      std::copy(total, total + C, out + t * C);
    }
  }
}

Lines lines_of(const py::array& a, const char* name, ll item) {
  if (a.ndim() != 2 || a.strides(0) % item != 0 || a.strides(1) % item != 0)
    throw std::invalid_argument(std::string("line_products: ") + name +
                                " must be a 2-D array of whole elements");
  return {a.data(), static_cast<ll>(a.shape(0)), static_cast<ll>(a.shape(1)),
          static_cast<ll>(a.strides(0)) / item, static_cast<ll>(a.strides(1)) / item};
}

using Index = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

const ll* indices(const py::object& idx, ll bound, ll* count, const char* name, Index* keep) {
  if (idx.is_none()) {
    *count = bound;
    return nullptr;
  }
  const auto raw = py::array::ensure(idx);
  if (!raw || (raw.dtype().kind() != 'i' && raw.dtype().kind() != 'u'))
    throw std::invalid_argument(std::string("line_products: ") + name + " must be integers");
  *keep = py::cast<Index>(raw);
  if (keep->ndim() != 1)
    throw std::invalid_argument(std::string("line_products: ") + name + " must be 1-D");
  *count = keep->size();
  const ll* p = keep->data();
  for (ll i = 0; i < *count; ++i)
    if (p[i] < 0 || p[i] >= bound)
      throw std::invalid_argument(std::string("line_products: ") + name + " out of range");
  return p;
}

py::array_t<double> line_products(const py::array& xa, const py::array& ya, const py::object& ra,
                                  const py::object& ca, ll step) {
  const bool f32 = py::isinstance<py::array_t<float>>(xa);
  if (f32 ? !py::isinstance<py::array_t<float>>(ya)
          : !(py::isinstance<py::array_t<double>>(xa) && py::isinstance<py::array_t<double>>(ya)))
    throw std::invalid_argument("line_products: x and y must be both float64 or both float32");
  const ll item = f32 ? 4 : 8;
  const Lines x = lines_of(xa, "x", item), y = lines_of(ya, "y", item);
  if (x.cols != y.rows) throw std::invalid_argument("line_products: x.shape[1] != y.shape[0]");
  if (step < 1) throw std::invalid_argument("line_products: step must be at least 1");
  Index keep_r, keep_c;
  ll R, C;
  const ll* rows = indices(ra, x.rows, &R, "rows", &keep_r);
  const ll* cols = indices(ca, y.cols, &C, "cols", &keep_c);
  py::array_t<double> out({static_cast<py::ssize_t>(R), static_cast<py::ssize_t>(C)});
  double* o = out.mutable_data();
  if (R == 0 || C == 0) return out;
  if (x.cols == 0) {
    std::fill(o, o + R * C, 0.0);
    return out;
  }
  py::gil_scoped_release release;
  if (R <= C)
    f32 ? by_rows<float>(x, y, rows, R, cols, C, step, o)
        : by_rows<double>(x, y, rows, R, cols, C, step, o);
  else
    f32 ? by_cols<float>(x, y, rows, R, cols, C, step, o)
        : by_cols<double>(x, y, rows, R, cols, C, step, o);
  return out;
}

}  // namespace

void register_lines_host(py::module_& m) {
  m.def("line_products", &line_products, py::arg("x"), py::arg("y"), py::arg("rows"),
        py::arg("cols"), py::arg("step"),
        "float64 (len(rows), len(cols)) product of the rows `rows` of x (m, k) and the columns "
        "`cols` of y (k, n) (int64 indices, None: all), both float64 or both float32 (widened "
        "exactly), any whole-element strides; each entry summed over pieces of K of `step`, "
        "the pieces' sums added in order (OpenMP). Bad shapes, dtypes or indices: ValueError.");
}
