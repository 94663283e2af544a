// What the CPU stages (ozaki2_host.cpp, ozaki2_stats_host.cpp, bf16_host.cpp) share: a strided
// float64 matrix's checked element strides, a loop over its entries, huge-page arrays, two
// exact float64 helpers (powers of two, round to nearest integer) their vectorized loops use,
// and the switch of their explicit AVX-512 loops.
#pragma once
#include <pybind11/numpy.h>

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

#include "pack.hpp"  // alloc_bytes: the module's one allocation policy

namespace emu_host {

// Whether the explicit AVX-512 loops run (ozaki2_host.cpp's residues and CRT,
// ozaki2_stats_host.cpp's suspect scans): where the CPU has AVX-512 F, DQ, CD, BW and VL (every
// AMX CPU), unless switched off by _amx.host_avx512(False), with which the tests check the
// portable loops against them on one CPU.
inline bool cpu_has_avx512() {
  __builtin_cpu_init();  // may run in a static initializer, before libgcc's own
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
inline std::atomic<bool>& avx512_switch() {
  static std::atomic<bool> on{cpu_has_avx512()};
  return on;
}
inline bool avx512_loops() { return avx512_switch().load(std::memory_order_relaxed); }

// Element strides (rows, columns) of a 2-D matrix of `elem`-byte entries (float64: 8, float32:
// 4) whose dimensions fit int; byte strides that are not whole elements (fields of a structured
// array) are refused rather than misread. `who` starts the messages.
inline std::pair<long long, long long> matrix_strides(const pybind11::array& x, const char* who,
                                                      long long elem = 8) {
  const std::string w(who);
  if (x.ndim() != 2) throw std::invalid_argument(w + ": x must be 2-D");
  if (x.shape(0) > std::numeric_limits<int>::max() || x.shape(1) > std::numeric_limits<int>::max())
    throw std::invalid_argument(w + ": dimension too large (> 2**31 - 1)");
  if (x.strides(0) % elem != 0 || x.strides(1) % elem != 0)
    throw std::invalid_argument(w + ": strides must be multiples of " + std::to_string(elem) +
                                " bytes (a stride that is not a multiple of " +
                                std::to_string(elem) + " bytes is not a whole element)");
  return {x.strides(0) / elem, x.strides(1) / elem};
}

// A 2-D operand as the CPU stages read it: float64 or float32 entries (float32 operands are
// read as they are, each entry widened to float64 exactly in registers), and element strides.
template <class T>
struct Operand {
  const T* p = nullptr;
  long long sr = 0, sc = 0;
};

// Whether x is a float32 array (its stages then take Operand<float>; anything else is converted
// to float64 by pybind11, as before).
inline bool is_float32(const pybind11::array& x) {
  return pybind11::isinstance<pybind11::array_t<float>>(x);
}

// A 2-D float64 (T = double) or float32 (T = float) operand part, kept alive by `keep`
// (pybind11 converts what is not a T array).
template <class T>
Operand<T> operand_part(const pybind11::object& x, const char* who, pybind11::array_t<T>& keep) {
  keep = x.cast<pybind11::array_t<T>>();
  const auto [sr, sc] = matrix_strides(keep, who, sizeof(T));
  return {keep.data(), sr, sc};
}

// The imaginary part beside re (its shape; beside a float32 re, float32 too: a float64 one is
// refused rather than narrowed), or none (null data).
template <class T>
Operand<T> imag_part(const pybind11::object& im, const pybind11::array& re, const char* who,
                     pybind11::array_t<T>& keep) {
  if (im.is_none()) return {};
  if (std::is_same_v<T, float> && !is_float32(im.cast<pybind11::array>()))
    throw std::invalid_argument(std::string(who) + ": im must have re's dtype (float32)");
  const Operand<T> out = operand_part<T>(im, who, keep);
  if (keep.ndim() != 2 || keep.shape(0) != re.shape(0) || keep.shape(1) != re.shape(1))
    throw std::invalid_argument(std::string(who) + ": im must have re's shape");
  return out;
}

constexpr int kLineBlock = 64;  // lines per task when the lines run across memory

// x is R lines of C entries with element strides (sr, sc). f(r, c, value) for every entry (as a
// float64: float32 entries widened exactly), in
// an order that reads memory contiguously; lines are split among threads (no two threads share
// a line), in blocks of kLineBlock when the lines run across memory.
template <class T, class F>
inline void for_entries(const T* x, long long sr, long long sc, int R, int C, F&& f) {
  if (std::llabs(sr) < std::llabs(sc)) {
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < R; r0 += kLineBlock) {
      const int r1 = std::min(R, r0 + kLineBlock);
      for (int c = 0; c < C; ++c)
        for (int r = r0; r < r1; ++r) f(r, c, static_cast<double>(x[r * sr + c * sc]));
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) f(r, c, static_cast<double>(x[r * sr + c * sc]));
}

// 2**p for p in [-1074, 1023] (subnormal powers included), exactly.
inline double pow2(int p) {
  const std::uint64_t u = p >= -1022 ? static_cast<std::uint64_t>(p + 1023) << 52
                                     : std::uint64_t(1) << (p + 1074);
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// Round to nearest even integer (|y| < 2**51; default rounding mode, no FMA contraction): two
// additions, which vectorize where std::nearbyint and std::floor do not (-ftrapping-math).
// kRneMagic = 1.5 * 2**52: the vector forms (ozaki2_host.cpp's rne8) add the same constant.
constexpr double kRneMagic = 6755399441055744.0;
inline double rne(double y) { return (y + kRneMagic) - kRneMagic; }

// An uninitialised C-contiguous array of `shape`, owned by the array, in pack.hpp's
// alloc_bytes memory: 64-byte aligned, from 2 MiB on 2 MiB aligned and advised for transparent
// huge pages (Linux "madvise" mode), so that first touches fault 2 MiB at a time instead of
// 4 KiB: most of the time of writing gigabytes of planes or results once.
template <class T>
pybind11::array_t<T> huge_page_array(const std::vector<pybind11::ssize_t>& shape) {
  std::size_t count = 1;
  for (auto d : shape) count *= static_cast<std::size_t>(d);
  void* p = emulinalg::amx::alloc_bytes(std::max<std::size_t>(1, count * sizeof(T)));
  pybind11::capsule owner(p, [](void* q) { std::free(q); });
  return pybind11::array_t<T>(shape, static_cast<T*>(p), owner);
}

}  // namespace emu_host
