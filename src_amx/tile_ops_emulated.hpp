// Scalar C++ model of the AMX tile registers and of the five tile instructions the kernels use
// (LDTILECFG/TILERELEASE, TILEZERO, TILELOADD(T1), TILESTORED, TDPBSSD, TDPBF16PS), with the same
// TileOps interface as AmxTileOps (tile_ops_amx.hpp). The GEMM template in kernel.hpp runs on
// either, so the packing, padding, blocking and indexing that the AMX build executes are the
// ones tested here, on machines without AMX (and on CI).
//
// Semantics follow the "Operation" sections of the Intel SDM (Vol. 2B):
// - TILELOADD/TILESTORED move rows[t] rows of colsb[t] bytes at base + row * stride; a load
//   zeroes the bytes of the tile beyond the configured rows/colsb.
// - TDPBSSD: C.int32[m][n] += sum_{k < A.colsb/4} sum_{i<4} A.int8[m][4k+i] * B.int8[k][4n+i],
//   wrapping modulo 2^32 (no saturation).
// - TDPBF16PS: per row m, two FP32 partial sums per output column (even and odd BF16 lanes)
//   accumulate FMAs over k with round-to-nearest-even, inputs DAZ, outputs FTZ; then the two
//   partial sums are added and accumulated into C.fp32[m][n]. The SDM's pseudo-code gives this
//   order; whether hardware rounds identically is checked on the AMX machine, so the tests
//   compare BF16 results against float64 with an FP32 tolerance, not bit for bit.
// An operation on tiles whose configured shapes do not match the instruction's rules (the #UD
// cases of the SDM) clears ok() instead of computing, so shape bugs show up as test failures.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tile_config.hpp"
#include "widen.hpp"

namespace emulinalg::amx {

class EmulatedTileOps {
public:
    void configure(const TileConfig& cfg) {
        cfg_ = cfg;
        std::memset(tiles_, 0, sizeof tiles_);  // LDTILECFG zeroes the tile data
        ok_ = ok_ && cfg.palette_id == 1;
        for (int t = 0; t < kNumTiles; ++t) {
            ok_ = ok_ && cfg.rows[t] <= kTileRows && cfg.colsb[t] <= kTileBytes;
        }
    }
    void release() { std::memset(tiles_, 0, sizeof tiles_); }
    bool ok() const { return ok_; }
    // int8 out = int32 scratch block mod m, symmetric (widen.hpp)
    static void mod_reduce(const std::int32_t* s, std::int64_t rows, std::int64_t cols, int m,
                           std::int8_t* out, std::int64_t ldo) {
        mod_reduce_scalar(s, rows, cols, m, out, ldo);
    }
    // C (float64) += a 32 x 32 FP32 scratch block (widen.hpp)
    static void widen_add(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                          std::int64_t cols, bool assign) {
        widen_add_scalar(c, ldc, s, rows, cols, assign);
    }
    void fence() {}  // the model's loads are ordinary reads

    template <int T>
    void zero() {
        std::memset(tiles_[T], 0, kTileSize);
    }

    template <int T>
    void load(const void* base, std::int64_t stride) {
        const auto* src = static_cast<const std::uint8_t*>(base);
        std::memset(tiles_[T], 0, kTileSize);
        for (int r = 0; r < cfg_.rows[T]; ++r) {
            std::memcpy(tiles_[T][r], src + r * stride, cfg_.colsb[T]);
        }
    }

    // TILELOADDT1: a TILELOADD with a cache hint; the same data movement.
    template <int T>
    void load_stream(const void* base, std::int64_t stride) {
        load<T>(base, stride);
    }

    template <int T>
    void store(void* base, std::int64_t stride) const {
        auto* dst = static_cast<std::uint8_t*>(base);
        for (int r = 0; r < cfg_.rows[T]; ++r) {
            std::memcpy(dst + r * stride, tiles_[T][r], cfg_.colsb[T]);
        }
    }

    template <int C, int A, int B>
    void dpbssd() {
        if (!shapes_ok(C, A, B)) return;
        const int rows = cfg_.rows[C], kd = cfg_.colsb[A] / 4, nd = cfg_.colsb[C] / 4;
        for (int m = 0; m < rows; ++m) {
            std::uint32_t acc[kTileBytes / 4];  // unsigned: wrap-around is defined behaviour
            std::memcpy(acc, tiles_[C][m], sizeof acc);
            const auto* a = reinterpret_cast<const std::int8_t*>(tiles_[A][m]);
            for (int k = 0; k < kd; ++k) {
                const auto* b = reinterpret_cast<const std::int8_t*>(tiles_[B][k]);
                for (int n = 0; n < nd; ++n) {
                    std::int32_t dot = 0;  // |dot| <= 4 * 2^14: cannot overflow
                    for (int i = 0; i < 4; ++i) {
                        dot += std::int32_t(a[4 * k + i]) * std::int32_t(b[4 * n + i]);
                    }
                    acc[n] += static_cast<std::uint32_t>(dot);
                }
            }
            std::memcpy(tiles_[C][m], acc, sizeof acc);
        }
    }

    template <int C, int A, int B>
    void dpbf16ps() {
        if (!shapes_ok(C, A, B)) return;
        const int rows = cfg_.rows[C], kd = cfg_.colsb[A] / 4, nd = cfg_.colsb[C] / 4;
        for (int m = 0; m < rows; ++m) {
            float acc[kTileBytes / 4];
            std::memcpy(acc, tiles_[C][m], sizeof acc);
            std::uint16_t a[kTileBytes / 2];
            std::memcpy(a, tiles_[A][m], sizeof a);
            float part[kTileBytes / 2] = {};  // even / odd lane partial sums per column
            for (int k = 0; k < kd; ++k) {
                std::uint16_t b[kTileBytes / 2];
                std::memcpy(b, tiles_[B][k], sizeof b);
                for (int n = 0; n < nd; ++n) {
                    for (int i = 0; i < 2; ++i) {
                        part[2 * n + i] = ftz(std::fma(bf16_daz(a[2 * k + i]),
                                                       bf16_daz(b[2 * n + i]), part[2 * n + i]));
                    }
                }
            }
            for (int n = 0; n < nd; ++n) {
                acc[n] = ftz(acc[n] + ftz(part[2 * n] + part[2 * n + 1]));
            }
            std::memcpy(tiles_[C][m], acc, sizeof acc);
        }
    }

private:
    // The SDM's #UD conditions for the tile dot products.
    bool shapes_ok(int c, int a, int b) {
        const bool good = cfg_.rows[c] == cfg_.rows[a] && cfg_.colsb[c] == cfg_.colsb[b] &&
                          cfg_.colsb[a] == 4 * cfg_.rows[b] && cfg_.colsb[a] % 4 == 0 &&
                          cfg_.colsb[c] % 4 == 0 && cfg_.rows[c] > 0;
        ok_ = ok_ && good;
        return good;
    }

    static float bf16_daz(std::uint16_t h) {
        std::uint32_t u = std::uint32_t(h) << 16;
        if ((u & 0x7f800000u) == 0) u &= 0x80000000u;  // denormal input -> signed zero
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }

    static float ftz(float x) {
        return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
    }

    alignas(64) std::uint8_t tiles_[kNumTiles][kTileRows][kTileBytes];
    TileConfig cfg_{};
    bool ok_ = true;
};

}  // namespace emulinalg::amx
