// The tile GEMMs' vector epilogues with AVX-512F (widen.hpp): the widened BF16 slice products'
// per-chunk addition (kernel.hpp, widen_block) and Scheme II's reduction modulo m (acc_block).
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

// q = floor(t / m) from float64: |t| < 2**31, so t * (1/m) is within 2**-21 of t / m, whose
// fraction is 0 or at least 1/m >= 2**-8 away from an integer: q is exact or, when m divides t,
// one less, so u = t - q m lies in [0, m] (m maps to 0 below with the symmetric step).
void mod_reduce_avx512(const std::int32_t* s, std::int64_t rows, std::int64_t cols, int m,
                       std::int8_t* out, std::int64_t ldo) {
    const __m512d md = _mm512_set1_pd(m), inv = _mm512_set1_pd(1.0 / m);
    const __m512d half = _mm512_set1_pd((m - 1) / 2);
    for (std::int64_t r = 0; r < rows; ++r, s += 32, out += ldo) {
        for (std::int64_t t = 0; t < cols; t += 8) {
            const std::int64_t left = cols - t;
            const __mmask8 mask = left >= 8 ? __mmask8(0xFF) : __mmask8((1u << left) - 1);
            const __m512d x = _mm512_cvtepi32_pd(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(s + t)));  // scratch rows are full
            const __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(x, inv),
                                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            __m512d u = _mm512_sub_pd(x, _mm512_mul_pd(q, md));  // exact: |q m| < 2**32
            u = _mm512_mask_sub_pd(u, _mm512_cmp_pd_mask(u, half, _CMP_GT_OQ), u, md);
            const __m512i w = _mm512_castsi256_si512(_mm512_cvtpd_epi32(u));  // 8 int32 below
            _mm512_mask_cvtepi32_storeu_epi8(out + t, mask, w);
        }
    }
}

}  // namespace emulinalg::amx
