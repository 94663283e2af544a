// C (float64, row stride ldc) += a 32 x 32 FP32 scratch block (rows x cols of it), with
// AVX-512F: the widened BF16 slice products' per-chunk addition (kernel.hpp, widen_block).
// Its own translation unit, the only one compiled with -mavx512f, and linked only next to
// gemm_amx.cpp: every AMX CPU has AVX-512F, and no inline function shared with the tile-model
// objects is compiled here (so the linker cannot pick an AVX-512 copy for them).
#include <immintrin.h>

#include <cstdint>

#include "widen.hpp"

namespace emulinalg::amx {

void widen_add_avx512(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                      std::int64_t cols, bool assign) {
    const __m512d zero = _mm512_setzero_pd();
    for (std::int64_t r = 0; r < rows; ++r, c += ldc, s += 32) {
        for (std::int64_t t = 0; t < cols; t += 8) {
            const std::int64_t left = cols - t;
            const __mmask8 mask = left >= 8 ? __mmask8(0xFF) : __mmask8((1u << left) - 1);
            const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(s + t));  // scratch rows are full
            const __m512d old = assign ? zero : _mm512_maskz_loadu_pd(mask, c + t);
            _mm512_mask_storeu_pd(c + t, mask, _mm512_add_pd(old, x));  // 0.0 + x when assigning
        }
    }
}

}  // namespace emulinalg::amx
