// The vector epilogues of the tile GEMMs on a 32 x 32 scratch block (rows x cols of it); the
// scalar versions serve the tile model, the AVX-512F ones (widen_avx512.cpp) the AMX kernels.
//   widen_add: the widened slice products' addition into a float64 C:
//     C[r][t] = (assign ? 0.0 : C[r][t]) + double(S[r][t]).
//   mod_reduce: Scheme II's reduction of an int32 block modulo m (2 <= m <= 256) into int8:
//     out[r][t] = symmetric residue of S[r][t] in [-(m / 2), (m - 1) / 2].
#pragma once

#include <cstdint>

namespace emulinalg::amx {

void widen_add_avx512(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                      std::int64_t cols, bool assign);

void mod_reduce_avx512(const std::int32_t* s, std::int64_t rows, std::int64_t cols, int m,
                       std::int8_t* out, std::int64_t ldo);

inline void mod_reduce_scalar(const std::int32_t* s, std::int64_t rows, std::int64_t cols, int m,
                              std::int8_t* out, std::int64_t ldo) {
    for (std::int64_t r = 0; r < rows; ++r, s += 32, out += ldo) {
        for (std::int64_t t = 0; t < cols; ++t) {
            int u = s[t] % m;
            u += u < 0 ? m : 0;
            out[t] = static_cast<std::int8_t>(u > (m - 1) / 2 ? u - m : u);
        }
    }
}

inline void widen_add_scalar(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                             std::int64_t cols, bool assign) {
    for (std::int64_t r = 0; r < rows; ++r, c += ldc, s += 32) {
        for (std::int64_t t = 0; t < cols; ++t) c[t] = (assign ? 0.0 : c[t]) + double(s[t]);
    }
}

}  // namespace emulinalg::amx
