// The widened slice products' addition of a 32 x 32 FP32 scratch block into a float64 C:
// C[r][t] = (assign ? 0.0 : C[r][t]) + double(S[r][t]) for r < rows, t < cols. The scalar
// version serves the tile model; the AVX-512F one (widen_avx512.cpp) the AMX kernels.
#pragma once

#include <cstdint>

namespace emulinalg::amx {

void widen_add_avx512(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                      std::int64_t cols, bool assign);

inline void widen_add_scalar(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                             std::int64_t cols, bool assign) {
    for (std::int64_t r = 0; r < rows; ++r, c += ldc, s += 32) {
        for (std::int64_t t = 0; t < cols; ++t) c[t] = (assign ? 0.0 : c[t]) + double(s[t]);
    }
}

}  // namespace emulinalg::amx
