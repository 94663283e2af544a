// Loops of the CPU stages (ozaki2_host.cpp, ozaki2_stats_host.cpp) over a strided matrix.
#pragma once
#include <algorithm>
#include <cstdlib>

namespace emu_host {

constexpr int kLineBlock = 64;  // lines per task when the lines run across memory

// x is R lines of C entries with element strides (sr, sc). f(r, c, value) for every entry, in
// an order that reads memory contiguously; lines are split among threads (no two threads share
// a line), in blocks of kLineBlock when the lines run across memory.
template <class F>
inline void for_entries(const double* x, long long sr, long long sc, int R, int C, F&& f) {
  if (std::llabs(sr) < std::llabs(sc)) {
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < R; r0 += kLineBlock) {
      const int r1 = std::min(R, r0 + kLineBlock);
      for (int c = 0; c < C; ++c)
        for (int r = r0; r < r1; ++r) f(r, c, x[r * sr + c * sc]);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) f(r, c, x[r * sr + c * sc]);
}

}  // namespace emu_host
